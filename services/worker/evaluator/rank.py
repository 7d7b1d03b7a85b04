"""One evaluator rank process (``python -m services.worker.evaluator.rank``).

It connects to its pool over a Unix socket, joins the process group once, and then serves
commands: ``prepare`` (build the reference, run it on every trial's inputs and time it, all
before any candidate code is imported), ``load_candidate``, ``trial``, ``time`` and ``release``.
Outputs travel back to the pool as CPU tensors; the comparison with the reference happens in the
pool's process, which never imports candidate code.
"""

from __future__ import annotations

import gc
import os
import random
import sys
import traceback
from multiprocessing.connection import Client
from typing import Any

import torch
import torch.distributed as dist

from kloom.workload import SHAPES_ENV, import_file, module_name_for

from . import tensors as T
from .protocol import recv_command, send_reply
from .compare import compare_outputs, tolerance_from_names
from .integrity import Snapshot
from .timing import Timer


class WorkloadProblem(Exception):
    """The workload itself (not the candidate) is at fault."""


def seed_for(seed: int, rank: int) -> int:
    return (seed * 1_000_003 + rank * 7_919 + 17) % (2**31 - 1)


def _seed_everything(seed: int) -> None:
    torch.manual_seed(seed)
    random.seed(seed)
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed(seed % (2**32))


def _bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return torch.equal(a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8))


def _shares_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    try:
        return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr() and a.numel() > 0
    except RuntimeError:
        return False


class RankState:
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
        kwargs: dict[str, Any] = {}
        if device_kind == "cuda":
            kwargs["device_id"] = self.device
        from datetime import timedelta

        dist.init_process_group(
            backend=backend,
            init_method=f"file://{store_path}",
            rank=rank,
            world_size=world_size,
            timeout=timedelta(hours=2),
            **kwargs,
        )
        # One collective now so that communicators exist before anything is timed.
        warm = torch.ones(1, device=self.device)
        dist.all_reduce(warm)
        self.backend = backend
        self.snapshot = Snapshot()
        self.timers: dict[int, Timer] = {}
        self.workloads: dict[tuple, Any] = {}
        self.workload = None
        self.ref = None
        self.cand = None
        self.cand_module: str | None = None
        self.seeds: list[int] = []
        self.input_fps: list[list] = []
        self.ref_mutated: list[list[int]] = []
        self.output_bytes: list[list[int]] = []
        self.timing_seed = 0
        self.kept: list[dict | None] = []
        self.tolerance: dict = {}

    # Helpers ----------------------------------------------------------------------------------
    def environment(self) -> dict[str, Any]:
        env = {"torch": str(torch.__version__), "backend": self.backend, "python": sys.version.split()[0]}
        if self.device.type == "cuda":
            props = torch.cuda.get_device_properties(self.device)
            env.update(
                gpu=props.name,
                gpu_memory_gib=round(props.total_memory / 2**30, 1),
                sm_count=props.multi_processor_count,
                cuda=str(torch.version.cuda),
            )
            try:
                import triton

                env["triton"] = str(triton.__version__)
            except ImportError:
                pass
        return env

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _load_workload(self, path: str, sha: str, shapes: str):
        key = (path, sha, shapes)
        if key not in self.workloads:
            os.environ[SHAPES_ENV] = shapes
            name = module_name_for(path, f"workload_{shapes}_{sha[:8]}")
            self.workloads[key] = import_file(path, name)
        return self.workloads[key]

    def _build(self, cls, module, init_seed: int):
        _seed_everything(seed_for(init_seed, self.rank))
        with torch.device(self.device):
            init = module.get_init_inputs()
            if not isinstance(init, (list, tuple)):
                raise WorkloadProblem("get_init_inputs() must return a list or tuple")
            model = cls(*init)
        if isinstance(model, torch.nn.Module):
            model = model.to(self.device)
        return model

    def _inputs(self, seed: int) -> list:
        _seed_everything(seed_for(seed, self.rank))
        with torch.device(self.device):
            inputs = self.workload.get_inputs()
        if not isinstance(inputs, (list, tuple)):
            raise WorkloadProblem(f"get_inputs() must return a list or tuple, not {type(inputs).__name__}")
        return list(T.to_device(list(inputs), self.device))

    def _timer(self, flush_bytes: int) -> Timer:
        if flush_bytes not in self.timers:
            self.timers[flush_bytes] = Timer(self.device, flush_bytes)
        return self.timers[flush_bytes]

    def _timed_call(self, model):
        """``(call, restore)`` for timing ``model`` on the timing inputs (its own copy of them)."""
        inputs = self._inputs(self.timing_seed)
        mutated = sorted({i for trial in self.ref_mutated for i in trial})
        pristine = {i: inputs[i].clone() for i in mutated if isinstance(inputs[i], torch.Tensor)}

        def restore() -> None:
            for i, value in pristine.items():
                inputs[i].copy_(value)

        def call() -> None:
            with torch.no_grad():
                model(*inputs)

        return call, (restore if pristine else None)

    @staticmethod
    def _protocol(timing: dict) -> dict:
        return {
            "warmup": int(timing["warmup_iters"]),
            "min_iters": int(timing["min_iters"]),
            "max_iters": int(timing["max_iters"]),
            "budget_s": float(timing["budget_s"]),
        }

    def _time(self, model, timing: dict) -> list[float]:
        call, restore = self._timed_call(model)
        return self._timer(int(timing.get("flush_bytes", 0))).measure(call, restore=restore, **self._protocol(timing))

    # Commands ---------------------------------------------------------------------------------
    def cmd_ping(self) -> dict:
        return {"pid": os.getpid(), "environment": self.environment()}

    def cmd_prepare(
        self,
        workload_path: str,
        workload_sha: str,
        shapes: str,
        init_seed: int,
        seeds: list[int],
        timing_seed: int,
        timing: dict | None,
        want_roofline: bool = True,
        transfer_bytes: int = 32 << 20,
    ) -> dict:
        self._drop_candidate()
        self.ref = None
        self.kept = []
        try:
            self.workload = self._load_workload(workload_path, workload_sha, shapes)
            self.ref = self._build(self.workload.Model, self.workload, init_seed)
        except WorkloadProblem:
            raise
        except BaseException as exc:
            raise WorkloadProblem(f"building the reference failed: {type(exc).__name__}: {exc}") from exc
        self.seeds = list(seeds)
        self.timing_seed = timing_seed
        self.input_fps, self.ref_mutated, self.output_bytes = [], [], []
        trials: list[dict] = []
        roofline = None
        for k, seed in enumerate(self.seeds):
            inputs = self._inputs(seed)
            before = T.fingerprints(inputs)
            if k == 0 and want_roofline and hasattr(self.workload, "roofline"):
                roofline = {key: float(v) if isinstance(v, (int, float)) else v
                            for key, v in dict(self.workload.roofline(self.world_size, inputs)).items()}
            with torch.no_grad():
                out = self.ref(*inputs)
            self._sync()
            leaves, spec = T.flatten(out)
            for i, leaf in enumerate(leaves):
                if isinstance(leaf, torch.Tensor) and (leaf.is_floating_point() or leaf.is_complex()):
                    if not bool(torch.isfinite(leaf).all()):
                        raise WorkloadProblem(f"the reference's output {i} has NaN or Inf values (trial {k})")
            after = T.fingerprints(inputs)
            mutated = [i for i, (a, b) in enumerate(zip(before, after)) if a != b]
            self.input_fps.append(before)
            self.ref_mutated.append(mutated)
            self.output_bytes.append(T.nbytes(leaves))
            mutated_values = {i: inputs[i].detach().clone() for i in mutated}
            if sum(self.output_bytes[-1]) + sum(T.nbytes(list(mutated_values.values()))) <= transfer_bytes:
                # Small: the pool process judges these outputs itself.
                self.kept.append(None)
                trials.append({"outputs": T.detach_cpu(leaves), "spec": spec, "mutated": {i: T.detach_cpu([v])[0] for i, v in mutated_values.items()}})
            else:
                # Large: kept here, on the device, and compared here after the candidate runs.
                self.kept.append({"outputs": [x.detach().clone() if isinstance(x, torch.Tensor) else x for x in leaves], "mutated": mutated_values})
                trials.append({"spec": spec, "in_rank": True, "meta": [list(x.shape) if isinstance(x, torch.Tensor) else repr(x) for x in leaves]})
            del out, leaves, inputs
        times = self._time(self.ref, timing) if timing else None
        gc.collect()
        T.scrub([b for sizes in self.output_bytes for b in sizes], self.device)
        tolerance = {str(k): v for k, v in dict(getattr(self.workload, "TOLERANCE", None) or {}).items()}
        return {"trials": trials, "roofline": roofline, "times": times, "tolerance": tolerance}

    def cmd_reference_io(self, workload_path: str, workload_sha: str, shapes: str, init_seed: int, seed: int) -> dict:
        """The reference's parameters, inputs and outputs on this rank, for checking a workload."""
        self._drop_candidate()
        self.workload = self._load_workload(workload_path, workload_sha, shapes)
        self.ref = self._build(self.workload.Model, self.workload, init_seed)
        inputs = self._inputs(seed)
        before = T.detach_cpu(inputs)
        with torch.no_grad():
            out = self.ref(*inputs)
        self._sync()
        leaves, spec = T.flatten(out)
        state = {k: v.detach().cpu() for k, v in self.ref.state_dict().items()} if isinstance(self.ref, torch.nn.Module) else {}
        return {
            "inputs": before,
            "inputs_after": T.detach_cpu(inputs),
            "outputs": T.detach_cpu(leaves),
            "spec": spec,
            "state": state,
        }

    def cmd_analyze(self, workload_path: str, workload_sha: str, shapes: str, init_seed: int, seed: int) -> dict:
        """What the reference does on this rank: operators, collectives, host syncs, data flow."""
        from .tracing import trace_call

        self._drop_candidate()
        self.workload = self._load_workload(workload_path, workload_sha, shapes)
        self.ref = self._build(self.workload.Model, self.workload, init_seed)
        inputs = self._inputs(seed)
        before = T.fingerprints(inputs)
        roofline = None
        if hasattr(self.workload, "roofline"):
            roofline = dict(self.workload.roofline(self.world_size, inputs))
        trace = trace_call(self.ref, inputs)
        self._sync()
        after = T.fingerprints(inputs)
        tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
        params = list(self.ref.parameters()) + list(self.ref.buffers()) if isinstance(self.ref, torch.nn.Module) else []
        trace.update(
            input_shapes=[list(x.shape) if isinstance(x, torch.Tensor) else None for x in inputs],
            input_dtypes=[str(x.dtype).replace("torch.", "") if isinstance(x, torch.Tensor) else type(x).__name__ for x in inputs],
            input_bytes=sum(x.numel() * x.element_size() for x in tensors),
            param_bytes=sum(p.numel() * p.element_size() for p in params),
            mutated_inputs=[i for i, (a, b) in enumerate(zip(before, after)) if a != b],
            roofline={k: (float(v) if isinstance(v, (int, float)) else v) for k, v in (roofline or {}).items()} or None,
        )
        return {"trace": trace}

    def cmd_probe_split(self, seed: int, chunks: int, tolerance: dict) -> dict:
        """After ``analyze``: whether the reference computes row blocks independently."""
        from .compare import compare_leaf, resolve_tolerance
        from .tracing import probe_row_split

        table = resolve_tolerance(getattr(self.workload, "TOLERANCE", None), {})
        table.update(tolerance_from_names(tolerance))

        def same(got, want) -> bool:
            return got.shape == want.shape and compare_leaf(got, want, table, "output")[0]

        split = probe_row_split(self.ref, lambda: self._inputs(seed), chunks=chunks, compare=same)
        self._sync()
        return {"split": split}

    def cmd_load_candidate(self, path: str, init_seed: int, tolerance: dict | None = None) -> dict:
        self._drop_candidate()
        self.tolerance = tolerance_from_names(tolerance or {})
        name = module_name_for(path, "candidate")
        self.cand_module = name
        module = import_file(path, name)
        cls = getattr(module, "ModelNew", None)
        if cls is None:
            raise AttributeError(f"{path} defines no ModelNew")
        self.cand = self._build(cls, self.workload, init_seed)
        return {}

    def cmd_trial(self, k: int) -> dict:
        inputs = self._inputs(self.seeds[k])
        fps = T.fingerprints(inputs)
        if fps != self.input_fps[k]:
            raise WorkloadProblem("get_inputs() is not deterministic under a fixed seed")
        T.scrub(self.output_bytes[k], self.device)
        with torch.no_grad():
            out = self.cand(*inputs)
        leaves, spec = T.flatten(out)
        # Copies taken on the current stream as soon as the call returns: if work still pending
        # elsewhere (a side stream never joined, a thread) changes the outputs after this
        # point, the caller would have read unfinished results.
        at_return = [x.clone() if isinstance(x, torch.Tensor) else x for x in leaves]
        self._sync()
        late = [
            i
            for i, (a, b) in enumerate(zip(at_return, leaves))
            if isinstance(a, torch.Tensor) and not _bitwise_equal(a, b)
        ]
        after = T.fingerprints(inputs)
        unexpected = [
            i for i, (a, b) in enumerate(zip(fps, after)) if i not in self.ref_mutated[k] and a != b
        ]
        aliases = [
            (o, i)
            for o, leaf in enumerate(leaves)
            for i, inp in enumerate(inputs)
            if isinstance(leaf, torch.Tensor) and isinstance(inp, torch.Tensor) and _shares_storage(leaf, inp)
        ]
        reply = {"spec": spec, "late_writes": late, "unexpected_mutation": unexpected, "aliases": aliases}
        kept = self.kept[k]
        if kept is None:
            reply["outputs"] = T.detach_cpu(at_return)
            reply["mutated"] = {i: T.detach_cpu([inputs[i]])[0] for i in self.ref_mutated[k]}
        elif len(at_return) != len(kept["outputs"]):
            reply["check"] = {"totals": {"numel": 0, "mismatched": 0, "max_abs_diff": 0.0, "max_rel_diff": 0.0},
                              "problems": [f"{len(at_return)} outputs, expected {len(kept['outputs'])}"]}
        else:
            got_mutated = {i: inputs[i] for i in self.ref_mutated[k]}
            totals, problems = compare_outputs(at_return, got_mutated, kept["outputs"], kept["mutated"], self.tolerance)
            reply["check"] = {"totals": totals, "problems": problems}
        return reply

    def cmd_time(self, which: str, timing: dict) -> dict:
        """Time the candidate, the reference, or (``which="both"``) the two interleaved."""
        if which == "both":
            if self.cand is None or self.ref is None:
                raise RuntimeError("interleaved timing needs the reference and a candidate loaded")
            timer = self._timer(int(timing.get("flush_bytes", 0)))
            cand, ref = timer.measure_pair(self._timed_call(self.cand), self._timed_call(self.ref), **self._protocol(timing))
            return {"times": cand, "reference_times": ref}
        model = self.cand if which == "candidate" else self.ref
        if model is None:
            raise RuntimeError(f"no {which} loaded")
        return {"times": self._time(model, timing)}

    def cmd_release(self, everything: bool = False) -> dict:
        self._drop_candidate()
        if everything:
            self.ref = None
            self.kept = []
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        return {}

    def _drop_candidate(self) -> None:
        self.cand = None
        if self.cand_module:
            for name in [n for n in sys.modules if n == self.cand_module or n.startswith(self.cand_module + ".")]:
                sys.modules.pop(name, None)
            self.cand_module = None


#: Commands that run candidate code, after which the integrity snapshot is compared.
_CANDIDATE_COMMANDS = {"load_candidate", "trial", "time", "release"}


def _error_payload(exc: BaseException, phase: str) -> dict:
    return {
        "type": type(exc).__name__,
        "module": type(exc).__module__,
        "message": f"{type(exc).__name__}: {exc}"[:4000],
        "traceback": traceback.format_exc()[-8000:],
        "workload_problem": isinstance(exc, WorkloadProblem),
        "phase": phase,
    }


def serve(conn, state: RankState) -> None:
    handlers = {
        "ping": state.cmd_ping,
        "prepare": state.cmd_prepare,
        "reference_io": state.cmd_reference_io,
        "analyze": state.cmd_analyze,
        "probe_split": state.cmd_probe_split,
        "load_candidate": state.cmd_load_candidate,
        "trial": state.cmd_trial,
        "time": state.cmd_time,
        "release": state.cmd_release,
    }
    while True:
        try:
            msg = recv_command(conn)
        except (EOFError, OSError):
            return
        op = msg.get("op")
        if op == "exit":
            return
        try:
            reply = {"ok": True, **handlers[op](**msg.get("args", {}))}
        except BaseException as exc:  # noqa: BLE001 - every failure is reported to the pool
            reply = {"ok": False, "error": _error_payload(exc, op)}
        reply["violations"] = state.snapshot.violations() if op in _CANDIDATE_COMMANDS else []
        try:
            send_reply(conn, reply)
        except Exception as exc:  # an output that cannot be serialised, for instance
            send_reply(conn, {"ok": False, "error": _error_payload(exc, op), "violations": reply["violations"]})


def _exit_with_parent() -> None:
    """A rank whose pool process died (killed, interrupted) must not keep holding a GPU."""
    import threading
    import time

    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(3)

    threading.Thread(target=watch, name="kloom-parent-watch", daemon=True).start()


def main() -> None:
    _exit_with_parent()
    rank = int(os.environ.pop("KLOOM_RANK"))
    world_size = int(os.environ.pop("KLOOM_WORLD_SIZE"))
    device_kind = os.environ.pop("KLOOM_DEVICE_KIND")
    device_index = int(os.environ.pop("KLOOM_DEVICE_INDEX"))
    address = os.environ.pop("KLOOM_POOL_SOCKET")
    authkey = bytes.fromhex(os.environ.pop("KLOOM_POOL_AUTHKEY"))
    store_path = os.environ.pop("KLOOM_POOL_STORE")
    conn = Client(address, family="AF_UNIX", authkey=authkey)
    try:
        state = RankState(rank, world_size, device_kind, device_index, store_path)
    except BaseException as exc:  # noqa: BLE001
        send_reply(conn, {"ok": False, "rank": rank, "error": _error_payload(exc, "start")})
        return
    send_reply(conn, {"ok": True, "rank": rank, "pid": os.getpid(), "environment": state.environment()})
    try:
        serve(conn, state)
    finally:
        try:
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001 - exiting anyway
            pass


if __name__ == "__main__":
    main()
