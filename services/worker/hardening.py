"""Keeps the service's own processes out of reach of the code they run.

Workload and candidate code runs in the evaluator's rank processes, which may run as the same
user as the worker (always, in the unprivileged container). Such a process can read the memory
and ``/proc/<pid>/environ`` of any dumpable process of that user, and the worker's and the API's
environments hold the database URL, the admin key and LLM credentials. A non-dumpable process
is readable only with CAP_SYS_PTRACE, which ranks never have.
"""

from __future__ import annotations

import ctypes
import logging
import sys

log = logging.getLogger(__name__)

_PR_SET_DUMPABLE = 4


def protect_process() -> bool:
    """Make this process (and the children it forks from now on) non-dumpable; False where the
    platform has no ``prctl``."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_DUMPABLE, ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
        log.warning("could not make this process non-dumpable (errno %d)", ctypes.get_errno())
        return False
    return True
