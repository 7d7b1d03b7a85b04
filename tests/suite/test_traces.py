"""Every suite workload's reference runs under the tracer the planner reads: a reference the
tracer cannot follow leaves its jobs planning from an untraced analysis, so a tracer change that
breaks one (a tensor subclass built in the step, a library that imports the compiler) shows here."""

from __future__ import annotations

from pathlib import Path

import pytest

from kloom.suite import workloads
from tests import sweeps

ALL = workloads()


#: CI traces every third workload (``tests/sweeps.py``).
@pytest.mark.parametrize("workload", sweeps.params(ALL, every=3, ids=lambda w: w.name))
def test_every_reference_traces_on_every_rank(run_reference, workload):
    world_size = 2 if 2 in workload.world_sizes else min(workload.world_sizes)
    traces = run_reference.evaluator(world_size).analyze(Path(workload.path), world_size=world_size)
    assert len(traces) == world_size
    for trace in traces:
        assert trace["n_kernels"] > 0 and trace["output_shapes"], (workload.name, trace)
    if any(op.startswith(("c10d::", "_c10d_functional::")) for op in traces[0]["ops"]):
        assert traces[0]["collectives"]
