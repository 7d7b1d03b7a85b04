"""The pool's side of the fork server (``fork_server.py``): starts one server per kind of rank
environment, asks it for ranks, and gives the pool each forked rank's launcher as a
``ForkedProcess``, which answers as the ``subprocess.Popen`` of an exec'd launcher would
(``pid``, ``poll``, ``wait``, ``returncode``), its exit status relayed by the server.

A server is started with a rank's environment less what differs between pools (their
directories, keys, ranks and thread counts), which each child takes on after the fork: ranks
whose environments differ in anything else (a variable a library reads as it is imported) get a
server of their own. A server that died is started again at the next request; one that could not
start, or that is not single-threaded, is reported (``ForkUnavailable``) and the pool starts its
ranks as new interpreters.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time

from kloom.processes import alive, end_tree, log_tail, start_process

from .sandbox_env import python_executable

#: What the server sends on a child's socket: its pid once forked, its wait status once reaped.
PID = struct.Struct("!q")
STATUS = struct.Struct("!i")
#: The length of a request (its JSON follows), sent with the child's log and status pipe.
LENGTH = struct.Struct("!I")
#: The server's first message to its client: its pid and how many threads it has.
READY = struct.Struct("!qi")

#: Set for each pool in its ranks' environments, taken on by a forked child; every other
#: variable is the server's own.
PER_POOL = ("HOME", "TMPDIR", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TORCH_EXTENSIONS_DIR", "OMP_NUM_THREADS")
PER_POOL_PREFIX = "KLOOM_"
#: Servers kept at once (each holds a process with torch imported, ~0.4 GB). Only a server
#: whose forked ranks have all ended is closed to make room (closing one ends its ranks too).
MAX_SERVERS = 2


class ForkUnavailable(RuntimeError):
    """No fork server could serve this request (it did not start, or is not single-threaded)."""


class ForkedProcess:
    """A rank's launcher forked by a server, as the pool uses a ``subprocess.Popen``."""

    def __init__(self, pid: int, conn: socket.socket, args: list[str]):
        self.pid = pid
        self.args = args
        self.returncode: int | None = None
        self._conn = conn

    def poll(self) -> int | None:
        if self.returncode is None:
            self._read(0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self._read(left)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _read(self, timeout: float | None) -> None:
        try:
            ready, _, _ = select.select([self._conn], [], [], timeout)
        except (OSError, ValueError):
            ready = [self._conn]
        if not ready:
            return
        try:
            data = self._conn.recv(STATUS.size, socket.MSG_WAITALL)
        except OSError:
            data = b""
        if len(data) == STATUS.size:
            self.returncode = os.waitstatus_to_exitcode(STATUS.unpack(data)[0])
        else:  # the server died: so did its children (their death signal); the status is lost
            self.returncode = -signal.SIGKILL
        self._conn.close()


class ForkServer:
    """One server process and the socket it takes requests on."""

    def __init__(self, env: dict[str, str], warm_kernels: bool, timeout_s: float):
        self.workdir = tempfile.mkdtemp(prefix="kloom-fork-")
        os.chmod(self.workdir, 0o700)
        self.log_path = os.path.join(self.workdir, "server.log")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        server_env = {**env, "HOME": self.workdir, "TMPDIR": self.workdir,
                      # One thread: the BLAS and OpenMP runtimes start no pool at import (a fork
                      # copies only the forking thread); each rank sets its own count.
                      "OMP_NUM_THREADS": "1", "KLOOM_FORK_WARM_KERNELS": "1" if warm_kernels else "0"}
        with open(self.log_path, "wb") as log:
            self.proc = start_process([python_executable(), "-m", "services.worker.evaluator.fork_server", str(theirs.fileno())],
                                      env=server_env, cwd=self.workdir, log=log, new_session=True, pass_fds=(theirs.fileno(),))
        theirs.close()
        self.control = ours
        self.lock = threading.Lock()
        self.children: list[ForkedProcess] = []
        try:
            ready, _, _ = select.select([ours], [], [], timeout_s)
            data = ours.recv(READY.size, socket.MSG_WAITALL) if ready else b""
            if len(data) != READY.size:
                raise ForkUnavailable(f"the fork server did not start: {log_tail(self.log_path, 2000) or 'no output'}")
            self.pid, threads = READY.unpack(data)
            if threads != 1:
                raise ForkUnavailable(f"the fork server has {threads} threads after its imports; a fork copies one")
        except BaseException:
            self.close()
            raise

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    @property
    def idle(self) -> bool:
        """Whether no rank forked from this server runs (its launchers die with it)."""
        self.children = [c for c in self.children if c.returncode is None and alive(c.pid)]
        return not self.children

    def spawn(self, argv: list[str], env: dict[str, str], cwd: str, plan: dict, log_fd: int, status_fd: int,
              new_session: bool) -> ForkedProcess:
        """Fork a rank's launcher that applies ``plan`` (its ``status_fd`` becomes the child's copy
        of ``status_fd``) and runs the rank as ``argv`` says, with ``env`` in ``cwd``."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            body = json.dumps({"argv": argv, "env": env, "cwd": cwd, "plan": plan, "new_session": new_session}).encode()
            with self.lock:
                socket.send_fds(self.control, [b"fork"], [theirs.fileno()])
            theirs.close()
            # Read by the child alone: the server never sees a request.
            socket.send_fds(ours, [LENGTH.pack(len(body))], [log_fd, status_fd])
            ours.sendall(body)
            ready, _, _ = select.select([ours], [], [], 30.0)
            data = ours.recv(PID.size, socket.MSG_WAITALL) if ready else b""
            if len(data) != PID.size:
                raise ForkUnavailable("the fork server did not fork")
        except (OSError, ForkUnavailable) as exc:
            ours.close()
            theirs.close()
            raise ForkUnavailable(f"the fork server failed: {exc}") from exc
        child = ForkedProcess(PID.unpack(data)[0], ours, argv)
        self.children.append(child)
        return child

    def close(self) -> None:
        self.control.close()
        end_tree(self.proc, 5.0)
        try:
            os.unlink(self.log_path)
            os.rmdir(self.workdir)
        except OSError:
            pass


_servers: dict[tuple, ForkServer] = {}
#: Why the server of a key could not start: not tried again in this process.
_failed: dict[tuple, str] = {}
_servers_lock = threading.Lock()


def shared_environment(env: dict[str, str]) -> dict[str, str]:
    """What of a rank's environment its server has: all but the per-pool variables."""
    return {k: v for k, v in env.items() if k not in PER_POOL and not k.startswith(PER_POOL_PREFIX)}


def server_for(env: dict[str, str], warm_kernels: bool, timeout_s: float) -> ForkServer:
    """The live server for ranks of ``env`` (started when there is none)."""
    shared = shared_environment(env)
    key = (python_executable(), warm_kernels, tuple(sorted(shared.items())))
    with _servers_lock:
        server = _servers.get(key)
        if server is not None and not server.alive:
            server.close()
            server = None
            del _servers[key]
        if server is None:
            if key in _failed:
                raise ForkUnavailable(_failed[key])
            while len(_servers) >= MAX_SERVERS:
                idle = next((k for k, s in _servers.items() if s.idle), None)
                if idle is None:  # every server has ranks running: this one's start as interpreters
                    raise ForkUnavailable(f"{MAX_SERVERS} fork servers already serve running ranks")
                _servers.pop(idle).close()
            try:
                server = _servers[key] = ForkServer(shared, warm_kernels, timeout_s)
            except (ForkUnavailable, OSError) as exc:
                _failed[key] = str(exc)
                raise ForkUnavailable(str(exc)) from exc
        return server


def close_servers() -> None:
    """End every server of this process (each would end by itself once this process is gone,
    leaving its directory)."""
    with _servers_lock:
        while _servers:
            _servers.popitem()[1].close()


atexit.register(close_servers)
