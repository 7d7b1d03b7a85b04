"""The offline strategist: strategies that apply by structure, and the code they write.
Imports torch and the standard library only (it runs on GPU machines with nothing else)."""

from .offline import OfflineCoder, OfflinePlanner

__all__ = ["OfflineCoder", "OfflinePlanner"]
