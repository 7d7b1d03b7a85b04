"""Why kloom's reduction over a middle axis loses to eager on the H100 (KernelBench's sum, max,
argmax and min over dim 1 of a (128, 4096, 4095) float32 tensor: 0.83-0.94x in the judge, so the
jobs keep the reference): the column kernel (``kernels/reduce/kernel.py``, ``_rd_cols``) launched
with explicit tiles, warps and pipeline stages, and with the reduced axis cut into segments whose
partials a second small reduction combines, each beside eager, interleaved, from one process.

    python3 benchmarks/gpu/reduce_middle.py [--shape 128 4096 4095] [--ops sum argmax] [--out FILE]

(about 170 compiled variants: a few minutes on an H100).

Prints a table (ms, GB/s read, speedup over eager) and writes it as JSON; a configuration that
beats eager here is what ``_rd_cols_configs`` / ``_rd_split`` should offer. On a machine without
a GPU it runs a small shape through Triton's interpreter (a check that the script works).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import torch  # noqa: E402

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernels are defined

import triton  # noqa: E402

from kernels.elementwise.kernel import ew_epilogue_args  # noqa: E402
from kernels.reduce.kernel import RD_OPS, _rd_cols, _rd_combine  # noqa: E402

#: (BLOCK_R, BLOCK_I, warps, stages): the landed configurations first, then wider and deeper ones.
TILES = [(32, 64, 4, 3), (8, 128, 4, 3), (16, 256, 8, 3), (8, 512, 8, 3), (32, 256, 8, 3)] + [
    (r, i, w, s) for (r, i), w, s in itertools.product([(64, 128), (128, 64), (16, 512), (4, 1024), (64, 64), (32, 128)], (4, 8), (1, 3)) if w * 32 <= r * i
]
SPLITS = (1, 2, 4)
EAGER = {
    "sum": lambda x: torch.sum(x, dim=1, keepdim=True),
    "max": lambda x: torch.amax(x, dim=1, keepdim=True),
    "min": lambda x: torch.amin(x, dim=1, keepdim=True),
    "argmax": lambda x: torch.argmax(x, dim=1),
    "mean": lambda x: torch.mean(x, dim=1, keepdim=True),
}


def column_reduce(x: torch.Tensor, op: str, tile: tuple, split: int) -> torch.Tensor:
    """``op`` over dim 1 of the contiguous 3-D ``x`` by ``_rd_cols`` with this tile, the axis cut
    into ``split`` segments (their float32 partials combined by torch)."""
    outer, R, inner = x.shape
    block_r, block_i, warps, stages = tile
    seg = R // split
    index = op == "argmax"
    values = torch.empty(outer * split * inner, dtype=torch.float32, device=x.device)
    indices = torch.empty(outer * split * inner, dtype=torch.int64, device=x.device) if index else values
    args = dict(
        **ew_epilogue_args(None, tuple(x.shape), x, prefix="pre"), **ew_epilogue_args(None, (outer * split * inner,), values),
        OP=RD_OPS[op], RAW=split > 1, WITH_VALUE=not index or split > 1, WITH_INDEX=index, BIG=x.numel() >= 2**31 - 2**16,
    )  # fmt: skip
    grid = (outer * split, triton.cdiv(inner, block_i))
    _rd_cols.fn[grid](x, values, indices, outer * split, seg, inner, **args, BLOCK_R=block_r, BLOCK_I=block_i, num_warps=warps, num_stages=stages)
    if split == 1:
        return (indices if index else values).view(outer, 1, inner)
    parts = values.view(outer, split, inner)
    if index:
        pick = parts.argmax(dim=1, keepdim=True)
        offsets = torch.arange(split, device=x.device).view(1, split, 1) * seg
        return (indices.view(outer, split, inner) + offsets).gather(1, pick)
    return _rd_combine(op, parts, R).unsqueeze(1)


def _time(fn, x, reps: int) -> float:
    if x.device.type != "cuda":
        t0 = time.perf_counter()
        fn(x)
        return (time.perf_counter() - t0) * 1e3
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn(x)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / reps


def main() -> None:
    cuda = torch.cuda.is_available()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", type=int, nargs=3, default=[128, 4096, 4095] if cuda else [2, 64, 33])
    parser.add_argument("--ops", nargs="+", default=["sum", "argmax"], choices=sorted(EAGER))
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of (eager, variant)")
    parser.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "reduce_middle.json"))
    args = parser.parse_args()
    device = "cuda" if cuda else "cpu"
    x = torch.randn(*args.shape, device=device)
    read_gb = x.numel() * 4 / 1e9
    tiles = TILES if cuda else TILES[:2]
    splits = SPLITS if cuda else (1, 2)
    rows = []
    for op in args.ops:
        want = EAGER[op](x)
        for tile, split in itertools.product(tiles, splits):
            if args.shape[1] % split or args.shape[1] // split < tile[0]:
                continue
            variant = lambda t, op=op, tile=tile, split=split: column_reduce(t, op, tile, split)  # noqa: E731
            try:
                got = variant(x)
            except Exception as exc:  # a tile the compiler refuses (registers, shared memory)
                rows.append({"op": op, "tile": tile, "split": split, "error": f"{type(exc).__name__}: {str(exc)[:120]}"})
                continue
            ok = torch.equal(got.view(-1), want.view(-1)) if op == "argmax" else torch.allclose(got.view(-1), want.view(-1).float(), rtol=1e-4, atol=1e-3)
            reps = max(1, int(200 / max(read_gb * 300, 1))) if cuda else 1
            eager_ms, kernel_ms = [], []
            for _ in range(args.rounds if cuda else 1):
                eager_ms.append(_time(EAGER[op], x, reps))
                kernel_ms.append(_time(variant, x, reps))
            e, k = statistics.median(eager_ms), statistics.median(kernel_ms)
            rows.append({"op": op, "tile": tile, "split": split, "correct": bool(ok), "eager_ms": e, "kernel_ms": k, "speedup": e / k, "kernel_gbs": read_gb / k * 1e3})
            print(f"{op:7} tile {tile!s:18} split {split}: {'ok ' if ok else 'BAD'} eager {e:7.3f} ms  kernel {k:7.3f} ms  {read_gb / k * 1e3:7.0f} GB/s  {e / k:5.2f}x", flush=True)
    best = {}
    for row in rows:
        if row.get("correct") and row["speedup"] > best.get(row["op"], {}).get("speedup", 0):
            best[row["op"]] = row
    for op, row in best.items():
        print(f"best {op}: tile {row['tile']} split {row['split']}: {row['speedup']:.3f}x over eager ({row['kernel_gbs']:.0f} GB/s)")
    device_name = torch.cuda.get_device_name() if cuda else "cpu (interpreter)"
    with open(args.out, "w") as f:
        json.dump({"device": device_name, "shape": args.shape, "rows": rows, "best": best, "bytes_read": x.numel() * 4}, f, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
