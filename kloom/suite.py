"""The benchmark suite: a directory tree of workload files, one per workload, grouped by family.

kloom's own suite lives in ``suite/`` at the top of the repository; an imported suite (see
``kloom suite import``) is any directory of workload files. Discovery reads files statically
(``kloom.workload.inspect_workload``) and never runs them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .workload import WorkloadError, WorkloadInfo, inspect_workload

BUILTIN_SUITE = Path(__file__).resolve().parent.parent / "suite"


@dataclass(frozen=True)
class SuiteProblem:
    """A file in a suite directory that is not a usable workload, and why."""

    path: str
    reason: str


def resolve_suite(name_or_path: str | Path | None) -> Path:
    """``None`` or ``"kloom"``: the built-in suite; otherwise a directory of workload files."""
    if name_or_path in (None, "kloom", "builtin"):
        return BUILTIN_SUITE
    path = Path(name_or_path).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(f"no suite directory at {path}")
    return path


def discover(root: str | Path | None = None) -> tuple[list[WorkloadInfo], list[SuiteProblem]]:
    """Every workload under ``root`` (sorted by family, then name), and the files that are not."""
    base = resolve_suite(root)
    found: list[WorkloadInfo] = []
    problems: list[SuiteProblem] = []
    for path in sorted(base.rglob("*.py")):
        if path.name.startswith("_") or any(part.startswith((".", "_")) for part in path.relative_to(base).parts[:-1]):
            continue
        try:
            found.append(inspect_workload(path))
        except WorkloadError as exc:
            problems.append(SuiteProblem(str(path), exc.problem))
    names: dict[str, str] = {}
    for info in found:
        if info.name in names:
            problems.append(SuiteProblem(info.path, f"duplicate workload name {info.name!r} (also {names[info.name]})"))
        names.setdefault(info.name, info.path)
    found.sort(key=lambda i: (i.family, i.name))
    return found, problems


def workloads(root: str | Path | None = None, family: str | None = None, world_size: int | None = None) -> list[WorkloadInfo]:
    found, _ = discover(root)
    return [
        w
        for w in found
        if (family is None or w.family == family) and (world_size is None or world_size in w.world_sizes)
    ]


@dataclass
class Selection:
    """A batch's workloads: those of the suite (or of ``names``) that support the world size, in
    the suite's order; the named ones the suite lacks; those left out for their world sizes
    (name, the sizes they support); and the suite's files that are not workloads."""

    chosen: list[WorkloadInfo]
    unknown: list[str]
    unsupported: list[tuple[str, list[int]]]
    problems: list[SuiteProblem]


def select(root: str | Path | None, world_size: int, names: list[str] | tuple[str, ...] | None = ()) -> Selection:
    """What a batch at ``world_size`` runs: every workload of the suite that supports it, or,
    with ``names``, the named ones (each once). The CLI's batch runner and the API's batches
    both start here; each says in its own way what is left out."""
    found, problems = discover(root)
    wanted = list(dict.fromkeys(names or ()))
    known = {w.name for w in found}
    named = set(wanted)
    considered = [w for w in found if not named or w.name in named]
    return Selection(
        chosen=[w for w in considered if world_size in w.world_sizes],
        unknown=[n for n in wanted if n not in known],
        unsupported=[(w.name, list(w.world_sizes)) for w in considered if world_size not in w.world_sizes],
        problems=problems,
    )


def find(name: str, root: str | Path | None = None) -> WorkloadInfo:
    """A workload by name (or by path, for a file outside the suite)."""
    candidate = Path(name)
    if candidate.suffix == ".py" and candidate.is_file():
        return inspect_workload(candidate)
    for info in workloads(root):
        if info.name == name:
            return info
    known = ", ".join(sorted(w.name for w in workloads(root))) or "none"
    raise KeyError(f"no workload named {name!r} in the suite at {resolve_suite(root)} (known: {known})")
