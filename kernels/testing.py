"""What the kernel families' tests share: the device they run on (a GPU where there is one, else
the CPU under Triton's interpreter, which ``interpret_without_gpu`` switches on), random inputs
there, and a kernel compiled for an H100 through Triton's real pipeline in a process of its own
(no GPU needed), to read what the compiler made of it."""

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
ROOT = Path(__file__).resolve().parents[1]


def interpret_without_gpu() -> None:
    """Where there is no GPU, switch Triton to its CPU interpreter for this process. Triton
    decides between compiling and interpreting when a function is decorated, its own library
    functions (``tl.cdiv``, ``tl.sum``'s combiner) included, at ``import triton``: the switch must
    be on before Triton is first imported, or an interpreted kernel calling them fails ("Cannot
    call @triton.jit'd outside of the scope of a kernel"). The environment variable is put back,
    so the evaluator ranks tests start do not inherit it. Called by the conftests of every test
    tree that runs kernels in the process (``kernels/``, ``tests/``): a subset of the suite run on
    its own gets it too."""
    if torch.cuda.is_available():
        return
    preset = os.environ.get("TRITON_INTERPRET")
    if "triton" in sys.modules:
        import triton  # lazy: already imported; only its switch is read

        if triton.knobs.runtime.interpret or preset == "1":
            return
        raise RuntimeError(
            "Triton was imported before the test conftest could switch it to its CPU interpreter: "
            "run the kernel tests in a process of their own (pytest kernels) or with TRITON_INTERPRET=1"
        )
    os.environ["TRITON_INTERPRET"] = "1"
    import triton  # lazy: imported here, after the switch, on purpose

    triton.knobs.runtime.interpret = True
    if preset is None:
        del os.environ["TRITON_INTERPRET"]
    # The interpreter computes masked-off lanes too (exp of -inf - -inf): NumPy warns of it.
    warnings.filterwarnings("ignore", category=RuntimeWarning, module="triton.runtime.interpreter")


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
