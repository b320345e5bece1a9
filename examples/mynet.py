"""A small PyTorch CNN for the README's "From a framework" commands: ``build()`` returns the
``nn.Module`` that ``onnxsurgeon convert torch examples/mynet.py:build`` exports."""

import torch


class MyNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv5 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.fc = torch.nn.Linear(8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.conv5(x)).mean(dim=(2, 3)))


def build() -> torch.nn.Module:
    torch.manual_seed(0)
    return MyNet().eval()
