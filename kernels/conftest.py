"""The kernel library's tests run on the CPU in Triton's interpreter where there is no GPU
(``kernels.testing.interpret_without_gpu``: before Triton is first imported)."""

from kernels.testing import interpret_without_gpu

interpret_without_gpu()
