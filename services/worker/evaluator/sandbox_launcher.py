"""The launcher of a rank: run as a script by the pool (``python sandbox_launcher.py PLAN -- CMD``),
it joins the pool's cgroup and namespaces (making them, for rank 0), forks the rank's process
inside the pool's pid namespace, builds that process's view of the filesystem (``sandbox_view``),
sets its limits, drops its privileges and ``exec``s the rank; it reports on a pipe whether all of
that worked, so that a platform that refuses a step fails the pool's start with the reason, and
then waits to pass on the rank's exit status. ``--probe`` tells which of these steps this platform
allows. Imports the standard library only (the package's ``__init__`` imports torch).
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import resource
import signal
import socket
import struct
import sys
from dataclasses import dataclass, field

try:
    from . import sandbox_view
except ImportError:  # run as a script
    import sandbox_view  # type: ignore[no-redef]

#: Always hidden from ranks: the cgroup tree (a root rank could move itself out of its pool's
#: group) and /run, where local services keep their Unix sockets (PostgreSQL, Docker), which a
#: network namespace does not cut.
HIDDEN_PATHS = ("/sys/fs/cgroup", "/run")
#: Capabilities a rank that stays root keeps (pinned host memory, thread priorities); without
#: the others it cannot leave its namespaces, raise its limits or read other processes' memory.
KEPT_CAPABILITIES = frozenset({14, 23})  # CAP_IPC_LOCK, CAP_SYS_NICE
_CLONE_NEWNS = 0x00020000
_CLONE_NEWIPC = 0x08000000
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWPID = 0x20000000
_CLONE_NEWNET = 0x40000000
_NAMESPACES = {"net": (_CLONE_NEWNET, "net"), "ipc": (_CLONE_NEWIPC, "ipc"), "pid": (_CLONE_NEWPID, "pid_for_children")}
_MS_REC, _MS_PRIVATE = 0x4000, 1 << 18
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_PR_SET_PDEATHSIG, PR_SET_DUMPABLE, _PR_CAPBSET_DROP, _PR_SET_NO_NEW_PRIVS = 1, 4, 24, 38
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1


class SandboxError(RuntimeError):
    """A rank's sandbox could not be set up (the launcher's report, or a missing user)."""


@dataclass
class Plan:
    """What the launcher applies to one rank before it becomes the rank (JSON on its command line)."""

    status_fd: int
    memory_bytes: int = 0
    open_files: int = 0
    cpu_seconds: int = 0
    processes: int = 0
    cgroups: list[str] = field(default_factory=list)
    #: ``"new"``: make the pool's namespaces (and, unprivileged, its user namespace); a
    #: ``/proc/<pid>/ns`` directory: join those of rank 0's launcher.
    pool_ns: str = ""
    #: Which of ``net``, ``ipc``, ``pid`` the pool has of its own.
    namespaces: list[str] = field(default_factory=list)
    #: The rank's filesystem (``sandbox_view.View`` as a dict); None: the host's.
    view: dict | None = None
    uid: int | None = None
    gid: int | None = None
    #: The pool's process: the rank is killed when it dies (and not started once it has).
    parent: int = 0



def _probe() -> dict[str, bool]:
    """In a throw-away process: which of the namespaces and mount calls a pool uses work here."""
    found = dict.fromkeys(("netns", "mountns", "view", "mount_setattr", "pidns"), False)

    def works(*steps) -> bool:
        try:
            for fn in steps:
                fn()
            return True
        except OSError:
            return False

    if os.geteuid() != 0 and not works(_enter_user_namespace):
        return found
    found["netns"] = works(lambda: _unshare(_CLONE_NEWNET | _CLONE_NEWIPC), _loopback_up)
    new_pid = works(lambda: _unshare(_CLONE_NEWPID))
    found["mountns"] = works(
        lambda: _unshare(_CLONE_NEWNS),
        lambda: _mount(None, "/", None, _MS_REC | _MS_PRIVATE),
        *[lambda p=p: sandbox_view.cover(p, "755") for p in HIDDEN_PATHS if os.path.isdir(p)],
    )
    if not found["mountns"]:
        return found
    found["view"] = works(lambda: os.close(sandbox_view.open_tree("/tmp")))
    found["mount_setattr"] = works(lambda: sandbox_view.mount_setattr("/", set_=1, recursive=True))
    if new_pid:
        child = os.fork()
        if child == 0:  # the first process of the new pid namespace: can it have its own /proc?
            os._exit(0 if works(lambda: _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC | _MS_RDONLY)) else 1)
        found["pidns"] = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]) == 0
    return found


# The launcher (runs in the child, then execs the rank) -----------------------------------------
_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _unshare(flags: int) -> None:
    _check(_libc.unshare(flags), "unshare")


def _setns(path: str, nstype: int) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        _check(_libc.setns(fd, nstype), f"setns {path}")
    finally:
        os.close(fd)


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda s: s.encode() if s is not None else None  # noqa: E731
    _check(_libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)), f"mount {target}")


def prctl(option: int, arg: int) -> None:
    _check(_libc.prctl(option, ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)), f"prctl {option}")


def _enter_user_namespace() -> None:
    """An unprivileged process's own user namespace, mapping its ids to themselves: it gains the
    capabilities to make network and mount namespaces, and loses them again at exec."""
    uid, gid = os.geteuid(), os.getegid()
    _unshare(_CLONE_NEWUSER)
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as fh:
            fh.write(text)


def _loopback_up() -> None:
    """Bring up ``lo`` in a new network namespace (gloo and NCCL bootstrap over loopback)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(s, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | _IFF_UP))


def _drop_capabilities() -> None:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as fh:
            last = int(fh.read())
    except (OSError, ValueError):
        last = 40
    for cap in range(last + 1):
        if cap not in KEPT_CAPABILITIES:
            prctl(_PR_CAPBSET_DROP, cap)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


_CAP_VERSION_3 = 0x20080522


def _limit_capabilities(keep: frozenset[int]) -> None:
    """This process's effective, permitted and inheritable capabilities: ``keep`` at most (those
    it has of them); ambient ones cleared."""
    header = _CapHeader(_CAP_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(_libc.capget(ctypes.byref(header), data), "capget")
    mask = [0, 0]
    for cap in keep:
        mask[cap // 32] |= 1 << (cap % 32)
    for i in range(2):
        data[i].permitted &= mask[i]
        data[i].effective &= mask[i]
        data[i].inheritable &= mask[i]
    _check(_libc.capset(ctypes.byref(header), data), "capset")
    try:
        prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL)
    except OSError:  # a kernel before 4.3 has no ambient capabilities
        pass


def _enter_pool_namespaces(plan: Plan) -> None:
    """Make (rank 0) or join (the others) the pool's user, network, IPC and pid namespaces. A pid
    namespace takes the launcher's children, not the launcher."""
    if not plan.pool_ns:
        return
    root = os.geteuid() == 0
    if plan.pool_ns == "new":
        if not root:
            _enter_user_namespace()
        flags = 0
        for name in plan.namespaces:
            flags |= _NAMESPACES[name][0]
        if flags:
            _unshare(flags)
        if "net" in plan.namespaces:
            _loopback_up()
        return
    if not root:
        _setns(os.path.join(plan.pool_ns, "user"), _CLONE_NEWUSER)
    for name in plan.namespaces:
        flag, entry = _NAMESPACES[name]
        _setns(os.path.join(plan.pool_ns, entry), flag)


def _start_reaper(status_fd: int) -> None:
    """The first process of the pool's pid namespace (its init): reaps orphans, and takes every
    process of the namespace with it when it dies, which it does with rank 0's launcher."""
    if os.fork() != 0:
        return
    try:
        os.close(status_fd)
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
        while True:
            try:
                while os.waitpid(-1, os.WNOHANG)[0] > 0:
                    pass
            except ChildProcessError:
                pass
            signal.sigtimedwait({signal.SIGCHLD}, 5.0)
    finally:
        os._exit(0)


def _relay(child: int) -> None:
    """Wait for the rank and end as it ended (the pool reads the launcher's exit status)."""
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


def apply(plan: Plan) -> None:
    """Apply the rank's part of ``plan`` to this process (about to exec the rank): its view,
    limits, user and capabilities."""
    root = os.geteuid() == 0
    launcher = os.getppid()  # 0 inside the pool's pid namespace: the launcher is outside it
    if plan.view is not None:
        sandbox_view.apply_view(sandbox_view.View.from_dict(plan.view))
    limits = [(resource.RLIMIT_CORE, 0)]
    if plan.memory_bytes > 0:
        limits.append((resource.RLIMIT_AS, plan.memory_bytes))
    if plan.open_files > 0:
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        limits.append((resource.RLIMIT_NOFILE, plan.open_files if hard == resource.RLIM_INFINITY else min(plan.open_files, hard)))
    if plan.processes > 0 and (not root or plan.uid is not None):
        limits.append((resource.RLIMIT_NPROC, plan.processes))
    for which, value in limits:
        resource.setrlimit(which, (value, value))
    if plan.cpu_seconds > 0:
        # SIGXCPU at the soft limit, so that the rank's death says why; SIGKILL a second later.
        resource.setrlimit(resource.RLIMIT_CPU, (plan.cpu_seconds, plan.cpu_seconds + 1))
    if plan.uid is not None:
        os.setgroups([])
        os.setgid(plan.gid)
        os.setuid(plan.uid)
    elif root:
        _drop_capabilities()
    # What this process holds now, not only what an exec would give it: a rank that is not
    # exec'd (``fork_server``) would otherwise keep a root launcher's capabilities, or those of
    # the pool's user namespace (with which it could unmount the covers of its own view).
    _limit_capabilities(KEPT_CAPABILITIES if root and plan.uid is None else frozenset())
    prctl(_PR_SET_NO_NEW_PRIVS, 1)
    # Set last: a change of user clears it. The rank dies with its launcher.
    prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != launcher:
        raise SandboxError("the rank's launcher is gone")


def _exec_rank(plan: Plan, command: list[str]) -> None:
    if not os.access(command[0], os.X_OK):
        raise SandboxError(f"the rank's user (uid {os.getuid()}) cannot run {command[0]} in its view")
    _report_ok(plan)
    os.execv(command[0], command)


def _report_ok(plan: Plan) -> None:
    os.write(plan.status_fd, b"ok")
    os.close(plan.status_fd)


def launch(plan: Plan, command: list[str] | None = None) -> None:
    """The launcher's steps in this process: join the pool's cgroups and namespaces and (with a
    pid namespace) fork the rank, this process staying to pass on its exit status; in the rank's
    process apply ``plan``, report ``ok``, and exec ``command``, or, without one, return (only in
    the rank's process), which then runs the rank itself (``fork_server``). A step that fails is
    reported on the status pipe and ends this process (status 70)."""
    try:
        for directory in plan.cgroups:
            with open(os.path.join(directory, "cgroup.procs"), "w") as fh:
                fh.write(str(os.getpid()))
        _enter_pool_namespaces(plan)
        # After the user namespace (entering one clears it): the launcher dies with the pool.
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if plan.parent and os.getppid() != plan.parent:
            raise SandboxError("the pool's process is gone")
        if "pid" in plan.namespaces:
            if plan.pool_ns == "new":
                _start_reaper(plan.status_fd)
            child = os.fork()
            if child != 0:
                os.close(plan.status_fd)
                _relay(child)
        apply(plan)
        if command is not None:
            _exec_rank(plan, command)
        _report_ok(plan)
    except Exception as exc:  # noqa: BLE001 - reported to the pool, which fails its start
        os.write(plan.status_fd, f"{type(exc).__name__}: {exc}".encode())
        os._exit(70)


def main(argv: list[str]) -> None:
    """``sandbox.py --probe`` or ``sandbox.py PLAN_JSON -- COMMAND...``."""
    if argv[:1] == ["--probe"]:
        print(json.dumps(_probe()))
        return
    plan = Plan(**json.loads(argv[0]))
    command = argv[argv.index("--") + 1 :]
    launch(plan, command)


if __name__ == "__main__":
    main(sys.argv[1:])
