"""Loading malformed workloads gives a clear error naming the file and the problem."""

from __future__ import annotations

import pytest

from kloom.workload import WorkloadError, inspect_candidate, inspect_workload

VALID = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return x * 2

batch_size = 16

def get_inputs():
    return [torch.randn(batch_size, 8)]

def get_init_inputs():
    return []
"""


def write(tmp_path, text, name="w.py"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_kernelbench_style_file_is_a_world_size_one_workload(tmp_path):
    info = inspect_workload(write(tmp_path, VALID))
    assert info.world_sizes == (1,)
    assert info.family == "single_gpu"
    info.check_world_size(1)
    with pytest.raises(WorkloadError, match="world size 2 is not supported"):
        info.check_world_size(2)


def test_multi_rank_metadata(tmp_path):
    text = VALID + '\nWORLD_SIZES = [2, 4]\nFAMILY = "collectives"\nDESCRIPTION = "d"\ndef roofline(world_size, inputs):\n    return {}\n'
    info = inspect_workload(write(tmp_path, text))
    assert info.world_sizes == (2, 4) and info.family == "collectives" and info.has_roofline


@pytest.mark.parametrize(
    "text, problem",
    [
        ("def broken(:\n", "syntax error at line 1"),
        (VALID.replace("class Model", "class Other"), "no class Model"),
        (VALID.replace("def get_inputs():", "def get_inputs(n):"), "get_inputs() must take no required arguments"),
        (VALID.replace("def get_init_inputs():\n    return []", ""), "no function get_init_inputs()"),
        (VALID + "\nWORLD_SIZES = sizes()\n", "WORLD_SIZES must be a literal"),
        (VALID + "\nWORLD_SIZES = [0, 2]\n", "positive integers"),
        (VALID + "\ndef roofline(world_size):\n    return {}\n", "roofline must be a function roofline(world_size, inputs)"),
    ],
)
def test_malformed_workloads(tmp_path, text, problem):
    path = write(tmp_path, text)
    with pytest.raises(WorkloadError) as err:
        inspect_workload(path)
    assert problem in str(err.value)
    assert str(path) in str(err.value)


def test_non_utf8_and_missing_files(tmp_path):
    path = tmp_path / "latin1.py"
    path.write_bytes("x = 'caf\xe9'\n".encode("latin-1"))
    with pytest.raises(WorkloadError, match="not UTF-8"):
        inspect_workload(path)
    with pytest.raises(WorkloadError, match="no such file"):
        inspect_workload(tmp_path / "missing.py")


def test_candidate_needs_model_new(tmp_path):
    with pytest.raises(WorkloadError, match="no ModelNew"):
        inspect_candidate(write(tmp_path, "import torch\n", "c.py"))
    assert inspect_candidate(write(tmp_path, "import torch.nn as nn\nclass ModelNew(nn.Module):\n    pass\n", "d.py")).sha256
