"""What the kernel families' tests share: the device they run on (a GPU where there is one, else
the CPU under Triton's interpreter, which ``kernels/conftest.py`` switches on), random inputs
there, and a kernel compiled for an H100 through Triton's real pipeline in a process of its own
(no GPU needed), to read what the compiler made of it."""

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
ROOT = Path(__file__).resolve().parents[1]


def rand(*shape, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(*shape, device=DEVICE, dtype=dtype)


def close32(got, want) -> None:
    """Equal at float32's accuracy over a short reduction (the kernels and torch sum in different orders)."""
    torch.testing.assert_close(got, want, atol=2e-5, rtol=2e-5)


def compiled_for_h100(script: str, specs: list) -> list:
    """Run ``script`` (Python that compiles kernels for ``GPUTarget("cuda", 90, 32)`` from the
    JSON in ``sys.argv[1]`` and prints one JSON line of findings) without the interpreter, and
    return its findings; an assertion error with its stderr when it fails."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", script, json.dumps(specs)], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
