"""The API's bodies take a job's concepts from the records, not from copies of them."""

from __future__ import annotations

import dataclasses
import typing

import pytest
from pydantic import ValidationError

from agents.records import Limits
from kb import records
from services.api.routes.kb import KernelsPublic, get_kernel
from services.api.schemas import JobPublic, JobSettings


def test_a_submissions_limits_are_the_jobs_limits_with_bounds():
    defaults = {f.name: f.default for f in dataclasses.fields(Limits)}
    assert {name: JobSettings.model_fields[name].default for name in defaults} == defaults
    assert JobSettings(world_size=1).limits() == dataclasses.asdict(Limits())
    assert JobSettings(world_size=1, max_iters=3, budget_usd=0.5).limits() == dataclasses.asdict(Limits(max_iters=3, budget_usd=0.5))
    with pytest.raises(ValidationError):
        JobSettings(world_size=1, max_iters=0)


def test_a_jobs_public_limits_are_the_record():
    assert JobPublic.model_fields["limits"].annotation is Limits


def test_the_knowledge_bases_kernel_bodies_are_its_records():
    """``kb.records`` builds a kept kernel once; the API returns those records."""
    assert KernelsPublic.model_fields["data"].annotation == list[records.KernelSummary]
    assert typing.get_type_hints(get_kernel)["return"] is records.KernelDetail
