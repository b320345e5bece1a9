"""Parts of a shape that are known though the whole is not: ``fold``'s partial ``Shape`` values.

A ``Shape`` of a tensor whose rank is known but some dims are symbolic (a dynamic batch) is not
a constant; the entries a ``Gather`` or ``Slice`` of it selects may all be static, and those fold
(``x[N,3,224,224] -> Shape -> Gather(1)`` is 3: the channel count a torch export reads back
with ``x.shape[1]``). Onnx-graphsurgeon's ``fold_constants`` and onnxsim fold these too.

Pure queries over one graph's nodes: nothing here mutates.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import onnx
from onnx import numpy_helper

from ..index import GraphIndex, positions

Dims = list[int | None]
"""A shape vector's entries: a static size, or None where it is not known statically."""

SMALL_BYTES = 1 << 12
"""Index and slice operands read at plan time are at most this large (they are a few ints)."""


def shape_entries(node: onnx.NodeProto, dims: Sequence[int | str | None]) -> Dims:
    """The entries of ``Shape(x)`` (its ``start``/``end`` attributes applied) for ``x`` of
    ``dims``: each static size, or None."""
    start, end = 0, len(dims)
    for a in node.attribute:
        if a.name == "start":
            start = int(a.i)
        elif a.name == "end":
            end = int(a.i)
    return [d if isinstance(d, int) and d >= 0 else None for d in dims[slice(start, end)]]


def small_value(name: str, inits: Mapping[str, onnx.TensorProto],
                constants: Mapping[str, onnx.NodeProto]) -> np.ndarray | None:
    """The value of a small inline initializer or ``Constant`` node output (``value`` or
    ``value_int(s)``), else None. Reads at most :data:`SMALL_BYTES`."""
    t = inits.get(name)
    if t is not None:
        if t.data_location == onnx.TensorProto.EXTERNAL or t.ByteSize() > SMALL_BYTES:
            return None
        return numpy_helper.to_array(t)
    node = constants.get(name)
    if node is None or len(node.attribute) != 1:
        return None
    a = node.attribute[0]
    if a.name == "value" and a.t.ByteSize() <= SMALL_BYTES:
        return numpy_helper.to_array(a.t)
    if a.name == "value_int":
        return np.array(a.i, dtype=np.int64)
    if a.name == "value_ints":
        return np.array(list(a.ints), dtype=np.int64)
    return None


def selected(node: onnx.NodeProto, entries: Dims, operands: Sequence[np.ndarray | None]
             ) -> np.ndarray | None:
    """The value of ``Gather`` (axis 0) or ``Slice`` (axis 0) of a shape vector of ``entries``,
    its other inputs' values ``operands`` (None: not a known constant); None unless every
    entry it selects is static and its operands are known and in range."""
    if any(v is None or v.dtype.kind not in "iu" for v in operands):
        return None
    n = len(entries)
    if node.op_type == "Gather":
        if any(a.name == "axis" and a.i not in (0, -1) for a in node.attribute) or \
                len(operands) != 1:
            return None
        index = np.asarray(operands[0], dtype=np.int64)
        if index.size and (index.min() < -n or index.max() >= n):
            return None
        picked = [entries[int(k)] for k in index.reshape(-1)]
        if any(d is None for d in picked):
            return None
        return np.array(picked, dtype=np.int64).reshape(index.shape)
    if node.op_type == "Slice" and len(operands) >= 2:
        starts, ends = (np.asarray(v, dtype=np.int64).reshape(-1) for v in operands[:2])
        axes = np.asarray(operands[2], dtype=np.int64).reshape(-1) if len(operands) > 2 \
            else np.zeros_like(starts)
        steps = np.asarray(operands[3], dtype=np.int64).reshape(-1) if len(operands) > 3 \
            else np.ones_like(starts)
        if not (len(starts) == len(ends) == len(axes) == len(steps) == 1) \
                or int(axes[0]) not in (0, -1) or int(steps[0]) == 0:
            return None
        start, end, step = (max(min(int(v), 2**62), -2**62) for v in (starts[0], ends[0], steps[0]))
        picked = entries[slice(start, end, step)]
        if any(d is None for d in picked):
            return None
        return np.array(picked, dtype=np.int64)
    return None


def static_shape(shape: Sequence[int | str | None] | None) -> list[int] | None:
    """The dims when every one is a static size >= 0, else None."""
    if shape is None or not all(isinstance(d, int) and d >= 0 for d in shape):
        return None
    return [int(d) for d in shape]  # type: ignore[arg-type]


def whole_shape(concat: onnx.NodeProto, nodes: Sequence[onnx.NodeProto],
                producer: Mapping[str, int], value: Callable[[str], np.ndarray | None],
                rank: Callable[[str], int | None]) -> str | None:
    """The ``Shape(x)`` output that a ``Concat`` along axis 0 rebuilds entry by entry
    (``Concat(Unsqueeze(Gather(Shape(x), 0), [0]), ..., Unsqueeze(Gather(Shape(x), r - 1), [0]))``
    with ``x`` of rank ``r``), or None. ``value``: a constant operand's value (None when it is
    not one); ``rank``: a tensor's rank when known. O(r)."""
    axis = next((a.i for a in concat.attribute if a.name == "axis"), None)
    if axis not in (0, -1) or not concat.input:
        return None
    shape: str | None = None
    x = ""
    for k, part in enumerate(concat.input):
        unsq = _made_by(part, "Unsqueeze", nodes, producer)
        if unsq is None or not _axes_zero(unsq, value):
            return None
        gather = _made_by(unsq.input[0], "Gather", nodes, producer)
        if gather is None or len(gather.input) != 2 or any(
                a.name == "axis" and a.i != 0 for a in gather.attribute):
            return None
        made = _made_by(gather.input[0], "Shape", nodes, producer)
        if made is None or made.attribute or not made.input:
            return None
        if shape is None:
            shape, x = gather.input[0], made.input[0]
        elif made.input[0] != x:  # another Shape of the same tensor is the same
            return None
        index = value(gather.input[1])
        r = rank(made.input[0])
        if (index is None or index.ndim != 0 or r != len(concat.input)
                or not -r <= int(index) < r or int(index) % r != k):
            return None
    return shape


def _made_by(name: str, op: str, nodes: Sequence[onnx.NodeProto],
             producer: Mapping[str, int]) -> onnx.NodeProto | None:
    j = producer.get(name)
    if j is None:
        return None
    node = nodes[j]
    return node if node.op_type == op and node.domain in ("", "ai.onnx") else None


def _axes_zero(unsq: onnx.NodeProto, value: Callable[[str], np.ndarray | None]) -> bool:
    """An Unsqueeze of a scalar at axis 0 (the axes an input, opset 13, or an attribute)."""
    if len(unsq.input) == 2:
        axes = value(unsq.input[1])
        return axes is not None and axes.tolist() in ([0], [-1])
    return any(a.name == "axes" and list(a.ints) in ([0], [-1]) for a in unsq.attribute)


def slice_kept(dims: Sequence[int | str | None], data: Sequence[int | str | None] | None,
               axes: np.ndarray | None) -> list[int | str | None]:
    """``dims`` of a ``Slice`` output with the dims it does not slice taken from its input's
    ``data`` (shape inference gives up on every dim when the starts or ends are computed):
    ``axes`` the constant axes (None: not known, nothing taken). O(rank)."""
    if data is None or axes is None or len(data) != len(dims) or axes.ndim != 1:
        return list(dims)
    rank = len(dims)
    sliced = {int(a) % rank for a in axes.tolist() if -rank <= int(a) < rank}
    return [d if k in sliced else data[k] for k, d in enumerate(dims)]


def known_shapes(index: GraphIndex, ops: list[str]
                  ) -> dict[str, list[int | str | None]] | None:
    """Shapes (rank known; static, or partly: a dim a symbol or unknown) of the main graph's
    tensors read by a Shape/Size node, or None when no such node reads a computed tensor (shape
    inference runs only then)."""
    nodes = index.graph.node
    wanted = {nodes[i].input[0] for i in sorted((*positions(ops, "Shape"), *positions(ops, "Size")))
              if nodes[i].input and nodes[i].input[0]}
    if not wanted:
        return None
    from ..types import TypeOracle

    oracle = TypeOracle(index)
    found: dict[str, list[int | str | None]] = {}
    for name in sorted(wanted):
        dims = oracle.shape(name)
        if dims is not None:
            j = index.producer.get(name)
            node = nodes[j] if j is not None else None
            if node is not None and node.op_type == "Slice" and len(node.input) > 3 \
                    and not all(isinstance(d, int) for d in dims):
                axes = node.input[3]
                value = _small_init(index, axes)
                dims = slice_kept(dims, oracle.shape(node.input[0]), value)
            found[name] = dims
    return found


def _small_init(index: GraphIndex, name: str) -> np.ndarray | None:
    """The value of initializer ``name`` when it is an inline one of at most 4 KiB."""
    k = index.initializers.get(name)
    if k is None or k < 0:
        return None
    t = index.graph.initializer[k]
    if t.data_location == onnx.TensorProto.EXTERNAL or t.ByteSize() > 1 << 12:
        return None
    return numpy_helper.to_array(t)


def slice_shapes(index: GraphIndex, ops: list[str]) -> bool:
    """A Shape reads a Slice whose axes are computed: once they fold, a second round may
    fold the static dims the Slice keeps (see :func:`known_shapes`)."""
    nodes, producer = index.graph.node, index.producer
    for i in positions(ops, "Shape"):
        j = producer.get(nodes[i].input[0]) if nodes[i].input else None
        if j is not None and nodes[j].op_type == "Slice" and len(nodes[j].input) > 3 \
                and nodes[j].input[3] not in index.initializers:
            return True
    return False
