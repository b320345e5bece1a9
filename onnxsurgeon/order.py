"""Node order: the stable topological sort (Kahn on ints) that load and ``toposort`` use, the
in-place reordering of a node field, and the named cycle when there is none."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from itertools import chain, repeat
from operator import attrgetter, is_
from typing import Any

import numpy as np
import onnx

from .errors import InvalidModelError
from .index import node_label

__all__ = ["find_cycle", "reorder_nodes", "stable_toposort"]

_INPUTS = attrgetter("input")


def stable_toposort(
    label: str,
    nodes: Sequence[onnx.NodeProto],
    producer: Mapping[str, int],
    captures: dict[int, list[str]],
    *,
    unresolved: Callable[[set[str]], None] | None = None,
) -> list[int]:
    """Kahn's algorithm on ints, always emitting the lowest original index ready: the original
    order is kept wherever dependencies allow. Every read is looked up once (C-level ``map``s
    over the nodes' input fields); the users of each node are one flat int array (numpy, CSR),
    so memory is a few ints per edge and no Python object per node but the order. Iterative.
    O(nodes + edges) plus O(log w) per node for the heap of ready nodes (w: how many are ready
    at once; 1 on a chain). ``unresolved``: called first with the names read that no node of
    ``nodes`` produces (it raises on a dangling one). Raises on a cycle (named)."""
    n = len(nodes)
    get = producer.get
    if captures:
        read: list[str] = []
        counts: list[int] = []
        for i, ins in enumerate(map(_INPUTS, nodes)):
            reads = [*ins, *captures[i]] if i in captures else ins[:]
            read.extend(reads)
            counts.append(len(reads))
    else:
        read = list(chain.from_iterable(map(_INPUTS, nodes)))
        counts = list(map(len, map(_INPUTS, nodes)))
    srcs = np.fromiter(map(get, read, repeat(-1)), dtype=np.int64, count=len(read))
    if unresolved is not None:
        outside = np.flatnonzero(srcs < 0).tolist()
        unresolved(set(map(read.__getitem__, outside)))
    del read
    dsts = np.repeat(np.arange(n, dtype=np.int64), np.fromiter(counts, np.int64, count=n))
    del counts
    keep = srcs >= 0
    srcs, dsts = srcs[keep], dsts[keep]
    indegree = np.bincount(dsts, minlength=n).tolist()
    users = dsts[np.argsort(srcs, kind="stable")].tolist()  # grouped by producer, in order
    starts = [0, *np.cumsum(np.bincount(srcs, minlength=n)).tolist()]
    del srcs, dsts, keep
    ready = [i for i, d in enumerate(indegree) if not d]  # ascending: already a heap
    pop, push = heapq.heappop, heapq.heappush
    order: list[int] = []
    emit = order.append
    while ready:
        i = pop(ready)
        emit(i)
        for u in users[starts[i]:starts[i + 1]]:
            d = indegree[u] - 1
            indegree[u] = d
            if not d:
                push(ready, u)
    if len(order) < n:
        stuck = {i for i in range(n) if indegree[i] > 0}
        cycle = find_cycle(nodes, producer, captures, stuck)
        names = " -> ".join(f"'{node_label(nodes[i], i)}'" for i in cycle)
        raise InvalidModelError(
            f"the {label} has a cycle: {names}; break the loop (an ONNX graph must be acyclic)"
        )
    return order


def reorder_nodes(nodes: Any, order: Sequence[int]) -> None:
    """Put the repeated ``nodes`` field (a graph's or a function's ``node``) in ``order`` (a
    permutation of positions) in place. The messages themselves move (protobuf's ``sort`` swaps
    them; no node is copied), so nested bodies stay the same objects. The sort is checked to
    have placed every message where ``order`` says; else (another protobuf) the nodes are
    copied into place. O(nodes log nodes) C-level; a few ints per node of memory."""
    n = len(order)
    rank = np.empty(n, dtype=np.int64)
    rank[np.asarray(order, dtype=np.int64)] = np.arange(n, dtype=np.int64)
    live = list(nodes)  # wrappers kept alive: the same objects come back from the field
    # list.sort computes each key once, in list order: next(ranks, node) is the node's rank
    nodes.sort(key=partial(next, iter(rank.tolist())))
    if all(map(is_, nodes, map(live.__getitem__, order))):
        return
    moved = [onnx.NodeProto() for _ in range(n)]  # undo nothing: copy from the old order
    for dst, j in zip(moved, order, strict=True):
        dst.CopyFrom(live[j])
    del nodes[:]
    nodes.extend(moved)


def find_cycle(
    nodes: Sequence[onnx.NodeProto],
    producer: Mapping[str, int],
    captures: dict[int, list[str]],
    stuck: set[int],
) -> list[int]:
    """One cycle among ``stuck`` nodes (each has a stuck predecessor), as node indexes with the
    first repeated at the end. Walk predecessors until a node repeats: O(stuck nodes)."""
    start = min(stuck)
    path: list[int] = []
    where: dict[int, int] = {}
    i = start
    while i not in where:
        where[i] = len(path)
        path.append(i)
        node = nodes[i]
        nxt = None
        for r in (*node.input, *captures.get(i, ())):
            p = producer.get(r)
            if p is not None and p in stuck:
                nxt = p
                break
        if nxt is None:  # cannot happen: every stuck node has a stuck predecessor
            break
        i = nxt
    cycle = path[where.get(i, 0):]
    cycle.reverse()  # predecessor walk -> data-flow order
    return [*cycle, cycle[0]]
