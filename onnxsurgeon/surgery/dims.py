"""``dims``: set graph input shapes (or just the batch), propagate them, and make the constants
that hard-code the old batch follow the input.

The new shapes are propagated by onnx's shape inference over a weight-free copy: graph outputs
and value_info get the inferred shapes (stale value_info is dropped first). When the batch (dim
0 of an input) changes from a static size ``b``, each ``Reshape``/``Expand``/``Tile``/
``ConstantOfShape`` whose shape constant starts with ``b`` and whose data comes from the inputs
is looked at, with the batch as a private symbol in the inference:

* ``Reshape(data, [b, ...])`` whose data's dim 0 is the batch: the constant reads ``0`` there
  (copy dim 0 of the input; provably the batch);
* ``Expand(x, [b, ...])`` whose ``x`` has the rank of the shape and the batch as dim 0: the
  constant reads ``1`` (broadcast keeps the batch);
* anything else whose constant starts with ``b`` while its data carries the batch (a Tile, a
  ConstantOfShape, a Reshape of a tensor whose dim 0 is not the batch): refused, naming the node
  and why (with ``b`` = 1 a node whose data does not carry the batch is left alone: a 1 there
  broadcasts).

Rounds repeat until nothing more can be proved (a rewritten Reshape lets the next one see the
batch), so a chain of reshapes is followed.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from ..edit import Edit
from ..errors import NotFoundError, SurgeryError, UsageError
from ..index import GraphIndex, real_inputs
from ..io import Model, as_model
from ..names import NameAllocator
from ..protos import weightless_copy
from ..record import DimsRecord, add_rewrite
from ..select import Selector, is_selector
from ..session import indexed
from ..types import shape_of

Dim = int | str | None
_SYMBOL = "__onnxsurgeon_batch__"
_MAX_ROUNDS = 16
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


def _const_values(index: GraphIndex, name: str) -> np.ndarray | None:
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


def _with_dims(vi: onnx.ValueInfoProto, dims: Sequence[Dim] | None) -> onnx.ValueInfoProto:
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


Plan = dict[int, tuple[str, np.ndarray, str]]
"""Node -> (its shape constant's name, the new values, how they follow the input)."""


def _slot(node: onnx.NodeProto) -> int:
    return 0 if node.op_type == "ConstantOfShape" else 1


def _probe(proto: onnx.ModelProto, shapes: Mapping[str, Sequence[Dim]], plan: Plan,
           fresh: Mapping[int, str]) -> onnx.ModelProto:
    """A weight-free copy with the new input shapes, the planned constants in place (as the
    initializers ``fresh`` names), no value_info and shapeless outputs: what inference runs on.
    O(model without weights)."""
    light = weightless_copy(proto)
    e = Edit.of(light)
    if plan:
        idx = GraphIndex(light)
        e.add_initializers([numpy_helper.from_array(v.astype(np.int64), fresh[i])
                            for i, (_, v, _) in sorted(plan.items())])
        for i, (name, _, _) in sorted(plan.items()):
            slot = _slot(light.graph.node[i])
            e.rewire([u for u in idx.uses_of(name) if u.node == i and u.slot == slot], fresh[i],
                     idx)
    e.set_inputs([_with_dims(vi, shapes[vi.name]) if vi.name in shapes else vi
                  for vi in light.graph.input])
    e.set_outputs([_with_dims(vi, None) for vi in light.graph.output])
    e.set_value_info([], copy=False)
    return light


def _infer(light: onnx.ModelProto, wanted: Collection[str] = ()) -> tuple[
        dict[str, list[Dim] | None], onnx.ModelProto]:
    """The shapes of ``wanted`` tensors of ``light`` by onnx's inference (data propagation on),
    and the inferred model."""
    inferred = onnx.shape_inference.infer_shapes(light, data_prop=True)
    found: dict[str, list[Dim] | None] = {}
    if wanted:
        for vi in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
            if vi.name in wanted:
                found[vi.name] = shape_of(vi)
    return found, inferred


def _depends_on_inputs(index: GraphIndex, names: set[str]) -> set[str]:
    """Tensors computed (at any distance) from a graph input. O(nodes)."""
    live = set(names)
    for node in index.graph.node:
        if any(i in live for i in node.input):
            live.update(o for o in node.output if o)
    return live


def _plan(index: GraphIndex, shapes: Mapping[str, list[Dim]]) -> Plan:
    """The constants that must follow the new batch (see the module docstring).

    Raises:
        UsageError: a constant hard-codes the old batch and following the input cannot be
            proved.
    """
    real = {vi.name: shape_of(vi) for vi in real_inputs(index.model)}
    old0 = {n: s[0] for n, s in real.items() if s}
    changed = {n for n, s in shapes.items() if n in old0 and s and old0[n] != s[0]}
    olds = {old0[n] for n in changed}
    b = next(iter(olds)) if len(olds) == 1 else None
    if not isinstance(b, int):  # no static batch changed: nothing can hard-code it
        return {}
    probe_shapes = {n: ([_SYMBOL, *s[1:]] if n in changed else s) for n, s in shapes.items()}
    candidates: list[tuple[int, str, np.ndarray]] = []
    for i, node in enumerate(index.graph.node):
        if node.op_type not in ("Reshape", "Expand", "Tile", "ConstantOfShape"):
            continue
        slot = _slot(node)
        if len(node.input) <= slot:
            continue
        values = _const_values(index, node.input[slot])
        if values is None or values.ndim != 1 or not len(values) or int(values[0]) != b:
            continue
        candidates.append((i, node.input[slot], values))
    plan: Plan = {}
    if not candidates:
        return plan
    live = _depends_on_inputs(index, set(changed))
    fresh = {i: f"{name}/dims_probe{i}" for i, name, _ in candidates}
    wanted = {index.graph.node[i].input[0] for i, _, _ in candidates}
    for _ in range(_MAX_ROUNDS):
        found, _inferred = _infer(_probe(index.model, probe_shapes, plan, fresh), wanted)
        progress = False
        for i, name, values in candidates:
            if i in plan:
                continue
            node = index.graph.node[i]
            data = node.input[0] if node.op_type != "ConstantOfShape" else ""
            dims = found.get(data) if data else None
            if node.op_type == "Reshape" and dims and dims[0] == _SYMBOL and not any(
                    a.name == "allowzero" and a.i for a in node.attribute):
                new = values.copy()
                new[0] = 0
                plan[i] = (name, new, "0: dim 0 of its input (the batch)")
                progress = True
            elif node.op_type == "Expand" and dims and len(dims) == len(values) and \
                    dims[0] == _SYMBOL:
                new = values.copy()
                new[0] = 1
                plan[i] = (name, new, "1: broadcast keeps the input's batch")
                progress = True
        if not progress:
            break
    for i, _name, _values in candidates:
        if i in plan:
            continue
        node = index.graph.node[i]
        data = node.input[0] if node.op_type != "ConstantOfShape" else ""
        if b == 1 and (not data or data not in live):
            continue  # a 1 that does not meet the batch broadcasts
        why = {"Reshape": "its input's dim 0 is not provably the batch",
               "Expand": "its input does not carry the batch as dim 0 at the shape's rank",
               }.get(node.op_type, "that element cannot be proved to be the batch")
        raise UsageError(f"node '{index.node_label(i)}' ({node.op_type}) reads a constant "
                         f"starting with the old batch {b}; cannot make it follow the input: "
                         f"{why}; fix the model's shape computation (or keep the batch)")
    return plan


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

    O(nodes) per shape-inference round (one, or one more per Reshape chain link proved).

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
    plan = _plan(index, shapes)
    names = NameAllocator.for_index(index)
    fresh = {i: names.fresh(f"{name}/dims") for i, (name, _, _) in sorted(plan.items())}
    _, inferred = _infer(_probe(proto, shapes, plan, fresh))
    value_info = list(inferred.graph.value_info)
    outputs = [_with_dims(out, shape_of(new)) for out, new in
               zip(proto.graph.output, inferred.graph.output, strict=True)]
    new_inputs = [_with_dims(vi, shapes[vi.name]) if vi.name in shapes else vi
                  for vi in proto.graph.input]
    rewritten = {index.node_label(i): how for i, (_, _, how) in sorted(plan.items())}
    uses = {i: index.uses_of(name) for i, (name, _, _) in plan.items()}
    # ------------------------------------------------------------------ mutate (all checked)
    e = Edit(index)
    if plan:
        e.add_initializers([numpy_helper.from_array(v.astype(np.int64), fresh[i])
                            for i, (_, v, _) in sorted(plan.items())], made=True)
        for i, (_name, _, _) in sorted(plan.items()):
            slot = _slot(proto.graph.node[i])
            e.rewire([u for u in uses[i] if u.node == i and u.slot == slot], fresh[i])
    e.set_inputs(new_inputs)
    e.set_outputs(outputs)
    e.set_value_info(value_info, copy=False)
    e.hand_on(m)
    result = DimsResult(shapes={n: format_shape(s) for n, s in shapes.items()},
                        batch="" if batch is None else str(batch), rewritten=rewritten)
    add_rewrite(proto, result.record())
    return result
