"""A rank's environment: the host's variables it may inherit (never credentials), what every rank
gets forced, its private home, and the compiler caches that outlive a pool. Standard library only.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile

from kloom.processes import NO_MULTICAST

#: Environment variables a rank inherits; everything else (API keys, database URLs, LLM
#: credentials) stays behind.
_PASS_PREFIXES = ("CUDA_", "NCCL_", "TORCH_", "TORCHINDUCTOR_", "TRITON_", "NVIDIA_", "OMP_", "MKL_", "GLOO_", "NVSHMEM_")
_PASS_NAMES = ("PATH", "LANG", "LC_ALL", "LD_LIBRARY_PATH", "PYTHONPATH", "CC", "CXX", "TERM", "TZ", "VIRTUAL_ENV")
#: Names that look like credentials stay behind even under a passed prefix (``TORCH_HUB_TOKEN``).
_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH")
#: Set in every rank: NVLink multicast stays off on shared hosts; one compile thread so that
#: torch.compile starts no worker processes (a live child process is a reason to reject).
_FORCED = {
    **NO_MULTICAST,
    "TORCHINDUCTOR_COMPILE_THREADS": "1",
    # Triton's autotuner keeps its timings in the compiler cache (which outlives a pool): each
    # candidate embeds kloom's kernels anew, and every one (the plain replay, the compiled one,
    # the graph, a later job on the same shapes) timed every configuration of every kernel again.
    "TRITON_CACHE_AUTOTUNING": "1",
    "GLOO_SOCKET_IFNAME": "lo",
    "NCCL_SOCKET_IFNAME": "lo",
    "PYTHONUNBUFFERED": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
}


def rank_environment(workdir: str, extra: dict[str, str], cache_dir: str | None = None) -> dict[str, str]:
    """The whole environment of a rank: passed names only, credentials never, plus ``extra``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if (k in _PASS_NAMES or any(k.startswith(p) for p in _PASS_PREFIXES))
        and not any(word in k.upper() for word in _SECRET_WORDS)
    }
    # The package must stay importable from the private working directory.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root(), env.get("PYTHONPATH", "")) if p)
    env.update(_FORCED)
    env["HOME"] = workdir
    env["TMPDIR"] = workdir
    # Compiler caches outlive a pool, so that a rebuilt pool does not compile everything again;
    # always these (the only writable ones in a rank's view), whatever the host's variables say.
    cache = cache_dir or compiler_cache_dir()
    env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(cache, "inductor")
    env["TRITON_CACHE_DIR"] = os.path.join(cache, "triton")
    env["TORCH_EXTENSIONS_DIR"] = os.path.join(cache, "extensions")
    env.update(extra)
    return env


def compiler_cache_dir(uid: int | None = None, scope: list[str] | None = None) -> str:
    """The compiler caches of ranks running as ``uid`` (default: this process's user), in a
    directory of their ``scope`` (say, the job's owner and the pool's role) when one is given."""
    own = uid is None or uid == os.geteuid()
    base = os.environ.get("KLOOM_CACHE_DIR") or (os.path.join(os.path.expanduser("~"), ".cache", "kloom") if own else tempfile.gettempdir())
    path = base if own else os.path.join(base, f"kloom-cache-{uid}")
    for part in [""] + [re.sub(r"[^A-Za-z0-9_.-]", "_", s)[:80] for s in scope or [] if s]:
        path = os.path.join(path, part) if part else path
        os.makedirs(path, mode=0o700, exist_ok=True)
        if not own:
            os.chown(path, uid, -1)
    return path


def python_executable() -> str:
    return sys.executable


def package_root() -> str:
    """The directory that holds kloom's packages (``kloom``, ``services``, ``agents``)."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
