"""reduce kernels (see kernel.py)."""
