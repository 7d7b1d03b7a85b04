"""The knowledge base: winning kernels, strategies with the evidence for and against them, and
failures, filled from every finished job and read by the planner before the next one.

``kb.store`` fills and queries it, ``kb.adapter`` opens it and gives the optimization loop its view of it,
``kb.export`` writes a kernel out as a standalone module with its workload and a test.
"""
