import torch
import torch.distributed as dist
import torch.nn as nn


class ModelNew(nn.Module):
    """Same computation; the all-gather goes through a list of tensors and one concatenation."""

    def __init__(self, hidden, ffn_per_rank):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(ffn_per_rank, hidden) / hidden**0.5)

    def forward(self, x_shard):
        parts = [torch.empty_like(x_shard) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, x_shard)
        return torch.cat(parts) @ self.weight.t().to(x_shard.dtype)
