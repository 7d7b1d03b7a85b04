"""kloom's kernel library: Triton kernels kloom writes, one family per folder.

Each family folder holds its kernel module(s), its test (``test_<family>.py``, run on the CPU
under ``TRITON_INTERPRET=1``) and its benchmark (``bench_<family>.py``: the kernel against eager
PyTorch and against what inductor generates for the same pattern, on a GPU). ``bench_all.py``
runs every family's benchmark and writes the table of measured ratios the strategist reads
(``wins.json``: a family is offered only where it beat inductor).

Kernel modules are embedded into candidate files by their source text
(``embed_kernels`` in ``agents/strategist/embed.py``), so they import only ``torch``, ``triton``,
``math``, the standard library and other kernel modules (``from kernels.<family>.<module> import
name``, inlined when embedded), carry no test code and no ``from __future__`` import, and define
top-level names that no other kernel module defines. Nothing here imports Triton at package level:
``kernels.elementwise.opcodes`` is plain Python that the strategist reads.
"""
