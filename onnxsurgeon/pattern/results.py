"""The results of :func:`~onnxsurgeon.pattern.find_matches`: one :class:`Match` per place
where the pattern occurs, and :class:`Matches`, all of them with the near misses."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import onnx


@dataclass(frozen=True)
class Match:
    """One place where the pattern occurs.

    Attributes:
        graph: "" for the main graph, else the body's path (``<node>/<attribute>``, nested
            with ``/``).
        nodes: positions of the matched nodes in that graph, ascending.
        labels: their labels (name, else ``OpType#i``), in the same order.
        inputs: pattern input -> the tensor it matched.
        outputs: pattern output -> the tensor it matched.
        constants: pattern constant -> the constant tensor it matched.
        dead_constants: positions of Constant nodes only the match reads (a replacement
            removes them too).
    """

    graph: str
    nodes: tuple[int, ...]
    labels: tuple[str, ...]
    inputs: dict[str, str]
    outputs: dict[str, str]
    constants: dict[str, str]
    dead_constants: tuple[int, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The site as ``match --json`` / ``replace --json`` write it."""
        data: dict[str, Any] = {"nodes": list(self.labels), "inputs": dict(self.inputs),
                                "outputs": dict(self.outputs)}
        if self.graph:
            data["graph"] = self.graph
        if self.constants:
            data["constants"] = dict(self.constants)
        return data


@dataclass(frozen=True)
class Matches:
    """Every match of a pattern in a model, and the near misses (``explain``).

    Attributes:
        matches: the matches, main graph first, each graph in anchor order.
        misses: one line per anchor candidate that did not match: its label and the first
            reason (only with ``explain``).
        candidates: how many anchor candidates were tried.
        graphs: body path -> the GraphProto (for a verb editing bodies); "" is the main graph.
    """

    matches: list[Match]
    misses: list[str] = field(default_factory=list)
    candidates: int = 0
    graphs: dict[str, onnx.GraphProto] = field(default_factory=dict)
