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
from collections.abc import Callable, Mapping
from functools import cached_property
from itertools import chain, repeat
from typing import Any, cast

import numpy as np

from ..index import NodeEdges
from .load import _DEFAULT, Pattern
from .results import Match

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

    @cached_property
    def counts(self) -> Counter[int]:
        """Node id -> how many reads its output has (built when the walk first needs it)."""
        return Counter(self.preds)

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
        if g >= 0 and not self.eops[g] and len(self.nodes[g].output) != 1:
            raise Unsure  # which output of a multi-output node: the names decide
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


def int_match(fast: IntMatcher, path: str, found: tuple[dict[int, int], dict[str, int]],
              used: set[int]) -> Match:
    """The :class:`Match` of the int matcher's bindings (the same as the name-based one's);
    its nodes, and the Constant nodes only it reads, join ``used``."""
    p = fast.p
    p2g, t = found
    nodes = tuple(sorted(p2g.values()))
    used.update(nodes)
    inside = set(nodes)
    dead = []
    for c in p.constants:
        g = t.get(c, -1)
        if g < 0 or g in inside or fast.eops[g] != "Constant" or g in fast.out_nodes:
            continue
        if fast.counts[g] == fast.reads_inside(g, inside) and g not in used:
            dead.append(g)
            used.add(g)
    name = fast.name_of
    return Match(path, nodes, tuple(map(fast.label, nodes)),
                 {i: name(t[i]) for i in p.inputs if i in t},
                 {o: name(p2g[fast.anchor]) for o in p.outputs},
                 {c: name(t[c]) for c in p.constants if c in t}, tuple(sorted(dead)))


def swept_match(sweep: Sweep, path: str, producer: Mapping[str, int], used: set[int]
                ) -> Callable[[list[int]], list[Match]] | None:
    """``ks -> Matches`` for the sweep's bindings at its ``k``-th anchors (taken already:
    their nodes are in ``used``), the same :class:`Match` each as :func:`int_match` gives for
    them, built by C-level maps over the sites when every bound tensor and node is named. The
    bound tensors' names come per column from one table (leaf ids and the producer map
    inverted: a single-output node's one name; the sweep and the walk leave every
    multi-output node to the names), not from the protos per site. None when the pattern has
    constants (their Constant nodes need :func:`int_match`'s count) or no input."""
    fast = sweep.fast
    p = fast.p
    if p.constants or not sweep.names:
        return None
    table: dict[int, str] = dict(zip(producer.values(), producer.keys(), strict=True))
    table.update(fast.leaves)
    get = table.get
    pins = [pin for pin in p.inputs if pin in sweep.names]
    rows = list(zip(*[list(map(get, sweep.tcols[sweep.names.index(pin)])) for pin in pins],
                    strict=True))
    outs = list(map(get, sweep.ncols[sweep.order.index(fast.anchor)]))
    keys = p.outputs
    label, names = fast.label, fast.names

    def one(k: int, nodes: tuple[int, ...]) -> Match:
        bound, out = rows[k], outs[k]
        if out is None or None in bound:  # an unnamed output: as the walk's
            return int_match(fast, path, sweep.bound(k), used)
        labels = tuple(map(label, nodes))  # OpType#i for an unnamed node
        return Match(path, nodes, labels, dict(zip(pins, cast("tuple[str, ...]", bound),
                                                         strict=True)),
                     dict.fromkeys(keys, out), {}, ())

    def made(ks: list[int]) -> list[Match]:
        nodes = list(map(tuple, map(sorted, map(sweep.rows.__getitem__, ks))))
        bound = list(map(rows.__getitem__, ks))
        out = list(map(outs.__getitem__, ks))
        labels = list(map(tuple, map(map, repeat(names.__getitem__), nodes)))
        if None in out or None in chain.from_iterable(bound) or "" in chain.from_iterable(
                labels):
            return list(map(one, ks, nodes))
        return list(map(Match, repeat(path), nodes, labels,
                        map(dict, map(zip, repeat(pins), bound)),
                        map(dict.fromkeys, repeat(keys), out), map(dict, repeat(())),
                        repeat(())))

    return made


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


class Sweep:
    """A tree-shaped pattern matched at many anchors at once, by array gathers over the int
    graph (numpy: op-type codes, producer ids), with no Python step per visited node.

    It decides only what the walk of :class:`IntMatcher` would decide the same way: a
    pattern whose nodes' outputs are each read once inside it, every pattern input read once,
    no constant and no attribute set. Per anchor :meth:`run` gives None (the walk finds no
    match there), the bindings of the walk's first choice ignoring the nodes of earlier
    matches (the caller checks those: if any is taken, it asks the walk), or :data:`ASK` (a
    node the int graph cannot decide, a graph node bound twice, an omitted trailing input, a
    read outside the match: the walk decides). Cost: O(anchors x pattern size) in numpy.
    """

    def __init__(self, fast: IntMatcher, arrays: tuple[Any, Any] | None = None) -> None:
        """``arrays``: the int graph's preds and starts as numpy arrays when the caller keeps
        them (:func:`~onnxsurgeon.index.int_arrays`, shared with the save's check), else made
        here."""
        self.fast = fast
        codes: dict[str, int] = {"": 0}
        ops = fast.eops
        self.E = np.fromiter(map(codes.setdefault, ops, itertools.count(len(codes))),
                             dtype=np.int64, count=len(ops)) if ops else np.zeros(0, np.int64)
        # setdefault with a running counter gives new ops fresh (not dense) codes: fine
        self.codes = codes
        if arrays is None:
            arrays = (np.fromiter(fast.preds, np.int64, count=len(fast.preds)),
                      np.fromiter(fast.starts, np.int64, count=len(fast.starts)))
        self.P: Any = arrays[0]
        self.S: Any = arrays[1]
        self.C = np.bincount(self.P[self.P >= 0], minlength=len(ops)) if len(ops) else self.E
        self.O = np.zeros(len(ops), dtype=bool)
        if fast.out_nodes:
            self.O[list(fast.out_nodes)] = True

    @staticmethod
    def fits(fast: IntMatcher) -> bool:
        """Whether the pattern has the shape :class:`Sweep` decides."""
        reads: Counter[Any] = Counter()
        for _op, attrs, spec, _orders in fast.info.values():
            if attrs:
                return False
            for kind, ref in spec:
                if kind in (_OMITTED, _CONST):
                    return False
                reads[(kind, ref)] += 1
        nodes = [k for k in reads if k[0] == _NODE]
        return (all(c == 1 for c in reads.values())
                and len(nodes) == fast.n_nodes - 1
                and all(fast.anchor != ref for _, ref in nodes))

    def _walk(self, pn: int, G: Any, live: Any,
              nodes: dict[int, Any], tens: dict[str, Any]) -> tuple[Any, Any, Any]:
        """(ok, ask, several) per entry of ``G`` for pattern node ``pn`` bound at ``G`` (only
        where ``live``), filling ``nodes``/``tens`` with the chosen bindings; ``several``: more
        than one binding fits (another input order would too, here or below)."""
        op, _attrs, spec, orders = self.fast.info[pn]
        E, P, S = self.E, self.P, self.S
        isnode = live & (G >= 0)
        g = np.where(isnode, G, 0)
        e = E[g]
        ask = isnode & (e == 0)
        ok = isnode & (e == self.codes.get(op, -1))
        first, end = S[g], S[g + 1]
        ask |= ok & (end > first) & (P[np.maximum(end - 1, 0)] == -1)
        ok &= (end - first) == len(spec)
        nodes[pn] = G
        top = max(len(P) - 1, 0)
        chosen = np.zeros(len(G), dtype=bool)
        result_ok = np.zeros(len(G), dtype=bool)
        several = np.zeros(len(G), dtype=bool)
        for order in orders:
            sub_nodes: dict[int, Any] = {}
            sub_tens: dict[str, Any] = {}
            ok_o = ok.copy()
            for j, (kind, ref) in enumerate(spec):
                child = P[np.minimum(first + order[j], top)] if len(P) else G
                if kind == _NODE:
                    c_ok, c_ask, c_several = self._walk(ref, child, ok_o, sub_nodes, sub_tens)
                    ask |= c_ask
                    ok_o &= c_ok
                    several |= c_several & ok_o
                else:  # a pattern input: any tensor but an omitted one
                    ok_o &= child != -1
                    ask |= ok_o & (child >= 0) & (E[np.maximum(child, 0)] == 0)  # which output
                    sub_tens[ref] = child
            take = ok_o & ~chosen
            for k, v in sub_nodes.items():
                nodes[k] = np.where(take, v, nodes[k]) if k in nodes else v
            for pin, v in sub_tens.items():
                tens[pin] = np.where(take, v, tens[pin]) if pin in tens else v
            several |= ok_o & chosen
            result_ok |= ok_o
            chosen |= ok_o
        return result_ok, ask, several

    def run(self, anchors: list[int]) -> list[int]:
        """Per anchor: :data:`NO`, :data:`ONLY`, :data:`SEVERAL` or :data:`ASK` (see the
        class); ``ONLY``: no other binding fits, so a taken node among these means no match."""
        G = np.asarray(anchors, dtype=np.int64)
        nodes: dict[int, Any] = {}
        tens: dict[str, Any] = {}
        ok, ask, several = self._walk(self.fast.anchor, G, np.ones(len(G), dtype=bool), nodes,
                                      tens)
        order = list(nodes)
        cols = [nodes[k] for k in order]
        inner = [nodes[k] for k in order if k != self.fast.anchor]
        bad = np.zeros(len(G), dtype=bool)
        for i, a in enumerate(cols):  # a graph node bound twice
            for b in cols[i + 1:]:
                bad |= a == b
        for a in inner:  # an inner output read outside, or a graph output
            a0 = np.where(ok, a, 0)
            bad |= (self.C[a0] != 1) | self.O[a0]
        for t in tens.values():  # a pattern input bound to a node inside
            for a in cols:
                bad |= t == a
        ask = ask | (ok & bad)
        self.order, self.names = order, list(tens)
        self.ncols: list[list[int]] = [c.tolist() for c in cols]
        """Per pattern node (in ``order``), the graph node bound to it at each anchor."""
        self.rows: list[tuple[int, ...]] = list(zip(*self.ncols, strict=True))
        """Per anchor, the graph nodes bound to the pattern nodes (in ``order``)."""
        self.tcols: list[list[int]] = [tens[k].tolist() for k in self.names]
        """Per pattern input (in ``names``), the tensor id bound to it at each anchor."""
        return np.where(ask, ASK, np.where(ok, np.where(several, SEVERAL, ONLY), NO)).tolist()

    def bound(self, k: int) -> tuple[dict[int, int], dict[str, int]]:
        """The bindings :meth:`run` found at its ``k``-th anchor, as :meth:`IntMatcher.at`
        gives them."""
        return (dict(zip(self.order, self.rows[k], strict=True)),
                {name: col[k] for name, col in zip(self.names, self.tcols, strict=True)})


NO, ONLY, ASK, SEVERAL = 0, 1, 2, 3
""":meth:`Sweep.run`'s answers per anchor: no match; a match (:meth:`Sweep.bound`), the one
binding that fits; only the walk decides; a match, but another binding fits too."""
