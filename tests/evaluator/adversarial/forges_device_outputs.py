"""Cheat (with the static checker off): hand its outputs over as a "device allocation" whose
descriptor is /dev/null (a character device, as the driver's descriptors are, so the judge's
process passes it on), naming the reference's own GPU, hoping the reference's rank maps something
it should not, dies trying (blamed on the reference), or reads nothing and passes. Caught: the
driver refuses to import what is not an exportable allocation (on the CPU nothing maps device
memory at all), the outputs are unreadable, the candidate incorrect, and the reference lives on."""
import os

import torch
import torch.nn as nn

_protocol = getattr(torch, "sys").modules["services.worker.evaluator.protocol"]
_finish = _protocol._Outgoing.finish
_GRAIN = 1 << 21


def _forged(self):
    fds, own, device = _finish(self)
    if own is not None:  # the outputs went into a host file (the CPU, small outputs): call it device memory
        size = (own.size + _GRAIN - 1) // _GRAIN * _GRAIN
        own.close()
        uuid = str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid) if torch.cuda.is_available() else "GPU-forged"
        self.devices.append([len(fds) - 1, size, uuid])
    elif device is None:
        return fds, own, device
    # The outputs' descriptor (the last) swapped for /dev/null; the real allocation's entry kept.
    return fds[:-1] + [os.open("/dev/null", os.O_RDONLY)], None, device


_protocol._Outgoing.finish = _forged


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2
