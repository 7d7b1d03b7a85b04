"""In-place activations and residual adds written into a region's own output (ResNet's
ReLU(inplace=True), ``out += identity``), beside the cases that must stay out of the region:
the value read before the in-place write, a view of the output taken before the write, and an
in-place write into an operand instead of the region's output."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, c=8, d=32):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(c)
        self.bn2 = nn.BatchNorm2d(c)
        self.fc = nn.Linear(d, d)
        self.act = nn.Hardtanh(-0.5, 0.5, inplace=True)

    def forward(self, x, h):
        y = self.bn(self.conv(x))
        before = y * 2.0  # the value before the writes below
        y.relu_()
        y.mul_(0.5).add_(before)
        y += x  # residual into the region's output
        z = self.bn2(y)
        seen = z.view(-1)  # a view taken before the write: it must see the ReLU
        z.relu_()
        g = self.fc(h)
        self.act(g)
        h.add_(g)  # an operand written in place, not the region's output
        return y, seen.sum(), g, h


def get_inputs():
    return [torch.randn(2, 8, 6, 6), torch.randn(4, 32)]


def get_init_inputs():
    return []
