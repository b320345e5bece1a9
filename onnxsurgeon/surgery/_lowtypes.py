"""precision's type questions: which slots of an op's schema take the low type, the float
type of every tensor of a model, the names a node's bodies read from outside."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import onnx
from onnx import TensorProto, defs

from ..protos import weightless_copy

FLOAT = TensorProto.FLOAT
NOT_TENSOR = -1
"""The type :func:`float_types` gives a sequence, optional or map (its elements stay as they are)."""


def slot(params: Sequence[defs.OpSchema.FormalParameter], k: int) -> defs.OpSchema.FormalParameter | None:
    if k < len(params):
        return params[k]
    if params and params[-1].option == defs.OpSchema.FormalParameterOption.Variadic:
        return params[-1]
    return None


def slot_kind(schema: defs.OpSchema, param: defs.OpSchema.FormalParameter | None,
               target_type: str) -> str:
    """'low' (the slot takes the target type), 'fixed' (a fixed non-generic type, e.g. Resize
    scales: stays float32) or 'no' (a type variable without the target type)."""
    if param is None:
        return "no"
    constraints = {c.type_param_str: c.allowed_type_strs for c in schema.type_constraints}
    allowed = constraints.get(param.type_str)
    if allowed is None:
        return "low" if param.type_str == target_type else "fixed"
    return "low" if target_type in allowed else "no"


def captured(node: onnx.NodeProto) -> set[str]:
    """Names the bodies of ``node`` read from enclosing scopes (defined in none of them).
    Iterative; O(size of the bodies)."""
    reads: set[str] = set()
    defined: set[str] = set()
    stack = [g for a in node.attribute for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH
                                                 else a.graphs)]
    while stack:
        g = stack.pop()
        defined.update(vi.name for vi in g.input)
        defined.update(t.name for t in g.initializer)
        for inner in g.node:
            reads.update(n for n in inner.input if n)
            defined.update(inner.output)
            for a in inner.attribute:
                stack.extend([a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs)
    return reads - defined


def float_types(model: onnx.ModelProto) -> dict[str, int]:
    """Name -> elem type of every typed tensor in the model and its bodies (declared, then onnx
    inference on a weight-free copy); :data:`NOT_TENSOR` for a sequence, optional or map."""
    light = weightless_copy(model)
    with contextlib.suppress(Exception):  # inference is best effort; declared types remain
        light = onnx.shape_inference.infer_shapes(light)
    types: dict[str, int] = {}
    stack = [light.graph]
    while stack:
        g = stack.pop()
        for vi in [*g.input, *g.output, *g.value_info]:
            if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
                types.setdefault(vi.name, vi.type.tensor_type.elem_type)
            elif vi.type.WhichOneof("value") in ("sequence_type", "optional_type", "map_type"):
                types.setdefault(vi.name, NOT_TENSOR)
        for t in g.initializer:
            types[t.name] = t.data_type
        for node in g.node:
            if node.op_type == "Constant" and not node.domain and node.output:
                for a in node.attribute:
                    if a.name == "value" and a.type == onnx.AttributeProto.TENSOR:
                        types[node.output[0]] = a.t.data_type
                    elif a.name in ("value_float", "value_floats"):
                        types[node.output[0]] = FLOAT
            for a in node.attribute:
                stack.extend([a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs)
    return types
