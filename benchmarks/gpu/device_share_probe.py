"""Can a trial's outputs go from one process's device memory to another's without host memory?
(``services/worker/evaluator/device_share.py``): an exporting process writes a pattern into
exportable device memory and sends its descriptor over a Unix socket; an importing process maps
it and checks the pattern, plain, in new pid/IPC/network/mount namespaces, and as another user.
Also: what the driver does with a mapping larger than the allocation, and with a descriptor
that is not device memory. Prints one JSON line per case.

    python3 benchmarks/gpu/device_share_probe.py [--gib 1]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time

import torch

try:  # a copy beside this file (run as another user from a folder it can read)
    import device_share
except ImportError:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    from services.worker.evaluator import device_share


def importer(fd_sock: int, size: int, nbytes: int, oversize: bool) -> None:
    sock = socket.socket(fileno=fd_sock)
    msg, fds, _, _ = socket.recv_fds(sock, 16, 1)
    out = {"pid": os.getpid(), "uid": os.getuid()}
    try:
        torch.cuda.init()
        torch.zeros(1, device="cuda")
        t0 = time.perf_counter()
        buf = device_share.ImportedBuffer(fds[0], size * (2 if oversize else 1), 0)
        out["import_s"] = time.perf_counter() - t0
        view = buf.bytes()[:nbytes]
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        words = view.view(torch.int32)
        expected = torch.arange(words.numel(), device="cuda", dtype=torch.int32)
        out["pattern_ok"] = bool(torch.equal(words, expected))
        torch.cuda.synchronize()
        out["check_s"] = time.perf_counter() - t0
        del view, words, expected
        buf.close()
        out["ok"] = True
    except Exception as exc:  # noqa: BLE001 - reported
        out["ok"] = False
        out["error"] = f"{type(exc).__name__}: {exc}"
    os.close(fds[0])
    sock.sendall(json.dumps(out).encode())


def exporter_case(name: str, prefix: list[str], gib: float, oversize: bool = False, memfd: bool = False) -> dict:
    nbytes = int(gib * (1 << 30)) // 4 * 4
    parent, child = socket.socketpair()
    row: dict = {"case": name}
    buf = None
    try:
        if memfd:
            fd = os.memfd_create("not-device")
            os.ftruncate(fd, 1 << 21)
            size = 1 << 21
        else:
            t0 = time.perf_counter()
            buf = device_share.DeviceBuffer(nbytes, 0)
            row["create_s"] = time.perf_counter() - t0
            src = torch.arange(nbytes // 4, device="cuda", dtype=torch.int32)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            buf.bytes()[:nbytes].view(torch.int32).copy_(src)
            torch.cuda.synchronize()
            row["copy_in_s"] = time.perf_counter() - t0
            del src
            fd = buf.export()
            size = buf.size
        cmd = prefix + [sys.executable, os.path.abspath(__file__), "--import-fd", str(child.fileno()), "--size", str(size),
                        "--nbytes", str(nbytes if not memfd else 0)] + (["--oversize"] if oversize else [])
        proc = subprocess.Popen(cmd, pass_fds=[child.fileno()], cwd=os.path.dirname(os.path.abspath(__file__)))
        child.close()
        socket.send_fds(parent, [b"F"], [fd])
        os.close(fd)
        parent.settimeout(120)
        data = b""
        while True:
            part = parent.recv(65536)
            if not part:
                break
            data += part
        proc.wait(timeout=60)
        row["returncode"] = proc.returncode
        row.update(json.loads(data.decode()) if data else {"ok": False, "error": "no reply"})
    except Exception as exc:  # noqa: BLE001 - reported
        row["ok"] = False
        row["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        if buf is not None:
            buf.close()
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--import-fd", type=int, default=None)
    parser.add_argument("--size", type=int, default=0)
    parser.add_argument("--nbytes", type=int, default=0)
    parser.add_argument("--oversize", action="store_true")
    args = parser.parse_args()
    if args.import_fd is not None:
        importer(args.import_fd, args.size, args.nbytes, args.oversize)
        return
    torch.zeros(1, device="cuda")
    print(json.dumps({"case": "available", "ok": device_share.available(0)}), flush=True)
    cases = [("plain", [], {}), ("oversize mapping", [], {"oversize": True}), ("memfd descriptor", [], {"memfd": True})]
    if shutil.which("unshare"):
        cases.append(("new pid/ipc/net/mount namespaces", ["unshare", "--pid", "--fork", "--ipc", "--net", "--mount"], {}))
        if shutil.which("setpriv"):
            cases.append(("namespaces and user nobody", ["unshare", "--pid", "--fork", "--ipc", "--net", "--mount", "setpriv",
                                                          "--reuid=65534", "--regid=65534", "--clear-groups"], {}))
    for name, prefix, kw in cases:
        print(json.dumps(exporter_case(name, prefix, args.gib, **kw)), flush=True)


if __name__ == "__main__":
    main()
