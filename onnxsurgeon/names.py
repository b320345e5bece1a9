"""One deterministic, collision-free source of new names (rule 5 of STYLE.md)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

import onnx

from .index import iter_graphs

_SUFFIX = re.compile(r"^(.*?)(?:__(\d+))?$")


def all_names(model: onnx.ModelProto) -> Iterator[str]:
    """Every tensor and node name in the model, nested bodies and local functions included.

    O(nodes + edges) over every graph.
    """
    for graph in iter_graphs(model.graph):
        for vi in graph.input:
            yield vi.name
        for vi in graph.output:
            yield vi.name
        for vi in graph.value_info:
            yield vi.name
        for t in graph.initializer:
            yield t.name
        for st in graph.sparse_initializer:
            yield st.values.name
        for node in graph.node:
            yield node.name
            yield from node.input
            yield from node.output
    for fn in model.functions:
        yield from fn.input
        yield from fn.output
        for node in fn.node:
            yield node.name
            yield from node.input
            yield from node.output


class NameAllocator:
    """Hands out names never seen in the model nor handed out before.

    ``fresh("x")`` returns ``x`` when free, else ``x__1``, ``x__2``... The sequence depends only on
    the model and the order of calls, so the same command gives the same names.
    """

    def __init__(self, taken: Iterable[str] = ()) -> None:
        self._taken: set[str] = set(taken)
        self._taken.discard("")
        self._next: dict[str, int] = {}

    @classmethod
    def for_model(cls, model: onnx.ModelProto) -> NameAllocator:
        return cls(all_names(model))

    def reserve(self, name: str) -> None:
        """Mark ``name`` as used (a name the caller chose itself)."""
        self._taken.add(name)

    def __contains__(self, name: str) -> bool:
        return name in self._taken

    def fresh(self, base: str) -> str:
        """A new unique name built from ``base``; it is reserved before being returned."""
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
