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
        assert guard.wait_base()
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
    assert files.wait_base()
    files.stop()
    for i in range(25):
        (work / f"f{i}").touch()
    assert "more than 20 files" in files.check()


def test_a_directory_made_unreadable_is_read_again_or_reported(tmp_path, monkeypatch):
    """A rank that shares the pool's user could take the rights off a directory to hide what it
    writes there: the guard gives them back (the owner's), and where it cannot, says so."""
    import services.worker.evaluator.disk_guard as guard_module

    hidden = tmp_path / "hidden"
    hidden.mkdir()
    (hidden / "big").write_bytes(b"q" * (2 << 20))
    hidden.chmod(0)
    refused = {str(hidden)}
    real_scandir = os.scandir

    def scandir(path):  # as an unprivileged pool process would find it (root reads anyway)
        if str(path) in refused and not os.stat(path).st_mode & 0o400:
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(guard_module.os, "scandir", scandir)
    used = usage([str(tmp_path)], 100)
    assert used.bytes >= 2 << 20 and not used.unreadable and hidden.stat().st_mode & 0o700 == 0o700

    hidden.chmod(0)
    monkeypatch.setattr(guard_module.os, "chmod", lambda *a: (_ for _ in ()).throw(PermissionError(1, "not permitted")))
    guard = DiskGuard([str(tmp_path)], 1 << 30, 1000, lambda r: None)
    assert usage([str(tmp_path)], 100).unreadable == (str(hidden),)
    assert "cannot read" in guard.check()
    assert usage([str(tmp_path / "gone")], 100).files == 0  # a place not there is empty, not unreadable
