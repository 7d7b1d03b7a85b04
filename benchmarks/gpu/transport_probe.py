"""Two questions the judge's transport depends on, answered on the GPU machine.

1. What a GiB costs between a device and a sealed memory file (``shared.py``): the device tensor
   copied into the file's mapping as it is (pageable host memory) against the mapping registered
   with CUDA first (``cudaHostRegister``: the copy is DMA straight into the file's pages), both
   ways, with the registration's own cost shown.
2. Whether device memory that one process freed (its allocator's cache emptied) can be read by
   another process that allocates next: the reference's ranks empty their caches between
   commands, and a candidate's fresh allocation must not hold the reference's outputs.

    python3 benchmarks/gpu/transport_probe.py --gib 1 --out $OUT/transport.json
"""

from __future__ import annotations

import argparse
import fcntl
import json
import mmap
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

GIB = 1 << 30
REGISTER_DEFAULT, REGISTER_READ_ONLY = 0, 8


def memfd(size: int) -> int:
    fd = os.memfd_create("probe", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    return fd


def timed(fn) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def to_file(x: torch.Tensor, register: bool) -> tuple[int, dict]:
    size = x.numel() * x.element_size()
    fd = memfd(size)
    parts = {}
    with mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE) as mapping:
        whole = torch.frombuffer(mapping, dtype=torch.uint8)
        if register:
            parts["register_s"] = timed(lambda: _check(torch.cuda.cudart().cudaHostRegister(whole.data_ptr(), size, REGISTER_DEFAULT)))
        parts["copy_s"] = timed(lambda: whole.copy_(x.view(-1).view(torch.uint8)))
        if register:
            parts["unregister_s"] = timed(lambda: _check(torch.cuda.cudart().cudaHostUnregister(whole.data_ptr())))
        del whole
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
    return fd, parts


def from_file(fd: int, size: int, register: bool) -> tuple[torch.Tensor, dict]:
    parts = {}
    if register:
        mapping = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
        whole = torch.frombuffer(mapping, dtype=torch.uint8)  # read-only buffer: torch warns, never writes
        parts["register_s"] = timed(lambda: _check(torch.cuda.cudart().cudaHostRegister(whole.data_ptr(), size, REGISTER_READ_ONLY)))
    else:
        mapping = mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        whole = torch.frombuffer(mapping, dtype=torch.uint8)
    out = {}
    parts["copy_s"] = timed(lambda: out.setdefault("x", whole.to("cuda")))
    if register:
        parts["unregister_s"] = timed(lambda: _check(torch.cuda.cudart().cudaHostUnregister(whole.data_ptr())))
    return out["x"], parts


def _check(code) -> None:
    value = getattr(code, "value", code)
    if int(value) != 0:
        raise RuntimeError(f"CUDA runtime error {code}")


LEFTOVER_WRITER = r'''
import sys, torch
x = torch.full((int(sys.argv[1]) // 4,), 0x5A5A5A5A, dtype=torch.int32, device="cuda")
torch.cuda.synchronize()
del x
torch.cuda.empty_cache()
print("freed", flush=True)
sys.stdin.readline()
'''

LEFTOVER_READER = r'''
import sys, torch
y = torch.empty(int(sys.argv[1]), dtype=torch.uint8, device="cuda")
hits = int((y.view(torch.int32) == 0x5A5A5A5A).sum())
print(hits)
'''


def leftover(size: int) -> dict:
    """Words of the writer's pattern that a second process's fresh allocation holds, while the
    writer lives on with its cache emptied, and after it exited."""
    writer = subprocess.Popen([sys.executable, "-c", LEFTOVER_WRITER, str(size)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert writer.stdout.readline().strip() == "freed"
    alive = int(subprocess.run([sys.executable, "-c", LEFTOVER_READER, str(2 * size)], capture_output=True, text=True, check=True).stdout)
    writer.communicate("\n", timeout=60)
    gone = int(subprocess.run([sys.executable, "-c", LEFTOVER_READER, str(2 * size)], capture_output=True, text=True, check=True).stdout)
    return {"pattern_words_seen_writer_alive": alive, "pattern_words_seen_writer_exited": gone, "words_written": size // 4}


def cache_release(size: int, repeats: int) -> list[dict]:
    """What handing a freed block of ``size`` bytes back to the device costs (``empty_cache``:
    cudaFree), and allocating it anew (cudaMalloc), in seconds."""
    rows = []
    for _ in range(repeats):
        x = torch.empty(size, dtype=torch.uint8, device="cuda")
        del x
        release = timed(torch.cuda.empty_cache)
        allocate = timed(lambda: torch.empty(size, dtype=torch.uint8, device="cuda"))
        rows.append({"empty_cache_s": release, "malloc_s": allocate})
    torch.cuda.empty_cache()
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gib", type=float, default=1.0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default="")
    args = p.parse_args()
    size = int(args.gib * GIB) // 4096 * 4096
    report: dict = {"gib": args.gib, "leftover": leftover(size)}
    report["cache_release"] = cache_release(4 * size, args.repeats)
    print("empty_cache / malloc of", 4 * args.gib, "GiB:", report["cache_release"])
    x = torch.randn(size // 4, device="cuda")
    rows = []
    for _ in range(args.repeats):
        for register in (False, True):
            fd, out_parts = to_file(x, register)
            y, in_parts = from_file(fd, size, register)
            same = bool(torch.equal(y.view(torch.float32), x))
            os.close(fd)
            del y
            rows.append({"registered": register, "device_to_file": out_parts, "file_to_device": in_parts, "same": same})
    report["rows"] = rows
    print(json.dumps(report["leftover"]))
    for r in rows:
        d2f, f2d = r["device_to_file"], r["file_to_device"]
        print(f"registered={r['registered']!s:5} same={r['same']} device->file {sum(d2f.values()):.3f} s {d2f}  "
              f"file->device {sum(f2d.values()):.3f} s {f2d}")
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
