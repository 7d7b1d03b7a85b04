"""What a rank process may see and use: a scrubbed environment, a private working directory,
resource limits and, where the platform allows, a network, mount and process-count boundary of
its pool. ``docs/reliability.md`` lists what is enforced where, and what is not.

The pool starts every rank through this file, run as a script (``python sandbox.py PLAN -- CMD``):
the launcher applies the plan (cgroups, namespaces, limits, user, capabilities) as the last step
before it ``exec``s the rank, and reports on a pipe whether it could, so that a platform that
refuses a step fails the pool's start with the reason. Run as a script it imports the standard
library only (the package's ``__init__`` imports torch).
"""

from __future__ import annotations

import ctypes
import dataclasses
import errno
import fcntl
import json
import os
import pwd
import resource
import secrets
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

#: Environment variables a rank inherits; everything else (API keys, database URLs, LLM
#: credentials) stays behind.
_PASS_PREFIXES = ("CUDA_", "NCCL_", "TORCH_", "TORCHINDUCTOR_", "TRITON_", "NVIDIA_", "OMP_", "MKL_", "GLOO_", "NVSHMEM_")
_PASS_NAMES = ("PATH", "LANG", "LC_ALL", "LD_LIBRARY_PATH", "PYTHONPATH", "CC", "CXX", "TERM", "TZ", "VIRTUAL_ENV")
#: Names that look like credentials stay behind even under a passed prefix (``TORCH_HUB_TOKEN``).
_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH")
#: Set in every rank: NVLink multicast stays off on shared hosts; one compile thread so that
#: torch.compile starts no worker processes (a live child process is a reason to reject).
_FORCED = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
    "TORCHINDUCTOR_COMPILE_THREADS": "1",
    "GLOO_SOCKET_IFNAME": "lo",
    "NCCL_SOCKET_IFNAME": "lo",
    "PYTHONUNBUFFERED": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
}
#: Directories covered by an empty read-only tmpfs in the ranks' mount namespace: the cgroup
#: tree (a root rank could move itself out of its pool's cgroup) and /run, where local services
#: keep their Unix sockets (PostgreSQL, Docker), which a network namespace does not cut.
HIDDEN_PATHS = ("/sys/fs/cgroup", "/run")
#: Capabilities a rank that stays root keeps (pinned host memory, thread priorities); without
#: the others it cannot leave its namespaces, raise its limits or read other processes' memory.
KEPT_CAPABILITIES = frozenset({14, 23})  # CAP_IPC_LOCK, CAP_SYS_NICE
#: The user the service runs ranks as when its worker is root (``EvalSettings.rank_user``).
SERVICE_RANK_USER = "nobody"

_CLONE_NEWNS = 0x00020000
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 4096, 0x4000, 1 << 18
_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE, _PR_CAPBSET_DROP, _PR_SET_NO_NEW_PRIVS = 1, 4, 24, 38
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1


# The rank's environment ------------------------------------------------------------------------
def rank_environment(workdir: str, extra: dict[str, str], cache_dir: str | None = None) -> dict[str, str]:
    """The whole environment of a rank: passed names only, credentials never, plus ``extra``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if (k in _PASS_NAMES or any(k.startswith(p) for p in _PASS_PREFIXES))
        and not any(word in k.upper() for word in _SECRET_WORDS)
    }
    # The package must stay importable from the private working directory.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_package_root(), env.get("PYTHONPATH", "")) if p)
    env.update(_FORCED)
    env["HOME"] = workdir
    env["TMPDIR"] = workdir
    # Compiler caches outlive a pool, so that a rebuilt pool does not compile everything again.
    cache = cache_dir or compiler_cache_dir()
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(cache, "inductor"))
    env.setdefault("TRITON_CACHE_DIR", os.path.join(cache, "triton"))
    env.setdefault("TORCH_EXTENSIONS_DIR", os.path.join(cache, "extensions"))
    env.update(extra)
    return env


def compiler_cache_dir(uid: int | None = None) -> str:
    """The compiler caches of ranks running as ``uid`` (default: this process's user)."""
    base = os.environ.get("KLOOM_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "kloom")
    if uid is None or uid == os.geteuid():
        os.makedirs(base, exist_ok=True)
        return base
    # Another user's caches: a directory of its own, under a base that user can reach.
    if not os.environ.get("KLOOM_CACHE_DIR"):
        base = tempfile.gettempdir()
    path = os.path.join(base, f"kloom-cache-{uid}")
    os.makedirs(path, mode=0o700, exist_ok=True)
    os.chown(path, uid, -1)
    return path


def python_executable() -> str:
    return sys.executable


# What the platform allows ----------------------------------------------------------------------
@dataclass(frozen=True)
class Platform:
    """What this machine lets a pool do, found once per process by a probe in a child process."""

    root: bool
    #: A network namespace of the pool's own (as root; otherwise inside a user namespace).
    netns: bool
    #: Mount namespaces (hiding ``HIDDEN_PATHS``), under the same conditions.
    mountns: bool
    #: cgroup controllers this process may make child groups of: ``{"pids": dir, "memory": dir}``.
    cgroups: dict[str, str] = field(default_factory=dict)


_platform: Platform | None = None


def platform() -> Platform:
    """The probed ``Platform`` (cached)."""
    global _platform
    if _platform is None:
        try:
            out = subprocess.run(
                [python_executable(), os.path.abspath(__file__), "--probe"],
                capture_output=True, text=True, timeout=30, env={"PATH": os.environ.get("PATH", "")},
            )
            found = json.loads(out.stdout or "{}")
        except (OSError, subprocess.TimeoutExpired, ValueError):
            found = {}
        _platform = Platform(
            root=os.geteuid() == 0,
            netns=bool(found.get("netns")),
            mountns=bool(found.get("mountns")),
            cgroups=_cgroup_controllers() if os.geteuid() == 0 else {},
        )
    return _platform


def _probe() -> dict[str, bool]:
    """In a throw-away process: can it make the namespaces a pool uses?"""
    found = {"netns": False, "mountns": False}
    try:
        if os.geteuid() != 0:
            _enter_user_namespace()
        _unshare(_CLONE_NEWNET)
        _loopback_up()
        found["netns"] = True
        _unshare(_CLONE_NEWNS)
        _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
        for path in HIDDEN_PATHS:  # in this throw-away process's own mount namespace
            if os.path.isdir(path):
                _hide(path)
        found["mountns"] = True
    except OSError:
        pass
    return found


def _cgroup_controllers() -> dict[str, str]:
    """For each of pids and memory: the directory of this process's own group, if writable."""
    own: dict[str, str] = {}
    try:
        with open("/proc/self/cgroup") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return {}
    unified = os.path.exists("/sys/fs/cgroup/cgroup.controllers")
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for name in ("pids", "memory"):
            if unified and controllers == "":
                directory = "/sys/fs/cgroup" + path
            elif name in controllers.split(","):
                directory = f"/sys/fs/cgroup/{name}{path}"
            else:
                continue
            if os.access(directory, os.W_OK):
                own.setdefault(name, directory.rstrip("/"))
    return own


# One pool's isolation --------------------------------------------------------------------------
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
    #: ``"new"``: make the pool's network namespace; a ``/proc/<pid>/ns`` directory: join it.
    netns: str = ""
    hide: list[str] = field(default_factory=list)
    #: Directories made read-only (kloom's code and the interpreter, for a rank that stays root).
    readonly: list[str] = field(default_factory=list)
    uid: int | None = None
    gid: int | None = None
    #: The pool's process: the rank is killed when it dies (and not started once it has).
    parent: int = 0


class PoolIsolation:
    """The sandbox of one rank pool: builds each rank's launch command, holds the pool's cgroup,
    and releases it (killing whatever is left in it) when the pool is killed."""

    def __init__(self, settings, world_size: int, device: str, workdir: str):
        self.settings = settings
        self.world_size = world_size
        self.device = device
        self.workdir = workdir
        self.platform = platform()
        self.user = _rank_user(settings.rank_user) if self.platform.root else None
        self.network = bool(settings.isolate_network) and self.platform.netns
        self.hide = self._hidden_paths() if self.network and self.platform.mountns else []
        # A rank that stays root owns kloom's files: it could rewrite the evaluator for later runs.
        self.readonly = _code_paths() if self.hide and self.platform.root and self.user is None else []
        self.cgroup = PoolCgroup.create(self.platform.cgroups, self._pids_max(), self._memory_max())
        self.netns_dir = ""

    # Launch ------------------------------------------------------------------------------------
    def prepare(self, socket_path: str) -> None:
        """Protect this process from its ranks; hand the private directory (and the pool's
        socket in it) to the rank user."""
        protect_process()
        if self.user is not None:
            os.chown(self.workdir, self.user.pw_uid, self.user.pw_gid)
            os.chmod(socket_path, 0o660)
            os.chown(socket_path, -1, self.user.pw_gid)

    def cache_dir(self) -> str:
        return compiler_cache_dir(self.user.pw_uid if self.user else None)

    def command(self, rank: int, status_fd: int, argv: list[str]) -> list[str]:
        """The launcher's command line that starts rank ``rank`` as ``argv``."""
        s = self.settings
        plan = Plan(
            status_fd=status_fd,
            # The CUDA driver reserves far more address space than it uses: no RLIMIT_AS there.
            memory_bytes=s.rank_memory_bytes if self.device == "cpu" else 0,
            open_files=s.rank_open_files,
            cpu_seconds=s.rank_cpu_seconds,
            processes=self._pids_max(),
            cgroups=self.cgroup.directories if self.cgroup else [],
            netns=("new" if rank == 0 else self.netns_dir) if self.network else "",
            hide=list(self.hide),
            readonly=list(self.readonly),
            uid=self.user.pw_uid if self.user else None,
            gid=self.user.pw_gid if self.user else None,
            parent=os.getpid(),
        )
        if self.network and rank > 0 and not self.netns_dir:
            raise SandboxError("rank 0 has not made the pool's network namespace")
        return [python_executable(), os.path.abspath(__file__), json.dumps(dataclasses.asdict(plan)), "--", *argv]

    def started(self, rank: int, pid: int, status_read_fd: int, timeout_s: float) -> None:
        """Wait for rank ``rank``'s launcher to report; raises ``SandboxError`` with its reason."""
        report = _read_report(status_read_fd, timeout_s)
        if report != "ok":
            raise SandboxError(f"rank {rank}'s sandbox: {report or 'the launcher exited without a report'}")
        if rank == 0 and self.network:
            self.netns_dir = f"/proc/{pid}/ns"

    def release(self) -> None:
        """Kill every process left in the pool's cgroup (those that left the process group too)."""
        if self.cgroup is not None:
            self.cgroup.remove()
            self.cgroup = None

    # What is enforced --------------------------------------------------------------------------
    def enforced(self) -> dict[str, str]:
        """Each boundary of this pool and how it is enforced, or why it is not."""
        s = self.settings
        cg = self.cgroup
        as_root = self.platform.root and self.user is None
        return {
            "environment": "scrubbed: passed names only, no credentials",
            "working_directory": "private (mode 700)" + (f", owned by {self.user.pw_name}" if self.user else ""),
            "user": self.user.pw_name if self.user else pwd.getpwuid(os.geteuid()).pw_name,
            "capabilities": "none (unprivileged)" if not as_root else "root without CAP_SYS_ADMIN, CAP_SYS_PTRACE, CAP_SYS_RESOURCE, CAP_DAC_OVERRIDE, ... (bounding set)",
            "network": "own namespace with loopback only" if self.network else "not isolated: " + ("isolate_network is off" if not s.isolate_network else "no namespaces on this platform"),
            "hidden_paths": ", ".join(self.hide) or "none",
            "read_only_paths": ", ".join(self.readonly) or ("none needed (unprivileged)" if not as_root else "none"),
            "processes": (f"pids cgroup, {cg.pids_max} per pool" if cg and cg.pids_max else
                          f"RLIMIT_NPROC {self._pids_max()} per user" if not as_root and s.rank_processes else "not limited (root ignores RLIMIT_NPROC)"),
            "memory": ", ".join(filter(None, [
                f"RLIMIT_AS {s.rank_memory_bytes} per rank" if self.device == "cpu" and s.rank_memory_bytes else "",
                f"memory cgroup {cg.memory_max} per pool" if cg and cg.memory_max else "",
            ])) or "not limited",
            "open_files": f"RLIMIT_NOFILE {s.rank_open_files}" if s.rank_open_files else "not limited",
            "cpu_time": f"RLIMIT_CPU {s.rank_cpu_seconds} s" if s.rank_cpu_seconds else "per-call deadlines only",
        }

    def _hidden_paths(self) -> list[str]:
        # /dev/shm must stay visible (NCCL and gloo share memory through it), even where it is
        # a link into /run.
        shm = os.path.realpath("/dev/shm")
        return [p for p in HIDDEN_PATHS if os.path.isdir(p) and not (shm + "/").startswith(os.path.realpath(p) + "/")]

    def _pids_max(self) -> int:
        return self.settings.rank_processes * self.world_size if self.settings.rank_processes > 0 else 0

    def _memory_max(self) -> int:
        if self.settings.rank_memory_bytes > 0:
            return self.settings.rank_memory_bytes * self.world_size
        # No limit asked: still keep a runaway pool from making the kernel's OOM killer pick the
        # worker or the database; the pool's own ranks go first.
        try:
            return int(0.75 * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
        except (ValueError, OSError):
            return 0


def _package_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _code_paths() -> list[str]:
    """kloom's source tree and the interpreter's prefixes, outermost only."""
    found: list[str] = []
    for path in sorted({os.path.realpath(p) for p in (_package_root(), sys.prefix, sys.base_prefix)}, key=len):
        if os.path.isdir(path) and path != "/" and not any((path + "/").startswith(f + "/") for f in found):
            found.append(path)
    return found


def protect_process() -> None:
    """Make this process non-dumpable: processes of the same user (ranks, when they run as the
    worker's user) can then read neither its memory nor its ``/proc/<pid>/environ``, where the
    service's credentials are. Inherited by forked children; reset by exec."""
    _prctl(_PR_SET_DUMPABLE, 0)


def _rank_user(name: str) -> pwd.struct_passwd | None:
    """The user ranks run as, when this process is root and one is set (``root``: none)."""
    if not name or name == "root":
        return None
    try:
        user = pwd.getpwuid(int(name)) if name.isdigit() else pwd.getpwnam(name)
    except KeyError:
        raise SandboxError(f"rank user {name!r} does not exist on this machine") from None
    if user.pw_uid == 0:
        return None
    if not can_run_as(user):
        raise SandboxError(f"rank user {name!r} cannot run {python_executable()} or read kloom's packages")
    return user


def for_service(settings):
    """``settings`` as the service runs them: a root worker runs workload and candidate code as
    ``SERVICE_RANK_USER`` where that user can run this interpreter and read kloom (not where
    they live in root's home), unless a rank user is set already."""
    if settings.rank_user or os.geteuid() != 0:
        return settings
    try:
        user = pwd.getpwnam(SERVICE_RANK_USER)
    except KeyError:
        return settings
    if not can_run_as(user):
        return settings
    return dataclasses.replace(settings, rank_user=SERVICE_RANK_USER)


_runnable: dict[int, bool] = {}


def can_run_as(user: pwd.struct_passwd) -> bool:
    """Whether ``user`` can start this interpreter and read kloom and its packages (cached)."""
    if user.pw_uid not in _runnable:
        check = "import os, sys; [os.listdir(p) for p in sys.path if os.path.isdir(p)]"
        try:
            done = subprocess.run(
                [python_executable(), "-c", check], user=user.pw_uid, group=user.pw_gid, extra_groups=[],
                cwd="/", env={"PYTHONPATH": _package_root()}, capture_output=True, timeout=30,
            )
            _runnable[user.pw_uid] = done.returncode == 0
        except (OSError, subprocess.SubprocessError):
            _runnable[user.pw_uid] = False
    return _runnable[user.pw_uid]


def share_with_ranks(paths: list[str], settings) -> None:
    """Let the ranks read a root worker's private files (the job's workload): hand them to the
    rank user's group, readable by it only."""
    user = _rank_user(settings.rank_user) if os.geteuid() == 0 else None
    if user is None:
        return
    for path in paths:
        os.chown(path, -1, user.pw_gid)
        os.chmod(path, 0o750 if os.path.isdir(path) else 0o640)


def _read_report(fd: int, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    chunks = []
    try:
        os.set_blocking(fd, False)
        while time.monotonic() < deadline:
            try:
                data = os.read(fd, 4096)
            except BlockingIOError:
                time.sleep(0.005)
                continue
            if not data:
                break
            chunks.append(data)
        else:
            return f"no report within {timeout_s:.0f} s"
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8", "replace").strip()


# The pool's cgroup -----------------------------------------------------------------------------
class PoolCgroup:
    """A child group, per controller, of this process's own cgroup: ``.../kloom/pool-<pid>-<hex>``."""

    def __init__(self, directories: list[str], pids_max: int, memory_max: int):
        self.directories = directories
        self.pids_max = pids_max
        self.memory_max = memory_max

    @classmethod
    def create(cls, controllers: dict[str, str], pids_max: int, memory_max: int) -> "PoolCgroup | None":
        """A new group with the limits set, or None where no controller can be used."""
        name = f"pool-{os.getpid()}-{secrets.token_hex(4)}"
        made: dict[str, str] = {}
        for controller, own in controllers.items():
            limit = pids_max if controller == "pids" else memory_max
            if limit <= 0 or own in made.values():
                continue
            parent = os.path.join(own, "kloom")
            directory = os.path.join(parent, name)
            try:
                for _ in range(3):  # another pool may remove the empty parent meanwhile
                    os.makedirs(parent, exist_ok=True)
                    _reap_stale(parent)
                    try:
                        os.mkdir(directory)
                        break
                    except FileNotFoundError:
                        continue
                else:
                    continue
            except OSError:
                continue
            try:
                _write_limit(directory, controller, limit)
            except OSError:
                _remove_group(directory)
                continue
            made[controller] = directory
        if not made:
            return None
        return cls(sorted(set(made.values())), pids_max if "pids" in made else 0, memory_max if "memory" in made else 0)

    def pids(self) -> list[int]:
        return sorted({pid for d in self.directories for pid in _group_pids(d)})

    def remove(self) -> None:
        for directory in self.directories:
            _remove_group(directory)
            try:
                # The shared parent goes too once empty: it is made inside someone else's group.
                os.rmdir(os.path.dirname(directory))
            except OSError:
                pass


def _write_limit(directory: str, controller: str, limit: int) -> None:
    v2 = os.path.exists(os.path.join(directory, "cgroup.controllers"))
    if controller == "pids":
        target = "pids.max"
    else:
        target = "memory.max" if v2 else "memory.limit_in_bytes"
    if v2 and not os.path.exists(os.path.join(directory, target)):
        # The parent does not delegate this controller to its children.
        raise OSError(errno.ENOTSUP, f"{controller} is not enabled for {directory}")
    with open(os.path.join(directory, target), "w") as fh:
        fh.write(str(limit))


def _group_pids(directory: str) -> list[int]:
    try:
        with open(os.path.join(directory, "cgroup.procs")) as fh:
            return [int(p) for p in fh.read().split()]
    except OSError:
        return []


def _remove_group(directory: str) -> None:
    """SIGKILL everything in the group until it is empty (a fork bomb is capped by pids.max,
    so this converges), then remove it."""
    for _ in range(500):
        pids = _group_pids(directory)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.01)
    for _ in range(200):
        try:
            os.rmdir(directory)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.01)  # killed processes are still exiting


def _reap_stale(parent: str) -> None:
    """Remove the groups of pools whose owner process died without removing them (a worker
    killed with SIGKILL): their ranks would otherwise run on."""
    for entry in os.listdir(parent):
        parts = entry.split("-")
        if len(parts) != 3 or parts[0] != "pool" or not parts[1].isdigit():
            continue
        try:
            os.kill(int(parts[1]), 0)
        except ProcessLookupError:
            _remove_group(os.path.join(parent, entry))
        except PermissionError:
            pass


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


def _prctl(option: int, arg: int) -> None:
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


def _hide(path: str) -> None:
    _mount("kloom-hidden", path, "tmpfs", _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, "size=4k,mode=755")


def _drop_capabilities() -> None:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as fh:
            last = int(fh.read())
    except (OSError, ValueError):
        last = 40
    for cap in range(last + 1):
        if cap not in KEPT_CAPABILITIES:
            _prctl(_PR_CAPBSET_DROP, cap)


def apply(plan: Plan) -> None:
    """Apply ``plan`` to this process (the launcher, about to exec the rank)."""
    root = os.geteuid() == 0
    for directory in plan.cgroups:
        with open(os.path.join(directory, "cgroup.procs"), "w") as fh:
            fh.write(str(os.getpid()))
    if plan.netns == "new":
        if not root:
            _enter_user_namespace()
        _unshare(_CLONE_NEWNET)
        _loopback_up()
    elif plan.netns:
        if not root:
            _setns(os.path.join(plan.netns, "user"), _CLONE_NEWUSER)
        _setns(os.path.join(plan.netns, "net"), _CLONE_NEWNET)
    if plan.hide:
        _unshare(_CLONE_NEWNS)
        _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
        for path in plan.hide:
            _hide(path)
        for path in plan.readonly:
            _mount(path, path, None, _MS_BIND | _MS_REC)
            _mount(None, path, None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY)
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
    _prctl(_PR_SET_NO_NEW_PRIVS, 1)
    # Set last: a change of user clears it. The ranks die with the pool's process.
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if plan.parent and os.getppid() != plan.parent:
        raise SandboxError("the pool's process is gone")


def main(argv: list[str]) -> None:
    """``sandbox.py --probe`` or ``sandbox.py PLAN_JSON -- COMMAND...``."""
    if argv[:1] == ["--probe"]:
        print(json.dumps(_probe()))
        return
    plan = Plan(**json.loads(argv[0]))
    command = argv[argv.index("--") + 1 :]
    try:
        apply(plan)
    except Exception as exc:  # noqa: BLE001 - reported to the pool, which fails its start
        os.write(plan.status_fd, f"{type(exc).__name__}: {exc}".encode())
        os._exit(70)
    os.write(plan.status_fd, b"ok")
    os.close(plan.status_fd)
    os.execv(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
