"""Autotuning choices carried from one job to the next. Triton's autotuner times every
configuration of a kernel for each new key (the sizes and dtypes it is keyed on), compiling each
one first; kloom's kernels take sizes as compile-time constants, so a network of many distinct
shapes spends minutes there. What it chose is read from a candidate's module after the judge has
timed it (``tuned_choices``, called by the evaluator's candidate rank), kept by the knowledge base
with the kernel, and pinned in a later candidate on the same GPU (``seed_tuned``, which a candidate
calls with its autotuned kernels), whose autotuner
then neither times nor compiles the other configurations for a key it was measured on.

A pin names a kernel by its function's name and a configuration by its meta-parameters, warps and
stages, and is applied only where the autotuner's own configurations hold that configuration: it
chooses among the kernel's configurations and nothing else. Autotuners made later, one per
configuration list (``kernels.conv.launch``, ``kernels.gemm.matmul``), take their pins where they
are made (``adopt_tuned``). Plain Python, embedded into candidates with the kernels."""

from triton.runtime.autotuner import Autotuner

#: Pins not yet applied, by kernel name: {key: pin}.
_KL_TUNED_PINS: dict = {}
#: At most this many choices are read from a module, or pinned in one.
TUNED_MAX = 512


def _tuned_autotuners(namespace: dict) -> list:
    """The autotuners a module holds: at its top level, or in a dict at its top level (those
    made per configuration list)."""
    found = []
    for value in list(namespace.values()):
        inner = list(value.values()) if isinstance(value, dict) else [value]
        found.extend(t for t in inner if isinstance(t, Autotuner))
    return found


def tuned_choices(namespace: dict) -> list:
    """What the autotuners of a module chose so far: one plain record per kernel and key,
    ``{"kernel", "key", "kwargs", "num_warps", "num_stages"}`` (configurations with a pre-hook,
    which cannot be written down, are left out)."""
    out = []
    for tuner in _tuned_autotuners(namespace):
        if len(tuner.configs) < 2:
            continue  # nothing was chosen: the one configuration runs
        for key, config in list(tuner.cache.items()):
            if config.pre_hook is None and len(out) < TUNED_MAX:
                out.append({"kernel": tuner.base_fn.__name__, "key": list(key), "kwargs": dict(config.kwargs),
                            "num_warps": config.num_warps, "num_stages": config.num_stages})
    return out


def _tuned_match(config, pin: dict) -> bool:
    return dict(config.kwargs) == pin["kwargs"] and config.num_warps == pin["num_warps"] and config.num_stages == pin["num_stages"]


def adopt_tuned(tuner):
    """``tuner`` with the pins of its kernel applied: for each pinned key, the configuration of
    its own list that the pin names becomes the key's choice (the autotuner then runs it without
    timing any). A pin naming a configuration the list lacks is left alone."""
    if len(tuner.configs) < 2:
        return tuner
    for key, pin in _KL_TUNED_PINS.get(tuner.base_fn.__name__, {}).items():
        if key not in tuner.cache:
            chosen = [c for c in tuner.configs if c.pre_hook is None and _tuned_match(c, pin)]
            if chosen:
                tuner.cache[key] = chosen[0]
    return tuner


def seed_tuned(tuners: list, pins: list) -> int:
    """Pin ``pins`` (records as ``tuned_choices`` writes them) on ``tuners`` (a module's autotuned
    kernels) and on the autotuners made later; the number of keys pinned now."""
    for pin in pins[:TUNED_MAX]:
        _KL_TUNED_PINS.setdefault(pin["kernel"], {})[tuple(pin["key"])] = pin
    before = sum(len(t.cache) for t in tuners)
    for tuner in tuners:
        adopt_tuned(tuner)
    return sum(len(t.cache) for t in tuners) - before
