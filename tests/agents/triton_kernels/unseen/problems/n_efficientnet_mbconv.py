"""EfficientNet MBConv (eval): expand 1x1, BN, SiLU, depthwise 5x5, BN, SiLU, squeeze-and-excitation, project 1x1, BN, residual."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, channels=8, expand=4, se_ratio=0.25):
        super().__init__()
        hidden = channels * expand
        squeezed = max(1, int(channels * se_ratio))
        self.expand = nn.Conv2d(channels, hidden, 1, bias=False)
        self.bn0 = nn.BatchNorm2d(hidden, momentum=0.01, eps=1e-3)
        self.dw = nn.Conv2d(hidden, hidden, 5, padding=2, groups=hidden, bias=False)
        self.bn1 = nn.BatchNorm2d(hidden, momentum=0.01, eps=1e-3)
        self.se_reduce = nn.Conv2d(hidden, squeezed, 1)
        self.se_expand = nn.Conv2d(squeezed, hidden, 1)
        self.project = nn.Conv2d(hidden, channels, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels, momentum=0.01, eps=1e-3)
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.normal_(0, 0.1)
                m.running_var.uniform_(0.7, 1.3)
        self.eval()

    def forward(self, inputs):
        x = F.silu(self.bn0(self.expand(inputs)))
        x = F.silu(self.bn1(self.dw(x)))
        s = F.adaptive_avg_pool2d(x, 1)
        s = self.se_expand(F.silu(self.se_reduce(s)))
        x = torch.sigmoid(s) * x
        x = self.bn2(self.project(x))
        return x + inputs


def get_inputs():
    return [torch.randn(2, 8, 8, 8)]


def get_init_inputs():
    return []
