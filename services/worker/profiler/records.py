"""The profile records, under the names the profiler's modules import them by: they live in the
core (``kloom.profile``), beside the evaluator's records, because a job's steps and the
knowledge base hold them too."""

from __future__ import annotations

from kloom.profile import PROFILE_VERSION, Breakdown, KernelStat, Profile, RankTimeline, Status, Tool

__all__ = ["PROFILE_VERSION", "Breakdown", "KernelStat", "Profile", "RankTimeline", "Status", "Tool"]
