"""Protobuf helpers private to the surgery verbs: ValueInfo for new graph inputs, and light type
inference over a subset of nodes (type facts themselves live in :mod:`onnxsurgeon.types`,
weight-free copies in :mod:`onnxsurgeon.protos`; pruning repeated fields in
:func:`onnxsurgeon.edit.keep_only`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from operator import attrgetter

import onnx

from ..closure import closure
from ..errors import InvalidModelError
from ..index import GraphIndex
from ..protos import light_tensor
from ..types import is_complete, shape_of


def boundary_value_info(vi: onnx.ValueInfoProto, name: str) -> onnx.ValueInfoProto:
    """A copy of ``vi`` named ``name`` whose unknown dims get symbolic names (``name_d0``...)."""
    out = onnx.ValueInfoProto()
    out.CopyFrom(vi)
    out.name = name
    if out.type.HasField("tensor_type") and out.type.tensor_type.HasField("shape"):
        for k, d in enumerate(out.type.tensor_type.shape.dim):
            if not d.HasField("dim_value") and not d.HasField("dim_param"):
                d.dim_param = f"{name}_d{k}"
    return out


def infer_subset(
    index: GraphIndex,
    nodes: Sequence[int],
    read: Collection[str],
    typed: dict[str, onnx.ValueInfoProto],
    wanted: Iterable[str],
) -> dict[str, onnx.ValueInfoProto]:
    """Infer the types of ``wanted`` tensors with onnx shape inference over only ``nodes``.

    ``read`` holds every tensor those nodes read or produce (captures included); ``typed`` gives
    the types of boundary tensors (graph inputs of the light model). Large
    initializers are stubbed, so no weight bytes are copied. Best effort: returns what inference
    could type. O(size of ``nodes``) plus onnx's own inference.
    """
    model = index.model
    graph = index.graph
    light = onnx.ModelProto()
    light.ir_version = model.ir_version
    light.opset_import.extend(model.opset_import)
    light.functions.extend(model.functions)
    g = light.graph
    g.name = graph.name
    node_field = graph.node
    g.node.extend(node_field[i] for i in nodes)
    for name, vi in typed.items():
        if name in read:
            g.input.append(boundary_value_info(vi, name))
    inputs_done = {vi.name for vi in g.input}
    for vi in graph.input:
        if vi.name in read and vi.name not in inputs_done:
            g.input.append(vi)
    for t in graph.initializer:
        if t.name in read and t.name not in typed:
            g.initializer.append(light_tensor(t))
    g.value_info.extend(vi for vi in graph.value_info if vi.name in read)
    try:
        inferred = onnx.shape_inference.infer_shapes(light, check_type=False, strict_mode=False)
    except Exception:  # noqa: BLE001 - inference is best effort by design
        return {}
    want = set(wanted)
    found: dict[str, onnx.ValueInfoProto] = {}
    for vi in inferred.graph.value_info:
        if vi.name in want and vi.type.WhichOneof("value") is not None:
            found[vi.name] = vi
    return found


# ------------------------------------------------------------------ cheap type propagation
_Dim = int | str | None
_Type = tuple[int, tuple[_Dim, ...]]
_SAME = frozenset({
    "Abs", "Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "Ceil", "Celu", "Cos", "Cosh",
    "Elu", "Erf", "Exp", "Floor", "Gelu", "HardSigmoid", "HardSwish", "Identity", "LeakyRelu",
    "Log", "LogSoftmax", "Mish", "Neg", "Reciprocal", "Relu", "Round", "Selu", "Sigmoid", "Sign",
    "Sin", "Sinh", "Softmax", "Softplus", "Softsign", "Sqrt", "Tan", "Tanh", "ThresholdedRelu",
})
"""Ops whose single output has the type and shape of input 0."""
_BROADCAST = frozenset({"Add", "Sub", "Mul", "Div", "Max", "Min", "Sum", "Mean", "Pow"})
"""Ops whose single output has input 0's element type and the broadcast shape of all inputs."""


def _broadcast(a: tuple[_Dim, ...], b: tuple[_Dim, ...]) -> tuple[_Dim, ...]:
    """Multidirectional (numpy) broadcast; a dim that cannot be told becomes None."""
    if a == b or (len(b) <= len(a) and a[len(a) - len(b):] == b):
        return a
    if len(a) < len(b):
        a, b = b, a
    out = list(a)
    off = len(a) - len(b)
    for k, y in enumerate(b):
        x = out[off + k]
        if x == y or y == 1:
            continue
        if x == 1 or (isinstance(y, int) and not isinstance(x, int)):
            out[off + k] = y
        elif not (isinstance(x, int) and not isinstance(y, int)):
            out[off + k] = None  # two different symbols (or ints: the model is wrong anyway)
    return tuple(out)


def _clash(a: tuple[_Dim, ...], b: tuple[_Dim, ...]) -> bool:
    """Two sizes that do not broadcast (static, different, neither 1): the model cannot run
    with these shapes, and onnx's inference is the one to name the node."""
    return any(isinstance(x, int) and isinstance(y, int) and x != y and x != 1 and y != 1
               for x, y in zip(reversed(a), reversed(b), strict=False))


def _matmul(a: tuple[_Dim, ...], b: tuple[_Dim, ...]) -> tuple[_Dim, ...] | None:
    """The shape of MatMul(a, b); None when it cannot be told or the inner sizes differ."""
    if not a or not b:
        return None
    inner, other = a[-1], b[-2] if len(b) > 1 else b[0]
    if isinstance(inner, int) and isinstance(other, int) and inner != other:
        return None
    if len(a) == 1 and len(b) == 1:
        return ()
    if len(a) == 1:
        return (*b[:-2], b[-1])
    if len(b) == 1:
        return a[:-1]
    if _clash(a[:-2], b[:-2]):
        return None
    return (*_broadcast(a[:-2], b[:-2]), a[-2], b[-1])


def propagate_types(
    index: GraphIndex,
    nodes: Sequence[int],
    typed: dict[str, onnx.ValueInfoProto],
    wanted: Collection[str],
) -> dict[str, onnx.ValueInfoProto] | None:
    """Types of ``wanted`` by a forward pass over ``nodes`` (ascending, topologically sorted)
    for a small set of standard ops whose output type follows simply from the inputs'
    (elementwise, broadcasting arithmetic, MatMul). None as soon as a node falls outside that
    set or reads an untyped tensor: the caller then runs onnx shape inference. ``typed`` types
    boundary tensors. O(nodes), ~1 us per node; no model copy.
    """
    graph = index.graph
    types: dict[str, _Type] = {}
    node_field = graph.node
    fields = _PROPAGATE_FIELDS
    get = types.get
    for i in nodes:
        op, dom, ins, outs = fields(node_field[i])
        if len(outs) != 1 or dom not in ("", "ai.onnx") or not ins:
            return None
        args: list[_Type] = []
        for name in ins:
            t = get(name)
            if t is None:
                t = boundary_type(index, typed, name)
                if t is None:
                    return None
                types[name] = t
            args.append(t)
        result = apply_op(op, tuple(args))
        if result is None:
            return None
        types[outs[0]] = result
    found: dict[str, onnx.ValueInfoProto] = {}
    for name in wanted:
        t = types.get(name)
        if t is None:
            return None
        found[name] = onnx.helper.make_tensor_value_info(name, t[0], list(t[1]))
    return found


_PROPAGATE_FIELDS = attrgetter("op_type", "domain", "input", "output")


def boundary_type(index: GraphIndex, typed: dict[str, onnx.ValueInfoProto], name: str) -> _Type | None:
    """The (dtype, static-or-symbolic shape) of a tensor the type pass does not compute: from
    ``typed`` (stop tensors), an initializer, or known value_info; None when not fully known."""
    vi = typed.get(name)
    if vi is None:
        pos = index.initializers.get(name)
        if pos is not None and pos >= 0:
            t = index.graph.initializer[pos]
            return int(t.data_type), tuple(t.dims)
        vi = index.value_info.get(name)
    dims = shape_of(vi)
    if dims is None or not is_complete(vi):
        return None
    assert vi is not None
    return int(vi.type.tensor_type.elem_type), tuple(dims)


def apply_op(op: str, args: tuple[_Type, ...]) -> _Type | None:
    """The output type of ``op`` on inputs typed ``args`` (the ops the type pass knows)."""
    elem, shape = args[0]
    if op in _SAME:
        return elem, shape
    if op in _BROADCAST:
        for _, other in args[1:]:
            if _clash(shape, other):
                return None
            shape = _broadcast(shape, other)
        return elem, shape
    if op == "MatMul" and len(args) == 2:
        mm = _matmul(shape, args[1][1])
        return None if mm is None else (elem, mm)
    return None


def quick_value_info(index: GraphIndex, name: str) -> onnx.ValueInfoProto | None:
    """The type of node output ``name`` by :func:`propagate_types` over its closure (the
    TypeOracle's cheap step for insert and reroute); None when that pass cannot tell. O(closure),
    ~1-2 us per node (~0.5 us on the int dataflow graph load hands over), against onnx shape
    inference over a copy of the whole model."""
    if name not in index.producer:
        return None
    from ._edgewalk import type_by_edges  # it builds on this module

    vi = type_by_edges(index, name)  # on the int dataflow graph, when there is one
    if vi is not None:
        return vi
    try:
        nodes = closure(index, [name]).nodes
    except InvalidModelError:
        return None
    found = propagate_types(index, nodes, {}, [name])
    return None if found is None else found.get(name)
