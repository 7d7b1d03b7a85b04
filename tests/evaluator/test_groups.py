"""services/worker/evaluator/groups.py: the groups a workload makes while drawing inputs are made
once per process (gloo, one process, world size 1)."""

from __future__ import annotations

from datetime import timedelta

import pytest
import torch.distributed as dist

from services.worker.evaluator import groups
from services.worker.evaluator.groups import reused_groups


@pytest.fixture
def world(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    groups._MADE.clear()
    yield
    groups._MADE.clear()
    dist.destroy_process_group()


def test_the_same_ranks_and_options_get_the_same_group_within_and_a_new_one_outside(world):
    original = dist.new_group, dist.distributed_c10d.new_group
    with reused_groups():
        first = dist.new_group(ranks=[0])
        again = dist.distributed_c10d.new_group([0])  # positional, through the module
        longer = dist.new_group(ranks=[0], timeout=timedelta(seconds=99))
    outside = dist.new_group(ranks=[0])
    assert again is first
    assert longer is not first
    assert outside is not first
    assert (dist.new_group, dist.distributed_c10d.new_group) == original


def test_options_it_cannot_compare_make_their_own_group(world):
    with reused_groups():
        a = dist.new_group(ranks=[0], pg_options=dist.ProcessGroupGloo._Options())
        b = dist.new_group(ranks=[0], pg_options=dist.ProcessGroupGloo._Options())
        c = dist.new_group(ranks=[0])
        assert dist.new_group(ranks=[0]) is c
    assert a is not b


def test_a_new_default_group_means_new_groups(tmp_path):
    groups._MADE.clear()
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/one", rank=0, world_size=1)
    with reused_groups():
        first = dist.new_group(ranks=[0])
    dist.destroy_process_group()
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/two", rank=0, world_size=1)
    try:
        with reused_groups():
            second = dist.new_group(ranks=[0])
            assert dist.new_group(ranks=[0]) is second
        assert second is not first
    finally:
        groups._MADE.clear()
        dist.destroy_process_group()


def test_without_a_process_group_nothing_is_patched():
    assert not dist.is_initialized()
    before = dist.new_group
    with reused_groups():
        assert dist.new_group is before
