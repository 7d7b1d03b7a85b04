"""What an evaluator rank process runs (its entry point: ``rank_main.py``).

A rank belongs to one of a judge's two pools (``KLOOM_ROLE``): a **reference** rank
(``reference_rank.py``) builds the workload's model, draws every input, runs the reference and
compares the candidate's outputs with its own; a **candidate** rank (``candidate_rank.py``) imports
the candidate and nothing of the workload, and runs it on the inputs it is sent. The two never
share a process: nothing the candidate can reach holds the reference model, its outputs, the
seeds, the comparison or the clock the judge believes.

This module holds what both roles share: joining the pool's process group, the command loop, the
timed blocks and the memory account.
"""

from __future__ import annotations

import os
import random
import sys
import time
import traceback
from datetime import timedelta
from typing import Any, Callable

import torch
import torch.distributed as dist

from . import precision, staged
from . import tensors as T
from .compare import tolerance_from_names
from .gpu_quiet import QuietProbe
from .projection import Projector, warm
from .protocol import pack, recv_command_holding, send_packed
from .timing import Timer, collect_all, gc_paused, settle_gc


#: Cached free device memory a rank keeps between commands (more goes back to the device).
IDLE_CACHE_BYTES = 64 << 20


class WorkloadProblem(Exception):
    """The workload itself (not the candidate) is at fault."""


class ResourceLimit(Exception):
    """The evaluator's device-memory limit does not leave room for this (with the numbers)."""


def seed_for(seed: int, rank: int) -> int:
    return (seed * 1_000_003 + rank * 7_919 + 17) % (2**31 - 1)


def seed_everything(seed: int) -> None:
    """Seed what a workload draws from: torch's generators on the CPU and on every CUDA device
    (as ``torch.manual_seed`` does, without its 0.1-0.3 ms of backend checks: the judge seeds
    every timed call's inputs), Python's and NumPy's."""
    if torch.cuda.is_initialized():
        torch.default_generator.manual_seed(seed)
        for generator in torch.cuda.default_generators:
            generator.manual_seed(seed)
    elif not torch.cuda.is_available():
        torch.default_generator.manual_seed(seed)
    else:  # CUDA not started yet: torch seeds its devices as they start
        torch.manual_seed(seed)
    random.seed(seed)
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed(seed % (2**32))


def tensor_bytes(values) -> int:
    return sum(T.nbytes([v for v in values if isinstance(v, torch.Tensor)]))


def model_bytes(model) -> int:
    if not isinstance(model, torch.nn.Module):
        return 0
    seen, total = set(), 0
    for t in list(model.parameters()) + list(model.buffers()):
        key = (t.untyped_storage().data_ptr(), t.numel())
        if key not in seen:
            seen.add(key)
            total += t.numel() * t.element_size()
    return total


class RankBase:
    """Process group, device, timer and memory account of one rank (either role)."""

    def __init__(self, rank: int, world_size: int, device_kind: str, device_index: int, store_path: str):
        self.rank = rank
        self.world_size = world_size
        if device_kind == "cuda":
            torch.cuda.set_device(device_index)
            self.device = torch.device("cuda", device_index)
            backend = "nccl"
        else:
            self.device = torch.device("cpu")
            backend = "gloo"
        kwargs: dict[str, Any] = {"device_id": self.device} if device_kind == "cuda" else {}

        dist.init_process_group(backend=backend, init_method=f"file://{store_path}", rank=rank, world_size=world_size,
                                timeout=timedelta(hours=2), **kwargs)
        warm = torch.ones(1, device=self.device)
        dist.all_reduce(warm)  # communicators exist before anything is timed
        self.backend = backend
        self.timers: dict[int, Timer] = {}
        self.timed: TimedCall | None = None  # what timed blocks call
        self.memory_limit = 0  # bytes this rank may hold (0: none)
        self.peak = 0  # CPU: the largest account seen since reset_peak
        self.command_peak = 0  # CPU: the largest account seen in the running command
        self.peak_earlier = 0  # CUDA: the allocator's peak before the running command began
        self.collect_later = False  # a full collection after the reply (``after_reply``)
        self.peaks_by_command: dict[str, int] = {}  # since reset_peak: each command's largest peak
        #: Large device tensors of replies go in a device allocation the same GPU's other pool
        #: maps (``protocol.pack``); a role that hands its outputs over turns it on where it can.
        self.share_device = False
        #: This reply goes through host memory whatever ``share_device`` says (a staged block's:
        #: both sides pack their outputs alike); reset after every reply.
        self.host_reply = False
        precision.pin()

    # Environment, memory ----------------------------------------------------------------------
    def environment(self) -> dict[str, Any]:
        env = {"torch": str(torch.__version__), "backend": self.backend, "python": sys.version.split()[0]}
        if self.device.type == "cuda":
            props = torch.cuda.get_device_properties(self.device)
            env.update(gpu=props.name, gpu_memory_gib=round(props.total_memory / 2**30, 1), sm_count=props.multi_processor_count,
                       cuda=str(torch.version.cuda))
            try:
                import triton  # optional: GPU images have it

                env["triton"] = str(triton.__version__)
            except ImportError:
                pass
        return env

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def set_memory_limit(self, limit: int) -> None:
        """Apply this rank's share of the device-memory limit (CUDA: the allocator refuses more)."""
        self.memory_limit = max(0, int(limit))
        if self.device.type == "cuda":
            total = torch.cuda.get_device_properties(self.device).total_memory
            fraction = min(1.0, self.memory_limit / total) if self.memory_limit else 1.0
            torch.cuda.set_per_process_memory_fraction(max(fraction, 1e-6), self.device)

    def reset_peak(self) -> None:
        self.peak = self.command_peak = self.peak_earlier = 0
        self.peaks_by_command = {}
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)

    def begin(self) -> None:
        """A command starts: its own peak is measured from here (the earlier one is kept)."""
        self.command_peak = 0
        if self.device.type == "cuda":
            self.peak_earlier = max(self.peak_earlier, int(torch.cuda.max_memory_allocated(self.device)))
            torch.cuda.reset_peak_memory_stats(self.device)

    def end(self, op: str, reply: dict) -> None:
        """A command ended: its peak joins the table every reply carries (which step of an
        evaluation held the most, for the record and for a resource limit's message)."""
        peak = int(torch.cuda.max_memory_allocated(self.device)) if self.device.type == "cuda" else self.command_peak
        self.peaks_by_command[op] = max(self.peaks_by_command.get(op, 0), peak)
        reply["peaks_by_command"] = dict(self.peaks_by_command)

    def account(self, held: int, what: str) -> None:
        """CPU: note ``held`` bytes of live tensors and refuse past the limit (CUDA: the allocator
        does both)."""
        self.peak = max(self.peak, held)
        self.command_peak = max(self.command_peak, held)
        if self.device.type != "cuda" and self.memory_limit and held > self.memory_limit:
            raise ResourceLimit(f"{what} holds {held} bytes of tensors, past this rank's share of the evaluator's "
                                f"device-memory limit ({self.memory_limit} bytes)")

    def after_reply(self) -> None:
        """Work a command left for after its reply, when the judge has moved on: a full
        collection where the last one asked for it (``collect_all``); the next command waits
        for it, and no timed span follows a release within the same evaluation."""
        if self.collect_later:
            self.collect_later = False
            collect_all()
            if self.device.type == "cuda":
                torch.cuda.empty_cache()

    def idle(self) -> None:
        """Between commands, with nothing of the last one held: on a GPU, the allocator's cached
        free blocks go back to the device where they are more than ``IDLE_CACHE_BYTES``. The two
        pools share the device and take turns; a cache one side keeps while the other runs adds to
        the evaluator's peak (on a problem of 4 GiB in and out, 55 GiB where the sides' own peaks
        are 8 each)."""
        if self.device.type == "cuda":
            cached = torch.cuda.memory_reserved(self.device) - torch.cuda.memory_allocated(self.device)
            if cached > IDLE_CACHE_BYTES:
                torch.cuda.empty_cache()

    def peak_bytes(self) -> int:
        if self.device.type == "cuda":
            return max(self.peak_earlier, int(torch.cuda.max_memory_allocated(self.device)))
        return int(self.peak)

    # Timing ------------------------------------------------------------------------------------
    def timer(self, flush_bytes: int) -> Timer:
        if flush_bytes not in self.timers:
            self.timers[flush_bytes] = Timer(self.device, flush_bytes)
        return self.timers[flush_bytes]

    def prepare_timed(self, model, inputs: list, restore: list[int], draw: Callable[[int], list] | None = None,
                      outputs: list | None = None) -> None:
        """What timed calls run: ``model`` on ``inputs`` (restored before each call where the call
        mutates them), or, where a block gives a seed, on inputs ``draw`` makes afresh for every call.
        ``outputs``: (bytes, dtype name) of the reference's output leaves (which the projection's
        kernel will read)."""
        pristine = {i: inputs[i].clone() for i in restore if isinstance(inputs[i], torch.Tensor)}
        warm(self.device, outputs or [])  # the projection's kernel compiled here, not in the first timed block
        settle_gc()  # a collection during timing scans only what timing makes

        def restore_inputs() -> None:
            for i, value in pristine.items():
                inputs[i].copy_(value)

        self.timed = TimedCall(model, inputs, restore_inputs if pristine else None, draw)

    def cmd_time_block(self, iters: int, warm: int, flush_bytes: int, seed: int | None = None, keep: bool = False,
                       projection_seed: int | None = None, tolerance: dict | None = None, quiet: dict | None = None,
                       inputs: list | None = None) -> dict:
        """``warm`` untimed calls, then ``iters`` timed ones (ms each); the device is drained
        before the reply, so nothing of this side runs on while the other is timed.

        With a ``seed`` (the judge draws one at random for each block, unrelated to any trial's),
        every call runs on inputs drawn afresh from it, outside the timed span: no call sees an
        input an earlier one saw, so a result stored from an earlier input is never the answer.
        With a ``projection_seed`` (drawn at random per block), every timed call's outputs are
        projected right after the call, outside this rank's clock (``projection.Projector``, the
        same work on either side; ``tolerance``, the reference's only, names the judge's
        tolerances for the bounds), and the numbers go back once, with the times. With ``keep``,
        the block's last outputs stay in this process (``keep_outputs``), outside the judge's
        timed span: the reference compares the candidate's with them, and the candidate hands
        them over by a separate command. With ``inputs`` (a staged block, ``run_staged``) the
        calls run on the inputs the command brought, one set a call, and every call's outputs go
        back with the reply. With ``quiet`` (``threshold_ms``, ``patience_s``; on a
        GPU), the rank waits for the GPU to run nothing else before the block, and again after it
        (``gpu_quiet.py``); the reply says what it saw."""
        timed = self.timed
        if timed is None:
            raise RuntimeError("no timing inputs")
        timer = self.timer(int(flush_bytes))
        if inputs is not None:
            return self.run_staged(timed, timer, inputs, keep, quiet)
        projector = None
        if projection_seed is not None:
            table = tolerance_from_names(tolerance) if tolerance is not None else None
            projector = Projector(int(projection_seed), self.device, table, calls=int(iters))
        if keep:
            self.keep_outputs(None, "")
        quiet_after = self.quiet_wait(quiet)
        total = int(warm) + int(iters)
        times = []
        # Where this side's own time went (ms): a diagnostic of the clock cross-check's noise,
        # never used to judge (a candidate may say anything here).
        phases = dict.fromkeys(("draw", "call", "project"), 0.0)
        began = time.perf_counter()
        timed.hold = projector is not None
        with gc_paused():
            self._run_block(timed, timer, projector, total, int(warm), seed, keep, times, phases)
        timed.hold = False
        if seed is not None:
            timed.inputs = None  # every call of a block with a seed draws its own: none is held between blocks
        self.sync()
        phases["loop"] = (time.perf_counter() - began) * 1e3
        reply: dict[str, Any] = {"times": times, "phases_ms": phases}
        quiet_after(reply)
        if projector is not None:
            reply.update(projector.finish().reply(bounds=tolerance is not None))
        if keep and timed.kept is not None:
            leaves, spec = T.flatten(timed.kept)
            timed.kept = None
            self.keep_outputs([x.detach() if isinstance(x, torch.Tensor) else x for x in leaves], spec)
        return reply

    @staticmethod
    def _run_block(timed: "TimedCall", timer, projector, total: int, warm: int, seed: int | None, keep: bool,
                   times: list[float], phases: dict[str, float]) -> None:
        for i in range(total):
            t0 = time.perf_counter()
            if seed is not None:
                timed.redraw(call_seed(int(seed), i))
            t1 = time.perf_counter()
            timed.keep = bool(keep) and i == total - 1
            elapsed = timer.time_call(timed, None if seed is not None else timed.restore)
            t2 = time.perf_counter()
            if i >= int(warm):
                times.append(elapsed)
                if projector is not None:
                    projector.add(T.flatten(timed.out)[0])
            timed.out = None
            t3 = time.perf_counter()
            for key, span in (("draw", t1 - t0), ("call", t2 - t1), ("project", t3 - t2)):
                phases[key] += span * 1e3

    def run_staged(self, timed: "TimedCall", timer, inputs: list, keep: bool, quiet: dict | None) -> dict:
        """A staged block: the judge drew every call's inputs in the reference's process and
        sent them with this command (so this process had none of them before the judge's clock
        started), and every call's outputs leave with the reply (so none can be finished after
        it stopped): inside the judge's span of the block lie only unpacking the inputs, the
        calls (each after the cache flush and the barrier) and packing the outputs, the same
        work on both sides. The outputs are projected and compared by the reference's process
        afterwards; nothing here draws, projects or keeps anything for later. The reply travels
        through host memory on either side (``host_reply``), so that both sides pack alike."""
        quiet_after = self.quiet_wait(quiet)
        began = time.perf_counter()
        # Each call's inputs copied apart (rows of the stacked inputs share one storage with the
        # block's other calls, which no call should reach).
        ring = [[x.to(self.device, copy=True) if isinstance(x, torch.Tensor) else x for x in call] for call in staged.unstack(inputs)]
        inputs = None
        times: list[float] = []
        calls: list[list] = []
        spec = ""
        timed.hold, timed.keep = True, False
        with gc_paused():
            for i in range(len(ring)):
                timed.inputs, ring[i] = ring[i], None
                times.append(timer.time_call(timed, None))
                leaves, spec = T.flatten(timed.out)
                calls.append([x.detach() if isinstance(x, torch.Tensor) else x for x in leaves])
                timed.out = timed.inputs = None
        timed.hold = False
        self.sync()
        reply: dict[str, Any] = {"times": times, "calls": staged.stack(calls), "spec": spec,
                                 "phases_ms": {"loop": (time.perf_counter() - began) * 1e3}}
        quiet_after(reply)
        if keep and calls:
            self.keep_outputs(calls[-1], spec)
        self.host_reply = True
        return reply

    def quiet_wait(self, quiet: dict | None) -> Callable[[dict], None]:
        """With ``quiet`` (``threshold_ms``, ``patience_s``) on a GPU: wait now for the GPU to run
        nothing else (``gpu_quiet.py``), and return what waits again after the block and puts
        what both waits saw in its reply (``quiet``); elsewhere, nothing to do."""
        if quiet is None or self.device.type != "cuda":
            return lambda reply: None
        probe = QuietProbe(self.device)
        threshold, patience = float(quiet["threshold_ms"]), float(quiet["patience_s"])
        before = probe.wait(threshold, patience)

        def after(reply: dict) -> None:
            reply["quiet"] = {"before": before.to_dict(), "after": probe.wait(threshold, patience).to_dict()}

        return after

    def keep_outputs(self, leaves: list | None, spec: str) -> None:
        """A role's use of a block's last outputs (None: drop what an earlier block left)."""


def call_seed(block_seed: int, call: int) -> int:
    """The seed of call ``call``'s inputs in a block drawn from ``block_seed``."""
    return (block_seed * 1_000_033 + call * 104_729 + 1) % (2**31 - 1)


class TimedCall:
    """One timed call: the model on its inputs, which ``redraw`` replaces with fresh ones (the
    old ones dropped first, so a block holds one set at a time). With ``hold``, the call's
    outputs stay in ``out`` until the block has projected them; with ``keep`` (the block's last
    call) they also stay in ``kept``. Otherwise nothing is held outside the timed span."""

    def __init__(self, model, inputs: list, restore: Callable[[], None] | None, draw: Callable[[int], list] | None):
        self.model, self.inputs, self.restore, self.draw = model, inputs, restore, draw
        self.keep = self.hold = False
        self.out = None
        self.kept = None

    def redraw(self, seed: int) -> None:
        if self.draw is None:
            raise RuntimeError("this side cannot draw inputs")
        self.inputs = None
        self.inputs = self.draw(seed)

    def __call__(self) -> None:
        with torch.no_grad():
            out = self.model(*self.inputs)
        self.out = out if self.hold else None
        self.kept = out if self.keep else None


def error_payload(exc: BaseException, phase: str) -> dict:
    return {
        "type": type(exc).__name__,
        "module": type(exc).__module__,
        "message": f"{type(exc).__name__}: {exc}"[:4000],
        "traceback": traceback.format_exc()[-8000:],
        "workload_problem": isinstance(exc, WorkloadProblem),
        "resource_limit": isinstance(exc, ResourceLimit) or isinstance(exc, torch.OutOfMemoryError),
        "phase": phase,
    }


def serve(conn, state) -> None:
    """Answer commands until told to exit; ``state.handlers()`` names them, and
    ``state.after(op, reply)`` adds what every reply of that role carries.

    A reply's own device allocation (``state.share_device``) is kept until the next command
    comes: by then the judge has had the reference's rank map and read it. Device allocations a
    command came with are closed once its reply is packed."""
    handlers = state.handlers()
    sent = None
    while True:
        try:
            msg, imported = recv_command_holding(conn, state.device)
        except (EOFError, OSError):
            return
        if sent is not None:
            sent.close()
            sent = None
        op = msg.get("op")
        if op == "exit":
            return
        state.begin()
        try:
            reply = {"ok": True, **handlers[op](**msg.get("args", {}))}
        except BaseException as exc:  # noqa: BLE001 - every failure is reported to the pool
            reply = {"ok": False, "error": error_payload(exc, op)}
        state.end(str(op), reply)
        state.after(op, reply)
        if state.share_device:
            state.idle()  # cached blocks go back before the reply's device copy is taken beside them
        share = state.device if state.share_device and not state.host_reply else None
        state.host_reply = False
        try:
            packed = pack(reply, share_device=share)
        except Exception as exc:  # an output that cannot be serialised, for instance
            packed = pack({"ok": False, "error": error_payload(exc, op), "violations": reply.get("violations", [])})
        # What the reply carried is in its file now: device tensors go before it leaves, since
        # the judge may stop this process as soon as it has the reply, and the other side runs.
        msg = reply = None
        for blob in imported:
            blob.close()
        imported = []
        state.idle()
        sent = packed.device
        send_packed(conn, packed)
        state.after_reply()
