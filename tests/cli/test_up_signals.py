"""``kloom up`` stopped by SIGTERM or SIGINT stops its worker first, and kills one that will not
go: a Celery worker whose pool process died under the same signal stayed in its warm shutdown
after ``kloom up`` had exited, orphaned (seen in the test suite's ``kloom up`` test)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: ``kloom up``'s supervision around a worker that ignores SIGTERM (the real supervisor and the
#: real handlers; the worker stands for one stuck in its warm shutdown).
SCRIPT = """
import sys, time
from kloom.settings import Settings
from kloom.cli.service_cmd import _stop_worker_on_signals
from services.worker.supervisor import WorkerSupervisor

stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
supervisor = WorkerSupervisor([sys.executable, "-c", stubborn], {}, Settings(data_dir=sys.argv[1]))
print(supervisor.start(), flush=True)
_stop_worker_on_signals(supervisor, timeout_s=1.0)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_stopping_kloom_up_stops_a_worker_that_will_not_go(tmp_path, sig):
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    worker = None
    try:
        worker = int(proc.stdout.readline())
        time.sleep(1.0)  # the worker has set its signal handling
        assert _alive(worker)
        proc.send_signal(sig)
        assert proc.wait(20) == 128 + sig
        deadline = time.monotonic() + 5
        while _alive(worker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(worker), "the worker outlived kloom up"
    finally:
        proc.kill()
        if worker is not None and _alive(worker):
            os.kill(worker, signal.SIGKILL)
