"""Fused elementwise chains: one kernel for a sequence of unary/binary ops with broadcasting."""
