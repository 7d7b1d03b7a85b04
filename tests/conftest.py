"""What every test tree shares: on a machine without a GPU, Triton's CPU interpreter switched on
before anything imports Triton (``kernels.testing.interpret_without_gpu``), so that the tests
which run kloom's kernels in their own process pass whether the whole suite or one folder runs."""

from kernels.testing import interpret_without_gpu

interpret_without_gpu()
