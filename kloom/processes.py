"""Rank processes: starting one (``start_process``, the one place kloom starts a rank or the
sandbox launcher of one), ending one with everything it started (``kill_tree``, ``reap``), and
reading them as Linux shows them in ``/proc`` (live children and descendants, whether their
threads are stopped, their CPU time); the tail of a rank's log; and the environment every
multi-rank launch forces (NVLink multicast off).

Shared by everything that starts rank processes: the evaluator's warm pools (each rank started
through the sandbox's launcher, ``services/worker/evaluator/sandbox.py``), the profiler's
sandboxed launch, and the one-shot launches (the profiler's ranks inside that sandbox, the
roofline's collective benchmark), which start their N processes and wait for them with
``run_ranks``. The standard library only, so that the profiler's launcher imports nothing else.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO

#: Set in every rank process of every launch: NVLink multicast stays off on shared hosts, where it
#: can take the GPUs out of service (shared/HARDWARE.md).
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def child_pids(pid: int | None = None) -> list[int]:
    """Live child processes of ``pid`` (this process by default)."""
    pid = os.getpid() if pid is None else pid
    children: list[int] = []
    task_dir = f"/proc/{pid}/task"
    try:
        for tid in os.listdir(task_dir):
            try:
                with open(f"{task_dir}/{tid}/children") as fh:
                    children.extend(int(c) for c in fh.read().split())
            except OSError:
                continue
    except OSError:
        return []
    return [child for child in children if alive(child)]


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (not gone, not a zombie)."""
    fields = _stat_fields(f"/proc/{pid}/stat")
    return bool(fields) and fields[0] != "Z"


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid``."""
    found, todo = [], [pid]
    while todo:
        for child in child_pids(todo.pop()):
            if child not in found:
                found.append(child)
                todo.append(child)
    return found


def start_process(argv: list[str], *, env: dict[str, str] | None, cwd: str | os.PathLike, log: IO[bytes] | int,
                  new_session: bool = False, pass_fds: tuple[int, ...] = ()) -> subprocess.Popen:
    """Start ``argv`` as a rank process (or a rank's launcher): no standard input, its output and
    errors both to ``log`` (an open file), with exactly ``env`` (None: this process's), and, with
    ``new_session``, in a session and process group of its own, so that signals for the group
    reach everything it starts. ``pass_fds`` stay open in it (a launcher's status pipe)."""
    return subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=new_session, pass_fds=pass_fds)


def reap(procs: list[subprocess.Popen], wait_s: float = 10.0) -> None:
    """Wait up to ``wait_s`` for each of ``procs`` to exit (once killed), so that none is left a
    zombie; one that does not exit in time is left to the caller's cleanup."""
    for proc in procs:
        try:
            proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            pass


def end_tree(proc: subprocess.Popen, wait_s: float = 10.0) -> None:
    """Kill ``proc`` and everything descended from it (``kill_tree``), and reap it."""
    kill_tree(proc.pid)
    reap([proc], wait_s)


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid``, every process descended from it, and its process group if it leads one."""
    for victim in [*descendants(pid), pid]:
        try:
            os.kill(victim, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def namespace_init(pid: int) -> bool:
    """Whether ``pid`` is the first process (pid 1) of a pid namespace nested below this one's."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("NSpid:"):
                    ids = line.split()[1:]
                    return len(ids) > 1 and ids[-1] == "1"
    except OSError:
        pass
    return False


def wait_exited(pids: list[int], timeout: float) -> bool:
    """Whether every one of ``pids`` exited (gone or a zombie: its memory, files and device
    contexts released) within ``timeout`` seconds."""
    return _wait_all(pids, lambda pid: not alive(pid), timeout, 0.002)


def wait_stopped(pids: list[int], timeout: float) -> bool:
    """Whether every thread of ``pids`` (those still alive) reached a stopped state within
    ``timeout`` seconds."""
    return _wait_all(pids, _all_threads_stopped, timeout, 0.0005)


def _wait_all(pids: list[int], done: Callable[[int], bool], timeout: float, pause: float) -> bool:
    """Whether ``done`` held for every one of ``pids`` within ``timeout`` seconds (polled every
    ``pause`` seconds)."""
    deadline = time.monotonic() + timeout
    pending = list(pids)
    while True:
        pending = [pid for pid in pending if not done(pid)]
        if not pending:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(pause)


def _all_threads_stopped(pid: int) -> bool:
    """True when every thread of ``pid`` is stopped (T, t), gone or a zombie."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return True
    for tid in tids:
        fields = _stat_fields(f"/proc/{pid}/task/{tid}/stat")
        if fields and fields[0] not in ("T", "t", "Z", "X"):
            return False
    return True


def process_cpu_seconds(pid: int) -> float:
    """User and system CPU time of ``pid`` and of the children it has waited for (0 when it is
    gone). The children's part keeps the sum growing when a process works through short-lived
    children (inductor runs the C++ compiler once per kernel): a child's time leaves its own
    ``/proc`` entry when it exits and is counted in its parent's from then on."""
    fields = _stat_fields(f"/proc/{pid}/stat")
    if len(fields) < 15:
        return 0.0
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) / _CLOCK_TICKS


def _stat_fields(path: str) -> list[str]:
    """The fields of a ``/proc/.../stat`` file after the command name (state first), or [] when
    the process or thread is gone. (The command name may hold spaces and parentheses; the fields
    after it do not.)"""
    try:
        with open(path) as fh:
            return fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def exit_description(code: int) -> str:
    """How a process ended, from its return code: ``exit code 1``, ``signal SIGKILL``."""
    if code >= 0:
        return f"exit code {code}"
    try:
        return f"signal {signal.Signals(-code).name}"
    except ValueError:
        return f"signal {-code}"


def log_tail(path: str | os.PathLike, limit: int) -> str:
    """The last ``limit`` bytes of a log file as text ('' when it cannot be read)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - limit))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


@dataclass
class RanksOutcome:
    """How a one-shot launch of rank processes ended."""

    codes: list[int | None]  # per rank: its exit code, None where it was killed
    timed_out: bool

    @property
    def failed(self) -> list[int]:
        """Ranks that exited with an error (killed ones left out)."""
        return [rank for rank, code in enumerate(self.codes) if code not in (None, 0)]

    @property
    def ok(self) -> bool:
        return not self.timed_out and all(code == 0 for code in self.codes)


def run_ranks(argv: Callable[[int], list[str]], world_size: int, *, env: Callable[[int], dict[str, str]], cwd: str | os.PathLike,
              logs: Callable[[int], IO[bytes]], timeout_s: float | None, grace_s: float = 0.0) -> RanksOutcome:
    """Start ``world_size`` processes (``argv(rank)`` with ``env(rank)``, output to ``logs(rank)``)
    and wait for all of them. Once one has failed, the others get ``grace_s`` to finish (a rank
    stuck in a collective with the failed one never would); past ``timeout_s`` every rank is
    killed. Whatever is left at the end is killed with its descendants."""
    procs: list[subprocess.Popen] = []
    timed_out = False
    try:
        for rank in range(world_size):
            procs.append(start_process(argv(rank), env=env(rank), cwd=cwd, log=logs(rank)))
        deadline = time.monotonic() + timeout_s if timeout_s else None
        grace_until: float | None = None
        while True:
            # Every rank polled each time (``any(p.poll() is None ...)`` stops at the first one
            # running, and a failure behind it went unseen until the timeout).
            codes = [p.poll() for p in procs]
            if all(code is not None for code in codes):
                break
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                timed_out = True
                break
            if grace_until is None and any(code not in (None, 0) for code in codes):
                grace_until = now + grace_s
            if grace_until is not None and now >= grace_until:
                break
            time.sleep(0.05)
    finally:
        codes = [p.poll() for p in procs]
        for proc in procs:
            if proc.poll() is None:
                kill_tree(proc.pid)
        reap(procs)
    return RanksOutcome(codes=codes + [None] * (world_size - len(codes)), timed_out=timed_out)
