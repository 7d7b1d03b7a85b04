"""The strategies' runtimes are real modules: each imports on its own (torch and the standard
library only, as a candidate may), and a candidate carries exactly the module's code."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from agents.strategist.codegen import render
from agents.strategist.embed import EmbedError, runtime_file, runtime_source
from agents.strategist.symm_allreduce import symm_allreduce_helper
from kloom.static_check import ALLOWED_MODULES, check_candidate

STRATEGIST = Path(runtime_file("agents.strategist.codegen")).parent  # agents/strategist/
RUNTIMES = sorted(f"agents.strategist.{p.parent.name}.runtime" for p in STRATEGIST.glob("*/runtime.py") if p.parent.name != "overlap")


def _top_names(source: str) -> set[str]:
    names = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return names


def test_every_rewriting_strategy_has_a_runtime():
    assert {m.split(".")[2] for m in RUNTIMES} == {"attention", "bincount", "coalesce", "cuda_graph", "depthwise", "fused_matmul", "gather", "prefetch",
                                                   "row_chunks", "symm_allreduce"}


@pytest.mark.parametrize("module", RUNTIMES)
def test_a_candidate_carries_the_modules_code_and_imports_what_a_candidate_may(module):
    source = runtime_file(module).read_text()
    carried = runtime_source(module)
    docstring = ast.get_docstring(ast.parse(source), clean=False)
    assert docstring and carried.startswith("\n") and source.endswith(carried.lstrip("\n"))
    assert docstring not in carried and "from __future__" not in carried
    assert _top_names(carried) == _top_names(source) and all(n.startswith(("_kl", "_Kl", "_KL")) for n in _top_names(carried))
    for node in ast.walk(ast.parse(carried)):
        if isinstance(node, ast.Import):
            assert all(a.name.split(".")[0] in ALLOWED_MODULES for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert (node.module or "").split(".")[0] in ALLOWED_MODULES and not node.level
    __import__(module)  # and it imports as a module


def test_the_plans_constants_are_set_in_the_carried_code():
    text = symm_allreduce_helper(4096, "two_shot")
    assert "\n_KL_SYMM_MAX_BYTES = 4096\n" in text and '\n_KL_SYMM_ALGO = "two_shot"\n' in text
    module = runtime_source("agents.strategist.symm_allreduce.runtime")
    assert "\n_KL_SYMM_MAX_BYTES = 8 << 20\n" in module and '\n_KL_SYMM_ALGO = "one_shot"\n' in module
    # A quote in a value stays inside the string literal.
    namespace: dict = {}
    exec(compile(symm_allreduce_helper(1, 'x"\nimport os\n"'), "<helper>", "exec"), namespace)
    assert namespace["_KL_SYMM_ALGO"] == 'x"\nimport os\n"' and "os" not in namespace


def test_symmetric_buffers_are_padded_to_aligned_pieces_per_rank():
    """torch's symmetric-memory all-reduces refuse a buffer whose size is not 4-byte aligned (a
    bf16 tensor of odd length failed on 2xH200); the runtime pads it, and two-shot's world parts
    stay aligned too."""
    from agents.strategist.symm_allreduce.runtime import _KL_SYMM_ALIGN_BYTES, _kl_symm_padded

    for numel in (1, 3, 7, 8, 1000, 4097):
        for size in (2, 4):
            for world in (2, 3, 4, 8):
                padded = _kl_symm_padded(numel, size, world)
                assert padded >= numel and padded - numel < world * _KL_SYMM_ALIGN_BYTES // size
                assert padded % world == 0 and (padded // world * size) % _KL_SYMM_ALIGN_BYTES == 0


def test_a_rendered_candidate_passes_the_static_checker():
    reference = (
        "import torch\nimport torch.distributed as dist\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
        "    def forward(self, x):\n        dist.all_reduce(x)\n        return x\n\n\n"
        "def get_inputs():\n    return [torch.randn(4)]\n\n\ndef get_init_inputs():\n    return []\n"
    )
    candidate = render(reference, {"wrapper": "none", "rewrites": ["symm_allreduce"], "symm_max_bytes": 64, "symm_algo": "one_shot"}, mutated_inputs=[0], label="t")
    assert symm_allreduce_helper(64, "one_shot") in candidate
    assert check_candidate(candidate) == []


@pytest.mark.parametrize(
    "module, constants, why",
    [
        ("agents.strategist.bincount.runtime", {"_KL_NOT_THERE": 1}, "assigns no top-level constant"),
        ("agents.strategist.bincount.runtime", {"_KL_FEW_BINS_MAX": [1]}, "must be a finite number"),
        ("agents.strategist.bincount.runtime", {"_KL_FEW_BINS_MAX": float("nan")}, "must be a finite number"),
        ("kernels.softmax.kernel", {}, "not a module of the strategist"),
        ("agents.strategist.nothing.runtime", {}, "has no file"),
    ],
)
def test_bad_requests_are_refused_with_a_reason(module, constants, why):
    with pytest.raises(EmbedError, match=why):
        runtime_source(module, **constants)
