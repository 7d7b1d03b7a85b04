"""cuDNN tuning: offered for steps that run convolutions on a GPU, and a candidate that computes
what the reference computes, with cuDNN's flags (TF32 off) set only around its own forward."""

import torch

from agents.analysis import build_analysis
from agents.strategist.cudnn_tuning import candidate, options
from kloom.static_check import check_candidate
from services.worker.evaluator.tracing import trace_call

REFERENCE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, c_in, c_out):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, 3, padding=1)
        self.conv3d = nn.Conv3d(c_out, 2, 1)

    def forward(self, x):
        y = torch.relu(self.conv(x)) * 2.0 - 1.0
        return self.conv3d(y.unsqueeze(2)).squeeze(2)


def get_inputs():
    return [torch.randn(2, 3, 8, 8)]


def get_init_inputs():
    return [3, 4]
'''


def _namespace(source: str) -> dict:
    namespace: dict = {}
    exec(compile(source, "<candidate>", "exec"), namespace)  # the test's own generated code
    return namespace


def _analysis(device: str):
    ns = _namespace(REFERENCE)
    model, inputs = ns["Model"](*ns["get_init_inputs"]()), ns["get_inputs"]()
    trace = trace_call(model, inputs)
    # What the evaluator's ranks add to a trace (``rank.cmd_analyze``).
    trace.update(
        input_shapes=[list(x.shape) for x in inputs], input_dtypes=[str(x.dtype).replace("torch.", "") for x in inputs],
        input_bytes=sum(x.numel() * x.element_size() for x in inputs), param_bytes=0, mutated_inputs=[], roofline=None,
    )
    return build_analysis([trace], family="x", world_size=1, device=device, baseline=None)


def test_offered_for_convolutions_on_a_gpu_only():
    found = {o.strategy: o for o in options(_analysis("cuda"))}
    assert set(found) == {"cudnn_benchmark", "cudnn_channels_last", "cudnn_benchmark_compiled"}
    assert "autotuner" in found["cudnn_benchmark"].rationale and "TF32 stays off" in found["cudnn_benchmark"].rationale
    assert options(_analysis("cpu")) == []


def test_candidates_compute_the_reference_and_leave_cudnn_as_they_found_it():
    torch.backends.cudnn.benchmark = False
    for params in ({"wrapper": "cudnn", "channels_last": False}, {"wrapper": "cudnn", "channels_last": True}):
        source = candidate(REFERENCE, params, "test")
        assert check_candidate(source) == []
        assert "allow_tf32=False" in source
        ns = _namespace(source)
        torch.manual_seed(0)
        reference = ns["Model"](3, 4)
        torch.manual_seed(0)
        new = ns["ModelNew"](3, 4)
        x = torch.randn(2, 3, 8, 8)
        with torch.no_grad():
            torch.testing.assert_close(new(x), reference(x))
        assert torch.backends.cudnn.benchmark is False
        if params["channels_last"]:
            assert new.conv.weight.is_contiguous(memory_format=torch.channels_last)
            assert new.conv3d.weight.is_contiguous(memory_format=torch.channels_last_3d)
