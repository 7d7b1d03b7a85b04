"""Who sends SIGABRT: runs pytest with SIGABRT blocked in every thread and one thread waiting for
it; a signal sent by another process is printed with the sender's pid and command line (an
abort() of this process's own unblocks the signal first and ends it, as before).

    python3 benchmarks/gpu/abort_sender.py [pytest args]
"""
import os
import signal
import sys
import threading

import pytest


def watch() -> None:
    while True:
        info = signal.sigwaitinfo({signal.SIGABRT})
        try:
            with open(f"/proc/{info.si_pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            cmd = "(gone)"
        print(f"\nSIGABRT from pid {info.si_pid} uid {info.si_uid} code {info.si_code}: {cmd[:500]}", file=sys.stderr, flush=True)


signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGABRT})
threading.Thread(target=watch, daemon=True).start()
print("watching for SIGABRT in", os.getpid(), file=sys.stderr, flush=True)
sys.exit(pytest.main(sys.argv[1:]))
