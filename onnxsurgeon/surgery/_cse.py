"""``fold``'s common-subexpression elimination (one of its default simplifications, see
:mod:`onnxsurgeon.surgery.fuse`): main-graph nodes computing the same value merged into the
first.

Two nodes are the same when their domain ("" / ai.onnx only), op type, attributes (serialized,
by name), outputs present and inputs are equal. An input compares by name after the merges
before it, or, for a small inline initializer (not a graph input, at most :data:`SMALL` bytes),
by (data type, dims, bytes): equal constants of different names match. Never merged: random
ops, nodes holding bodies, a node one of whose outputs is a graph output (it stays; a later
duplicate may merge into it), a node whose output a body reads.

Before:  x -> {Shape#1 -> Gather(c0), Shape#2 -> Gather(c0')}   (c0, c0' both [0])
After:   x -> Shape#1 -> Gather(c0) -> the readers of both

One topological pass (a merge makes the readers of the duplicate read the first node's outputs,
so the nodes after may merge in turn). With load's int dataflow graph, numpy first tells
whether anything can merge at all: the first merge of the pass pairs two nodes reading a common
computed tensor or graph input with the same op, or two nodes reading only constants; only
those nodes are keyed, and the whole pass runs only when two of them match. O(edges) in numpy
when nothing merges; O(nodes + edges) Python otherwise.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from ..edit import Edit
from ..index import GraphIndex, int_arrays
from .fold import RANDOM_OPS

SMALL = 1024
"""The largest initializer (bytes) compared by value."""

_BODY_TYPES = frozenset({onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS})
_DOMAINS = frozenset({"", "ai.onnx"})
_Key = tuple[Any, ...]


class _Constants:
    """Initializer name -> value key (``("=", dtype, dims, bytes)``) for the small inline ones
    that are not graph inputs, else the name itself; read once each, when first asked."""

    def __init__(self, graph: onnx.GraphProto, index: GraphIndex, inputs: set[str]) -> None:
        self.graph = graph
        self.positions = index.initializers
        self.inputs = inputs
        self.memo: dict[str, Any] = {}

    def key(self, name: str) -> Any:
        got = self.memo.get(name)
        if got is None:
            got = self.memo[name] = self._value_key(name)
        return got

    def _value_key(self, name: str) -> Any:
        k = self.positions.get(name)
        if k is None or k < 0 or name in self.inputs:
            return name
        t = self.graph.initializer[k]
        if t.data_location == onnx.TensorProto.EXTERNAL or t.data_type in (
                onnx.TensorProto.STRING, onnx.TensorProto.UNDEFINED):
            return name
        try:
            itemsize = onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
        except (KeyError, ValueError, TypeError):
            return name
        if int(np.prod(t.dims, dtype=np.int64)) * itemsize > SMALL:
            return name
        value = np.ascontiguousarray(numpy_helper.to_array(t))
        return ("=", t.data_type, tuple(t.dims), value.tobytes())


def _key(node: onnx.NodeProto, alias: dict[str, str], consts: _Constants) -> _Key | None:
    """What ``node`` computes, as far as equality goes; None for a node never merged."""
    if node.domain not in _DOMAINS or node.op_type in RANDOM_OPS or not node.output:
        return None
    attrs = []
    for a in node.attribute:
        if a.type in _BODY_TYPES or a.HasField("g") or a.graphs:
            return None
        attrs.append((a.name, a.SerializeToString()))
    attrs.sort()
    ins = tuple(alias.get(x) or (consts.key(x) if x else "") for x in node.input)
    return (node.op_type, tuple(attrs), tuple(map(bool, node.output)), ins)


def _maybe(index: GraphIndex, inputs: set[str], consts: _Constants) -> bool:
    """False when provably no two main-graph nodes are the same (see the module docstring),
    from the int dataflow graph; True when some might, or there is no int graph. O(edges) in
    numpy, plus the keys of the nodes that share a computed input and an op."""
    edges = index.known_int_graph()
    if edges is None or not edges.ops:
        return True
    preds, starts = int_arrays(edges, index.memo)
    n = len(edges.ops)
    counts = np.diff(starts)
    computed = preds >= 0
    if edges.leaves:
        lowest = min(edges.leaves)
        constant = np.zeros(-lowest + 1, bool)  # by -leaf id
        inits = index.initializers
        for k, name in edges.leaves.items():
            constant[-k] = name in inits and name not in inputs
        leaf = preds <= -2
        computed[leaf] = ~constant[-preds[leaf]]
    node_of = np.repeat(np.arange(n), counts)
    reads = np.bincount(node_of[computed], minlength=n)
    picked = [np.flatnonzero(reads == 0)]  # nodes reading constants only
    p = preds[computed]
    if len(p):
        shift = -min(int(p.min()), 0)
        shared = np.bincount(p + shift)[p + shift] >= 2  # edges of a tensor read twice
        if shared.any():
            table: dict[str, int] = dict.fromkeys(edges.ops, 0)
            for j, op in enumerate(table):
                table[op] = j
            op_id = np.fromiter(map(table.__getitem__, edges.ops), np.int64, count=n)
            readers = node_of[computed][shared]
            group = (p[shared] + shift) * len(table) + op_id[readers]
            _, inverse, sizes = np.unique(group, return_inverse=True, return_counts=True)
            picked.append(readers[sizes[inverse] >= 2])
    candidates = np.unique(np.concatenate(picked)).tolist()
    if len(candidates) < 2:
        return False
    nodes = index.graph.node
    seen: set[_Key] = set()
    for i in candidates:
        key = _key(nodes[i], {}, consts)
        if key is not None:
            if key in seen:
                return True
            seen.add(key)
    return False


def plan_duplicates(index: GraphIndex, inputs: set[str]
                    ) -> tuple[dict[int, int], list[dict[str, Any]]]:
    """The main-graph nodes that duplicate an earlier one (duplicate -> the node kept) and
    their ``fused`` entries, in node order. See the module docstring for the cost."""
    graph = index.graph
    consts = _Constants(graph, index, inputs)
    if not _maybe(index, inputs, consts):
        return {}, []
    outputs = {o.name for o in graph.output}
    captured = {c for caps in index.captures.values() for c, _ in caps}
    nodes = graph.node
    alias: dict[str, str] = {}
    first: dict[_Key, int] = {}
    dups: dict[int, int] = {}
    for i, node in enumerate(nodes):
        key = _key(node, alias, consts)
        if key is None:
            continue
        k = first.setdefault(key, i)
        if k == i or any(o in outputs or o in captured for o in node.output):
            continue
        dups[i] = k
        alias.update((a, b) for a, b in zip(node.output, nodes[k].output, strict=True) if a)
    label = index.node_label
    return dups, [{"rule": "duplicate", "nodes": [label(d)], "into": label(k)}
                  for d, k in dups.items()]


def apply_duplicates(e: Edit, index: GraphIndex, dups: dict[int, int]) -> None:
    """The readers of each duplicate read the kept node's outputs; the duplicates and their
    value_info are removed (through ``e``)."""
    nodes = index.graph.node
    consumers = index.consumers
    gone: list[str] = []
    for d, k in sorted(dups.items()):
        for a, b in zip(nodes[d].output, nodes[k].output, strict=True):
            if a:
                gone.append(a)
                e.rewire([u for u in consumers.get(a, ()) if u.node not in dups], b)
    e.remove_nodes(set(dups))
    e.drop_value_info(gone)

