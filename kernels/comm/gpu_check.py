"""Every comm kernel configuration compiled and run on ONE GPU, with ``world`` simulated ranks whose
buffers are slices of one device tensor (``emulated_peers``): each rank's communication phase,
then each rank's compute phase, as in the interpreter tests, but through Triton's GPU compiler and
at shapes that fill the tuned tiles. Checks every result against torch; writes
``gpu_check.json`` under ``--out``. What it cannot check: concurrency and memory ordering between
GPUs (the phases run one after another), for which ``bench.py`` and the ``gpu`` tests need 2+ GPUs.

    python3 -m kernels.comm.gpu_check --simulate 2 4 --out "$OUT"
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

from . import ag_gemm, allreduce_norm, gemm_ar, gemm_rs, moe, ring_kv
from .peers import emulated_peers

SPINS = 1 << 20  # a wait that is not satisfied at once never will be here: fail fast
#: Where the simulated ranks live: "cuda", or "cpu" under TRITON_INTERPRET=1 (a dry run of this script;
#: with float16: Triton 3.6's interpreter computes bf16 dot products wrongly).
DEVICE = "cuda"
DTYPE = torch.bfloat16


def _phases(world: int, call, phases) -> list:
    out = []
    for phase in phases:
        out = [call(r, phase) for r in range(world)]
    if DEVICE == "cuda":
        torch.cuda.synchronize()
    return out


def _check(name: str, got: list[torch.Tensor], want: list[torch.Tensor], peers, atol: float, started: float, rtol: float = 1.6e-2) -> dict:
    """Every element within ``atol + rtol * |want|`` (the suite's bf16 tolerances) on every rank,
    and no flag wait timed out."""
    err = max(float((g.float() - w.float()).abs().max()) for g, w in zip(got, want))
    outside = sum(int(((g.float() - w.float()).abs() > atol + rtol * w.float().abs()).sum()) for g, w in zip(got, want))
    timeouts = sum(int(p.status) for p in peers)
    ok = outside == 0 and timeouts == 0
    return {"check": name, "max_error": err, "outside_tolerance": outside, "timeouts": timeouts, "ok": ok, "s": round(time.time() - started, 2)}


def check_ag_gemm(world: int) -> list[dict]:
    ms, k, n = 384, 1024, 768
    dtype = DTYPE
    shards = [torch.randn(ms, k, device=DEVICE, dtype=dtype) for _ in range(world)]
    b = (torch.randn(n, k, device=DEVICE, dtype=dtype) / k**0.5).t()
    want = (torch.cat(shards).float() @ b.float()).to(dtype)
    rows = []
    for name, config in ag_gemm.TUNING.items():
        started = time.time()
        peers = emulated_peers(world, ag_gemm.buffer_numel(world, ms, k), dtype, ag_gemm.flags_needed(world, config), DEVICE)
        got = _phases(world, lambda r, p: ag_gemm.all_gather_matmul(shards[r], b, peers[r], config, phase=p, epoch=1, max_spins=SPINS), (1, 2))
        rows.append(_check(f"ag_gemm:{name}", got, [want] * world, peers, 0.05, started))
    return rows


def check_gemm_rs_ar(world: int) -> list[dict]:
    m, k, n = 768 * world, 512, 640
    dtype = DTYPE
    a = [torch.randn(m, k, device=DEVICE, dtype=dtype) for _ in range(world)]
    b = [(torch.randn(n, k, device=DEVICE, dtype=dtype) / (k * world) ** 0.5).t() for _ in range(world)]
    total = sum(x.float() @ y.float() for x, y in zip(a, b)).to(dtype)
    ms = m // world
    rows = []
    for name, config in gemm_rs.TUNING.items():
        started = time.time()
        peers = emulated_peers(world, gemm_rs.buffer_numel(world, ms, n), dtype, gemm_rs.flags_needed(world, ms, n, config), DEVICE)
        got = _phases(world, lambda r, p: gemm_rs.matmul_reduce_scatter(a[r], b[r], peers[r], config, phase=p, epoch=1, max_spins=SPINS), (1, 2))
        rows.append(_check(f"gemm_rs:{name}", got, [total[r * ms : (r + 1) * ms] for r in range(world)], peers, 0.05, started))
        started = time.time()
        peers = emulated_peers(world, gemm_ar.buffer_numel(world, ms, n), dtype, gemm_ar.flags_needed(world, ms, n, config), DEVICE)
        outs = [torch.empty(m, n, device=DEVICE, dtype=dtype) for _ in range(world)]
        _phases(world, lambda r, p: gemm_ar.matmul_all_reduce(a[r], b[r], peers[r], config, out=outs[r], phase=p, epoch=1, max_spins=SPINS), (1, 2, 3))
        rows.append(_check(f"gemm_ar:{name}", outs, [total] * world, peers, 0.05, started))
    return rows


def check_allreduce_norm(world: int) -> list[dict]:
    dtype = DTYPE
    rows = []
    for tokens, hidden in ((4, 8192), (1024, 4096)):
        xs = [torch.randn(tokens, hidden, device=DEVICE, dtype=dtype) / world**0.5 for _ in range(world)]
        residual = torch.randn(tokens, hidden, device=DEVICE, dtype=dtype)
        weight = 1 + 0.1 * torch.randn(hidden, device=DEVICE, dtype=dtype)
        h = sum(x.float() for x in xs).to(dtype) + residual
        hf = h.float()
        want = weight * (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(dtype)
        for name, config in allreduce_norm.TUNING.items():
            started = time.time()
            peers = emulated_peers(world, allreduce_norm.buffer_numel(world, tokens * hidden), dtype, allreduce_norm.flags_needed(world, config), DEVICE)
            phases = (1, 2) if config.algo == "one_shot" else (1, 2, 3)
            outs = [(torch.empty_like(xs[r]), torch.empty_like(xs[r])) for r in range(world)]
            _phases(world, lambda r, p: allreduce_norm.all_reduce_add_rmsnorm(xs[r], residual, weight, 1e-6, peers[r], config, phase=p, epoch=1, max_spins=SPINS, out=outs[r]), phases)
            rows.append(_check(f"allreduce_norm:{name} {tokens}x{hidden}", [o[0] for o in outs], [want] * world, peers, 0.08, started))
    return rows


def check_moe(world: int) -> list[dict]:
    tokens, hidden, ffn, experts, topk = 256, 512, 384, 8 * world, 4
    dtype = DTYPE
    local = experts // world
    popularity = torch.rand(experts, device=DEVICE) ** 2 + 0.05
    idx = [torch.multinomial(popularity.expand(tokens, experts).contiguous(), topk, replacement=False) for _ in range(world)]
    counts_all = torch.stack([torch.bincount(t.reshape(-1), minlength=experts) for t in idx])
    xs = [torch.randn(tokens, hidden, device=DEVICE, dtype=dtype) for _ in range(world)]
    ws = [torch.softmax(torch.randn(tokens, topk, device=DEVICE), -1) for _ in range(world)]
    weights = [torch.randn(local, hidden, ffn, device=DEVICE, dtype=dtype) / hidden**0.5 for _ in range(world)]
    routings = [moe.route(idx[r], counts_all, r, world, experts) for r in range(world)]
    # What each rank receives, in the dispatcher's layout: (local expert, source, pair order).
    want = []
    for d in range(world):
        rows = []
        for j in range(local):
            for s in range(world):
                pairs = (idx[s].reshape(-1) == d * local + j).nonzero().reshape(-1)
                rows.append(xs[s][pairs // topk])
        want.append(torch.cat(rows))
    rows_out = []
    for name, config in moe.TUNING.items():
        started = time.time()
        most = world * tokens * topk
        peers = emulated_peers(world, most * hidden, dtype, world * config.comm_programs, DEVICE)
        peers_w = emulated_peers(world, most, torch.float32, 1, DEVICE)
        got = _phases(world, lambda r, p: moe.dispatch(xs[r], ws[r], routings[r], peers[r], peers_w[r], config, expert_weight=weights[r], phase=p, epoch=1, max_spins=SPINS)[0], (1, 2))
        expected = [torch.cat([rows @ weights[r][j] for j, rows in enumerate(want[r].split(routings[r].tokens_per_expert.tolist()))]) for r in range(world)]
        rows_out.append(_check(f"moe dispatch+gemm:{name}", got, expected, peers, 0.05, started))
    return rows_out


def check_ring_kv(world: int) -> list[dict]:
    shape = (1, 4, 256, 64)
    dtype = DTYPE
    qs, ks, vs = ([torch.randn(shape, device=DEVICE, dtype=dtype) for _ in range(world)] for _ in range(3))
    k_all, v_all = torch.cat(ks, 2).float(), torch.cat(vs, 2).float()
    rows = []
    for causal in (False, True):
        started = time.time()
        peers = emulated_peers(world, ring_kv.buffer_numel(world, ks[0], vs[0]), dtype, world, DEVICE)
        handles, sources = [], []
        for r in range(world):
            dests, src = ring_kv.ring_order(r, world, causal)
            handles.append(ring_kv.exchange((ks[r], vs[r]), peers[r], dests, epoch=1, max_spins=SPINS))
            sources.append(src)
        got, want = [], []
        for r in range(world):
            got.append(ring_kv.ring_attention(qs[r], handles[r], sources[r], _attend, causal))
            scores = (qs[r].float() @ k_all.transpose(-1, -2)) / shape[-1] ** 0.5
            if causal:
                rows_at = r * shape[2] + torch.arange(shape[2], device=DEVICE)[:, None]
                scores = scores.masked_fill(torch.arange(k_all.shape[-2], device=DEVICE)[None, :] > rows_at, float("-inf"))
            want.append(torch.softmax(scores, -1) @ v_all)
        rows.append(_check(f"ring_kv causal={causal}", got, want, peers, 1e-2, started))
    return rows


def _attend(q, k, v, causal):
    if q.is_cuda:
        return torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal)[:2]
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--simulate", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: a dry run under TRITON_INTERPRET=1")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    args = parser.parse_args(argv)
    global DEVICE, DTYPE
    DEVICE, DTYPE = args.device, getattr(torch, args.dtype)
    torch.manual_seed(0)
    report = {"device": torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu (interpreter)", "dtype": args.dtype, "torch": torch.__version__, "rows": []}
    for world in args.simulate:
        for check in (check_ag_gemm, check_gemm_rs_ar, check_allreduce_norm, check_moe, check_ring_kv):
            try:
                rows = check(world)
            except Exception as exc:  # reported: the point of this run is to see what fails to compile or run
                rows = [{"check": check.__name__, "ok": False, "error": f"{type(exc).__name__}: {str(exc)[:2000]}"}]
            for row in rows:
                row["simulated_world"] = world
                print(json.dumps(row), flush=True)
            report["rows"] += rows
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_check.json").write_text(json.dumps(report, indent=1) + "\n")
    failed = [r for r in report["rows"] if not r.get("ok")]
    print(f"{len(report['rows']) - len(failed)}/{len(report['rows'])} checks passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
