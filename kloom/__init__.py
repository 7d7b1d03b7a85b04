"""kloom: makes multi-GPU AI kernels fast."""

__version__ = "0.1.0"
