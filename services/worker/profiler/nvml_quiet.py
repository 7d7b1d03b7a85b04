"""While a judge on this machine times blocks, NVML sampling elsewhere on the machine waits.

NVML's queries stall the CUDA calls of other processes (on 2xH200 a 20 Hz sampler put 10-30 ms
into timed blocks of both sides, and the clock cross-check rejected correct candidates:
``results/gpu/h200x2-session19/``). The judge samples only between its own blocks; this keeps
everyone else's periodic sampling (a worker's heartbeat, a profile's sampler, another worker's
judge on other GPUs of the same machine) out of the timed spans too. A judge holds a shared
``flock`` on one file per machine and user while it times; a periodic sampler skips a sample when
it cannot take the lock exclusively. Where the lock file cannot be opened, nothing waits.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager


def lock_path() -> str:
    return os.environ.get("KLOOM_NVML_LOCK") or os.path.join(tempfile.gettempdir(), f"kloom-nvml-{os.getuid()}.lock")


#: How long a judge tries for the lock before it times without it (a sampler's probe holds it
#: for an instant; anyone holding it longer must not be able to stall a judge).
TAKE_S = 0.5


def _open() -> int | None:
    try:
        return os.open(lock_path(), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError:
        return None


@contextmanager
def timing_in_progress(take_s: float = TAKE_S) -> Iterator[None]:
    """Held by a judge around its timed blocks (shared: several judges may time at once). Never
    blocks for long: where the lock cannot be had within ``take_s``, the judge times without it."""
    fd = _open()
    try:
        if fd is not None:
            deadline = time.monotonic() + take_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                    break
                except OSError:
                    if time.monotonic() >= deadline:
                        break
                    time.sleep(0.005)
        yield
    finally:
        if fd is not None:
            os.close(fd)  # closing releases the lock


def sampling_allowed() -> bool:
    """No judge on this machine is timing now (a periodic sample may be taken)."""
    fd = _open()
    if fd is None:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
