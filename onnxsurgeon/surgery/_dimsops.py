"""The rules of ``dims``' plan for one node (private to :mod:`onnxsurgeon.surgery._dimsplan`):
the batch as probe symbols naming its factors, and when a ``Reshape``, ``Expand``, ``Tile`` or
``ConstantOfShape`` constant provably follows it (see :mod:`onnxsurgeon.surgery._dimsplan`)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx

from ..index import GraphIndex
from ..types import shape_of

Dim = int | str | None
Factor = int | str  # "B" is the batch
SYMBOL = "__onnxsurgeon_batch__"
_MAX_WALK = 64
OPS = ("Reshape", "Expand", "Tile", "ConstantOfShape")
_PASS = frozenset({
    "Abs", "Cast", "Ceil", "Cos", "Elu", "Erf", "Exp", "Floor", "Gelu", "HardSigmoid",
    "HardSwish", "Identity", "LeakyRelu", "Log", "Neg", "Not", "Reciprocal", "Relu", "Round",
    "Selu", "Sigmoid", "Sign", "Sin", "Softplus", "Softsign", "Sqrt", "Tanh",
})
"""Single-input ops whose output has its input's shape (the meeting walk goes through them)."""
BROADCAST = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean",
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


def value_of(factors: Sequence[Factor], b: int) -> int:
    return math.prod(b if f == "B" else int(f) for f in factors)


def slot_of(node: onnx.NodeProto) -> int:
    """The input slot of ``node``'s shape constant."""
    return 0 if node.op_type == "ConstantOfShape" else 1


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
        if all(value_of(r, b) == o for r, o in zip(runs, outs, strict=True)):
            at = next(k for k, r in enumerate(runs) if "B" in r)
            readings.append((at, runs[at]))
            if all(runs):
                full.append((at, runs[at]))
    if len(full) == 1:
        return full[0]
    if readings and all(r == readings[0] for r in readings):
        return readings[0]
    return None


class Refused(Exception):
    """A constant this plan cannot make follow the batch: why, and the entry it is about."""

    def __init__(self, why: str, entry: int = 0) -> None:
        super().__init__(why)
        self.why, self.entry = why, entry


def reshape_step(node: onnx.NodeProto, values: np.ndarray, data: list[Dim], b: int,
             elem: int) -> Step | None:
    """A Reshape whose data carries the batch (see the module docstring); None: the data does
    not carry it."""
    carriers = [(k, f) for k, d in enumerate(data) if (f := factors_of(d)) is not None]
    if not carriers:
        return None
    if len(carriers) > 1:
        raise Refused("its input carries the batch in more than one dim")
    k, fk = carriers[0]
    if any(a.name == "allowzero" and a.i for a in node.attribute) and 0 in values:
        raise Refused("allowzero=1 with a 0 entry", int(list(values).index(0)))
    ins: list[int] = []
    for j, d in enumerate(data):
        if j == k:
            ins.append(value_of(fk, b))
        elif isinstance(d, int):
            ins.append(d)
        else:
            raise Refused(f"its input's dim {j} is not static")
    outs = [ins[j] if v == 0 and j < len(ins) else int(v) for j, v in enumerate(values)]
    if outs.count(-1) > 1:
        raise Refused("more than one -1")
    if -1 in outs:
        rest = math.prod(v for v in outs if v != -1)
        total = math.prod(ins)
        if rest == 0 or total % rest:
            raise Refused("the sizes do not add up", outs.index(-1))
        outs[outs.index(-1)] = total // rest
    groups = _groups(ins, outs)
    if groups is None:
        raise Refused("its input's dims and the shape do not pair up")
    gi, gj = next(g for g in groups if k in g[0])
    fs: list[Factor] = []
    for j in gi:
        fs.extend(fk if j == k else (ins[j],))
    if not gj:
        raise Refused("the batch dim is dropped")
    found = _split_batch(fs, [outs[j] for j in gj], b)
    if found is None:
        raise Refused("the batch could go to more than one of entries "
                       f"{', '.join(map(str, gj))}", gj[0])
    at, run = found
    j0 = gj[at]
    if run[0] != "B":
        raise Refused(f"the batch would not lead entry {j0} (samples would interleave)", j0)
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
                    if node.op_type in BROADCAST:
                        return "broadcast"
                    return "other"
    return ""


def created_step(index: GraphIndex, i: int, node: onnx.NodeProto, values: np.ndarray,
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
            raise Refused("its input's dim 0 is not 1")
        out = [d * int(r) if isinstance(d, int) else d for d, r in zip(data, values, strict=True)]
    elif op == "Expand":
        off = rank - len(data) if data is not None else -1
        if data is None or off < 0 or (off == 0 and data[0] != 1):
            raise Refused("its input's rank or dim 0 is unknown")
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
    raise Refused("the dataflow of shapes does not prove it is the batch"
                   + (" (its output meets the batch in an op this does not read)"
                      if met == "other" else ""))


def expand_step(values: np.ndarray, data: list[Dim], b: int, elem: int) -> Step | None:
    """An Expand whose data carries the batch: entries equal to the batch dim read 1."""
    off = len(values) - len(data)
    if off < 0:
        raise Refused("its shape has a lower rank than its input")
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
            if v != value_of(f, b):
                raise Refused("its entry does not match the batch dim", off + j)
            new[off + j] = 1
            changed.append(off + j)
    if not changed:
        return Step(1, None, "", tuple(out), elem)
    return Step(1, new, f"entr{'y' if len(changed) == 1 else 'ies'} "
                f"{', '.join(map(str, changed))} read 1: broadcast keeps the input's batch",
                tuple(out), elem)
