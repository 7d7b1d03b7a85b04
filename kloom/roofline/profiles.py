"""Hardware profiles: built-in ceilings (seeded from measurements on the lent GPU machines) and
profiles saved by ``kloom calibrate``."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from .model import HardwareProfile

# H200 figures were measured on nvidia-h200-x4 (shared/HARDWARE.md): bf16 matmul 8192^3,
# 1 GiB device copy (bytes read + written), 1 GiB peer copy one way, NCCL bus bandwidth.
_BUILTIN = [
    HardwareProfile(
        name="h200",
        description="NVIDIA H200 SXM, NVLink 4 (measured on nvidia-h200-x4)",
        matmul_tflops={"bf16": 780.0, "fp16": 780.0, "fp8": 1560.0, "fp32": 60.0, "tf32": 390.0, "fp64": 60.0},
        hbm_gbps=4200.0,
        link_gbps=395.0,
        collective_busbw_gbps={"all_reduce": 333.0, "all_gather": 323.0, "reduce_scatter": 292.0, "all_to_all": 297.0},
    ),
    HardwareProfile(
        name="h100",
        description="NVIDIA H100 SXM, NVLink 4 (datasheet-derived, HBM as measured on nvidia-h100-x1; link and collectives as on the H200's same NVLink 4)",
        matmul_tflops={"bf16": 760.0, "fp16": 760.0, "fp8": 1520.0, "fp32": 60.0, "tf32": 380.0, "fp64": 60.0},
        hbm_gbps=3000.0,
        link_gbps=395.0,
        collective_busbw_gbps={"all_reduce": 330.0, "all_gather": 323.0, "reduce_scatter": 292.0, "all_to_all": 297.0},
    ),
    HardwareProfile(
        name="cpu",
        description="A generic CPU host (gloo over loopback); calibrate for real figures",
        matmul_tflops={"fp32": 0.1, "bf16": 0.02, "fp16": 0.02, "fp64": 0.05},
        hbm_gbps=10.0,
        link_gbps=5.0,
    ),
]


def builtin_profiles() -> dict[str, HardwareProfile]:
    return {p.name: p for p in _BUILTIN}


def profile_dir() -> Path:
    base = os.environ.get("KLOOM_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "kloom")
    return Path(base) / "profiles"


def load_profile(name: str) -> HardwareProfile:
    """A calibrated profile saved under ``name`` if there is one, else the built-in of that name."""
    path = Path(name)
    if path.suffix == ".json" and path.is_file():
        return HardwareProfile.from_dict(json.loads(path.read_text()))
    saved = profile_dir() / f"{name}.json"
    if saved.is_file():
        return HardwareProfile.from_dict(json.loads(saved.read_text()))
    profiles = builtin_profiles()
    if name not in profiles:
        raise KeyError(f"unknown hardware profile {name!r} (known: {', '.join(sorted(profiles))})")
    return profiles[name]


def save_profile(profile: HardwareProfile, path: str | os.PathLike | None = None) -> Path:
    """Write ``profile`` as JSON (default: ``profile_dir()/<name>.json``, where ``load_profile``
    and ``detect_profile`` find it) and return the path."""
    target = Path(path) if path is not None else profile_dir() / f"{profile.name}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(profile.to_dict(), indent=2) + "\n")
    tmp.replace(target)  # readers never see half a file
    return target


def profile_name_for_gpu(gpu_name: str) -> str:
    """``h200`` / ``h100`` for those GPUs, else a slug of the device name (``nvidia-a100-sxm4-80gb``)."""
    lowered = gpu_name.lower()
    for name in ("h200", "h100"):
        if name in lowered:
            return name
    return re.sub(r"[^a-z0-9]+", "-", lowered).strip("-") or "gpu"


def detect_profile(environment: dict) -> str:
    """The profile name for a rank's reported environment (its GPU name, or the CPU)."""
    gpu = str(environment.get("gpu", ""))
    if not gpu:
        return "cpu"
    name = profile_name_for_gpu(gpu)
    if name in builtin_profiles() or (profile_dir() / f"{name}.json").is_file():
        return name
    return "h100"
