"""The autotuning choices a candidate's rank reports (``kloom.tuning``) are a hint from the
candidate's own process: the judge keeps only well-formed records, of bounded number and size,
whatever the process sends, and they never decide the verdict."""

from __future__ import annotations

from pathlib import Path

from kloom.evaluation import EvalResult
from kloom.tuning import MAX_TUNED, TunedConfig, parse_one, parse_tuned

HERE = Path(__file__).parent
GOOD = {"kernel": "_sm_rows_single", "key": [300, 16, "torch.float32"], "kwargs": {"ROWS": 4}, "num_warps": 8, "num_stages": 3}


def test_only_well_formed_records_are_kept():
    bad = [
        "not a record", None, [GOOD],
        {**GOOD, "kernel": "os.system('x')"},  # not a function's name
        {**GOOD, "kernel": "k" * 500},
        {**GOOD, "key": "300"}, {**GOOD, "key": [[300]]}, {**GOOD, "key": [1] * 100}, {**GOOD, "key": ["x" * 10000]},
        {**GOOD, "kwargs": {"ROWS": [4]}}, {**GOOD, "kwargs": {"not a name": 4}}, {**GOOD, "kwargs": {f"K{i}": i for i in range(40)}},
        {**GOOD, "num_warps": True}, {**GOOD, "num_warps": 4096}, {**GOOD, "num_stages": "3"}, {**GOOD, "num_warps": 0},
    ]
    assert all(parse_one(b) is None for b in bad)
    kept = parse_tuned(bad + [GOOD, {**GOOD, "kwargs": {"ROWS": 1}}])
    assert kept == [TunedConfig(**GOOD)], "well-formed, and each kernel and key once (the first)"
    assert parse_tuned({"not": "a list"}) == [] and parse_tuned(None) == []
    flood = [{**GOOD, "key": [i]} for i in range(10 * MAX_TUNED)]
    assert len(parse_tuned(flood)) == MAX_TUNED


def test_a_forged_autotuner_cache_is_kept_only_as_well_formed_bounded_records(evaluator):
    result = evaluator.evaluate(HERE / "workloads" / "linear_allreduce.py", HERE / "adversarial" / "forges_tuned.py", world_size=2)
    assert result.correct, result.summary()  # the computation is honest: the verdict is the judge's
    assert 0 < len(result.tuned) <= MAX_TUNED
    assert all(parse_one(t.to_dict()) == t for t in result.tuned)
    assert not any(t.key in ([7], [8]) or len(str(t.key)) > 200 for t in result.tuned), "the malformed ones are gone"
    assert EvalResult.from_dict(result.to_dict()).tuned == result.tuned
