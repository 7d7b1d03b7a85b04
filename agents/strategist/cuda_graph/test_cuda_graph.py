"""The CUDA-graph runtime: the parts that run without a GPU (the key of an input signature, the
input copies) on the CPU, the capture and replay against eager on a GPU; and the candidate text
carries the module's code, which the static checker accepts."""

import pytest
import torch

from agents.strategist.cuda_graph import runtime as rt
from agents.strategist.embed import runtime_source


def test_the_key_tells_signatures_apart_and_the_copies_are_new_tensors():
    a, b = torch.randn(4, 3), torch.randn(4, 3)
    assert rt._kloom_key([a, 2]) == rt._kloom_key([b, 2])
    assert rt._kloom_key([a, 2]) != rt._kloom_key([a.t(), 2]) != rt._kloom_key([a, 3])
    assert rt._kloom_key([a]) != rt._kloom_key([a.double()])
    copies = rt._kloom_clone_inputs([a, "x"])
    assert copies[1] == "x" and torch.equal(copies[0], a) and copies[0].data_ptr() != a.data_ptr()


def test_off_a_gpu_the_graphed_call_is_the_function_itself():
    graphs = {}
    calls = []

    def step(x):
        calls.append(x)
        return x * 2

    x = torch.randn(4)
    assert torch.equal(rt._kloom_graphed(graphs, step, [x], 3, []), x * 2)
    assert len(calls) == 1 and graphs == {}, "no warm-up and no capture on the CPU"


def test_the_candidate_carries_the_module_without_its_docstring():
    text = runtime_source("agents.strategist.cuda_graph.runtime")
    assert "def _kloom_capture(" in text and "def _kloom_replay(" in text and "def _kloom_graphed(" in text and "This module is the runtime" not in text
    compile(text, "<candidate>", "exec")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_replay_matches_eager_and_writes_back_mutated_inputs():
    def step(x, y):
        y.add_(1)
        return torch.relu(x @ y), x.sum()

    x, y = torch.randn(64, 32, device="cuda"), torch.randn(32, 16, device="cuda")
    entry = rt._kloom_capture(step, [x, y.clone()], warmup=2)
    for _ in range(3):
        x, y = torch.randn(64, 32, device="cuda"), torch.randn(32, 16, device="cuda")
        want_y = y.clone()
        want = step(x, want_y)
        got = rt._kloom_replay(entry, [x, y], mutated=[1])
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(y, want_y)
