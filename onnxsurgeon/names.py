"""One deterministic, collision-free source of new names (rule 5 of STYLE.md)."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Iterator
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


def graph_names(graph: onnx.GraphProto) -> Iterator[str]:
    """Every tensor and node name in ``graph`` and the bodies nested in it (a name as often as
    it is written). O(nodes + edges)."""
    for g in iter_graphs(graph):
        for infos in (g.input, g.output, g.value_info, g.initializer):
            yield from map(_NAME, infos)
        yield from map(_VALUES_NAME, g.sparse_initializer)
        yield from _node_names(g.node)


def all_names(model: onnx.ModelProto) -> Iterator[str]:
    """Every tensor and node name in the model, nested bodies and local functions included.

    O(nodes + edges) over every graph.
    """
    yield from graph_names(model.graph)
    for fn in model.functions:
        yield from fn.input
        yield from fn.output
        yield from _node_names(fn.node)


_PROBES = 256
"""Names a :class:`NameAllocator` looks up in the collections it was given before merging them
into one set."""


def _meets(names: Collection[str], wanted: set[str]) -> bool:
    """Whether ``names`` and ``wanted`` share a name, probing the smaller into the larger for a
    dict or a set (C-level ``isdisjoint``), else each wanted name into ``names``."""
    if isinstance(names, dict):
        return not names.keys().isdisjoint(wanted)
    if isinstance(names, (set, frozenset)):
        return not names.isdisjoint(wanted)
    return any(map(names.__contains__, wanted))


class NameAllocator:
    """Hands out names never seen in the model nor handed out before.

    ``fresh("x")`` returns ``x`` when free, else ``x__1``, ``x__2``... The sequence depends only on
    the model and the order of calls, so the same command gives the same names.
    """

    def __init__(self, taken: Iterable[str] = ()) -> None:
        self._names: set[str] = set(taken)
        self._names.discard("")
        self._next: dict[str, int] = {}
        self._probes = 0
        self._pending: list[Collection[str]] = []
        """Collections of taken names not merged into ``_names`` yet (an index's name maps,
        claimed names): a copy that claims all its names and asks for none afterwards never
        builds the set."""

    @property
    def _taken(self) -> set[str]:
        """Every taken name ("" never is)."""
        if self._pending:
            for names in self._pending:
                self._names.update(names)
            self._pending.clear()
            self._names.discard("")
        return self._names

    @classmethod
    def for_model(cls, model: onnx.ModelProto) -> NameAllocator:
        return cls(all_names(model))

    @classmethod
    def for_index(cls, index: GraphIndex) -> NameAllocator:
        """``for_model(index.model)``, from the index's name dicts and the node names of its
        int graph (:meth:`~onnxsurgeon.index.GraphIndex.int_graph`: recorded by load's
        validation, or built once per index). Where that graph exists no node holds a body
        and every node input is an input, initializer or earlier output, so those dicts plus
        node and value_info names are all the names; else ``for_model``. The dicts are read
        when a name is first asked for (they never change while the index lives), by C-level
        probes only when that is a :meth:`claim`. O(names)."""
        edges = index.int_graph()
        if edges is None:
            return cls.for_model(index.model)
        # built already, or read by load: their keys hold those names
        known = index.__dict__.get("value_info") or index.__dict__.get("type_bytes")
        listed = index.listed_value_info
        allocator = cls()
        allocator._pending = [
            index.producer, index.initializers, index.inputs, index.outputs, set(edges.names),
            known if known is not None else set(listed.names) if listed is not None
            else set(map(_NAME, index.graph.value_info)),
            *(set(chain(fn.input, fn.output, _node_names(fn.node)))
              for fn in index.model.functions)]
        return allocator

    def _is_taken(self, name: str) -> bool:
        """``name in self._taken``, probing the collections not merged yet where they are
        while few names were asked for (a verb that names a handful of nodes never builds the
        set of every name: ~0.05 s on 90k nodes); merged after :data:`_PROBES` asks."""
        if not self._pending or not name:
            return name in self._names
        self._probes += 1
        if self._probes > _PROBES:
            return name in self._taken
        return name in self._names or any(name in names for names in self._pending)

    def reserve(self, name: str) -> None:
        """Mark ``name`` as used (a name the caller chose itself)."""
        if name:
            self._names.add(name)

    def __contains__(self, name: str) -> bool:
        return self._is_taken(name)

    def fresh_many(self, bases: list[str]) -> list[str]:
        """``[self.fresh(b) for b in bases]``, in C when no base is empty, taken or repeated
        (the common case of a prefixed copy: then every base is its own answer). O(len(bases))."""
        if self.claim(bases):
            return list(bases)
        return [self.fresh(b) for b in bases]

    def claim(self, bases: list[str]) -> bool:
        """Reserve every name of ``bases`` when none is empty, taken or repeated (then
        ``fresh_many(bases) == bases``) and return True; else reserve nothing and return False.
        In C: per collection not merged yet, probes of the smaller side into the larger (a
        dict's keys view or a set against the set of ``bases``: a handful of graph inputs costs
        a handful of probes, not one per base); after :data:`_PROBES` claims the names are
        merged into one set, once."""
        wanted = set(bases)
        if len(wanted) != len(bases) or "" in wanted or any(
                _meets(names, wanted) for names in [self._names, *self._pending]):
            return False
        if self._pending and len(self._pending) < _PROBES:
            self._pending.append(wanted)
        else:  # merged already, or many claims: one set (each claim stays O(len(bases)))
            self._taken.update(wanted)
        return True

    def fresh(self, base: str) -> str:
        """A new unique name built from ``base``; it is reserved before being returned."""
        taken, names = self._is_taken, self._names
        if base and not taken(base):
            names.add(base)
            return base
        stem = base or "t"
        n = self._next.get(stem, 0)
        while True:
            n += 1
            candidate = f"{stem}__{n}"
            if not taken(candidate):
                self._next[stem] = n
                names.add(candidate)
                return candidate
