"""The ``overlap`` strategy: collectives fused with the computation around them, through kloom's
own Triton kernels over symmetric memory (``kernels/comm``).

- ``rewrite.py``: the source rewrite (which calls go through the helpers) and the candidate's
  helper block (the kernels and ``runtime.py``, inlined by ``agents/strategist/embed.py``);
- ``matmul_ar.py``, ``ar_norm.py``: the patterns this package adds to ``fused_matmul/``'s
  all-gather + matmul and matmul + reduce-scatter pairs;
- ``options.py``: when the catalog offers it, read from the trace's structure;
- ``runtime.py``: what the candidate runs (tuned per shape on the target, the reference's calls
  among the choices).
"""
