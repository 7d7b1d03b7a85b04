"""The fork server: a clean process that has imported a rank's code once and forks every new
rank from there (``python -m services.worker.evaluator.fork_server FD``, started by
``fork_client.ForkServer``).

A rank started as a new interpreter spends ~2.5 CPU-s importing torch before it does anything;
a rank forked from here starts with torch imported. What the server holds is what any rank's
process holds after its imports: it touched no device (CUDA is not initialised; a fork after that
would not be safe), formed no process group, read no candidate or workload, and it never reads
what the pool asks of a rank: each request comes on a socket of its own, which the server hands
to the forked child without reading it, so that no rank inherits another pool's key or plan.
The server is not dumpable (no rank of its user reads or writes its memory through ``/proc``)
and stays single-threaded (a fork copies only the forking thread: a lock held by another would
stay held in the child).

A forked child is a rank's launcher (``sandbox_launcher.launch``): it takes the rank's log as
its output, its session, working directory and environment, joins the pool's cgroup and
namespaces, and, sandboxed as an exec'd rank would be, runs the rank's entry point
(``rank_main.main``) in place of an exec. The server reaps its children and sends each one's
exit status back on that child's socket.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
import tempfile
import traceback
from collections.abc import Callable

import torch

from . import rank_main, sandbox_launcher
from .fork_client import LENGTH, PID, READY, STATUS
from .timing import settle_gc
from .sandbox_launcher import Plan

def thread_count() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 0


def _import_rank_code(warm_kernels: bool) -> None:
    if warm_kernels:
        rank_main.import_projection_kernel()
    if torch.cuda.is_initialized():  # nothing above may touch the device: a fork would inherit it
        raise RuntimeError("CUDA was initialised while importing a rank's code")


def serve(control: socket.socket) -> Callable[[], int]:
    """Fork a rank for each request on ``control`` until the client closes it (then exit). Returns
    only in a forked child, with what that child runs."""
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children: dict[int, socket.socket] = {}
    while True:
        try:
            readable, _, _ = select.select([control, wake_read], [], [], 1.0)
        except InterruptedError:
            readable = []
        if wake_read in readable:
            os.read(wake_read, 4096)
        _reap(children)
        if control not in readable:
            continue
        try:
            message, fds, _, _ = socket.recv_fds(control, 16, 1)
        except OSError:
            message, fds = b"", []
        if not message or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            os._exit(0)  # the client is gone: its children die with this process (their launchers' death signal)
        conn = socket.socket(fileno=fds[0])
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for fd in (wake_read, wake_write):
                os.close(fd)
            control.close()
            for other in children.values():
                other.close()
            return _child(conn)
        try:
            conn.sendall(PID.pack(pid))
        except OSError:
            pass
        children[pid] = conn


def _reap(children: dict[int, socket.socket]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is not None:
            try:
                conn.sendall(STATUS.pack(status))
            except OSError:
                pass
            conn.close()


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    head, fds, _, _ = socket.recv_fds(conn, LENGTH.size, 2)
    if len(head) != LENGTH.size or len(fds) != 2:
        raise RuntimeError("an incomplete request")
    (length,) = LENGTH.unpack(head)
    body = b""
    while len(body) < length:
        chunk = conn.recv(length - len(body))
        if not chunk:
            raise RuntimeError("an incomplete request")
        body += chunk
    return json.loads(body), fds


def _child(conn: socket.socket) -> Callable[[], int]:
    """In a forked child: read the request, become the rank's launcher, and (in the rank's
    process) return the rank's entry point."""
    try:
        request, (log_fd, status_fd) = _receive(conn)
    except Exception:  # noqa: BLE001 - the client sees the child exit at once
        os._exit(71)
    conn.close()
    # As an exec'd launcher is (exec resets it): an unprivileged one writes its user namespace's
    # maps in /proc/self, which a process that is not dumpable does not own. What it holds is
    # the server's memory, which holds nothing of any pool.
    sandbox_launcher.prctl(sandbox_launcher.PR_SET_DUMPABLE, 1)
    if request.get("new_session"):
        os.setsid()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    for fd in (null, log_fd):
        os.close(fd)
    _close_fds_except({0, 1, 2, status_fd})
    env = request["env"]
    os.environ.clear()
    os.environ.update(env)
    try:
        os.chdir(request["cwd"])
    except OSError as exc:
        os.write(status_fd, f"cannot enter the rank's directory: {exc}".encode())
        os._exit(70)
    plan = Plan(**{**request["plan"], "status_fd": status_fd})
    sandbox_launcher.launch(plan)  # returns in the rank's process only, sandboxed, after its "ok"
    return lambda: _run_rank(request)


def _close_fds_except(keep: set[int]) -> None:
    try:
        fds = [int(fd) for fd in os.listdir("/proc/self/fd")]
    except OSError:
        fds = list(range(3, 1024))
    for fd in fds:
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def _run_rank(request: dict) -> int:
    """The rank's entry point, as an exec'd rank would run it: its module path first on
    ``sys.path``, its temporary directory and thread count from its environment."""
    # exec would have made the rank dumpable again after its change of user (the pool reads its
    # /proc entries, NCCL may pass memory between its ranks).
    sandbox_launcher.prctl(sandbox_launcher.PR_SET_DUMPABLE, 1)
    sys.argv = list(request.get("argv") or [sys.argv[0]])
    if sys.path:
        sys.path[0] = os.getcwd()
    tempfile.tempdir = None
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:  # the thread count an interpreter would read at start
        torch.set_num_threads(int(threads))
    try:
        rank_main.main()
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - as an interpreter would end on it
        traceback.print_exc()
        return 1
    return 0


def main(argv: list[str]) -> int:
    control = socket.socket(fileno=int(argv[0]))
    try:
        sandbox_launcher.prctl(sandbox_launcher.PR_SET_DUMPABLE, 0)
        _import_rank_code(os.environ.pop("KLOOM_FORK_WARM_KERNELS", "") == "1")
        settle_gc()  # the imports set aside from collections, in every rank forked from here too
        control.sendall(READY.pack(os.getpid(), thread_count()))
    except BaseException:  # noqa: BLE001 - the client reads the log
        traceback.print_exc()
        return 1
    run = serve(control)
    return run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
