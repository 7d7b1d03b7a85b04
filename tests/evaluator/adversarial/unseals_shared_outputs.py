"""Cheat (with the static checker off): hand its outputs over in a memory file left unsealed, and
cut the file short a moment after it left, so that the reference's rank, mapping it to compare,
dies of SIGBUS (a crash the judge would blame on the reference) or reads bytes that change under
it. Caught: the judge takes only files sealed against writing, shrinking and growing."""
import os
import threading
import time

import torch
import torch.nn as nn

_shared = getattr(torch, "sys").modules["services.worker.evaluator.shared"]
_fcntl = getattr(torch, "sys").modules["fcntl"]


def _unsealed(self):
    fd = os.memfd_create("outputs", os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, self.size)
    view = os.fdopen(os.dup(fd), "r+b")
    for offset, t in self.items:
        view.seek(offset)
        view.write(t.contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    view.close()

    def cut() -> None:
        time.sleep(0.01)
        os.ftruncate(fd, 0)

    threading.Thread(target=cut, daemon=True).start()
    return _shared.Blob(os.dup(fd), self.size)


_shared.Writer.seal = _unsealed


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2
