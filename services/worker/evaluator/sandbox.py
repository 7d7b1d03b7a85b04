"""What a rank process may see and use: a scrubbed environment, a private working directory, its
own view of the filesystem (read-only, the service's data hidden), resource limits, an
unprivileged user and, where the platform allows, network, IPC and pid namespaces and a cgroup of
its pool. ``docs/reliability.md`` lists what is enforced where, and what is not.

``PoolIsolation`` plans one pool's sandbox in the pool's process and starts every rank through
``sandbox_launcher.py`` (run as a script), which applies the plan and ``exec``s the rank. The
rank's environment is ``sandbox_env.py``'s, the user it runs as ``sandbox_user.py``'s, its view of
the filesystem ``sandbox_view.py``'s, its pool's cgroup ``sandbox_cgroup.py``'s. Standard library only.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import pwd
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

from kloom.processes import start_process

from . import fork_client, sandbox_launcher, sandbox_view
from .fork_client import ForkedProcess
from .sandbox_cgroup import PoolCgroup, cgroup_controllers, owner_alive
from .sandbox_env import compiler_cache_dir, package_root, python_executable, rank_environment
from .sandbox_launcher import HIDDEN_PATHS, KEPT_CAPABILITIES, Plan, SandboxError
from .sandbox_user import SERVICE_RANK_USER, can_run_as, rank_user, share_with_ranks

#: The script every rank is started through.
LAUNCHER = os.path.abspath(sandbox_launcher.__file__)
#: The entry point of an evaluator's rank, which a fork server runs in a forked process.
RANK_MODULE = "services.worker.evaluator.rank_main"

logger = logging.getLogger(__name__)


def rank_module_path() -> str:
    """``sys.argv[0]`` of a rank started as ``python -m RANK_MODULE``."""
    return os.path.join(os.path.dirname(LAUNCHER), "rank_main.py")

__all__ = [
    "HIDDEN_PATHS", "KEPT_CAPABILITIES", "LAUNCHER", "SERVICE_RANK_USER", "PoolCgroup", "PoolIsolation", "Plan", "SandboxError",
    "compiler_cache_dir", "for_service", "platform", "python_executable", "rank_environment", "share_with_ranks",
]

#: Temporary directories: other pools' directories and other jobs' workloads live there. Covered
#: for a service's ranks (``EvalSettings.private_tmp``); the rank's own directory shows through.
SCRATCH_PATHS = ("/tmp", "/var/tmp")



# What the platform allows ----------------------------------------------------------------------
@dataclass(frozen=True)
class Platform:
    """What this machine lets a pool do, found once per process by a probe in a child process."""

    root: bool
    #: A network namespace of the pool's own (as root; otherwise inside a user namespace).
    netns: bool
    #: Mount namespaces, under the same conditions.
    mountns: bool
    #: cgroup controllers this process may make child groups of: ``{"pids": dir, "memory": dir}``.
    cgroups: dict[str, str] = field(default_factory=dict)
    #: A view of the filesystem per rank (``open_tree``/``move_mount``, Linux 5.2+).
    view: bool = False
    #: ``mount_setattr`` (Linux 5.12+) makes the view read-only in one call.
    mount_setattr: bool = False
    #: A pid namespace per pool with a /proc of its own.
    pidns: bool = False


_platform: Platform | None = None


def platform() -> Platform:
    """The probed ``Platform`` (cached)."""
    global _platform
    if _platform is None:
        try:
            out = subprocess.run(
                [python_executable(), LAUNCHER, "--probe"],
                capture_output=True, text=True, timeout=30, env={"PATH": os.environ.get("PATH", "")},
            )
            found = json.loads(out.stdout or "{}")
        except (OSError, subprocess.TimeoutExpired, ValueError):
            found = {}
        _platform = Platform(
            root=os.geteuid() == 0,
            cgroups=cgroup_controllers() if os.geteuid() == 0 else {},
            **{name: bool(found.get(name)) for name in ("netns", "mountns", "view", "mount_setattr", "pidns")},
        )
    return _platform


# One pool's isolation --------------------------------------------------------------------------
class PoolIsolation:
    """The sandbox of one rank pool: builds each rank's launch command, holds the pool's cgroup
    and shared-memory directory, and releases them (killing whatever is left in the cgroup) when
    the pool is killed. ``role`` (say ``reference`` or ``candidate``) gives the pool compiler caches
    apart from other roles' of the same scope."""

    def __init__(self, settings, world_size: int, device: str, workdir: str, *, role: str = ""):
        self.settings = settings
        self.world_size = world_size
        self.device = device
        self.workdir = workdir
        self.role = role
        self.platform = platform()
        # With a view of its own, the rank user needs no way to the interpreter on the host.
        self.viewed = self.platform.mountns and self.platform.view
        self.user = rank_user(settings.rank_user, check=not self.viewed) if self.platform.root else None
        self.network = bool(settings.isolate_network) and self.platform.netns
        self.namespaces = (["net", "ipc"] if self.network else []) + (["pid"] if self.platform.pidns and self.viewed else [])
        self.cgroup = PoolCgroup.create(self.platform.cgroups, self._pids_max(), self._memory_max())
        self.shm_dir = ""
        self.view: sandbox_view.View | None = None
        self.ns_dir = ""
        #: Whether a rank was forked from a fork server; why one could not be, when it could not.
        self.forked = False
        self.fork_refused = ""
        self.fork_server_pid = 0

    # Launch ------------------------------------------------------------------------------------
    def prepare(self, socket_path: str | None = None) -> None:
        """Protect this process from its ranks; make the pool's shared-memory directory; hand the
        private directory (and the pool's socket in it, where it has one) to the rank user; plan
        the ranks' view."""
        protect_process()
        uid, gid = (self.user.pw_uid, self.user.pw_gid) if self.user else (os.geteuid(), os.getegid())
        if self.user is not None:
            os.chown(self.workdir, uid, gid)
            if socket_path is not None:
                os.chmod(socket_path, 0o660)
                os.chown(socket_path, -1, gid)
        if self.viewed:
            self.shm_dir = _pool_shm_dir(uid, gid)
            s = self.settings
            essentials = _code_paths()
            readable = essentials + list(s.readable_paths) + [p for p in sys.path if os.path.isabs(p)]
            hidden = list(HIDDEN_PATHS) + list(s.hidden_paths)
            # What lies in the service's data stays hidden, unless the rank cannot run without it.
            readable = [p for p in readable if p in essentials or p in s.readable_paths or not _within_any(p, hidden)]
            self.view = sandbox_view.plan_view(
                uid=uid, gid=gid, hide=hidden, scratch=list(SCRATCH_PATHS) + [tempfile.gettempdir()] if s.private_tmp else [],
                readable=readable, writable=[self.workdir, self.cache_dir()], shm=self.shm_dir,
                proc="pid" in self.namespaces, readonly="setattr" if self.platform.mount_setattr else "remount",
                cwd=os.path.realpath(self.workdir),
            )

    def cache_dir(self) -> str:
        return compiler_cache_dir(self.user.pw_uid if self.user else None, [self.settings.cache_scope, self.role])

    def plan(self, rank: int, status_fd: int, parent: int) -> Plan:
        """What rank ``rank``'s launcher applies; ``parent`` is the process that starts it."""
        s = self.settings
        unprivileged_view = self.view is not None and not self.platform.root
        pool_ns = ""
        if self.namespaces or unprivileged_view:
            pool_ns = "new" if rank == 0 else self.ns_dir
            if rank > 0 and not self.ns_dir:
                raise SandboxError("rank 0 has not made the pool's namespaces")
        return Plan(
            status_fd=status_fd,
            # The CUDA driver reserves far more address space than it uses: no RLIMIT_AS there.
            memory_bytes=s.rank_memory_bytes if self.device == "cpu" else 0,
            open_files=s.rank_open_files,
            cpu_seconds=s.rank_cpu_seconds,
            processes=self._pids_max(),
            cgroups=self.cgroup.directories if self.cgroup else [],
            pool_ns=pool_ns,
            namespaces=list(self.namespaces),
            view=dataclasses.asdict(self.view) if self.view is not None else None,
            uid=self.user.pw_uid if self.user else None,
            gid=self.user.pw_gid if self.user else None,
            parent=parent,
        )

    def command(self, rank: int, status_fd: int, argv: list[str]) -> list[str]:
        """The launcher's command line that starts rank ``rank`` as ``argv``."""
        plan = self.plan(rank, status_fd, os.getpid())
        return [python_executable(), LAUNCHER, json.dumps(dataclasses.asdict(plan)), "--", *argv]

    def spawn(self, rank: int, argv: list[str], env: dict[str, str], cwd: str, log_path: str) -> tuple[subprocess.Popen | ForkedProcess, int]:
        """Start rank ``rank`` as ``argv`` through the launcher, in a session of its own, its output
        to ``log_path``; returns the process and the read end of its launcher's status pipe (for
        ``started``, which closes it). A rank of kloom's own entry point (``RANK_MODULE``) is
        forked from a fork server where the settings allow it and one runs (``fork_client``)."""
        status_read, status_write = os.pipe()
        log = open(log_path, "wb")
        try:
            proc = self._forked(rank, argv, env, cwd, log.fileno(), status_write)
            if proc is None:
                proc = start_process(self.command(rank, status_write, argv), env=env, cwd=cwd, log=log, new_session=True,
                                     pass_fds=(status_write,))
        except BaseException:
            os.close(status_read)
            raise
        finally:
            log.close()
            os.close(status_write)
        return proc, status_read

    def _forked(self, rank: int, argv: list[str], env: dict[str, str], cwd: str, log_fd: int, status_fd: int) -> ForkedProcess | None:
        if not self.settings.fork_ranks or argv[1:] != ["-m", RANK_MODULE] or argv[0] != python_executable():
            return None
        try:
            server = fork_client.server_for(env, self.device == "cuda", self.settings.start_timeout_s)
            plan = dataclasses.asdict(self.plan(rank, -1, server.pid))
            proc = server.spawn([rank_module_path()], env, cwd, plan, log_fd, status_fd, new_session=True)
        except fork_client.ForkUnavailable as exc:
            if not self.fork_refused:
                logger.warning("ranks start as new interpreters: %s", exc)
            self.fork_refused = str(exc)
            return None
        self.forked, self.fork_server_pid = True, server.pid
        return proc

    def started(self, rank: int, pid: int, status_read_fd: int, timeout_s: float) -> None:
        """Wait for rank ``rank``'s launcher to report; raises ``SandboxError`` with its reason."""
        report = _read_report(status_read_fd, timeout_s)
        if report != "ok":
            raise SandboxError(f"rank {rank}'s sandbox: {report or 'the launcher exited without a report'}")
        if rank == 0:
            self.ns_dir = f"/proc/{pid}/ns"

    def release(self) -> None:
        """Kill every process left in the pool's cgroup (those that left the process group too);
        remove the pool's shared memory."""
        if self.cgroup is not None:
            self.cgroup.remove()
            self.cgroup = None
        if self.shm_dir:
            shutil.rmtree(self.shm_dir, ignore_errors=True)
            self.shm_dir = ""

    # What is enforced --------------------------------------------------------------------------
    def enforced(self) -> dict[str, str]:
        """Each boundary of this pool and how it is enforced, or why it is not."""
        s = self.settings
        cg = self.cgroup
        as_root = self.platform.root and self.user is None
        view = self.view
        scope = [p for p in (s.cache_scope, self.role) if p]
        return {
            "environment": "scrubbed: passed names only, no credentials",
            "working_directory": "private (mode 700)" + (f", owned by {self.user.pw_name}" if self.user else ""),
            "user": self.user.pw_name if self.user else pwd.getpwuid(os.geteuid()).pw_name,
            "capabilities": "none (unprivileged)" if not as_root else "root without CAP_SYS_ADMIN, CAP_SYS_PTRACE, CAP_SYS_RESOURCE, CAP_DAC_OVERRIDE, ... (bounding set)",
            "network": "own namespace with loopback only" if self.network else "not isolated: " + ("isolate_network is off" if not s.isolate_network else "no namespaces on this platform"),
            "filesystem": (
                "read-only; writable: its own directory, the pool's /dev/shm, its compiler caches" if view else
                "the host's (no mount namespaces with open_tree on this platform)"
            ),
            "hidden_paths": ", ".join(view.hide) if view else "none",
            "covered_paths": ", ".join(view.cover) if view else "none",
            "processes_visible": "its pool's only (pid namespace, own /proc)" if "pid" in self.namespaces else "all of the host's (no pid namespace)",
            "compiler_caches": f"{self.cache_dir()} ({'scope ' + '/'.join(scope) if scope else 'shared by every pool of this user'})",
            "processes": (f"pids cgroup, {cg.pids_max} per pool" if cg and cg.pids_max else
                          f"RLIMIT_NPROC {self._pids_max()} per user" if not as_root and s.rank_processes else "not limited (root ignores RLIMIT_NPROC)"),
            "memory": ", ".join(filter(None, [
                f"RLIMIT_AS {s.rank_memory_bytes} per rank" if self.device == "cpu" and s.rank_memory_bytes else "",
                f"memory cgroup {cg.memory_max} per pool" if cg and cg.memory_max else "",
            ])) or "not limited",
            "open_files": f"RLIMIT_NOFILE {s.rank_open_files}" if s.rank_open_files else "not limited",
            "cpu_time": f"RLIMIT_CPU {s.rank_cpu_seconds} s" if s.rank_cpu_seconds else "per-call deadlines only",
            "writes": (f"the pool's directory, compiler caches and /dev/shm watched: killed past {s.pool_write_bytes >> 20} MiB "
                       f"or {s.pool_write_files} files written" if s.pool_write_bytes or s.pool_write_files else "not limited"),
            "rank_start": ("forked from a fork server (rank code imported once), then sandboxed as above" if self.forked else
                           "a new interpreter" + (f" (no fork server: {self.fork_refused})" if self.fork_refused else
                                                  " (fork_ranks is off)" if not s.fork_ranks else "")),
        }

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


def _code_paths() -> list[str]:
    """What a rank runs: kloom's source tree, the interpreter and its prefixes."""
    paths = {package_root(), sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(python_executable()))}
    return sorted(os.path.realpath(p) for p in paths if os.path.exists(p))


def _within_any(path: str, directories: list[str]) -> bool:
    real = os.path.realpath(path)
    return any(real == d or real.startswith(d.rstrip("/") + "/") for d in (os.path.realpath(x) for x in directories))


def _pool_shm_dir(uid: int, gid: int) -> str:
    """A directory of the pool's own in /dev/shm (its ranks' shared memory: NCCL, gloo), shown
    to them as /dev/shm. Those of pools whose process died are removed first."""
    base = "/dev/shm"
    for entry in os.listdir(base) if os.path.isdir(base) else []:
        if entry.startswith("kloom-pool-") and not owner_alive(entry):
            shutil.rmtree(os.path.join(base, entry), ignore_errors=True)
    path = os.path.join(base, f"kloom-pool-{os.getpid()}-{secrets.token_hex(4)}")
    os.mkdir(path, 0o700)
    if (uid, gid) != (os.geteuid(), os.getegid()):
        os.chown(path, uid, gid)
    return path


def protect_process() -> None:
    """Make this process non-dumpable: processes of the same user (ranks, when they run as the
    worker's user) can then read neither its memory nor its ``/proc/<pid>/environ``, where the
    service's credentials are. Inherited by forked children; reset by exec."""
    sandbox_launcher.prctl(sandbox_launcher.PR_SET_DUMPABLE, 0)




def for_service(settings):
    """``settings`` as the service runs them: a root worker runs workload and candidate code as
    ``SERVICE_RANK_USER`` (the rank's view shows it the interpreter wherever that lives; without
    one, only where that user can run it), unless a rank user is set already."""
    if settings.rank_user or os.geteuid() != 0:
        return settings
    try:
        user = pwd.getpwnam(SERVICE_RANK_USER)
    except KeyError:
        return settings
    found = platform()
    if not (found.mountns and found.view) and not can_run_as(user):
        return settings
    return dataclasses.replace(settings, rank_user=SERVICE_RANK_USER)


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


