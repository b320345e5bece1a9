"""What changed between two models, and the part of it worth drawing. A pure query.

Protobuf-native (:mod:`.sides`): each model's node list is serialized once, C-level; the common
prefix and suffix of the two lists (equal bytes) are unchanged, and only the nodes between them
are matched, by name (unnamed nodes by op type and first output). A node present on one side
only is *added* or *removed*; one present on both sides whose protos differ only in their inputs
is *rerouted*; one whose op, attributes or outputs differ is drawn twice, the old one removed and
the new one added.

The drawing then depends on the size of the change, not of the model: the changed nodes (at
most :data:`MAX_CHANGED`; beyond that the ones on the border of the change) plus ``context``
hops of neighbours (at most :data:`MAX_NODES` in all), found breadth-first by looking up the
producers and readers of the frontier's tensors (one C-level scan of the node bytes each, cached).
Everything else is counted, and each drawn node with undrawn neighbours gets a collapsed stub per
tensor. Cost: one serialization and comparison of each node list, then O(drawn tensors) scans;
a change too large to draw whole adds one pass over every node's inputs to find its border.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from itertools import compress, count
from operator import ne

import onnx

from ..record import rewrites
from ..select import name_map, node_module
from .describe import attribute_texts, tensor_types
from .sides import Side

MAX_CHANGED = 150
"""Most changed nodes drawn; a larger change shows the ones bordering unchanged parts."""
MAX_NODES = 400
"""Most nodes drawn in all (changed plus context)."""


class Change(str, Enum):
    """How a node or edge differs between the two models (the ``data-change`` value)."""

    ADDED = "added"
    REMOVED = "removed"
    REROUTED = "rerouted"
    UNCHANGED = "unchanged"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class DiffNode:
    """A drawn node: ``uid`` is unique in the drawing, ``name`` is the ONNX node name (the same
    for both halves of a node whose op or attributes changed)."""

    uid: str
    name: str
    op_type: str
    change: Change
    framework: str = ""
    attributes: tuple[tuple[str, str], ...] = ()
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    focus: bool = False


@dataclass(frozen=True, slots=True)
class Terminal:
    """A graph input or output (``kind`` 'input'/'output') or a stub standing for ``count``
    undrawn neighbours (``kind`` 'collapsed-in'/'collapsed-out')."""

    uid: str
    kind: str
    tensor: str
    change: Change
    count: int = 0


@dataclass(frozen=True, slots=True)
class DiffEdge:
    """A drawn edge carrying ``tensor`` from ``source`` to ``target`` (uids)."""

    tensor: str
    source: str
    target: str
    change: Change
    dtype: str = ""
    shape: str = ""
    stub: bool = False


@dataclass(frozen=True)
class GraphDiff:
    """The drawing's content.

    Attributes:
        nodes, terminals, edges: what is drawn, in a deterministic order.
        totals: per change class, the number of nodes in the whole diff.
        drawn: per change class, the number of nodes drawn.
        rewrites: the rewrite records ``after`` has beyond those of ``before``.
        context: hops of context drawn around the changes.
        focus: the tensor an ``inspect --around`` view is centred on ('' for a diff).
    """

    nodes: tuple[DiffNode, ...]
    terminals: tuple[Terminal, ...]
    edges: tuple[DiffEdge, ...]
    totals: dict[str, int]
    drawn: dict[str, int]
    rewrites: tuple[dict[str, object], ...] = ()
    context: int = 2
    focus: str = ""
    node_count: tuple[int, int] = (0, 0)
    notes: tuple[str, ...] = field(default=())

    def changes(self) -> dict[str, set[str]]:
        """Change class -> names of the drawn nodes in it (what a test compares to a record)."""
        out: dict[str, set[str]] = {c.value: set() for c in Change}
        for n in self.nodes:
            out[n.change.value].add(n.name)
        return out


def _same_but_inputs(a: onnx.NodeProto, b: onnx.NodeProto) -> bool:
    return (a.op_type == b.op_type and a.domain == b.domain and list(a.output) == list(b.output)
            and list(a.attribute) == list(b.attribute))


def _keyed(side: Side, span: range) -> dict[str, int]:
    """Key -> position for the nodes in ``span`` (a repeated key gets '#<position>')."""
    out: dict[str, int] = {}
    for j in span:
        k = side.key(j)
        out[f"{k}#{j}" if k in out else k] = j
    return out


# ------------------------------------------------------------------------------ the builder
class _Builder:
    """Classifies nodes, picks what to draw and lists its edges. Ids: ('a', j) a node of
    ``after`` (added, rerouted or unchanged), ('b', i) a removed node of ``before``,
    ('in', t) / ('out', t) graph inputs and outputs.

    The node lists' common prefix and suffix (equal bytes, C-level) are unchanged and aligned
    by position; only the nodes between them are matched by key, so classifying costs the
    span of the change, beyond one serialization of each node list."""

    def __init__(self, before: onnx.ModelProto, after: onnx.ModelProto) -> None:
        self.B = Side(before)
        self.A = self.B if after is before else Side(after)
        A, B = self.A, self.B
        self.cls_a: dict[int, str] = {}
        """Class of each changed node of ``after`` (absent: unchanged)."""
        self.cls_b: dict[int, str] = {}
        """Class of each changed node of ``before`` (absent: unchanged)."""
        self.head = self.tail = 0
        self.pos_a: dict[str, int] = {}
        self.pos_b: dict[str, int] = {}
        self.key_a: dict[int, str] = {}
        self.key_b: dict[int, str] = {}
        if A is B:
            self.head = A.count
            return
        short = min(A.count, B.count)
        self.head = head = next(compress(count(), map(ne, A.blobs, B.blobs)), short)
        if head < short:
            tail = next(compress(count(), map(ne, reversed(A.blobs), reversed(B.blobs))), short)
            self.tail = min(tail, short - head)
        self.pos_a = _keyed(A, range(head, A.count - self.tail))
        self.pos_b = _keyed(B, range(head, B.count - self.tail))
        self.key_a = {j: k for k, j in self.pos_a.items()}
        self.key_b = {i: k for k, i in self.pos_b.items()}
        for key, j in self.pos_a.items():
            i = self.pos_b.get(key)
            if i is None:
                self.cls_a[j] = "added"
            elif A.blobs[j] != B.blobs[i]:
                if _same_but_inputs(A.nodes[j], B.nodes[i]):
                    self.cls_a[j] = self.cls_b[i] = "rerouted"
                else:
                    self.cls_a[j], self.cls_b[i] = "added", "removed"
        for key, i in self.pos_b.items():
            if key not in self.pos_a:
                self.cls_b[i] = "removed"

    # ------------------------------------------------------------------ identities
    def canon_b(self, i: int) -> tuple[str, object]:
        """The drawn id of ``before`` node ``i``: its ``after`` twin unless it was removed."""
        if self.cls_b.get(i) == "removed":
            return ("b", i)
        if i < self.head:
            return ("a", i)
        if i >= self.B.count - self.tail:
            return ("a", i - self.B.count + self.A.count)
        return ("a", self.pos_a[self.key_b[i]])

    def twin_b(self, j: int) -> int | None:
        """The ``before`` node of ``after`` node ``j`` when it is the same node (not removed)."""
        if self.cls_a.get(j) == "added":
            return None
        if j < self.head:
            return j
        if j >= self.A.count - self.tail:
            return j - self.A.count + self.B.count
        return self.pos_b.get(self.key_a[j])

    def io_change(self, kind: str, t: str) -> str:
        a = t in (self.A.inputs if kind == "in" else set(self.A.outputs))
        b = t in (self.B.inputs if kind == "in" else set(self.B.outputs))
        return "unchanged" if a and b else ("added" if a else "removed")

    def seeds(self) -> list[tuple[str, object]]:
        A, B = self.A, self.B
        ids: list[tuple[str, object]] = [("a", j) for j in sorted(self.cls_a)]
        ids += [("b", i) for i in sorted(self.cls_b) if self.cls_b[i] == "removed"]
        outs_a, outs_b = set(A.outputs), set(B.outputs)
        ids += [("in", t) for t in sorted(A.inputs ^ B.inputs)]
        ids += [("out", t) for t in A.outputs if t not in outs_b]
        ids += [("out", t) for t in B.outputs if t not in outs_a]
        return ids

    # ------------------------------------------------------------------ neighbourhood
    def neighbours(self, frontier: Iterable[tuple[str, object]]) -> list[tuple[str, object]]:
        """Every id one edge away from ``frontier``: a cached producer or reader lookup (one scan
        of the node bytes) per tensor of the frontier, per side."""
        A, B = self.A, self.B
        found: list[tuple[str, object]] = []
        want_a: set[str] = set()
        want_b: set[str] = set()
        a_in: set[str] = set()
        b_in: set[str] = set()
        outs_a, outs_b = set(A.outputs), set(B.outputs)
        for kind, ref in frontier:
            if kind == "in":
                (a_in if ref in A.inputs else b_in).add(str(ref))
                if ref in A.inputs and ref in B.inputs:
                    b_in.add(str(ref))
                continue
            if kind == "out":
                t = str(ref)
                pa = A.producer(t) if t in outs_a else None
                pb = B.producer(t) if t in outs_b else None
                if pa is not None:
                    found.append(("a", pa))
                if pb is not None:
                    found.append(self.canon_b(pb))
                continue
            sides: list[tuple[Side, int]] = []
            if kind == "a":
                sides.append((A, int(ref)))  # type: ignore[call-overload]
                twin = self.twin_b(int(ref))  # type: ignore[call-overload]
                if twin is not None and A is not B:
                    sides.append((B, twin))
            else:
                sides.append((B, int(ref)))  # type: ignore[call-overload]
            for side, k in sides:
                node = side.nodes[k]
                for t in node.input:
                    p = side.producer(t)
                    if p is not None:
                        found.append(("a", p) if side is A else self.canon_b(p))
                    elif t in side.inputs:
                        found.append(("in", t))
                for t in node.output:
                    if t:
                        (want_a if side is A else want_b).add(t)
                        if t in (outs_a if side is A else outs_b):
                            found.append(("out", t))
        for j_list in A.consumers(want_a | a_in).values():
            found.extend(("a", j) for j in j_list)
        if A is not B:
            for i_list in B.consumers(want_b | b_in).values():
                found.extend(self.canon_b(i) for i in i_list)
        return found

    def border(self, seeds: list[tuple[str, object]]) -> list[tuple[str, object]]:
        """The seeds with a neighbour of another class or reading a graph input (for changes too
        large to draw whole). One pass over the flattened reads of each side."""
        A, B = self.A, self.B
        keep: set[tuple[str, object]] = set()
        for side, cls in ((A, self.cls_a), (B, self.cls_b)) if A is not B else ((A, self.cls_a),):
            producer, inputs = side.producers, side.inputs
            reads, readers = side.reads
            for t, j in zip(reads, readers, strict=True):
                p = producer.get(t)
                if p is not None and cls.get(p, "unchanged") != cls.get(j, "unchanged"):
                    for k in (j, p):
                        keep.add(("a", k) if side is A else self.canon_b(k))
                elif p is None and t in inputs and j in cls:
                    keep.add(("a", j) if side is A else self.canon_b(j))
        chosen = [s for s in seeds if s in keep or s[0] in ("in", "out")]
        return chosen or seeds

    # ------------------------------------------------------------------ node records
    def node_of(self, ident: tuple[str, object]) -> tuple[onnx.NodeProto, str, str]:
        """(proto, key, change) of a node id."""
        if ident[0] == "a":
            j = int(ident[1])  # type: ignore[call-overload]
            return self.A.nodes[j], self.key_a.get(j) or self.A.key(j), self.cls_a.get(j, "unchanged")
        i = int(ident[1])  # type: ignore[call-overload]
        return self.B.nodes[i], self.key_b.get(i) or self.B.key(i), "removed"


def _uid(ident: tuple[str, object]) -> str:
    return f"{ident[0]}:{ident[1]}"


def _select(builder: _Builder, seeds: list[tuple[str, object]], context: int,
            ) -> tuple[list[tuple[str, object]], list[str]]:
    notes: list[str] = []
    nodes_in = [s for s in seeds if s[0] in ("a", "b")]
    if len(nodes_in) > MAX_CHANGED:
        seeds = builder.border(seeds)
        border_nodes = [s for s in seeds if s[0] in ("a", "b")]
        if len(border_nodes) > MAX_CHANGED:
            cut = set(border_nodes[MAX_CHANGED:])
            seeds = [s for s in seeds if s not in cut]
        notes.append(f"{len(nodes_in)} changed nodes: the ones on the border of the change are drawn")
    chosen: dict[tuple[str, object], None] = dict.fromkeys(seeds)
    frontier = list(chosen)
    count = sum(1 for s in chosen if s[0] in ("a", "b"))
    for _ in range(context):
        if not frontier or count >= MAX_NODES:
            break
        nxt: list[tuple[str, object]] = []
        for ident in builder.neighbours(frontier):
            if ident in chosen:
                continue
            if ident[0] in ("a", "b"):
                if count >= MAX_NODES:
                    continue
                count += 1
            chosen[ident] = None
            nxt.append(ident)
        frontier = nxt
    if count >= MAX_NODES:
        notes.append(f"drawing limited to {MAX_NODES} nodes")
    # graph outputs made by drawn nodes are drawn too (cheap, and where errors show first)
    outs = {"a": set(builder.A.outputs), "b": set(builder.B.outputs)}
    for ident in list(chosen):
        if ident[0] in ("a", "b"):
            for t in builder.node_of(ident)[0].output:
                if t in outs[ident[0]]:
                    chosen.setdefault(("out", t), None)
    return list(chosen), notes


def _order(ident: tuple[str, object]) -> tuple[int, int, str]:
    rank = {"in": 0, "b": 1, "a": 1, "out": 2}[ident[0]]
    num = ident[1] if isinstance(ident[1], int) else 0
    return (rank, num, str(ident[0]) + str(ident[1]))


def _build(builder: _Builder, seeds: list[tuple[str, object]], context: int, *,
           focus: str = "", rewrite_records: Sequence[dict[str, object]] = ()) -> GraphDiff:
    A, B = builder.A, builder.B
    chosen, notes = _select(builder, seeds, context)
    drawn = set(chosen)
    fw_a = {v: k for k, v in sorted(name_map(A.model).items(), reverse=True)}
    fw_b = fw_a if A is B else {v: k for k, v in sorted(name_map(B.model).items(), reverse=True)}
    nodes: list[DiffNode] = []
    terminals: list[Terminal] = []
    edges: list[tuple[str, str, str, str, bool]] = []  # tensor, src uid, dst uid, change, stub
    hidden_out: dict[tuple[tuple[str, object], str], None] = {}
    for ident in sorted(chosen, key=_order):
        kind = ident[0]
        if kind in ("in", "out"):
            t = str(ident[1])
            terminals.append(Terminal(_uid(ident), "input" if kind == "in" else "output", t,
                                      Change(builder.io_change(kind, t))))
            if kind == "out":
                edges.extend(_output_edges(builder, t, ident, drawn))
            continue
        node, key, change = builder.node_of(ident)
        fw = (fw_a if kind == "a" else fw_b)
        framework = next((fw[o] for o in node.output if o in fw), "") or (node_module(node) or "")
        nodes.append(DiffNode(
            _uid(ident), key, node.op_type, Change(change), framework, attribute_texts(node),
            tuple(node.input), tuple(node.output), bool(focus) and (focus in node.output or focus in node.input)))
        edges.extend(_in_edges(builder, ident, drawn))
        for out in node.output:
            if out:
                hidden_out[(ident, out)] = None
    edges += _collapsed_readers(builder, list(hidden_out), drawn, terminals)
    final_edges = _finish_edges(builder, edges, terminals, sorted(
        (side, j) for side, j in chosen if side in ("a", "b") and isinstance(j, int)))
    totals = {c.value: 0 for c in Change}
    for c in builder.cls_a.values():
        totals[c] += 1
    totals["unchanged"] = A.count - len(builder.cls_a)
    totals["removed"] += sum(1 for c in builder.cls_b.values() if c == "removed")
    drawn_counts = {c.value: 0 for c in Change}
    for dn in nodes:
        drawn_counts[dn.change.value] += 1
    return GraphDiff(tuple(nodes), tuple(terminals), tuple(final_edges), totals, drawn_counts,
                     tuple(rewrite_records), context, focus, (B.count, A.count),
                     tuple(notes))


def _collapsed_readers(builder: _Builder, outs: list[tuple[tuple[str, object], str]],
                       drawn: set[tuple[str, object]], terminals: list[Terminal],
                       ) -> list[tuple[str, str, str, str, bool]]:
    """A stub per drawn output tensor with undrawn readers (a cached reader lookup per tensor);
    appends the stubs to ``terminals`` and returns their edges."""
    A, B = builder.A, builder.B
    on_b = {k for k in outs if k[0][0] == "b" or (
        A is not B and k[0][0] == "a" and builder.twin_b(int(k[0][1])) is not None)}  # type: ignore[call-overload]
    readers_a = A.consumers({t for ident, t in outs if ident[0] == "a"})
    readers_b = B.consumers({t for _, t in on_b}) if A is not B else {}
    edges: list[tuple[str, str, str, str, bool]] = []
    for key in outs:
        ident, t = key
        readers: set[tuple[str, object]] = set()
        if ident[0] == "a":
            readers.update(("a", c) for c in readers_a.get(t, ()))
        if key in on_b:
            readers.update(builder.canon_b(c) for c in readers_b.get(t, ()))
        hidden = len(readers - drawn)
        if hidden:
            stub = f"more-out:{_uid(ident)}:{t}"
            change = "removed" if builder.node_of(ident)[2] == "removed" else "unchanged"
            terminals.append(Terminal(stub, "collapsed-out", t, Change(change), hidden))
            edges.append((t, _uid(ident), stub, change, True))
    return edges


def _finish_edges(builder: _Builder, edges: list[tuple[str, str, str, str, bool]],
                  terminals: list[Terminal], drawn: list[tuple[str, int]]) -> list[DiffEdge]:
    """Typed edges (``drawn``: the drawn nodes' ids, in order, for the types inference gives);
    a graph input whose reader is drawn is drawn too, any other undrawn producer becomes a
    collapsed stub (appended to ``terminals``)."""
    A, B = builder.A, builder.B
    drawn_a = [A.nodes[j] for side, j in drawn if side == "a"]
    drawn_b = [B.nodes[j] for side, j in drawn if side == "b"]
    types = tensor_types([A.model] if A is B else [A.model, B.model], {e[0] for e in edges},
                         drawn=[drawn_a] if A is B else [drawn_a, drawn_b])
    have = {term.uid for term in terminals}
    inputs: list[Terminal] = []
    final: list[DiffEdge] = []
    for t, src, dst, change, stub in edges:
        if stub and src.startswith("in:"):
            stub = False
            if src not in have:
                have.add(src)
                inputs.append(Terminal(src, "input", t, Change(builder.io_change("in", t))))
        if stub and not dst.startswith("more-"):
            src = f"more-in:{dst}:{t}"
            terminals.append(Terminal(src, "collapsed-in", t, Change(change), 1))
        dtype, shape = types.get(t, ("", ""))
        final.append(DiffEdge(t, src, dst, Change(change), dtype, shape, stub))
    terminals[:0] = inputs
    return final


def _in_edges(builder: _Builder, ident: tuple[str, object], drawn: set[tuple[str, object]],
              ) -> list[tuple[str, str, str, str, bool]]:
    """Edges into a drawn node: its inputs (and, for a rerouted node, the inputs it lost)."""
    A, B = builder.A, builder.B
    out: list[tuple[str, str, str, str, bool]] = []
    node, _, change = builder.node_of(ident)
    side = A if ident[0] == "a" else B
    twin = builder.twin_b(int(ident[1])) if ident[0] == "a" and A is not B else None  # type: ignore[call-overload]
    old = list(B.nodes[twin].input) if twin is not None else []
    for slot, t in enumerate(node.input):
        src = _source(builder, side, t)
        if src is None:
            continue
        if change == "removed":
            edge = "removed"
        elif A is B or (slot < len(old) and old[slot] == t and _source(builder, B, t) == src):
            edge = "unchanged"
        else:  # a new edge: into a new node it is added, into an existing one rerouted
            edge = "added" if change == "added" else "rerouted"
        out.append((t, _uid(src), _uid(ident), edge, src not in drawn))
    if twin is not None:
        for slot, t in enumerate(old):
            if slot < len(node.input) and node.input[slot] == t:
                continue
            src = _source(builder, B, t)
            if src is not None:
                out.append((t, _uid(src), _uid(ident), "removed", src not in drawn))
    return out


def _output_edges(builder: _Builder, t: str, ident: tuple[str, object],
                  drawn: set[tuple[str, object]]) -> list[tuple[str, str, str, str, bool]]:
    """Edges into the graph-output terminal of ``t``: one when both models produce it with the
    same node, else the new producer (added or rerouted) and the old one (removed)."""
    A, B = builder.A, builder.B
    pa = A.producer(t) if t in A.outputs else None
    pb = B.producer(t) if t in B.outputs else None
    src_a = ("a", pa) if pa is not None else None
    src_b = builder.canon_b(pb) if pb is not None else None
    if A is B:
        src_b = None
    out: list[tuple[str, str, str, str, bool]] = []
    if src_a is not None:
        if src_b == src_a or A is B:
            change = "unchanged"
        else:
            change = "rerouted" if src_b is not None else "added"
        out.append((t, _uid(src_a), _uid(ident), change, src_a not in drawn))
    if src_b is not None and src_b != src_a:
        out.append((t, _uid(src_b), _uid(ident), "removed", src_b not in drawn))
    return out


def _source(builder: _Builder, side: Side, t: str) -> tuple[str, object] | None:
    """The drawn id producing ``t`` on ``side`` (None for initializers and omitted inputs)."""
    p = side.producer(t)
    if p is not None:
        return ("a", p) if side is builder.A else builder.canon_b(p)
    if t in side.inputs:
        return ("in", t)
    return None


# ---------------------------------------------------------------------------------- public
def diff_models(before: onnx.ModelProto, after: onnx.ModelProto, /, *, context: int = 2,
                include: Iterable[str] = ()) -> GraphDiff:
    """What changed from ``before`` to ``after``: the changed nodes plus ``context`` hops.

    ``include`` names nodes of ``after`` to draw (with their context) although unchanged, such
    as the first node where verification found the models part. One C-level serialization and
    comparison of both node lists, matching by name over the span between their common prefix
    and suffix, then one scan of the node bytes per tensor looked up; the result's size
    depends on the change, not on the models.
    """
    if context < 0:
        raise ValueError("context must be >= 0")
    builder = _Builder(before, after)
    old, new = rewrites(before), rewrites(after)
    fresh = new[len(old):] if new[:len(old)] == old else new
    extra: list[tuple[str, object]] = [
        ("a", j) for j in map(builder.pos_a.get, include) if j is not None]
    extra += [("a", j) for n in include if n not in builder.pos_a
              and (j := builder.A.named(n)) is not None]
    return _build(builder, builder.seeds() + extra, context, rewrite_records=fresh)


def neighbourhood(model: onnx.ModelProto, tensor: str, /, *, context: int = 2) -> GraphDiff:
    """The producer and readers of ``tensor`` plus ``context`` hops, all unchanged.

    ``tensor`` must be an ONNX tensor name of the main graph (resolve user names first).
    """
    builder = _Builder(model, model)
    side = builder.A
    seeds: list[tuple[str, object]] = []
    made = side.producer(tensor)
    if made is not None:
        seeds.append(("a", made))
    if tensor in side.inputs:
        seeds.append(("in", tensor))
    seeds += [("a", j) for j in side.consumers({tensor}).get(tensor, [])]
    if tensor in side.outputs:
        seeds.append(("out", tensor))
    return _build(builder, list(dict.fromkeys(seeds)), context, focus=tensor)
