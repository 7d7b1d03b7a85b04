"""A workload whose get_inputs makes its process group on every call (as ParallelKernelBench's
input builder does): the judge draws inputs for every trial and timed call, and each group made
would be a communicator set up inside a timed call. It refuses a second group."""

import torch
import torch.distributed as dist
import torch.nn as nn

WORLD_SIZES = [2]
_HANDED = []  # the distinct groups get_inputs was given by new_group in this process


class Model(nn.Module):
    def forward(self, x, group):
        y = x * 2
        dist.all_reduce(y, group=group)
        return y


def get_init_inputs():
    return []


def get_inputs():
    group = dist.new_group(ranks=list(range(dist.get_world_size())))
    if all(g is not group for g in _HANDED):
        _HANDED.append(group)
    if len(_HANDED) > 1:
        raise RuntimeError(f"get_inputs was given {len(_HANDED)} different process groups for the same ranks")
    return [torch.randn(32, 16), group]
