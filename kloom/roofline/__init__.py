"""The communication-aware roofline: hardware ceilings and the floor of a workload on them."""

from .model import HardwareProfile, RooflineTerms, estimate
from .profiles import builtin_profiles, detect_profile, load_profile

__all__ = ["HardwareProfile", "RooflineTerms", "estimate", "builtin_profiles", "detect_profile", "load_profile"]
