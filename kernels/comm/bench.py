"""One command for every comm kernel's benchmark: spawns the ranks itself (no torchrun), runs each
kernel's cases at each world size the machine has GPUs for, and writes ``comm_bench.json`` and
``comm_bench.md`` under ``--out``.

    python3 -m kernels.comm.bench --world-sizes 2 4 --out "$OUT"        # nvidia-h200-x2 / -x4
    python3 -m kernels.comm.bench --world-sizes 1 --out "$OUT" --quick  # one GPU: compile + run

Each world size runs in fresh processes under a time limit (a kernel that waits on a peer that
never comes would otherwise hang the run); what did not finish is reported as such. NVLink
multicast stays off (``NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import queue
import sys
import tempfile
import time
from pathlib import Path

BENCHES = {
    "ag_gemm": "kernels.comm.ag_gemm_bench",
    "gemm_rs": "kernels.comm.gemm_rs_bench",
    "allreduce_norm": "kernels.comm.allreduce_norm_bench",
    "moe": "kernels.comm.moe_bench",
    "ring_kv": "kernels.comm.ring_kv_bench",
}
_NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def _rank(rank: int, world: int, store: str, benches: list[str], quick: bool, results) -> None:
    import torch  # after setup: main turns NVLink multicast off before torch loads
    import torch.distributed as dist  # after setup: main turns NVLink multicast off before torch loads

    os.environ.update(_NO_MULTICAST)
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"file://{store}", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    try:
        for bench in benches:
            module = importlib.import_module(BENCHES[bench])
            specs = module.cases(world)
            if quick:
                specs = specs[:1]
            for spec in specs:
                started = time.time()
                record = module.measure(spec, world, rank).to_dict()
                record["wall_s"] = round(time.time() - started, 1)
                if rank == 0:
                    results.put(("record", record))
                torch.cuda.empty_cache()
    except Exception as exc:
        results.put(("error", f"rank {rank}: {type(exc).__name__}: {exc}"))
        raise
    finally:
        dist.destroy_process_group()


def run_world(world: int, benches: list[str], quick: bool, timeout_s: float) -> tuple[list[dict], list[str]]:
    """Every record of one world size, and what went wrong."""
    import torch.multiprocessing as mp  # after setup: main turns NVLink multicast off before torch loads

    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        procs = [ctx.Process(target=_rank, args=(r, world, store, benches, quick, results)) for r in range(world)]
        for p in procs:
            p.start()
        records, problems = [], []
        deadline = time.time() + timeout_s
        while any(p.is_alive() for p in procs) and time.time() < deadline:
            try:
                kind, item = results.get(timeout=1.0)
            except queue.Empty:
                continue
            (records if kind == "record" else problems).append(item)
        for p in procs:
            if p.is_alive():
                p.kill()
                problems.append(f"world size {world}: rank process {p.pid} still running after {timeout_s:.0f} s, killed")
            p.join()
        while True:
            try:
                kind, item = results.get_nowait()
            except queue.Empty:
                break
            (records if kind == "record" else problems).append(item)
    return records, problems


def _fmt(x: float | None) -> str:
    return "" if x is None else f"{x:.3f}"


def markdown(report: dict) -> str:
    """The records as one table per kernel and world size: ms, speedup over torch + NCCL, floors."""
    from kernels.comm.bench_common import Measured, fractions  # after setup: main (the caller) turns NVLink multicast off before torch loads

    lines = ["# kloom comm kernels: side by side", "", f"Command: `{report['command']}`", "", f"Machine: {report['machine']}", ""]
    for problem in report["problems"]:
        lines.append(f"- problem: {problem}")
    for record in report["records"]:
        m = Measured(**{k: v for k, v in record.items() if k in Measured.__dataclass_fields__})
        base = m.ms.get("torch+nccl")
        frac = fractions(m)
        lines += ["", f"## {m.kernel}: {m.case}, world size {m.world}", "", f"shape {m.shape}; best kloom configuration: `{m.best_ours}`", ""]
        lines += ["| implementation | ms | speedup over torch+nccl | max abs error |", "|---|---|---|---|"]
        for name, ms in sorted(m.ms.items(), key=lambda kv: kv[1]):
            speed = f"{base / ms:.3f}x" if base and ms else ""
            lines.append(f"| {name} | {ms:.4f} | {speed} | {m.max_error.get(name, float('nan')):.3g} |")
        floor = m.floor_ms
        lines += [
            "",
            f"floors (ms): overlap {_fmt(floor.get('overlap'))} (compute alone {_fmt(floor.get('compute_alone'))}, communication alone "
            f"{_fmt(floor.get('comm_alone'))}); model {_fmt(floor.get('model'))} (compute {_fmt(floor.get('model_compute'))}, "
            f"HBM {_fmt(floor.get('model_hbm'))}, link {_fmt(floor.get('model_link'))})",
            f"fraction of floor reached by the best kloom configuration: overlap {_fmt(frac.get('overlap'))}, model {_fmt(frac.get('model'))}",
        ]
        if m.notes:
            lines.append(f"notes: {m.notes}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-sizes", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--kernels", nargs="+", default=list(BENCHES), choices=list(BENCHES))
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--quick", action="store_true", help="the first case of each kernel only")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per world size")
    args = parser.parse_args(argv)
    for key, value in _NO_MULTICAST.items():
        os.environ[key] = value
    import torch  # after setup: NVLink multicast is off (just above) before torch loads

    available = torch.cuda.device_count()
    report = {
        "command": "python3 -m kernels.comm.bench " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": f"{available} x {torch.cuda.get_device_name(0) if available else 'no GPU'}; torch {torch.__version__}",
        "records": [],
        "problems": [],
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for world in args.world_sizes:
        if world > available:
            report["problems"].append(f"world size {world} skipped: this machine has {available} GPU(s)")
        else:
            records, problems = run_world(world, args.kernels, args.quick, args.timeout)
            report["records"] += records
            report["problems"] += problems
        # Written after each world size: a run stopped later keeps what it measured.
        (out / "comm_bench.json").write_text(json.dumps(report, indent=1) + "\n")
        (out / "comm_bench.md").write_text(markdown(report))
    print(markdown(report))
    return 0 if report["records"] and not report["problems"] else 1


if __name__ == "__main__":
    sys.exit(main())
