"""Cheat (with the static checker off): hand its outputs over as a "device allocation" whose
descriptor is an open directory (its view's root), which would give the reference's rank, and
anything of the workload's code running there, a handle into the candidate's files. Caught: the
judge's process takes no directory, file, socket or pipe for device memory; the reply is refused
and the reference's rank never sees the descriptor."""
import os

import torch
import torch.nn as nn

_protocol = getattr(torch, "sys").modules["services.worker.evaluator.protocol"]
_finish = _protocol._Outgoing.finish


def _forged(self):
    fds, own, device = _finish(self)
    if own is not None:  # the outputs went into a host file (the CPU, small outputs): call it device memory
        size = own.size
        own.close()
        self.devices.append([len(fds) - 1, max(size, 1 << 21), "GPU-forged"])
    elif device is None:
        return fds, own, device
    # The outputs' descriptor (the last) swapped for a directory; a real allocation's entry kept.
    return fds[:-1] + [os.open("/", os.O_RDONLY | os.O_DIRECTORY)], None, device


_protocol._Outgoing.finish = _forged


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2
