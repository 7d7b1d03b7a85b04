"""The benchmark driver's report, on a machine without the GPUs it needs: world sizes it cannot run
are reported as skipped (never as results), and a record is rendered with its speedups over torch
+ NCCL and the fraction of each floor that the best kloom configuration reaches."""

from __future__ import annotations

import json

import pytest

from kernels.comm import bench
from kernels.comm.bench_common import Measured, fractions


def test_world_sizes_beyond_the_machine_are_reported_as_skipped(tmp_path, monkeypatch):
    monkeypatch.setattr("torch.cuda.device_count", lambda: 0)
    assert bench.main(["--world-sizes", "2", "4", "--out", str(tmp_path)]) == 1
    report = json.loads((tmp_path / "comm_bench.json").read_text())
    assert report["records"] == []
    assert report["problems"] == ["world size 2 skipped: this machine has 0 GPU(s)", "world size 4 skipped: this machine has 0 GPU(s)"]
    assert "world size 4 skipped" in (tmp_path / "comm_bench.md").read_text()


def test_a_record_shows_speedups_and_the_fraction_of_each_floor():
    m = Measured("ag_gemm", "8192^3", 4, {"k": 8192}, ms={"torch+nccl": 1.8, "torch_fused_symm": 1.6, "kloom:triton_ce": 1.5, "kloom:cublas_ce": 1.55})
    m.max_error = {name: 0.01 for name in m.ms}
    m.floor_ms = {"overlap": 1.5, "model": 1.2, "compute_alone": 1.5, "comm_alone": 0.4}
    m.best_ours = "kloom:triton_ce"
    assert fractions(m) == pytest.approx({"overlap": 1.0, "model": 0.8})
    text = bench.markdown({"command": "x", "machine": "y", "problems": [], "records": [m.to_dict()]})
    assert "| kloom:triton_ce | 1.5000 | 1.200x |" in text
    assert "overlap 1.000, model 0.800" in text
