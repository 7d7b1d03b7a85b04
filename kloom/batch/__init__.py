"""Batch runs over a benchmark suite, their reports and comparisons."""
