"""The ranks' seeding (``rank.seed_everything``): the fast path draws exactly what
``torch.manual_seed`` would make a workload draw, on the CPU and on a GPU."""

import random

import pytest
import torch

from services.worker.evaluator.rank import seed_everything


def _draws(device: str) -> list:
    return [torch.randn(64, 32, device=device), torch.randint(0, 1000, (17,), device=device), torch.rand(3, device=device), random.random()]


def _same(a: list, b: list) -> bool:
    return all(torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y for x, y in zip(a, b))


def test_seeding_draws_what_torch_manual_seed_draws_on_the_cpu():
    seed_everything(1234)
    ours = _draws("cpu")
    torch.manual_seed(1234)
    random.seed(1234)
    assert _same(ours, _draws("cpu"))
    seed_everything(1235)
    assert not _same(ours, _draws("cpu"))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_seeding_draws_what_torch_manual_seed_draws_on_a_gpu():
    torch.zeros(1, device="cuda")  # CUDA started, as in a rank
    seed_everything(99)
    ours = _draws("cuda")
    torch.manual_seed(99)
    random.seed(99)
    assert _same(ours, _draws("cuda"))
