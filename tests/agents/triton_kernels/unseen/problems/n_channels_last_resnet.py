"""A small ResNet stage run on a channels-last input (eval BN): stem conv-BN-ReLU, a basic block, global pool, flatten, Linear."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, c=8, classes=5):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU(inplace=True))
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)
        self.fc = nn.Linear(c * 4, classes)
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.normal_(0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
        self.eval()

    def forward(self, x):
        x = self.stem(x)
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        x = torch.relu(x + y)
        x = nn.functional.adaptive_avg_pool2d(x, 2)
        return self.fc(torch.flatten(x, 1))


def get_inputs():
    return [torch.randn(2, 3, 8, 8).to(memory_format=torch.channels_last)]


def get_init_inputs():
    return []
