"""Reading a pattern (or a replacement): an ``.onnx`` file, ONNX text (a model with its header or
a bare graph), bytes or inline (``onnx-base64:``), checked: every node reads names defined
before it, no name made twice, the outputs computed by nodes, every node needed by an output."""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import AttributeProto, numpy_helper

from ..errors import InvalidModelError, NotFoundError
from ..index import iter_graphs

__all__ = ["INLINE_PREFIX", "Pattern", "graph_constant", "load_pattern", "pattern_bytes"]

INLINE_PREFIX = "onnx-base64:"
"""A pattern given inline: this prefix and the base64 of a serialized ModelProto (how a rewrite
record stores a pattern, so that it replays without the file)."""
_DEFAULT = ("", "ai.onnx")


@dataclass(frozen=True)
class Pattern:
    """A pattern (or replacement) graph, checked.

    Attributes:
        model: the graph as a model (opset imports as given; a bare graph has none, the host's
            are used).
        inputs: the graph inputs (initializers listed as inputs excluded), in order.
        outputs: the graph outputs, in order.
        constants: tensor name -> value of every initializer and Constant output.
        nodes: positions in ``model.graph.node`` of the nodes that are matched (every node but
            the Constant ones).
        producer: tensor name -> (node position, output slot) of the matched nodes' outputs.
        any_constant: constants that match any constant of their dtype and rank.
        label: how messages name it (the file name).
    """

    model: onnx.ModelProto
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    constants: Mapping[str, np.ndarray]
    nodes: tuple[int, ...]
    producer: Mapping[str, tuple[int, int]]
    any_constant: frozenset[str] = frozenset()
    label: str = "pattern"
    has_opsets: bool = True

    @property
    def graph(self) -> onnx.GraphProto:
        return self.model.graph

    def node(self, i: int) -> onnx.NodeProto:
        return self.model.graph.node[i]


def pattern_bytes(pattern: Pattern) -> str:
    """``pattern`` inline (:data:`INLINE_PREFIX` + base64 of its model): what a record stores."""
    data = pattern.model.SerializeToString(deterministic=True)
    return INLINE_PREFIX + base64.b64encode(data).decode("ascii")


def _parse(source: str | Path | bytes | onnx.ModelProto | onnx.GraphProto,
           what: str) -> tuple[onnx.ModelProto, str, bool]:
    """(model, label, whether it carries opset imports) of a pattern source."""
    if isinstance(source, onnx.ModelProto):
        return source, source.graph.name or what, True
    if isinstance(source, onnx.GraphProto):
        return onnx.helper.make_model(source, opset_imports=[]), source.name or what, False
    label = what
    if isinstance(source, str) and source.startswith(INLINE_PREFIX):
        try:
            data = base64.b64decode(source[len(INLINE_PREFIX):], validate=True)
        except ValueError:
            raise InvalidModelError(f"the inline {what} is not base64; give the record the verb "
                                    "wrote") from None
    elif isinstance(source, bytes):
        data = source
    else:
        path = Path(source)
        label = path.name
        if not path.is_file():
            raise NotFoundError(f"{what} file '{source}' not found; give an .onnx file or a file "
                                "in the ONNX text syntax")
        data = path.read_bytes()
    text: str | None = None
    try:
        decoded = data.decode("utf-8")
        if decoded.strip() and not decoded.lstrip().startswith("\x08"):
            text = decoded
    except UnicodeDecodeError:
        text = None
    if text is not None and ("{" in text and ("=>" in text or "<" in text)):
        stripped = text.lstrip()
        try:
            if stripped.startswith("<"):
                return onnx.parser.parse_model(text), label, True
            graph = onnx.parser.parse_graph(text)
        except Exception as exc:  # noqa: BLE001 - the parser raises its own types
            first = _parse_error(exc)
            raise InvalidModelError(f"{what} '{label}' is not valid ONNX text ({first}); write a "
                                    "graph as onnx.parser.parse_graph reads it, or a model with "
                                    "its <ir_version, opset_import> header") from None
        return onnx.helper.make_model(graph, opset_imports=[]), label, False
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception:  # noqa: BLE001 - protobuf's DecodeError and friends
        model = onnx.ModelProto()
    if not model.graph.node and not (what == "replacement" and model.graph.output):
        raise InvalidModelError(f"{what} '{label}' is neither an ONNX model with nodes nor ONNX "
                                "text; give an .onnx file or a graph in the ONNX text syntax")
    return model, label, True


def _parse_error(exc: Exception) -> str:
    """The parser's message in a few words: where, and what it expected."""
    raw = exc.args[0] if exc.args else exc
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    kept = [ln for ln in lines if not ln.startswith("Error context")]
    return " ".join(kept)[:160] or "syntax error"


def _constant_value(node: onnx.NodeProto) -> np.ndarray | None:
    """The value of a Constant node (any of its value attributes), or None."""
    for attr in node.attribute:
        if attr.name == "value" and attr.type == AttributeProto.TENSOR:
            return numpy_helper.to_array(attr.t)
        if attr.name in ("value_float", "value_int", "value_floats", "value_ints"):
            value = onnx.helper.get_attribute_value(attr)
            dtype = np.float32 if "float" in attr.name else np.int64
            return np.array(value, dtype=dtype)
    return None


def graph_constant(graph: onnx.GraphProto, name: str) -> np.ndarray | None:
    """The value of constant ``name`` of ``graph`` (an inline initializer or a Constant
    node's output), else None. O(initializers + nodes)."""
    for t in graph.initializer:
        if t.name == name:
            return None if t.data_location == onnx.TensorProto.EXTERNAL else \
                numpy_helper.to_array(t)
    for node in graph.node:
        if node.op_type == "Constant" and name in node.output:
            return _constant_value(node)
    return None


def load_pattern(source: str | Path | bytes | onnx.ModelProto | onnx.GraphProto, *,
                 any_constant: Iterable[str] = (), what: str = "pattern") -> Pattern:
    """Read and check a pattern: a path (``.onnx`` or ONNX text), bytes, inline
    (:data:`INLINE_PREFIX`), a ``ModelProto`` or a ``GraphProto``. O(pattern size).

    Raises:
        NotFoundError: no such file, or an ``any_constant`` name the pattern lacks.
        InvalidModelError: not ONNX, no node, a node reading an undefined name, a tensor made
            twice, a node that computes nothing the outputs need, an output that is an input, a
            pattern input no node reads.
    """
    model, label, has_opsets = _parse(source, what)
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    constants: dict[str, np.ndarray] = {}
    for t in g.initializer:
        try:
            constants[t.name] = numpy_helper.to_array(t)
        except Exception:  # noqa: BLE001 - external or broken data
            raise InvalidModelError(f"{what} '{label}' initializer '{t.name}' cannot be read; "
                                    "store its value inline") from None
    inputs = tuple(vi.name for vi in g.input if vi.name not in inits)
    defined = set(inputs) | set(constants)
    producer: dict[str, tuple[int, int]] = {}
    nodes: list[int] = []
    for i, node in enumerate(g.node):
        for name in node.input:
            if name and name not in defined:
                raise InvalidModelError(f"{what} '{label}' node '{node.name or node.op_type}' "
                                        f"reads '{name}', which nothing before it defines; "
                                        "define it as a graph input or initializer")
        value = _constant_value(node) if node.op_type == "Constant" and node.domain in _DEFAULT \
            else None
        for k, out in enumerate(node.output):
            if not out:
                continue
            if out in defined:
                raise InvalidModelError(f"{what} '{label}' defines '{out}' twice; rename one")
            defined.add(out)
            if value is not None:
                constants[out] = value
            else:
                producer[out] = (i, k)
        if value is None:
            nodes.append(i)
    outputs = tuple(vi.name for vi in g.output)
    if not outputs:
        raise InvalidModelError(f"{what} '{label}' has no graph output; declare its outputs")
    handed = set(inputs) | set(constants) if what == "replacement" else set()
    for out in outputs:  # R may hand an input or a constant on (an Identity owns it)
        if out not in producer and out not in handed:
            raise InvalidModelError(f"{what} '{label}' output '{out}' is not computed by one of "
                                    f"its nodes; a {what}'s outputs must be node outputs")
    _check_reaches(g, nodes, producer, [o for o in outputs if o in producer], what, label)
    if what == "pattern":  # R may leave an input unread; a P input must bind to a tensor
        read = {name for node in g.node for name in node.input}
        unread = [name for name in inputs if name not in read]
        if unread:
            inner = any(name == unread[0] for sub in iter_graphs(g) for node in sub.node
                        for name in node.input)
            why = ("is read only inside a body (If/Loop/Scan), which a match compares whole "
                   "and cannot bind; a pattern's inputs must be read by its nodes outside "
                   "bodies") if inner else "is read by none of its nodes, so a match cannot " \
                "bind it; remove it"
            raise InvalidModelError(f"{what} '{label}' input '{unread[0]}' {why}")
    wanted = frozenset(any_constant)
    missing = sorted(wanted - set(constants))
    if missing:
        raise NotFoundError(f"--any-constant '{missing[0]}' is not a constant of {what} "
                            f"'{label}'; its constants are {sorted(constants)[:8]}")
    return Pattern(model, inputs, outputs, constants, tuple(nodes), producer, wanted, label,
                   has_opsets)


def _check_reaches(g: onnx.GraphProto, nodes: Sequence[int],
                   producer: Mapping[str, tuple[int, int]], outputs: Sequence[str],
                   what: str, label: str) -> None:
    """Refuse a pattern node no output depends on (it would match anything unchecked)."""
    seen: set[int] = set()
    todo = [producer[o][0] for o in outputs]
    while todo:
        i = todo.pop()
        if i in seen:
            continue
        seen.add(i)
        todo.extend(producer[n][0] for n in g.node[i].input if n in producer)
    dead = [i for i in nodes if i not in seen]
    if dead:
        node = g.node[dead[0]]
        raise InvalidModelError(f"{what} '{label}' node '{node.name or node.op_type}' computes "
                                "nothing its outputs need; remove it or make it an output")
