"""Importers: KernelBench and ParallelKernelBench checkouts -> suite directories of workloads.

They read the user's checkout when they run and vendor nothing; ``runtime`` is what the imported
workloads call inside the evaluator's rank processes.
"""

from .common import ImportedWorkload, ImporterError, ImportReport, RejectedProblem, read_index
from .kernelbench import import_kernelbench
from .pkb import import_pkb

__all__ = [
    "ImportedWorkload",
    "ImporterError",
    "ImportReport",
    "RejectedProblem",
    "import_kernelbench",
    "import_pkb",
    "read_index",
]
