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

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from ..edit import Edit
from ..errors import UsageError
from ..index import GraphIndex, has_subgraphs, iter_graphs, real_inputs, subgraphs
from ..protos import weightless_copy
from ..types import shape_of
from ._dimsops import (
    BROADCAST,
    OPS,
    SYMBOL,
    Dim,
    Refused,
    Step,
    created_step,
    expand_step,
    factors_of,
    reshape_step,
    slot_of,
    static_factor,
    symbol_of,
    value_of,
)
from ._edgewalk import propagate_edges

__all__ = ["SYMBOL", "Dim", "Plan", "Row", "Rows", "Step", "factors_of", "infer", "plan",
           "probe", "static_factor", "with_dims"]
_MAX_ROUNDS = 16
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


def const_values(index: GraphIndex, name: str) -> np.ndarray | None:
    """The int values of a small constant (initializer or Constant output), else None."""
    k = index.initializers.get(name)
    if k is not None and not index.has_default(name):  # before IR 4 a listed input is a weight
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
            shape.SetInParent()  # a scalar's empty shape is rank 0, not an unknown rank
            for d in dims:
                dim = shape.dim.add()
                if isinstance(d, int):
                    dim.dim_value = d
                elif d:
                    dim.dim_param = d
    return nv


def _sized(vi: onnx.ValueInfoProto) -> bool:
    return vi.type.HasField("tensor_type") and any(
        d.HasField("dim_value") for d in vi.type.tensor_type.shape.dim)


def _unsized(vi: onnx.ValueInfoProto) -> onnx.ValueInfoProto:
    """``vi`` with its static sizes unknown (dtype, rank and symbols kept)."""
    if not _sized(vi):
        return vi
    new = onnx.ValueInfoProto()
    new.CopyFrom(vi)
    for d in new.type.tensor_type.shape.dim:
        if d.HasField("dim_value"):
            d.Clear()
    return new


def stale_bodies(model: onnx.ModelProto, holders: Sequence[int] | None = None
                 ) -> list[tuple[onnx.GraphProto, list[onnx.ValueInfoProto],
                                 list[onnx.ValueInfoProto]]]:
    """The If/Loop/Scan bodies (of the main graph and of local functions, any depth) that
    declare a static size on an output or in value_info, each with its outputs with those
    sizes unknown and its value_info without such entries: a body's shapes follow the ones
    dims changes, and a stale size fails onnx's inference (the output would fail onnx.checker).
    ``holders``: the positions of the main-graph nodes that hold a body (default: found by a
    pass over the nodes). O(size of the bodies)."""
    nodes = model.graph.node
    held = [nodes[i] for i in holders] if holders is not None else \
        [n for n in nodes if n.attribute and has_subgraphs(n)]
    held += [n for fn in model.functions for n in fn.node if n.attribute]
    found = []
    for node in held:
        for body in subgraphs(node):
            for g in iter_graphs(body):
                if any(map(_sized, g.output)) or any(map(_sized, g.value_info)):
                    found.append((g, [_unsized(vi) for vi in g.output],
                                  [vi for vi in g.value_info if not _sized(vi)]))
    return found


def probe(proto: onnx.ModelProto, shapes: Mapping[str, Sequence[Dim]], plan: Plan,
          outer: Mapping[int, tuple[Dim, ...]] | None = None, rows: Rows | None = None,
          row_outer: Mapping[tuple[int, int], tuple[Dim, ...]] | None = None, *,
          holders: Sequence[int] | None = None) -> onnx.ModelProto:
    """A weight-free copy with the new input shapes, each planned node cut out (its output a
    probe input shaped ``outer[i]``, default its planned shape), each row read from a probe
    input shaped like the rewritten row, no value_info, shapeless outputs and bodies without
    static sizes (:func:`stale_bodies`; ``holders`` as there): what inference runs on.
    O(model without weights)."""
    light = weightless_copy(proto)
    e = Edit.of(light)
    graph = light.graph
    for body, outputs, value_info in stale_bodies(light, holders):
        e.set_body_types(body, outputs, value_info)
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
    """Run onnx's inference over a probe (data propagation on: Shape chains are followed).

    Raises:
        UsageError: inference fails outright (a node it cannot read, e.g. an Add with one
            input: the model is invalid, shapes aside).
    """
    try:
        return onnx.shape_inference.infer_shapes(light, data_prop=True)
    except onnx.shape_inference.InferenceError as exc:
        why = " ".join(str(exc).split())[:200]
        raise UsageError(f"onnx's shape inference fails on the model with the new shapes "
                         f"({why}); fix the model (onnx.checker.check_model names the node) "
                         "or give other sizes") from None


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
    if k is not None and not index.has_default(name):  # before IR 4 a listed input is a weight
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
        if (op != "Concat" and op not in BROADCAST) or node.domain not in ("", "ai.onnx"):
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
            value = value_of(f, b)
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


def _agrees(index: GraphIndex, shapes: Mapping[str, list[Dim]], changed: Sequence[str],
            b: int) -> bool:
    """True when the cheap forward pass on the int dataflow graph covers every node and, with
    the changed inputs at a batch no dim can equal by chance, no broadcast meets a dim fixed at
    the old batch ``b`` (it would leave a dim it cannot tell). O(nodes), ~0.5 us per node,
    instead of an onnx inference round."""
    if index.int_graph() is None:
        return False
    odd = 7919 if b != 7919 else 7907
    real = {vi.name: vi for vi in real_inputs(index.model)}
    typed = {n: with_dims(real[n], [odd, *s[1:]] if n in changed else s)
             for n, s in shapes.items()}
    types: dict[int, tuple[int, tuple[Dim, ...]]] = {}
    found = propagate_edges(index, range(len(index.graph.node)), typed, (), cache=types)
    return found is not None and all(None not in t[1] for t in types.values())


def plan(index: GraphIndex, shapes: Mapping[str, list[Dim]]) -> tuple[Plan, Rows, str]:
    """The planned nodes, the rows and the input whose dim 0 is the batch (the Shape route's
    source).

    Raises:
        UsageError: a constant hard-codes the old batch and following the input cannot be
            proved, or a Squeeze removes a batch of 1 that is to become another size.
    """
    planned, rows, source = _plan(index, shapes)
    _refuse_squeezed_batch(index, shapes, planned, rows)
    return planned, rows, source


def _refuse_squeezed_batch(index: GraphIndex, shapes: Mapping[str, list[Dim]], planned: Plan,
                           rows: Rows) -> None:
    """A ``Squeeze`` whose axes take a dim carrying a batch of 1 that is to be another size
    (static or symbolic) runs only at batch 1: refused naming it (onnx's inference passes a
    symbolic dim there, so a dynamic batch would be written and fail at run time). One
    inference over the probe, only when a Squeeze with constant axes exists. O(nodes)."""
    graph = index.graph
    squeezes = [i for i, n in enumerate(graph.node)
                if n.op_type == "Squeeze" and n.domain in ("", "ai.onnx")]
    if not squeezes:
        return
    ones = {vi.name for vi in real_inputs(index.model) if (shape_of(vi) or [None])[0] == 1}
    changed = [n for n, s in shapes.items() if n in ones and s and s[0] != 1]
    if not changed:
        return
    probe_shapes = {n: ([SYMBOL, *s[1:]] if n in changed else s) for n, s in shapes.items()}
    typed = _typed(infer(probe(index.model, probe_shapes, planned, rows=rows)))
    for i in squeezes:
        node = graph.node[i]
        axes = next((list(a.ints) for a in node.attribute if a.name == "axes"), None)
        if axes is None and len(node.input) > 1 and node.input[1]:
            values = const_values(index, node.input[1])
            axes = None if values is None else [int(v) for v in np.ravel(values)]
        data = shape_of(typed.get(node.input[0])) if node.input else None
        if not axes or not data:
            continue
        for a in axes:
            k = a + len(data) if a < 0 else a
            if 0 <= k < len(data) and factors_of(data[k]) is not None:
                raise UsageError(
                    f"node '{index.node_label(i)}' (Squeeze) removes axis {k} of "
                    f"'{node.input[0]}', which carries the batch: the model runs only at batch "
                    "1; keep the batch at 1 (or make the model squeeze another axis)")


def _plan(index: GraphIndex, shapes: Mapping[str, list[Dim]]) -> tuple[Plan, Rows, str]:
    """:func:`plan` but the Squeeze check."""
    real = {vi.name: shape_of(vi) for vi in real_inputs(index.model)}
    old0 = {n: s[0] for n, s in real.items() if s}
    changed = [n for n, s in shapes.items() if n in old0 and s and old0[n] != s[0]]
    olds = {old0[n] for n in changed}
    b = next(iter(olds)) if len(olds) == 1 else None
    if not isinstance(b, int):  # no static batch changed: nothing can hard-code it
        return {}, {}, ""
    graph = index.graph
    candidates: list[tuple[int, np.ndarray]] = []
    computed: list[int] = []  # shape inputs computed by nodes from constants only
    for i, node in enumerate(graph.node):
        if node.op_type not in OPS or node.domain not in ("", "ai.onnx"):
            continue
        slot = slot_of(node)
        if len(node.input) <= slot or len(node.output) != 1:
            continue
        values = const_values(index, node.input[slot])
        if values is not None and values.ndim == 1 and len(values):
            candidates.append((i, values))
        elif values is None and node.op_type != "ConstantOfShape" and \
                node.input[slot] in index.producer:
            computed.append(i)
    concat = any(n.op_type == "Concat" for n in graph.node)
    joins = concat or (b != 1 and any(n.op_type in BROADCAST for n in graph.node))
    if not candidates and not computed and (not joins or (not concat and _agrees(
            index, shapes, changed, b))):  # where a batch 1 meets a 1, it broadcasts
        return {}, {}, ""
    source = next(vi.name for vi in graph.input if vi.name in changed)
    probe_shapes = {n: ([SYMBOL, *s[1:]] if n in changed else s) for n, s in shapes.items()}
    live = _live(index, set(changed))
    computed = [i for i in computed if graph.node[i].input[1] not in live]
    consumers: dict[str, list[tuple[int, int]]] = {}
    for i, node in enumerate(graph.node):
        for s, name in enumerate(node.input):
            consumers.setdefault(name, []).append((i, s))
    planned: Plan = {}
    rows: Rows = {}
    left: dict[int, tuple[int, str]] = {}  # node -> (entry, why) while not proved
    for _ in range(_MAX_ROUNDS):
        typed = _typed(infer(probe(index.model, probe_shapes, planned, rows=rows,
                                   holders=index.body_holders)))
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
                    step = None if data is None else reshape_step(node, values, data, b, elem)
                    if step is None and int(values[0]) == b and (b != 1 or data_name in live):
                        raise Refused("its input's dim 0 is not provably the batch")
                elif node.op_type == "Expand" and data is not None and any(
                        factors_of(d) is not None for d in data):
                    step = expand_step(values, data, b, elem)
                elif int(values[0]) == b:
                    step = created_step(index, i, node, values, data, b, elem, consumers, typed)
                else:
                    step = None
            except Refused as refused:
                left[i] = (refused.entry, refused.why)
                continue
            if step is not None:
                planned[i] = step
                progress = True
        if not progress:
            break
    for i in computed:  # a batch it cannot see: the shape's values are known only folded
        data = _data_type(index, typed, graph.node[i].input[0])[0]
        out = shape_of(typed.get(graph.node[i].output[0]))
        if (data and any(factors_of(d) is not None for d in data)) or (
                out and not isinstance(out[0], int) and factors_of(out[0]) is None):
            left.setdefault(i, (-1, f"its shape '{graph.node[i].input[1]}' is computed from "
                                    "constants, so the batch it hard-codes cannot be seen; run "
                                    "'fold' first"))
    if left:
        i, (entry, why) = min(left.items())
        node = graph.node[i]
        what = (f"joins tensors at the old batch {b}" if node.op_type not in OPS else
                "reads a computed shape" if entry < 0 else
                f"reads a constant whose entry {entry} is the old batch {b}")
        fix = "" if "'fold'" in why else "; fix the model's shape computation (or keep the batch)"
        raise UsageError(f"node '{index.node_label(i)}' ({node.op_type}) {what}; cannot make "
                         f"it follow the input: {why}{fix}")
    return planned, rows, source
