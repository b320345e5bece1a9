"""``dims``: set graph input shapes (or just the batch), propagate them, and make the constants
that hard-code the old batch follow the input.

The new shapes reach the graph outputs and the value_info entries the model has (an entry
that can no longer be told is dropped): by the cheap forward pass on the int dataflow graph
where it covers every node (elementwise, broadcasting arithmetic, MatMul), else by onnx's
inference over a weight-free copy. When the batch (dim 0 of the inputs) changes from a static
size, the shape constants of ``Reshape``/``Expand``/``Tile``/``ConstantOfShape`` that hard-code
it are traced and rewritten to follow the input, or refused naming the node and the entry:
:mod:`onnxsurgeon.surgery._dimsplan` says when each is proved and how it then reads (``0``,
``-1``, ``1``, or the batch from ``Shape`` of the input, one shared ``Shape -> Gather`` chain).
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from ..edit import Edit
from ..errors import NotFoundError, SurgeryError, UsageError
from ..index import DEFAULT_INPUT_IR, GraphIndex, real_inputs
from ..io import Model, as_model
from ..names import NameAllocator
from ..record import DimsRecord, add_rewrite
from ..select import Selector, is_selector
from ..session import indexed
from ..types import shape_of
from ._dimsplan import (
    Dim,
    Rows,
    const_values,
    factors_of,
    infer,
    plan,
    probe,
    stale_bodies,
    static_factor,
    with_dims,
)
from ._edgewalk import propagate_edges

_with_dims = with_dims
_SPLIT = re.compile(r"(?<=[\d?])x|x(?=[\d?])")


@dataclass(frozen=True)
class DimsResult:
    """What ``dims`` did.

    Attributes:
        shapes: each changed graph input -> its new shape (``1x3x224x224``, symbols by name).
        batch: the ``batch`` asked (``""`` when none).
        rewritten: label of each node whose shape constant now follows the input -> how.
    """

    shapes: dict[str, str]
    batch: str
    rewritten: dict[str, str]

    def record(self) -> DimsRecord:
        """The rewrite record of this change."""
        return DimsRecord(shapes=dict(self.shapes), batch=self.batch,
                          rewritten=dict(self.rewritten))


def parse_shape(text: str) -> list[Dim]:
    """``1x3x224x224``, ``batch x3x224x224``, ``batch,3,224,224`` -> dims (int, symbol, or None
    for ``?``).

    Raises:
        UsageError: an empty shape or a piece that is neither a size nor a name.
    """
    raw = text.strip()
    if "," in raw:
        parts = [p.strip() for p in raw.split(",")]
    else:  # an x between a size (or ?) and anything splits: 1x3, batch x3, Nx4, 4xbatch
        parts = [p.strip() for p in _SPLIT.split(raw.replace(" ", ""))]
    dims: list[Dim] = []
    for p in parts:
        if p.isdigit():
            dims.append(int(p))
        elif p == "?":
            dims.append(None)
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", p):
            dims.append(p)
        else:
            parts = []
            break
    if not parts or not dims:
        raise UsageError(f"shape '{text}' does not read; write it like 1x3x224x224, "
                         "batch x3x224x224 or batch,3,224,224")
    return dims


def format_shape(dims: Sequence[Dim]) -> str:
    """Dims written as ``1x3x224x224`` (``?`` for an unnamed dynamic dim)."""
    return "x".join("?" if d is None else str(d) for d in dims)


def _batch_value(batch: int | str) -> Dim:
    if isinstance(batch, int):
        if batch < 1:
            raise UsageError(f"batch {batch} is not a size; give a size >= 1 or 'dynamic'")
        return batch
    text = str(batch).strip()
    if text.isdigit():
        return _batch_value(int(text))
    if text == "dynamic":
        return "batch"
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", text):
        return text
    raise UsageError(f"batch '{batch}' is neither a size nor 'dynamic'; give e.g. 8 or dynamic")


def _input_names(index: GraphIndex, inputs: Mapping[str, str | Sequence[Dim]],
                 real: Mapping[str, onnx.ValueInfoProto]) -> dict[str, str | Sequence[Dim]]:
    """``inputs`` keyed by graph input names: a selector (``glob:``, ``re:``) gives its shape to
    every graph input it matches (refused when it matches another tensor); a framework name or
    TF-style ``x:0`` that means a graph input is that input; an unknown name stays (refused
    with a did-you-mean by the caller)."""
    selector = Selector(index)
    out: dict[str, str | Sequence[Dim]] = {}
    for name, given in inputs.items():
        if name in real:
            keys = [name]
        elif is_selector(name):
            keys = list(dict.fromkeys(s.tensor or "" for s in selector.find(name)))
            other = [k for k in keys if k not in real]
            if other:
                raise UsageError(f"selector '{name}' matches '{other[0]}', which is not a graph "
                                 f"input (the inputs are {sorted(real)}); narrow the selector")
        else:
            try:
                resolved = selector.resolve(name)
            except SurgeryError:
                resolved = name
            keys = [resolved if resolved in real else name]
        for key in keys:
            if key in out:
                raise UsageError(f"graph input '{key}' is given two shapes ('{name}' names it "
                                 "again); give it one")
            out[key] = given
    return out


def _new_shapes(index: GraphIndex, inputs: Mapping[str, str | Sequence[Dim]],
                batch: int | str | None) -> dict[str, list[Dim]]:
    real = {vi.name: vi for vi in real_inputs(index.model)}
    shapes: dict[str, list[Dim]] = {}
    if batch is not None:
        value = _batch_value(batch)
        for name, vi in real.items():
            old = shape_of(vi)
            if old:
                shapes[name] = [value, *old[1:]]
    for name, given in _input_names(index, inputs, real).items():
        if name not in real:
            from difflib import get_close_matches

            lower = {n.lower(): n for n in real}
            close = ([lower[name.lower()]] if name.lower() in lower
                     else get_close_matches(name, list(real), n=1))
            hint = f"; did you mean '{close[0]}'?" if close else f"; the inputs are {sorted(real)}"
            raise NotFoundError(f"graph input '{name}' not found{hint}")
        dims = parse_shape(given) if isinstance(given, str) else list(given)
        old = shape_of(real[name])
        if old is not None and len(old) != len(dims):
            raise UsageError(f"input '{name}' has rank {len(old)} ({format_shape(old)}); shape "
                             f"'{format_shape(dims)}' has {len(dims)} dims: give {len(old)}")
        if not real[name].type.HasField("tensor_type"):
            raise UsageError(f"input '{name}' is not a tensor; only tensor inputs have a shape")
        shapes[name] = dims
    return shapes


def _cheap_shapes(index: GraphIndex, shapes: Mapping[str, Sequence[Dim]],
                  wanted: Collection[str]) -> dict[str, list[Dim] | None] | None:
    """The shapes of ``wanted`` node outputs by the cheap forward pass on the int dataflow
    graph (elementwise, broadcasting arithmetic, MatMul: what most of a long chain is), the new
    input shapes as its boundary; None when a node falls outside that set (onnx's inference
    then runs). O(nodes), ~0.5 us per node, no model copy."""
    edges = index.int_graph()
    if edges is None:
        return None
    real = {vi.name: vi for vi in real_inputs(index.model)}
    typed = {n: _with_dims(real[n], s) for n, s in shapes.items()}
    found = propagate_edges(index, range(len(index.graph.node)), typed, wanted)
    return None if found is None else {n: shape_of(vi) for n, vi in found.items()}


def _lost_outputs(proto: onnx.ModelProto, produced: Collection[str],
                  found: Mapping[str, list[Dim] | None], light: onnx.ModelProto
                  ) -> dict[str, list[Dim]]:
    """Graph outputs that had a shape and got none (a graph output must have one): the new
    shapes break a node (strict inference names it: a UsageError), else inference cannot follow
    them, and each keeps its rank with unknown sizes."""
    lost = {out.name: shape_of(out) for out in proto.graph.output
            if out.name in produced and found.get(out.name) is None and shape_of(out) is not None}
    if not lost:
        return {}
    try:
        onnx.shape_inference.infer_shapes(light, strict_mode=True, data_prop=True)
    except onnx.shape_inference.InferenceError as exc:
        first = re.search(r"\(op_type:([^,)]*)(?:, node name: ([^)]*))?\): \[(?:Shape|Type)"
                          r"InferenceError\] ([^(]*)", " ".join(str(exc).split()))
        if first:
            op, node, why = first.groups()
            where = f"node '{node}' ({op})" if node else f"a {op} node (unnamed)"
            raise UsageError(f"{where} does not accept the new shapes: "
                             f"{why.strip()}; give a size its ops accept (the old size "
                             f"where a node fixes a dim)") from None
    return {name: [None] * len(dims) for name, dims in lost.items() if dims is not None}


def _check_reshapes(index: GraphIndex, inferred: onnx.ModelProto, skip: Collection[int]) -> None:
    """Refuse a Reshape (not rewritten: ``skip``) whose constant target no longer holds its
    data's new static shape: a shape constant hard-codes an old size (onnx's inference does
    not compare the element counts; onnxruntime fails at run time). O(nodes).

    Raises:
        UsageError: the first such Reshape, with both shapes.
    """
    typed = {vi.name: vi for vi in [*inferred.graph.input, *inferred.graph.value_info]}
    for i, node in enumerate(index.graph.node):
        if node.op_type != "Reshape" or node.domain not in ("", "ai.onnx") or i in skip \
                or len(node.input) < 2:
            continue
        dims = shape_of(typed.get(node.input[0])) or [None]
        data = [d for d in dims if isinstance(d, int)]
        target = const_values(index, node.input[1])
        if len(data) != len(dims) or target is None or target.ndim != 1:
            continue
        zero_copies = not any(a.name == "allowzero" and a.i for a in node.attribute)
        want = [data[k] if v == 0 and zero_copies and k < len(data) else int(v)
                for k, v in enumerate(target.tolist())]
        total = math.prod(data)
        known = math.prod(v for v in want if v != -1)
        if (known == 0 or total % known == 0) if -1 in want else known == total:
            continue
        raise UsageError(
            f"node '{index.node_label(i)}' (Reshape) cannot hold the new shapes: its input is "
            f"{format_shape(data)} ({total} elements) and its shape is the constant "
            f"{target.tolist()}; the model hard-codes the old size there: keep that dim (or "
            f"make the model compute the shape)")


def _final(dim: Dim, batch: Dim) -> Dim:
    """A probe dim in the rewritten model: the batch symbol -> the new batch; a merged one ->
    its size when the batch is static, else unnamed."""
    factors = factors_of(dim)
    if factors is None:
        return dim
    if factors == ("B",):
        return batch
    return static_factor(factors) * batch if isinstance(batch, int) else None


def _new_batch(shapes: Mapping[str, list[Dim]], source: str) -> Dim:
    return shapes[source][0] if source else None


def _shape_route(names: NameAllocator, routed: Sequence[tuple[str, np.ndarray, int, int]],
                 source: str) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto], list[str]]:
    """The nodes reading the batch from ``Shape(source)`` (one shared Shape->Gather, then per
    ``(base name, shape values, batch entry, factor)`` a Mul by the factor and a Concat with the
    other entries), their initializers, and the shape tensor of each. Deterministic names."""
    if not routed:
        return [], [], []
    make = onnx.helper.make_node
    shape, at0, batch = (names.fresh(f"{source}/dims_shape"), names.fresh(f"{source}/dims_at0"),
                         names.fresh(f"{source}/dims_batch"))
    nodes = [make("Shape", [source], [shape], name=names.fresh(f"{source}/dims_Shape")),
             make("Gather", [shape, at0], [batch], name=names.fresh(f"{source}/dims_Gather"),
                  axis=0)]
    inits = [numpy_helper.from_array(np.array([0], np.int64), at0)]
    feeds: list[str] = []
    for base, values, at, factor in routed:
        read = batch
        if factor != 1:
            k, read = names.fresh(f"{base}/dims_factor"), names.fresh(f"{base}/dims_batch")
            inits.append(numpy_helper.from_array(np.array([factor], np.int64), k))
            nodes.append(make("Mul", [batch, k], [read], name=names.fresh(f"{base}/dims_Mul")))
        parts: list[str] = []
        for piece, label in ((values[:at], "head"), (None, ""), (values[at + 1:], "tail")):
            if piece is None:
                parts.append(read)
            elif len(piece):
                k = names.fresh(f"{base}/dims_{label}")
                inits.append(numpy_helper.from_array(piece.astype(np.int64), k))
                parts.append(k)
        if len(parts) == 1:
            feeds.append(read)
            continue
        feeds.append(names.fresh(f"{base}/dims"))
        nodes.append(make("Concat", parts, [feeds[-1]], name=names.fresh(f"{base}/dims_Concat"),
                          axis=0))
    return nodes, inits, feeds


def _rows(names: NameAllocator, rows: Rows, shapes: Sequence[str]
          ) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto], dict[tuple[int, int], str]]:
    """Per row: ``Expand(first slice, its shape tensor)``; the nodes, the slices, and
    (node, slot) -> the expanded tensor."""
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    feeds: dict[tuple[int, int], str] = {}
    for (key, row), shape in zip(sorted(rows.items()), shapes, strict=True):
        first, out = names.fresh(f"{row.name}/dims_row"), names.fresh(f"{row.name}/dims")
        inits.append(numpy_helper.from_array(row.first, first))
        nodes.append(onnx.helper.make_node("Expand", [first, shape], [out],
                                           name=names.fresh(f"{row.name}/dims_Expand")))
        feeds[key] = out
    return nodes, inits, feeds


def dims(model: Model | onnx.ModelProto, /, *,
         inputs: Mapping[str, str | Sequence[Dim]] | None = None,
         batch: int | str | None = None) -> DimsResult:
    """Set graph input shapes (``inputs``: name -> shape) and/or the batch (dim 0 of every
    input: a size, ``"dynamic"`` or a symbol name). Mutates model.

    A name in ``inputs`` may be a framework name or TF-style ``x:0`` of a graph input, or a
    selector (``glob:``, ``re:``) giving its shape to every graph input it matches.

    See the module docstring for the constants that follow the new batch.

    Before:  x[1,3,8,8] -> Conv -> Reshape(., [1, -1]) -> y[1,192]
    After (batch=dynamic):  x[batch,3,8,8] -> Conv -> Reshape(., [0, -1]) -> y[batch,192]

    Before:  x[2,4,8] -> Reshape(., [8, 8]) -> Tanh -> Reshape(., [2, 4, 8]) -> y[2,4,8]
    After (batch=dynamic):  x[batch,4,8] -> Reshape(., [-1, 8]) -> Tanh -> Reshape(., [0, 4, 8])
      -> y[batch,4,8]  (a merge, then the split undoing it)

    O(nodes) by the cheap forward pass where it covers the graph (elementwise, broadcasting
    arithmetic, MatMul), else one onnx inference over a weight-free copy; plus one inference
    per round proving shape constants when some read the old batch.

    Raises:
        NotFoundError: an input name that is not a graph input (did-you-mean).
        UsageError: nothing asked, a shape that does not read or has the wrong rank, a shape
            constant that hard-codes the old batch where following the input cannot be proved.
    """
    if not inputs and batch is None:
        raise UsageError("nothing to change; give --input NAME=SHAPE or --batch N|dynamic")
    m = as_model(model)
    proto = m.proto
    index = indexed(m)
    shapes = _new_shapes(index, dict(inputs or {}), batch)
    if not shapes:
        raise UsageError("no graph input has a shape to change; give --input NAME=SHAPE")
    planned, rows, source = plan(index, shapes)
    produced = index.producer
    kept_vi = [vi for vi in proto.graph.value_info if vi.name in produced]
    wanted = {vi.name for vi in proto.graph.output} | {vi.name for vi in kept_vi}
    found = None if planned or rows else _cheap_shapes(index, shapes, wanted)
    if found is None:
        new_b = _new_batch(shapes, source)
        outer = {i: tuple(_final(d, new_b) for d in step.out) for i, step in planned.items()}
        row_outer = {k: tuple(_final(d, new_b) for d in row.out) for k, row in rows.items()}
        inferred = infer(probe(proto, shapes, planned, outer, rows, row_outer,
                                    holders=index.body_holders))
        _check_reshapes(index, inferred, planned)
        typed = {vi.name: vi for vi in [*inferred.graph.value_info, *inferred.graph.output]}
        typed.update({proto.graph.node[i].output[0]: with_dims(
            onnx.helper.make_tensor_value_info("", step.elem, None), outer[i])
            for i, step in planned.items()})
        found = {n: shape_of(typed.get(n)) for n in wanted}
    found.update(_lost_outputs(proto, produced, found, probe(proto, shapes, planned, rows=rows,
                                                             holders=index.body_holders)))
    outputs = [_with_dims(out, found.get(out.name)) if out.name in produced else
               _with_dims(out, shapes[out.name]) if out.name in shapes else out
               for out in proto.graph.output]
    value_info = [_with_dims(vi, found.get(vi.name)) for vi in kept_vi
                  if found.get(vi.name) is not None]
    new_inputs = [_with_dims(vi, shapes[vi.name]) if vi.name in shapes else vi
                  for vi in proto.graph.input]
    rewrites = {i: step for i, step in sorted(planned.items()) if step.values is not None}
    rewritten = {index.node_label(i): step.how for i, step in rewrites.items()}
    for (i, slot), row in sorted(rows.items()):
        rewritten.setdefault(index.node_label(i), f"input {slot} ('{row.name}', equal slices) "
                             f"is expanded to the batch read from Shape on axis {row.axis}")
    node_field = proto.graph.node
    names = NameAllocator.for_index(index)
    routed = [(node_field[i].input[step.slot], step.values, step.batch_at, step.factor)
              for i, step in rewrites.items() if step.batch_at >= 0 and step.values is not None]
    routed += [(row.name, np.array(row.dims, np.int64), row.axis, row.factor)
               for _, row in sorted(rows.items())]
    route, route_inits, shape_feeds = _shape_route(names, routed, source)
    k_rows = len(routed) - len(rows)
    feeds: dict[tuple[int, int], str] = dict(zip(
        [(i, step.slot) for i, step in rewrites.items() if step.batch_at >= 0],
        shape_feeds[:k_rows], strict=True))
    row_nodes, row_inits, row_feeds = _rows(names, rows, shape_feeds[k_rows:])
    route += row_nodes
    route_inits += row_inits
    feeds.update(row_feeds)
    for i, step in rewrites.items():
        if (i, step.slot) not in feeds:
            feeds[(i, step.slot)] = names.fresh(f"{node_field[i].input[step.slot]}/dims")
    uses = {key: index.uses_of(node_field[key[0]].input[key[1]]) for key in feeds}
    stale = stale_bodies(proto, index.body_holders)
    # ------------------------------------------------------------------ mutate (all checked)
    made = [*(numpy_helper.from_array(step.values.astype(np.int64), feeds[(i, step.slot)])
              for i, step in rewrites.items() if step.batch_at < 0 and step.values is not None),
            *route_inits] if feeds else []
    if proto.ir_version < DEFAULT_INPUT_IR:  # before IR 4 every initializer is listed as an input
        new_inputs += [onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                       for t in made]
    e = Edit(index)
    if feeds:
        e.add_initializers(made, made=True)
        for (i, slot), feed in sorted(feeds.items()):
            e.rewire([u for u in uses[(i, slot)] if u.node == i and u.slot == slot], feed)
        if route:
            e.insert_nodes(0, route)
    e.set_inputs(new_inputs)
    e.set_outputs(outputs)
    e.set_value_info(value_info, copy=False)
    for body, body_outputs, body_value_info in stale:
        e.set_body_types(body, body_outputs, body_value_info)
    e.hand_on(m)
    result = DimsResult(shapes={n: format_shape(s) for n, s in shapes.items()},
                        batch="" if batch is None else str(batch), rewritten=rewritten)
    add_rewrite(proto, result.record())
    return result
