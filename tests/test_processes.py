"""kloom.processes: the CPU time the evaluator's stall check reads as progress."""

from __future__ import annotations

import subprocess
import sys
import time

from kloom.processes import process_cpu_seconds

#: A parent that works only through children, each busy for a moment and then reaped: what a
#: rank compiling with inductor on a CPU does (one C++ compiler run per kernel).
_PARENT = """
import subprocess, sys
busy = "import time\\nend = time.process_time() + 0.4\\nwhile time.process_time() < end: pass"
for _ in range(6):
    subprocess.run([sys.executable, "-c", busy], check=True)
sys.stdin.read()
"""


def test_cpu_time_of_reaped_children_counts_so_work_through_children_is_progress():
    proc = subprocess.Popen([sys.executable, "-c", _PARENT], stdin=subprocess.PIPE)
    try:
        seen, deadline = [], time.monotonic() + 60
        while time.monotonic() < deadline:
            seen.append(process_cpu_seconds(proc.pid))
            if seen[-1] >= 6 * 0.4:
                break
            time.sleep(0.05)
        # The parent itself barely runs; its children's 2.4 s are counted once each is reaped,
        # and the sum never goes back (a stall check compares it with its last value).
        assert seen[-1] >= 6 * 0.4, seen[-5:]
        assert all(b >= a for a, b in zip(seen, seen[1:]))
    finally:
        proc.stdin.close()
        proc.wait(10)
    assert process_cpu_seconds(proc.pid) == 0.0  # gone


def _ranks(tmp_path, code_of_rank: str, world: int, **kwargs):
    """run_ranks over ``world`` tiny processes running ``code_of_rank`` (``RANK`` is set)."""
    from kloom.processes import run_ranks

    logs = [open(tmp_path / f"r{r}.log", "wb") for r in range(world)]
    try:
        return run_ranks(lambda r: [sys.executable, "-c", f"RANK = {r}\n" + code_of_rank], world, env=lambda r: None,
                         cwd=tmp_path, logs=logs.__getitem__, **kwargs)
    finally:
        for log in logs:
            log.close()


def test_run_ranks_reports_each_ranks_exit(tmp_path):
    done = _ranks(tmp_path, "import sys; print('rank', RANK); sys.exit(0)", 3, timeout_s=60)
    assert done.ok and done.codes == [0, 0, 0] and not done.timed_out
    assert (tmp_path / "r2.log").read_text().strip() == "rank 2"


def test_a_failed_rank_ends_the_others_after_the_grace(tmp_path):
    started = time.monotonic()
    done = _ranks(tmp_path, "import sys, time\nif RANK == 1: sys.exit(3)\ntime.sleep(60)", 3, timeout_s=60, grace_s=0.5)
    assert time.monotonic() - started < 20, "the ranks left waiting were not ended after the grace"
    assert not done.ok and not done.timed_out
    assert done.failed == [1] and done.codes[1] == 3 and done.codes[0] is None and done.codes[2] is None


def test_past_the_timeout_every_rank_is_killed(tmp_path):
    started = time.monotonic()
    done = _ranks(tmp_path, "import time; time.sleep(60)", 2, timeout_s=1.0)
    assert time.monotonic() - started < 20
    assert done.timed_out and not done.ok and done.codes == [None, None] and done.failed == []
