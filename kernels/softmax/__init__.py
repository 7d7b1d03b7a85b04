"""softmax kernels (see kernel.py)."""
