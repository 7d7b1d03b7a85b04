"""How the convolution and pooling launchers run their kernels: with the configuration a caller
gives, the interpreter's one on the CPU, or autotuned over the GPU's, through one autotuner per
kernel and configuration list (launchers that choose their configurations per call share its
measurements and the kernel's compiled variants). A one-configuration autotuner measures nothing:
it runs that configuration. Each autotuner takes the pins a candidate was seeded with where it is
made (``kernels.tuning``). Imports only Triton."""

import triton

from kernels.tuning import adopt_tuned

_AUTOTUNERS: dict[tuple, object] = {}


def autotuned(kernel, configs: list[triton.Config], key: list[str]):
    """``kernel`` autotuned over ``configs``, re-tuned when an argument named in ``key`` changes."""
    configs_key = tuple((tuple(sorted(c.kwargs.items())), c.num_warps, c.num_stages) for c in configs)
    cache_key = (kernel.__name__, configs_key, tuple(key))
    if cache_key not in _AUTOTUNERS:
        _AUTOTUNERS[cache_key] = adopt_tuned(triton.autotune(configs=configs, key=key)(kernel))
    return _AUTOTUNERS[cache_key]


def launch(kernel, grid, args: list, constants: dict, key: list[str], *, on_gpu: bool, config: triton.Config | None,
           cpu_config: triton.Config, gpu_configs) -> None:
    """Run ``kernel`` over ``grid`` (a function of a configuration's meta-parameters) with
    ``config`` where the caller gives one, else ``cpu_config`` under the interpreter, else
    autotuned over ``gpu_configs()`` (re-tuned when an argument named in ``key`` changes)."""
    configs = [config] if config is not None else gpu_configs() if on_gpu else [cpu_config]
    autotuned(kernel, configs, key)[grid](*args, **constants)
