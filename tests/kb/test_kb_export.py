"""An exported kernel is a standalone module: its test passes with plain pytest in a directory
where kloom cannot be imported at all (CPU, gloo, world sizes 1, 2 and 4), and fails for a wrong
kernel."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from io import BytesIO
from pathlib import Path

import pytest
from sqlalchemy import select
from tests.kb.kb_trajectories import Tried, Workload, trajectory

from kb import ingest as kb_ingest
from kb.export import ExportError, export_files, export_kernel, export_zip
from kb.models import KBKernel

DATA = Path(__file__).with_name("data")
WORKLOAD_SOURCE = (DATA / "tp_gather_linear.py").read_text()
KERNEL_SOURCE = (DATA / "tp_gather_linear_kernel.py").read_text()
#: Imported by nothing an exported module may import: every kloom package, and the repository's tests.
BLOCKED = ("kloom", "kb", "agents", "services", "suite", "tests", "migrations")
BLOCKER = f'''
import sys

class _Blocked:
    """Refuses kloom's packages, as on a machine where kloom is not installed."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {BLOCKED!r}:
            raise ModuleNotFoundError(f"{{name}} is not installed here", name=name)
        return None

sys.meta_path.insert(0, _Blocked())
'''


def ingest_real_kernel(sessions, *, keep_source: bool = True) -> str:
    w = Workload(
        name="tp_gather_linear", collectives=("all_gather",), ops=("aten::add", "aten::cat", "aten::mm"),
        input_shapes=((8, 16),), dtypes=("float32",), input_bytes=512, source=WORKLOAD_SOURCE,
    )
    traj = trajectory("job-export", w, [Tried("collective_substitution", {"gather": "into_tensor"}, speedup=1.6)], device="cpu", gpu="")
    step = traj.steps[0]
    step.candidate_code = KERNEL_SOURCE
    # The evaluation is of the code it judged: the knowledge base checks that.
    step.candidate_sha256 = step.evaluation.candidate_sha256 = hashlib.sha256(KERNEL_SOURCE.encode()).hexdigest()
    with sessions() as s:
        kb_ingest.ingest(s, traj, workload_source=WORKLOAD_SOURCE if keep_source else None)
        return s.scalars(select(KBKernel).where(KBKernel.job_id == "job-export")).one().public_id


def run_exported_tests(directory: Path, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    """Plain pytest in ``directory``, in an interpreter that cannot import kloom (nor can its ranks)."""
    blocker = tmp_path / "no_kloom"
    blocker.mkdir(exist_ok=True)
    (blocker / "sitecustomize.py").write_text(BLOCKER)
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("KLOOM_", "PYTHON", "KERNEL_TEST_"))}
    clean.update(PYTHONPATH=str(blocker), **env)
    probe = subprocess.run([sys.executable, "-c", "import kloom"], cwd=directory, env=clean, capture_output=True, text=True)
    assert probe.returncode != 0 and "not installed here" in probe.stderr
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_kernel.py"],
        cwd=directory, env=clean, capture_output=True, text=True, timeout=600,
    )


def imported_roots(source: str) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.slow
def test_exported_kernel_passes_its_own_test_without_kloom(sqlite_db, tmp_path):
    kernel_id = ingest_real_kernel(sqlite_db.sessions)
    out = tmp_path / "exported"
    with sqlite_db.sessions() as s:
        written = export_kernel(s, kernel_id, out)
    assert sorted(p.name for p in written) == ["README.md", "kernel.json", "kernel.py", "test_kernel.py", "workload.py"]
    assert (out / "kernel.py").read_text() == KERNEL_SOURCE and (out / "workload.py").read_text() == WORKLOAD_SOURCE
    meta = json.loads((out / "kernel.json").read_text())
    assert (meta["id"], meta["world_size"], meta["device"], meta["speedup"]) == (kernel_id, 4, "cpu", 1.6)
    assert "1.60x faster" in (out / "README.md").read_text()
    for name in ("kernel.py", "workload.py", "test_kernel.py"):
        assert not imported_roots((out / name).read_text()) & set(BLOCKED), name

    result = run_exported_tests(out, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 passed" in result.stdout  # world sizes 1, 2 and 4

    # The same test catches a kernel that is wrong.
    (out / "kernel.py").write_text((DATA / "tp_gather_linear_wrong.py").read_text())
    result = run_exported_tests(out, tmp_path, KERNEL_TEST_MAX_WORLD_SIZE="1")
    assert result.returncode == 1 and "1 failed" in result.stdout, result.stdout + result.stderr
    assert "Tensor-likes are not close" in result.stdout


def test_export_as_zip_and_errors(sqlite_db):
    kernel_id = ingest_real_kernel(sqlite_db.sessions)
    with sqlite_db.sessions() as s:
        name, data = export_zip(s, kernel_id)
        files = export_files(s, kernel_id)
        with pytest.raises(ExportError, match="no kernel"):
            export_files(s, "k4242")
    archive = zipfile.ZipFile(BytesIO(data))
    assert name == f"kloom_kernel_{kernel_id}.zip"
    assert sorted(archive.namelist()) == sorted(f"kloom_kernel_{kernel_id}/{f}" for f in files)
    assert archive.read(f"kloom_kernel_{kernel_id}/kernel.py").decode() == KERNEL_SOURCE


def test_a_kernel_whose_workload_source_was_not_kept_cannot_be_exported(sqlite_db):
    kernel_id = ingest_real_kernel(sqlite_db.sessions, keep_source=False)
    with sqlite_db.sessions() as s, pytest.raises(ExportError, match="was not kept"):
        export_files(s, kernel_id)
