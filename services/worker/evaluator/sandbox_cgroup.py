"""The cgroup of one rank pool: a child group, per controller (pids, memory), of the pool
process's own group, which caps the pool's processes and memory and holds every process it
started, also those that left the ranks' process groups, so that killing the pool kills them all.
Groups left by a pool process that died (a worker killed with SIGKILL) are reaped at the next
pool's start. Standard library only.
"""

from __future__ import annotations

import errno
import os
import secrets
import signal
import time


def cgroup_controllers() -> dict[str, str]:
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


def owner_alive(name: str) -> bool:
    """For a name ``<prefix>-<pid>-<hex>`` made by ``pool_name``: whether process ``pid`` lives
    (names of another shape count as alive: they are not ours to remove)."""
    parts = name.split("-")
    if len(parts) < 3 or not parts[-2].isdigit():
        return True
    try:
        os.kill(int(parts[-2]), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _reap_stale(parent: str) -> None:
    """Remove the groups of pools whose owner process died without removing them (a worker
    killed with SIGKILL): their ranks would otherwise run on."""
    for entry in os.listdir(parent):
        if entry.startswith("pool-") and not owner_alive(entry):
            _remove_group(os.path.join(parent, entry))
