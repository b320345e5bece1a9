"""``toposort``: every graph's nodes in topological order, stably.

The main graph, every If/Loop/Scan body (at any depth) and every local function body: a graph
whose nodes are in order already is left as it is (a model in order keeps its bytes but for the
rewrite record); one out of order is sorted by Kahn's algorithm emitting the lowest original
position ready (the original order is kept wherever the dependencies allow). Iterative: a
1,000,000-node reversed chain sorts without recursion.

``io.load`` sorts main graphs and bodies itself (with a warning) and refuses an unsorted local
function body; the CLI's ``toposort`` loads with ``unsorted_functions=True`` so that such a model
can be read and sorted here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain, repeat
from operator import attrgetter

import numpy as np
import onnx

from ..edit import Edit
from ..index import body_captures, has_subgraphs, subgraphs
from ..io import Model, as_model
from ..order import stable_toposort
from ..record import ToposortRecord, add_rewrite
from ..session import indexed

__all__ = ["ToposortResult", "toposort"]

_INPUTS = attrgetter("input")
_ATTRIBUTES = attrgetter("attribute")


@dataclass(frozen=True)
class ToposortResult:
    """What ``toposort`` moved.

    Attributes:
        moved: per graph reordered (``main``, ``<holder>/<body name>``, ``function
            <domain.name>``), how many nodes changed position; empty when all were in order.
    """

    moved: dict[str, int]

    def record(self) -> ToposortRecord:
        """The rewrite record of this sort."""
        return ToposortRecord(moved=dict(self.moved))


def _order(label: str, nodes: Sequence[onnx.NodeProto],
           producer: dict[str, int] | None = None) -> list[int] | None:
    """The stable topological order of ``nodes`` (one scope: names defined by these nodes;
    reads of anything else come from outside), or None when they are in order already.
    O(nodes + edges) (a sort: Kahn on ints, :func:`~onnxsurgeon.order.stable_toposort`).

    Raises:
        InvalidModelError: a cycle (named).
    """
    if producer is None:  # ``producer``: the scope's map when the caller has it (the index's)
        producer = {}
        for i, node in enumerate(nodes):
            for out in node.output:
                if out:
                    producer.setdefault(out, i)
    captures: dict[int, list[str]] = {}
    get = producer.get
    for i, attrs in enumerate(map(_ATTRIBUTES, nodes)):  # one field read per node
        if attrs and has_subgraphs(nodes[i]):
            captures[i] = [name for name, _ in body_captures(nodes[i])]
    late = any(get(r, -1) >= i for i, cap in captures.items() for r in cap)
    if not late:  # every read's producer against its reader, as ints (C-level passes)
        counts = np.fromiter(map(len, map(_INPUTS, nodes)), np.int64, count=len(nodes))
        reads = chain.from_iterable(map(_INPUTS, nodes))
        src = np.fromiter(map(get, reads, repeat(-1)), np.int64, count=int(counts.sum()))
        late = bool((src >= np.repeat(np.arange(len(nodes), dtype=np.int64), counts)).any())
    if not late:
        return None
    return stable_toposort(label, nodes, producer, captures)


def toposort(model: Model | onnx.ModelProto, /) -> ToposortResult:
    """Put the nodes of every graph (main, nested bodies, local functions) in topological order,
    stably. Mutates model (only the graphs out of order).

    Before:  [B(y) -> z, A(x) -> y]   (B reads y before A makes it)
    After:   [A(x) -> y, B(y) -> z]

    O(nodes + edges) to find a model in order or to sort a graph (Kahn on ints, a heap of the
    ready nodes; the messages are swapped in place, not copied). Iterative.

    Raises:
        InvalidModelError: a graph has a cycle (its nodes named).
    """
    m = as_model(model)
    proto = m.proto
    index = indexed(m)
    plans: list[tuple[onnx.GraphProto | onnx.FunctionProto, list[int], str]] = []
    # load's int graph exists only for reads in order (and no body)
    main_sorted = index.known_int_graph() is not None
    main_order = None if main_sorted else _order("main graph", proto.graph.node, index.producer)
    if main_order is not None:
        plans.append((proto.graph, main_order, "main"))
    stack: list[tuple[onnx.GraphProto, str]] = []
    for i in index.body_holders:
        node = proto.graph.node[i]
        stack.extend((sub, f"{index.node_label(i)}/{sub.name}") for sub in subgraphs(node))
    for fn in proto.functions:
        name = f"{fn.domain}.{fn.name}" if fn.domain else fn.name
        order = _order(f"body of local function '{name}'", fn.node)
        if order is not None:
            plans.append((fn, order, f"function {name}"))
        for node in fn.node:
            for sub in subgraphs(node):
                stack.append((sub, f"function {name}/{sub.name}"))
    while stack:
        graph, label = stack.pop()
        order = _order(f"subgraph '{graph.name}'", graph.node)
        if order is not None:
            plans.append((graph, order, label))
        for node in graph.node:
            for sub in subgraphs(node):
                stack.append((sub, f"{label}/{sub.name}"))
    moved = {label: sum(1 for k, j in enumerate(order) if k != j) for _, order, label in plans}
    result = ToposortResult(dict(sorted(moved.items())))

    # ------------------------------------------------------------------ mutate (all planned)
    e = Edit(index)
    # bodies below first: reordering a graph copies its nodes, bodies and all, so a body is
    # reordered before the graph holding it (found after it by the walk above)
    for graph, order, _ in reversed(plans):
        e.order_nodes(graph, order)
    e.hand_on(m)
    add_rewrite(proto, result.record())
    return result
