"""``kloom suite import kernelbench``: KernelBench problems as world-size-1 workloads.

A KernelBench checkout keeps its problems in ``KernelBench/level<N>/<id>_<name>.py``, each
defining ``Model``, ``get_inputs`` and ``get_init_inputs``: kloom's workload format already (it is
KernelBench's, extended for several ranks). So the suite directory holds symbolic links to the
checkout's files, named ``level<N>_<id>_<name>.py``: every run reads the checkout as it is, the
agents see the problem's real source, and a workload's hash follows its content.
KernelBench itself loads one file per problem id (the number before the first ``_``); files
without one, second files of the same id, and files kloom cannot use are reported as rejected.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from kloom.workload import WorkloadError, inspect_workload, parse_source, read_source

from .common import (
    ImportedWorkload,
    ImporterError,
    ImportReport,
    RejectedProblem,
    cuda_only_note,
    default_suite_dir,
    identifiers,
    link_workload,
    missing_modules,
    prepare_out_dir,
    unrunnable_reason,
    write_index,
)

_LEVEL_DIR = re.compile(r"^level(\d+)$")
_PROBLEM_ID = re.compile(r"^(\d+)_")


def find_levels(path: str | os.PathLike) -> dict[int, Path]:
    """The ``level<N>`` directories of a KernelBench checkout (its root, or its ``KernelBench/``)."""
    base = Path(path).expanduser().resolve()
    for root in (base / "KernelBench", base):
        levels = {int(m.group(1)): d for d in sorted(root.glob("level*")) if d.is_dir() and (m := _LEVEL_DIR.match(d.name))}
        if levels:
            return levels
    raise ImporterError(f"{base} is not a KernelBench checkout: no KernelBench/level<N>/ directories")


def import_kernelbench(path: str | os.PathLike, level: int | None = None, out_dir: str | os.PathLike | None = None) -> ImportReport:
    """Write a suite directory of the checkout's problems (one level, or all of them) and report
    what was imported and what was rejected."""
    levels = find_levels(path)
    if level is not None:
        if level not in levels:
            raise ImporterError(f"the checkout has no level {level} (it has {', '.join(map(str, sorted(levels)))})")
        levels = {level: levels[level]}
    out = (Path(out_dir).expanduser() if out_dir else default_suite_dir(f"kernelbench-level{level}" if level is not None else "kernelbench")).resolve()
    prepare_out_dir(out)
    report = ImportReport(source="kernelbench", checkout=str(Path(path).expanduser().resolve()), out_dir=str(out))
    for number, directory in sorted(levels.items()):
        target = out if level is not None else out / f"level{number}"
        for problem in _chosen_problems(directory, report):
            _import_one(problem, number, target, report)
    write_index(report)
    return report


def _chosen_problems(directory: Path, report: ImportReport) -> list[Path]:
    """One file per problem id, as KernelBench loads them; the rest go to ``report.rejected``."""
    by_id: dict[int, list[Path]] = {}
    for file in sorted(directory.glob("*.py")):
        match = _PROBLEM_ID.match(file.name)
        if not match:
            report.rejected.append(RejectedProblem(str(file), "no problem id (KernelBench loads only <id>_<name>.py files)"))
            continue
        by_id.setdefault(int(match.group(1)), []).append(file)
    chosen = []
    for pid, files in sorted(by_id.items()):
        # Superseded versions are kept upstream as <id>_<name>_OLD.py: prefer the current one.
        files.sort(key=lambda f: (f.stem.endswith("_OLD"), f.name))
        chosen.append(files[0])
        for other in files[1:]:
            report.rejected.append(RejectedProblem(str(other), f"problem id {pid} is also used by {files[0].name}; KernelBench loads one file per id"))
    return chosen


def _import_one(problem: Path, level: int, target: Path, report: ImportReport) -> None:
    try:
        info = inspect_workload(problem)
        tree = parse_source(read_source(problem), problem)
    except WorkloadError as exc:
        report.rejected.append(RejectedProblem(str(problem), exc.problem))
        return
    if info.world_sizes != (1,):
        report.rejected.append(RejectedProblem(str(problem), f"declares WORLD_SIZES {list(info.world_sizes)}; KernelBench problems run on one GPU"))
        return
    missing = missing_modules(tree)
    if missing:
        report.rejected.append(RejectedProblem(str(problem), f"imports {', '.join(missing)}, which is not installed here"))
        return
    names = identifiers(tree)
    reason = unrunnable_reason(names)
    if reason:
        report.rejected.append(RejectedProblem(str(problem), reason))
        return
    link = target / f"level{level}_{problem.name}"
    link_workload(problem, link)
    notes = [n for n in (cuda_only_note(names),) if n]
    report.imported.append(ImportedWorkload(name=inspect_workload(link).name, path=str(link), origin=str(problem), notes=notes))
