"""The kernel strategy: kloom's own Triton kernels (``kernels/``), instantiated by structure from
the traced op graph. ``templates.py`` holds the protocol other kernel families plug into,
``t_*.py`` the templates, ``chains.py``/``lowering.py`` the elementwise programs they fuse,
``emit.py`` the candidate (``../embed.py`` the kernels it embeds), ``plan.py``/``option.py`` the planning (docs/kernels.md)."""
