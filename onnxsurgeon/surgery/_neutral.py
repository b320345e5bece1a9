"""``fold``'s second pass: a node that passes an input through unchanged (``x + 0``, ``x - 0``,
``x * 1``, ``x / 1`` with a constant that broadcasts ``x`` to no other shape or type: each of its
dims 1 or the static size of ``x``'s, ``x`` of known rank, its other dims dynamic or not) goes,
its readers reading ``x``. Pure queries: the caller edits."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx
from onnx import numpy_helper

from ..index import GraphIndex

_NEUTRAL = {"Add": (0.0, (0, 1)), "Sub": (0.0, (1,)), "Mul": (1.0, (0, 1)),
            "Div": (1.0, (1,))}
def neutral_constants(graph: onnx.GraphProto, inputs: set[str]) -> dict[str, float]:
    """Small inline initializers (not graph inputs) all of whose elements are 0 or 1 -> that
    value. O(initializers); reads only tensors of at most 64 KiB."""
    found: dict[str, float] = {}
    for t in graph.initializer:
        if t.name in inputs or t.data_location == onnx.TensorProto.EXTERNAL:
            continue
        if t.ByteSize() > 1 << 16:
            continue
        c = numpy_helper.to_array(t)
        if c.dtype.kind not in "fiu" or not c.size:
            continue
        for value in (0.0, 1.0):
            if np.all(c == value):
                found[t.name] = value
    return found


def neutral_nodes(index: GraphIndex, neutral: Mapping[str, float]) -> dict[int, str]:
    """Main-graph nodes that pass one input through unchanged (``x + 0``, ``x - 0``, ``x * 1``,
    ``x / 1`` with a constant of zeros or ones that does not broadcast ``x`` to another shape or
    type), each -> the input its readers read instead. Graph outputs' producers stay. Shapes come
    from the type oracle, asked only when such a constant exists. O(nodes)."""
    graph = index.graph
    inits = {t.name: t for t in graph.initializer if t.name in neutral}
    outputs = {o.name for o in graph.output}
    found: dict[int, str] = {}
    through: dict[str, str] = {}
    oracle = None
    for i, node in enumerate(graph.node):
        rule = _NEUTRAL.get(node.op_type)
        if rule is None or node.domain not in ("", "ai.onnx") or len(node.input) != 2:
            continue
        if node.output[0] in outputs:
            continue
        value, slots = rule
        for slot in slots:
            c_name, x_name = node.input[slot], node.input[1 - slot]
            tensor = inits.get(c_name)
            if tensor is None or neutral[c_name] != value or x_name in inits or not x_name:
                continue
            c_shape = tuple(tensor.dims)
            if oracle is None:
                from ..types import TypeOracle

                oracle = TypeOracle(index)
            shape = oracle.shape(x_name)  # a dynamic dim (a symbol, None) takes only a 1
            if shape is None or oracle.elem_type(x_name) != tensor.data_type:
                continue
            if len(c_shape) > len(shape) or any(d != 1 and d != x for d, x in
                                                zip(c_shape[::-1], shape[::-1], strict=False)):
                continue
            found[i] = through.get(x_name, x_name)  # a chain of them passes the first input
            through[node.output[0]] = found[i]
            break
    return found
