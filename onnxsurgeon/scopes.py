"""Scopes of a model's graphs, without an index: the real inputs, the bodies a node holds
(If/Loop/Scan, at any depth, and the nesting limit), the names a graph defines, what a body
reads from outside it (:class:`InnerRead`, :func:`body_captures`), a read of a tensor
(:class:`Use`), and what a body sees of its enclosing graph (:class:`OuterScope`).
:mod:`onnxsurgeon.index` re-exports them (their home before this module)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from operator import attrgetter

import onnx
from onnx import AttributeProto

from .errors import InvalidModelError

_ATTRIBUTES = attrgetter("attribute")

DEFAULT_INPUT_IR = 4
"""From this IR version on an initializer need not be a graph input, so a graph input that is
also an initializer is an *input with a default value* (onnxruntime feeds it when given, else the
initializer): an input everywhere. Before it the format listed every initializer as a graph
input too: those are weights, not inputs."""


def real_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The main graph's inputs, in order: every graph input except, before IR 4
    (:data:`DEFAULT_INPUT_IR`), an initializer listed as one. O(inputs + initializers)."""
    graph = model.graph
    if model.ir_version >= DEFAULT_INPUT_IR:
        return list(graph.input)
    weights = {t.name for t in graph.initializer} | {st.values.name for st in graph.sparse_initializer}
    return [vi for vi in graph.input if vi.name not in weights]


MAX_NESTING = 32
"""Deepest nesting of graphs (If/Loop/Scan bodies) accepted; deeper models are refused."""


def check_depth(graph: onnx.GraphProto, depth: int) -> None:
    """Refuse a graph nested deeper than :data:`MAX_NESTING` (the one place that says so)."""
    if depth > MAX_NESTING:
        raise InvalidModelError(
            f"graph '{graph.name}' is nested {depth} levels deep (limit {MAX_NESTING}); "
            "flatten the control flow or split the model"
        )


def subgraphs(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    """The graphs held in ``node``'s attributes (If branches, Loop/Scan bodies, custom ops)."""
    for attr in node.attribute:
        if attr.type == AttributeProto.GRAPH:
            yield attr.g
        elif attr.type == AttributeProto.GRAPHS:
            yield from attr.graphs


def has_subgraphs(node: onnx.NodeProto) -> bool:
    """True when ``node`` holds a graph attribute (If branches, Loop/Scan bodies, ...)."""
    for attr in node.attribute:
        if attr.type == AttributeProto.GRAPH or attr.type == AttributeProto.GRAPHS:
            return True
    return False


def iter_graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """``graph`` and every graph nested in it, depth-first, iteratively. Refuses nesting deeper
    than :data:`MAX_NESTING`."""
    stack: list[tuple[onnx.GraphProto, int]] = [(graph, 0)]
    while stack:
        g, depth = stack.pop()
        check_depth(g, depth)
        yield g
        nodes = g.node
        nested = [(sub, depth + 1) for i, attrs in enumerate(map(_ATTRIBUTES, nodes)) if attrs
                  for sub in subgraphs(nodes[i])]
        stack.extend(reversed(nested))


def node_label(node: onnx.NodeProto, i: int) -> str:
    """A human label for ``node`` at position ``i`` of its graph: its name, else ``op_type#i``
    (the form rewrite records and messages use everywhere)."""
    return node.name or f"{node.op_type}#{i}"


def graph_defined_names(graph: onnx.GraphProto) -> set[str]:
    """Names a graph defines itself: its inputs, initializers and node outputs."""
    names = {vi.name for vi in graph.input}
    names.update(t.name for t in graph.initializer)
    names.update(st.values.name for st in graph.sparse_initializer)
    for node in graph.node:
        names.update(o for o in node.output if o)
    return names


@dataclass(frozen=True, slots=True)
class InnerRead:
    """A read of an outer-scope tensor from inside a nested body.

    ``holder`` is the nested ``NodeProto`` that reads it (``slot`` >= 0), or the body's output
    ``ValueInfoProto`` when a body passes the outer tensor straight through (``slot`` == -1).
    """

    holder: onnx.NodeProto | onnx.ValueInfoProto
    slot: int


@dataclass(frozen=True, slots=True)
class Use:
    """One read of a main-graph tensor by main-graph node number ``node``.

    ``slot`` is the explicit input slot, or -1 when the read happens inside one of the node's
    nested bodies; ``inner`` then says where exactly.
    """

    node: int
    slot: int
    inner: InnerRead | None = None


def body_captures(node: onnx.NodeProto) -> list[tuple[str, InnerRead]]:
    """Every read, inside ``node``'s nested bodies, of a name none of those bodies defines.

    Those names come from the scope around ``node``. O(size of the bodies), iterative.
    """
    found: list[tuple[str, InnerRead]] = []
    stack: list[tuple[onnx.GraphProto, frozenset[str], int]] = [
        (g, frozenset(), 1) for g in reversed(list(subgraphs(node)))
    ]
    while stack:
        g, enclosing, depth = stack.pop()
        check_depth(g, depth)
        local = enclosing | graph_defined_names(g)
        nested: list[tuple[onnx.GraphProto, frozenset[str], int]] = []
        for inner in g.node:
            for slot, name in enumerate(inner.input):
                if name and name not in local:
                    found.append((name, InnerRead(inner, slot)))
            for sub in subgraphs(inner):
                nested.append((sub, local, depth + 1))
        for out in g.output:
            if out.name not in local:
                found.append((out.name, InnerRead(out, -1)))
        stack.extend(reversed(nested))
    return found


class OuterScope:
    """The names of one graph that the bodies of its node ``position`` see (ONNX scoping): its
    inputs and initializers, the outputs of the nodes before that node, and of those after it
    not computed from it (a runtime may sort them first: onnxruntime does). The node's own
    outputs and everything computed from them are never visible, so a branch may define a
    tensor named like its If's output (onnx.checker and onnxruntime accept that). O(1) per name,
    plus for a name produced later a backward walk over the nodes between the two."""

    __slots__ = ("nodes", "inputs", "initializers", "producer", "position")

    def __init__(self, nodes: Sequence[onnx.NodeProto],
                 declared: tuple[AbstractSet[str], AbstractSet[str]],
                 producer: Mapping[str, int], position: int) -> None:
        self.nodes = nodes
        self.inputs, self.initializers = declared
        self.producer = producer
        self.position = position

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        if name in self.inputs or name in self.initializers:
            return True
        at = self.producer.get(name)
        if at is None or at == self.position:
            return False
        return at < self.position or not self._computed_from_node(at)

    def _computed_from_node(self, at: int) -> bool:
        """Node ``at`` (after the node) reads, maybe through others, an output of the node."""
        stack, seen, producer, mine = [at], {at}, self.producer, self.position
        while stack:
            node = self.nodes[stack.pop()]
            reads: Iterable[str] = node.input
            if has_subgraphs(node):
                reads = [*node.input, *(name for name, _ in body_captures(node))]
            for read in reads:
                q = producer.get(read)
                if q == mine:
                    return True
                if q is not None and q > mine and q not in seen:
                    seen.add(q)
                    stack.append(q)
        return False
