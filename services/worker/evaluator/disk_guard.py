"""What a rank pool's processes write to the machine's storage, bounded.

A rank (a candidate's, or an uploaded workload's: both untrusted) can write in three places of its
view: its pool's private directory (its working directory, where its output goes too), the
compiler caches, and the pool's shared-memory directory (RAM). None of them has a size of its own,
so a rank that prints in a loop or writes files could fill the disk the service's database lives
on, or the machine's memory, before any per-call deadline ends it. A thread of the pool process
walks those places about once a second and, when what they hold has grown by more than the limit since
the pool started (bytes allocated, so a sparse file costs what it holds), or by more files than
the limit, kills the pool's ranks and says why; the pool's directories go with the pool, the
caches are emptied (compiling again rebuilds them).
"""

from __future__ import annotations

import os
import shutil
import stat
import threading
import time
from dataclasses import dataclass
from typing import Callable

#: Seconds between two walks, at least; and at least this many times the last walk's time, so
#: that a large compiler cache costs the pool process a twentieth of a core at most.
EVERY_S = 1.0
WALK_SHARE = 20.0


@dataclass(frozen=True)
class Usage:
    bytes: int
    files: int
    #: Directories under the paths that could not be read, even after making them readable to
    #: their owner (a rank that shares the pool's user could hide what it writes there).
    unreadable: tuple[str, ...] = ()


def usage(paths: list[str], max_files: int) -> Usage:
    """Bytes allocated and entries under ``paths`` (symbolic links not followed; the walk stops
    past ``max_files`` entries, which is over any limit anyway)."""
    total, files, unreadable = 0, 0, []
    stack = [p for p in paths if p]
    while stack and files <= max_files:
        path = stack.pop()
        entries = _scan(path)
        if entries is None:
            unreadable.append(path)
            continue
        with entries:
            for entry in entries:
                files += 1
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                total += st.st_blocks * 512
                if stat.S_ISDIR(st.st_mode):
                    stack.append(entry.path)
                if files > max_files:
                    break
    return Usage(total, files, tuple(unreadable))


def _scan(path: str):
    """``os.scandir(path)``; where permission is refused, once more after giving the owner read
    and search rights back; None where it still cannot be read. A directory gone since it was
    listed (or a watched place not made yet) is empty."""
    for attempt in range(2):
        try:
            return os.scandir(path)
        except (FileNotFoundError, NotADirectoryError):
            return _Empty()
        except PermissionError:
            if attempt == 0:
                try:
                    os.chmod(path, stat.S_IMODE(os.lstat(path).st_mode) | stat.S_IRWXU)
                except OSError:
                    return None
        except OSError:
            return None
    return None


class _Empty:
    """An empty ``os.scandir`` result."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __iter__(self):
        return iter(())


class DiskGuard:
    """Watches ``paths`` from a thread; ``on_over`` (with the reason) runs once, from that thread,
    when they grew past ``max_bytes`` or ``max_files`` since ``start``. ``caches``: the paths
    among them emptied then (those that outlive the pool)."""

    def __init__(self, paths: list[str], max_bytes: int, max_files: int, on_over: Callable[[str], None],
                 caches: list[str] | None = None, every_s: float = EVERY_S):
        self.paths = [p for p in paths if p]
        self.max_bytes, self.max_files = max_bytes, max_files
        self.on_over = on_over
        self.caches = [p for p in (caches or []) if p]
        self.every_s = every_s
        self.reason = ""
        self._base = Usage(0, 0)
        self._stop = threading.Event()
        self._based = threading.Event()  # the base is taken
        self._thread: threading.Thread | None = None

    def start(self, name: str = "kloom-disk-guard") -> None:
        """Watch from a thread, which first takes what the places hold now as the base (off the
        caller's path: a large compiler cache takes a while to walk, and ranks run no workload or
        candidate code before they are admitted, well after)."""
        self._thread = threading.Thread(target=self._watch, name=name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5.0)

    def wait_base(self, timeout_s: float = 10.0) -> bool:
        return self._based.wait(timeout_s)

    def check(self) -> str:
        """One walk now: the reason the writes are over a limit, or ''."""
        now = usage(self.paths, self._walk_bound(self._base.files))
        grew, more = now.bytes - self._base.bytes, now.files - self._base.files
        if self.max_bytes and grew > self.max_bytes:
            return (f"the ranks wrote {grew / 2**20:.0f} MiB to their directories, compiler caches and shared memory "
                    f"(output included); the limit is {self.max_bytes / 2**20:.0f} MiB")
        if self.max_files and more > self.max_files:
            return f"the ranks made more than {self.max_files} files in their directories, compiler caches and shared memory"
        hidden = sorted(set(now.unreadable) - set(self._base.unreadable))
        if hidden:
            return f"the ranks made a directory the evaluator cannot read ({hidden[0]}): what it holds cannot be bounded"
        return ""

    def _walk_bound(self, base_files: int) -> int:
        return base_files + (self.max_files or 1 << 20) + 1

    def _watch(self) -> None:
        self._base = usage(self.paths, self._walk_bound(0))
        self._based.set()
        pause = self.every_s
        while not self._stop.wait(pause):
            began = time.monotonic()
            reason = self.check()
            pause = max(self.every_s, WALK_SHARE * (time.monotonic() - began))
            if reason:
                self.reason = reason
                self.on_over(reason)
                for path in self.caches:
                    _empty(path)
                return


def _empty(path: str) -> None:
    """Remove what ``path`` holds, keeping the directory (a rank's view mounts it)."""
    try:
        entries = list(os.scandir(path))
    except OSError:
        return
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            try:
                os.unlink(entry.path)
            except OSError:
                pass
