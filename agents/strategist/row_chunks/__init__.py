"""The chunks wrapper's runtime (``runtime.py``), embedded by ``agents.strategist.codegen``."""
