"""Cores while blocks are timed (``placement.py``): rank i of both sides on cores of its own,
the judge on another, the rest elsewhere; no placement where the machine lacks the cores."""

import os
import subprocess
import sys

import pytest

from services.worker.evaluator import placement


def test_a_plan_gives_each_rank_and_the_judge_a_core_and_leaves_the_rest():
    where = placement.plan(2, set(range(16)))
    assert where is not None
    assert where.ranks == [{0, 1}, {2, 3}] and where.judge == 4
    assert where.rest == frozenset(range(5, 16))
    tight = placement.plan(4, {3, 5, 7, 9, 11, 13, 17})  # one core a rank where two would leave too few
    assert tight.ranks == [{3}, {5}, {7}, {9}] and tight.judge == 11 and tight.rest == {13, 17}


def test_no_plan_where_too_few_cores_are_left_for_the_rest():
    assert placement.plan(1, {0, 1}) is None  # a CI machine: the spares are stopped there instead
    assert placement.plan(2, {0, 1, 2, 3}) is None
    assert placement.plan(1, {0, 1, 2, 3}) is not None


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs sched_setaffinity")
def test_pin_moves_every_thread_of_a_process_and_skips_the_dead():
    script = "import threading, time\nthreading.Thread(target=time.sleep, args=(30,), daemon=True).start()\nprint('up', flush=True)\ntime.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "up"
        core = min(os.sched_getaffinity(0))
        threads = os.listdir(f"/proc/{child.pid}/task")
        assert len(threads) >= 2
        assert placement.pin([child.pid, 2**22 + 7], {core}) == len(threads)
        assert all(os.sched_getaffinity(int(t)) == {core} for t in threads)
    finally:
        child.kill()
        child.wait()
