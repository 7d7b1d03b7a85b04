"""Autotuning choices from one candidate to the next, through the real evaluator on the CPU
(Triton's interpreter): the judge records what the autotuner chose in a kernel candidate (read in
its rank after timing), and a candidate written with the knowledge base's choices runs the pinned
configuration, not the one its autotuner would have taken."""

from __future__ import annotations

import shutil

from agent_helpers import planning_context
from kernel_helpers import WORKLOADS, judged_kernel_candidate

from agents.roles import KBAdvice
from agents.strategist.triton_kernels import plan as kernel_plan
from kloom.evaluation import EvalResult
from kloom.tuning import TunedConfig


def _written(ev, path, tmp_path, tuned: list[TunedConfig]) -> tuple[str, EvalResult, str]:
    plan, code, result = judged_kernel_candidate(ev, path, tmp_path, KBAdvice(tuned=tuned))
    return code, result, plan.rationale


def test_the_judge_keeps_the_autotuners_choices_and_a_seeded_candidate_runs_them(interpreted_evaluator, interpret, tmp_path, monkeypatch):
    monkeypatch.setattr(kernel_plan, "WINS_FILE", tmp_path / "no_wins.json")
    path = tmp_path / "rows.py"
    shutil.copy(WORKLOADS / "softmax_rows.py", path)  # softmax over rows of 300: whole rows in a tile

    code, first, rationale = _written(interpreted_evaluator, path, tmp_path, [])
    assert "seed_tuned([" not in code and "autotuning choice" not in rationale
    chosen = [t for t in first.tuned if t.kernel.startswith("_sm_")]
    assert chosen, first.tuned
    # The interpreter times nothing, so the autotuner took the first configuration that fits:
    # one row a program, four warps (the record round-trips with the evaluation, as the KB keeps it).
    pick = chosen[0]
    assert (pick.kwargs, pick.num_warps) == ({"ROWS": 1}, 4)
    assert EvalResult.from_dict(first.to_dict()).tuned == first.tuned

    # The knowledge base's choice for that kernel and key: four rows a program, eight warps (a
    # configuration of its list that fits too); one for a kernel this candidate lacks, and one
    # naming no configuration of the list, are left out or ignored.
    kept = TunedConfig(pick.kernel, pick.key, {"ROWS": 4}, 8, pick.num_stages)
    foreign = TunedConfig("no_such_kernel", [1], {"BLOCK": 8}, 4, 3)
    bogus = TunedConfig(pick.kernel, [7, "torch.float32"], {"ROWS": 3}, 8, 3)
    code, second, rationale = _written(interpreted_evaluator, path, tmp_path, [kept, foreign, bogus])
    assert "seed_tuned([" in code and "no_such_kernel" not in code
    assert "start from the 3 autotuning choice(s) the knowledge base kept" in rationale
    ran = next(t for t in second.tuned if t.pin_key == pick.pin_key)
    assert (ran.kwargs, ran.num_warps) == ({"ROWS": 4}, 8), "the pinned configuration ran"
    assert not any(t.key == [7, "torch.float32"] for t in second.tuned), "a pin naming no configuration chose nothing"


def test_a_kept_kernel_candidate_reused_whole_is_pinned_too(tmp_path):
    """A kernel candidate the knowledge base kept from this very workload is reused as it was,
    with the kept autotuning choices for its kernels appended (its own autotuned kernels named)."""
    from agents.records import Plan
    from agents.roles import KernelHint
    from agents.strategist import OfflineCoder
    from agents.strategist.embed import embed_kernels
    from agents.strategist.triton_kernels.option import STRATEGY
    from kloom.static_check import check_candidate

    # As a kept kernel candidate holds them: the library's modules embedded, and a ModelNew.
    kept = ("import torch\n" + embed_kernels(["kernels.softmax.kernel"])
            + "\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n")
    hint = KernelHint(kernel_id="k7", code=kept, strategy=STRATEGY, params={}, speedup=1.4, workload_name="w", similarity=1.0,
                      same_workload=True, exact=True)
    pin = TunedConfig("_sm_rows_single", [300, 16, "torch.float32"], {"ROWS": 4}, 8, 3)
    shutil.copy(WORKLOADS / "softmax_rows.py", tmp_path / "w.py")
    ctx = planning_context(tmp_path / "w.py", None)
    ctx.kb = KBAdvice(kernels=[hint], tuned=[pin])
    code = OfflineCoder().write(Plan(strategy="kb_reuse", params={"kernel_id": "k7"}), ctx).code
    assert code.startswith(kept) and "seed_tuned([_sm_rows_single], [" in code
    assert code.count("def seed_tuned(") == 1 and check_candidate(code) == []
    ctx.kb = KBAdvice(kernels=[hint])
    assert OfflineCoder().write(Plan(strategy="kb_reuse", params={"kernel_id": "k7"}), ctx).code == kept, "no choices: as kept"
