"""Framework models as reference functions for ``verify --against-tf / --against-torch``.

Each builder returns ``fn(feeds) -> list[np.ndarray]``: it receives the ONNX candidate's input
arrays by name (in the candidate's input order) and returns the framework's outputs in order, the
form :func:`onnxsurgeon.verify.verify_against` takes. ``fn.intermediates(feeds, names)`` gives
the values of framework names the converters' name map knows (torch module paths through
forward hooks; Keras layer names through a probe model), so the first difference is located
through the name map as between two ONNX models.
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
    from .tf_sources import normalize

    frozen = normalize(source, list(inputs) if inputs else None, list(outputs) if outputs else None)
    names = [frozen.rename.get(n, n) for n in frozen.inputs]

    def run(feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        return [np.asarray(a) for a in frozen.run_reference(_ordered(feeds, names))]

    def intermediates(feeds: Mapping[str, np.ndarray], wanted: Sequence[str]) -> dict[str, np.ndarray]:
        """Outputs of the Keras layers named in ``wanted`` (Keras sources only)."""
        model = frozen.keras_model
        if model is None:
            return {}
        import keras

        layers = {layer.name: layer for layer in model.layers}
        keys = [w for w in wanted if w in layers
                and not isinstance(layers[w], keras.layers.InputLayer)]
        if not keys:
            return {}
        try:
            probe = keras.Model(model.inputs, [layers[k].output for k in keys])
            values = probe(_ordered(feeds, names), training=False)
        except Exception:  # noqa: BLE001 - subclassed models have no symbolic layer outputs
            return {}
        values = values if isinstance(values, (list, tuple)) else [values]
        return {k: np.asarray(v) for k, v in zip(keys, values, strict=True)}

    run.intermediates = intermediates  # type: ignore[attr-defined]
    return run


def torch_reference(factory: str | Any) -> ReferenceFn:
    """``FILE.py:FACTORY`` (imports and runs the user's file) or an ``nn.Module`` as a reference
    function, evaluated in eval mode without gradients."""
    import torch

    from .torch import _flatten

    made = load_factory(factory) if isinstance(factory, str) else factory
    module = made() if callable(made) and not isinstance(made, torch.nn.Module) else made
    if not isinstance(module, torch.nn.Module):
        raise UsageError(f"'{factory}' gave a {type(module).__name__}, not a torch.nn.Module")
    module.eval()

    def run(feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        with torch.no_grad():
            result = module(*[torch.from_numpy(np.ascontiguousarray(a)) for a in feeds.values()])
        # dicts, lists of dicts, OrderedDicts, ModelOutput: flattened in the exporters' order
        return [t.detach().cpu().numpy() for t in _flatten(result)]

    def intermediates(feeds: Mapping[str, np.ndarray], wanted: Sequence[str]) -> dict[str, np.ndarray]:
        """Outputs of the submodules at the module paths in ``wanted`` (forward hooks)."""
        seen: dict[str, np.ndarray] = {}
        paths = dict(module.named_modules())

        def hook(path: str) -> Any:
            def keep(_m: Any, _i: Any, out: Any) -> None:
                flat = _flatten(out)
                if flat:
                    seen[path] = flat[0].detach().cpu().numpy().copy()
            return keep

        handles = [paths[p].register_forward_hook(hook(p)) for p in wanted if p and p in paths]
        try:
            run(feeds)
        finally:
            for h in handles:
                h.remove()
        return seen

    run.intermediates = intermediates  # type: ignore[attr-defined]
    return run
