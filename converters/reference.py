"""Framework models as reference functions for ``verify --against-tf / --against-torch``.

Each builder returns ``fn(feeds) -> list[np.ndarray]``: it receives the ONNX candidate's input
arrays by name (in the candidate's input order) and returns the framework's outputs in order, the
form :func:`onnxsurgeon.verify.verify_against` takes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import UsageError
from .common import load_factory

ReferenceFn = Callable[[Mapping[str, np.ndarray]], list[np.ndarray]]


def _ordered(feeds: Mapping[str, np.ndarray], names: Sequence[str]) -> list[np.ndarray]:
    """Arrays for ``names``: by name when the candidate kept it, else by position."""
    values = list(feeds.values())
    if len(values) != len(names):
        raise UsageError(
            f"the ONNX model has {len(values)} inputs but the framework model takes {len(names)}; "
            "compare the model it was converted from"
        )
    return [feeds.get(n, feeds.get(n.rsplit(":", 1)[0], values[i])) for i, n in enumerate(names)]


def tf_reference(source: Any, *, inputs: Sequence[str] | None = None,
                 outputs: Sequence[str] | None = None) -> ReferenceFn:
    """A TF source (Keras model / ``.keras``, SavedModel folder, frozen ``.pb`` with ``inputs`` and
    ``outputs``, tf.function) as a reference function."""
    from .tf import _normalize

    frozen = _normalize(source, list(inputs) if inputs else None, list(outputs) if outputs else None)
    names = [frozen.rename.get(n, n) for n in frozen.inputs]

    def run(feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        return [np.asarray(a) for a in frozen.run_reference(_ordered(feeds, names))]

    return run


def torch_reference(factory: str | Any) -> ReferenceFn:
    """``FILE.py:FACTORY`` (imports and runs the user's file) or an ``nn.Module`` as a reference
    function, evaluated in eval mode without gradients."""
    import torch

    made = load_factory(factory) if isinstance(factory, str) else factory
    module = made() if callable(made) and not isinstance(made, torch.nn.Module) else made
    if not isinstance(module, torch.nn.Module):
        raise UsageError(f"'{factory}' gave a {type(module).__name__}, not a torch.nn.Module")
    module.eval()

    def run(feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        with torch.no_grad():
            result = module(*[torch.from_numpy(np.ascontiguousarray(a)) for a in feeds.values()])
        flat = result if isinstance(result, (list, tuple)) else [result]
        return [t.detach().cpu().numpy() for t in flat]

    return run
