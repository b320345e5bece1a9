"""A processing function for ``insert --func examples/proc.py:normalize --framework torch``."""

import torch


def normalize(x: torch.Tensor) -> torch.Tensor:
    """L2-normalize over the channel axis."""
    return torch.nn.functional.normalize(x, dim=1)
