"""Floor = max(compute, HBM, link) time of a workload's per-rank work on a hardware profile.

A workload's ``roofline(world_size, inputs)`` returns, per rank, the floating-point operations it
must do (``flops``), the fewest bytes it must move through device memory (``hbm_bytes``: each
input read once, each output written once) and the fewest bytes each rank must send over its
links (``link_bytes``), with optionally the ``dtype`` that sets the matmul rate. Dividing each by
the matching ceiling gives three times; no implementation runs faster than the largest, and the
unoverlapped sum is what a kernel that never overlaps them would approach.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

_DTYPE_ALIASES = {
    "bfloat16": "bf16",
    "torch.bfloat16": "bf16",
    "float16": "fp16",
    "torch.float16": "fp16",
    "half": "fp16",
    "float32": "fp32",
    "torch.float32": "fp32",
    "float": "fp32",
    "float64": "fp64",
    "torch.float64": "fp64",
    "float8_e4m3fn": "fp8",
    "torch.float8_e4m3fn": "fp8",
    "float8_e5m2": "fp8",
    "torch.float8_e5m2": "fp8",
}

#: TF32 products a float32-accurate product takes on tensor cores (split each operand into a TF32
#: high part and a residual; the residuals' product is below float32's rounding).
TF32_PRODUCTS = 3


@dataclass
class RooflineRecord:
    """The communication-aware floor of a workload on a hardware profile."""

    profile: str
    flops: float
    hbm_bytes: float
    link_bytes: float
    compute_ms: float
    hbm_ms: float
    link_ms: float
    floor_ms: float
    unoverlapped_ms: float
    dominant: Literal["compute", "hbm", "link"]
    fraction_of_floor: float | None = None  # floor / measured time, for the candidate
    reference_fraction: float | None = None


@dataclass
class HardwareProfile:
    """Ceilings of one machine: matmul rate by dtype (TFLOP/s), HBM and per-GPU link bandwidth."""

    name: str
    description: str
    matmul_tflops: dict[str, float]
    hbm_gbps: float
    link_gbps: float
    collective_busbw_gbps: dict[str, float] = field(default_factory=dict)
    source: str = "builtin"
    measured_at: str = ""
    # Filled by ``kloom calibrate`` (docs/roofline.md): what was measured and how link_gbps was chosen.
    gpu: str = ""
    world_size: int = 0
    peer_copy_gbps: float = 0.0
    link_basis: str = ""
    collective_latency_us: dict[str, float] = field(default_factory=dict)

    def rate(self, dtype: str) -> float:
        """The fastest matmul rate (TFLOP/s) at ``dtype``'s accuracy. A float32 product is also
        three TF32 products on tensor cores (kloom's ``tf32x3`` GEMM and convolution kernels), as
        accurate as the CUDA cores' float32 and faster where TF32 runs above three times their rate:
        a float32 floor counts the faster of the two, or it would stand above what kloom reaches."""
        key = _DTYPE_ALIASES.get(dtype, dtype)
        if key == "fp32" and "fp32" in self.matmul_tflops:
            return max(self.matmul_tflops["fp32"], self.matmul_tflops.get("tf32", 0.0) / TF32_PRODUCTS)
        if key in self.matmul_tflops:
            return self.matmul_tflops[key]
        return self.matmul_tflops.get("fp32", min(self.matmul_tflops.values()))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "HardwareProfile":
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


#: Collectives whose link traffic ``collective_link_bytes`` knows how to count.
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")


def bus_factor(op: str, world_size: int) -> float:
    """Bytes each rank sends over its links per byte of the collective's buffer, for ring-style
    algorithms: 2(n-1)/n for all-reduce, (n-1)/n for all-gather (of the output), reduce-scatter
    (of the input) and all-to-all. It is also nccl-tests' busbw / algbw."""
    if op not in COLLECTIVES:
        raise ValueError(f"unknown collective {op!r} (known: {', '.join(COLLECTIVES)})")
    n = int(world_size)
    if n < 1:
        raise ValueError(f"world size must be at least 1, got {world_size}")
    share = (n - 1) / n
    return 2 * share if op == "all_reduce" else share


def collective_link_bytes(op: str, buffer_bytes: float, world_size: int) -> float:
    """The fewest bytes one rank sends for ``op`` on a buffer of ``buffer_bytes``: the whole tensor
    of an all-reduce, the gathered output of an all-gather, the unreduced input of a
    reduce-scatter, and one rank's send buffer of an all-to-all."""
    return bus_factor(op, world_size) * float(buffer_bytes)


@dataclass
class RooflineTerms:
    flops: float = 0.0
    hbm_bytes: float = 0.0
    link_bytes: float = 0.0
    dtype: str = "fp32"

    @classmethod
    def from_mapping(cls, data: dict[str, Any]) -> "RooflineTerms":
        unknown = set(data) - {"flops", "hbm_bytes", "link_bytes", "dtype"}
        if unknown:
            raise ValueError(f"roofline() returned unknown keys: {', '.join(sorted(unknown))}")
        for key in ("flops", "hbm_bytes", "link_bytes"):
            value = data.get(key, 0.0)
            if not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"roofline() must return a non-negative number for {key}, got {value!r}")
        return cls(
            flops=float(data.get("flops", 0.0)),
            hbm_bytes=float(data.get("hbm_bytes", 0.0)),
            link_bytes=float(data.get("link_bytes", 0.0)),
            dtype=str(data.get("dtype", "fp32")),
        )


def estimate(terms: RooflineTerms, profile: HardwareProfile, measured_ms: float | None = None, reference_ms: float | None = None):
    """The floor of ``terms`` on ``profile`` as a ``RooflineRecord`` (times in ms)."""
    compute_ms = terms.flops / (profile.rate(terms.dtype) * 1e12) * 1e3
    hbm_ms = terms.hbm_bytes / (profile.hbm_gbps * 1e9) * 1e3
    link_ms = terms.link_bytes / (profile.link_gbps * 1e9) * 1e3 if profile.link_gbps > 0 else 0.0
    times = {"compute": compute_ms, "hbm": hbm_ms, "link": link_ms}
    dominant = max(times, key=times.get)
    floor_ms = times[dominant]
    return RooflineRecord(
        profile=profile.name,
        flops=terms.flops,
        hbm_bytes=terms.hbm_bytes,
        link_bytes=terms.link_bytes,
        compute_ms=compute_ms,
        hbm_ms=hbm_ms,
        link_ms=link_ms,
        floor_ms=floor_ms,
        unoverlapped_ms=compute_ms + hbm_ms + link_ms,
        dominant=dominant,
        fraction_of_floor=(floor_ms / measured_ms) if measured_ms and floor_ms > 0 else None,
        reference_fraction=(floor_ms / reference_ms) if reference_ms and floor_ms > 0 else None,
    )
