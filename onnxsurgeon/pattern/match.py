"""Finding a pattern: every place of a model where P occurs.

A pattern is an ONNX graph (an ``.onnx`` file, the ONNX text syntax of a whole model or of a bare
graph, or bytes), read by :func:`load_pattern`. :func:`find_matches` lists every place of a
model where it occurs, the main graph first, then each If/Loop/Scan body, by these rules:

* a pattern node matches a node of equal op type and domain whose inputs match its inputs; an
  attribute the pattern node sets must be equal (a graph node leaving it out has the schema's
  default), one it leaves out matches any value;
* commutative ops (Add, Mul, Max, Min, Sum, Mean, And, Or, Xor, Equal) match their inputs in any
  order (every order up to four inputs, else in order);
* variadic ops (Concat, Sum, Max, ...): a pattern node matches only nodes with as many inputs
  (after trailing omitted ones): write one pattern per arity;
* a pattern graph input matches any tensor, the same one everywhere it is used (two pattern
  inputs may match the same tensor);
* a pattern initializer or Constant output matches a constant (an initializer or a Constant
  node's output) of equal value (dtype, shape, values; NaN equals NaN); named in
  ``any_constant``, any constant of the same dtype and rank (its *shape class*);
* a pattern with several graph outputs matches when all of them are found: the output nodes are
  the anchors, the first found walking backwards from the first, the others among the readers of
  tensors already bound (the first reader that matches wins);
* a match whose inner tensors (computed by a matched node and not a pattern output) are read by a
  node outside it, or are graph outputs, is not a match; nor is one whose inputs are computed
  from its own outputs;
* matches never overlap: anchors are tried in node order (topological) and the first match wins;
* the element types and ranks P's inputs and outputs declare limit what they match (a filter on
  each candidate before it is accepted: :mod:`onnxsurgeon.pattern.declared`); a candidate that
  does not fit is a near miss, and only the first binding of an anchor is tried against it.

Cost: O(nodes) C-level passes to bucket the nodes by op type, plus for each anchor candidate a
walk bounded by the pattern's size (candidates x pattern size); no Python object per node.
Graph constants are compared only when a candidate reaches them.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from operator import attrgetter
from typing import Any, cast

import numpy as np
import onnx
from onnx import AttributeProto

from ..index import (
    GraphIndex,
)
from . import declared as _declared
from .intmatch import ASK, NO, ONLY, IntMatcher, Sweep, Unsure, int_match, plan_ok, swept_match
from .load import _DEFAULT, Pattern
from .results import Match, Matches
from .scope import _anchors, _arrays, _Scope, _scopes

_OP = attrgetter("op_type")
_INPUT = attrgetter("input")
_MAX_ORDERS = 4
COMMUTATIVE = frozenset({"Add", "Mul", "Max", "Min", "Sum", "Mean", "And", "Or", "Xor", "Equal"})
"""Default-domain ops whose inputs match in any order."""




class _State:
    """The bindings of one attempt (pattern node -> graph node, and back; pattern tensor ->
    graph tensor), with a trail so that a failed branch is undone in place."""

    __slots__ = ("p2g", "g2p", "t", "trail")

    def __init__(self) -> None:
        self.p2g: dict[int, int] = {}
        self.g2p: dict[int, int] = {}
        self.t: dict[str, str] = {}
        self.trail: list[tuple[dict[Any, Any], Any]] = []

    def bind(self, table: dict[Any, Any], key: Any, value: Any) -> None:
        table[key] = value
        self.trail.append((table, key))

    def undo(self, mark: int) -> None:
        trail = self.trail
        while len(trail) > mark:
            table, key = trail.pop()
            del table[key]


def _attr_value(attr: onnx.AttributeProto) -> Any:
    value = onnx.helper.get_attribute_value(attr)
    if isinstance(value, onnx.TensorProto):
        return value.SerializeToString(deterministic=True)
    if isinstance(value, list):
        return [v.SerializeToString(deterministic=True) if hasattr(v, "SerializeToString")
                else v for v in value]
    if hasattr(value, "SerializeToString"):
        return value.SerializeToString(deterministic=True)
    return value


_WHOLE = {AttributeProto.GRAPH: "graph", AttributeProto.GRAPHS: "graphs",
          AttributeProto.TENSOR: "tensor", AttributeProto.TENSORS: "tensors",
          AttributeProto.SPARSE_TENSOR: "tensor", AttributeProto.SPARSE_TENSORS: "tensors",
          AttributeProto.TYPE_PROTO: "type", AttributeProto.TYPE_PROTOS: "types"}
"""Attribute kinds compared as serialized protos (:func:`_attr_value`), named in a miss."""


def _default_attr(node: onnx.NodeProto, name: str) -> Any:
    try:
        schema = onnx.defs.get_schema(node.op_type, domain=node.domain)
    except onnx.defs.SchemaError:
        return None
    attr = schema.attributes.get(name)
    if attr is None or not attr.default_value.name:
        return None
    return _attr_value(attr.default_value)


def _attrs_equal(gnode: onnx.NodeProto, attrs: list[tuple[onnx.AttributeProto, Any]]) -> bool:
    """Every attribute the pattern node sets (``attrs``: proto, value) is equal on ``gnode``
    (unset there: the schema's default)."""
    have = {a.name: a for a in gnode.attribute}
    return all((_attr_value(have[a.name]) if a.name in have else _default_attr(gnode, a.name))
               == want for a, want in attrs)


def _trimmed(slots: Sequence[str]) -> list[str]:
    out = list(slots)
    while out and not out[-1]:
        out.pop()
    return out


class _Matcher:
    """Matches one pattern against one scope; :meth:`at` tries one anchor candidate."""

    def __init__(self, pattern: Pattern, scope: _Scope, used: set[int]) -> None:
        self.p = pattern
        self.s = scope
        self.used = used
        self.reason: str | None = None
        self.inputs = set(pattern.inputs)
        edges = scope.index.known_int_graph() if scope.index is not None else None
        self.single: list[str] | None = edges.ops if edges is not None else None
        """Per node, its op when it is in the default domain with one output, else ""."""
        self.info: dict[int, tuple[str, tuple[str, ...], list[tuple[onnx.AttributeProto, Any]],
                                   list[str], list[str], list[tuple[int, ...]]]] = {}
        for pn in pattern.nodes:
            node = pattern.node(pn)
            pins = _trimmed(node.input)
            n = len(pins)
            orders = [tuple(range(n))]
            if node.op_type in COMMUTATIVE and node.domain in _DEFAULT and 1 < n <= _MAX_ORDERS:
                orders = list(itertools.permutations(range(n)))
            domains = _DEFAULT if node.domain in _DEFAULT else (node.domain,)
            self.info[pn] = (node.op_type, domains,
                             [(a, _attr_value(a)) for a in node.attribute], pins,
                             list(node.output), orders)

    @property
    def ops(self) -> list[str]:
        """Every node's op type (read from the protos when first asked)."""
        return self.s.ops

    def fail(self, why: str) -> None:
        if self.reason is None:
            self.reason = why

    def _node(self, pn: int, gn: int, st: _State) -> bool:
        """Bind pattern node ``pn`` to graph node ``gn`` and, backwards, what it reads; on
        failure every binding made here is undone."""
        s = self.s
        if pn in st.p2g:
            if st.p2g[pn] != gn:
                self.fail(f"pattern node {self.info[pn][0]} would be two nodes "
                          f"('{s.label(st.p2g[pn])}' and '{s.label(gn)}')")
                return False
            return True
        op, domains, attrs, pins, pouts, orders = self.info[pn]
        if gn in st.g2p or gn in self.used:
            self.fail(f"node '{s.label(gn)}' is in another match" if gn in self.used
                      else f"node '{s.label(gn)}' would match two pattern nodes")
            return False
        if self.ops[gn] != op:
            self.fail(f"'{s.label(gn)}' is {self.ops[gn]}; the pattern wants {op}")
            return False
        gnode = s.nodes[gn]
        single = self.single
        if not (single is not None and single[gn] and domains is _DEFAULT) and (
                gnode.domain or "") not in domains:
            self.fail(f"'{s.label(gn)}' is {op} of domain '{gnode.domain}'; the pattern wants "
                      f"domain '{domains[0]}'")
            return False
        if attrs:
            have = {a.name: a for a in gnode.attribute}
            for attr, want in attrs:
                got = _attr_value(have[attr.name]) if attr.name in have else _default_attr(
                    gnode, attr.name)
                if got != want:
                    if attr.type in _WHOLE:  # serialized bytes: say what differs, not the bytes
                        self.fail(f"{op} '{s.label(gn)}' attribute {attr.name} "
                                  f"{'is unset' if got is None else 'differs'}; the pattern's "
                                  f"{_WHOLE[attr.type]} must be equal, byte for byte")
                    else:
                        self.fail(f"{op} '{s.label(gn)}' attribute {attr.name} is "
                                  f"{'unset' if got is None else repr(got)[:40]}; the pattern "
                                  f"wants {repr(want)[:40]}")
                    return False
        gins = list(gnode.input)
        if gins and not gins[-1]:
            gins = _trimmed(gins)
        if len(pins) != len(gins):
            self.fail(f"{op} '{s.label(gn)}' has {len(gins)} inputs; the pattern wants "
                      f"{len(pins)}")
            return False
        gouts = gnode.output
        for k, out in enumerate(pouts):
            if out and (k >= len(gouts) or not gouts[k]):
                self.fail(f"{op} '{s.label(gn)}' has no output {k}")
                return False
        trail, t = st.trail, st.t
        mark = len(trail)
        st.p2g[pn] = gn
        st.g2p[gn] = pn
        trail.append((st.p2g, pn))
        trail.append((st.g2p, gn))
        for k, out in enumerate(pouts):
            if out:
                t[out] = gouts[k]
                trail.append((t, out))
        inner = len(st.trail)
        for order in orders:
            ok = True
            for j, pin in enumerate(pins):
                if not self._tensor(pin, gins[order[j]], st, op, order[j]):
                    ok = False
                    break
            if ok:
                return True
            st.undo(inner)
        st.undo(mark)
        return False

    def _tensor(self, pin: str, gin: str, st: _State, op: str, slot: int) -> bool:
        p, s = self.p, self.s
        if not pin or not gin:
            if pin != gin:
                self.fail(f"{op} input {slot} is {'omitted' if not gin else repr(gin)}; the "
                          f"pattern {'omits it' if not pin else 'wants a tensor'}")
                return False
            return True
        bound = st.t.get(pin)
        if bound is not None:
            if bound != gin:
                self.fail(f"{op} input {slot} is '{gin}'; the pattern wants '{bound}' there too")
                return False
            return True
        if pin in self.inputs:
            st.bind(st.t, pin, gin)
            return True
        if pin in p.constants:
            value = s.constant(gin)
            if value is None:
                what = ("a graph input" if gin in (s.index.inputs if s.index else ())
                        else "computed by a node" if gin in s.producer else "not a constant")
                self.fail(f"{op} input {slot} '{gin}' is {what}; the pattern wants a constant")
                return False
            want = p.constants[pin]
            if pin in p.any_constant:
                ok = value.dtype == want.dtype and value.ndim == want.ndim
            else:
                ok = (value.dtype == want.dtype and value.shape == want.shape
                      and bool(np.array_equal(value, want, equal_nan=value.dtype.kind in "fc")))
            if not ok:
                wanted = (f"any {want.dtype} constant of rank {want.ndim}" if pin in p.any_constant
                          else " ".join(np.array2string(want, threshold=4).split())[:40])
                self.fail(f"{op} input {slot} '{gin}' is a constant of another value; the "
                          f"pattern wants {wanted}")  # one line: a matrix's rows joined
                return False
            st.bind(st.t, pin, gin)
            return True
        pq, k = p.producer[pin]
        gq = s.producer.get(gin)
        single = self.single
        if gq is not None and k == 0 and single is not None and single[gq]:
            return self._node(pq, gq, st)  # one output (the int graph says): gin is output 0
        outs = s.nodes[gq].output if gq is not None else ()
        if gq is None or k >= len(outs) or outs[k] != gin:
            what = "a graph input" if gq is None else "another output of its node"
            self.fail(f"{op} input {slot} '{gin}' is {what}; the pattern wants the output of a "
                      f"{self.info[pq][0]}")
            return False
        return self._node(pq, gq, st)

    def at(self, anchor_pn: int, gn: int) -> _State | None:
        """The bindings when the pattern matches with ``anchor_pn`` at graph node ``gn``."""
        self.reason = None
        st = _State()
        if not self._node(anchor_pn, gn, st) or not self._rest(st):
            return None
        return st if self._valid(st) else None

    def _rest(self, st: _State) -> bool:
        """The pattern nodes not reached backwards from the first anchor (other outputs),
        found among the readers of tensors already bound (the first that matches wins)."""
        p = self.p
        while len(st.p2g) < len(p.nodes):
            found = False
            for pn in p.nodes:
                if pn in st.p2g:
                    continue
                node = p.node(pn)
                bound = next((t for t in node.input if t in st.t), None)
                if bound is None:
                    continue
                for gn in self.s.readers(st.t[bound]):
                    if gn in st.g2p or gn in self.used or self.s.ops[gn] != node.op_type:
                        continue
                    if self._node(pn, gn, st):
                        found = True
                        break
                if found:
                    break
            if not found:
                self.fail("the pattern's other outputs are not found beside it")
                return False
        return True

    def _valid(self, st: _State) -> bool:
        p, s = self.p, self.s
        inside = set(st.g2p)
        outs = {st.t[o] for o in p.outputs}
        reads = [list(s.nodes[i].input) for i in inside]
        for gn in sorted(inside):
            for o in s.nodes[gn].output:
                if not o or o in outs:
                    continue
                if o in s.outputs:
                    self.fail(f"'{o}' is a graph output; the pattern keeps it inside")
                    return False
                if s.read_count(o) > sum(r.count(o) for r in reads):
                    self.fail(f"'{o}' is also read by node '{s.outside_reader(o, inside)}' "
                              "outside the match")
                    return False
        first = min(inside)
        for pin in p.inputs:
            g = st.t.get(pin)
            if g is None:
                continue
            j = s.producer.get(g)
            if j is not None and j in inside:
                self.fail(f"input '{g}' is computed inside the match")
                return False
            if j is not None and j > first and len(p.outputs) > 1 and self._depends(j, inside,
                                                                                   first):
                self.fail(f"input '{g}' is computed from the match's own outputs")
                return False
        return True

    def _depends(self, j: int, inside: set[int], first: int) -> bool:
        """Node ``j`` reads, through nodes after ``first``, an output of the match."""
        s = self.s
        todo, seen = [j], {j}
        while todo:
            for name in s.nodes[todo.pop()].input:
                q = s.producer.get(name)
                if q is None or q <= first or q in seen:
                    if q in inside:
                        return True
                    continue
                if q in inside:
                    return True
                seen.add(q)
                todo.append(q)
        return False


def _int_matcher(matcher: _Matcher, scope: _Scope) -> IntMatcher | None:
    """The int-graph matcher of a scope that has an int dataflow graph (the main graph)."""
    edges = scope.index.int_graph() if scope.index is not None else None
    if edges is None:
        return None
    producer = scope.producer
    out_nodes = {producer[name] for name in scope.outputs if name in producer}
    attrs = {pn: info[2] for pn, info in matcher.info.items() if info[2]}
    return IntMatcher(matcher.p, edges, scope.nodes, scope.constant, out_nodes, COMMUTATIVE,
                      _attrs_equal, attrs)


def find_matches(index: GraphIndex, pattern: Pattern, *, explain: bool = False,
                 bodies: bool = True, types: _declared.TypeLookup | None = None) -> Matches:
    """Every non-overlapping match of ``pattern`` in the indexed model (see the module
    docstring for the rules). ``explain``: also one line per near miss, with the first reason.
    ``bodies``: look inside If/Loop/Scan bodies too. ``types``: the site tensors' types the
    pattern's declared ones are compared with (default: what each graph declares,
    :func:`~onnxsurgeon.pattern.declared.declared_lookup`). A query: nothing changes.

    O(nodes) to bucket the anchor op type per graph, plus candidates x pattern size.
    """
    p = pattern
    anchor = p.producer[p.outputs[0]][0]
    op = p.node(anchor).op_type
    matches: list[Match] = []
    misses: list[str] = []
    tried = 0
    graphs: dict[str, onnx.GraphProto] = {}
    fits = not explain and plan_ok(p)
    declared = _declared.declared_types(p)
    lookup = _declared.declared_lookup(graphs, index)
    by_id = types.by_id if isinstance(types, _declared.IdTypeLookup) else None
    if types is not None:
        lookup = _declared.chained(types, lookup)
    for scope in (_scopes(index) if bodies else [_Scope(index.graph, "", 0, index)]):
        graphs[scope.path] = scope.graph
        used: set[int] = set()
        matcher = _Matcher(p, scope, used)
        where = f"{scope.path}: " if scope.path else ""
        fast = _int_matcher(matcher, scope) if fits else None
        anchors = _anchors(scope, op)
        typed = _declared.IntFilter(fast, scope.path, declared, lookup,
                                    None if scope.path else by_id) if (
            fast is not None and declared) else None
        sweep = Sweep(fast, _arrays(scope)) if (
            fast is not None and anchors and Sweep.fits(fast)) else None
        swept = sweep.run(anchors) if sweep is not None else []
        made = swept_match(sweep, scope.path, scope.producer, used) if (
            sweep is not None) else None
        fits_at = typed.swept(sweep) if typed is not None and sweep is not None else None
        later: list[int] = []  # swept matches, built at once after the loop: their positions
        taken: list[int] = []  # and anchors
        for k, gn in enumerate(anchors):
            tried += 1
            if gn in used:
                if explain:
                    misses.append(f"{where}{scope.label(gn)}: node '{scope.label(gn)}' is in "
                                  "another match")
                continue
            if sweep is not None and fast is not None:  # the arrays decided, unless ASK
                said = swept[k]
                if said == NO:
                    continue
                if said != ASK:
                    row = sweep.rows[k]
                    if used.isdisjoint(row):
                        if fits_at is None or fits_at(k):
                            if made is None:
                                matches.append(int_match(fast, scope.path, sweep.bound(k),
                                                         used))
                                continue
                            used.update(row)
                            later.append(len(matches))
                            taken.append(k)
                            matches.append(cast(Match, None))  # filled after the loop
                        continue
                    if said == ONLY:  # the one binding that fits takes a taken node
                        continue
            if fast is not None:
                try:
                    found = fast.at(gn, used)
                except Unsure:  # the names decide this anchor
                    pass
                else:
                    if found is not None and (typed is None or typed.fits(found)):
                        matches.append(int_match(fast, scope.path, found, used))
                    continue
            st = matcher.at(anchor, gn)
            if st is None:
                if explain:
                    misses.append(f"{where}{scope.label(gn)}: {matcher.reason or 'no match'}")
                continue
            clash = declared and _declared.type_clash(
                declared, scope.path, {i: st.t[i] for i in p.inputs if i in st.t},
                {o: st.t[o] for o in p.outputs}, lookup)
            if clash:
                if explain:
                    misses.append(f"{where}{scope.label(gn)}: {clash}")
                continue
            nodes = tuple(sorted(st.g2p))
            used.update(nodes)
            inside = set(nodes)
            dead = []
            for c in p.constants:
                g = st.t.get(c, "")
                j = scope.producer.get(g) if g else None
                if j is None or j in inside or scope.nodes[j].op_type != "Constant":
                    continue
                if g not in scope.outputs and scope.read_count(g) == sum(
                        list(scope.nodes[i].input).count(g) for i in inside) and j not in used:
                    dead.append(j)
                    used.add(j)
            matches.append(Match(
                scope.path, nodes, tuple(scope.label(i) for i in nodes),
                {i: st.t[i] for i in p.inputs if i in st.t},
                {o: st.t[o] for o in p.outputs},
                {c: st.t[c] for c in p.constants if c in st.t}, tuple(sorted(dead))))
        if taken and made is not None:
            for pos, match in zip(later, made(taken), strict=True):
                matches[pos] = match
    return Matches(matches, misses, tried, graphs)
