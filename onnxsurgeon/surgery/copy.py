"""copy: duplicate the closure of some tensors inside the same model, with new names.

Sharing is decided once, in one rename map, before anything is copied (the torch.fx
``graph_copy(val_map)`` idea): a name that maps to itself is shared, every other name is copied.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

import onnx

from ..closure import closure
from ..errors import RewriteError, UsageError, name_list
from ..index import GraphIndex, has_subgraphs, subgraphs
from ..io import Model, as_model, hand_on, indexed
from ..names import NameAllocator
from ..protos import rename_scoped
from ..record import CopyRecord, add_rewrite, as_record
from ..select import Selector
from ..types import TypeOracle, dtype_name, is_complete, known_value_info, renamed_value_info
from ..upkeep import Upkeep
from ._edgewalk import closure_edges
from ._proto import quick_value_info


class Weights(str, Enum):
    """How a copy treats the weights (initializers and Constant nodes) of its closure."""

    INDEPENDENT = "independent"
    """Every weight gets one new copy (tied weights stay tied within the copy)."""
    SHARED = "shared"
    """The copy reads the original weights; nothing is added."""

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class CopyResult:
    """Rename maps of :func:`copy` (original name -> copy name).

    Attributes:
        outputs: each requested tensor -> its copy (a new graph output).
        initializers: each copied initializer -> its copy (empty under ``Weights.SHARED``).
        nodes: each copied main-graph node name -> the copy's node name.
        tensors: every renamed main-graph tensor (node outputs and initializers) -> its copy.
    """

    outputs: dict[str, str]
    initializers: dict[str, str]
    nodes: dict[str, str]
    tensors: dict[str, str]


def _oracle(index: GraphIndex) -> TypeOracle:
    """The type oracle with insert's and reroute's cheap pass first (forward propagation over
    the tensor's closure, on ints when there is an int graph) before onnx shape inference."""
    return TypeOracle(index, quick=lambda name: quick_value_info(index, name))


def _is_constant(node: onnx.NodeProto) -> bool:
    return node.op_type == "Constant" and node.domain in ("", "ai.onnx")


def copy(
    model: Model | onnx.ModelProto,
    outputs: Sequence[str],
    /,
    *,
    weights: Weights | str = Weights.INDEPENDENT,
    prefix: str = "copy/",
    replace_inputs: Mapping[str, str] | None = None,
) -> CopyResult:
    """Duplicate the closure of ``outputs`` inside ``model``; each copy becomes a graph output.
    Mutates model.

    New names are ``prefix`` + the original name (made unique by :class:`NameAllocator`). Graph
    inputs are shared. ``weights`` chooses whether initializers and Constant nodes are copied
    (external-data initializers are copied as references: same file, offset and length) or
    shared. ``replace_inputs`` ``{A: B}`` makes the copy read B wherever the original reads A (A
    and its upstream are not copied). Names inside nested If/Loop/Scan bodies are renamed
    consistently; local functions are shared.

    Before:  x -> conv -> act -> fc -> logits
    After:   x -> conv -> act -> fc -> logits
             x -> copy/conv -> copy/act -> copy/fc -> copy/logits   (new graph output)

    O(nodes + edges) of the closure plus one pass over all names for the name allocator.

    Args:
        model: the model (a :class:`Model` or a bare ``ModelProto``).
        outputs: the tensors to copy (user names, resolved with :class:`Selector`).
        weights: ``Weights.INDEPENDENT`` (default) or ``Weights.SHARED`` (or their values).
        prefix: prefix of every new name.
        replace_inputs: tensor A -> tensor B read by the copy instead of A.

    Returns:
        A :class:`CopyResult` with the rename maps.

    Raises:
        NotFoundError / AmbiguousNameError: a name does not resolve.
        UsageError: bad option, nothing to copy, a replaced tensor not on the path.
        RewriteError: a replacement with another dtype, an output of unknown type.
    """
    outputs = name_list(outputs, "copy(outputs=...)")
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
    outs = list(dict.fromkeys(selector.resolve(n) for n in outputs))
    repl: dict[str, str] = {}
    for a, b in (replace_inputs or {}).items():
        repl[selector.resolve(a)] = selector.resolve(b)
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
            why = "is replaced by replace_inputs"
        elif o in index.inputs and o not in index.initializers:
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
        raise UsageError(
            f"replace_inputs key '{missing[0]}' is not on the path to outputs {outs}; drop it"
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
    mapping: dict[str, str] = dict(repl)
    # one list of bases in allocation order (initializers, then each node's name and outputs),
    # allocated at once: C-level when no prefixed name collides (see NameAllocator.fresh_many)
    init_names = [] if shared_mode else cl_initializers
    copy_nodes: list[int] = []
    named: dict[int, str] = {}
    node_names: list[str] = []
    bases = [prefix + name for name in init_names]
    for i in cl_nodes:
        node = graph.node[i]
        if shared_mode and _is_constant(node):
            continue
        copy_nodes.append(i)
        orig_name = node.name
        if not orig_name:
            orig_name = names.fresh(f"{node.op_type}_{i}")
            named[i] = orig_name
        node_names.append(orig_name)
        bases.append(prefix + orig_name)
        bases.extend(prefix + out for out in node.output if out)
    fresh_names = names.fresh_many(bases)
    k = len(init_names)
    init_map: dict[str, str] = dict(zip(init_names, fresh_names[:k], strict=True))
    allocated = iter(fresh_names[k:])
    mapping.update(init_map)
    node_map: dict[str, str] = {}
    tensor_map: dict[str, str] = dict(init_map)
    for i, orig_name in zip(copy_nodes, node_names, strict=True):
        node_map[orig_name] = next(allocated)
        for out in graph.node[i].output:
            if out:
                tensor_map[out] = next(allocated)
    mapping.update(tensor_map)

    # Everything below only copies (in C: repeated-field extends) and renames in place; the
    # renames were all decided above, so nothing can fail after the first mutation.
    sparse_pos = {st.values.name: k for k, st in enumerate(graph.sparse_initializer)}
    dense = [(name, fresh) for name, fresh in init_map.items() if index.initializers[name] >= 0]
    sparse = [(name, fresh) for name, fresh in init_map.items() if index.initializers[name] < 0]
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

    # ---- mutate
    for i, name in named.items():
        graph.node[i].name = name
    first = n_before = len(graph.node)
    graph.node.extend([graph.node[i] for i in copy_nodes])  # C-level copies
    get = mapping.get
    for n in graph.node[first:]:
        n.name = node_map[n.name]
        ins = n.input
        for k, name in enumerate(ins):
            renamed = get(name)
            if renamed is not None:
                ins[k] = renamed
        outs_ = n.output
        for k, name in enumerate(outs_):
            if name:
                outs_[k] = mapping[name]
        if n.attribute and has_subgraphs(n):
            rename_scoped(subgraphs(n), mapping, define=lambda name: names.fresh(prefix + name),
                          node_name=lambda node: names.fresh(prefix + node.name) if node.name else "")
    first = len(graph.initializer)
    graph.initializer.extend([graph.initializer[index.initializers[name]] for name, _ in dense])
    for t, (_, fresh) in zip(graph.initializer[first:], dense, strict=True):
        t.name = fresh
    first = len(graph.sparse_initializer)
    graph.sparse_initializer.extend([graph.sparse_initializer[sparse_pos[name]] for name, _ in sparse])
    for st, (_, fresh) in zip(graph.sparse_initializer[first:], sparse, strict=True):
        st.values.name = fresh
    graph.input.extend(new_inputs)
    graph.value_info.extend(new_vi)
    graph.output.extend(new_outputs)
    upkeep = Upkeep(index)  # the next verb starts from this index (a recipe's next step)
    upkeep.name_nodes(named)
    if init_map or new_inputs:
        upkeep.leaves_changed()
    upkeep.inserted(n_before, len(copy_nodes))
    hand_on(model, upkeep)
    result = CopyResult(
        outputs={o: mapping[o] for o in outs},
        initializers=init_map,
        nodes=node_map,
        tensors=tensor_map,
    )
    # the record stays small: every copied name is ``prefix`` + its original (the copied nodes
    # are the closure of the outputs, which verify recomputes), so only the names the
    # allocator had to change are listed
    add_rewrite(proto, CopyRecord(
        outputs=result.outputs, prefix=prefix, initializers=_exceptions(init_map, prefix),
        nodes=_exceptions(node_map, prefix),
        copied={"nodes": len(copy_nodes), "initializers": len(init_map)},
        weights=mode.value, replace_inputs=repl,
    ))
    return result


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
