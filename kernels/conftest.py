"""The kernel library's tests run on the CPU in Triton's interpreter where there is no GPU.

Triton decides between compiling and interpreting when a function is decorated, its own library
functions (``tl.sum``'s combiner, ...) included, at ``import triton``: the switch must be on
before Triton is first imported. It is turned on here for this process only; the environment
variable is put back, so the evaluator ranks other tests start do not inherit it."""

import os
import sys
import warnings

import torch

if not torch.cuda.is_available():
    preset = os.environ.get("TRITON_INTERPRET")
    if "triton" in sys.modules and preset != "1":
        raise RuntimeError(
            "Triton was imported before kernels/conftest.py could switch it to its CPU interpreter: "
            "run the kernel tests in a process of their own (pytest kernels) or with TRITON_INTERPRET=1"
        )
    os.environ["TRITON_INTERPRET"] = "1"
    import triton

    triton.knobs.runtime.interpret = True
    if preset is None:
        del os.environ["TRITON_INTERPRET"]
    # The interpreter computes masked-off lanes too (exp of -inf - -inf): NumPy warns of it.
    warnings.filterwarnings("ignore", category=RuntimeWarning, module="triton.runtime.interpreter")
