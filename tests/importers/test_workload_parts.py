"""The computation a candidate copies from a workload (kloom/workload_parts.py): the harness stays
out, what Model needs stays in, and locals that shadow a refused builtin are renamed without
changing what the code computes."""

from __future__ import annotations

import torch

from kloom.static_check import check_candidate
from kloom.workload_parts import candidate_base, rename_shadowed_builtins

WORKLOAD = '''\
from __future__ import annotations
import os as _os
import importlib

import torch

SCALE = 3.0
_builder = importlib.import_module("json")
torch.set_printoptions(precision=6)


def _helper(input, k=SCALE):
    out = input * k
    return out


class Model(torch.nn.Module):
    def forward(self, input):
        return _helper(input) + 1


def get_inputs():
    torch.manual_seed(int(_os.environ.get("SEED", "0")))
    return [torch.randn(4)]


def get_init_inputs():
    return []
'''


def _run(source: str, x: torch.Tensor) -> torch.Tensor:
    namespace: dict = {}
    exec(compile(source, "<candidate>", "exec"), namespace)  # noqa: S102 - test of generated code
    return namespace["Model"]()(x)


def test_the_harness_is_left_out_and_the_computation_kept():
    base = candidate_base(WORKLOAD)
    assert "get_inputs" not in base and "get_init_inputs" not in base
    assert "importlib" not in base and "_builder" not in base and "_os" not in base
    assert "SCALE = 3.0" in base and "def _helper" in base and "class Model" in base
    assert "torch.set_printoptions(precision=6)" in base  # a statement with an effect stays
    assert base.startswith("from __future__ import annotations")
    assert check_candidate(WORKLOAD) and check_candidate(base) == []
    x = torch.randn(4)
    torch.testing.assert_close(_run(base, x), x * 3.0 + 1)


def test_shadowing_locals_are_renamed_consistently():
    source = "def f(input, n):\n    input = input + n\n    return (lambda compile: compile * 2)(input)\n"
    renamed = rename_shadowed_builtins(source)
    assert "input" not in renamed.replace("input_", "") and "compile" not in renamed.replace("compile_", "")
    ns: dict = {}
    exec(renamed, ns)  # noqa: S102
    assert ns["f"](1, 2) == 6


def test_a_parameter_passed_by_keyword_keeps_its_name():
    source = "def f(input):\n    return input\n\n\ndef g(x):\n    return f(input=x)\n"
    assert rename_shadowed_builtins(source) == source
    # A library call's keyword names the library's parameter: the module's own function is renamed.
    lib = "import torch\n\n\ndef f(input):\n    return torch.add(input=input, other=1)\n"
    assert "def f(input_):" in rename_shadowed_builtins(lib)
