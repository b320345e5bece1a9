"""One deterministic, collision-free source of new names (rule 5 of STYLE.md)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from itertools import chain
from operator import attrgetter

import onnx

from .index import GraphIndex, iter_graphs

_SUFFIX = re.compile(r"^(.*?)(?:__(\d+))?$")


_NAME = attrgetter("name")
_INPUT, _OUTPUT = attrgetter("input"), attrgetter("output")
_VALUES_NAME = attrgetter("values.name")


def _node_names(nodes: Iterable[onnx.NodeProto]) -> Iterator[str]:
    """Names, inputs and outputs of ``nodes``, read by C-level maps (~0.3 us per node)."""
    yield from map(_NAME, nodes)
    yield from chain.from_iterable(map(_INPUT, nodes))
    yield from chain.from_iterable(map(_OUTPUT, nodes))


def all_names(model: onnx.ModelProto) -> Iterator[str]:
    """Every tensor and node name in the model, nested bodies and local functions included.

    O(nodes + edges) over every graph.
    """
    for graph in iter_graphs(model.graph):
        for infos in (graph.input, graph.output, graph.value_info, graph.initializer):
            yield from map(_NAME, infos)
        yield from map(_VALUES_NAME, graph.sparse_initializer)
        yield from _node_names(graph.node)
    for fn in model.functions:
        yield from fn.input
        yield from fn.output
        yield from _node_names(fn.node)


class NameAllocator:
    """Hands out names never seen in the model nor handed out before.

    ``fresh("x")`` returns ``x`` when free, else ``x__1``, ``x__2``... The sequence depends only on
    the model and the order of calls, so the same command gives the same names.
    """

    def __init__(self, taken: Iterable[str] = ()) -> None:
        self._taken: set[str] = set(taken)
        self._taken.discard("")
        self._next: dict[str, int] = {}
        self._claimed: list[set[str]] = []  # claimed names, merged into _taken when next asked

    @classmethod
    def for_model(cls, model: onnx.ModelProto) -> NameAllocator:
        return cls(all_names(model))

    @classmethod
    def for_index(cls, index: GraphIndex) -> NameAllocator:
        """``for_model(index.model)``, built from the index's name dicts and the node names
        of its int graph (:meth:`~onnxsurgeon.index.GraphIndex.int_graph`: recorded by load's
        validation, or built once per index). Where that graph exists no node holds a body
        and every node input is an input, initializer or earlier output, so those dicts plus
        node and value_info names are all the names; else ``for_model``. O(names) at C speed
        when load handed the graph over."""
        edges = index.int_graph()
        if edges is None:
            return cls.for_model(index.model)
        taken = set(index.producer)
        known = index.__dict__.get("value_info")  # built already: its keys hold those names
        taken.update(index.initializers, index.inputs, index.outputs, edges.names,
                     known if known is not None else map(_NAME, index.graph.value_info))
        for fn in index.model.functions:
            taken.update(fn.input, fn.output, _node_names(fn.node))
        allocator = cls()
        taken.discard("")
        allocator._taken = taken
        return allocator

    def _merge(self) -> set[str]:
        """Every taken name (claims merged in: a copy that claims all its names and asks for
        none afterwards never pays for the merge)."""
        for claimed in self._claimed:
            self._taken |= claimed
        self._claimed.clear()
        return self._taken

    def reserve(self, name: str) -> None:
        """Mark ``name`` as used (a name the caller chose itself)."""
        self._merge().add(name)

    def __contains__(self, name: str) -> bool:
        return name in self._merge()

    def fresh_many(self, bases: list[str]) -> list[str]:
        """``[self.fresh(b) for b in bases]``, in C when no base is empty, taken or repeated
        (the common case of a prefixed copy: then every base is its own answer). O(len(bases))."""
        if self.claim(bases):
            return list(bases)
        return [self.fresh(b) for b in bases]

    def claim(self, bases: list[str]) -> bool:
        """Reserve every name of ``bases`` when none is empty, taken or repeated (then
        ``fresh_many(bases) == bases``) and return True; else reserve nothing and return False.
        In C. O(len(bases))."""
        wanted = set(bases)
        if len(wanted) != len(bases) or "" in wanted or not self._merge().isdisjoint(wanted):
            return False
        self._claimed.append(wanted)
        return True

    def fresh(self, base: str) -> str:
        """A new unique name built from ``base``; it is reserved before being returned."""
        if self._claimed:
            self._merge()
        if base and base not in self._taken:
            self._taken.add(base)
            return base
        stem = base or "t"
        n = self._next.get(stem, 0)
        while True:
            n += 1
            candidate = f"{stem}__{n}"
            if candidate not in self._taken:
                self._next[stem] = n
                self._taken.add(candidate)
                return candidate
