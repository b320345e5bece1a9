"""``inspect --profile``: a static cost model of a model at given input shapes.

Per main-graph node: multiply-accumulates (MACs), floating-point operations (FLOPs), the
parameters it reads (initializers, not int64/bool ones, which hold shapes and indices: count and
bytes) and the bytes of the activations it writes.
Grouped by node, by PyTorch module path / TF scope, or by op type, with totals. No weight bytes are
read: sizes come from dims and dtypes.

Shapes come from onnx shape inference (with data propagation, so Reshape targets computed from
``Shape`` are followed) on a weight-free copy whose symbolic input dims are fixed by ``dims``.

The cost rules (a documented approximation; FLOPs = 2 x MACs for products):

==========================================  ================================================
op                                          cost
==========================================  ================================================
Conv                                        MACs = out elements x Cin/groups x kernel size
                                            (strides, dilations, pads and groups act through
                                            the output shape and the weight shape); + bias
ConvTranspose                               MACs = input elements x Cout/groups x kernel size
Gemm                                        MACs = M x N x K; + M x N with C
MatMul (batched, broadcast), MatMulInteger  MACs = out elements x K
elementwise (Add, Relu, Erf, Where, ...)    1 FLOP per output element
Softmax, LogSoftmax                         5 FLOPs per element (max, sub, exp, sum, div)
Reduce*, ArgMax, ArgMin                     1 FLOP per input element
MaxPool, AveragePool, LpPool                out elements x kernel size
Global*Pool                                 1 FLOP per input element
BatchNormalization                          2 FLOPs per element (scale and shift)
LayerNormalization, InstanceNormalization,  5 FLOPs per element
GroupNormalization
data movement (Reshape, Gather, Cast, ...)  0
anything else                               not counted; listed in ``uncounted``
==========================================  ================================================

An attention block costs what its MatMuls, Softmax and elementwise ops cost.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np
import onnx

from .errors import UsageError
from .index import GraphIndex
from .io import Model, as_model
from .protos import weightless_copy
from .select import node_module
from .types import infer_value_infos, shape_of


class ProfileBy(str, Enum):
    """How ``inspect --profile`` groups its rows."""

    NODE = "node"
    MODULE = "module"
    OP = "op"

    def __str__(self) -> str:
        return self.value


def _ops(names: str) -> frozenset[str]:
    return frozenset(names.split())


_ELEMENTWISE = _ops(
    "Add Sub Mul Div Pow Sqrt Exp Log Neg Abs Reciprocal Relu LeakyRelu PRelu Sigmoid Tanh Erf "
    "Gelu FastGelu HardSigmoid HardSwish Softplus Softsign Elu Selu Celu Mish ThresholdedRelu Max "
    "Min Sum Mean Clip Where Equal Less LessOrEqual Greater GreaterOrEqual Not And Or Xor Floor "
    "Ceil Round Sign Sin Cos Tan Asin Acos Atan Sinh Cosh Asinh Acosh Atanh Mod BitShift IsNaN "
    "IsInf Resize Upsample QuickGelu BiasGelu")
_FREE = _ops(
    "Reshape Transpose Squeeze Unsqueeze Flatten Concat Split Slice Gather GatherElements GatherND "
    "Expand Tile Identity Shape Size Cast CastLike Constant ConstantOfShape Range Pad Dropout "
    "ScatterND ScatterElements Scatter Trilu DepthToSpace SpaceToDepth NonZero OneHot EyeLike "
    "SequenceConstruct SplitToSequence ConcatFromSequence SequenceAt Optional OptionalGetElement "
    "QuantizeLinear DequantizeLinear")
_REDUCE = _ops(
    "ReduceSum ReduceMean ReduceMax ReduceMin ReduceProd ReduceL1 ReduceL2 ReduceLogSum "
    "ReduceLogSumExp ReduceSumSquare ArgMax ArgMin")
_POOL = frozenset({"MaxPool", "AveragePool", "LpPool"})
_GLOBAL_POOL = frozenset({"GlobalMaxPool", "GlobalAveragePool", "GlobalLpPool"})
_NORM = frozenset({"LayerNormalization", "InstanceNormalization", "GroupNormalization",
                   "SimplifiedLayerNormalization", "RMSNormalization"})
_NOT_PARAMS = frozenset({onnx.TensorProto.INT64, onnx.TensorProto.BOOL, onnx.TensorProto.STRING})
"""Initializer dtypes that hold shapes, axes, indices or masks, not learned weights."""
SOFTMAX_FLOPS = 5
NORM_FLOPS = 5


@dataclass(frozen=True)
class NodeCost:
    """The cost of one main-graph node."""

    index: int
    name: str
    op: str
    module: str | None
    macs: int
    flops: int
    params: tuple[str, ...]
    """The initializers the node reads."""
    activation_bytes: int
    counted: bool
    """False when the cost model has no rule for the op or a shape it needs is unknown (its MACs
    and FLOPs are then 0)."""


@dataclass(frozen=True)
class ProfileRow:
    """One row of a profile: a node, a module path or scope, an op type, or the totals."""

    name: str
    nodes: int
    macs: int
    flops: int
    params: int
    param_bytes: int
    activation_bytes: int
    op: str | None = None

    def to_json(self) -> dict[str, Any]:
        out = {"name": self.name, "nodes": self.nodes, "macs": self.macs, "flops": self.flops,
               "params": self.params, "param_bytes": self.param_bytes,
               "activation_bytes": self.activation_bytes}
        if self.op is not None:
            out["op"] = self.op
        return out


@dataclass(frozen=True)
class Profile:
    """What ``inspect --profile`` reports. ``to_json()`` is the ``profile`` key of ``--json``."""

    by: ProfileBy
    dims: dict[str, int]
    rows: list[ProfileRow]
    total: ProfileRow
    uncounted: dict[str, int] = field(default_factory=dict)
    """Op types of nodes the cost model has no rule or no shape for -> node count (their MACs and
    FLOPs count as 0)."""

    def to_json(self) -> dict[str, Any]:
        return {"by": str(self.by), "dims": dict(self.dims),
                "rows": [r.to_json() for r in self.rows], "total": self.total.to_json(),
                "uncounted": dict(self.uncounted)}

    def to_text(self, *, max_rows: int = 60) -> str:
        head = f"{str(self.by):<40} {'nodes':>6} {'MACs':>10} {'FLOPs':>10} {'params':>10} " \
               f"{'weights':>10} {'activations':>11}"
        lines = [head]
        for r in [*self.rows[:max_rows], self.total]:
            label = r.name if r.op is None or self.by is not ProfileBy.NODE else f"{r.name} ({r.op})"
            lines.append(f"{label[:40]:<40} {r.nodes:>6} {_si(r.macs):>10} {_si(r.flops):>10} "
                         f"{_si(r.params):>10} {_si(r.param_bytes, 'B'):>10} "
                         f"{_si(r.activation_bytes, 'B'):>11}")
        if len(self.rows) > max_rows:
            lines.insert(max_rows + 1, f"... {len(self.rows) - max_rows} more rows (--json lists all)")
        if self.dims:
            lines.append("dims          " + ", ".join(f"{k}={v}" for k, v in self.dims.items()))
        if self.uncounted:
            lines.append("not counted   " + ", ".join(f"{k} x{v}" for k, v in self.uncounted.items())
                         + " (no cost rule or no shape: 0 MACs/FLOPs)")
        return "\n".join(lines)


def _si(n: int, unit: str = "") -> str:
    for scale, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= scale:
            return f"{n / scale:.2f}{suffix}{unit}"
    return f"{n}{unit}"


def _itemsize(elem_type: int) -> int:
    if elem_type in (0, onnx.TensorProto.STRING):
        return 0
    try:
        return int(onnx.helper.tensor_dtype_to_np_dtype(elem_type).itemsize)
    except (KeyError, TypeError, ValueError):
        return 0


def _fix_dims(graph_vis: Iterable[onnx.ValueInfoProto], dims: Mapping[str, int]) -> None:
    for vi in graph_vis:
        if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
            continue
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_param") and d.dim_param in dims:
                d.dim_value = dims[d.dim_param]


def _check_inputs(index: GraphIndex, dims: Mapping[str, int]) -> None:
    """Every dim of every graph input must have a size (a value, or a --dim)."""
    graph = index.graph
    for name in index.input_names():
        vi = graph.input[index.inputs[name]]
        shape = shape_of(vi)
        if shape is None:
            continue
        for axis, d in enumerate(shape):
            if isinstance(d, str) and d not in dims:
                raise UsageError(f"dim '{d}' of input '{name}' is symbolic: give its size with "
                                 f"--dim {d}=SIZE")
            if d is None:
                raise UsageError(f"axis {axis} of input '{name}' has no size and no name: declare "
                                 "a size for it in the model (the profile needs input shapes)")


_SHAPE_OPS = _ops(
    "Shape Size Constant Gather Unsqueeze Squeeze Concat Cast Slice Add Sub Mul Div Mod Neg Abs "
    "Max Min Equal Less Greater Not Where Identity Reshape Range ReduceProd ReduceMax ReduceMin "
    "ReduceSum Floor Ceil ConstantOfShape Expand Tile Transpose Flatten And Or Sign")
"""Ops of the small int computations exporters make of shapes (TorchScript: ``Shape -> Gather
-> Range``), folded when onnx's data propagation leaves a size it invented (``unk__0``)."""
_SHAPE_ELEMENTS = 64
"""A folded shape tensor has at most this many elements (a rank-0 or rank-1 int tensor)."""
_INT_TYPES = frozenset({onnx.TensorProto.INT64, onnx.TensorProto.INT32, onnx.TensorProto.BOOL})
"""The types of shape computations (sizes, and the masks ``Where`` picks them by)."""


def _static(vi: onnx.ValueInfoProto | None) -> list[int] | None:
    shape = shape_of(vi) if vi is not None else None
    ints = [d for d in shape or () if isinstance(d, int)]
    return ints if shape is not None and len(ints) == len(shape) else None


def _invented(infos: Mapping[str, onnx.ValueInfoProto], declared: set[str]) -> bool:
    """Whether inference named a size no graph input declares (``unk__0``): a size it could not
    derive from the inputs."""
    return any(isinstance(d, str) and d not in declared
               for vi in infos.values() for d in (shape_of(vi) or ()))


def _fold_shapes(light: onnx.ModelProto, infos: Mapping[str, onnx.ValueInfoProto]) -> bool:
    """Replace, in the weight-free copy ``light``, the small int shape computations whose
    inputs are constants or ``Shape`` of statically shaped tensors by their values (onnx's
    reference evaluator, the core's evaluator), so a second inference derives the sizes the
    first one invented. Mutates light (a private copy). True when anything folded. O(nodes)."""
    from onnx import numpy_helper
    from onnx.reference import ReferenceEvaluator

    from .protos import is_stub

    g = light.graph
    known = {t.name for t in g.initializer if not is_stub(t) and t.data_type in _INT_TYPES
             and math.prod(t.dims) <= _SHAPE_ELEMENTS}
    fold: list[int] = []
    seeds: list[onnx.TensorProto] = []
    for i, node in enumerate(g.node):
        outs = [o for o in node.output if o]
        if node.op_type not in _SHAPE_OPS or node.domain not in ("", "ai.onnx") or not outs:
            continue
        small = all((infos.get(o) is not None and infos[o].type.tensor_type.elem_type
                     in _INT_TYPES and (sh := _static(infos[o])) is not None
                     and math.prod(sh) <= _SHAPE_ELEMENTS) for o in outs)
        if not small:
            continue
        if node.op_type in ("Shape", "Size"):
            shape = _static(infos.get(node.input[0]))
            if shape is None:
                continue
            start, end = _attr(node, "start", 0), _attr(node, "end", None)
            value = np.array(shape[start:end] if node.op_type == "Shape" else math.prod(shape),
                             dtype=np.int64)
            seeds.append(numpy_helper.from_array(value, outs[0]))
        elif not all(n in known for n in node.input if n):
            continue
        known.update(outs)
        fold.append(i)
    computed = [i for i in fold if g.node[i].op_type not in ("Shape", "Size")]
    if not fold:
        return False
    values: dict[str, Any] = {t.name: numpy_helper.to_array(t) for t in seeds}
    if computed:
        names = [o for i in computed for o in g.node[i].output if o]
        needed = {n for i in computed for n in g.node[i].input if n} - set(names)
        inits = [t for t in g.initializer if t.name in needed] + \
            [t for t in seeds if t.name in needed]
        sub = onnx.helper.make_graph([g.node[i] for i in computed], "shapes", [],
                                     [onnx.helper.make_empty_tensor_value_info(n) for n in names],
                                     inits)
        probe = onnx.helper.make_model(sub, opset_imports=light.opset_import,
                                       ir_version=light.ir_version)
        try:
            got = ReferenceEvaluator(probe).run(None, {})
        except Exception:  # noqa: BLE001 - best effort: the sizes stay unknown
            return False
        values.update(zip(names, got, strict=True))
    drop = set(fold)
    kept = [n for i, n in enumerate(g.node) if i not in drop]
    del g.node[:]
    g.node.extend(kept)
    g.initializer.extend(numpy_helper.from_array(np.asarray(v), n) for n, v in values.items())
    return True


class Shapes:
    """Concrete shapes and dtypes of main-graph tensors at the given dims.

    A size onnx's inference cannot derive from the inputs (it names it ``unk__N``: TorchScript
    exports compute positions with ``Range`` over ``Shape``) is derived by folding the small int
    shape computations at the given dims and inferring again; one still not derived makes its
    tensor's shape unknown (its node is not counted), never a ``--dim`` the user cannot set.
    """

    def __init__(self, index: GraphIndex, dims: Mapping[str, int]) -> None:
        light = weightless_copy(index.model)
        g = light.graph
        _fix_dims(g.input, dims)
        _fix_dims(g.output, dims)
        del g.value_info[:]  # symbolic declarations would stay symbolic: infer from the inputs
        self._inferred = infer_value_infos(light, data_prop=True)
        self._declared = {d for vi in index.graph.input for d in (shape_of(vi) or ())
                          if isinstance(d, str)} | set(dims)
        for _ in range(4):   # each pass folds what the last inference made static
            if not _invented(self._inferred, self._declared) or not _fold_shapes(
                    light, self._inferred):
                break
            # folded tensors keep the static shapes they had (they are initializers now)
            self._inferred = {**self._inferred, **infer_value_infos(light, data_prop=True)}
        self._index = index
        self._dims = dims

    def vi(self, name: str) -> onnx.ValueInfoProto | None:
        pos = self._index.initializers.get(name)
        if pos is not None and pos >= 0:
            t = self._index.graph.initializer[pos]
            return onnx.helper.make_tensor_value_info(name, t.data_type, list(t.dims))
        return self._inferred.get(name) or self._index.value_info.get(name)

    def shape(self, name: str) -> list[int] | None:
        """The shape of ``name`` as ints; None when its rank is unknown."""
        shape = shape_of(self.vi(name))
        if shape is None:
            return None
        out: list[int] = []
        for d in shape:
            if isinstance(d, str):
                if d not in self._declared:
                    return None   # a size inference invented: not the user's to give
                if d not in self._dims:
                    raise UsageError(f"dim '{d}' of tensor '{name}' has no size: give it with "
                                     f"--dim {d}=SIZE")
                d = self._dims[d]
            if d is None:
                return None
            out.append(int(d))
        return out

    def nbytes(self, name: str) -> int:
        vi = self.vi(name)
        shape = self.shape(name) if vi is not None else None
        if vi is None or shape is None or not vi.type.HasField("tensor_type"):
            return 0
        return math.prod(shape) * _itemsize(vi.type.tensor_type.elem_type)


def _attr(node: onnx.NodeProto, name: str, default: Any) -> Any:
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def _cost(node: onnx.NodeProto, shapes: Shapes) -> tuple[int, int] | None:
    """(MACs, FLOPs) of ``node``; None when the op has no rule or a shape it needs is unknown."""
    op = node.op_type
    if op in _FREE:
        return 0, 0

    def sh(i: int, outputs: bool = False) -> list[int] | None:
        names = node.output if outputs else node.input
        return shapes.shape(names[i]) if i < len(names) and names[i] else None

    out = sh(0, outputs=True) if node.output else None
    if op in ("Conv", "ConvTranspose", "ConvInteger", "QLinearConv"):
        w_at = 3 if op == "QLinearConv" else 1
        x, w = sh(0), sh(w_at)
        if out is None or w is None or x is None:
            return None
        base = out if op != "ConvTranspose" else x
        macs = math.prod(base) * math.prod(w[1:])
        has_bias = len(node.input) > 2 and bool(node.input[2]) and op in ("Conv", "ConvTranspose")
        return macs, 2 * macs + (math.prod(out) if has_bias else 0)
    if op == "Gemm":
        a = sh(0)
        if out is None or a is None or len(a) != 2:
            return None
        k = a[0] if _attr(node, "transA", 0) else a[1]
        macs = math.prod(out) * k
        has_c = len(node.input) > 2 and bool(node.input[2])
        return macs, 2 * macs + (math.prod(out) if has_c else 0)
    if op in ("MatMul", "MatMulInteger", "QLinearMatMul"):
        a = sh(0)
        if out is None or not a:
            return None
        macs = math.prod(out) * a[-1]
        return macs, 2 * macs
    if out is None:
        return None
    n_out = math.prod(out)
    if op in _ELEMENTWISE:
        return 0, n_out
    if op in ("Softmax", "LogSoftmax"):
        return 0, SOFTMAX_FLOPS * n_out
    if op == "BatchNormalization":
        return 0, 2 * n_out
    if op in _NORM:
        return 0, NORM_FLOPS * n_out
    if op in _POOL:
        return 0, n_out * math.prod(_attr(node, "kernel_shape", []))
    if op in _REDUCE or op in _GLOBAL_POOL:
        x = sh(0)
        return (0, math.prod(x)) if x is not None else None
    return None


def node_costs(model: Model | onnx.ModelProto, *, dims: Mapping[str, int] | None = None,
               index: GraphIndex | None = None, shapes: Shapes | None = None) -> list[NodeCost]:
    """The cost of every main-graph node, in node order. O(nodes) after one shape inference.

    Args:
        model: the model (never modified; no weight bytes are read).
        dims: sizes of symbolic dims (``{"batch": 1, "seq": 128}``).
        index: an index of ``model`` already built.
        shapes: the :class:`Shapes` of ``index`` at ``dims``, when the caller has them.

    Raises:
        UsageError: a symbolic dim a cost needs has no size in ``dims``.
    """
    dims = dict(dims or {})
    m = as_model(model)
    index = index if index is not None else GraphIndex(m.proto)
    _check_inputs(index, dims)
    shapes = shapes if shapes is not None else Shapes(index, dims)
    inits, graph = index.initializers, index.graph
    out: list[NodeCost] = []
    for i, node in enumerate(graph.node):
        cost = _cost(node, shapes)
        params = tuple(dict.fromkeys(n for n in node.input if n and inits.get(n, -1) >= 0
                                     and graph.initializer[inits[n]].data_type not in _NOT_PARAMS))
        module = node_module(node)
        if module is None and "/" in node.name.strip("/"):
            module = node.name.strip("/").rpartition("/")[0]  # a TF scope
        out.append(NodeCost(
            index=i, name=index.node_label(i),
            op=f"{node.domain}.{node.op_type}" if node.domain not in ("", "ai.onnx")
            else node.op_type,
            module=module, macs=cost[0] if cost else 0, flops=cost[1] if cost else 0,
            params=params, activation_bytes=sum(shapes.nbytes(o) for o in node.output if o),
            counted=cost is not None))
    return out


def param_sizes(index: GraphIndex, names: Iterable[str]) -> tuple[int, int]:
    """(element count, bytes) of the initializers ``names`` (each once; dims and dtypes only)."""
    count = nbytes = 0
    for n in set(names):
        t = index.graph.initializer[index.initializers[n]]
        k = math.prod(t.dims)
        count += k
        nbytes += k * _itemsize(t.data_type)
    return count, nbytes


def _row(index: GraphIndex, name: str, costs: list[NodeCost], op: str | None = None) -> ProfileRow:
    count, nbytes = param_sizes(index, (p for c in costs for p in c.params))
    return ProfileRow(name=name, nodes=len(costs), macs=sum(c.macs for c in costs),
                      flops=sum(c.flops for c in costs), params=count, param_bytes=nbytes,
                      activation_bytes=sum(c.activation_bytes for c in costs), op=op)


def _module_keys(module: str | None) -> list[str]:
    """A node's module path and every enclosing path (``a``, ``a.b``, ``a.b.c``)."""
    if not module:
        return ["(no module)"]
    sep = "/" if "/" in module else "."
    parts = module.split(sep)
    return [sep.join(parts[:k]) for k in range(1, len(parts) + 1)]


def profile(model: Model | onnx.ModelProto, *, by: ProfileBy = ProfileBy.NODE,
            dims: Mapping[str, int] | None = None) -> Profile:
    """The cost profile of ``model``'s main graph at the input shapes ``dims`` fixes.

    ``by=ProfileBy.MODULE`` gives one row per PyTorch module path or TF scope and every enclosing
    one (a parent's row holds its children's nodes), in path order; ``by=ProfileBy.OP`` one row
    per op type, largest FLOPs first. A row counts each initializer once; so does the total.
    O(nodes x module depth) after one shape inference.

    Raises:
        UsageError: a symbolic dim a cost needs has no size in ``dims``.
    """
    m = as_model(model)
    index = GraphIndex(m.proto)
    costs = node_costs(m, dims=dims, index=index)
    rows: list[ProfileRow]
    if by is ProfileBy.NODE:
        rows = [_row(index, c.name, [c], op=c.op) for c in costs]
    else:
        groups: dict[str, list[NodeCost]] = {}
        for c in costs:
            for key in (_module_keys(c.module) if by is ProfileBy.MODULE else [c.op]):
                groups.setdefault(key, []).append(c)
        rows = [_row(index, k, v) for k, v in groups.items()]
        if by is ProfileBy.MODULE:
            rows.sort(key=lambda r: (r.name == "(no module)", r.name))
        else:
            rows.sort(key=lambda r: (-r.flops, r.name))
    uncounted = Counter(c.op for c in costs if not c.counted)
    return Profile(by=by, dims=dict(dims or {}), rows=rows, total=_row(index, "total", costs),
                   uncounted=dict(sorted(uncounted.items())))
