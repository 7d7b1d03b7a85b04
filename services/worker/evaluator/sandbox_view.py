"""What a rank sees of the filesystem: the mount namespace the launcher builds for it.

Planned in the pool's process (``plan_view``), applied by the launcher (``apply_view``) in the
rank's own mount namespace while it still holds the privileges to mount (as root, or inside the
pool's user namespace), before it drops them:

1. every path the rank must reach (the interpreter, kloom, the job's workload, its own directory,
   the compiler caches) that lies under a covered directory is cloned first (``open_tree``);
2. covers go on, shallowest first: an empty tmpfs over each hidden path (the service's data, the
   local services' sockets in /run, the cgroup tree), over the temporary directories (other pools'
   and jobs' files), and over each directory the rank user could not traverse (a mode-700 home that
   holds the interpreter); each clone is moved back to its own path inside its cover;
3. the pool's own shared-memory directory goes over /dev/shm, a fresh /proc over /proc when the
   pool has a pid namespace of its own;
4. everything is made read-only, recursively (``mount_setattr``, or a remount of each mount where
   the kernel predates it); then the rank's directory, /dev/shm and its caches are writable again.

The host is never changed: no chmod, no directory made outside the rank's namespace. Imports the
standard library only (the launcher runs without the package).
"""

from __future__ import annotations

import ctypes
import os
import re
import stat
from dataclasses import dataclass, field

_libc = ctypes.CDLL(None, use_errno=True)

# Generic syscall numbers (the same on x86_64 and aarch64).
_SYS_OPEN_TREE, _SYS_MOVE_MOUNT, _SYS_MOUNT_SETATTR = 428, 429, 442
_AT_FDCWD = -100
_AT_RECURSIVE = 0x8000
_OPEN_TREE_CLONE = 1
_MOVE_MOUNT_F_EMPTY_PATH = 0x4
_MOUNT_ATTR_RDONLY = 0x1
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_NOATIME, _MS_NODIRATIME, _MS_RELATIME, _MS_STRICTATIME = 1024, 2048, 1 << 21, 1 << 24
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 4096, 0x4000, 1 << 18
#: /proc stays writable: CUDA does not start on a read-only /proc (``cudaGetDeviceCount``: Error
#: 304, measured on an H100 and 2xH200; the NVIDIA driver writes there as a process opens the
#: device). What of it would let a rank that stays root change the kernel's settings is bound
#: read-only over it, as container runtimes do.
PROC_READONLY = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs")
#: Per-mount options a remount must keep (inside a user namespace they are locked).
_KEPT_OPTIONS = {"nosuid": _MS_NOSUID, "nodev": _MS_NODEV, "noexec": _MS_NOEXEC, "noatime": _MS_NOATIME,
                 "nodiratime": _MS_NODIRATIME, "relatime": _MS_RELATIME, "strictatime": _MS_STRICTATIME}


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64), ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


@dataclass
class Hole:
    """A path the rank reaches through the covers: ``source`` shown at ``target``."""

    source: str
    target: str
    writable: bool = False


@dataclass
class View:
    """One rank's filesystem (JSON in the launcher's plan)."""

    #: Empty read-only directories in place of these (the service's data, /run, the cgroup tree).
    hide: list[str] = field(default_factory=list)
    #: Empty directories over these, through which only the holes show (temporary directories,
    #: untraversable homes).
    cover: list[str] = field(default_factory=list)
    holes: list[Hole] = field(default_factory=list)
    #: Mount a fresh /proc (the pool has a pid namespace of its own).
    proc: bool = False
    #: ``setattr`` (Linux 5.12+) or ``remount`` (each mount of /proc/self/mountinfo).
    readonly: str = "setattr"
    #: Where the rank starts (its private directory, now a hole).
    cwd: str = ""

    @classmethod
    def from_dict(cls, data: dict) -> "View":
        return cls(**{**data, "holes": [Hole(**h) for h in data.get("holes", [])]})


# Planning (in the pool's process) --------------------------------------------------------------
def _inside(path: str, directory: str) -> bool:
    return directory == "/" or path == directory or path.startswith(directory.rstrip("/") + "/")


def traversable(path: str, uid: int, gid: int) -> bool:
    """Whether ``uid``/``gid`` (without capabilities) may enter the directory ``path``."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    if st.st_uid == uid:
        return bool(st.st_mode & stat.S_IXUSR)
    if st.st_gid == gid:
        return bool(st.st_mode & stat.S_IXGRP)
    return bool(st.st_mode & stat.S_IXOTH)


def untraversable_ancestor(path: str, uid: int, gid: int) -> str | None:
    """The outermost directory above ``path`` that ``uid`` cannot enter, if any."""
    parts = path.strip("/").split("/")
    for depth in range(1, len(parts)):
        ancestor = "/" + "/".join(parts[:depth])
        if not traversable(ancestor, uid, gid):
            return ancestor
    return None


def plan_view(
    *,
    uid: int,
    gid: int,
    hide: list[str],
    scratch: list[str],
    readable: list[str],
    writable: list[str],
    shm: str = "",
    proc: bool = False,
    readonly: str = "setattr",
    cwd: str = "",
) -> View:
    """The view of a rank running as ``uid``/``gid``: ``hide`` and ``scratch`` covered (a hidden
    file by /dev/null); ``readable`` and ``writable`` reachable through any cover (and through
    untraversable ancestors); ``shm`` (a directory of the pool's own) over /dev/shm."""
    real = lambda paths: [os.path.realpath(p) for p in paths if p and os.path.exists(p)]  # noqa: E731
    readable, writable = real(readable), real(writable)
    hidden = sorted({p for p in real(hide) if os.path.isdir(p)} - {"/"})
    # A hidden file (an SQLite database outside the data directory, with its journals) is covered
    # by /dev/null: it reads empty, and what is written there goes nowhere.
    hidden_files = sorted({f for p in real(hide) if not os.path.isdir(p)
                           for f in (p, p + "-wal", p + "-shm", p + "-journal")
                           if os.path.isfile(f) and not any(_inside(f, d) for d in hidden)})
    cover = set(real(scratch)) - {"/"}
    for path in readable + writable:
        ancestor = untraversable_ancestor(path, uid, gid)
        if ancestor is not None:
            cover.add(ancestor)
    shielded = hidden + sorted(cover)
    holes: list[Hole] = []
    for path in sorted(set(readable)):
        if any(_inside(path, d) and path != d for d in shielded):
            holes.append(Hole(path, path))
    # A writable path is always a mount of its own: the rest goes read-only.
    holes += [Hole(path, path, writable=True) for path in sorted(set(writable))]
    holes += [Hole("/dev/null", path) for path in hidden_files]
    if shm:
        holes.append(Hole(os.path.realpath(shm), os.path.realpath("/dev/shm"), writable=True))
    return View(hide=hidden, cover=sorted(cover), holes=holes, proc=proc, readonly=readonly, cwd=cwd)


# Applying (in the launcher) --------------------------------------------------------------------
def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda s: s.encode() if s is not None else None  # noqa: E731
    _check(_libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)), f"mount {target}")


def open_tree(path: str) -> int:
    flags = _OPEN_TREE_CLONE | _AT_RECURSIVE | os.O_CLOEXEC
    return _check(_libc.syscall(ctypes.c_long(_SYS_OPEN_TREE), ctypes.c_int(_AT_FDCWD), path.encode(), ctypes.c_uint(flags)), f"open_tree {path}")


def _move_mount(fd: int, target: str) -> None:
    _check(
        _libc.syscall(ctypes.c_long(_SYS_MOVE_MOUNT), ctypes.c_int(fd), b"", ctypes.c_int(_AT_FDCWD), target.encode(),
                      ctypes.c_uint(_MOVE_MOUNT_F_EMPTY_PATH)),
        f"move_mount {target}",
    )


def mount_setattr(path: str, *, set_: int = 0, clear: int = 0, recursive: bool = False) -> None:
    attr = _MountAttr(attr_set=set_, attr_clr=clear)
    flags = _AT_RECURSIVE if recursive else 0
    _check(
        _libc.syscall(ctypes.c_long(_SYS_MOUNT_SETATTR), ctypes.c_int(_AT_FDCWD), path.encode(), ctypes.c_uint(flags),
                      ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr))),
        f"mount_setattr {path}",
    )


def cover(path: str, mode: str) -> None:
    _mount("kloom-view", path, "tmpfs", _MS_NOSUID | _MS_NODEV, f"size=1m,nr_inodes=4096,mode={mode}")


def _mountpoint(target: str, directory: bool) -> None:
    """Make ``target`` exist (inside a cover it does not yet): a directory, or an empty file."""
    if os.path.lexists(target):
        return
    os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
    if directory:
        os.mkdir(target, 0o755)
    else:
        os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o444))


def _mounts() -> list[tuple[str, int]]:
    """Each mount point of this namespace with the per-mount flags a remount must keep."""
    found = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            fields = line.split()
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])  # \040: a space
            flags = 0
            for option in fields[5].split(","):
                flags |= _KEPT_OPTIONS.get(option, 0)
            found.append((point, flags))
    return found


def _remount_all_readonly() -> None:
    """Where ``mount_setattr`` is missing: every mount remounted read-only, keeping its flags."""
    for point, flags in _mounts():
        try:
            _mount(None, point, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | flags)
        except OSError as exc:
            # A mount point now covered by another mount cannot be reached; nothing there to make read-only.
            if exc.errno not in (2, 22):  # ENOENT, EINVAL
                raise


def _writable_again(path: str, method: str) -> None:
    if method == "setattr":
        mount_setattr(path, clear=_MOUNT_ATTR_RDONLY)
        return
    flags = next((f for point, f in reversed(_mounts()) if point == path), 0)
    _mount(None, path, None, _MS_REMOUNT | _MS_BIND | flags)


def apply_view(view: View) -> None:
    """Build ``view`` in a new mount namespace of this process (which may still mount)."""
    _unshare_mount_namespace()
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    # Cloned before anything covers their sources (which are then out of sight).
    clones = {id(h): (open_tree(h.source), os.path.isdir(h.source)) for h in view.holes}
    ops: list[tuple[int, int, str, object]] = []
    for path in view.hide:
        ops.append((path.count("/"), 0, path, "hide"))
    for path in view.cover:
        ops.append((path.count("/"), 0, path, "cover"))
    for hole in view.holes:
        ops.append((hole.target.count("/"), 1, hole.target, hole))
    # Shallowest first, a cover before the holes at its depth: a hole deeper than a cover shows
    # through it, and a hidden path inside a hole is hidden in it.
    for _, _, path, op in sorted(ops, key=lambda o: o[:3]):
        if op in ("hide", "cover"):
            if os.path.isdir(path):
                cover(path, "755")
            continue
        fd, directory = clones[id(op)]
        _mountpoint(path, directory)
        _move_mount(fd, path)
        os.close(fd)
    if view.proc:
        # This process is in the pool's pid namespace: a /proc of its own shows the pool's
        # processes only (the host's would let a rank open another pool's /proc/<pid>/mem).
        # Writable (CUDA needs it), with the kernel's settings bound read-only: _writable_proc.
        _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    if view.readonly == "setattr":
        mount_setattr("/", set_=_MOUNT_ATTR_RDONLY, recursive=True)
    else:
        _remount_all_readonly()
    if not any(h.writable and h.target == "/proc" for h in view.holes):  # else writable as asked, whole
        _writable_proc(view.readonly)
    for hole in view.holes:
        if hole.writable:
            _writable_again(hole.target, view.readonly)
    if view.cwd:
        os.chdir(view.cwd)


def _writable_proc(method: str) -> None:
    """/proc writable again (its own mount only), with ``PROC_READONLY`` bound read-only over it."""
    _writable_again("/proc", method)
    for path in PROC_READONLY:
        if not os.path.exists(path):
            continue
        _mount(path, path, None, _MS_BIND | _MS_REC)
        if method == "setattr":
            mount_setattr(path, set_=_MOUNT_ATTR_RDONLY, recursive=True)
        else:
            flags = next((f for point, f in reversed(_mounts()) if point == path), 0)
            _mount(None, path, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | flags)


def _unshare_mount_namespace() -> None:
    _check(_libc.unshare(0x00020000), "unshare mount namespace")
