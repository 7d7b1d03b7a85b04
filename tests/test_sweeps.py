"""CI's sample of a sweep (``tests/sweeps.py``) is fixed, says why the rest is skipped, and grows to
every case under ``KLOOM_SLOW_TESTS``."""

from tests import sweeps


def test_the_sample_is_every_nth_case_and_the_rest_is_skipped_with_the_reason(monkeypatch):
    monkeypatch.setattr(sweeps, "FULL", False)
    got = sweeps.params(list("abcdefg"), every=3)
    kept = [p.values[0] for p in got if not p.marks]
    assert kept == ["a", "d", "g"] and sweeps.subset(list("abcdefg"), every=3) == kept
    skipped = [p for p in got if p.marks]
    assert all(any(m.name == "skip" and m.kwargs["reason"] == sweeps.REASON for m in p.marks) for p in skipped)
    pairs = sweeps.params([("x", 2), ("y", 4)], every=2, ids=lambda c: f"{c[0]}-{c[1]}")
    assert [p.values for p in pairs] == [("x", 2), ("y", 4)] and [p.id for p in pairs] == ["x-2", "y-4"]


def test_every_case_runs_under_the_full_setting(monkeypatch):
    monkeypatch.setattr(sweeps, "FULL", True)
    assert all(not p.marks for p in sweeps.params(range(9), every=4))
    assert sweeps.subset(range(9), every=4) == list(range(9))
