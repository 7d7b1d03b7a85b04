"""The static checker rejects what cannot be honest and lets ordinary kernels through."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from agents.llm.parse import ParseFailure, read_code
from kloom.static_check import MAX_NESTING, check_candidate, nested_deeper_than

HONEST = '''
import math
import torch
import torch.nn as nn
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm
import triton
import triton.language as tl
from torch.utils.cpp_extension import load_inline

CUDA_SRC = """
__global__ void scale(float* x, float a, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= a; }
"""

try:
    import numpy as np
except ImportError:
    np = None


@triton.jit
def _copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.stream = torch.cuda.Stream() if torch.cuda.is_available() else None
        self.graph = None

    def forward(self, x):
        y = torch.compile(lambda t: t * 2)(x)
        dist.all_reduce(y)
        return y / math.sqrt(2.0)
'''


def test_honest_candidate_passes():
    assert check_candidate(HONEST) == []


@pytest.mark.parametrize(
    "snippet, rule",
    [
        ("import threading", "import"),
        ("import subprocess", "import"),
        ("import ctypes", "import"),
        ("import gc", "import"),
        ("from torch import multiprocessing", "import"),
        ("import torch\ntorch.cuda.synchronize = lambda: None", "patch"),
        ("import torch\nE = torch.cuda.Event\nE.elapsed_time = lambda a, b: 0.0", "patch"),
        ("from torch.cuda import Event\nEvent.record = None", "patch"),
        ("import torch\ntorch.manual_seed(0)", "attribute"),
        ("import torch\nx = torch.random.get_rng_state()", "attribute"),
        ("import os\nos.system('ls')", "os"),
        ("import os\nos.environ['X'] = '1'", "patch"),
        ("x = eval('1')", "builtin"),
        ("f = open('/etc/passwd')", "builtin"),
        ("import torch\ntorch.save({}, 'x')", "file"),
        ("import torch\ntry:\n    y = torch.ones(1)\nexcept Exception:\n    y = None", "swallow"),
        ("try:\n    pass\nexcept:\n    pass", "swallow"),
        ("import torch\ny = getattr(torch, name)", "builtin"),
        # Issue 20's holes: a module reached through a constant-name getattr, attrgetter, reduce.
        ("import torch\nm = getattr(torch, 'sys').modules", "import"),
        ("import torch\ngetattr(torch, 'os').system('ls')", "import"),
        ("import torch\nobjs = getattr(torch, 'gc').get_objects()", "import"),
        ("import operator, torch\nm = operator.attrgetter('sys.modules')(torch)", "builtin"),
        ("from operator import attrgetter\nimport torch\nm = attrgetter('sys')(torch)", "builtin"),
        ("import functools, torch\nm = functools.reduce(getattr, ['sys', 'modules'], torch)", "builtin"),
        ("import torch\ng = getattr\nm = g(torch, 'sys')", "builtin"),
        ("class A:\n    pass\nA.__init__ = None", "patch"),
        ("m = Model()", "reference"),
        ("s = '#include <thread>\\nvoid f() { std::thread t([]{}); t.join(); }'", "native"),
        ("s = 'void f() { void* h = dlopen(\"libc.so\", 0); system(\"ls\"); }'", "native"),
    ],
)
def test_rejections(snippet, rule):
    violations = check_candidate(snippet)
    assert any(v.rule == rule for v in violations), violations


def test_import_error_fallback_is_allowed():
    assert check_candidate("try:\n    import triton\nexcept ImportError:\n    triton = None\n") == []


def test_own_model_class_is_allowed():
    source = "import torch.nn as nn\nclass Model(nn.Module):\n    pass\nclass ModelNew(Model):\n    pass\n"
    assert check_candidate(source) == []


def test_constant_getattr_of_ordinary_attributes_is_allowed():
    assert check_candidate("import torch\nd = getattr(torch, 'float32')\nok = hasattr(torch, 'cuda')\n") == []


@pytest.mark.parametrize("expression", ["+".join(["x"] * 900), "not " * 100_000 + "x", "a" + ".b" * 200_000])
@pytest.mark.parametrize("recursion_limit", [None, 20_000])
def test_a_source_too_deep_to_parse_or_walk_is_rejected_not_a_crash(expression, recursion_limit):
    """A chain of 900 terms parses but is deeper than the checker walks; longer ones are deeper
    than the parser: either is a violation, never an exception out of the checker, whatever the
    process's recursion limit (a test run where something had raised it accepted the 900 terms)."""
    was = sys.getrecursionlimit()
    sys.setrecursionlimit(recursion_limit or was)
    try:
        violations = check_candidate(f"import torch\n\n\ndef f(x, a):\n    return {expression}\n")
    finally:
        sys.setrecursionlimit(was)
    assert [v.rule for v in violations] == ["syntax"] and "nested too deeply" in violations[0].message


def test_the_deepest_source_kloom_holds_is_well_inside_the_nesting_bound():
    """The bound rejects no honest code: every Python file of the repository is far shallower."""
    root = Path(__file__).resolve().parents[1]
    files = [p for top in ("agents", "kernels", "kloom", "services", "suite", "tests") for p in (root / top).rglob("*.py")]
    assert files
    for path in files:
        assert not nested_deeper_than(ast.parse(path.read_text()), MAX_NESTING // 2), path


def test_an_llm_answer_too_deep_to_parse_is_a_parse_failure():
    answer = "```python\nclass ModelNew:\n    y = " + "not " * 100_000 + "x\n```"
    got = read_code(answer)
    assert isinstance(got, ParseFailure) and "nested too deeply" in got.reason
