import torch
import torch.distributed as dist
import torch.nn as nn


class ModelNew(nn.Module):
    """Forgets the bias: wrong on every rank."""

    def __init__(self, hidden, out_per_rank):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_per_rank, hidden) / hidden**0.5)
        self.bias = nn.Parameter(torch.randn(out_per_rank))

    def forward(self, x_shard):
        gathered = x_shard.new_empty(dist.get_world_size() * x_shard.shape[0], x_shard.shape[1])
        dist.all_gather_into_tensor(gathered, x_shard)
        return gathered @ self.weight.t()
