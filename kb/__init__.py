"""The knowledge base: winning kernels, strategies with the evidence for and against them, and
failures, filled from every finished job and read by the planner before the next one.

``kb.ingest`` fills it, ``kb.advice`` is what the planner reads from it, ``kb.store`` searches and looks
up its records for the CLI and the API, ``kb.adapter`` opens it and gives the optimization loop its view of it,
``kb.export`` writes a kernel out as a standalone module with its workload and a test.
"""
