"""batchnorm kernels (see kernel.py)."""
