import torch
import torch.distributed as dist
import torch.nn as nn


class ModelNew(nn.Module):
    """One all_gather_into_tensor into a preallocated buffer and a fused addmm."""

    def __init__(self, hidden, out_per_rank):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_per_rank, hidden) / hidden**0.5)
        self.bias = nn.Parameter(torch.randn(out_per_rank))

    def forward(self, x_shard):
        world = dist.get_world_size()
        gathered = x_shard.new_empty(world * x_shard.shape[0], x_shard.shape[1])
        dist.all_gather_into_tensor(gathered, x_shard)
        return torch.addmm(self.bias, gathered, self.weight.t())
