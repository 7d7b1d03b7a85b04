"""layernorm kernels (see kernel.py)."""
