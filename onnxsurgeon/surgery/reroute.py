"""``reroute``: consumers of one tensor read another instead (graph_editor's ``reroute_ts``)."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass, field, replace
from itertools import compress, count

import onnx

from ..closure import closure
from ..edit import Edit
from ..errors import (
    AmbiguousNameError,
    NotFoundError,
    RewriteError,
    SurgeryError,
    UsageError,
    name_list,
)
from ..index import GraphIndex, Use
from ..io import Model, as_model
from ..record import RerouteRecord, add_rewrite
from ..select import Selector, Site, drop_missing, is_selector
from ..session import indexed
from ..types import TypeOracle
from ._bodies import address_site, body_model, outer_types, put_back
from ._edges import check_types
from ._proto import quick_value_info
from ._shown import Shown

_NOT_SET = 0


@dataclass(frozen=True)
class RerouteResult(Shown):
    """What ``reroute`` did.

    Attributes:
        rerouted: main-graph nodes that now read the target (nodes whose nested bodies read it
            count), in node order.
        rerouted_outputs: graph outputs that were the source and are now the target.
        source: the ONNX name of the tensor whose readers moved (``source`` resolved).
        target: the ONNX name of the tensor they read instead (``target`` resolved).
        prune: whether unused nodes were removed.
        pruned: with ``prune``, labels of the nodes removed, in node order.
        pruned_initializer_names: with ``prune``, the initializers removed.
        graph: "" for the main graph, else the path of the If/Loop/Scan body the reroute
            happened in (``source`` a selector matching a tensor there): ``rerouted`` then
            names nodes of that body and ``rerouted_outputs`` its outputs.
    """

    rerouted: list[str]
    rerouted_outputs: list[str]
    unused_nodes: int = 0
    """Main-graph nodes no graph output depends on after the reroute (0 after ``prune``)."""
    pruned_nodes: int = 0
    pruned_initializers: int = 0
    _: KW_ONLY
    source: str
    target: str
    prune: bool = False
    pruned: list[str] = field(default_factory=list)
    pruned_initializer_names: list[str] = field(default_factory=list)
    graph: str = ""

    def record(self) -> RerouteRecord:
        """The rewrite record of this reroute (the entry the verb adds to the model's log)."""
        return RerouteRecord(
            source=self.source, target=self.target, rerouted=tuple(self.rerouted),
            rerouted_outputs=tuple(self.rerouted_outputs),
            pruned_nodes=tuple(self.pruned) if self.prune else None,
            pruned_initializers=tuple(self.pruned_initializer_names) if self.prune else None,
            graph=self.graph or None)


def _selected_nodes(index: GraphIndex, source: str, uses: list[Use],
                    consumers: Sequence[str]) -> set[int]:
    """Main-graph node indexes named by ``consumers``; each must read ``source``."""
    reading = {u.node for u in uses}
    labels = [index.node_label(i) for i in sorted(reading)]
    chosen: set[int] = set()
    for name in consumers:
        if is_selector(name):  # the nodes it matches that read the source
            matched = Selector(index).find_nodes(name)
            hits = set(matched) & reading
            if not hits:
                raise UsageError(f"selector '{name}' matches {len(matched)} nodes, none of which "
                                 f"reads '{source}'; its consumers are {labels}")
            chosen |= hits
            continue
        i = index.node_names.get(name)
        if i is None:
            by_selector = _nodes_by_selector(index, name, reading)
            if by_selector:
                chosen |= by_selector
                continue
            close = difflib.get_close_matches(name, list(index.node_names), n=3, cutoff=0.5)
            hint = f"did you mean {', '.join(repr(c) for c in close)}? " if close else ""
            raise NotFoundError(
                f"node '{name}' not found in the main graph; {hint}consumers of '{source}': {labels}"
            )
        if i not in reading:
            raise UsageError(
                f"node '{name}' does not read '{source}'; its consumers are {labels}"
            )
        chosen.add(i)
    return chosen


def _nodes_by_selector(index: GraphIndex, name: str, reading: set[int]) -> set[int]:
    """Readers named by a selector instead of a node name: a torch module path (its nodes that
    read the source) or a tensor (its producer, when that reads the source)."""
    selector = Selector(index)
    inside = set(selector._module_nodes().get(name, ())) & reading
    if inside:
        return inside
    try:
        tensor = selector.resolve(name)
    except SurgeryError:
        return set()
    i = index.producer.get(tensor)
    return {i} if i is not None and i in reading else set()


def reroute(
    model: Model | onnx.ModelProto,
    source: str,
    target: str,
    /,
    *,
    consumers: Sequence[str] | None = None,
    prune: bool = False,
) -> RerouteResult:
    """Consumers of ``source`` read ``target`` instead. Mutates model.

    ``source`` may be a selector whose one match is a tensor inside an If/Loop/Scan body: the
    reroute happens in that body (``target`` and ``consumers`` are names it sees; its outputs
    play the graph outputs' part), recorded with the body's path.

    With ``consumers`` only those main-graph nodes (node names) are rerouted, including reads
    inside their nested bodies; without it every reader is: main-graph nodes, nodes in nested
    If/Loop/Scan bodies, and graph outputs named ``source`` (renamed to ``target``). When the
    target is produced after a rerouted consumer, the target's producers that come too late are
    moved (stably, nothing else) to just before the first rerouted consumer. Nodes no graph
    output depends on any more are counted (``unused_nodes``) and kept, or, with ``prune``,
    removed together with the initializers only they read (graph inputs always stay).

    Before:  a -> {f, g};   b -> h
    After (consumers=["f"]):  a -> g;   b -> {h, f}

    O(nodes + edges); the target's backward closure is walked only when it is produced after a
    rerouted consumer.

    Raises:
        NotFoundError / AmbiguousNameError: a tensor or node name does not resolve.
        UsageError: source equals target, nothing reads source, or a named node does not read it.
        RewriteError: a cycle (the target depends on a rerouted consumer; the nodes are named),
            different dtypes, or incompatible known shapes.
    """
    if consumers is not None:
        consumers = name_list(consumers, "reroute(consumers=...)")
    m = as_model(model)
    index = indexed(m)  # load's int dataflow graph rides along when the model is unchanged
    site = _body_site(Selector(index), source)
    if site is None:
        result = _reroute(m, index, source, target, consumers, prune)
    else:  # inside an If/Loop/Scan body: the body as a model of its own (surgery/_bodies.py)
        body = body_model(m.proto, site.graph, outer_types(m.proto))
        inner = as_model(body.model)
        try:
            result = _reroute(inner, indexed(inner), site.tensor or "", target, consumers, prune)
        except NotFoundError as exc:
            raise NotFoundError(f"inside the body '{site.graph}' (where '{source}' is): "
                                f"{exc}") from None
        e = Edit(indexed(m), follow=False)  # bodies are not followed: the next verb indexes
        put_back(e, body)
        e.hand_on(m)
        result = replace(result, graph=site.graph)
    add_rewrite(m.proto, result.record())
    return result


def _body_site(selector: Selector, source: str) -> Site | None:
    """The site of a selector ``source`` when its one match is inside a body; None for a
    main-graph tensor (or a plain name).

    Raises:
        AmbiguousNameError: the selector matches several tensors.
    """
    if not (is_selector(source) and selector._selects(source)):
        return address_site(selector, source)  # '<body path>/<name>', as records give it
    sites = selector.find(source)
    if not any(s.graph for s in sites):
        return None
    if len(sites) > 1:
        shown = ", ".join(f"'{s.tensor}'" + (f" (in '{s.graph}')" if s.graph else "")
                          for s in sites[:6])
        raise AmbiguousNameError(f"selector '{source}' matches {len(sites)} tensors ({shown}) "
                                 "where one tensor is wanted; narrow the selector to one of them")
    return sites[0]


def _reroute(m: Model, index: GraphIndex, source: str, target: str,
             consumers: list[str] | None, prune: bool) -> RerouteResult:
    """Reroute in the main graph of ``m`` (checked, then one edit); no record."""
    proto = m.proto
    selector = Selector(index)
    src = selector.resolve(source)
    tgt = selector.resolve(target)
    if src == tgt:
        raise UsageError(f"source and target are both '{src}'; name two different tensors")
    uses = index.uses_of(src)
    if consumers is None:
        chosen = {u.node for u in uses}
        out_positions = [k for k, vi in enumerate(proto.graph.output) if vi.name == src]
    else:
        if not consumers:
            raise UsageError("consumers is empty; name at least one node, or pass None for all")
        chosen = _selected_nodes(index, src, uses, consumers)
        out_positions = []
    if not chosen and not out_positions:
        raise UsageError(f"nothing reads '{src}'; there is nothing to reroute")
    oracle = TypeOracle(index, quick=lambda name: quick_value_info(index, name))
    check_types(f"cannot reroute '{src}' to '{tgt}'", src, tgt, oracle.elem_type(src),
                oracle.elem_type(tgt), oracle.shape(src), oracle.shape(tgt))
    # Nodes are topologically sorted (ONNX requires it): when the target's producer comes before
    # every rerouted consumer, none of them can be among its ancestors and nothing has to move.
    first = min(chosen) if chosen else None
    late = first is not None and index.producer.get(tgt, -1) >= first
    needed = closure(index, [tgt]).nodes if late else ()
    cyclic = sorted(set(needed) & chosen)
    if cyclic:
        raise RewriteError(
            f"rerouting '{src}' to '{tgt}' would make a cycle: '{tgt}' is computed from "
            f"{[index.node_label(i) for i in cyclic]}, which would then read it; reroute other "
            "consumers or pick another target"
        )
    if out_positions and tgt in index.outputs:
        raise RewriteError(
            f"graph output '{src}' would become '{tgt}', which is already a graph output; "
            "reroute named consumers only (consumers=[...]) or remove one output first"
        )
    selected = [u for u in uses if u.node in chosen]
    movers = [i for i in needed if first is not None and i > first]
    tgt_vi = oracle.value_info(tgt) if out_positions else None
    # counted now on ints when the nodes keep their places (no prune, nothing moves)
    unused_now = None if prune or movers else _dead_by_edges(index, selected, tgt, out_positions)

    # ------------------------------------------------------------------ mutate (all checked)
    e = Edit(index)
    rerouted = e.rewire(selected, tgt)
    rerouted_outputs: list[str] = []
    for k in out_positions:
        typed = tgt_vi is not None and tgt_vi.type.WhichOneof("value") is not None
        e.set_output(k, retype=tgt_vi.type if typed and tgt_vi is not None else None, name=tgt)
        rerouted_outputs.append(src)
    if movers and first is not None:
        e.move_nodes(movers, first)  # nodes moved: the next verb indexes the model again
    pruned_inits: list[str] = []
    if unused_now is not None:
        unused = unused_now
    else:
        unused, pruned_inits = dead_nodes(e, prune=prune)
    e.hand_on(m)
    if prune:
        result = RerouteResult(rerouted, rerouted_outputs, 0, len(unused), len(pruned_inits),
                               source=src, target=tgt, prune=True, pruned=list(unused),
                               pruned_initializer_names=list(pruned_inits))
    else:
        result = RerouteResult(rerouted, rerouted_outputs, len(unused), source=src, target=tgt)
    return result


def _dead_by_edges(index: GraphIndex, selected: list[Use], tgt: str,
                   out_positions: list[int]) -> list[str] | None:
    """:func:`dead_nodes` (without prune) of the model as the reroute will leave it, counted
    before it changes on the int dataflow graph load handed over: the rerouted slots read
    ``tgt``'s id, the rerouted graph outputs are ``tgt``, and one walk from the outputs over
    ints marks the live nodes. None when the index has no such graph. O(nodes + edges), no
    protobuf read but the outputs' names and the dead nodes' labels."""
    edges = index.int_graph()
    if edges is None:
        return None
    tid = index.edge_id(tgt)
    if tid is None:
        return None
    preds, starts = list(edges.preds), edges.starts
    for use in selected:
        if use.inner is not None:
            return None
        preds[starts[use.node] + use.slot] = tid
    outs = [vi.name for vi in index.graph.output]
    for k in out_positions:
        outs[k] = tgt
    # one sweep from the last node back: ids are in topological order (a rerouted slot reads
    # the target, produced before it, or nothing moves and this is not called), so a node's
    # readers are all marked before it is reached
    live = bytearray(len(starts) - 1)
    for j in map(index.producer.get, outs):
        if j is not None:
            live[j] = 1
    for j in range(len(live) - 1, -1, -1):
        if live[j]:
            for p in preds[starts[j]:starts[j + 1]]:
                if p >= 0:
                    live[p] = 1
    return [index.node_label(i) for i in compress(count(), map(_NOT_SET.__eq__, live))]


def dead_nodes(e: Edit, *, prune: bool) -> tuple[list[str], list[str]]:
    """Labels of the main-graph nodes no graph output depends on in the model ``e`` edits, and
    (with ``prune``) the initializers only they read. With ``prune`` both are removed through
    ``e`` (graph inputs stay; IR < 4 initializers listed as inputs stay too). Mutates the model
    only with ``prune``. O(nodes + edges).
    """
    proto = e.model
    index = GraphIndex(proto)
    live = closure(index, [vi.name for vi in proto.graph.output])
    live_nodes = set(live.nodes)
    dead = [i for i in range(len(proto.graph.node)) if i not in live_nodes]
    labels = [index.node_label(i) for i in dead]
    if not prune or not dead:
        return labels, []
    g = proto.graph
    read: set[str] = set(live.initializers) | set(index.inputs) | set(index.outputs)
    drop = [t.name for t in g.initializer if t.name not in read]
    kept_sparse = [st for st in g.sparse_initializer if st.values.name in read]
    drop += [st.values.name for st in g.sparse_initializer if st.values.name not in read]
    kept_sparse_changed = len(kept_sparse) != len(g.sparse_initializer)
    gone = {o for i in dead for o in index.graph.node[i].output if o} | set(drop)
    e.keep_nodes(sorted(live_nodes))
    e.keep_initializers([k for k, t in enumerate(g.initializer) if t.name in read])
    if kept_sparse_changed:
        e.set_sparse_initializers(kept_sparse)
    e.drop_value_info(gone)
    drop_missing(proto, lambda name: name not in gone)
    return labels, drop
