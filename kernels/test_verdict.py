"""kernels/verdict.py: a kind's verdict comes from the benchmark's rows and nothing else."""

from __future__ import annotations

import json

import pytest

from agents.strategist.triton_kernels.plan import measured_kinds
from kernels.verdict import NoVerdict, layout_verdict, main, select, verdict


def row(pattern, kloom, eager=2.0, default=2.0, cudnn=2.0, error=0.1):
    r = {"pattern": pattern, "eager_ms": eager, "kloom_ms": kloom, "kloom_error": error, "default_ms": default}
    if cudnn is not None:
        r["cudnn_benchmark_ms"] = cudnn
    return r


def test_the_kind_wins_only_against_every_rival_and_correct():
    v = verdict([row("a", 1.0), row("b", 1.0, eager=4.0)], "gpu", "cmd")
    assert v.wins and v.correct and v.cases == 2 and v.vs_eager == pytest.approx(8**0.5) and v.vs_inductor == pytest.approx(2.0)
    assert not verdict([row("a", 1.0, cudnn=0.9)], "gpu", "cmd").wins  # cuDNN's autotuner beats it
    assert not verdict([row("a", 1.0, default=0.5)], "gpu", "cmd").wins  # inductor beats it
    wrong = verdict([row("a", 1.0), row("b", 1.0, error=1.5)], "gpu", "cmd")
    assert not wrong.wins and not wrong.correct


def test_rows_that_cannot_decide_give_no_verdict():
    with pytest.raises(NoVerdict):
        verdict([], "gpu", "cmd")
    with pytest.raises(NoVerdict, match="not measured: b"):
        verdict([row("a", 1.0), {"pattern": "b", "error": "TimeoutError: not started"}], "gpu", "cmd")
    with pytest.raises(NoVerdict, match="cudnn_benchmark_ms"):
        verdict([row("a", 1.0), row("b", 1.0, cudnn=None)], "gpu", "cmd")


def test_selection_and_the_wins_file(tmp_path):
    rows = [row("taps conv2d x", 1.0), row("taps conv2d x channels-last", 5.0), row("taps conv_transpose2d", 5.0)]
    assert [r["pattern"] for r in select(rows, ["taps conv2d"], ["channels-last"])] == ["taps conv2d x"]
    assert [r["pattern"] for r in select(rows, ["taps"], [], ["channels-last"])] == ["taps conv2d x channels-last"]
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    wins = tmp_path / "wins.json"
    wins.write_text(json.dumps({"kinds": {"other": {"vs_inductor": 0.9, "wins": False}}}))
    args = [str(tmp_path / "rows.json"), "--wins-file", str(wins), "--measured-on", "H100"]
    assert main(args + ["--kind", "conv_fp32x3", "--match", "taps conv2d", "--exclude", "channels-last"]) == 0
    assert main(args + ["--kind", "conv_transposed_fp32x3", "--match", "taps conv_transpose2d"]) == 1  # slower: recorded as lost
    assert main(args + ["--kind", "none", "--match", "no such pattern"]) == 2
    kinds = measured_kinds(wins)
    assert kinds["conv_fp32x3"].wins and not kinds["conv_transposed_fp32x3"].wins and not kinds["other"].wins
    assert "none" not in kinds and kinds["conv_fp32x3"].measured_on == "H100"


def test_the_better_layout_is_chosen_and_said():
    rows = [row("c x", 1.5), row("c y", 1.5), row("c x channels-last", 1.0), row("c y channels-last", 1.0)]
    v = layout_verdict(rows, "gpu", "cmd")
    assert v.wins and v.channels_last is True and v.cases == 2 and v.entry()["channels_last"] is True
    slower = [row("c x", 1.0), row("c x channels-last", 1.5)]
    assert layout_verdict(slower, "gpu", "cmd").channels_last is False
    one = [row("c x", 1.0), {"pattern": "c x channels-last", "error": "TimeoutError: not started"}]
    assert layout_verdict(one, "gpu", "cmd").channels_last is False  # the layout measured decides alone
    with pytest.raises(NoVerdict, match="as it comes: no row matches; channels-last: not measured"):
        layout_verdict(one[1:], "gpu", "cmd")
    assert "channels_last" not in verdict(rows[:2], "gpu", "cmd").entry()
