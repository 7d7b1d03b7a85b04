"""The user a root worker runs its ranks as, whether that user can run kloom, and handing it the
job's files. Standard library only."""

from __future__ import annotations

import os
import pwd
import subprocess

from .sandbox_env import package_root, python_executable
from .sandbox_launcher import SandboxError

#: The user the service runs ranks as when its worker is root (``EvalSettings.rank_user``).
SERVICE_RANK_USER = "nobody"


def rank_user(name: str, check: bool = True) -> pwd.struct_passwd | None:
    """The user ranks run as, when this process is root and one is set (``root``: none). Unless
    the ranks get a view of their own (which shows them the interpreter), ``check`` that the
    user can run it."""
    if not name or name == "root":
        return None
    try:
        user = pwd.getpwuid(int(name)) if name.isdigit() else pwd.getpwnam(name)
    except KeyError:
        raise SandboxError(f"rank user {name!r} does not exist on this machine") from None
    if user.pw_uid == 0:
        return None
    if check and not can_run_as(user):
        raise SandboxError(f"rank user {name!r} cannot run {python_executable()} or read kloom's packages")
    return user


_runnable: dict[int, bool] = {}


def can_run_as(user: pwd.struct_passwd) -> bool:
    """Whether ``user`` can start this interpreter and read kloom and its packages on the host
    (cached)."""
    if user.pw_uid not in _runnable:
        check = "import os, sys; [os.listdir(p) for p in sys.path if os.path.isdir(p)]"
        try:
            done = subprocess.run(
                [python_executable(), "-c", check], user=user.pw_uid, group=user.pw_gid, extra_groups=[],
                cwd="/", env={"PYTHONPATH": package_root()}, capture_output=True, timeout=30,
            )
            _runnable[user.pw_uid] = done.returncode == 0
        except (OSError, subprocess.SubprocessError):
            _runnable[user.pw_uid] = False
    return _runnable[user.pw_uid]


def share_with_ranks(paths: list[str], settings) -> None:
    """Let the ranks read a root worker's private files (the job's workload): hand them to the
    rank user's group, readable by it only."""
    user = rank_user(settings.rank_user, check=False) if os.geteuid() == 0 else None
    if user is None:
        return
    for path in paths:
        os.chown(path, -1, user.pw_gid)
        os.chmod(path, 0o750 if os.path.isdir(path) else 0o640)
