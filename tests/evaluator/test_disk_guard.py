"""``disk_guard``: what a pool's ranks write is measured by what it takes, since the pool started,
and past a limit the guard's callback runs once and the caches it watches are emptied."""

from __future__ import annotations

import os
import threading

from services.worker.evaluator.disk_guard import DiskGuard, usage


def test_usage_counts_allocated_bytes_and_entries_without_following_links(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "data").write_bytes(b"x" * (1 << 20))
    with open(tmp_path / "sparse", "wb") as fh:  # a 1 GiB hole: nothing allocated
        fh.truncate(1 << 30)
    os.symlink("/usr", tmp_path / "link")
    used = usage([str(tmp_path)], 100)
    assert used.files == 4  # sub, sub/data, sparse, link
    assert (1 << 20) <= used.bytes < (1 << 20) + (64 << 10)
    assert usage([str(tmp_path)], 1).files == 2  # the walk stops past its bound


def test_growth_past_either_limit_is_reported_and_the_caches_emptied(tmp_path):
    work, cache = tmp_path / "work", tmp_path / "cache"
    work.mkdir()
    cache.mkdir()
    (cache / "old").write_bytes(b"y" * (4 << 20))  # what was there before the pool counts for nothing
    reasons, called = [], threading.Event()
    guard = DiskGuard([str(work), str(cache)], 2 << 20, 50, lambda r: (reasons.append(r), called.set()),
                      caches=[str(cache)], every_s=0.05)
    guard.start()
    try:
        (work / "a").write_bytes(b"z" * (1 << 20))
        assert guard.check() == ""
        (cache / "kernels").mkdir()
        (cache / "kernels" / "b").write_bytes(b"z" * (3 << 20))
        assert called.wait(5.0)
    finally:
        guard.stop()
    assert len(reasons) == 1 and "MiB to their directories" in reasons[0] and guard.reason == reasons[0]
    assert cache.is_dir() and not list(cache.iterdir())  # emptied, kept
    assert (work / "a").exists()  # the pool's own directory goes with the pool, not here

    files = DiskGuard([str(work)], 0, 20, lambda r: None)
    files.start()
    files.stop()
    for i in range(25):
        (work / f"f{i}").touch()
    assert "more than 20 files" in files.check()
