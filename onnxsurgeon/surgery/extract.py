"""extract: cut a model down to the dependency closure of some tensors.

Protobuf-native: the model is pruned in place (repeated fields lose runs of elements or are
rebuilt from the kept ones, whichever is cheaper); no Python object is made per node beyond the
index and one walk over the kept nodes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import compress, count
from operator import attrgetter, not_

import onnx

from ..edit import Edit
from ..errors import InvalidModelError, RewriteError, UsageError, name_list
from ..index import GraphIndex, body_captures, has_subgraphs, subgraphs
from ..io import Model, as_model
from ..names import NameAllocator
from ..record import ExtractRecord, add_rewrite
from ..select import Selector, drop_missing, is_selector, name_map
from ..session import indexed
from ..types import TypeOracle, is_complete, known_value_info
from ._edgewalk import propagate_edges, walk_edges
from ._proto import (
    boundary_value_info,
    infer_subset,
    propagate_types,
)
from ._shown import Shown


@dataclass(frozen=True)
class ExtractResult(Shown):
    """What :func:`extract` did.

    Attributes:
        outputs: the graph outputs of the result (ONNX tensor names, in the order asked).
        inputs: the graph inputs of the result (kept original inputs first, then stop tensors).
        stops: the stop tensors that became graph inputs.
        kept_nodes: main-graph nodes kept.
        removed_nodes: main-graph nodes dropped.
        removed_initializers: initializer names dropped, in their original order.
    """

    outputs: list[str]
    inputs: list[str]
    stops: list[str]
    kept_nodes: int
    removed_nodes: int
    removed_initializers: list[str]

    def record(self) -> ExtractRecord:
        """The rewrite record of this extract (the entry the verb adds to the model's log)."""
        return ExtractRecord(outputs=tuple(self.outputs), inputs=tuple(self.stops))


def _unique(names: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(names))


_WALK_FIELDS = attrgetter("input", "attribute")


def _walk(
    index: GraphIndex, targets: Sequence[str], stops: set[str]
) -> tuple[list[int], set[str]]:
    """Main-graph nodes needed for ``targets`` (ascending) and every tensor name reached.

    Same semantics as :func:`onnxsurgeon.closure.closure` (captures of nested bodies followed,
    ``stops`` cut the walk), written node-centric and tight because extract is the hot path: one
    read of ``node.input`` per kept node, a few set/dict operations per edge. Iterative,
    O(kept nodes + edges).
    """
    producer = index.producer
    leaves = set(index.initializers)
    leaves.update(index.inputs)
    leaves.update(stops)
    node_field = index.graph.node
    seen: set[str] = {""}
    kept: set[int] = set()
    stack: list[int] = []

    def visit(names: Iterable[str]) -> None:
        for name in names:
            if name in seen:
                continue
            seen.add(name)
            if name in leaves:
                continue
            j = producer.get(name)
            if j is None:
                raise InvalidModelError(
                    f"tensor '{name}' is never produced and is not an input or initializer; "
                    "repair the model (add its producer or declare it as a graph input)"
                )
            if j not in kept:
                kept.add(j)
                stack.append(j)

    visit(targets)
    pop = stack.pop
    add, get = seen.add, producer.get
    fields = _WALK_FIELDS
    while stack:
        node = node_field[pop()]
        ins, attrs = fields(node)
        for name in ins:  # inlined visit(): this loop runs once per edge
            if name in seen:
                continue
            add(name)
            if name in leaves:
                continue
            j = get(name)
            if j is None:
                visit((name,))  # raises
            elif j not in kept:
                kept.add(j)
                stack.append(j)
        if attrs and has_subgraphs(node):
            visit([captured for captured, _ in body_captures(node)])
    seen.discard("")
    return sorted(kept), seen


def _rank_zero(vi: onnx.ValueInfoProto) -> bool:
    tt = vi.type.tensor_type
    return vi.type.HasField("tensor_type") and tt.HasField("shape") and len(tt.shape.dim) == 0


def _boundary(
    vi: onnx.ValueInfoProto | None, name: str, role: str, fix: str
) -> onnx.ValueInfoProto:
    """The ValueInfo of a new graph input or output, or a RewriteError when it is not known."""
    if not is_complete(vi):
        what = "type" if vi is None or not vi.type.tensor_type.elem_type else "rank"
        raise RewriteError(
            f"{what} of {role} '{name}' is unknown (no value_info, shape inference cannot tell); "
            f"add value_info for '{name}' or {fix}"
        )
    assert vi is not None
    return boundary_value_info(vi, name)


def _drop_stale_names(proto: onnx.ModelProto) -> None:
    """Name-map entries of tensors the extract removed go too (only when there is a map)."""
    if not name_map(proto):
        return
    g = proto.graph
    live = {vi.name for vi in g.input} | {t.name for t in g.initializer}
    live |= {st.values.name for st in g.sparse_initializer}
    live |= {o for node in g.node for o in node.output}
    drop_missing(proto, live.__contains__)


def _called_functions(proto: onnx.ModelProto, kept: Sequence[int]) -> list[int] | None:
    """Positions of the local functions the kept nodes call: directly, from their nested bodies
    or through other functions. None when the model has no local functions (the usual case
    costs nothing). O(kept nodes + function nodes)."""
    functions = proto.functions
    if not functions:
        return None
    by_key = {(f.domain, f.name, f.overload): k for k, f in enumerate(functions)}
    nodes = proto.graph.node
    stack = [nodes[i] for i in kept]
    called: set[int] = set()
    while stack:
        node = stack.pop()
        k = by_key.get((node.domain, node.op_type, node.overload))
        if k is not None and k not in called:
            called.add(k)
            stack.extend(functions[k].node)
        for sub in subgraphs(node):
            stack.extend(sub.node)
    return sorted(called)


def extract(
    model: Model | onnx.ModelProto, outputs: Sequence[str], /, *, inputs: Sequence[str] = ()
) -> ExtractResult:
    """Turn ``model`` into the standalone model computing exactly ``outputs``. Mutates model.

    ``inputs`` are stop tensors: the walk back from ``outputs`` ends there and they become graph
    inputs typed from value_info or shape inference (unknown dims get symbolic names). Original
    graph inputs still needed stay inputs in their original order; nodes, initializers, graph
    inputs and value_info nobody needs are dropped. Tensors read inside If/Loop/Scan bodies are
    part of the closure. Opset imports, metadata and doc strings are kept; local functions are
    kept when a kept node calls them (directly, from a body or through another function).

    Before:  x -> conv -> act -> fc -> logits;  act -> side -> side_out
    After:   x -> conv -> act            (extract(m, ["act"]))
    After:   act -> fc -> logits         (extract(m, ["logits"], inputs=["act"]))

    O(nodes + edges); shape inference runs only for outputs or stops whose type is unknown.

    Args:
        model: the model to cut (a :class:`Model` or a bare ``ModelProto``).
        outputs: tensors (user names, resolved with :class:`Selector`) the result computes; a
            selector (``glob:``, ``re:``, ``op:``) gives every tensor it matches.
        inputs: stop tensors that become graph inputs (selectors as for ``outputs``).

    Returns:
        An :class:`ExtractResult`.

    Raises:
        NotFoundError / AmbiguousNameError: a name does not resolve.
        UsageError: no outputs, an output that is also a stop, a stop not on any path.
        RewriteError: the type of a stop tensor or an output cannot be determined.
    """
    outputs = name_list(outputs, "extract(outputs=...)")
    inputs = name_list(inputs, "extract(inputs=...)")
    proto = as_model(model).proto
    if not outputs:
        raise UsageError("extract needs at least one output tensor; pass outputs=[...]")
    index = indexed(model)  # reuses load's validated producer map when provably fresh
    selector = Selector(index)
    outs = _unique([t for n in outputs for t in _tensors(selector, n)])
    stops = _unique([t for n in inputs for t in _tensors(selector, n)])
    both = [s for s in stops if s in set(outs)]
    if both:
        raise UsageError(
            f"tensor '{both[0]}' is both an output and a stop input; drop it from one of the lists"
        )
    stop_set = set(stops)
    # ints first (the dataflow graph load recorded, when the model is unchanged since), names
    # otherwise; the int walk's `reached` omits names produced inside the closure (not needed
    # below except by infer_subset, which gets them added)
    walked = walk_edges(index, outs, stop_set)
    kept, reached = walked if walked is not None else _walk(index, outs, stop_set)
    kept_set = set(kept)
    producer = index.producer
    missing = [s for s in stops if s not in reached]
    if missing:
        raise UsageError(
            f"stop tensor '{missing[0]}' is not on the path to outputs {outs}; drop it from inputs"
        )

    # ---- types of the new boundary (all computed before anything is mutated); one pass over
    # value_info finds the boundary's entries and the entries to keep
    graph = proto.graph
    boundary = set(outs) | stop_set
    found: dict[str, onnx.ValueInfoProto] = {}
    keep_vi: list[int] = []
    for k, vi in enumerate(graph.value_info):
        name = vi.name
        if name in boundary:
            found.setdefault(name, vi)
        elif name in reached or producer.get(name, -1) in kept_set:
            keep_vi.append(k)  # read by a kept node, or an unread output of a kept node
    oracle: TypeOracle | None = None
    stop_infos: dict[str, onnx.ValueInfoProto] = {}
    for s in stops:
        vi = known_value_info(index, s, found)
        if vi is None:
            oracle = oracle or TypeOracle(index)
            vi = oracle.value_info(s)
        stop_infos[s] = _boundary(vi, s, "stop tensor", "stop at a typed tensor")
    out_infos: dict[str, onnx.ValueInfoProto | None] = {}
    for o in outs:
        vi = known_value_info(index, o, found)
        if vi is None and oracle is not None:
            vi = oracle.value_info(o)
        out_infos[o] = vi
    unknown = [o for o, vi in out_infos.items() if not is_complete(vi)]
    if unknown:
        # cheap forward pass first (elementwise / broadcasting / MatMul closures), onnx shape
        # inference over the closure only when that cannot tell
        quick = propagate_edges(index, kept, stop_infos, unknown)
        if quick is None:
            quick = propagate_types(index, kept, stop_infos, unknown)
        if quick is None and walked is not None:
            reached |= {name for name, j in producer.items() if j in kept_set}
        out_infos.update(quick if quick is not None
                         else infer_subset(index, kept, reached, stop_infos, unknown))
        for o in [o for o in unknown if not is_complete(out_infos.get(o))]:
            # contrib-op outputs: onnx inference cannot type them; the oracle asks onnxruntime
            oracle = oracle or TypeOracle(index)
            prior, vi = out_infos.get(o), oracle.value_info(o)
            if prior is not None and vi is not None and _rank_zero(vi):
                # onnxruntime reports shape [] for an unknown rank too (Loop outputs...): when
                # onnx inference already said "rank unknown", [] is not evidence of a scalar
                vi = None
            out_infos[o] = vi or prior
    new_outputs = [
        _boundary(out_infos[o], o, "output", "extract a typed tensor") for o in outs
    ]

    # a kept node may also produce a stop tensor (multi-output node): that output gets a fresh
    # unused name, since the stop is now a graph input
    renamed_outputs: list[tuple[int, int, str]] = []
    names: NameAllocator | None = None
    for s in stops:
        i = index.producer.get(s)
        if i is not None and i in kept_set:
            names = names or NameAllocator.for_index(index)
            slot = list(graph.node[i].output).index(s)
            renamed_outputs.append((i, slot, names.fresh(f"{s}__unused")))

    inits = index.initializer_names()
    kept_names = reached - stop_set if stop_set else reached  # C-level passes below
    flags = list(map(kept_names.__contains__, inits))
    keep_inits = list(compress(count(), flags))
    removed_inits = list(compress(inits, map(not_, flags)))
    keep_sparse = [
        k for k, st in enumerate(graph.sparse_initializer)
        if st.values.name in reached and st.values.name not in stop_set
    ]
    new_inputs: list[onnx.ValueInfoProto] = []
    for vi in graph.input:
        if vi.name in reached:
            new_inputs.append(stop_infos.pop(vi.name, vi))
    new_inputs.extend(stop_infos[s] for s in stops if s in stop_infos)

    keep_functions = _called_functions(proto, kept)
    stop_uses = ({s: [u for u in index.uses_of(s) if u.node in kept_set] for s in stops}
                 if index.known_int_graph() is not None else {})

    # ---- mutate
    n_nodes = len(graph.node)
    e = Edit(index)
    for s, uses in stop_uses.items():  # the readers of a stop read the graph input now
        e.rewire(uses, s)
    for i, slot, fresh in renamed_outputs:  # a kept node's output that was a stop
        e.rename_output(i, graph.node[i].output[slot], fresh)
    e.keep_nodes(kept)
    e.keep_initializers(keep_inits, sparse=keep_sparse)
    e.keep_value_info(keep_vi)
    if keep_functions is not None:
        e.keep_functions(keep_functions)
    e.set_inputs(new_inputs)
    input_copies = list(graph.input)
    e.set_outputs(new_outputs)
    _drop_stale_names(proto)
    e.hand_on(model)
    result = ExtractResult(
        outputs=outs,
        inputs=[vi.name for vi in input_copies],
        stops=stops,
        kept_nodes=len(kept),
        removed_nodes=n_nodes - len(kept),
        removed_initializers=removed_inits,
    )
    add_rewrite(proto, result.record())
    return result


def _tensors(selector: Selector, name: str) -> list[str]:
    """The tensor a plain name means, or every main-graph tensor a selector matches."""
    return selector.find_tensors(name) if is_selector(name) else [selector.resolve(name)]
