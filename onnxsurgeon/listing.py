"""Finding names: every node and tensor of a model with its op, edges, dtype, shape and framework
names, filtered by a pattern or by the neighbourhood of one tensor. Pure queries.

Tensors are those of the main graph (graph inputs, initializers, node outputs); nodes include
those of nested If/Loop/Scan bodies (``graph`` says where). Types come from value_info, then
onnx shape inference (run once on a weight-free copy), then onnxruntime's type inference for
contrib ops, as everywhere else (:class:`~onnxsurgeon.types.TypeOracle`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import onnx

from .index import GraphIndex, subgraphs
from .select import Selector, name_map, node_module
from .types import TypeOracle, dtype_name


@dataclass(frozen=True)
class NodeRow:
    """One node: name (``Op#i`` when unnamed), op (``domain.Op`` outside ai.onnx), inputs,
    outputs, the graph holding it (``main`` or ``<node>/<attribute>`` for nested bodies) and the
    PyTorch module path the exporter recorded."""

    name: str
    op: str
    inputs: list[str]
    outputs: list[str]
    graph: str
    module: str | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class TensorRow:
    """One main-graph tensor: dtype and shape when known, its producer node, the nodes reading
    it, its kind, and every name it has in the source framework (name map keys, module paths
    whose output it is)."""

    name: str
    dtype: str | None
    shape: list[int | str | None] | None
    producer: str | None
    consumers: list[str]
    kind: str
    framework_names: list[str]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class Rows(list):
    """A list of :class:`NodeRow` or :class:`TensorRow` (what :meth:`Listing.nodes` and
    :meth:`Listing.tensors` return) that a notebook shows as a table; otherwise a plain list."""

    def _repr_html_(self) -> str:
        from .notebook import rows_html

        return rows_html(self)


def _op(node: onnx.NodeProto) -> str:
    return f"{node.domain}.{node.op_type}" if node.domain not in ("", "ai.onnx") else node.op_type


def _nested(node: onnx.NodeProto, where: str) -> Iterator[tuple[onnx.NodeProto, str, int]]:
    """Nodes of the bodies of ``node``, depth first (iterative), with their graph label."""
    stack = [(node, where)]
    while stack:
        holder, path = stack.pop()
        label = holder.name or holder.op_type
        for attr in holder.attribute:
            bodies = [attr.g] if attr.HasField("g") else list(attr.graphs)
            for g in bodies:
                inner = f"{path}/{label}.{attr.name}" if path != "main" else f"{label}.{attr.name}"
                for k, n in enumerate(g.node):
                    yield n, inner, k
                    if any(True for _ in subgraphs(n)):
                        stack.append((n, inner))


class Listing:
    """Nodes and tensors of one model (build once, query many). O(nodes + edges) to build."""

    def __init__(self, model: onnx.ModelProto | Any) -> None:
        # a ModelProto or an onnxsurgeon Model (anything with .proto): below io in the layers
        proto = getattr(model, "proto", model)
        if not isinstance(proto, onnx.ModelProto):
            raise TypeError(f"Listing takes a Model or ModelProto, got {type(model).__name__}")
        self.proto = proto
        self.index = GraphIndex(proto)
        self.selector = Selector(self.index)
        self.oracle = TypeOracle(self.index)
        self._framework: dict[str, list[str]] | None = None

    # ------------------------------------------------------------------------------ names
    def framework_names(self) -> dict[str, list[str]]:
        """Tensor -> its framework names: name-map keys, then module paths that hand it on."""
        if self._framework is None:
            names: dict[str, list[str]] = {}
            for key, tensor in sorted(name_map(self.index.model).items()):
                names.setdefault(tensor, []).append(key)
            for path in sorted(self.selector._module_nodes()):
                outs = self.selector.module_outputs(path)
                if len(outs) == 1 and path not in names.get(outs[0], []):
                    names.setdefault(outs[0], []).append(path)
            self._framework = names
        return self._framework

    # ------------------------------------------------------------------------------ rows
    def node_rows(self) -> list[NodeRow]:
        rows: list[NodeRow] = []
        for i, node in enumerate(self.index.graph.node):
            rows.append(NodeRow(self.index.node_label(i), _op(node), list(node.input),
                                list(node.output), "main", node_module(node)))
            if any(True for _ in subgraphs(node)):
                for inner, where, k in _nested(node, "main"):
                    rows.append(NodeRow(inner.name or f"{inner.op_type}#{k}", _op(inner),
                                        list(inner.input), list(inner.output), where,
                                        node_module(inner)))
        return rows

    def tensor_row(self, name: str) -> TensorRow:
        index = self.index
        vi = self.oracle.value_info(name)
        dtype: str | None = None
        shape: list[int | str | None] | None = None
        if vi is not None and vi.type.HasField("tensor_type"):
            elem = vi.type.tensor_type.elem_type
            dtype = dtype_name(elem) if elem else None
            shape = self.oracle.shape(name)
        elif vi is not None and vi.type.WhichOneof("value"):
            dtype = str(vi.type.WhichOneof("value")).replace("_type", "")
        producer = index.node_label(index.producer[name]) if name in index.producer else None
        readers = sorted({u.node for u in index.consumers.get(name, ())})
        if name in index.inputs and name in index.outputs:
            kind = "input+output"
        elif name in index.inputs and (name not in index.initializers
                                       or index.has_default(name)):
            kind = "input"
        elif name in index.outputs:
            kind = "output"
        elif name in index.initializers:
            kind = "initializer"
        else:
            kind = "activation"
        return TensorRow(name, dtype, shape, producer, [index.node_label(i) for i in readers],
                         kind, list(self.framework_names().get(name, [])))

    def tensor_names(self) -> list[str]:
        """Main-graph tensors: graph inputs, initializers, then node outputs in graph order."""
        return list(dict.fromkeys(self.index.tensor_names()))

    # ------------------------------------------------------------------------------ queries
    def around(self, name: str, hops: int = 1) -> tuple[set[str], set[str]]:
        """(tensors, node labels) within ``hops`` node steps of tensor ``name`` (any selector),
        in both directions. O(visited nodes + edges)."""
        index = self.index
        start = self.selector.resolve(name)
        tensors: set[str] = {start}
        nodes: set[int] = set()
        frontier = {start}
        for _ in range(max(0, hops)):
            step: set[int] = set()
            for t in frontier:
                if t in index.producer:
                    step.add(index.producer[t])
                step.update(u.node for u in index.consumers.get(t, ()))
            new_nodes = step - nodes
            nodes |= new_nodes
            frontier = set()
            for i in new_nodes:
                node = index.graph.node[i]
                for t in [*node.input, *node.output]:
                    if t and t not in tensors:
                        tensors.add(t)
                        frontier.add(t)
        return tensors, {index.node_label(i) for i in nodes}

    def nodes(self, *, grep: str | None = None, around: str | None = None,
              hops: int = 1) -> list[NodeRow]:
        """Nodes whose name, op, module, inputs or outputs match ``grep`` (a case-insensitive
        regular expression) and, with ``around``, that lie within ``hops`` of that tensor."""
        rows = self.node_rows()
        if around is not None:
            _, near = self.around(around, hops)
            rows = [r for r in rows if r.graph == "main" and r.name in near]
        if grep:
            rx = _compile(grep)
            rows = [r for r in rows if any(rx.search(s) for s in
                                           (r.name, r.op, r.module or "", *r.inputs, *r.outputs))]
        return Rows(rows)

    def tensors(self, *, grep: str | None = None, around: str | None = None,
                hops: int = 1) -> list[TensorRow]:
        """Tensors whose name or framework names match ``grep`` and, with ``around``, that lie
        within ``hops`` of that tensor. Types are looked up only for the rows returned."""
        names = self.tensor_names()
        if around is not None:
            near, _ = self.around(around, hops)
            names = [n for n in names if n in near]
        if grep:
            rx = _compile(grep)
            fw = self.framework_names()
            names = [n for n in names if rx.search(n) or any(rx.search(f) for f in fw.get(n, []))]
        return Rows(self.tensor_row(n) for n in names)

    def find(self, name: str) -> TensorRow:
        """The tensor a user-given name means (exact, name map, TF ``:0``, node, module path).

        Raises:
            NotFoundError / AmbiguousNameError: as :meth:`Selector.resolve`.
        """
        return self.tensor_row(self.selector.resolve(name))


def _compile(pattern: str) -> re.Pattern[str]:
    from .errors import UsageError

    try:
        return re.compile(pattern, re.IGNORECASE)
    except re.error as exc:
        raise UsageError(f"--grep pattern {pattern!r} is not a valid regular expression ({exc}); "
                         "escape special characters with a backslash or use plain text") from None


# ------------------------------------------------------------------------------ text tables
def _shape(shape: list[int | str | None] | None) -> str:
    if shape is None:
        return "?"
    return "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(header[k]), *(len(r[k]) for r in rows)) if rows else len(header[k])
              for k in range(len(header))]
    fmt = [h.ljust(w) for h, w in zip(header, widths, strict=True)]
    lines = ["  ".join(fmt).rstrip()]
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return lines


def _cut(items: list[str], n: int = 4) -> str:
    text = ", ".join(items[:n])
    return text + (f", +{len(items) - n}" if len(items) > n else "") if items else "-"


def nodes_text(rows: list[NodeRow], *, total: int | None = None) -> str:
    """Node rows as a text table (``total``: rows before a limit)."""
    nested = any(r.graph != "main" for r in rows)
    header = ["node", "op", "inputs", "outputs", "module"] + (["graph"] if nested else [])
    body = [[r.name, r.op, _cut(r.inputs), _cut(r.outputs), r.module or "-"]
            + ([r.graph] if nested else []) for r in rows]
    return "\n".join(_table(header, body) + _more(len(rows), total, "nodes"))


def tensors_text(rows: list[TensorRow], *, total: int | None = None) -> str:
    """Tensor rows as a text table (``total``: rows before a limit)."""
    header = ["tensor", "dtype", "shape", "kind", "producer", "consumers", "framework names"]
    body = [[r.name, r.dtype or "?", _shape(r.shape), r.kind, r.producer or "-",
             _cut(r.consumers, 3), _cut(r.framework_names, 3)] for r in rows]
    return "\n".join(_table(header, body) + _more(len(rows), total, "tensors"))


def _more(shown: int, total: int | None, what: str) -> list[str]:
    if total is None or total <= shown:
        return [f"({shown} {what})"]
    return [f"({shown} of {total} {what} shown; --limit 0 lists all)"]
