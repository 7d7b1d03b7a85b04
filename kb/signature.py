"""A workload's signature (what it computes, how big, on what hardware) and how alike two are.

The signature is built from the analysis the loop stores on every trajectory
(``agents.analysis``: family, world size, collectives, ops, input shapes and dtypes, the dominant
roofline term, input bytes, host syncs) plus the job's device and the evaluator's GPU. Similarity
is structure first (family, collectives, the op multiset, dtypes, the dominant term) and size
second (log-ratio of input bytes, world size), scaled by how alike the hardware is. Every key is
optional: a missing one counts as unknown, never as an error.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from agents.analysis import Analysis

#: Weights of the structural and size terms; they add up to 1 so that identical signatures on the
#: same hardware score exactly 1.0.
WEIGHTS = {
    "family": 0.20,
    "collectives": 0.20,
    "ops": 0.20,
    "dtypes": 0.10,
    "dominant": 0.05,
    "size": 0.15,
    "world_size": 0.10,
}
#: Input sizes 64x apart score 1/e on the size term: a strategy that wins at one size often wins
#: at a neighbouring one, rarely three orders of magnitude away.
_SIZE_SCALE = math.log(64.0)
#: How much a kernel or a result carries over between machines: a different GPU model changes the
#: balance of compute, HBM and link; a CPU run says little about a GPU.
HARDWARE_FACTOR = {"same": 1.0, "other_gpu": 0.8, "other_device": 0.5}


@dataclass(frozen=True)
class Signature:
    """What the knowledge base knows about a workload run, for matching it with others."""

    family: str = ""
    world_size: int = 1
    collectives: tuple[str, ...] = ()
    ops: tuple[str, ...] = ()  # a multiset: repeated names count
    input_shapes: tuple[tuple[int, ...], ...] = ()
    dtypes: tuple[str, ...] = ()
    dominant: str = ""  # "compute", "hbm" or "link"; "" when unknown
    total_input_bytes: int = 0
    host_syncs: int = 0
    device: str = "cpu"
    gpu: str = ""  # the GPU model the evaluator reported; "" on the CPU
    interconnect: str = ""  # NVLink/PCIe where reported, else the collective backend

    # Building ----------------------------------------------------------------------------------
    @classmethod
    def from_analysis(
        cls,
        analysis: Analysis | None,
        *,
        device: str = "cpu",
        gpu: str = "",
        interconnect: str = "",
        family: str = "",
        world_size: int | None = None,
        dominant: str = "",
    ) -> "Signature":
        """A signature from a traced analysis; the keyword values fill in what the analysis lacks
        (all of it without one)."""
        if analysis is None:
            return cls._normalised(family=family, world_size=world_size, dominant=dominant, device=device, gpu=gpu, interconnect=interconnect)
        return cls._normalised(
            family=analysis.family or family,
            world_size=analysis.world_size or world_size,
            collectives=analysis.collectives,
            ops=analysis.ops,
            input_shapes=analysis.input_shapes,
            dtypes=analysis.dtypes,
            dominant=analysis.dominant or dominant,
            total_input_bytes=analysis.total_input_bytes,
            host_syncs=analysis.host_syncs,
            device=device,
            gpu=gpu,
            interconnect=interconnect,
        )

    @classmethod
    def _normalised(
        cls,
        *,
        family: str | None = "",
        world_size: int | None = None,
        collectives: Iterable[str] | None = (),
        ops: Iterable[str] | None = (),
        input_shapes: Iterable[Any] | None = (),
        dtypes: Iterable[str] | None = (),
        dominant: str | None = "",
        total_input_bytes: int | None = 0,
        host_syncs: int | None = 0,
        device: str | None = "cpu",
        gpu: str | None = "",
        interconnect: str | None = "",
    ) -> "Signature":
        """The signature in its canonical form: sorted names (ops as a multiset), shapes as tuples
        of ints (anything else dropped), dtypes without ``torch.``; None and empty as unknown."""
        shapes = tuple(tuple(int(d) for d in s) for s in (input_shapes or []) if isinstance(s, (list, tuple)))
        return cls(
            family=str(family or ""),
            world_size=int(world_size or 1),
            collectives=tuple(sorted({str(c) for c in collectives or []})),
            ops=tuple(sorted(str(o) for o in ops or [])),
            input_shapes=shapes,
            dtypes=tuple(sorted({str(d).replace("torch.", "") for d in dtypes or [] if d})),
            dominant=str(dominant or ""),
            total_input_bytes=int(total_input_bytes or 0),
            host_syncs=int(host_syncs or 0),
            device=device or "cpu",
            gpu=gpu or "",
            interconnect=interconnect or "",
        )

    @classmethod
    def from_trajectory(cls, trajectory) -> "Signature":
        """The signature of a finished job's workload (an ``agents.records.Trajectory``)."""
        env = environment_of(trajectory)
        roofline = trajectory.baseline.roofline if trajectory.baseline else None
        return cls.from_analysis(
            trajectory.analysis,
            device=trajectory.job.device,
            gpu=str(env.get("gpu") or ""),
            interconnect=str(env.get("interconnect") or env.get("backend") or ""),
            family=trajectory.workload_family,
            world_size=trajectory.job.world_size,
            dominant=str((roofline.dominant if roofline else "") or ""),
        )

    # Serialising --------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["input_shapes"] = [list(s) for s in self.input_shapes]
        for key in ("collectives", "ops", "dtypes"):
            data[key] = list(data[key])
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> "Signature":
        """The signature as ``to_dict`` stored it; a missing key is unknown (``input_bytes`` stands
        in for a missing ``total_input_bytes``, as it always has here)."""
        data = data or {}
        return cls._normalised(
            family=data.get("family"),
            world_size=data.get("world_size"),
            collectives=data.get("collectives"),
            ops=data.get("ops"),
            input_shapes=data.get("input_shapes"),
            dtypes=data.get("dtypes"),
            dominant=data.get("dominant"),
            total_input_bytes=data.get("total_input_bytes") or data.get("input_bytes"),
            host_syncs=data.get("host_syncs"),
            device=data.get("device", "cpu"),
            gpu=data.get("gpu", ""),
            interconnect=data.get("interconnect", ""),
        )

    def key(self) -> str:
        """A stable digest of everything but the machine's interconnect label (for de-duplication)."""
        data = self.to_dict()
        data.pop("interconnect")
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:32]

    @property
    def hardware(self) -> str:
        """The hardware the run was on, as strategies state it: the GPU model, or ``cpu``."""
        return self.gpu or self.device

    def text(self) -> str:
        """The signature in words, for text search."""
        parts = [self.family, *self.collectives, *sorted(set(self.ops)), *self.dtypes, self.dominant, self.hardware]
        return " ".join(p for p in parts if p)


@dataclass(frozen=True)
class Similarity:
    """How alike two signatures are, term by term (each in [0, 1]) and overall."""

    score: float
    terms: dict[str, float] = field(default_factory=dict)
    hardware: float = 1.0


def environment_of(trajectory) -> dict[str, Any]:
    """The evaluator's environment of a trajectory's runs (GPU name, backend), from any step."""
    for record in [trajectory.baseline] + [s.evaluation for s in trajectory.steps]:
        env = record.environment if record else {}
        if env:
            return env
    return {}


def _jaccard(a: tuple[str, ...], b: tuple[str, ...]) -> float:
    if not a and not b:
        return 1.0
    return len(set(a) & set(b)) / len(set(a) | set(b))


def _multiset_jaccard(a: tuple[str, ...], b: tuple[str, ...]) -> float:
    if not a and not b:
        return 1.0
    ca, cb = Counter(a), Counter(b)
    return sum((ca & cb).values()) / sum((ca | cb).values())


def _size(a: int, b: int) -> float:
    if a <= 0 or b <= 0:
        return 1.0 if a == b else 0.5  # unknown sizes neither help nor hurt much
    return math.exp(-abs(math.log(a / b)) / _SIZE_SCALE)


def _world(a: int, b: int) -> float:
    return math.exp(-abs(math.log2(max(a, 1) / max(b, 1))) / 2)


def _hardware(a: Signature, b: Signature) -> float:
    if a.device != b.device:
        return HARDWARE_FACTOR["other_device"]
    if a.gpu.lower() != b.gpu.lower():
        return HARDWARE_FACTOR["other_gpu"]
    return HARDWARE_FACTOR["same"]


def similarity(a: Signature, b: Signature) -> Similarity:
    """Similarity in [0, 1]: 1.0 for the same structure, sizes and world size on the same hardware."""
    terms = {
        "family": 1.0 if a.family == b.family else 0.0,
        "collectives": _jaccard(a.collectives, b.collectives),
        "ops": _multiset_jaccard(a.ops, b.ops),
        "dtypes": _jaccard(a.dtypes, b.dtypes),
        "dominant": 1.0 if a.dominant == b.dominant else (0.5 if not a.dominant or not b.dominant else 0.0),
        "size": _size(a.total_input_bytes, b.total_input_bytes),
        "world_size": _world(a.world_size, b.world_size),
    }
    structural = sum(WEIGHTS[k] * v for k, v in terms.items())
    hardware = _hardware(a, b)
    return Similarity(score=round(structural * hardware, 6), terms=terms, hardware=hardware)
