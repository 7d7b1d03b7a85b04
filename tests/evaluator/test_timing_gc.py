"""The collector around timing (``timing.settle_gc``, ``collect_all``): a settle scans only what
was made since the last one (cheap in a process holding torch), and a full collection frees
cyclic garbage that a settle set aside while it was alive (a reference rank kept across
evaluations runs one after each release)."""

import gc
import weakref

import pytest

from services.worker.evaluator.timing import collect_all, settle_gc


class _Node:
    pass


@pytest.fixture(autouse=True)
def _unfrozen():
    yield
    gc.unfreeze()


def test_a_settle_sets_alive_objects_aside_and_a_full_collection_frees_them_once_garbage():
    node = _Node()
    node.loop = node  # freed by the cyclic collector only
    alive = weakref.ref(node)
    settle_gc()
    assert gc.get_freeze_count() > 0
    del node
    settle_gc()
    assert alive() is not None, "a settle scanned what an earlier one set aside (it should not: that is its cost)"
    collect_all()
    assert alive() is None


def test_a_settle_frees_cycles_made_since_the_last_one():
    settle_gc()
    node = _Node()
    node.loop = node
    alive = weakref.ref(node)
    del node
    settle_gc()
    assert alive() is None
