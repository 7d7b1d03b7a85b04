"""scan kernels (see kernel.py)."""
