"""Shared by the comm kernels' tests: Triton's interpreter on CPU tensors (where there is no GPU),
made to work with the installed numpy.

Triton 3.6's interpreter turns a scalar into a Python int with ``int()`` of a one-element array,
which numpy 2.4 refuses ("only 0-dimensional arrays can be converted"); every loop with a bound
known only at run time fails on it. The wrapper below re-declares ``__index__`` with ``.item()``
inside the interpreter's own patch scope, so it is undone with the rest after each launch. The GPU
path never runs the interpreter.
"""

from __future__ import annotations

import os

import torch

# Without a GPU the kernels run in Triton's interpreter; with one, they compile (the gpu tests),
# and the interpreter tests run only if TRITON_INTERPRET=1 was set for the session.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import triton.runtime.interpreter as _interp  # noqa: E402

_original_patch = _interp._patch_lang_tensor


def _patch_lang_tensor(tensor, scope):
    _original_patch(tensor, scope)
    scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))


_interp._patch_lang_tensor = _patch_lang_tensor


@pytest.fixture(autouse=True)
def _interpreted(request):
    if request.node.get_closest_marker("gpu") is None and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("the comm kernels' simulated-rank tests run in Triton's interpreter: set TRITON_INTERPRET=1 on a GPU machine")

# comm_sim is imported by module name (tests/kernels is not a package).
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
