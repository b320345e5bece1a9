"""``bypass``: remove a node and let every reader of its output read one of its inputs.

The node's output must have the dtype of the bypassed input (input ``0`` unless told) and a shape
the readers cannot tell apart: equal where both are known, or — when the input's shape only
broadcasts to the output's — every reader is a broadcasting elementwise op whose result keeps its
shape. Its other outputs (Dropout's mask) must be unused. Several nodes (a Dropout -> Identity ->
Cast chain) are removed in one call, checked all together before anything changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import onnx

from ..errors import RewriteError, UsageError
from ..index import GraphIndex, Use
from ..io import Model, as_model
from ..record import BypassRecord, add_rewrite
from ..select import Selector, drop_missing
from ..types import TypeOracle, dtype_name
from ._edges import check_types, rewire
from ._proto import _BROADCAST
from .rename import _rename_tensors


@dataclass(frozen=True)
class BypassResult:
    """What ``bypass`` did.

    Attributes:
        removed: labels of the removed nodes (their names, ``OpType#i`` when unnamed), in the
            order given.
        rerouted: main-graph nodes that now read a bypassed input instead of a removed node's
            output (nodes whose nested bodies read it count), in node order.
        rerouted_outputs: graph outputs that now carry the bypassed input under its own name
            (only when that input is a graph input, an initializer or already an output; else the
            graph output keeps its name and the input's tensor is renamed to it).
    """

    removed: list[str]
    rerouted: list[str]
    rerouted_outputs: list[str]


def _find_node(index: GraphIndex, name: str) -> int:
    """The main-graph node named ``name``, or else the producer of the tensor ``name`` names
    (any selector: ONNX, TF ':0', torch module path)."""
    i = index.node_names.get(name)
    op, sep, pos = name.rpartition("#")  # an unnamed node's label, as results and records give it
    if i is None and sep and pos.isdigit() and int(pos) < len(index.graph.node):
        node = index.graph.node[int(pos)]
        if node.op_type == op and not node.name:
            return int(pos)
    if i is None:
        return Selector(index).resolve_node(name)
    if sum(1 for n in index.graph.node if n.name == name) > 1:
        raise UsageError(f"several nodes are named '{name}'; rename them apart first (rename --nodes)")
    return i


def _static(shape: Sequence[int | str | None] | None) -> tuple[int, ...] | None:
    if shape is None or not all(isinstance(d, int) for d in shape):
        return None
    return tuple(int(d) for d in shape)  # type: ignore[arg-type]


def _broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    if len(a) < len(b):
        a, b = b, a
    b = (1,) * (len(a) - len(b)) + b
    out = []
    for x, y in zip(a, b, strict=True):
        if x != y and 1 not in (x, y):
            return None
        out.append(max(x, y) if 1 in (x, y) else x)
    return tuple(out)


def _broadcast_hides(index: GraphIndex, oracle: TypeOracle, out: str, src_shape: tuple[int, ...],
                     out_shape: tuple[int, ...], uses: list[Use]) -> str | None:
    """None when every reader of ``out`` is a broadcasting elementwise op whose result shape is
    the same whether it reads ``out`` or the bypassed input; else why not."""
    if _broadcast(src_shape, out_shape) != out_shape:
        return f"{list(src_shape)} does not broadcast to {list(out_shape)}"
    if out in index.outputs:
        return f"'{out}' is a graph output, whose shape would change"
    for use in uses:
        node = index.graph.node[use.node]
        if use.inner is not None or node.op_type not in _BROADCAST or node.domain not in ("", "ai.onnx"):
            return f"reader '{index.node_label(use.node)}' ({node.op_type}) does not broadcast"
        shapes: list[tuple[int, ...]] = []
        for name in node.input:
            s = _static(oracle.shape(name)) if name != out else out_shape
            if s is None:
                return f"reader '{index.node_label(use.node)}' has an input of unknown shape"
            shapes.append(s)
        with_src = [src_shape if n == out else s for n, s in zip(node.input, shapes, strict=True)]
        full, bypassed = shapes[0], with_src[0]
        for s in shapes[1:]:
            full = _broadcast(full, s) or ()
        for s in with_src[1:]:
            bypassed = _broadcast(bypassed, s) or ()
        if full != bypassed:
            return f"reader '{index.node_label(use.node)}' would give shape {list(bypassed)}"
    return None


def bypass(
    model: Model | onnx.ModelProto,
    nodes: str | Sequence[str],
    /,
    *,
    input: int = 0,  # noqa: A002 - the CLI flag is --input
) -> BypassResult:
    """Remove ``nodes`` (node names); readers of each one's output read its input ``input``.
    Mutates model.

    Every reader moves: main-graph nodes, nodes inside If/Loop/Scan bodies and graph outputs. A
    graph output keeps its name when the bypassed input is made by a node (that tensor is renamed
    to the output's name); otherwise the output is rerouted to the input's name. For a chain, the
    nodes may be given in any order; each reads what the removed ones before it passed on.

    Before:  conv -> a -> Dropout -> d -> Identity -> i -> {fc, <output i>}
    After (nodes=[Dropout, Identity]):  conv -> i -> {fc, <output i>}

    O(nodes + edges).

    Raises:
        NotFoundError: a node name does not exist (did-you-mean).
        UsageError: no node, a node named twice, ``input`` out of range or empty.
        RewriteError: dtypes differ, shapes differ in a way the readers would see, another output
            of the node is used, or the output would clash with an existing graph output.
    """
    m = as_model(model)
    proto = m.proto
    names = [nodes] if isinstance(nodes, str) else list(nodes)
    if not names:
        raise UsageError("bypass needs at least one node name")
    if len(set(names)) != len(names):
        raise UsageError(f"a node is named twice in {names}; name each node once")
    if input < 0:
        raise UsageError(f"input must be >= 0, got {input}")
    index = GraphIndex(proto)
    oracle = TypeOracle(index)
    positions = [_find_node(index, n) for n in names]
    if len(set(positions)) != len(positions):
        raise UsageError(f"{names} name one node twice; name each node once")
    names = [index.node_label(i) for i in positions]
    removed = set(positions)
    subst: dict[str, str] = {}  # removed output -> tensor its readers read instead
    for name, i in sorted(zip(names, positions, strict=True), key=lambda p: p[1]):
        node = index.graph.node[i]
        if input >= len(node.input) or not node.input[input]:
            raise UsageError(
                f"node '{name}' ({node.op_type}) has no input {input} (it has "
                f"{len(node.input)}: {list(node.input)}); pick another --input"
            )
        if not node.output or not node.output[0]:
            raise RewriteError(f"node '{name}' has no output to bypass")
        src, out = node.input[input], node.output[0]
        for extra in node.output[1:]:
            if extra and (extra in index.outputs or any(
                    u.node not in removed for u in index.consumers.get(extra, ()))):
                raise RewriteError(
                    f"node '{name}' output '{extra}' is used; only nodes whose other outputs are "
                    "unused can be bypassed"
                )
        what = f"cannot bypass node '{name}' ({node.op_type})"
        src_type, out_type = oracle.elem_type(src), oracle.elem_type(out)
        if not src_type or not out_type:
            unknown = src if not src_type else out
            raise RewriteError(
                f"{what}: the dtype of '{unknown}' is unknown; add value_info for it or run shape "
                "inference on the model"
            )
        if src_type != out_type:
            raise RewriteError(
                f"{what}: its output '{out}' is {dtype_name(out_type)} but input {input} '{src}' "
                f"is {dtype_name(src_type)}; bypass only nodes that keep the dtype"
            )
        src_shape, out_shape = oracle.shape(src), oracle.shape(out)
        try:
            check_types(what, src, out, src_type, out_type, src_shape, out_shape)
        except RewriteError:
            a, b = _static(src_shape), _static(out_shape)
            uses = [u for u in index.consumers.get(out, ()) if u.node not in removed]
            why = "shapes not fully known" if a is None or b is None else \
                _broadcast_hides(index, oracle, out, a, b, uses)
            if why is not None:
                raise RewriteError(
                    f"{what}: input '{src}' has shape {src_shape} but output '{out}' has "
                    f"{out_shape} ({why}); bypass only shape-preserving nodes"
                ) from None
        subst[out] = subst.get(src, src)
    # every removed output's final source (a chain collapses onto its first input)
    final = {out: _final(subst, out) for out in subst}
    renames: dict[str, str] = {}  # source tensor -> graph output name it takes over
    out_positions: list[tuple[int, str]] = []
    for k, vi in enumerate(proto.graph.output):
        if vi.name not in final:
            continue
        src = final[vi.name]
        named_by_node = src in index.producer and index.producer[src] not in removed
        if named_by_node and src not in index.outputs and src not in renames:
            renames[src] = vi.name
        else:
            if src in index.outputs or src in renames:
                raise RewriteError(
                    f"graph output '{vi.name}' would become '{src}', which is already a graph "
                    f"output; keep node '{names[0]}' or remove one output first"
                )
            out_positions.append((k, src))
    moves = [(u, final[out]) for out in final for u in index.consumers.get(out, ())
            if u.node not in removed]

    # ------------------------------------------------------------------ mutate (all checked)
    touched: set[str] = set()
    for use, src in moves:
        touched.update(rewire(index, [use], src))
    rerouted = [index.node_label(i) for i in range(len(index.graph.node))
                if index.node_label(i) in touched]
    rerouted_outputs: list[str] = []
    for k, src in out_positions:
        rerouted_outputs.append(proto.graph.output[k].name)
        proto.graph.output[k].name = src
    dead = set(final)
    keep = [vi for vi in proto.graph.value_info if vi.name not in dead]
    if len(keep) != len(proto.graph.value_info):
        del proto.graph.value_info[:]
        proto.graph.value_info.extend(keep)
    # name-map entries of removed outputs go (before a source takes over an output's name, when
    # _rename_tensors moves the source's entries to that name)
    drop_missing(proto, lambda name: name not in dead)
    if renames:  # positions are unchanged so far: the removed nodes are deleted last
        _rename_tensors(GraphIndex(proto), renames)
    for i in sorted(removed, reverse=True):
        del proto.graph.node[i]
    add_rewrite(proto, BypassRecord(removed=tuple(names), input=input, rerouted=tuple(rerouted),
                                    rerouted_outputs=tuple(rerouted_outputs)))
    return BypassResult(names, rerouted, rerouted_outputs)


def _final(subst: dict[str, str], name: str) -> str:
    seen = 0
    while name in subst and seen <= len(subst):
        name = subst[name]
        seen += 1
    return name
