"""A DenseNet dense block (training-mode BN): each layer BN-ReLU-Conv3x3 on the concatenation of all earlier features."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, num_layers=3, num_input_features=6, growth_rate=4):
        super().__init__()
        layers = []
        for i in range(num_layers):
            cin = num_input_features + i * growth_rate
            layers.append(
                nn.Sequential(
                    nn.BatchNorm2d(cin),
                    nn.ReLU(inplace=True),
                    nn.Conv2d(cin, growth_rate, 3, padding=1, bias=False),
                    nn.Dropout(0.0),
                )
            )
        self.layers = nn.ModuleList(layers)

    def forward(self, x):
        features = [x]
        for layer in self.layers:
            new = layer(x)
            features.append(new)
            x = torch.cat(features, 1)
        return x


def get_inputs():
    return [torch.randn(2, 6, 8, 8)]


def get_init_inputs():
    return []
