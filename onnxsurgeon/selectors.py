"""Selectors: one text naming many places (``glob:``, ``re:``, ``op:``), and the sites they find.

``glob:PATTERN`` is :func:`fnmatch.fnmatchcase` (``*`` and ``?`` match any characters, ``/`` and
``.`` included: it is not path-aware); ``re:PATTERN`` must match a whole name
(:func:`re.fullmatch`); ``op:TYPE[,TYPE...]`` selects the nodes of those op types (as tensors:
their outputs). Each pattern is compiled once and tried once per candidate name.

This module knows the patterns and the nested bodies; :meth:`onnxsurgeon.select.Selector.find`
adds the main graph's framework names and PyTorch module paths and is the entry point.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterator
from dataclasses import dataclass

import onnx
from onnx import AttributeProto

from .errors import UsageError
from .index import check_depth, node_label

PREFIXES = ("glob:", "re:", "op:")
"""The selector prefixes; any other text is a plain name (today's meaning)."""

TENSOR, NODE = "tensor", "node"
"""The two kinds of place a selector finds."""


def is_selector(text: str) -> bool:
    """True when ``text`` is a selector (``glob:...``, ``re:...``, ``op:...``), not a plain name."""
    return text.startswith(PREFIXES)


@dataclass(frozen=True, slots=True)
class Site:
    """One place a selector found.

    Attributes:
        tensor: the ONNX tensor name (None for a node site).
        node: the node label (:func:`onnxsurgeon.index.node_label`) of the node found, or of the
            tensor's producer; None for a graph input or initializer.
        graph: "" for the main graph, else the path of the body holding the site
            (``"If_0/then_branch"``, ``"Loop_3/body/If_1/else_branch"``).
        matched: the name that matched: the ONNX name, a node name, an op type, a framework name
            or a module path.
    """

    tensor: str | None
    node: str | None
    graph: str
    matched: str


@dataclass(frozen=True)
class Pattern:
    """A compiled selector. ``ops`` is set for ``op:``, ``regex`` for ``glob:`` and ``re:``."""

    text: str
    regex: re.Pattern[str] | None
    ops: frozenset[str]

    @classmethod
    def parse(cls, text: str) -> Pattern:
        """Compile selector ``text`` (see the module docstring).

        Raises:
            UsageError: an empty pattern, an empty op list or an invalid regular expression.
        """
        kind, _, body = text.partition(":")
        if kind == "op":
            ops = frozenset(t.strip() for t in body.split(",") if t.strip())
            if not ops:
                raise UsageError(f"selector '{text}' names no op type; write op:TYPE[,TYPE...] "
                                 "(e.g. op:Dropout,Identity)")
            return cls(text, None, ops)
        if not body:
            raise UsageError(f"selector '{text}' has an empty pattern; write {kind}:PATTERN")
        source = fnmatch.translate(body) if kind == "glob" else body
        try:
            regex = re.compile(source, re.DOTALL)
        except re.error as exc:
            raise UsageError(f"selector '{text}' is not a valid regular expression ({exc}); "
                             "fix the pattern (re: uses Python's re syntax)") from None
        return cls(text, regex, frozenset())

    def names(self, name: str) -> bool:
        """True when a name matches (always False for ``op:``)."""
        return self.regex is not None and bool(name) and self.regex.fullmatch(name) is not None

    def node(self, node: onnx.NodeProto) -> str | None:
        """What of ``node`` matches: its op type (``op:``) or its name; else None."""
        if self.regex is None:
            return node.op_type if node.op_type in self.ops else None
        return node.name if self.names(node.name) else None

    @property
    def stem(self) -> str:
        """The literal part of the pattern, for did-you-mean hints."""
        body = self.text.partition(":")[2]
        return re.sub(r"[\\*?\[\]^$(){}|+]+", "", body).strip(".") or body


def body_graphs(graph: onnx.GraphProto) -> Iterator[tuple[str, onnx.GraphProto]]:
    """(path, body) of every graph nested in ``graph``, in node order, each body before the
    bodies nested in it; iterative. Paths join node labels and attribute names with ``/``."""
    stack: list[tuple[str, onnx.GraphProto, int]] = [("", graph, 0)]
    while stack:
        prefix, g, depth = stack.pop()
        check_depth(g, depth)
        found: list[tuple[str, onnx.GraphProto, int]] = []
        for i, node in enumerate(g.node):
            for attr in node.attribute:
                where = f"{prefix}{node_label(node, i)}/{attr.name}"
                if attr.type == AttributeProto.GRAPH:
                    found.append((where, attr.g, depth + 1))
                elif attr.type == AttributeProto.GRAPHS:
                    found.extend((f"{where}[{k}]", sub, depth + 1)
                                 for k, sub in enumerate(attr.graphs))
        for where, sub, d in reversed(found):
            stack.append((where + "/", sub, d))
        if prefix:
            yield prefix[:-1], g


def body_sites(graph: onnx.GraphProto, pattern: Pattern, kind: str) -> list[Site]:
    """The sites ``pattern`` finds inside the bodies nested in ``graph`` (ONNX tensor names,
    node names, op types): a body's inputs, its initializers, then its nodes' outputs.
    O(nodes + tensors) of the bodies."""
    sites: list[Site] = []
    for path, body in body_graphs(graph):
        if kind == TENSOR:
            sites.extend(Site(vi.name, None, path, vi.name)
                         for vi in body.input if pattern.names(vi.name))
            own = {vi.name for vi in body.input}
            sites.extend(Site(t.name, None, path, t.name) for t in body.initializer
                         if t.name not in own and pattern.names(t.name))
        for i, node in enumerate(body.node):
            by_node = pattern.node(node)
            label = node_label(node, i)
            if kind == NODE:
                hit = by_node or next((o for o in node.output if pattern.names(o)), None)
                if hit is not None:
                    sites.append(Site(None, label, path, hit))
                continue
            for out in node.output:
                if out and (by_node is not None or pattern.names(out)):
                    sites.append(Site(out, label, path, out if pattern.names(out) else
                                      str(by_node)))
    return sites
