"""Short texts for a drawing: a node's attributes, a tensor's dtype and shape. Pure queries that
read only the nodes and value infos asked for (weights are never decoded)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from operator import attrgetter
from typing import Any

import onnx
from onnx import AttributeProto, TensorProto

_NAME = attrgetter("name")
MAX_TEXT = 160
"""Longest attribute value shown (longer ones end in an ellipsis)."""


def dtype_name(elem_type: int) -> str:
    """'float32', 'int64', ... for an ONNX element type ('' when unknown)."""
    if not elem_type:
        return ""
    try:
        return str(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, ValueError, TypeError):
        return TensorProto.DataType.Name(elem_type).lower()


def _clip(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "\u2026"


def _tensor_text(t: TensorProto) -> str:
    return f"tensor {dtype_name(t.data_type)}[{','.join(str(d) for d in t.dims)}]"


def attribute_text(attr: AttributeProto) -> str:
    """A one-line rendering of an attribute value; tensors and graphs are summarised."""
    kind = attr.type
    if kind == AttributeProto.FLOAT:
        return repr(attr.f)
    if kind == AttributeProto.INT:
        return str(attr.i)
    if kind == AttributeProto.STRING:
        return repr(attr.s.decode("utf-8", "replace"))
    if kind == AttributeProto.TENSOR:
        return _tensor_text(attr.t)
    if kind == AttributeProto.GRAPH:
        return f"graph '{attr.g.name}' ({len(attr.g.node)} nodes)"
    if kind == AttributeProto.FLOATS:
        return "[" + ", ".join(repr(v) for v in attr.floats[:32]) + ("]" if len(attr.floats) <= 32 else ", \u2026]")
    if kind == AttributeProto.INTS:
        return "[" + ", ".join(str(v) for v in attr.ints[:32]) + ("]" if len(attr.ints) <= 32 else ", \u2026]")
    if kind == AttributeProto.STRINGS:
        return "[" + ", ".join(repr(v.decode("utf-8", "replace")) for v in attr.strings[:16]) + "]"
    if kind == AttributeProto.GRAPHS:
        return f"{len(attr.graphs)} graphs"
    if kind == AttributeProto.TENSORS:
        return f"{len(attr.tensors)} tensors"
    if attr.ref_attr_name:
        return f"@{attr.ref_attr_name}"
    return AttributeProto.AttributeType.Name(kind).lower()


def attribute_texts(node: onnx.NodeProto) -> tuple[tuple[str, str], ...]:
    """(name, text) per attribute of ``node``, in the node's order."""
    return tuple((a.name, _clip(attribute_text(a))) for a in node.attribute)


def _shape_text(tt: onnx.TypeProto.Tensor) -> str:
    if not tt.HasField("shape"):
        return ""
    dims = []
    for d in tt.shape.dim:
        dims.append(str(d.dim_value) if d.HasField("dim_value")
                    else (d.dim_param if d.HasField("dim_param") else "?"))
    return "[" + ",".join(dims) + "]"


INFER_MAX_NODES = 100_000
"""Models up to this many main-graph nodes get onnx shape inference (on a weight-free copy, C++,
~1.2 s at 90k nodes) for the drawn tensors no value info describes; larger ones show only what
the file records."""


def _listed(items: Sequence[Any], names: set[str], found: dict[str, Any]) -> list[Any]:
    """The ``items`` (value infos or initializers) named in ``names`` but not yet ``found``:
    their names listed C-level, each wanted one looked up with ``list.index`` (no Python loop
    over the items)."""
    wanted = names - found.keys()
    if not wanted or not items:
        return []
    listed = list(map(_NAME, items))
    out = []
    for name in sorted(wanted):
        try:
            out.append(items[listed.index(name)])
        except ValueError:
            continue
    return out


def _vi_types(infos: Sequence[onnx.ValueInfoProto], names: set[str],
              found: dict[str, tuple[str, str]]) -> None:
    for vi in _listed(infos, names, found):
        if vi.type.HasField("tensor_type"):
            tt = vi.type.tensor_type
            found[vi.name] = (dtype_name(tt.elem_type), _shape_text(tt))


def tensor_types(models: Iterable[onnx.ModelProto], names: set[str]) -> dict[str, tuple[str, str]]:
    """Tensor name -> (dtype, shape text) for the ``names`` the models' value infos, inputs,
    outputs and initializers describe (the first model that knows a name wins), completed by
    shape inference on models of at most :data:`INFER_MAX_NODES` nodes, the last model first
    (AFTER holds every tensor a rewrite adds, so one inference usually types them all). Costs a C-level listing
    of the names of each model's value infos and initializers plus one ``list.index`` per name;
    initializers are read for their header only."""
    found: dict[str, tuple[str, str]] = {}
    models = list(models)
    for model in models:
        graph = model.graph
        for infos in (graph.output, graph.input, graph.value_info):
            _vi_types(infos, names, found)
        for t in _listed(graph.initializer, names, found):
            found[t.name] = (dtype_name(t.data_type), "[" + ",".join(str(d) for d in t.dims) + "]")
    for model in reversed(models):
        if len(found) == len(names) or len(model.graph.node) > INFER_MAX_NODES:
            continue
        from ..types import infer_value_infos

        _vi_types(list(infer_value_infos(model).values()), names, found)
    return found
