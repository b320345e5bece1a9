"""``dims``' plan: which shape constants of ``Reshape``/``Expand``/``Tile``/``ConstantOfShape``
hard-code the old batch, and how each follows the input instead (private to
:mod:`onnxsurgeon.surgery.dims`).

The batch is traced through the dataflow of shapes: onnx's inference runs over a weight-free
probe in which the changed inputs' dim 0 is a private symbol (``B``). A dim that carries the
batch is that symbol, or, after a ``Reshape`` merged the batch with static dims, a symbol
naming its factors in order (``B:8`` for ``B*8``): each planned node is cut out of the next
probe and its output becomes a probe input with the shape the rewritten node gives it, so the
factors reach the next ``Reshape`` (a split) exactly. Rounds repeat until nothing more is
proved. A constant entry follows the batch when:

* ``Reshape``: the input dims and the constant pair up in groups of equal size (old batch
  substituted); the group holding the batch gives it to one output dim, by the input's factors
  (a merge takes them all; a split gives each output a run of factors, proved when exactly one
  reading gives every output a non-empty run). That entry reads ``0`` (the same dim copied),
  ``-1`` (the only -1: the rest is static) or the batch from ``Shape`` times the static factors;
* ``Expand``: an entry equal to an input dim that carries the batch reads ``1`` (broadcast
  keeps it);
* ``Expand``/``Tile``/``ConstantOfShape`` entry 0 equal to the old batch where the data does
  not carry it: proved when the output (through elementwise ops) meets a tensor carrying the
  batch on that axis in a ``Concat`` (dims must agree) or, with an old batch above 1, in a
  broadcasting op; it then reads the batch from ``Shape``;
* a constant joined (``Concat``, or a broadcast with an old batch above 1) with a tensor that
  carries the batch on an axis where the constant is fixed at the old size (torch's folded
  ``cls.expand(b, -1, -1)``, tf2onnx's folded tile): when its slices along that axis are all
  equal it becomes ``Expand(one slice, shape read from Shape)``; otherwise the join is refused
  (``run 'fold' first`` where the fixed tensor is computed from constants to a size inference
  cannot tell).

Anything else starting with the old batch ``b`` is refused naming the node, the entry and why
(with ``b`` = 1 an entry not met by the batch is left: a 1 broadcasts, and a tile or expand by 1
changes nothing). A batch merged behind a static factor (``[4*B]`` from a transposed input) is
refused: the samples would interleave.

Cost: one onnx inference over the weight-free probe per round, only when the batch changes from
a static size and some node reads a constant shape or joins tensors (a Concat; with an old
batch above 1 also a broadcast). O(nodes) per round.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from ..edit import Edit
from ..errors import UsageError
from ..index import GraphIndex, real_inputs
from ..protos import weightless_copy
from ..types import shape_of

Dim = int | str | None
Factor = int | str  # "B" is the batch
SYMBOL = "__onnxsurgeon_batch__"
_MAX_ROUNDS = 16
_MAX_WALK = 64
_OPS = ("Reshape", "Expand", "Tile", "ConstantOfShape")
_PASS = frozenset({
    "Abs", "Cast", "Ceil", "Cos", "Elu", "Erf", "Exp", "Floor", "Gelu", "HardSigmoid",
    "HardSwish", "Identity", "LeakyRelu", "Log", "Neg", "Not", "Reciprocal", "Relu", "Round",
    "Selu", "Sigmoid", "Sign", "Sin", "Softplus", "Softsign", "Sqrt", "Tanh",
})
"""Single-input ops whose output has its input's shape (the meeting walk goes through them)."""
_BROADCAST = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean",
                        "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And",
                        "Or", "Xor", "Where", "PRelu", "BitShift", "Mod"})


@dataclass(frozen=True)
class Step:
    """One planned node: its new shape constant (None: it follows the batch as it is), how,
    and its output's shape in the rewritten model (batch dims as symbols) and element type.

    ``batch_at``: the entry read from ``Shape`` (times ``factor``), or -1."""

    slot: int
    values: np.ndarray | None
    how: str
    out: tuple[Dim, ...]
    elem: int
    batch_at: int = -1
    factor: int = 1


Plan = dict[int, Step]


@dataclass(frozen=True)
class Row:
    """A constant whose slices along ``axis`` are all the same, joined (``Concat``, a
    broadcast) with a tensor carrying the batch there: it becomes ``Expand(first, shape)``, the
    shape's ``axis`` entry read from ``Shape`` (times ``factor``)."""

    name: str
    axis: int
    first: np.ndarray
    dims: tuple[int, ...]
    out: tuple[Dim, ...]
    elem: int
    factor: int = 1


Rows = dict[tuple[int, int], Row]
"""(node, input slot) -> the row constant feeding it."""


def factors_of(dim: Dim) -> tuple[Factor, ...] | None:
    """The factors of a probe dim that carries the batch (``B`` first-class), else None."""
    if dim == SYMBOL:
        return ("B",)
    if isinstance(dim, str) and dim.startswith(SYMBOL + ":"):
        return tuple("B" if p == "B" else int(p) for p in dim[len(SYMBOL) + 1:].split(":"))
    return None


def symbol_of(factors: Sequence[Factor]) -> str:
    """The probe symbol of a batch dim with these factors."""
    if tuple(factors) == ("B",):
        return SYMBOL
    return SYMBOL + ":" + ":".join(str(f) for f in factors)


def static_factor(factors: Sequence[Factor]) -> int:
    """The product of the static factors."""
    return math.prod(f for f in factors if isinstance(f, int))


def _value(factors: Sequence[Factor], b: int) -> int:
    return math.prod(b if f == "B" else int(f) for f in factors)


def slot_of(node: onnx.NodeProto) -> int:
    """The input slot of ``node``'s shape constant."""
    return 0 if node.op_type == "ConstantOfShape" else 1


def const_values(index: GraphIndex, name: str) -> np.ndarray | None:
    """The int values of a small constant (initializer or Constant output), else None."""
    k = index.initializers.get(name)
    if k is not None and name not in index.inputs:
        t = index.graph.initializer[k]
        if t.data_location == onnx.TensorProto.EXTERNAL:
            return None
        return numpy_helper.to_array(t)
    j = index.producer.get(name)
    if j is not None:
        node = index.graph.node[j]
        if node.op_type == "Constant":
            for a in node.attribute:
                if a.name == "value":
                    return numpy_helper.to_array(a.t)
                if a.name == "value_ints":
                    return np.array(list(a.ints), dtype=np.int64)
    return None


def with_dims(vi: onnx.ValueInfoProto, dims: Sequence[Dim] | None) -> onnx.ValueInfoProto:
    """A copy of ``vi`` with ``dims`` (None: the shape cleared)."""
    nv = onnx.ValueInfoProto()
    nv.CopyFrom(vi)
    if nv.type.HasField("tensor_type"):
        tt = nv.type.tensor_type
        tt.ClearField("shape")
        if dims is not None:
            shape = tt.shape
            for d in dims:
                dim = shape.dim.add()
                if isinstance(d, int):
                    dim.dim_value = d
                elif d:
                    dim.dim_param = d
    return nv


def probe(proto: onnx.ModelProto, shapes: Mapping[str, Sequence[Dim]], plan: Plan,
          outer: Mapping[int, tuple[Dim, ...]] | None = None, rows: Rows | None = None,
          row_outer: Mapping[tuple[int, int], tuple[Dim, ...]] | None = None
          ) -> onnx.ModelProto:
    """A weight-free copy with the new input shapes, each planned node cut out (its output a
    probe input shaped ``outer[i]``, default its planned shape), each row read from a probe
    input shaped like the rewritten row, no value_info and shapeless outputs: what inference
    runs on. O(model without weights)."""
    light = weightless_copy(proto)
    e = Edit.of(light)
    graph = light.graph
    cut = [onnx.helper.make_tensor_value_info(
        graph.node[i].output[0], step.elem, list((outer or {}).get(i, step.out)))
        for i, step in sorted(plan.items())]
    if rows:
        idx = GraphIndex(light)
        for (i, slot), row in sorted(rows.items()):
            name = f"{SYMBOL}row{i}_{slot}"
            e.rewire([u for u in idx.uses_of(row.name) if u.node == i and u.slot == slot], name,
                     idx)
            cut.append(onnx.helper.make_tensor_value_info(
                name, row.elem, list((row_outer or {}).get((i, slot), row.out))))
    if plan:
        e.keep_nodes([i for i in range(len(graph.node)) if i not in plan])
    e.set_inputs([with_dims(vi, shapes[vi.name]) if vi.name in shapes else vi
                  for vi in graph.input] + cut)
    e.set_outputs([with_dims(vi, None) for vi in graph.output])
    e.set_value_info([], copy=False)
    return light


def infer(light: onnx.ModelProto) -> onnx.ModelProto:
    """Run onnx's inference over a probe (data propagation on: Shape chains are followed)."""
    return onnx.shape_inference.infer_shapes(light, data_prop=True)


def _typed(inferred: onnx.ModelProto) -> dict[str, onnx.ValueInfoProto]:
    g = inferred.graph
    return {vi.name: vi for vi in [*g.input, *g.value_info, *g.output]}


def _live(index: GraphIndex, names: set[str]) -> set[str]:
    """Tensors computed (at any distance) from a graph input. O(nodes)."""
    live = set(names)
    for node in index.graph.node:
        if any(i in live for i in node.input):
            live.update(o for o in node.output if o)
    return live


def _groups(ins: Sequence[int], outs: Sequence[int]) -> list[tuple[list[int], list[int]]] | None:
    """Input and output dims paired in runs of equal size (a dim of 1 alone where it can be);
    None when the sizes do not pair up."""
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(ins) or j < len(outs):
        gi: list[int] = []
        gj: list[int] = []
        pi = pj = 1
        if i < len(ins):
            gi.append(i)
            pi = ins[i]
            i += 1
        if j < len(outs):
            gj.append(j)
            pj = outs[j]
            j += 1
        while pi != pj:
            if pi < pj and i < len(ins):
                gi.append(i)
                pi *= ins[i]
                i += 1
            elif pj < pi and j < len(outs):
                gj.append(j)
                pj *= outs[j]
                j += 1
            else:
                return None
        groups.append((gi, gj))
    return groups


def _split_batch(factors: Sequence[Factor], outs: Sequence[int], b: int
                 ) -> tuple[int, tuple[Factor, ...]] | None:
    """Which of ``outs`` takes the batch when ``factors`` (in order) are split over them: the
    output position and its factors; None when no reading or more than one reading fits."""
    fs = [f for f in factors if f == "B" or f != 1]
    readings: list[tuple[int, tuple[Factor, ...]]] = []
    full: list[tuple[int, tuple[Factor, ...]]] = []
    n = len(outs)
    if len(fs) > 12:
        return None
    for cuts in itertools.combinations_with_replacement(range(len(fs) + 1), n - 1):
        bounds = (0, *cuts, len(fs))
        runs = [tuple(fs[bounds[k]:bounds[k + 1]]) for k in range(n)]
        if all(_value(r, b) == o for r, o in zip(runs, outs, strict=True)):
            at = next(k for k, r in enumerate(runs) if "B" in r)
            readings.append((at, runs[at]))
            if all(runs):
                full.append((at, runs[at]))
    if len(full) == 1:
        return full[0]
    if readings and all(r == readings[0] for r in readings):
        return readings[0]
    return None


class _Refused(Exception):
    def __init__(self, why: str, entry: int = 0) -> None:
        super().__init__(why)
        self.why, self.entry = why, entry


def _reshape(node: onnx.NodeProto, values: np.ndarray, data: list[Dim], b: int,
             elem: int) -> Step | None:
    """A Reshape whose data carries the batch (see the module docstring); None: the data does
    not carry it."""
    carriers = [(k, f) for k, d in enumerate(data) if (f := factors_of(d)) is not None]
    if not carriers:
        return None
    if len(carriers) > 1:
        raise _Refused("its input carries the batch in more than one dim")
    k, fk = carriers[0]
    if any(a.name == "allowzero" and a.i for a in node.attribute) and 0 in values:
        raise _Refused("allowzero=1 with a 0 entry", int(list(values).index(0)))
    ins: list[int] = []
    for j, d in enumerate(data):
        if j == k:
            ins.append(_value(fk, b))
        elif isinstance(d, int):
            ins.append(d)
        else:
            raise _Refused(f"its input's dim {j} is not static")
    outs = [ins[j] if v == 0 and j < len(ins) else int(v) for j, v in enumerate(values)]
    if outs.count(-1) > 1:
        raise _Refused("more than one -1")
    if -1 in outs:
        rest = math.prod(v for v in outs if v != -1)
        total = math.prod(ins)
        if rest == 0 or total % rest:
            raise _Refused("the sizes do not add up", outs.index(-1))
        outs[outs.index(-1)] = total // rest
    groups = _groups(ins, outs)
    if groups is None:
        raise _Refused("its input's dims and the shape do not pair up")
    gi, gj = next(g for g in groups if k in g[0])
    fs: list[Factor] = []
    for j in gi:
        fs.extend(fk if j == k else (ins[j],))
    if not gj:
        raise _Refused("the batch dim is dropped")
    found = _split_batch(fs, [outs[j] for j in gj], b)
    if found is None:
        raise _Refused("the batch could go to more than one of entries "
                       f"{', '.join(map(str, gj))}", gj[0])
    at, run = found
    j0 = gj[at]
    if run[0] != "B":
        raise _Refused(f"the batch would not lead entry {j0} (samples would interleave)", j0)
    out: list[Dim] = list(outs)
    out[j0] = symbol_of(run)
    v0 = int(values[j0])
    if (v0 == 0 and j0 == k and tuple(run) == tuple(fk)) or (v0 == -1):
        return Step(1, None, "", tuple(out), elem)
    new = values.astype(np.int64).copy()
    if j0 == k and tuple(run) == tuple(fk):
        new[j0] = 0
        how = f"entry {j0} reads 0: dim {k} of its input (the batch)"
        return Step(1, new, how, tuple(out), elem)
    if -1 not in values:
        new[j0] = -1
        return Step(1, new, f"entry {j0} reads -1: the rest of its input (the batch"
                    + (f" times {static_factor(run)})" if static_factor(run) != 1 else ")"),
                    tuple(out), elem)
    return Step(1, new, f"entry {j0} reads the batch from Shape"
                + (f" times {static_factor(run)}" if static_factor(run) != 1 else ""),
                tuple(out), elem, batch_at=j0, factor=static_factor(run))


def _meets(index: GraphIndex, consumers: Mapping[str, list[tuple[int, int]]], start: str,
           rank: int, axis: int, typed: Mapping[str, onnx.ValueInfoProto]) -> str:
    """How ``start`` (rank ``rank``) meets the batch on ``axis`` downstream: "concat",
    "broadcast", "other" (an op this walk does not read, with an input carrying the batch
    there) or "" (no meeting found). Walks single-input elementwise ops, at most
    ``_MAX_WALK`` nodes."""
    stack, seen = [start], {start}
    steps = 0
    while stack and steps < _MAX_WALK:
        name = stack.pop()
        for i, _slot in consumers.get(name, []):
            steps += 1
            node = index.graph.node[i]
            if node.op_type in _PASS and len(node.input) == 1:
                for o in node.output:
                    if o and o not in seen:
                        seen.add(o)
                        stack.append(o)
                continue
            axis_ = axis
            for other in node.input:
                if other == name or not other:
                    continue
                dims = shape_of(typed.get(other))
                if not dims:
                    continue
                at = axis_ - (rank - len(dims))
                if 0 <= at < len(dims) and factors_of(dims[at]) is not None:
                    if node.op_type == "Concat":
                        return "concat"
                    if node.op_type in _BROADCAST:
                        return "broadcast"
                    return "other"
    return ""


def _created(index: GraphIndex, i: int, node: onnx.NodeProto, values: np.ndarray,
             data: list[Dim] | None, b: int, elem: int,
             consumers: Mapping[str, list[tuple[int, int]]],
             typed: Mapping[str, onnx.ValueInfoProto]) -> Step | None:
    """An Expand/Tile/ConstantOfShape whose entry 0 is the old batch while its data does not
    carry it there: the Shape route when the output meets the batch (see the module
    docstring); None to leave it; raises when it cannot be told."""
    op = node.op_type
    rank = len(values)
    if op == "Tile":
        if data is None or len(data) != rank or data[0] != 1:
            raise _Refused("its input's dim 0 is not 1")
        out = [d * int(r) if isinstance(d, int) else d for d, r in zip(data, values, strict=True)]
    elif op == "Expand":
        off = rank - len(data) if data is not None else -1
        if data is None or off < 0 or (off == 0 and data[0] != 1):
            raise _Refused("its input's rank or dim 0 is unknown")
        out = list(values.tolist())
        for j, d in enumerate(data):
            if d != 1:
                out[off + j] = d
    else:
        out = list(values.tolist())
    met = _meets(index, consumers, node.output[0], rank, 0, typed)
    if met == "concat" or (met == "broadcast" and b != 1):
        out[0] = SYMBOL
        new = values.astype(np.int64).copy()
        read = "repeat count" if op == "Tile" else "entry 0"
        return Step(slot_of(node), new, f"{read} reads the batch from Shape (its output meets "
                    f"the batch in a {'Concat' if met == 'concat' else 'broadcast'})",
                    tuple(out), elem, batch_at=0)
    if b == 1 and met != "other":
        return None
    raise _Refused("the dataflow of shapes does not prove it is the batch"
                   + (" (its output meets the batch in an op this does not read)"
                      if met == "other" else ""))


def _data_type(index: GraphIndex, typed: Mapping[str, onnx.ValueInfoProto], name: str
               ) -> tuple[list[Dim] | None, int]:
    """The probe shape and element type of a node's data input (an initializer's from the
    index: the probe carries no weights); (None, FLOAT) when there is none."""
    k = index.initializers.get(name) if name else None
    if k is not None and name not in typed:
        t = index.graph.initializer[k]
        return list(t.dims), t.data_type
    vi = typed.get(name) if name else None
    if vi is None or not vi.type.HasField("tensor_type"):
        return None, onnx.TensorProto.FLOAT
    return shape_of(vi), vi.type.tensor_type.elem_type or onnx.TensorProto.FLOAT


def _array(index: GraphIndex, name: str) -> np.ndarray | None:
    """The values of a constant (initializer or Constant output) of any type, else None."""
    k = index.initializers.get(name)
    if k is not None and name not in index.inputs:
        t = index.graph.initializer[k]
        return None if t.data_location == onnx.TensorProto.EXTERNAL else numpy_helper.to_array(t)
    j = index.producer.get(name)
    if j is not None and index.graph.node[j].op_type == "Constant":
        for a in index.graph.node[j].attribute:
            if a.name == "value":
                return numpy_helper.to_array(a.t)
    return None


def _joins(index: GraphIndex, typed: Mapping[str, onnx.ValueInfoProto], b: int, rows: Rows,
           left: dict[int, tuple[int, str]], live: Collection[str]) -> bool:
    """Find the Concat and broadcasting nodes joining a tensor that carries the batch on an
    axis with one whose dim there is fixed at the batch's old size: a constant of equal slices
    becomes a row (added to ``rows``), anything else goes to ``left`` (refused unless a later
    round proves it). True when a row was added. O(nodes)."""
    graph = index.graph
    added = False
    for i, node in enumerate(graph.node):
        op = node.op_type
        if (op != "Concat" and op not in _BROADCAST) or node.domain not in ("", "ai.onnx"):
            continue
        dims = [_data_type(index, typed, n)[0] if n else None for n in node.input]
        known = [d for d in dims if d is not None]
        if len(known) < 2:
            continue
        rank = max(len(d) for d in known)
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0) % max(rank, 1)
        for a in range(rank):
            if op == "Concat" and a == axis:
                continue
            carried = [f for d in known if 0 <= (k := a - rank + len(d)) < len(d)
                       and (f := factors_of(d[k])) is not None]
            if not carried:
                continue
            f = carried[0]
            value = _value(f, b)
            for slot, (name, d) in enumerate(zip(node.input, dims, strict=True)):
                k = a - rank + len(d) if d is not None else -1
                if (d is not None and 0 <= k < len(d) and not isinstance(d[k], int)
                        and factors_of(d[k]) is None and name and name not in live
                        and name in index.producer and op == "Concat"):
                    left.setdefault(i, (slot, f"input {slot} ('{name}') is computed from "
                                              "constants to a size inference cannot tell; "
                                              "run 'fold' first"))
                    continue
                if d is None or not 0 <= k < len(d) or d[k] != value or (
                        value == 1 and op != "Concat") or (i, slot) in rows:
                    continue
                arr = _array(index, name)
                if arr is not None and arr.ndim == len(d) and bool(
                        np.all(arr == arr.take([0], axis=k))):
                    out: list[Dim] = list(arr.shape)
                    out[k] = symbol_of(f)
                    rows[(i, slot)] = Row(name, k, arr.take([0], axis=k), tuple(arr.shape),
                                          tuple(out), _data_type(index, typed, name)[1],
                                          static_factor(f))
                    added = True
                else:
                    left.setdefault(i, (slot, f"input {slot} ('{name}') has dim {k} fixed at "
                                              "the old batch where another input carries the "
                                              "batch"))
    return added


def plan(index: GraphIndex, shapes: Mapping[str, list[Dim]]) -> tuple[Plan, Rows, str]:
    """The planned nodes, the rows and the input whose dim 0 is the batch (the Shape route's
    source).

    Raises:
        UsageError: a constant hard-codes the old batch and following the input cannot be
            proved.
    """
    real = {vi.name: shape_of(vi) for vi in real_inputs(index.model)}
    old0 = {n: s[0] for n, s in real.items() if s}
    changed = [n for n, s in shapes.items() if n in old0 and s and old0[n] != s[0]]
    olds = {old0[n] for n in changed}
    b = next(iter(olds)) if len(olds) == 1 else None
    if not isinstance(b, int):  # no static batch changed: nothing can hard-code it
        return {}, {}, ""
    graph = index.graph
    candidates: list[tuple[int, np.ndarray]] = []
    for i, node in enumerate(graph.node):
        if node.op_type not in _OPS or node.domain not in ("", "ai.onnx"):
            continue
        slot = slot_of(node)
        if len(node.input) <= slot or len(node.output) != 1:
            continue
        values = const_values(index, node.input[slot])
        if values is not None and values.ndim == 1 and len(values):
            candidates.append((i, values))
    joins = any(n.op_type == "Concat" or (b != 1 and n.op_type in _BROADCAST)
                for n in graph.node)  # where a batch 1 meets a 1, it broadcasts
    if not candidates and not joins:
        return {}, {}, ""
    source = next(vi.name for vi in graph.input if vi.name in changed)
    probe_shapes = {n: ([SYMBOL, *s[1:]] if n in changed else s) for n, s in shapes.items()}
    live = _live(index, set(changed))
    consumers: dict[str, list[tuple[int, int]]] = {}
    for i, node in enumerate(graph.node):
        for s, name in enumerate(node.input):
            consumers.setdefault(name, []).append((i, s))
    planned: Plan = {}
    rows: Rows = {}
    left: dict[int, tuple[int, str]] = {}  # node -> (entry, why) while not proved
    for _ in range(_MAX_ROUNDS):
        typed = _typed(infer(probe(index.model, probe_shapes, planned, rows=rows)))
        left = {}
        progress = _joins(index, typed, b, rows, left, live)
        for i, values in candidates:
            if i in planned:
                continue
            node = graph.node[i]
            data_name = node.input[0] if node.op_type != "ConstantOfShape" else ""
            vi = typed.get(node.output[0])
            data, data_elem = _data_type(index, typed, data_name)
            elem = (vi.type.tensor_type.elem_type if vi is not None and vi.type.HasField(
                "tensor_type") else 0) or data_elem
            try:
                step: Step | None
                if node.op_type == "Reshape":
                    step = None if data is None else _reshape(node, values, data, b, elem)
                    if step is None and int(values[0]) == b and (b != 1 or data_name in live):
                        raise _Refused("its input's dim 0 is not provably the batch")
                elif node.op_type == "Expand" and data is not None and any(
                        factors_of(d) is not None for d in data):
                    step = _expand(values, data, b, elem)
                elif int(values[0]) == b:
                    step = _created(index, i, node, values, data, b, elem, consumers, typed)
                else:
                    step = None
            except _Refused as refused:
                left[i] = (refused.entry, refused.why)
                continue
            if step is not None:
                planned[i] = step
                progress = True
        if not progress:
            break
    if left:
        i, (entry, why) = min(left.items())
        node = graph.node[i]
        what = (f"reads a constant whose entry {entry} is the old batch {b}"
                if node.op_type in _OPS else f"joins tensors at the old batch {b}")
        fix = "" if "'fold'" in why else "; fix the model's shape computation (or keep the batch)"
        raise UsageError(f"node '{index.node_label(i)}' ({node.op_type}) {what}; cannot make "
                         f"it follow the input: {why}{fix}")
    return planned, rows, source


def _expand(values: np.ndarray, data: list[Dim], b: int, elem: int) -> Step | None:
    """An Expand whose data carries the batch: entries equal to the batch dim read 1."""
    off = len(values) - len(data)
    if off < 0:
        raise _Refused("its shape has a lower rank than its input")
    new = values.astype(np.int64).copy()
    out: list[Dim] = [int(v) for v in values]
    changed: list[int] = []
    for j, d in enumerate(data):
        f = factors_of(d)
        v = int(values[off + j])
        if f is None:
            out[off + j] = d if v == 1 else v
            continue
        out[off + j] = d
        if v != 1:
            if v != _value(f, b):
                raise _Refused("its entry does not match the batch dim", off + j)
            new[off + j] = 1
            changed.append(off + j)
    if not changed:
        return Step(1, None, "", tuple(out), elem)
    return Step(1, new, f"entr{'y' if len(changed) == 1 else 'ies'} "
                f"{', '.join(map(str, changed))} read 1: broadcast keeps the input's batch",
                tuple(out), elem)
