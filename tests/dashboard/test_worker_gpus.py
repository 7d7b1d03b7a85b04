"""The Workers page's GPU columns come from the heartbeat: each beat adds what NVML says each GPU
is doing now (utilisation, memory used, temperature, power) to the worker's inventory."""

from __future__ import annotations

import pytest
import torch

from services.worker.heartbeat import gpu_inventory, with_usage


def test_without_nvml_the_inventory_goes_out_unchanged():
    listed = [{"status": "ok", "index": 0, "name": "a GPU this machine does not have", "memory_total_gib": 80.0}]
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        pytest.skip("this machine has NVML; the GPU test below covers it")
    except Exception:  # noqa: BLE001 - no library or no driver: the case under test
        pass
    assert with_usage(listed) == listed
    assert with_usage([]) == []


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA GPUs and NVML")
def test_each_gpu_reports_its_utilisation_memory_and_time_of_reading():
    gpus = gpu_inventory()
    assert gpus, "CUDA is available but NVML listed no GPU"
    sampled = with_usage(gpus)
    assert [g["index"] for g in sampled] == [g["index"] for g in gpus]
    for gpu in sampled:
        assert 0 <= gpu["utilization_pct"] <= 100
        assert 0 <= gpu["memory_used_gib"] <= gpu["memory_total_gib"]
        assert gpu["sampled_at"]
