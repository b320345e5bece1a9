"""The types a pattern declares limit what it matches: a filter applied to each candidate match.

A pattern input or output that declares an element type (``float[N] x``: float32) matches only a
tensor of that element type. One whose shape gives a fixed size to at least one dim
(``float[2] x``, ``float[N,768] x``, an ``.onnx`` pattern's ``[1, 3, 224, 224]``) declares its
rank and matches only a tensor of that rank; the sizes themselves are not compared. A pattern
that matches every rank: give no fixed size (symbolic dims ``float[N] x``, ``float[A,B] x``,
``float[] x`` or ``float x`` in the text syntax, no ``shape`` at all in an ``.onnx`` pattern,
``make_tensor_value_info("x", TensorProto.FLOAT, None)``). An input or output with no element
type (0, undefined) matches any element type.

A site tensor whose type is not known matches (nothing to compare). :func:`find_matches` applies
the filter after a candidate is found and before it is accepted (its nodes taken), so a site
that does not fit is a near miss with the reason (``'x' is float64; the pattern declares
float32``) and the next candidates can take its nodes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import onnx

from .load import Pattern

if TYPE_CHECKING:
    from ..index import GraphIndex
    from .intmatch import IntMatcher, Sweep

Declared = dict[str, tuple[int, int | None]]
"""Pattern input/output name -> (element type, 0 when undeclared; rank, None when undeclared)."""

TypeLookup = Callable[[str, str], "tuple[int, int | None] | None"]
"""(body path, "" for the main graph; tensor name) -> the tensor's (element type, 0 when
unknown; rank, None when unknown), or None when nothing is known."""


@runtime_checkable
class IdTypeLookup(Protocol):
    """A :data:`TypeLookup` that also answers a main-graph tensor by its id in the int dataflow
    graph (a leaf, or a one-output node's output), without its name."""

    def __call__(self, path: str, name: str) -> tuple[int, int | None] | None: ...

    def by_id(self, g: int) -> tuple[int, int | None] | None:
        """What the lookup answers for tensor ``g`` of the main graph; None: ask by name (it
        may know nothing either)."""


def declared_types(pattern: Pattern) -> Declared:
    """What ``pattern``'s inputs and outputs declare (only those that declare something)."""
    found: Declared = {}
    wanted = set(pattern.inputs) | set(pattern.outputs)
    for vi in [*pattern.graph.input, *pattern.graph.output]:
        if vi.name not in wanted or not vi.type.HasField("tensor_type"):
            continue
        elem, rank = _of(vi.type)
        if elem or rank is not None:
            found[vi.name] = (elem, rank)
    return found


def _of(t: onnx.TypeProto) -> tuple[int, int | None]:
    """(element type, rank); the rank None unless a dim has a fixed size."""
    tt = t.tensor_type
    dims = tt.shape.dim
    fixed = tt.HasField("shape") and any(d.HasField("dim_value") for d in dims)
    return int(tt.elem_type), (len(dims) if fixed else None)


def declared_rank(t: onnx.TypeProto) -> int | None:
    """The rank a pattern's (or replacement's) tensor type declares: its rank when a dim has a
    fixed size, else None (``float x``, ``float[N] x``: any rank)."""
    return _of(t)[1] if t.HasField("tensor_type") else None


def _site_of(t: onnx.TypeProto) -> tuple[int, int | None]:
    """A site tensor's (element type, rank): the rank whenever a shape is given."""
    tt = t.tensor_type
    return int(tt.elem_type), (len(tt.shape.dim) if tt.HasField("shape") else None)


def declared_lookup(graphs: Mapping[str, onnx.GraphProto],
                    index: GraphIndex | None = None) -> TypeLookup:
    """A :data:`TypeLookup` from what each graph states without inference: its inputs,
    outputs, value_info, initializers and Constant nodes (the main graph's from ``index``, name
    by name; a body's table built on first use)."""
    tables: dict[str, dict[str, tuple[int, int | None]]] = {}

    def lookup(path: str, name: str) -> tuple[int, int | None] | None:
        if not path and index is not None:
            return indexed_type(index, name)
        table = tables.get(path)
        if table is None:
            table = tables[path] = _table(graphs[path])
        return table.get(name)

    return lookup


def indexed_type(index: GraphIndex, name: str) -> tuple[int, int | None] | None:
    """What the main graph states of ``name``'s type (value_info, inputs, outputs, an
    initializer, a Constant node), from ``index``; None when it states nothing."""
    t = index.declared_type(name)
    if t is not None and t.HasField("tensor_type") and t.tensor_type.elem_type:
        return _site_of(t)
    k = index.initializers.get(name, -1)
    if k >= 0:
        init = index.graph.initializer[k]
        return int(init.data_type), len(init.dims)
    j = index.producer.get(name)
    if j is not None:
        return _constant_type(index.graph.node[j])
    return None


def _constant_type(node: onnx.NodeProto) -> tuple[int, int | None] | None:
    if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and node.output:
        for attr in node.attribute:
            if attr.name == "value" and attr.type == onnx.AttributeProto.TENSOR:
                return int(attr.t.data_type), len(attr.t.dims)
    return None


def chained(first: TypeLookup, then: TypeLookup) -> TypeLookup:
    """``first``'s answer, else ``then``'s."""
    def lookup(path: str, name: str) -> tuple[int, int | None] | None:
        found = first(path, name)
        return found if found is not None else then(path, name)

    return lookup


def _table(graph: onnx.GraphProto) -> dict[str, tuple[int, int | None]]:
    table: dict[str, tuple[int, int | None]] = {}
    for vi in [*graph.value_info, *graph.input, *graph.output]:
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            table[vi.name] = _site_of(vi.type)
    for init in graph.initializer:
        table[init.name] = (int(init.data_type), len(init.dims))
    for node in graph.node:
        found = _constant_type(node) if node.op_type == "Constant" else None
        if found is not None:
            table[node.output[0]] = found
    return table


def type_clash(declared: Declared, path: str, inputs: Mapping[str, str],
               outputs: Mapping[str, str], lookup: TypeLookup) -> str | None:
    """Why a candidate whose pattern inputs and outputs bound these tensors does not fit what the
    pattern declares (the first one, in pattern order), or None when it fits."""
    for table in (inputs, outputs):
        for pname, gname in table.items():
            want = declared.get(pname)
            if want is None:
                continue
            have = lookup(path, gname)
            if have is None:
                continue
            if want[0] and have[0] and want[0] != have[0]:
                return (f"'{gname}' is {_dtype(have[0])}; the pattern declares {_dtype(want[0])}"
                        f" for '{pname}'")
            if want[1] is not None and have[1] is not None and want[1] != have[1]:
                return (f"'{gname}' has rank {have[1]}; the pattern declares rank {want[1]} for "
                        f"'{pname}' (symbolic dims match any rank)")
    return None


class IntFilter:
    """:func:`type_clash` for the int matcher's bindings (pattern node -> node, pattern tensor
    -> int id): each graph tensor's type looked up once (a weight every match shares, the
    output of one match that is the input of the next), by id when the lookup can
    (:class:`IdTypeLookup`), else by name."""

    def __init__(self, fast: IntMatcher, path: str, declared: Declared,
                 lookup: TypeLookup, by_id: Callable[[int], tuple[int, int | None] | None]
                 | None = None) -> None:
        self.fast, self.path, self.lookup, self.by_id = fast, path, lookup, by_id
        self.ins = [(i, declared[i]) for i in fast.p.inputs if i in declared]
        self.outs = [declared[o] for o in fast.p.outputs if o in declared]
        self.types: dict[int, tuple[int, int | None] | None] = {}

    def _type(self, g: int) -> tuple[int, int | None] | None:
        types = self.types
        if g not in types:
            found = self.by_id(g) if self.by_id is not None else None
            types[g] = found if found is not None else self.lookup(self.path,
                                                                   self.fast.name_of(g))
        return types[g]

    def fits(self, found: tuple[dict[int, int], dict[str, int]]) -> bool:
        """Whether ``found`` fits the types the pattern declares."""
        p2g, t = found
        checks = [(t[i], want) for i, want in self.ins if i in t]
        if self.outs:
            g = p2g[self.fast.anchor]
            checks.extend((g, want) for want in self.outs)
        for g, want in checks:
            have = self._type(g)
            if have is not None and not _fits(want, have):
                return False
        return True

    def swept(self, sweep: Sweep) -> Callable[[int], bool]:
        """``k -> fits`` for the bindings :meth:`Sweep.run` found at its ``k``-th anchor, read
        from its rows (no per-site dicts); a tensor's type looked up when a site that is not
        taken by an earlier match asks, once per tensor, and whether it fits once per declared
        type. O(declared inputs and outputs) per site."""
        names = sweep.names
        cols = [(sweep.tcols[names.index(i)], want) for i, want in self.ins if i in names]
        if self.outs:
            out = sweep.ncols[sweep.order.index(self.fast.anchor)]
            cols.extend((out, want) for want in self.outs)
        verdicts: dict[tuple[int, int | None], dict[int, bool]] = {}
        checks = [(col, verdicts.setdefault(want, {}), want) for col, want in cols]
        resolve, by_id, types = self._type, self.by_id, self.types
        # a column binding one tensor at every anchor (a weight all matches share): dropped
        # from the checks once a site found it fits
        same = [c for c in checks if c[0] and c[0].count(c[0][0]) == len(c[0])]

        def fits(k: int) -> bool:
            for col, seen, want in checks:
                g = col[k]
                ok = seen.get(g)
                if ok is None:
                    have = by_id(g) if by_id is not None else None  # by_id first, as _type
                    if have is None:
                        have = resolve(g)
                    else:
                        types[g] = have
                    ok = seen[g] = have is None or _fits(want, have)
                if not ok:
                    return False
            if same and all(seen.get(col[0]) for col, seen, _ in same):
                checks[:] = [c for c in checks if all(c is not x for x in same)]
                same.clear()
            return True

        return fits


def _fits(want: tuple[int, int | None], have: tuple[int, int | None]) -> bool:
    return not (want[0] and have[0] and want[0] != have[0]) and not (
        want[1] is not None and have[1] is not None and want[1] != have[1])


def _dtype(elem: int) -> str:
    try:
        return onnx.helper.tensor_dtype_to_np_dtype(elem).name
    except (KeyError, ValueError, TypeError):
        return onnx.TensorProto.DataType.Name(elem).lower()
