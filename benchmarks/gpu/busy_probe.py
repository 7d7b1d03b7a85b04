"""What another process's GPU work, left running while that process is stopped, does to a process
timed beside it, and whether a probe from the timed process sees it (issue 20, "device work left
running": the judge stops the candidate's processes while the reference is timed, but kernels it
already queued run on).

A child process queues a backlog on a side stream (large matmuls, many small kernels, or one
spinning block on one SM), says so, and is stopped with SIGSTOP, as the judge stops a side. This
process then (1) probes: the host's wall time of a trivial kernel launched and synchronised, 20
times 1 ms apart; (2) times a reference-like matmul 10 times, with CUDA events and the host clock.
The same with no backlog. Prints one JSON object per case.

    python3 benchmarks/gpu/busy_probe.py [--backlog-ms 300]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import signal
import statistics
import time

import torch

try:
    import triton
    import triton.language as tl

    @triton.jit
    def _spin(x_ptr, n_iter):
        acc = tl.load(x_ptr)
        for _ in range(n_iter):
            acc = acc * 1.0000001 + 1e-7
        tl.store(x_ptr, acc)
except ImportError:  # noqa: BLE001
    _spin = None


def _child(kind: str, backlog_ms: float, ready, go) -> None:
    torch.cuda.init()
    dev = torch.device("cuda", 0)
    side = torch.cuda.Stream(dev)
    a = torch.randn(4096, 4096, device=dev, dtype=torch.float16)
    small = torch.randn(1 << 24, device=dev)
    one = torch.zeros(1, device=dev)
    # Calibrate one unit of each kind.
    def unit():
        if kind == "matmul":
            torch.mm(a, a)
        elif kind == "small":
            small.mul_(1.0000001)
        elif kind == "spin":
            _spin[(1,)](one, 200000)
    for _ in range(3):
        unit()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(20):
        unit()
    torch.cuda.synchronize()
    per = (time.perf_counter() - t0) / 20 * 1e3
    n = max(1, min(500, int(backlog_ms / per)))  # below the launch queue's depth
    ready.put({"unit_ms": per, "units": n})
    go.get()
    with torch.cuda.stream(side):
        for _ in range(n):
            unit()
    ready.put("queued")
    time.sleep(3600)


def _probe(buf) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    buf.add_(1)
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3


def _measure(buf, m) -> dict:
    probes = []
    for _ in range(20):
        probes.append(_probe(buf))
        time.sleep(0.001)
    events, host = [], []
    for _ in range(10):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        s.record()
        torch.mm(m, m)
        e.record()
        e.synchronize()
        host.append((time.perf_counter() - t0) * 1e3)
        events.append(s.elapsed_time(e))
    q = lambda xs, f: sorted(xs)[int(f * (len(xs) - 1))]  # noqa: E731
    return {"probe_ms": {"min": min(probes), "p50": q(probes, 0.5), "p90": q(probes, 0.9), "first": probes[0], "all": [round(p, 4) for p in probes]},
            "ref_event_ms": statistics.median(events), "ref_host_ms": statistics.median(host)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backlog-ms", type=float, default=300.0)
    args = ap.parse_args()
    dev = torch.device("cuda", 0)
    buf = torch.zeros(1, device=dev)
    m = torch.randn(2048, 2048, device=dev)
    for _ in range(5):
        _probe(buf)
        torch.mm(m, m)
    torch.cuda.synchronize()
    print(json.dumps({"case": "idle", **_measure(buf, m)}))
    ctx = mp.get_context("spawn")
    for kind in ("matmul", "small", "spin"):
        if kind == "spin" and _spin is None:
            continue
        ready, go = ctx.Queue(), ctx.Queue()
        child = ctx.Process(target=_child, args=(kind, args.backlog_ms, ready, go), daemon=True)
        child.start()
        calib = ready.get(timeout=120)
        print(json.dumps({"case": "idle, child alive", "kind": kind, **calib, **_measure(buf, m)}))
        go.put(1)
        assert ready.get(timeout=120) == "queued"
        os.kill(child.pid, signal.SIGSTOP)
        t0 = time.perf_counter()
        row = _measure(buf, m)
        row["measured_within_ms"] = (time.perf_counter() - t0) * 1e3
        print(json.dumps({"case": "child stopped, backlog running", "kind": kind, **calib, **row}))
        time.sleep(args.backlog_ms / 1e3 + 0.5)
        print(json.dumps({"case": "after the backlog", "kind": kind, **_measure(buf, m)}))
        os.kill(child.pid, signal.SIGCONT)
        child.kill()
        child.join()


if __name__ == "__main__":
    main()
