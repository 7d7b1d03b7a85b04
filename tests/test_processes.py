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
