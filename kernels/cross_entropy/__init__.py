"""cross_entropy kernels (see kernel.py)."""
