"""A kernel from the knowledge base as a standalone module: ``kernel.py`` (``ModelNew``), the
``workload.py`` it was found on, ``test_kernel.py`` (checks one against the other on 1..N ranks
with plain pytest, without kloom), ``kernel.json`` (provenance and measurements) and a README.
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

from sqlalchemy.orm import Session

from .models import KBKernel
from .records import KernelDetail
from .store import get_kernel, get_workload

_TEST_SOURCE = Path(__file__).with_name("exported_test.py")


class ExportError(LookupError):
    """The kernel is unknown, or its workload's source was not kept."""


def kernel_metadata(kernel: KBKernel) -> dict:
    """What ``kernel.json`` says: where the kernel came from and what it measured (the kernel's
    record without its code, which ``kernel.py`` holds)."""
    meta = KernelDetail.of(kernel).to_json()
    del meta["code"], meta["score"]
    return meta


def _readme(kernel: KBKernel) -> str:
    where = kernel.gpu or kernel.device
    floor = f", {100 * kernel.fraction_of_floor:.0f}% of its roofline floor" if kernel.fraction_of_floor else ""
    return (
        f"# {kernel.workload_name}: kernel {kernel.public_id}\n\n"
        f"`ModelNew` in `kernel.py` computes what `Model` in `workload.py` computes. kloom found it in job "
        f"`{kernel.job_id}` (step {kernel.step_index}, strategy `{kernel.strategy}`), where it ran "
        f"{kernel.speedup:.2f}x faster than the reference at world size {kernel.world_size} on {where} "
        f"({kernel.candidate_ms:.4g} ms vs {kernel.reference_ms:.4g} ms{floor}).\n\n"
        "Check it with plain pytest (torch and pytest are all it needs):\n\n"
        "    pytest -q test_kernel.py\n\n"
        "It runs the reference and the kernel on every world size the workload supports up to "
        f"{kernel.world_size}, with gloo on the CPU or NCCL on GPUs, and compares every rank's outputs. "
        "`KERNEL_TEST_DEVICE=cpu|cuda` and `KERNEL_TEST_MAX_WORLD_SIZE=N` change where and how far.\n"
        "A timing measured on one machine and workload does not carry over: measure it on yours.\n"
    )


def export_files(session: Session, kernel_id: str | int) -> dict[str, str]:
    """The exported module's files, by name."""
    kernel = get_kernel(session, kernel_id)
    if kernel is None:
        raise ExportError(f"no kernel {kernel_id} in the knowledge base")
    workload = get_workload(session, kernel.workload_sha256)
    if workload is None or workload.source is None:
        raise ExportError(f"the source of workload {kernel.workload_name} was not kept, so {kernel.public_id} cannot be exported")
    return {
        "kernel.py": kernel.code,
        "workload.py": workload.source,
        "test_kernel.py": _TEST_SOURCE.read_text(),
        "kernel.json": json.dumps(kernel_metadata(kernel), indent=2, sort_keys=True) + "\n",
        "README.md": _readme(kernel),
    }


def export_kernel(session: Session, kernel_id: str | int, out_dir: str | Path) -> list[Path]:
    """Write the kernel's standalone module into ``out_dir`` (created if needed)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in export_files(session, kernel_id).items():
        path = out / name
        path.write_text(text)
        written.append(path)
    return written


def export_zip(session: Session, kernel_id: str | int) -> tuple[str, bytes]:
    """The standalone module as a zip archive: (file name, bytes), files under one folder."""
    files = export_files(session, kernel_id)
    folder = f"kloom_kernel_{json.loads(files['kernel.json'])['id']}"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in files.items():
            archive.writestr(f"{folder}/{name}", text)
    return f"{folder}.zip", buffer.getvalue()
