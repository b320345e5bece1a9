"""copy: duplicate the closure of some tensors inside the same model, with new names.

Sharing is decided once, in one rename map, before anything is copied (the torch.fx
``graph_copy(val_map)`` idea): a name that maps to itself is shared, every other name is copied.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from itertools import chain, compress, islice, pairwise, repeat
from operator import attrgetter
from typing import Any, NamedTuple, cast

import onnx

from ..closure import closure
from ..edit import Edit
from ..errors import AmbiguousNameError, RewriteError, UsageError, name_list
from ..index import GraphIndex, NodeEdges, has_subgraphs, subgraphs
from ..io import Model, as_model
from ..names import NameAllocator
from ..record import CopyRecord, add_rewrite, as_record
from ..select import CALL_SEP, Selector, is_selector
from ..session import indexed
from ..types import TypeOracle, dtype_name, is_complete, known_value_info, renamed_value_info
from ._edgewalk import closure_edges
from ._proto import quick_value_info
from ._shown import Shown


class Weights(str, Enum):
    """How a copy treats the weights (initializers and Constant nodes) of its closure."""

    INDEPENDENT = "independent"
    """Every weight gets one new copy (tied weights stay tied within the copy)."""
    SHARED = "shared"
    """The copy reads the original weights; nothing is added."""

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class CopyResult(Shown):
    """Rename maps of :func:`copy` (original name -> copy name) and the copy's resolved options.

    Attributes:
        outputs: each requested tensor (its ONNX name) -> its copy (a new graph output).
        initializers: each copied initializer -> its copy (empty under ``Weights.SHARED``).
        nodes: each copied main-graph node name -> the copy's node name.
        tensors: every renamed main-graph tensor (node outputs and initializers) -> its copy.
        weights: the weights mode.
        prefix: the prefix of every new name.
        replace_inputs: original tensor -> tensor the copy reads instead (ONNX names; a stop
            tensor ``T`` is ``T -> T``).
        copied_nodes: main-graph nodes copied (node names need not be unique, so this can
            exceed ``len(nodes)``).
    """

    outputs: dict[str, str]
    initializers: dict[str, str]
    nodes: dict[str, str]
    tensors: dict[str, str]
    weights: Weights
    prefix: str
    replace_inputs: dict[str, str]
    copied_nodes: int

    def record(self) -> CopyRecord:
        """The rewrite record of this copy. Every copied name is ``prefix`` + the original, so
        the record lists only the names the allocator had to change (the copied nodes are the
        closure of the outputs, which verify recomputes: :func:`copied_names`)."""
        return CopyRecord(
            outputs=dict(self.outputs), prefix=self.prefix,
            initializers=_exceptions(self.initializers, self.prefix),
            nodes=_exceptions(self.nodes, self.prefix),
            copied={"nodes": self.copied_nodes, "initializers": len(self.initializers)},
            weights=self.weights.value, replace_inputs=dict(self.replace_inputs),
        )


def _oracle(index: GraphIndex) -> TypeOracle:
    """The type oracle with insert's and reroute's cheap pass first (forward propagation over
    the tensor's closure, on ints when there is an int graph) before onnx shape inference."""
    return TypeOracle(index, quick=lambda name: quick_value_info(index, name))


def _is_constant(node: onnx.NodeProto) -> bool:
    return node.op_type == "Constant" and node.domain in ("", "ai.onnx")


_INPUT_OUTPUT = attrgetter("input", "output")


class _Outputs(NamedTuple):
    """The outputs of some nodes, flat in node order ("" kept), and how many each node has
    (None when each has exactly one: then no list per node is ever made)."""

    flat: list[str]
    counts: list[int] | None

    def grouped(self) -> Iterable[Sequence[str]]:
        """Each node's outputs."""
        if self.counts is None:
            return zip(self.flat)
        at = iter(self.flat)
        return [list(islice(at, count)) for count in self.counts]

    def select(self, keep: list[bool]) -> _Outputs:
        """The outputs of the nodes ``keep`` marks."""
        if self.counts is None:
            return _Outputs(list(compress(self.flat, keep)), None)
        groups = list(compress(self.grouped(), keep))
        return _Outputs(list(chain.from_iterable(groups)), [len(g) for g in groups])

    def renamed(self, new: Mapping[str, str]) -> _Outputs:
        """The same outputs under the names ``new`` gives ("" stays "")."""
        get = new.get
        return _Outputs([get(out, "") for out in self.flat], self.counts)


def _outputs(index: GraphIndex, positions: list[int], ops: list[str] | None) -> _Outputs:
    """The outputs of main-graph node ``i`` for each ``i`` of ``positions``. Where their int
    graph ``ops`` (aligned with ``positions``) say every node has one output, they are read
    from the producer map (inverted at C speed) rather than from the proto. O(nodes)."""
    nodes = index.graph.node
    if ops is not None and "" not in ops:
        producer = index.producer
        # node -> its last output: its only one where ops[i] says it has one
        single = dict(zip(producer.values(), producer, strict=True))
        flat = list(map(single.get, positions))
        if None not in flat:
            return _Outputs(cast("list[str]", flat), None)
    nested = [list(nodes[i].output) for i in positions]
    counts = list(map(len, nested))
    return _Outputs(list(chain.from_iterable(nested)),
                    None if counts.count(1) == len(counts) else counts)


@dataclass(frozen=True)
class _Names:
    """The names a copy gets (:func:`_allocate`)."""

    initializers: dict[str, str]
    nodes: dict[str, str]
    tensors: dict[str, str]  # initializers first, then node outputs
    node_names: list[str]  # each copied node's new name, in order
    outputs: _Outputs  # the copied nodes' new outputs


def _allocate(
    names: NameAllocator, prefix: str, init_names: list[str], node_names: list[str],
    outputs: _Outputs,
) -> _Names:
    """The names of a copy: a fresh name for ``prefix`` + each original, allocated in this
    order: the initializers, then each node's name and outputs. In C when no prefixed name
    collides (:meth:`NameAllocator.claim`: then each name is its own answer). O(names)."""
    flat = outputs.flat
    out_names = [out for out in flat if out] if "" in flat else flat
    init_bases = [prefix + name for name in init_names]
    node_bases = [prefix + name for name in node_names]
    out_bases = [prefix + out for out in out_names]
    if names.claim(init_bases + node_bases + out_bases):
        init_map = dict(zip(init_names, init_bases, strict=True))
        tensor_map = dict(init_map)
        tensor_map.update(zip(out_names, out_bases, strict=True))
        new_outs = (_Outputs(out_bases, outputs.counts) if out_names is flat
                    else outputs.renamed(tensor_map))
        return _Names(init_map, dict(zip(node_names, node_bases, strict=True)), tensor_map,
                      node_bases, new_outs)
    fresh = names.fresh
    init_map = {name: fresh(base) for name, base in zip(init_names, init_bases, strict=True)}
    node_map: dict[str, str] = {}
    tensor_map = dict(init_map)
    for name, outs in zip(node_names, outputs.grouped(), strict=True):
        node_map[name] = fresh(prefix + name)
        for out in outs:
            if out:
                tensor_map[out] = fresh(prefix + out)
    return _Names(init_map, node_map, tensor_map, [node_map[name] for name in node_names],
                  outputs.renamed(tensor_map))


def _inputs_on_ints(
    index: GraphIndex, edges: NodeEdges, cl_nodes: list[int], cl_outs: _Outputs,
    copy_nodes: list[int], new_outs: _Outputs, mapping: Mapping[str, str],
    stops: Collection[str],
) -> list[list[str | None]]:
    """The inputs of each copied node in the copy, from the int graph's producer ids instead of
    re-reading input names: one table, indexed by id (leaf ids and -1 for "" by negative
    indexing), holds what a copy reads from each: a closure node's one output under its copy's
    name (shared Constants keep theirs), a stop's replacement, a leaf's copy or itself; None
    for a node with another number of outputs (a list holding None: rename by input name).
    O(nodes + leaves + edges of the copy)."""
    get = mapping.get
    node_field = index.graph.node
    table: list[str | None]
    if len(copy_nodes) == len(node_field) and new_outs.counts is None:  # every node, one each
        table = list(new_outs.flat)
    else:
        table = [None] * len(node_field)
        if len(copy_nodes) != len(cl_nodes):  # the Constants left shared keep their names
            for i, outs in zip(cl_nodes, cl_outs.grouped(), strict=True):
                if len(outs) == 1:
                    table[i] = outs[0]
        for i, outs in zip(copy_nodes, new_outs.grouped(), strict=True):
            if len(outs) == 1:
                table[i] = outs[0]
    for a in stops:  # the one kind of producer outside the closure a copied node reads
        j = index.producer.get(a)
        if j is not None and len(node_field[j].output) == 1:
            table[j] = get(a, a)
    leaves = edges.leaves
    depth = max((-k for k in leaves), default=1)  # ids -1 ("") to -depth
    tail: list[str | None] = [None] * depth
    tail[-1] = ""
    for k, name in leaves.items():
        tail[depth + k] = get(name, name)
    at, preds, starts = (table + tail).__getitem__, edges.preds, edges.starts
    if len(copy_nodes) == len(node_field):  # every node: one C-level pass over all reads
        reads = list(map(at, preds))
        return [reads[a:b] for a, b in pairwise(starts)]
    return [list(map(at, preds[starts[i]:starts[i + 1]])) for i in copy_nodes]


def copy(
    model: Model | onnx.ModelProto,
    outputs: Sequence[str],
    /,
    *,
    weights: Weights | str = Weights.INDEPENDENT,
    prefix: str = "copy/",
    replace_inputs: Mapping[str, str] | None = None,
    stop_at: Collection[str] = (),
) -> CopyResult:
    """Duplicate the closure of ``outputs`` inside ``model``; each copy becomes a graph output.
    Mutates model.

    New names are ``prefix`` + the original name (made unique by :class:`NameAllocator`). Graph
    inputs are shared. ``weights`` chooses whether initializers and Constant nodes are copied
    (external-data initializers are copied as references: same file, offset and length) or
    shared. ``replace_inputs`` ``{A: B}`` makes the copy read B wherever the original reads A (A
    and its upstream are not copied). ``stop_at`` tensors cut the closure: the copy reads the
    original's values there (``{T: T}`` in ``replace_inputs``, and so in the record). A torch
    module path that hands several tensors on copies all of them. Names inside nested
    If/Loop/Scan bodies are renamed consistently; local functions are shared.

    Before:  x -> conv -> act -> fc -> logits
    After:   x -> conv -> act -> fc -> logits
             x -> copy/conv -> copy/act -> copy/fc -> copy/logits   (new graph output)
    With stop_at=[act]:
             act -> copy/fc -> copy/logits

    O(nodes + edges) of the closure plus one pass over all names for the name allocator.

    Args:
        model: the model (a :class:`Model` or a bare ``ModelProto``).
        outputs: the tensors to copy (user names, resolved with :class:`Selector`; a module
            path with several outputs means all of them, a selector (``glob:``, ``re:``,
            ``op:``) every tensor it matches; so for ``replace_inputs`` keys and ``stop_at``).
        weights: ``Weights.INDEPENDENT`` (default) or ``Weights.SHARED`` (or their values).
        prefix: prefix of every new name.
        replace_inputs: tensor A -> tensor B read by the copy instead of A.
        stop_at: tensors where the closure is cut; the copy reads the originals' values.

    Returns:
        A :class:`CopyResult` with the rename maps.

    Raises:
        NotFoundError / AmbiguousNameError: a name does not resolve.
        UsageError: bad option, nothing to copy, a replaced or stop tensor not on the path.
        RewriteError: a replacement with another dtype, an output of unknown type.
    """
    outputs = name_list(outputs, "copy(outputs=...)")
    stop_names = name_list(stop_at, "copy(stop_at=...)")
    proto = as_model(model).proto
    try:
        mode = Weights(weights)
    except ValueError:
        raise UsageError(
            f"weights={weights!r} is not a weights mode; use one of {[w.value for w in Weights]}"
        ) from None
    if not outputs:
        raise UsageError("copy needs at least one output tensor; pass outputs=[...]")
    index = indexed(model)  # load's int dataflow graph rides along when the model is unchanged
    selector = Selector(index)
    outs = _resolve_outputs(selector, outputs)
    repl: dict[str, str] = {}
    for a, b in (replace_inputs or {}).items():  # several tensors may all read one
        for t in (selector.find_tensors(a) if is_selector(a) else [selector.resolve(a)]):
            repl[t] = selector.resolve(b)
    stops = list(dict.fromkeys(t for n in stop_names for t in (
        selector.find_tensors(n) if is_selector(n) else [selector.resolve(n)])))
    for t in stops:
        if repl.get(t, t) != t:
            raise UsageError(f"tensor '{t}' is both a stop tensor and replaced by "
                             f"replace_inputs '{repl[t]}'; give one of them")
        repl[t] = t
    graph = proto.graph
    shared_mode = mode is Weights.SHARED
    oracle: TypeOracle | None = None
    for a, b in repl.items():
        oracle = oracle or _oracle(index)
        ea, eb = oracle.elem_type(a), oracle.elem_type(b)
        if ea and eb and ea != eb:
            raise RewriteError(
                f"replace_inputs '{a}' -> '{b}': '{a}' is {dtype_name(ea)} but '{b}' is "
                f"{dtype_name(eb)}; replace it with a tensor of the same dtype"
            )
    for o in outs:
        why = None
        if o in repl:
            why = "is a stop tensor" if o in stops else "is replaced by replace_inputs"
        elif o in index.inputs and (o not in index.initializers or index.has_default(o)):
            why = "is a graph input (graph inputs are shared)"
        elif shared_mode and o in index.initializers:
            why = "is an initializer and weights are shared"
        elif shared_mode and o in index.producer and _is_constant(graph.node[index.producer[o]]):
            why = "is a Constant and weights are shared"
        if why:
            raise UsageError(f"tensor '{o}' {why}, so there is nothing to copy; copy a computed tensor")
    # the closure on the int dataflow graph (load's, or built once: the name allocator below
    # reads its node names too), in the name walk's order; by names where there is none
    walked = closure_edges(index, outs, list(repl))
    if walked is None:
        cl = closure(index, outs, stop_at=list(repl))
        walked = list(cl.nodes), list(cl.initializers), list(cl.stops)
    cl_nodes, cl_initializers, cl_stops = walked
    missing = [a for a in repl if a not in cl_stops]
    if missing:
        what = "stop tensor" if missing[0] in stops else "replace_inputs key"
        raise UsageError(
            f"{what} '{missing[0]}' is not on the path to outputs {outs}; drop it"
        )

    out_infos: dict[str, onnx.ValueInfoProto] = {}
    for o in outs:
        vi = known_value_info(index, o)
        if vi is None:
            oracle = oracle or _oracle(index)
            vi = oracle.value_info(o)
        if not is_complete(vi):
            raise RewriteError(
                f"type of tensor '{o}' is unknown (no value_info, shape inference cannot tell); "
                "add value_info for it"
            )
        assert vi is not None
        out_infos[o] = vi

    # ---- the rename map, decided before anything is copied
    names = NameAllocator.for_index(index)
    edges = index.known_int_graph()  # None when a node holds a body (then no fast paths)
    node_field = graph.node
    cl_ops = None if edges is None else list(map(edges.ops.__getitem__, cl_nodes))
    cl_outs = _outputs(index, cl_nodes, cl_ops)
    copy_nodes, copy_outs = cl_nodes, cl_outs
    if shared_mode and (cl_ops is None or "Constant" in cl_ops or "" in cl_ops):
        keep = [not (op == "Constant" if op else _is_constant(node_field[i]))
                for i, op in zip(cl_nodes, cl_ops or repeat(""), strict=False)]
        copy_nodes = list(compress(cl_nodes, keep))
        copy_outs = cl_outs.select(keep)
    # an input with a default value (IR >= 4) is an input: shared, never copied as a weight
    init_names = [] if shared_mode else [n for n in cl_initializers if not index.has_default(n)]
    node_names = (list(map(edges.names.__getitem__, copy_nodes)) if edges is not None
                  else [node_field[i].name for i in copy_nodes])
    named: dict[int, str] = {}
    if "" in node_names:  # unnamed nodes are named first (the originals too)
        for k, i in enumerate(copy_nodes):
            if not node_names[k]:
                node_names[k] = named[i] = names.fresh(f"{node_field[i].op_type}_{i}")
    new = _allocate(names, prefix, init_names, node_names, copy_outs)
    init_map, node_map, tensor_map = new.initializers, new.nodes, new.tensors
    mapping = tensor_map  # initializers included; read only from here on
    if repl:
        mapping = {**repl, **tensor_map}
    get = mapping.get
    # no node holds a body where the int graph exists: the copies' inputs come from its ids
    new_ins = None if edges is None else _inputs_on_ints(
        index, edges, cl_nodes, cl_outs, copy_nodes, new.outputs, mapping, repl)

    # Everything below only copies (in C: repeated-field extends) and renames in place; the
    # renames were all decided above, so nothing can fail after the first mutation.
    sparse_pos = {st.values.name: k for k, st in enumerate(graph.sparse_initializer)}
    if sparse_pos:
        dense = [(name, fresh) for name, fresh in init_map.items() if index.initializers[name] >= 0]
        sparse = [(name, fresh) for name, fresh in init_map.items() if index.initializers[name] < 0]
    else:
        dense, sparse = list(init_map.items()), []
    new_inputs: list[onnx.ValueInfoProto] = [
        renamed_value_info(graph.input[index.inputs[name]], fresh)
        for name, fresh in init_map.items() if name in index.inputs  # IR < 4: so does the copy
    ]
    new_outputs = [renamed_value_info(out_infos[o], mapping[o]) for o in outs]
    out_set = set(outs)
    new_vi: list[onnx.ValueInfoProto] = []
    for vi in graph.value_info:
        if vi.name in tensor_map and vi.name not in out_set and vi.name not in init_map:
            new_vi.append(renamed_value_info(vi, tensor_map[vi.name]))
    have_vi = {vi.name for vi in graph.value_info}
    for vi in graph.output:
        if (vi.name in tensor_map and vi.name not in out_set and vi.name not in have_vi
                and vi.name not in init_map and is_complete(vi)):
            new_vi.append(renamed_value_info(vi, tensor_map[vi.name]))

    # ---- mutate: weights first (the copies read them), then the copies
    e = Edit(index)
    e.name_nodes(named)
    if dense:
        originals = list(graph.initializer)  # a list indexes cheaper than the field
        e.add_initializers([originals[index.initializers[name]] for name, _ in dense],
                           names=[fresh for _, fresh in dense])
    e.add_sparse_initializers([graph.sparse_initializer[sparse_pos[name]] for name, _ in sparse],
                              names=[fresh for _, fresh in sparse])
    e.add_inputs(new_inputs)
    reads: Sequence[list[str | None] | None] = new_ins or [None] * len(copy_nodes)
    new_out_lists = list(new.outputs.grouped())
    wrote: list[list[str]] = []  # each copy's inputs (the upkeep checks them)
    for i, new_in in zip(copy_nodes, reads, strict=True):
        if new_in is None or None in new_in:  # by name: the copy still reads the originals
            new_in = [get(x, x) for x in node_field[i].input]
        wrote.append(new_in)  # type: ignore[arg-type]
    # no body anywhere when the int graph exists: the upkeep takes the fields just written
    copies = e.copy_nodes(copy_nodes, new.node_names, wrote, new_out_lists,
                          ops=None if edges is None else list(map(edges.ops.__getitem__,
                                                                  copy_nodes)))
    if new_ins is None:
        for n in copies:
            if n.attribute and has_subgraphs(n):
                e.rename_scoped(subgraphs(n), mapping, define=lambda x: names.fresh(prefix + x),
                                node_name=lambda node: names.fresh(prefix + node.name)
                                if node.name else "")
    e.add_value_info(new_vi)
    e.add_outputs(new_outputs)
    e.hand_on(model)
    result = CopyResult(
        outputs={o: mapping[o] for o in outs},
        initializers=init_map,
        nodes=node_map,
        tensors=tensor_map,
        weights=mode, prefix=prefix, replace_inputs=repl, copied_nodes=len(copy_nodes),
    )
    add_rewrite(proto, result.record())
    return result


def _resolve_outputs(selector: Selector, names: Sequence[str]) -> list[str]:
    """The tensor of each user name, in order, without repeats; a torch module path that hands
    several tensors on (and is no node name and no module called several times) gives all of
    them."""
    index = selector.index
    out: list[str] = []
    for name in names:
        if is_selector(name):
            out.extend(selector.find_tensors(name))
            continue
        try:
            out.append(selector.resolve(name))
        except AmbiguousNameError:
            called = any(k.startswith(name + CALL_SEP) for k in selector.framework_map)
            many = [] if called or name in index.node_names else selector.module_outputs(name)
            if len(many) < 2:
                raise
            out.extend(many)
    return list(dict.fromkeys(out))


def _exceptions(renames: dict[str, str], prefix: str) -> dict[str, str]:
    """The entries of ``renames`` that are not ``prefix`` + the original name."""
    return {k: v for k, v in renames.items() if v != prefix + k}


def copied_names(
    index: GraphIndex, record: CopyRecord | Mapping[str, Any]
) -> tuple[dict[str, str], dict[str, str]]:
    """The node and initializer rename maps of a copy ``record``, recomputed on the rewritten
    model ``index`` describes: the copied nodes are the closure of the record's outputs (the
    originals keep their positions; under shared weights Constants were not copied), each copy
    named ``prefix`` + its name unless the record lists an exception. Records written before
    the prefix rule carry the full maps and are returned as they are. O(closure)."""
    typed = as_record(record)
    if not isinstance(typed, CopyRecord):
        raise UsageError(f"a '{typed.op}' record is not a copy record")
    record = typed
    nodes, inits = dict(record.nodes), dict(record.initializers)
    prefix = record.prefix
    if prefix is None:
        return nodes, inits
    outputs = list(record.outputs)
    stops = list(record.replace_inputs)
    cl = closure(index, outputs, stop_at=stops)
    shared = record.weights == Weights.SHARED.value
    node_map: dict[str, str] = {}
    for i in cl.nodes:
        node = index.graph.node[i]
        if not (shared and _is_constant(node)):
            node_map[node.name] = nodes.get(node.name, prefix + node.name)
    init_map: dict[str, str] = {}
    if not shared:
        init_map = {name: inits.get(name, prefix + name) for name in cl.initializers}
    return node_map, init_map
