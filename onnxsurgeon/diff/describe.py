"""Short texts for a drawing: a node's attributes, a tensor's dtype and shape. Pure queries that
read only the nodes and value infos asked for (weights are never decoded)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from operator import attrgetter
from typing import Any

import onnx
from onnx import AttributeProto, TensorProto

from ..protos import light_tensor

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


INFER_MAX_NODES = 5_000
"""Models up to this many main-graph nodes get onnx shape inference over the whole model (on a
weight-free copy, C++, a few hundredths of a second) for the drawn tensors no value info
describes; larger ones get it over the drawn nodes only (:func:`_region_model`), so the page
costs what is drawn, not the model."""


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


def tensor_types(models: Iterable[onnx.ModelProto], names: set[str], *,
                 drawn: Sequence[Sequence[onnx.NodeProto]] | None = None,
                 ) -> dict[str, tuple[str, str]]:
    """Tensor name -> (dtype, shape text) for the ``names`` the models' value infos, inputs,
    outputs and initializers describe (the first model that knows a name wins), completed by
    shape inference, the last model first (AFTER holds every tensor a rewrite adds, so one
    inference usually types them all): over the whole model up to :data:`INFER_MAX_NODES`
    nodes, else over the model's nodes in ``drawn`` (one node list per model, in the models'
    order; None: no inference for large models), fed the types known at their border. Costs a
    C-level listing of the names of each model's value infos and initializers plus one
    ``list.index`` per name looked up; initializers are read for their header only (small ones
    whole, for inference of shapes computed from constants)."""
    found: dict[str, tuple[str, str]] = {}
    models = list(models)
    for model in models:
        graph = model.graph
        for infos in (graph.output, graph.input, graph.value_info):
            _vi_types(infos, names, found)
        for t in _listed(graph.initializer, names, found):
            found[t.name] = (dtype_name(t.data_type), "[" + ",".join(str(d) for d in t.dims) + "]")
    from ..types import infer_value_infos

    for k in range(len(models) - 1, -1, -1):
        model = models[k]
        if len(found) == len(names):
            break
        if len(model.graph.node) <= INFER_MAX_NODES:
            _vi_types(list(infer_value_infos(model).values()), names, found)
        elif drawn is not None and drawn[k]:
            region = _region_model(model, drawn[k])
            _vi_types(list(infer_value_infos(region).values()), names, found)
    return found


def _region_model(model: onnx.ModelProto, nodes: Sequence[onnx.NodeProto]) -> onnx.ModelProto:
    """A model of ``nodes`` alone (in ``model``'s order): the tensors they read from outside are
    its inputs, typed as ``model`` declares them (untyped when it does not), the types ``model``
    declares for the tensors they make are its value infos, small initializers
    copied whole and large ones as bytes-free stubs, with ``model``'s opsets and the local
    functions the nodes call. O(len(nodes)) beyond the C-level name listings."""
    graph = model.graph
    made = {o for n in nodes for o in n.output if o}
    outer = list(dict.fromkeys(i for n in nodes for i in n.input if i and i not in made))
    wanted = set(outer) | made
    inits: dict[str, Any] = {}
    for t in _listed(graph.initializer, wanted, inits):
        inits[t.name] = t
    infos: dict[str, Any] = {}
    for group in (graph.input, graph.output, graph.value_info):
        for vi in _listed(group, wanted - inits.keys(), infos):
            if vi.type.WhichOneof("value") is not None:
                infos[vi.name] = vi
    region = onnx.ModelProto()
    region.ir_version = model.ir_version
    region.opset_import.extend(model.opset_import)
    calls = {(n.domain, n.op_type) for n in nodes}
    region.functions.extend(f for f in model.functions if (f.domain, f.name) in calls)
    g = region.graph
    g.name = "drawn"
    g.node.extend(nodes)
    for name in outer:
        if name in inits:
            g.initializer.append(light_tensor(inits[name]))
        elif name in infos:
            g.input.append(infos[name])
        else:
            g.input.add().name = name
    g.value_info.extend(infos[t] for t in sorted(made) if t in infos)  # what the file says
    for out in sorted(made):
        g.output.add().name = out
    return region
