"""The CUDA-graph wrapper's runtime (``runtime.py``), embedded by ``agents.strategist.codegen``."""
