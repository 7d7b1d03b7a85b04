"""What a batch runs (``kloom.suite.select``), shared by ``kloom bench run`` and the API's
batches, on a small suite folder written here."""

from __future__ import annotations

from kloom import suite

WORKLOAD = '''import torch
import torch.nn as nn

WORLD_SIZES = {sizes}


class Model(nn.Module):
    def forward(self, x):
        return x * 2


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randn(4)]
'''


def _suite(tmp_path):
    for name, sizes in (("a", [1, 2]), ("b", [2]), ("c", [1])):
        (tmp_path / "fam").mkdir(exist_ok=True)
        (tmp_path / "fam" / f"{name}.py").write_text(WORKLOAD.format(sizes=sizes))
    (tmp_path / "fam" / "broken.py").write_text("this is not python\n")
    return tmp_path


def test_every_workload_that_supports_the_world_size_and_what_is_left_out(tmp_path):
    picked = suite.select(_suite(tmp_path), 2)
    assert [w.name for w in picked.chosen] == ["a", "b"]
    assert picked.unsupported == [("c", [1])] and picked.unknown == []
    assert [p.path.endswith("broken.py") for p in picked.problems] == [True]


def test_named_workloads_once_each_in_the_suites_order_with_the_unknown_and_the_unsupported(tmp_path):
    picked = suite.select(_suite(tmp_path), 1, ["c", "nope", "a", "c", "b"])
    assert [w.name for w in picked.chosen] == ["a", "c"]
    assert picked.unknown == ["nope"] and picked.unsupported == [("b", [2])]
    assert suite.select(tmp_path, 1, None).unknown == []
