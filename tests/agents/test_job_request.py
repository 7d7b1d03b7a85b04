"""``JobRequest.spec``: the one way a ``JobSpec`` is made (the API's job rows, ``kloom optimize``
and a batch's jobs all go through it)."""

from agents.records import JobRequest, JobSpec, Limits
from kloom.batch.plan import BatchSettings


def test_a_request_becomes_the_job_of_a_workload():
    request = JobRequest(world_size=4, device_kind="cuda-h200x4", strategist="offline", limits=Limits(max_iters=3, max_wall_s=60.0),
                         use_kb=False, profile="none", options={"seed": 7})
    spec = request.spec("/w/a.py", "job-1", shapes="gpu")
    assert spec == JobSpec(workload="/w/a.py", world_size=4, device="cuda", shapes="gpu", strategist="offline",
                           limits=Limits(max_iters=3, max_wall_s=60.0), job_id="job-1", use_kb=False, profile="none", options={"seed": 7})
    assert JobRequest(world_size=1, shapes="ci").spec("w.py", shapes="gpu").shapes == "ci"  # the request's shapes win


def test_a_spec_shares_nothing_mutable_with_its_request():
    request = JobRequest(world_size=2, options={"a": 1})
    spec = request.spec("w.py")
    spec.limits.max_iters = 99
    spec.options["a"] = 2
    assert request.limits.max_iters == Limits().max_iters and request.options == {"a": 1}


def test_a_batch_and_a_single_job_asking_the_same_get_the_same_spec():
    batch = BatchSettings(suite="s", world_size=2, device="cuda", max_iters=5, max_wall_s_per_job=30.0, use_kb=False, profile="none")
    single = JobRequest(world_size=2, device_kind="cuda", limits=Limits(max_iters=5, max_wall_s=30.0), use_kb=False, profile="none")
    assert batch.job_spec("/w/a.py", job_id="j", shapes="gpu") == single.spec("/w/a.py", "j", shapes="gpu")
