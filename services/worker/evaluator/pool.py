"""A pool of N rank processes, started once and reused across candidates.

The pool process (the worker, or the CLI) never imports candidate code. It talks to each rank
over an authenticated Unix socket, enforces a deadline on every command, notices a rank that
died, and kills the whole pool (each rank's process group, with anything it forked) when a
rank hangs or crashes, so that the caller never hangs.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from multiprocessing.connection import Connection, Listener, wait
from typing import Any

from kloom.processes import (descendants, exit_description, log_tail, namespace_init, process_cpu_seconds, reap, wait_exited,
                             wait_stopped)

from . import sandbox
from .disk_guard import DiskGuard
from .pool_replies import PoolFailure, Replies
from .protocol import recv_reply, send_command
from .settings import EvalSettings

__all__ = ["PoolFailure", "RankPool", "Replies"]

#: CPU seconds a waiting rank must use to count as making progress (``request(stall_s=...)``).
STALL_CPU_S = 0.05
#: How long ``stop`` waits for every thread of a stopped side to show as stopped.
STOP_WAIT_S = 0.5
#: How long ``kill`` waits for the killed processes to have exited.
KILL_WAIT_S = 1.0

#: After one rank reports an error, how long the others get to answer before they are taken
#: as stuck (typically waiting in a collective for the rank that failed).
ERROR_GRACE_S = 5.0


class RankPool:
    def __init__(self, world_size: int, device: str, settings: EvalSettings, devices: list[int] | None = None, role: str = "reference",
                 interrupt: threading.Event | None = None):
        if role not in ("reference", "candidate"):
            raise ValueError(f"role must be 'reference' or 'candidate', not {role!r}")
        self.role = role
        if device not in ("cpu", "cuda"):
            raise ValueError(f"device must be 'cpu' or 'cuda', not {device!r}")
        self.world_size = world_size
        self.device = device
        self.settings = settings
        self.devices = list(devices) if devices is not None else list(range(world_size))
        if device == "cuda" and len(self.devices) < world_size:
            raise ValueError(f"world size {world_size} needs {world_size} GPUs; {len(self.devices)} given")
        self.procs: list[subprocess.Popen] = []
        self.conns: dict[int, Connection] = {}
        self.workdir: str | None = None
        self.environment: dict[str, Any] = {}
        self.started_at = 0.0
        self.starts = 0
        self.isolation: sandbox.PoolIsolation | None = None
        self.stopped = False
        self._stopped_pids: list[int] = []
        self._listener: Listener | None = None  # while a start is under way
        self._admitting: threading.Thread | None = None  # accepting the begun ranks (``admit``)
        # The last rank's launcher report (rank, pid, its pipe), read by ``finish``: that rank's
        # sandbox sets itself up while the caller goes on (~0.09 s of every spare's begin).
        self._report: tuple[int, int, int] | None = None
        self._accepted: list[Connection] = []
        self._disk: DiskGuard | None = None  # what the ranks write, watched (``disk_guard.py``)
        #: (bytes, dtype name) of the outputs the ranks will project, sent as they are admitted: a
        #: GPU rank loads the projection's kernel for them before it says it joined (``rank_main``),
        #: so that a spare admitted during one evaluation has it for the next (0.5 s in a new process).
        self.warm_outputs: list = []
        #: Set from another thread to end what this pool waits for (a start, a request) at once:
        #: an abort that came while no rank was running yet to be killed.
        self.interrupt = interrupt or threading.Event()

    # Life cycle -------------------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return bool(self.procs) and all(p.poll() is None for p in self.procs)

    @property
    def admitted(self) -> bool:
        """Whether a begun start's ranks may go on to join (``admit``)."""
        return self._admitting is not None

    @property
    def starting(self) -> bool:
        """Whether a start was begun (``begin``) and not yet finished."""
        return self._listener is not None

    def start(self) -> None:
        self.begin()
        self.finish()

    def begin(self) -> None:
        """Launch the ranks without waiting for them to join (``finish`` waits): they import
        torch meanwhile, and wait for ``finish`` to accept them before they touch the device or
        form their process group. From the thread that will use the pool
        (each rank's launcher dies with the thread that started it)."""
        self.kill()
        self.starts += 1
        self.started_at = time.monotonic()
        self.workdir = tempfile.mkdtemp(prefix=f"kloom-pool-{self.role[:3]}-")
        os.chmod(self.workdir, 0o700)
        address = os.path.join(self.workdir, "pool.sock")
        authkey = secrets.token_bytes(32)
        self._listener = Listener(address, family="AF_UNIX", authkey=authkey)
        try:
            self._spawn(address, authkey)
        except BaseException:
            self.kill()
            raise

    def _watch_writes(self, cache: str) -> None:
        s = self.settings
        if not (s.pool_write_bytes or s.pool_write_files):
            return
        places = [self.workdir, cache, self.isolation.shm_dir if self.isolation else ""]
        self._disk = DiskGuard(places, s.pool_write_bytes, s.pool_write_files, self._over_writes, caches=[cache])
        self._disk.start(name=f"kloom-writes-{self.role}")

    def _over_writes(self, reason: str) -> None:
        """From the guard's thread: the ranks wrote past the limit; they die now (the caller's
        request then says why)."""
        self.kill_now()

    def kill_now(self) -> None:
        """SIGKILL every rank's process group (stopped ones too), from any thread; a request in
        flight then finds them dead within a fraction of a second. ``kill`` cleans up after."""
        for proc in list(self.procs):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def finish(self) -> None:
        """Wait until every rank begun by ``begin`` has joined (within ``start_timeout_s`` of it)."""
        listener = self._listener
        if listener is None:
            return
        # A pool begun ahead (a spare) waited, its ranks blocked before their process group, for
        # this call: joining still gets a share of the start's time limit.
        left = self.started_at + self.settings.start_timeout_s - time.monotonic()
        try:
            report, self._report = self._report, None
            if report is not None:
                self._started(*report)
            self._accept(listener, max(1.0, left, min(30.0, self.settings.start_timeout_s)))
            # Ranks that joined long ago (a spare admitted ahead) may have died since.
            self._raise_if_dead(set(range(self.world_size)), "start")
        except BaseException:
            self.kill()
            raise
        listener.close()
        self._listener, self._admitting, self._accepted = None, None, []

    def _spawn(self, address: str, authkey: bytes) -> None:
        """Start every rank through the sandbox's launcher (``sandbox.py``), one at a time: rank 0
        makes the pool's network namespace, which the others join."""
        try:
            self.isolation = sandbox.PoolIsolation(self.settings, self.world_size, self.device, self.workdir, role=self.role)
            self.isolation.prepare(address)
        except (sandbox.SandboxError, OSError) as exc:
            raise PoolFailure("start", f"cannot set up the ranks' sandbox: {exc}") from exc
        cache = self.isolation.cache_dir()
        self._watch_writes(cache)
        for rank in range(self.world_size):
            env = sandbox.rank_environment(
                self.workdir,
                {
                    "KLOOM_ROLE": self.role,
                    "KLOOM_RANK": str(rank),
                    "KLOOM_WORLD_SIZE": str(self.world_size),
                    "KLOOM_DEVICE_KIND": self.device,
                    "KLOOM_DEVICE_INDEX": str(self.devices[rank] if self.device == "cuda" else 0),
                    # Both pools' rank i use the same GPU: the candidate's outputs stay on it.
                    "KLOOM_SHARE_DEVICE": "1" if self.role == "candidate" and self.device == "cuda" and self.settings.share_device_outputs else "0",
                    "KLOOM_POOL_SOCKET": address,
                    "KLOOM_POOL_AUTHKEY": authkey.hex(),
                    "KLOOM_POOL_STORE": os.path.join(self.workdir, "pg.store"),
                    "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // self.world_size))),
                },
                cache_dir=cache,
            )
            argv = [sandbox.python_executable(), "-m", sandbox.RANK_MODULE]
            proc, status_read = self.isolation.spawn(rank, argv, env, self.workdir, self._log_path(rank))
            self.procs.append(proc)
            if rank < self.world_size - 1:  # the next rank joins this one's namespaces: its report first
                self._started(rank, proc.pid, status_read)
            else:
                self._report = (rank, proc.pid, status_read)

    def _started(self, rank: int, pid: int, status_read: int) -> None:
        try:
            self.isolation.started(rank, pid, status_read, self.settings.start_timeout_s)
        except sandbox.SandboxError as exc:
            raise PoolFailure("start", str(exc), rank, self._log_tail(rank)) from exc

    def admit(self) -> None:
        """Let a begun pool's ranks go on as soon as they connect, to initialise the device and
        form their process group, without waiting for them (``finish`` does): accepted in a
        thread of this process."""
        if self._listener is None or self._admitting is not None:
            return
        listener, accepted = self._listener, self._accepted
        admission = {"op": "admitted", "args": {"warm_outputs": [list(x) for x in self.warm_outputs]}}

        def accept_all() -> None:
            for _ in range(self.world_size):
                try:
                    conn = listener.accept()
                    send_command(conn, admission)
                    accepted.append(conn)
                except (OSError, EOFError):
                    return
                except Exception:  # a client that failed authentication
                    return

        self._admitting = threading.Thread(target=accept_all, name=f"kloom-admit-{self.role}", daemon=True)
        self._admitting.start()

    def _accept(self, listener: Listener, timeout: float) -> None:
        self.admit()
        thread, accepted = self._admitting, self._accepted
        assert thread is not None
        deadline = time.monotonic() + timeout
        while thread.is_alive() and time.monotonic() < deadline:
            self._raise_if_interrupted("start")
            self._raise_if_dead(set(range(self.world_size)), "start")
            thread.join(0.1)
        if thread.is_alive():
            listener.close()
            raise PoolFailure("timeout", f"rank processes did not connect within {timeout:.0f} s", log_tail=self._log_tail(0))
        if len(accepted) < self.world_size:  # the accepting ended early: a rank died as it connected
            self._raise_if_dead(set(range(self.world_size)), "start", wait_s=1.0)
            raise PoolFailure("start", f"{self.world_size - len(accepted)} rank process(es) failed to connect", log_tail=self._log_tail(0))
        pending = {id(c): c for c in accepted}
        while pending and time.monotonic() < deadline:
            self._raise_if_interrupted("start")
            for conn in wait(list(pending.values()), timeout=0.2):
                try:
                    hello = recv_reply(conn)
                except (EOFError, OSError, ValueError) as exc:
                    raise PoolFailure("start", f"a rank process failed while starting: {exc}") from exc
                pending.pop(id(conn))
                rank = hello["rank"]
                if not hello.get("ok"):
                    err = hello["error"]
                    raise PoolFailure("start", f"rank {rank} failed to start: {err['message']}", rank, err["traceback"])
                self.conns[rank] = conn
                self.environment = hello.get("environment", {})
            self._raise_if_dead(set(range(self.world_size)) - set(self.conns), "start")
        if pending:
            raise PoolFailure("timeout", f"rank processes did not join the process group within {timeout:.0f} s")

    def close(self, grace_s: float = 5.0) -> None:
        """Ask the ranks to exit, then kill what is left (ranks still starting: at once)."""
        if self.starting:
            self.kill()
            return
        self.resume()
        for conn in self.conns.values():
            try:
                send_command(conn, {"op": "exit"})
            except OSError:
                pass
        deadline = time.monotonic() + grace_s
        for proc in self.procs:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        self.kill()

    def kill(self) -> None:
        """Kill every rank and everything it started, and wait (briefly) until the ranks and
        what they started have exited: a rank in the pool's pid namespace may outlive its
        launcher for a moment, holding its memory and its device context, which the next pool's
        ranks would find still taken. The namespace's reaper, which holds neither, goes last and
        is not waited for (it takes a second or more to tear the namespace down). Remove the
        private directory."""
        doomed = [pid for pid in self.processes() if not namespace_init(pid)] if self.procs else []
        self.stopped = False
        if self._report is not None:
            try:
                os.close(self._report[2])
            except OSError:
                pass
            self._report = None
        if self._disk is not None:
            self._disk.stop()
            self._disk = None
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        for conn in self._accepted:
            conn.close()
        self._admitting, self._accepted = None, []
        if self.isolation is not None:
            # The pool's cgroup holds what left the process groups too.
            self.isolation.release()
            self.isolation = None
        self.kill_now()
        reap(self.procs)
        wait_exited(doomed, KILL_WAIT_S)
        for conn in self.conns.values():
            conn.close()
        self.procs, self.conns = [], {}
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    # Stopping and watching from outside ---------------------------------------------------
    def processes(self, ranks: list[int] | None = None) -> list[int]:
        """The pool's live processes (those of ``ranks`` only, when given): each launcher and its
        descendants, and everything in the pool's cgroup."""
        pids: set[int] = set()
        for rank, proc in enumerate(self.procs):
            if (ranks is None or rank in ranks) and proc.poll() is None:
                pids.add(proc.pid)
                pids.update(descendants(proc.pid))
        if ranks is None and self.isolation is not None and self.isolation.cgroup is not None:
            pids.update(self.isolation.cgroup.pids())
        return sorted(pids)

    def _signal(self, sig: int, pids: list[int]) -> None:
        for proc in self.procs:
            try:
                os.killpg(proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        for pid in pids:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def stop(self) -> float:
        """Stop every process of the pool (SIGSTOP: nothing of it runs until ``resume``); returns
        their CPU time at the stop, to check afterwards (``stopped_cpu_seconds``) that nothing ran."""
        if not self.stopped:
            self._stopped_pids = self.processes()
            self._signal(signal.SIGSTOP, self._stopped_pids)
            self.stopped = True
            # A signal is delivered asynchronously: until every thread shows as stopped, the
            # process may still run (and its CPU time still grow), so wait for it, briefly.
            wait_stopped(self._stopped_pids, STOP_WAIT_S)
        return self.stopped_cpu_seconds()

    def stopped_cpu_seconds(self) -> float:
        """CPU time of the processes found at the last stop (a process started since then was
        started while the pool ran: it is stopped too, by its process group or the next stop)."""
        return sum(process_cpu_seconds(pid) for pid in self._stopped_pids)

    def resume(self) -> None:
        if self.stopped:
            self._signal(signal.SIGCONT, self._stopped_pids)
            self.stopped = False

    def cpu_seconds(self, ranks: list[int] | None = None) -> float:
        """CPU time used so far by the pool's processes (of ``ranks``, when given)."""
        return sum(process_cpu_seconds(pid) for pid in self.processes(ranks))

    # Requests ---------------------------------------------------------------------------------
    def request(self, op: str, args: dict | None = None, *, timeout: float, per_rank: dict[int, dict] | None = None,
                stall_s: float | None = None) -> Replies:
        """Send one command to every rank and gather the replies within ``timeout`` seconds.

        Raises ``PoolFailure`` when a rank dies, or when no rank reported an error and some did
        not answer in time, or (``stall_s``) when the ranks still working used no CPU time for
        ``stall_s`` seconds: a deadlock, which need not wait out a long limit. When a rank reports
        an error and others then stay silent, the silent ones are listed in ``missing`` (they are
        stuck waiting for the failed rank).
        """
        if self.starting:
            self.finish()
        self._raise_if_interrupted(op)
        self._raise_if_over_writes(op)  # ranks the guard killed between two requests: say why
        if not self.alive:
            raise PoolFailure("crashed", f"the {self.role}'s rank pool is not running", role=self.role)
        try:
            return self._request(op, args, timeout, per_rank, stall_s)
        except PoolFailure as failure:
            failure.role = self.role
            raise

    def _request(self, op: str, args: dict | None, timeout: float, per_rank: dict[int, dict] | None, stall_s: float | None) -> Replies:
        self.resume()
        for rank, conn in self.conns.items():
            payload = dict(args or {})
            if per_rank and rank in per_rank:
                payload.update(per_rank[rank])
            send_command(conn, {"op": op, "args": payload})
        replies = Replies()
        started = time.monotonic()
        deadline = started + timeout
        waiting = {conn: rank for rank, conn in self.conns.items()}
        progress = (started, None)  # when the waiting ranks' CPU time last moved, and its value
        while waiting:
            self._raise_if_interrupted(op)
            now = time.monotonic()
            if now >= deadline:
                break
            if stall_s and now - started >= 1.0:
                progress = self._check_stall(progress, sorted(waiting.values()), op, stall_s, now)
            for conn in wait(list(waiting), timeout=min(0.2, deadline - now)):
                rank = waiting.pop(conn)
                try:
                    replies.by_rank[rank] = recv_reply(conn)
                except (EOFError, OSError):
                    self._raise_if_dead({rank}, op, wait_s=2.0)
                    raise PoolFailure("crashed", f"rank {rank} closed its connection during {op}", rank, self._log_tail(rank))
                except ValueError as exc:
                    raise PoolFailure("crashed", f"rank {rank}: {exc}", rank, self._log_tail(rank)) from exc
                if not replies.by_rank[rank].get("ok"):
                    deadline = min(deadline, time.monotonic() + ERROR_GRACE_S)
            self._raise_if_dead(set(waiting.values()), op)
        replies.missing = sorted(waiting.values())
        if replies.missing and not replies.errors():
            ranks = ", ".join(map(str, replies.missing))
            raise PoolFailure(
                "timeout",
                f"rank(s) {ranks} did not finish {op} within {timeout:.0f} s",
                replies.missing[0],
                self._log_tail(replies.missing[0]),
            )
        return replies

    def _check_stall(self, progress, ranks: list[int], op: str, stall_s: float, now: float):
        since, last = progress
        used = self.cpu_seconds(ranks)
        if last is None or used - last > STALL_CPU_S:
            return now, used
        if now - since >= stall_s:
            names = ", ".join(map(str, ranks))
            raise PoolFailure("timeout", f"rank(s) {names} did not finish {op}: no progress (no CPU time used) for "
                              f"{now - since:.0f} s", ranks[0], self._log_tail(ranks[0]))
        return since, last

    # Diagnostics ------------------------------------------------------------------------------
    def _raise_if_interrupted(self, phase: str) -> None:
        if self.interrupt.is_set():
            raise PoolFailure("stopped", f"the {self.role}'s ranks were stopped during {phase}", role=self.role)

    def _raise_if_over_writes(self, phase: str) -> None:
        reason = self._disk.reason if self._disk is not None else ""
        if reason:
            raise PoolFailure("writes", f"the {self.role}'s ranks were stopped during {phase}: {reason}", role=self.role)

    def _raise_if_dead(self, ranks: set[int], phase: str, wait_s: float = 0.0) -> None:
        self._raise_if_over_writes(phase)
        for rank in sorted(ranks):
            proc = self.procs[rank]
            code = proc.poll()
            if code is None and wait_s:
                try:
                    code = proc.wait(wait_s)
                except subprocess.TimeoutExpired:
                    code = None
            if code is not None:
                raise PoolFailure("crashed", f"rank {rank} died during {phase} ({exit_description(code)})", rank, self._log_tail(rank))

    def _log_path(self, rank: int) -> str:
        return os.path.join(self.workdir or tempfile.gettempdir(), f"rank{rank}.log")

    def _log_tail(self, rank: int, limit: int = 4000) -> str:
        return log_tail(self._log_path(rank), limit)

