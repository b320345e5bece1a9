"""Structural validation of a loaded model: the graph must be a DAG in SSA form.

:func:`validate` refuses, with an :class:`InvalidModelError` naming the objects and the fix:
cycles (the nodes on one cycle are named), tensors read but never produced (dangling), two
producers of one name, duplicate graph inputs / outputs / initializers, nested graphs whose names
shadow outer names, nesting deeper than :data:`~onnxsurgeon.index.MAX_NESTING`, and local
functions that call themselves directly or through others. Nodes that are merely out of
topological order are sorted stably (original order kept wherever the dependencies allow) and a
warning is returned.

Every check is O(nodes + edges) over all graphs, iterative (no recursion), and reads only names
(never tensor data): on a 90k-node chain it costs about as much as a protobuf walk over the names.
:func:`onnxsurgeon.io.load` runs it on every model, so every command gets it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from functools import partial
from itertools import accumulate, chain, count, islice, repeat
from operator import attrgetter, is_, itemgetter
from typing import NamedTuple

import numpy as np
import onnx

from . import scan
from .errors import CONTROL_ESCAPES, InvalidModelError
from .index import (
    MAX_NESTING,
    NodeEdges,
    OuterScope,
    body_captures,
    check_depth,
    has_subgraphs,
    node_label,
    subgraphs,
)
from .nodefields import NodePass, edge_ops, node_pass
from .order import reorder_nodes, stable_toposort
from .scan import ValueInfos

__all__ = ["Validation", "validate", "validate_producers"]



def validate(model: onnx.ModelProto, /, *, sort: bool = True) -> list[str]:
    """Check that ``model`` is a well-formed DAG in SSA form; return warnings.

    Mutates model only when ``sort`` is true and some graph lists its nodes out of topological
    order: those nodes are reordered stably (a warning says which graph and how many moved).

    Args:
        model: the model proto (a bare ``ModelProto``; pass ``Model.proto``).
        sort: repair out-of-order nodes; when false, out-of-order nodes raise instead.

    Returns:
        Human-readable warnings (one line each) for the repairs made.

    Raises:
        InvalidModelError: cycle, dangling tensor, duplicate definition, shadowing, nesting too
            deep, or recursive local functions.
    """
    return validate_producers(model, sort=sort).warnings


@dataclass(frozen=True)
class Validation:
    """What :func:`validate_producers` found besides the verdict, for load to hand on.

    Attributes:
        warnings: one line per repair made (nodes re-sorted), as :func:`validate` returns.
        producers: the main graph's producer map (tensor name -> node index, as
            :attr:`GraphIndex.producer`), or None when nodes were re-sorted (the map would
            describe the old order).
        holders: indexes of the main-graph nodes that have attributes (the only ones that can
            hold tensors or graphs), at their positions after any re-sort.
        edges: the main graph's :class:`~onnxsurgeon.index.NodeEdges` when every read was in
            order and no node holds a subgraph, else None.
    """

    warnings: list[str]
    producers: dict[str, int] | None
    holders: list[int]
    edges: NodeEdges | None
    value_info: ValueInfos | None = None
    """The main graph's value_info entries read from the bytes (:func:`onnxsurgeon.scan.value_info`),
    when they were read there."""


def validate_producers(
    model: onnx.ModelProto, /, *, sort: bool = True,
    initializer_names: Sequence[str] | None = None, data: bytes | None = None,
    unsorted_functions: bool = False,
) -> Validation:
    """:func:`validate`, also returning what the main graph's pass computed on the way (see
    :class:`Validation`). Same checks, messages and repairs. ``initializer_names``: the names
    of ``model.graph.initializer`` in order, when the caller read them already (load's tensor
    check does). ``data``: the bytes ``model`` was parsed from, unchanged since, when the
    caller has them: the main graph's node loop then reads them in C (:mod:`onnxsurgeon.scan`).
    ``unsorted_functions``: a local function body out of order is accepted (``toposort``)."""
    warnings: list[str] = []
    listed = scan.value_info(data) if data is not None else None
    if listed is not None and len(listed.names) != len(model.graph.value_info):
        listed = None  # never seen; a guard
    _check_model_texts(model, value_info_read=listed is not None)
    _check_functions(model, defer_order=unsorted_functions)
    main: _ScopeResult | None = None
    stack: list[tuple[onnx.GraphProto, tuple[Container[str], ...], int]] = [
        (model.graph, (), 0)
    ]
    while stack:
        graph, outer, depth = stack.pop()
        check_depth(graph, depth)
        label = "main graph" if depth == 0 else f"subgraph '{graph.name}'"
        inits = (initializer_names if depth == 0 and initializer_names is not None
                 else map(_NAME, graph.initializer))
        body = _Body(
            label,
            list(map(_NAME, graph.input)),
            [*inits, *(s.values.name for s in graph.sparse_initializer)],
            graph.node,
            list(map(_NAME, graph.output)),
        )
        found = _check_scope(body, outer, sort=sort, graph=graph,
                             scan_nodes=partial(scan.nodes, data)
                             if depth == 0 and data is not None else None)
        warnings.extend(found.warnings)
        if depth == 0:
            main = found
        for sub, holder in reversed(found.nested):
            stack.append((sub, (*outer, found.seen_by(holder)), depth + 1))
    assert main is not None
    if warnings:
        return Validation(warnings, None, main.holders, None)
    return Validation(warnings, main.producer, main.holders, main.edges, listed)


# --------------------------------------------------------------------------- one scope
def _visible(name: str, outer: Sequence[Container[str]]) -> bool:
    return any(name in scope for scope in outer)


class _Body(NamedTuple):
    """The names one graph or function body declares, and its nodes."""

    label: str
    inputs: list[str]
    initializers: list[str]
    nodes: Sequence[onnx.NodeProto]
    outputs: list[str]


@dataclass(frozen=True)
class _ScopeResult:
    """What :func:`_check_scope` found in one body.

    Attributes:
        defined: every name the body defines.
        nested: the graphs its nodes hold (the live ones, after a re-sort), each with the
            position of its node (in the final order).
        producer: node output -> first producer (a precise map also on the slow path; positions
            before a re-sort).
        holders: nodes with attributes (the only ones that can hold tensors or graphs).
        edges: the int dataflow graph when every read was in order and no node holds a body.
        warnings: the repair made, if any.
    """

    defined: AbstractSet[str]
    nested: list[tuple[onnx.GraphProto, int]]
    producer: dict[str, int]
    holders: list[int]
    edges: NodeEdges | None
    warnings: list[str]
    declared: tuple[AbstractSet[str], AbstractSet[str]] = (frozenset(), frozenset())
    """(inputs, initializers) of the body."""
    positions: Mapping[str, int] | None = None
    """Node output -> position of its producer in the final order (None: ``producer``'s)."""
    nodes: Sequence[onnx.NodeProto] = ()
    """The body's nodes in the final order."""

    def seen_by(self, position: int) -> OuterScope:
        """What the bodies of node ``position`` (final order) see of this body."""
        producer = self.positions if self.positions is not None else self.producer
        return OuterScope(self.nodes, self.declared, producer, position)


def _check_scope(
    body: _Body, outer: tuple[Container[str], ...], *, sort: bool,
    graph: onnx.GraphProto | None,
    scan_nodes: Callable[[dict[str, int]], NodePass | None] | None = None,
    defer_order: bool = False,
) -> _ScopeResult:
    """Validate one graph or function body (its nodes re-sorted into ``graph`` when ``sort``
    and some read precedes its producer).

    One pass over the nodes: definitions are collected and every read is checked against what
    was defined before it (or in an enclosing scope). Only when some read refers to a later
    producer is the stable topological sort run. O(nodes + edges). ``scan_nodes``: the node
    loop below run elsewhere (:func:`onnxsurgeon.scan.nodes`), or None when it cannot.
    ``defer_order``: nodes out of order are neither sorted nor refused (a cycle still is).
    """
    label, inputs, initializers, nodes, outputs = body
    warnings: list[str] = []
    edges: NodeEdges | None = None
    if not _all_text(chain(inputs, initializers, outputs)):
        raise _not_utf8(label)
    defined: set[str] = set(inputs)
    if len(defined) != len(inputs):
        raise InvalidModelError(
            f"{label} declares input '{_first_repeat(inputs)}' twice; remove the duplicate "
            "graph input"
        )
    init_seen: set[str] = set(initializers)  # C-level: a Python loop only to name a repeat
    if len(init_seen) != len(initializers):
        raise InvalidModelError(
            f"{label} has two initializers named '{_first_repeat(initializers)}'; remove or "
            "rename one"
        )
    defined |= init_seen
    if outer:
        for name in defined:
            if name and _visible(name, outer):
                raise InvalidModelError(
                    f"{label} defines '{name}', which shadows a tensor of an enclosing graph; "
                    "rename the inner tensor"
                )
    # Fast path, one pass over the nodes (nodefields.node_pass, or the same in C). ``first``
    # maps every name defined so far to its first producer (a leaf id <= -2 for inputs and
    # initializers, -1 for "" = optional input omitted), so a read is in order exactly when its
    # name is already there. The producer of every read is recorded on the way (``preds``, one
    # flat list: ~0.1 us per node, a tuple per node costs three times that): the int dataflow
    # graph :class:`~onnxsurgeon.index.NodeEdges` that extract walks without touching protobuf
    # again.
    first: dict[str, int] = dict(zip(inputs, count(-2, -1)))  # inputs are distinct here
    if init_seen.isdisjoint(first):  # each initializer a new leaf, in order
        first.update(zip(initializers, count(-2 - len(first), -1)))
    else:  # some initializers are listed as graph inputs too: those keep the input's id
        for name in initializers:
            first.setdefault(name, -2 - len(first))
    leaves = dict(zip(first.values(), first, strict=True))  # leaf id -> name
    if "" in first:  # an input named "" reads as an omitted optional input, never a leaf
        del leaves[first[""]]
    first[""] = -1
    before = len(first)  # the names defined by nodes are the keys past this
    get = first.get
    late: list[int] = []  # nodes reading something not yet produced (or never, or outer)
    scanned = scan_nodes(first) if scan_nodes is not None else None
    if scanned is not None and len(scanned[1]) != len(nodes):  # never seen; a guard
        scanned = None
    texts_read = scanned is not None  # the C pass decoded every name as UTF-8 text, or gave up
    if scanned is None:
        if len(first) > before:  # the C pass gave up after adding keys: keep the leaves only
            deque(map(first.__delitem__, list(islice(first, before, None))), maxlen=0)
        scanned = node_pass(nodes, first)
    preds, counts, names, ops, domains, multi, holders, suspects = scanned
    if None in preds:  # some node reads a name not produced before it (or never): which ones
        missing = np.fromiter(map(is_, preds, repeat(None)), dtype=bool, count=len(preds))
        reader = np.repeat(np.arange(len(counts), dtype=np.int64),
                           np.fromiter(counts, dtype=np.int64, count=len(counts)))
        late = np.flatnonzero(np.bincount(reader[missing],
                                          minlength=len(counts))).tolist()
    nested: list[tuple[onnx.GraphProto, int]] = []
    captures: dict[int, list[str]] = {}
    late_captures = False
    for i in holders:
        node = nodes[i]
        if has_subgraphs(node):
            subs = list(subgraphs(node))
            nested.extend((sub, i) for sub in subs)
            cap = list(dict.fromkeys(name for name, _ in body_captures(node)))
            captures[i] = cap
            if any(get(c, i) >= i for c in cap):
                late.append(i)
                late_captures = True
    if late_captures:
        late = sorted(set(late))
    # the names defined before the loop were checked above; the keys past ``before`` are the
    # names the nodes defined (text already when the C pass read them)
    if not texts_read and not (_all_text(names) and _all_text(ops) and _all_text(domains)
                               and _all_text(islice(first, before, None))):
        raise _not_utf8(label)
    producer: dict[str, int] = {}
    scope: AbstractSet[str] = defined
    if suspects or outer:
        _find_duplicates(label, nodes, defined, producer, outer)
    else:
        # no name was defined twice: ``first`` less its leaves is the producer map, in order
        deque(map(first.__delitem__, leaves.values()), maxlen=0)
        del first[""]
        producer = first
        if late:  # what _find_duplicates would have added
            defined.update(producer)
        elif nested:
            scope = defined.union(producer)  # every name this graph defines
        if not captures and not late:
            starts = [0, *accumulate(counts)]
            edges = NodeEdges(preds, starts, leaves, names,  # type: ignore[arg-type]
                              edge_ops(ops, domains, multi))
    seen_out: set[str] = set()
    for name in outputs:
        if name in seen_out:
            raise InvalidModelError(
                f"{label} lists output '{name}' twice; remove the duplicate graph output"
            )
        seen_out.add(name)
        if name not in scope and name not in producer and not _visible(name, outer):
            raise InvalidModelError(
                f"output '{name}' of the {label} is never produced (dangling); remove the output "
                "or add its producer"
            )
    declared = (frozenset(inputs), init_seen)
    if not late:
        return _ScopeResult(scope, nested, producer, holders, edges, warnings, declared,
                            nodes=nodes)
    # Some reads precede their producer (or have none): classify them.
    positions: dict[str, int] | None = None
    # inside a body a late read may come from an enclosing graph: classify node by node. Else
    # every late read is produced later or dangling: the sort's one look-up of every read
    # finds the dangling ones (the node-by-node walk then names the first).
    classify = partial(_classify_late, label, nodes, late, captures, producer, defined, outer)
    out_of_order = classify() if outer else True
    if out_of_order:
        order = stable_toposort(label, nodes, producer, captures,
                                unresolved=None if outer else partial(_no_dangling, defined,
                                                                      classify))
        moved_at = [k for k, j in enumerate(order) if k != j]
        moved = len(moved_at)
        first_moved = node_label(nodes[order[moved_at[0]]], order[moved_at[0]])
        if defer_order:  # toposort reads this model to sort it: the order is its job
            return _ScopeResult(defined, nested, producer, holders, edges, warnings, declared,
                                nodes=nodes)
        if not sort or graph is None:
            raise InvalidModelError(
                f"{len(late)} nodes of the {label} read tensors produced later (first: "
                f"'{node_label(nodes[late[0]], late[0])}'); sort the nodes topologically: run "
                "'onnxsurgeon toposort MODEL -o OUT'"
            )
        reorder_nodes(graph.node, order)
        if holders:  # the messages moved in place: the same bodies, at their new positions
            rank = np.empty(len(order), dtype=np.int64)
            rank[np.asarray(order, dtype=np.int64)] = np.arange(len(order), dtype=np.int64)
            at = rank.tolist()
            holders = sorted(at[h] for h in holders)
            nested = sorted(((sub, at[i]) for sub, i in nested), key=itemgetter(1))
            if nested:
                positions = {name: at[i] for name, i in producer.items()}
        warnings.append(
            f"{label}: {moved} nodes were out of topological order (first: "
            f"'{first_moved}'); sorted them stably, keeping the original order where possible"
            .translate(CONTROL_ESCAPES)
        )
    return _ScopeResult(defined, nested, producer, holders, edges, warnings, declared, positions,
                        graph.node if graph is not None and out_of_order else nodes)


def _no_dangling(defined: AbstractSet[str], classify: Callable[[], bool],
                 unproduced: set[str]) -> None:
    """Raise (by ``classify``, naming the first reader) when a name read is neither produced
    (``unproduced`` are those) nor defined by the scope."""
    unproduced.discard("")
    if unproduced.difference(defined):
        classify()


def _classify_late(label: str, nodes: Sequence[onnx.NodeProto], late: list[int],
                   captures: dict[int, list[str]], producer: Mapping[str, int],
                   defined: AbstractSet[str], outer: tuple[Container[str], ...]) -> bool:
    """Whether some read of the ``late`` nodes precedes its producer (True) or every late read
    comes from an enclosing graph (False); raises naming the first dangling read. O(reads of
    the late nodes)."""
    out_of_order = False
    for i in late:
        node = nodes[i]
        for name in (*node.input, *captures.get(i, ())):
            if not name or name in producer and producer[name] < i:
                continue
            if name in producer:
                out_of_order = True
            elif name not in defined and not _visible(name, outer):
                raise InvalidModelError(
                    f"tensor '{name}' read by node '{node_label(node, i)}' in the {label} is "
                    "never produced (dangling); add its producer or declare it as a graph input"
                )
    return out_of_order


_NAME = attrgetter("name")
_INPUTS = attrgetter("input")


def _first_repeat(names: Sequence[str]) -> str:
    """The first name of ``names`` that repeats an earlier one ("" when none does)."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            return name
        seen.add(name)
    return ""


def _all_text(names: Iterable[object]) -> bool:
    """All ``names`` are str (protobuf hands invalid UTF-8 back as bytes). C-speed join."""
    try:
        "".join(names)  # type: ignore[arg-type]
    except TypeError:
        return False
    return True


def _not_utf8(label: str) -> InvalidModelError:
    return InvalidModelError(
        f"the {label} has a name that is not valid UTF-8 text; the file is corrupt, re-export "
        "the model"
    )


def _check_model_texts(model: onnx.ModelProto, *, value_info_read: bool = False) -> None:
    """Model-level strings, value_info names and function signatures are text
    (``value_info_read``: the value_info names were read as text from the bytes already)."""
    texts: list[object] = [model.producer_name, model.producer_version, model.domain,
                           model.doc_string, model.graph.name]
    for prop in model.metadata_props:
        texts.extend((prop.key, prop.value))
    for op in model.opset_import:
        texts.append(op.domain)
    # C-speed: often one per tensor
    if not value_info_read and not _all_text(map(_NAME, model.graph.value_info)):
        raise _not_utf8("model header (names, metadata or functions)")
    for fn in model.functions:
        texts.extend((fn.name, fn.domain, *fn.input, *fn.output, *fn.attribute))
    if not all(type(t) is str for t in texts):
        raise _not_utf8("model header (names, metadata or functions)")


def _find_duplicates(
    label: str,
    nodes: Sequence[onnx.NodeProto],
    defined: set[str],
    producer: dict[str, int],
    outer: tuple[Container[str], ...],
) -> None:
    """Slow path: add node outputs to ``defined``/``producer`` one by one, naming the first
    name defined twice or shadowing an enclosing graph. O(nodes + outputs)."""
    for i, node in enumerate(nodes):
        for out in node.output:
            if not out:
                continue
            if out in defined:
                other = producer.get(out)
                first = (
                    f"node '{node_label(nodes[other], other)}'" if other is not None
                    else "a graph input or initializer"
                )
                raise InvalidModelError(
                    f"tensor '{out}' in the {label} is produced twice ({first} and node "
                    f"'{node_label(node, i)}'); rename one so every tensor has one producer"
                )
            if outer and _visible(out, outer):
                raise InvalidModelError(
                    f"node '{node_label(node, i)}' in the {label} defines '{out}', which "
                    "shadows a tensor of an enclosing graph; rename the inner tensor"
                )
            defined.add(out)
            producer[out] = i


# ------------------------------------------------------------------------------ functions
@dataclass(frozen=True)
class _FnKey:
    domain: str
    name: str
    overload: str


def _check_functions(model: onnx.ModelProto, *, defer_order: bool = False) -> None:
    """Local functions: unique, no recursion (direct or mutual), bodies well-formed
    (``defer_order``: a body out of topological order is left for ``toposort``)."""
    funcs: dict[_FnKey, onnx.FunctionProto] = {}
    for fn in model.functions:
        key = _FnKey(fn.domain, fn.name, getattr(fn, "overload", ""))
        if key in funcs:
            raise InvalidModelError(
                f"local function '{fn.domain}.{fn.name}' is defined twice; remove one definition"
            )
        funcs[key] = fn
    if not funcs:
        return
    calls: dict[_FnKey, list[_FnKey]] = {}
    for key, fn in funcs.items():
        callees: list[_FnKey] = []
        stack: list[tuple[Sequence[onnx.NodeProto], int]] = [(fn.node, 1)]
        while stack:
            body, depth = stack.pop()
            if depth > MAX_NESTING:
                raise InvalidModelError(
                    f"local function '{key.domain}.{key.name}' nests graphs deeper than "
                    f"{MAX_NESTING}; flatten the control flow"
                )
            for node in body:
                callee = _FnKey(node.domain, node.op_type, getattr(node, "overload", ""))
                if callee in funcs:
                    callees.append(callee)
                for sub in subgraphs(node):
                    stack.append((sub.node, depth + 1))
        calls[key] = callees
        _check_scope(
            _Body(f"body of local function '{key.domain}.{key.name}'",
                  list(fn.input), [], fn.node, list(fn.output)),
            (), sort=False, graph=None, defer_order=defer_order,
        )
    # Iterative DFS with colours: grey = on the current path.
    colour: dict[_FnKey, int] = {}
    for root in funcs:
        if colour.get(root):
            continue
        path: list[_FnKey] = []
        stack2: list[tuple[_FnKey, int]] = [(root, 0)]
        while stack2:
            key, k = stack2.pop()
            if k == 0:
                colour[key] = 1
                path.append(key)
            callees = calls[key]
            if k < len(callees):
                stack2.append((key, k + 1))
                nxt = callees[k]
                if colour.get(nxt) == 1:
                    ring = path[path.index(nxt):] + [nxt]
                    text = " -> ".join(f"'{c.domain}.{c.name}'" for c in ring)
                    raise InvalidModelError(
                        f"local functions call themselves recursively ({text}); ONNX functions "
                        "cannot recurse, inline or restructure them"
                    )
                if not colour.get(nxt):
                    stack2.append((nxt, 0))
            else:
                colour[key] = 2
                path.pop()
