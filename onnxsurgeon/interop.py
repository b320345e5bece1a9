"""To and from the neighbours: an onnx-graphsurgeon ``Graph`` or an onnx-ir ``Model``.

People who already hold a model in one of those libraries hand it to the verbs with
:func:`from_graphsurgeon` / :func:`from_onnx_ir` and take the result back with
:func:`to_graphsurgeon` / :func:`to_onnx_ir`. Both libraries are imported only when one of these
functions runs (they are optional; ``pip install onnx-graphsurgeon onnx-ir``), so importing
onnxsurgeon never loads them.

Weights are not read on the way: external-data tensors stay references. onnx-ir keeps the
folder of each external tensor (``base_dir``), which becomes the :class:`~onnxsurgeon.io.Model`'s
``base_dir`` and back; onnx-graphsurgeon keeps tensors lazily as protos, so give ``base_dir``
(the folder the model was loaded from) when its graph holds external data.

An onnx-graphsurgeon ``Graph`` has no place for the model's ``metadata_props`` (the name map of
framework names and module paths, the rewrite log): :func:`to_graphsurgeon` keeps them as a
``dict`` in the graph's :data:`GS_METADATA` attribute and :func:`from_graphsurgeon` writes them
back, so selectors and ``verify --rewrite-log`` keep working across the round trip.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

import onnx

from .errors import UsageError
from .external import is_external, iter_tensors
from .io import Model, as_model

GS_METADATA = "onnxsurgeon_metadata"
"""The attribute of an onnx-graphsurgeon ``Graph`` that carries the model's ``metadata_props``
(``{key: value}``) from :func:`to_graphsurgeon` to :func:`from_graphsurgeon` (``Graph.copy()``
does not copy it: set it on the copy to keep the entries)."""


def _need(module: str, package: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:
        raise UsageError(f"this needs the package '{package}'; pip install {package}") from None


def _model(proto: onnx.ModelProto, base_dir: str | os.PathLike[str] | None) -> Model:
    has_external = any(is_external(t) for t in iter_tensors(proto))
    if has_external and base_dir is None:
        raise UsageError(
            "the model holds external-data tensors but no folder was given; pass base_dir= (the "
            "folder the model was loaded from)"
        )
    return Model(proto, base_dir=Path(base_dir) if has_external and base_dir is not None else None)


def from_graphsurgeon(graph: Any, /, *, base_dir: str | os.PathLike[str] | None = None,
                      opset: int | None = None) -> Model:
    """An onnx-graphsurgeon ``Graph`` as a model the verbs take (``onnx_graphsurgeon.export_onnx``).

    The graph's :data:`GS_METADATA` entries (set by :func:`to_graphsurgeon`) become the model's
    ``metadata_props``, in their order.

    Args:
        graph: the ``onnx_graphsurgeon.Graph``.
        base_dir: the folder external-data tensors are relative to (when there are any).
        opset: the default-domain opset to stamp when the graph carries none.

    Raises:
        UsageError: onnx-graphsurgeon is not installed, the graph cannot be exported, or it holds
            external data and ``base_dir`` is missing.
    """
    gs = _need("onnx_graphsurgeon", "onnx-graphsurgeon")
    if opset is not None:
        graph.opset = opset
    try:
        proto = gs.export_onnx(graph)
    except Exception as exc:  # noqa: BLE001 - graphsurgeon raises many types for a bad graph
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise UsageError(f"onnx-graphsurgeon cannot export this graph ({first}); fix the graph") from None
    metadata = getattr(graph, GS_METADATA, None) or {}
    if not isinstance(metadata, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise UsageError(f"the graph's '{GS_METADATA}' must be a dict of strings to strings "
                         f"(the model's metadata_props); got {type(metadata).__name__}")
    del proto.metadata_props[:]
    for key, value in metadata.items():
        proto.metadata_props.add(key=key, value=value)
    return _model(proto, base_dir)


def to_graphsurgeon(model: Model | onnx.ModelProto, /) -> Any:
    """The model as an onnx-graphsurgeon ``Graph`` (``onnx_graphsurgeon.import_onnx``). The
    model is not changed; external tensors stay lazy (pass the model's ``base_dir`` back to
    :func:`from_graphsurgeon`). The model's ``metadata_props`` ride along in the graph's
    :data:`GS_METADATA` attribute."""
    gs = _need("onnx_graphsurgeon", "onnx-graphsurgeon")
    proto = onnx.ModelProto()
    proto.CopyFrom(as_model(model).proto)
    graph = gs.import_onnx(proto)
    setattr(graph, GS_METADATA, {p.key: p.value for p in proto.metadata_props})
    return graph


def from_onnx_ir(model: Any, /) -> Model:
    """An onnx-ir ``Model`` as a model the verbs take (``onnx_ir.serde.serialize_model``).

    External tensors stay references; their common folder becomes the model's ``base_dir``.

    Raises:
        UsageError: onnx-ir is not installed, or external tensors live in several folders.
    """
    ir = _need("onnx_ir", "onnx-ir")
    folders = {os.path.abspath(t.base_dir) for t in _ir_tensors(ir, model)
               if isinstance(t, ir.ExternalTensor)}
    if len(folders) > 1:
        raise UsageError(
            f"the model's external data lives in {len(folders)} folders {sorted(folders)[:3]}; "
            "save it with onnx-ir first so that one folder holds it"
        )
    proto = ir.serde.serialize_model(model)
    return _model(proto, next(iter(folders)) if folders else None)


def to_onnx_ir(model: Model | onnx.ModelProto, /) -> Any:
    """The model as an onnx-ir ``Model`` (``onnx_ir.serde.deserialize_model``); external tensors
    point at the model's ``base_dir``. The model is not changed."""
    ir = _need("onnx_ir", "onnx-ir")
    m = as_model(model)
    result = ir.serde.deserialize_model(m.proto)
    if m.base_dir is not None:
        ir.external_data.set_base_dir(result.graph, m.base_dir)
    return result


def _ir_tensors(ir: Any, model: Any) -> list[Any]:
    """Every initializer of the onnx-ir model's graphs (nested ones included)."""
    found: list[Any] = []
    graphs = [model.graph]
    while graphs:
        g = graphs.pop()
        found.extend(v.const_value for v in g.initializers.values() if v.const_value is not None)
        for node in g:
            for attr in node.attributes.values():
                if attr.type == ir.AttributeType.GRAPH:
                    graphs.append(attr.value)
                elif attr.type == ir.AttributeType.GRAPHS:
                    graphs.extend(attr.value)
    return found
