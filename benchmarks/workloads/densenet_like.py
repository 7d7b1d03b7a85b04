"""A DenseNet-121-shaped network (growth 32, blocks of 6/12/24/16 layers, bottleneck 4x, transitions
halving channels and resolution) in training mode on two 64x64 images: every layer of a block
reads more channels than the one before, so hardly two regions of kloom's kernel candidate have
the same shape (246 regions, 136 distinct: ~270 s of compiling estimated by
``agents/strategist/triton_kernels/compile_cost.py``). For the GPU check of that estimate
(results/README.md, "Not run yet")."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Layer(nn.Module):
    def __init__(self, cin, growth):
        super().__init__()
        self.bn1, self.conv1 = nn.BatchNorm2d(cin), nn.Conv2d(cin, 4 * growth, 1, bias=False)
        self.bn2, self.conv2 = nn.BatchNorm2d(4 * growth), nn.Conv2d(4 * growth, growth, 3, padding=1, bias=False)

    def forward(self, x):
        y = self.conv1(F.relu(self.bn1(x)))
        return torch.cat([x, self.conv2(F.relu(self.bn2(y)))], 1)


class Model(nn.Module):
    def __init__(self, growth=32, blocks=(6, 12, 24, 16), classes=10):
        super().__init__()
        c = 2 * growth
        layers = [nn.Conv2d(3, c, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(c), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
        for b, n in enumerate(blocks):
            for _ in range(n):
                layers.append(Layer(c, growth))
                c += growth
            if b != len(blocks) - 1:
                layers += [nn.BatchNorm2d(c), nn.ReLU(), nn.Conv2d(c, c // 2, 1, bias=False), nn.AvgPool2d(2)]
                c //= 2
        layers += [nn.BatchNorm2d(c), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten()]
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(c, classes)

    def forward(self, x):
        return self.head(self.features(x))


def get_inputs():
    return [torch.randn(2, 3, 64, 64)]


def get_init_inputs():
    return []
