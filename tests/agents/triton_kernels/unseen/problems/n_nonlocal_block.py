"""A non-local (self-attention) block over a feature map: 1x1 theta/phi/g convs, views to (B, C', HW), permutes,
bmm, softmax over the last dim, bmm, view back, a 1x1 conv and eval BatchNorm, residual."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, c=8, inter=4):
        super().__init__()
        self.inter = inter
        self.theta = nn.Conv2d(c, inter, 1)
        self.phi = nn.Conv2d(c, inter, 1)
        self.g = nn.Conv2d(c, inter, 1)
        self.w = nn.Conv2d(inter, c, 1)
        self.bn = nn.BatchNorm2d(c)
        self.bn.running_var.fill_(0.8)
        self.bn.weight.data.fill_(0.5)
        self.eval()

    def forward(self, x):
        b, c, h, w = x.shape
        g = self.g(x).view(b, self.inter, -1).permute(0, 2, 1)
        theta = self.theta(x).view(b, self.inter, -1).permute(0, 2, 1)
        phi = self.phi(x).view(b, self.inter, -1)
        f = F.softmax(torch.matmul(theta, phi), dim=-1)
        y = torch.matmul(f, g).permute(0, 2, 1).contiguous().view(b, self.inter, h, w)
        return self.bn(self.w(y)) + x


def get_inputs():
    return [torch.randn(2, 8, 5, 6)]


def get_init_inputs():
    return []
