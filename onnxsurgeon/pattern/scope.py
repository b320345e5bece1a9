"""The graph side of pattern matching: each graph of the model as the matcher sees it
(:class:`_Scope`: nodes, op types, producers, constants, reads counted with the captures of
nested bodies, graph outputs), every scope of a model (the main graph, then the bodies, depth
first), the anchor candidates of an op type, and the int dataflow graph as numpy arrays."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Mapping
from operator import attrgetter
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, numpy_helper

from ..index import GraphIndex, body_captures, check_depth, has_subgraphs, int_arrays, positions
from .load import _DEFAULT, _constant_value

_OP = attrgetter("op_type")
_INPUT = attrgetter("input")

class _Scope:
    """One graph of the model as the matcher sees it: nodes, op types, producers, constants,
    reads counted (explicit inputs and the captures of nested bodies) and graph outputs."""

    def __init__(self, graph: onnx.GraphProto, path: str, depth: int,
                 index: GraphIndex | None = None) -> None:
        self.graph = graph
        self.path = path
        self.depth = depth
        self.index = index
        self.nodes = graph.node
        self._ops: list[str] | None = None
        if index is not None:
            self.producer: Mapping[str, int] = index.producer
            self.initializers: Mapping[str, int] = index.initializers
            self.outputs: Mapping[str, int] = index.outputs
        else:
            prod: dict[str, int] = {}
            for i, node in enumerate(graph.node):
                for out in node.output:
                    if out:
                        prod[out] = i
            self.producer = prod
            self.initializers = {t.name: k for k, t in enumerate(graph.initializer)}
            self.outputs = {vi.name: k for k, vi in enumerate(graph.output)}
        self._reads: Counter[str] | None = None
        self._pred_counts: Counter[int] | bool | None = None
        self._consts: dict[str, np.ndarray | None] = {}

    @property
    def ops(self) -> list[str]:
        if self._ops is None:
            self._ops = list(map(_OP, self.nodes))
        return self._ops

    def label(self, i: int) -> str:
        node = self.nodes[i]
        return node.name or f"{node.op_type}#{i}"

    @property
    def reads(self) -> Counter[str]:
        """Tensor name -> how many reads it has here (inputs, and body captures). O(edges)."""
        if self._reads is None:
            reads: Counter[str] = Counter(itertools.chain.from_iterable(map(_INPUT, self.nodes)))
            for node in self.nodes:
                if node.attribute and has_subgraphs(node):
                    reads.update(name for name, _ in body_captures(node))
            self._reads = reads
        return self._reads

    def read_count(self, name: str) -> int:
        """How many reads ``name`` has here. From the int dataflow graph when the index has
        one and ``name``'s producer has one output (a C-level count of producer ids, built
        once), else from :attr:`reads`."""
        index = self.index
        if index is not None and self._pred_counts is None:
            edges = index.known_int_graph()
            self._pred_counts = Counter(edges.preds) if edges is not None else False
        j = self.producer.get(name)
        counts = self._pred_counts
        if isinstance(counts, Counter) and j is not None and len(self.nodes[j].output) == 1:
            return counts[j]
        return self.reads.get(name, 0)

    def readers(self, name: str) -> list[int]:
        """Nodes reading ``name`` explicitly, in node order. O(nodes), C-level scans."""
        if self.index is not None:
            return sorted({u.node for u in self.index.uses_of(name) if u.inner is None})
        return [i for i, ins in enumerate(map(_INPUT, self.nodes)) if name in ins]

    def outside_reader(self, name: str, inside: set[int]) -> str:
        for i, node in enumerate(self.nodes):
            if i in inside:
                continue
            if name in node.input or (node.attribute and has_subgraphs(node) and any(
                    c == name for c, _ in body_captures(node))):
                return self.label(i)
        return "?"

    def constant(self, name: str) -> np.ndarray | None:
        """The value of ``name`` when it is a constant here (initializer or Constant output)."""
        if name in self._consts:
            return self._consts[name]
        value: np.ndarray | None = None
        pos = self.initializers.get(name)
        if pos is not None and pos >= 0:
            tensor = self.graph.initializer[pos]
            if tensor.data_location != onnx.TensorProto.EXTERNAL:
                value = numpy_helper.to_array(tensor)
        else:
            j = self.producer.get(name)
            if j is not None:
                node = self.nodes[j]
                if node.op_type == "Constant" and node.domain in _DEFAULT:
                    value = _constant_value(node)
        self._consts[name] = value
        return value

    def is_constant_name(self, name: str) -> bool:
        if name in self.initializers:
            return True
        j = self.producer.get(name)
        return j is not None and self.nodes[j].op_type == "Constant"


def _scopes(index: GraphIndex) -> list[_Scope]:
    """The main graph, then every body, depth first in node order. Iterative."""
    found = [_Scope(index.graph, "", 0, index)]
    stack: list[tuple[onnx.GraphProto, str, int]] = [(index.graph, "", 0)]
    while stack:
        g, path, depth = stack.pop()
        nested: list[tuple[onnx.GraphProto, str, int]] = []
        for i in (index.body_holders if depth == 0 else range(len(g.node))):
            node = g.node[i]
            if not (node.attribute and has_subgraphs(node)):
                continue
            label = node.name or f"{node.op_type}#{i}"
            for attr in node.attribute:
                subs = [attr.g] if attr.type == AttributeProto.GRAPH else list(attr.graphs)
                for k, sub in enumerate(subs):
                    check_depth(sub, depth + 1)
                    name = attr.name if attr.type == AttributeProto.GRAPH else f"{attr.name}[{k}]"
                    nested.append((sub, f"{path}{label}/{name}", depth + 1))
        for sub, sub_path, d in nested:
            found.append(_Scope(sub, sub_path, d))
        stack.extend(reversed([(sub, p + "/", d) for sub, p, d in nested]))
    for scope in found[1:]:
        scope.path = scope.path.rstrip("/")
    return found


def _anchors(scope: _Scope, op: str) -> list[int]:
    """The nodes of op type ``op``, ascending: from the int dataflow graph's op list when there
    is one (the protos read only for its multi-output and other-domain nodes), else from every
    node's op type. O(nodes), C-level scans."""
    edges = scope.index.known_int_graph() if scope.index is not None else None
    if edges is None:
        return positions(scope.ops, op)
    found = positions(edges.ops, op)
    nodes = scope.nodes
    others = [i for i in positions(edges.ops, "") if nodes[i].op_type == op]
    return sorted(found + others) if others else found


def _arrays(scope: _Scope) -> tuple[Any, Any] | None:
    """The scope's int graph as numpy arrays, kept in its index's memo (the save's check of a
    replace reads them too), or None."""
    index = scope.index
    edges = index.known_int_graph() if index is not None else None
    return int_arrays(edges, index.memo) if edges is not None and index is not None else None
