"""Pure queries over a :class:`GraphIndex`: backward and forward closures. Nothing here mutates."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from .errors import InvalidModelError, name_list
from .index import GraphIndex


@dataclass(frozen=True)
class Closure:
    """What computing some target tensors needs.

    Attributes:
        targets: the tensors asked for.
        nodes: main-graph node indexes, ascending (the original topological order).
        tensors: every tensor read or produced by those nodes, the targets included, captures
            made inside nested bodies included.
        initializers: initializer names read, in first-read order.
        inputs: graph inputs (that are not initializers) read, in graph input order.
        stops: stop tensors reached, in the order given.
    """

    targets: tuple[str, ...]
    nodes: tuple[int, ...]
    tensors: frozenset[str]
    initializers: tuple[str, ...]
    inputs: tuple[str, ...]
    stops: tuple[str, ...]


def closure(
    index: GraphIndex, targets: Sequence[str], /, *, stop_at: Collection[str] = ()
) -> Closure:
    """Nodes needed to compute ``targets``, cutting at ``stop_at``.

    Tensors captured from the main graph by If/Loop/Scan bodies are followed too. A stop tensor is
    not computed: it becomes a boundary (a graph input when extracted). O(nodes + edges) of the
    closure; iterative.

    Raises:
        InvalidModelError: a needed tensor is neither produced, an initializer nor an input.
    """
    targets = name_list(targets, "closure(targets)")
    stops = set(name_list(stop_at, "closure(stop_at=...)"))
    seen_nodes: set[int] = set()
    tensors: set[str] = set()
    init_order: list[str] = []
    reached_stops: set[str] = set()
    input_hits: set[str] = set()
    # hot loop (copy walks whole models): locals bound once, the reader kept as a node index
    # (its label is made only for an error), one read of node.input per node
    initializers, inputs_map, producer = index.initializers, index.inputs, index.producer
    captures = index.captures
    node_field = index.graph.node
    add_tensor, add_node = tensors.add, seen_nodes.add
    stack: list[tuple[str, int]] = [(t, -1) for t in reversed(targets)]
    push, pop = stack.append, stack.pop
    while stack:
        name, reader = pop()
        if name in tensors:
            continue
        add_tensor(name)
        if name in stops:
            reached_stops.add(name)
            continue
        if name in initializers:
            init_order.append(name)
            continue
        if name in inputs_map:
            input_hits.add(name)
            continue
        i = producer.get(name)
        if i is None:
            where = f" (read by node '{index.node_label(reader)}')" if reader >= 0 else ""
            raise InvalidModelError(
                f"tensor '{name}'{where} is never produced and is not an input or initializer; "
                "repair the model (add its producer or declare it as a graph input)"
            )
        if i in seen_nodes:
            continue
        add_node(i)
        node = node_field[i]
        tensors.update(node.output)
        reads = [n for n in node.input if n]
        if i in captures:
            reads.extend(captured for captured, _ in captures[i])
        for read in reversed(reads):
            if read not in tensors:
                push((read, i))
    tensors.discard("")
    inputs = tuple(n for n in index.inputs if n in input_hits)
    return Closure(
        targets=tuple(targets),
        nodes=tuple(sorted(seen_nodes)),
        tensors=frozenset(tensors),
        initializers=tuple(init_order),
        inputs=inputs,
        stops=tuple(s for s in stop_at if s in reached_stops),
    )


def downstream_nodes(index: GraphIndex, sources: Iterable[str]) -> set[int]:
    """Main-graph nodes whose result depends on any of ``sources`` (reads inside nested bodies
    count). O(nodes + edges) of the forward closure; iterative."""
    consumers = index.consumers
    found: set[int] = set()
    stack = list(sources)
    seen: set[str] = set()
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        for use in consumers.get(name, ()):
            if use.node not in found:
                found.add(use.node)
                stack.extend(o for o in index.graph.node[use.node].output if o)
    return found
