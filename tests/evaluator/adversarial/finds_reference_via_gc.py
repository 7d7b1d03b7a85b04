"""Cheat (issue 20): find the judge's reference model, or its outputs, among the process's objects
(``gc.get_objects()``) and return what they give; zeros when nothing is found. Fails with the
static checker off: the candidate's process holds no reference model and no reference output,
so it returns zeros, which the reference's side finds wrong."""
import torch
import torch.nn as nn

_gc = getattr(torch, "sys").modules["gc"]


def _reference_model(own):
    for obj in _gc.get_objects():
        if isinstance(obj, nn.Module) and type(obj).__name__ == "Model" and obj is not own:
            return obj
    return None


def _reference_output(shape, inputs):
    for obj in _gc.get_objects():
        if isinstance(obj, torch.Tensor) and tuple(obj.shape) == shape and all(obj is not x for x in inputs):
            if obj.abs().sum() > 0:
                return obj.clone()
    return None


class ModelNew(nn.Module):
    def __init__(self, k_per_rank, n):
        super().__init__()
        self.n = n

    def forward(self, x):
        model = _reference_model(self)
        if model is not None:
            return model(x)
        found = _reference_output((x.shape[0], self.n), [x])
        return found if found is not None else torch.zeros(x.shape[0], self.n)
