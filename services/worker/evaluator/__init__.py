"""The multi-rank evaluator. Imports torch and the standard library only."""

from kloom.evaluation import BaselineResult, EvalResult

from .evaluator import Evaluator, EvaluatorUnavailable
from .settings import EvalSettings

__all__ = ["Evaluator", "EvaluatorUnavailable", "EvalResult", "BaselineResult", "EvalSettings"]
