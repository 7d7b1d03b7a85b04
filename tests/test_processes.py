"""kloom.processes: starting a rank process, ending it with what it started, one-shot launches of N ranks, and the CPU time the evaluator's stall check reads as progress."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

from kloom.processes import alive, end_tree, process_cpu_seconds, reap, run_ranks, start_process

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


def test_start_process_gives_no_stdin_one_log_the_env_asked_and_a_session_of_its_own(tmp_path):
    code = ("import os, sys\n"
            "print('stdin', repr(sys.stdin.read()), flush=True)\n"
            "print('err', file=sys.stderr, flush=True)\n"
            "print('env', sorted(k for k in os.environ if k.startswith('KLOOM_T')), flush=True)\n"
            "print('session', os.getsid(0) == os.getpid(), 'group', os.getpgid(0) == os.getpid(), flush=True)\n"
            "os.write(int(sys.argv[1]), b'fd')\n")
    read, write = os.pipe()
    with open(tmp_path / "log", "wb") as log:
        proc = start_process([sys.executable, "-c", code, str(write)], env={"KLOOM_T1": "1", "PATH": os.environ["PATH"]},
                             cwd=tmp_path, log=log, new_session=True, pass_fds=(write,))
    os.close(write)
    reap([proc], 30)
    assert proc.returncode == 0, (tmp_path / "log").read_text()
    assert os.read(read, 2) == b"fd"
    os.close(read)
    lines = (tmp_path / "log").read_text().splitlines()
    assert lines == ["stdin ''", "err", "env ['KLOOM_T1']", "session True group True"]
    with open(tmp_path / "log2", "wb") as log:
        plain = start_process([sys.executable, "-c", "import os; print(os.getpgid(0) == os.getpid())"], env=None, cwd=tmp_path, log=log)
    reap([plain], 30)
    assert (tmp_path / "log2").read_text().strip() == "False"


def test_end_tree_kills_what_the_process_started_too(tmp_path):
    script = "import subprocess, time; p = subprocess.Popen(['sleep', '300']); print(p.pid, flush=True); time.sleep(300)"
    with open(tmp_path / "log", "wb") as log:
        proc = start_process([sys.executable, "-c", script], env=None, cwd=tmp_path, log=log, new_session=True)
    deadline = time.monotonic() + 30
    while not (tmp_path / "log").read_text().strip() and time.monotonic() < deadline:
        time.sleep(0.05)
    grandchild = int((tmp_path / "log").read_text().split()[0])
    assert alive(grandchild)
    end_tree(proc)
    assert proc.returncode is not None
    # SIGKILL is delivered asynchronously: on a loaded machine the killed process may still show
    # as running for a moment after the kill returns.
    deadline = time.monotonic() + 10
    while alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(grandchild)


def test_no_product_module_but_processes_starts_a_rank_of_its_own():
    """Every rank process (and every rank's launcher) starts through ``start_process``; the two
    other processes the product starts are not ranks: the supervised worker processes of
    ``kloom up`` and the NVML sampler's helper."""
    root = Path(__file__).resolve().parents[1]
    not_ranks = {"kloom/processes.py", "services/worker/supervisor.py", "services/worker/profiler/nvml.py"}
    starting = sorted(
        str(p.relative_to(root)) for top in ("agents", "kb", "kloom", "services", "kernels") for p in (root / top).rglob("*.py")
        if "__pycache__" not in p.parts and not p.name.startswith("test_") and re.search(r"\bPopen\(", p.read_text())
    )
    assert set(starting) <= not_ranks, f"modules that start processes themselves: {sorted(set(starting) - not_ranks)}"
    assert "kloom/processes.py" in starting
