"""What a batch of the CLI is: its settings (``batch.json``), the suite's workloads it runs and
those it leaves out (``kloom.suite.select``, the selection the API's batches make too), and the
job each workload becomes. Light (no torch): ``kloom bench run`` plans before it loads the runner.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agents.records import JobRequest, JobSpec, Limits
from kloom.suite import select


@dataclass
class BatchSettings:
    suite: str
    world_size: int
    device: str = "cpu"
    strategist: str = "offline"
    max_iters: int = 6
    budget_usd: float | None = None
    max_wall_s_per_job: float | None = None
    shapes: str | None = None
    workloads: list[str] = field(default_factory=list)  # empty: every workload that supports the world size
    use_kb: bool = True
    profile: str = "new_best"

    def request(self) -> JobRequest:
        """What each of the batch's jobs runs with."""
        return JobRequest(world_size=self.world_size, device_kind=self.device, strategist=self.strategist, shapes=self.shapes,
                          limits=Limits(max_iters=self.max_iters, budget_usd=self.budget_usd, max_wall_s=self.max_wall_s_per_job),
                          use_kb=self.use_kb, profile=self.profile)

    def job_spec(self, workload: str, *, job_id: str, shapes: str | None) -> JobSpec:
        """The job of one of the batch's workloads (``shapes``: the evaluator's, when the batch names none)."""
        return self.request().spec(workload, job_id, shapes=shapes)


def plan_batch(settings: BatchSettings) -> tuple[list, list[tuple[str, str]]]:
    """The suite's workloads that this batch runs, and those it leaves out with the reason."""
    picked = select(settings.suite, settings.world_size, settings.workloads)
    left_out = [(p.path, p.reason) for p in picked.problems]
    left_out += [(name, f"supports world sizes {sizes}, not {settings.world_size}") for name, sizes in picked.unsupported]
    left_out += [(name, "no such workload in the suite") for name in sorted(picked.unknown)]
    return picked.chosen, left_out
