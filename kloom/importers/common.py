"""What both importers share: the report of an import, the suite directory it writes (with an
index, ``kloom-import.json``, that lists what was imported and what was not, and why), and the
static checks of a problem's source."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import sys
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

#: The index file of an imported suite; ``discover`` skips it (it is not a ``.py`` file).
INDEX_NAME = "kloom-import.json"
INDEX_FORMAT = 1


class ImporterError(ValueError):
    """The checkout or the output directory cannot be used at all (not one problem of it)."""


@dataclass
class ImportedWorkload:
    """A problem written into the suite directory as a workload."""

    name: str
    path: str  # the workload file in the suite directory
    origin: str  # the problem's file in the checkout
    notes: list[str] = field(default_factory=list)


@dataclass
class RejectedProblem:
    """A problem of the checkout that kloom cannot run, and why."""

    origin: str
    reason: str


@dataclass
class ImportReport:
    source: str  # "kernelbench" or "pkb"
    checkout: str
    out_dir: str
    imported: list[ImportedWorkload] = field(default_factory=list)
    rejected: list[RejectedProblem] = field(default_factory=list)
    created_at: str = ""

    def to_dict(self) -> dict:
        return {"format": INDEX_FORMAT, **asdict(self)}


def cache_dir() -> Path:
    return Path(os.environ.get("KLOOM_CACHE_DIR") or Path.home() / ".cache" / "kloom")


def default_suite_dir(name: str) -> Path:
    """Where an imported suite goes unless ``--out`` says otherwise."""
    return cache_dir() / "suites" / name


def prepare_out_dir(out_dir: Path) -> None:
    """Make ``out_dir`` ready for a fresh import: remove what an earlier import wrote there, and
    refuse a directory that holds workloads kloom did not write."""
    out_dir.mkdir(parents=True, exist_ok=True)
    index = out_dir / INDEX_NAME
    if index.is_file():
        try:
            previous = json.loads(index.read_text())
        except ValueError:
            raise ImporterError(f"{index} is not valid JSON; remove the directory or choose another --out") from None
        for entry in previous.get("imported", []):
            # Only ever inside out_dir, and without following links (they point into checkouts).
            path = Path(os.path.abspath(entry.get("path", "")))
            if out_dir.resolve() in path.parents and (path.is_symlink() or path.is_file()):
                path.unlink()
        index.unlink()
    leftovers = list(out_dir.rglob("*.py"))
    if leftovers:
        raise ImporterError(f"{out_dir} already holds {len(leftovers)} workload file(s) that no import wrote (e.g. {leftovers[0]}); choose another --out")
    for sub in sorted((p for p in out_dir.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        if not any(sub.iterdir()):
            sub.rmdir()


def write_index(report: ImportReport) -> Path:
    report.created_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    path = Path(report.out_dir) / INDEX_NAME
    path.write_text(json.dumps(report.to_dict(), indent=2) + "\n")
    return path


def read_index(out_dir: str | os.PathLike) -> dict:
    """The index an import wrote into ``out_dir``."""
    return json.loads((Path(out_dir) / INDEX_NAME).read_text())


def missing_modules(tree: ast.Module) -> list[str]:
    """Top-level modules the file imports at module level that are not installed here."""
    roots: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            roots += [alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.append(node.module.split(".")[0])
    missing = []
    for root in dict.fromkeys(roots):
        if root == "__future__" or root in sys.stdlib_module_names:
            continue
        if importlib.util.find_spec(root) is None:
            missing.append(root)
    return missing


def identifiers(tree: ast.AST) -> set[str]:
    """Every name, attribute and imported module name in the file (comments and strings aside)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.alias):
            found.update(node.name.split("."))
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.update(node.module.split("."))
    return found


#: Identifier fragments that mark a problem kloom cannot run on its machines, and why.
_UNRUNNABLE = (
    ("multimem", "uses NVLink multicast (multimem), which kloom keeps off on shared hosts (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1)"),
    ("multicast", "uses NVLink multicast, which kloom keeps off on shared hosts (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1)"),
    ("nvshmem", "needs NVSHMEM, which kloom's rank processes do not initialise (and run with NVSHMEM_DISABLE_NVLS=1)"),
)
#: Identifier fragments that mark a problem that runs on CUDA only (a note, not a rejection).
_CUDA_ONLY = ("cuda", "symm_mem", "_symmetric_memory", "load_inline", "triton")


def unrunnable_reason(names: set[str]) -> str | None:
    lowered = {n.lower() for n in names}
    for fragment, reason in _UNRUNNABLE:
        if any(fragment in n for n in lowered):
            return reason
    return None


def cuda_only_note(names: set[str]) -> str | None:
    used = sorted({f for f in _CUDA_ONLY if any(f in n.lower() for n in names)})
    return f"runs on CUDA only (uses {', '.join(used)})" if used else None


def link_workload(src: Path, dst: Path) -> None:
    """``dst`` becomes a symbolic link to ``src``: the suite reads the checkout's file at run time."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    if dst.is_symlink() or dst.exists():
        dst.unlink()
    os.symlink(src.resolve(), dst)
