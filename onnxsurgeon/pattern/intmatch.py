"""The matcher's fast path: a single-output pattern matched on the int dataflow graph.

:class:`~onnxsurgeon.index.NodeEdges` gives every node's inputs as producer ids (a node index,
a leaf id for a graph input or initializer, -1 for an omitted input) and, for the nodes of the
default domain with one output, the op type. On those nodes a pattern whose nodes each have one
output is matched by comparing ints: no protobuf field is read per visited node (only the
attributes a pattern node sets, and a constant's value once per graph constant). The rules and
the bindings are those of :class:`~onnxsurgeon.pattern.match._Matcher`, tried in the same
order, so both find the same matches; where the int graph cannot decide (a node with several
outputs or of another domain on the way, a pattern node not reached from the output) the
caller falls back to the name-based matcher for that anchor (:class:`Unsure`).

Cost per anchor candidate: O(pattern size) dict and list operations on ints.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from ..index import NodeEdges
from .load import _DEFAULT, Pattern

_MAX_ORDERS = 4
_OMITTED, _INPUT, _CONST, _NODE = 0, 1, 2, 3


class Unsure(Exception):
    """The int graph cannot decide this anchor: ask the name-based matcher."""


def _trim(slots: list[int]) -> list[int]:
    while slots and slots[-1] == -1:
        slots.pop()
    return slots


class IntMatcher:
    """One single-output pattern against one graph's :class:`NodeEdges`.

    Args:
        pattern: the pattern (see :func:`plan_ok`).
        edges: the graph's int dataflow graph.
        nodes: the graph's node field (read only for attributes and Constant outputs).
        constant: graph tensor name -> its constant value, else None (cached by the caller).
        out_nodes: the nodes whose output is a graph output.
        commutative: the ops whose inputs match in any order.
        attrs_ok: ``(node, attrs) -> bool``, the name-based matcher's attribute rule.
        attrs: pattern node -> the attributes it sets, as ``attrs_ok`` takes them.
    """

    def __init__(self, pattern: Pattern, edges: NodeEdges, nodes: Any,
                 constant: Callable[[str], np.ndarray | None], out_nodes: set[int],
                 commutative: frozenset[str],
                 attrs_ok: Callable[[Any, list[Any]], bool], attrs: dict[int, list[Any]]) -> None:
        self.p = pattern
        self.preds = edges.preds
        self.starts = edges.starts
        self.leaves = edges.leaves
        self.eops = edges.ops
        self.names = edges.names
        self.nodes = nodes
        self.constant = constant
        self.attrs_ok = attrs_ok
        self.anchor = pattern.producer[pattern.outputs[0]][0]
        self.n_nodes = len(pattern.nodes)
        self.counts: Counter[int] = Counter(edges.preds)
        self.out_nodes = out_nodes
        self.used: set[int] = set()
        self.p2g: dict[int, int] = {}
        self.g2p: dict[int, int] = {}
        self.t: dict[str, int] = {}
        self.trail: list[tuple[dict[Any, Any], Any]] = []
        self.const_ok: dict[tuple[str, int], bool] = {}
        self.info: dict[int, tuple[str, list[Any], list[tuple[int, Any]],
                                   list[tuple[int, ...]]]] = {}
        for pn in pattern.nodes:
            node = pattern.node(pn)
            pins = list(node.input)
            while pins and not pins[-1]:
                pins.pop()
            spec: list[tuple[int, Any]] = []
            for name in pins:
                if not name:
                    spec.append((_OMITTED, ""))
                elif name in pattern.inputs:
                    spec.append((_INPUT, name))
                elif name in pattern.constants:
                    spec.append((_CONST, name))
                else:
                    spec.append((_NODE, pattern.producer[name][0]))
            n = len(spec)
            orders = [tuple(range(n))]
            if node.op_type in commutative and 1 < n <= _MAX_ORDERS:
                orders = list(itertools.permutations(range(n)))
            self.info[pn] = (node.op_type, attrs.get(pn, []), spec, orders)

    # ------------------------------------------------------------------ the walk
    def at(self, gn: int, used: set[int]) -> tuple[dict[int, int], dict[str, int]] | None:
        """(pattern node -> graph node, pattern tensor -> graph id) when the pattern matches
        with its output node at ``gn``, else None. Raises :class:`Unsure`."""
        self.used = used
        p2g: dict[int, int] = {}
        g2p: dict[int, int] = {}
        t: dict[str, int] = {}
        self.p2g, self.g2p, self.t, self.trail = p2g, g2p, t, []
        if not self._node(self.anchor, gn):
            return None
        if len(p2g) < self.n_nodes:
            raise Unsure
        return (p2g, t) if self._valid() else None

    def _undo(self, mark: int) -> None:
        trail = self.trail
        while len(trail) > mark:
            table, key = trail.pop()
            del table[key]

    def _node(self, pn: int, gn: int) -> bool:
        p2g = self.p2g
        if pn in p2g:
            return p2g[pn] == gn
        op, attrs, spec, orders = self.info[pn]
        g2p = self.g2p
        if gn in g2p or gn in self.used:
            return False
        have = self.eops[gn]
        if have != op:
            if not have and self.nodes[gn].op_type == op:
                raise Unsure  # several outputs or another domain: the names decide
            return False
        if attrs and not self.attrs_ok(self.nodes[gn], attrs):
            return False
        starts = self.starts
        gins = self.preds[starts[gn]:starts[gn + 1]]
        if gins and gins[-1] == -1:
            gins = _trim(gins)
        if len(gins) != len(spec):
            return False
        trail = self.trail
        mark = len(trail)
        p2g[pn] = gn
        g2p[gn] = pn
        trail.append((p2g, pn))
        trail.append((g2p, gn))
        inner = len(trail)
        eops = self.eops
        for order in orders:
            for j, (kind, ref) in enumerate(spec):
                g = gins[order[j]]
                if kind == _NODE and g >= 0:  # the common step, inline: a producer node
                    bound = p2g.get(ref)
                    if bound is not None:
                        if bound != g:
                            break
                        continue
                    if not eops[g]:
                        raise Unsure  # which output of a multi-output node: the names decide
                    if not self._node(ref, g):
                        break
                elif not self._tensor(kind, ref, g):
                    break
            else:
                return True
            if len(trail) > inner:
                self._undo(inner)
        self._undo(mark)
        return False

    def _tensor(self, kind: int, ref: Any, g: int) -> bool:
        if kind == _OMITTED or g == -1:
            return kind == _OMITTED and g == -1
        if kind == _NODE:
            bound = self.p2g.get(ref)
            if bound is not None:
                return bound == g
            if g < 0:
                return False
            if not self.eops[g]:
                raise Unsure  # which output of a multi-output node: the names decide
            return self._node(ref, g)
        t = self.t
        bound = t.get(ref)
        if bound is not None:
            return bound == g
        if kind == _CONST:
            key = (ref, g)
            ok = self.const_ok.get(key)
            if ok is None:
                ok = self.const_ok[key] = self._constant_ok(ref, g)
            if not ok:
                return False
        t[ref] = g
        self.trail.append((t, ref))
        return True

    def _constant_ok(self, pin: str, g: int) -> bool:
        if g >= 0:
            if self.eops[g] != "Constant":
                return False
            value = self.constant(self.nodes[g].output[0])
        else:
            value = self.constant(self.leaves[g])
        if value is None:
            return False
        p = self.p
        want = p.constants[pin]
        if pin in p.any_constant:
            return bool(value.dtype == want.dtype and value.ndim == want.ndim)
        return bool(value.dtype == want.dtype and value.shape == want.shape
                    and np.array_equal(value, want, equal_nan=value.dtype.kind in "fc"))

    def reads_inside(self, g: int, inside: set[int]) -> int:
        preds, starts = self.preds, self.starts
        return sum(preds[starts[i]:starts[i + 1]].count(g) for i in inside)

    def _valid(self) -> bool:
        inside = set(self.g2p)
        out = self.p2g[self.anchor]
        preds, starts, counts, out_nodes = self.preds, self.starts, self.counts, self.out_nodes
        reads: list[int] = []
        for i in inside:
            reads += preds[starts[i]:starts[i + 1]]
        for gn in inside:
            if gn != out and (gn in out_nodes or counts[gn] > reads.count(gn)):
                return False
        t = self.t
        return not any(t.get(pin, -1) in inside for pin in self.p.inputs)

    # ------------------------------------------------------------------ names
    def name_of(self, g: int) -> str:
        """The tensor name of graph id ``g`` (a leaf, or a one-output node's output)."""
        return self.leaves[g] if g < 0 else self.nodes[g].output[0]

    def label(self, i: int) -> str:
        return self.names[i] or f"{self.eops[i]}#{i}"


def plan_ok(pattern: Pattern) -> bool:
    """The pattern fits the int graph: one output, every node of the default domain with one
    output."""
    if len(pattern.outputs) != 1:
        return False
    for pn in pattern.nodes:
        node = pattern.node(pn)
        if node.domain not in _DEFAULT or len(node.output) != 1 or not node.output[0]:
            return False
    return True
