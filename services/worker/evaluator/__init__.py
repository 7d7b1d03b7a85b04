"""The multi-rank evaluator. Imports torch and the standard library only."""

from .evaluator import Evaluator, EvaluatorUnavailable
from .records import BaselineResult, EvalResult
from .settings import EvalSettings

__all__ = ["Evaluator", "EvaluatorUnavailable", "EvalResult", "BaselineResult", "EvalSettings"]
