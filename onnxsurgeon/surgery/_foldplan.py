"""What ``fold`` folds, planned per graph (:func:`_plan_graph`: the nodes whose every input is
constant, the values they make, the nodes left dead), and the evaluation model of one graph's
folded nodes (:func:`_fold_model`); the ops never folded. :mod:`onnxsurgeon.surgery.fold`
applies the plans."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter

import numpy as np
import onnx
from onnx import numpy_helper

from ..external import read_tensor
from ..index import GraphIndex, has_subgraphs, int_arrays, iter_graphs, positions, subgraphs
from ._foldeval import Evaluator, partitioned
from ._foldshape import selected, shape_entries, small_value, static_shape

_INPUTS = attrgetter("input")
_OP_TYPE = attrgetter("op_type")
RANDOM_OPS = frozenset({"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
                        "Multinomial", "Bernoulli"})
"""Ops whose value is random."""

NEVER_FOLDED = RANDOM_OPS | frozenset({
    "If", "Loop", "Scan", "Optional", "OptionalGetElement", "OptionalHasElement",
    "SequenceConstruct", "SequenceEmpty", "SequenceInsert", "SequenceErase", "SequenceAt",
    "SequenceLength", "SequenceMap", "SplitToSequence", "ConcatFromSequence",
})
"""Ops whose value is random, not a tensor, or holds a body: never folded."""

_SPECIAL = frozenset({"CastLike", "Shape", "Size", "Constant"})
"""Ops that may fold though they read a computed tensor (or nothing): see :func:`_plan_graph`."""


@dataclass
class _Plan:
    graph: onnx.GraphProto
    folded: list[str]  # tensors that become initializers
    values: dict[str, onnx.TensorProto]
    removed: list[int]  # node positions
    dead_inits: set[str]
    kept: list[str]


def _tensors_of(graph: onnx.GraphProto) -> dict[str, onnx.TensorProto]:
    return {t.name: t for t in graph.initializer}


def _foldable_op(node: onnx.NodeProto, constant: set[str]) -> bool:
    if not all(not i or i in constant for i in node.input):  # the cheap test first
        return False
    if node.domain not in ("", "ai.onnx") or node.op_type in NEVER_FOLDED:
        return False
    if node.op_type == "Dropout" and len(node.input) > 2 and node.input[2]:
        return False  # training_mode given: may be random
    return not has_subgraphs(node)


def _shape_value(node: onnx.NodeProto, dims: list[int]) -> np.ndarray:
    if node.op_type == "Size":
        return np.array(int(np.prod(dims, dtype=np.int64)), dtype=np.int64)
    return np.array(shape_entries(node, dims), dtype=np.int64)  # every entry static here


def _outer_reads(graph: onnx.GraphProto) -> set[str]:
    """Names read by nodes of the bodies held in ``graph``'s nodes (any depth)."""
    found: set[str] = set()
    for node in graph.node:
        for body in subgraphs(node):
            for g in iter_graphs(body):
                for n in g.node:
                    found.update(i for i in n.input if i)
    return found


def _plan_graph(graph: onnx.GraphProto, *, inputs: set[str], base_dir: object,
                shapes: Mapping[str, list[int | str | None]] | None, max_bytes: int,
                evaluate: Evaluator, opsets: Sequence[onnx.OperatorSetIdProto],
                ir_version: int, like: Mapping[str, int] | None = None) -> _Plan | None:
    """The fold of one graph (its own constants), or None when nothing folds. O(nodes).
    ``like``: element types of the computed tensors a ``CastLike`` reads as its target (a
    CastLike of a constant to a tensor of known type folds as a Cast). ``shapes``: the shapes
    (rank known) of the tensors Shape/Size nodes read."""
    inits = _tensors_of(graph)
    constant = {n for n in inits if n not in inputs}
    fold: list[int] = []
    known: dict[str, np.ndarray] = {}  # Shape/Size of static shapes, static parts of others
    partial: dict[str, list[int | None]] = {}  # a Shape's entries, where some are not static
    constant_nodes: dict[str, onnx.NodeProto] = {}  # Constant node outputs (values read lazily)
    nodes = graph.node
    for i, (op, ins) in enumerate(zip(map(_OP_TYPE, nodes), map(_INPUTS, nodes), strict=True)):
        if op in _SPECIAL:
            node = nodes[i]
            if like and op == "CastLike" and len(ins) == 2 \
                    and node.domain in ("", "ai.onnx") and ins[0] in constant \
                    and ins[1] in like and ins[1] not in constant:
                fold.append(i)
                constant.update(o for o in node.output if o)
                continue
            if op in ("Shape", "Size") and shapes is not None and node.domain in ("", "ai.onnx") \
                    and ins and ins[0] not in constant:
                dims = shapes.get(ins[0])
                static = static_shape(dims)
                if static is not None:
                    known[node.output[0]] = _shape_value(node, static)
                    constant.add(node.output[0])
                    fold.append(i)
                    continue
                if dims is not None and op == "Shape":
                    partial[node.output[0]] = shape_entries(node, dims)
            if op == "Constant" and not ins:
                if any(a.name == "sparse_value" for a in node.attribute):
                    continue
                fold.append(i)
                constant.update(o for o in node.output if o)
                constant_nodes[node.output[0]] = nodes[i]
                continue
        if partial and op in ("Gather", "Slice") and ins and ins[0] in partial:
            node = nodes[i]
            value = selected(node, partial[ins[0]],
                             [small_value(n, inits, constant_nodes) if n in constant else None
                              for n in ins[1:]]) if node.domain in ("", "ai.onnx") else None
            if value is not None:
                known[node.output[0]] = value
                constant.add(node.output[0])
                fold.append(i)
                continue
        # the cheap test first, C-level (an omitted input "" counts as constant)
        if not ins or (not constant.issuperset(ins) and "" not in ins):
            continue
        node = nodes[i]
        if _foldable_op(node, constant):
            fold.append(i)
            constant.update(o for o in node.output if o)
    if not fold:
        return None
    in_fold = set(fold)
    producer = {o: i for i in fold for o in graph.node[i].output if o}
    outputs = {o.name for o in graph.output}
    reads: dict[str, list[int]] = {}
    for i, node in enumerate(graph.node):
        for name in node.input:
            if name:
                reads.setdefault(name, []).append(i)
    captured = _outer_reads(graph)
    # a graph output's producer stays computed (a graph output named by an initializer is not
    # allowed everywhere): push it out of the fold first
    in_fold.difference_update(producer[o] for o in outputs if o in producer)
    fold = [i for i in fold if i in in_fold]
    if not fold:
        return None

    def needed(name: str) -> bool:
        return any(j not in in_fold for j in reads.get(name, ())) or name in captured

    model = _fold_model(graph, fold, inits, known, base_dir, opsets, ir_version, like or {})
    run = partitioned(evaluate, model)
    values: dict[str, onnx.TensorProto] = {}
    kept: list[str] = []
    want = [o for i in fold for o in graph.node[i].output if o and needed(o)]
    while want:
        got = run([w for w in want if w not in known]) if any(w not in known for w in want) else {}
        more: list[str] = []
        for name in want:
            i = producer[name]
            if i not in in_fold:
                continue
            value = known[name] if name in known else \
                np.asarray(got[name]) if name in got else None  # None: its node failed
            if value is None or value.nbytes > max_bytes:
                in_fold.discard(i)
                if value is not None:
                    kept.append(name)
                more.extend(n for n in graph.node[i].input if n in producer
                            and producer[n] in in_fold and n not in values)
                for o in graph.node[i].output:
                    values.pop(o, None)
                continue
            values[name] = numpy_helper.from_array(value, name)
        want = list(dict.fromkeys(more))
    fold = [i for i in fold if i in in_fold]
    if not fold:
        return None
    folded = [o for i in fold for o in graph.node[i].output if o in values]
    still_read = {n for j, node in enumerate(graph.node) if j not in in_fold for n in node.input}
    still_read |= captured | outputs
    # a partly dynamic Shape whose every reader folded is read no more: it goes too
    spent = {i for i, node in enumerate(graph.node) if node.output and node.output[0] in partial
             and node.output[0] not in still_read} if partial else set()
    if spent:
        fold = sorted((*fold, *spent))
        in_fold |= spent
        still_read = {n for j, node in enumerate(graph.node) if j not in in_fold
                      for n in node.input} | captured | outputs
    dead = {n for i in fold for n in graph.node[i].input
            if n in inits and n not in still_read and n not in inputs}
    return _Plan(graph, folded, values, fold, dead, kept)


def _fold_model(graph: onnx.GraphProto, fold: Sequence[int], inits: Mapping[str, onnx.TensorProto],
                known: Mapping[str, np.ndarray], base_dir: object,
                opsets: Sequence[onnx.OperatorSetIdProto], ir_version: int,
                like: Mapping[str, int]) -> onnx.ModelProto:
    """A model without inputs computing every tensor of the folded nodes (a CastLike to a
    computed tensor as the Cast to its type)."""
    nodes = [graph.node[i] for i in fold if graph.node[i].output[0] not in known]
    nodes = [onnx.helper.make_node("Cast", [n.input[0]], list(n.output), name=n.name,
                                   to=like[n.input[1]])
             if n.op_type == "CastLike" and len(n.input) == 2 and n.input[1] in like else n
             for n in nodes]
    read = {n for node in nodes for n in node.input if n}
    tensors = []
    for name in sorted(read & set(inits)):
        t = inits[name]
        tensors.append(numpy_helper.from_array(read_tensor(t, base_dir), name)  # type: ignore[arg-type]
                       if t.data_location == onnx.TensorProto.EXTERNAL else t)
    tensors += [numpy_helper.from_array(v, n) for n, v in known.items() if n in read]
    outs = [onnx.ValueInfoProto(name=o) for node in nodes for o in node.output if o]
    g = onnx.helper.make_graph(nodes, "fold", [], outs, tensors)
    return onnx.helper.make_model(g, opset_imports=list(opsets), ir_version=ir_version)


"""Op -> (the constant that makes it pass its other input through, the slots it may be in)."""


def _still_read(graph: onnx.GraphProto, gone: set[int]) -> set[str]:
    """Names read by the nodes that stay, the bodies they hold and the graph outputs."""
    read = {o.name for o in graph.output}
    for j, node in enumerate(graph.node):
        if j in gone:
            continue
        read.update(n for n in node.input if n)
        for body in subgraphs(node):
            for g in iter_graphs(body):
                for n in g.node:
                    read.update(x for x in n.input if x)
    return read


def _like_types(index: GraphIndex, ops: list[str]) -> dict[str, int] | None:
    """Element types of the computed tensors main-graph ``CastLike`` nodes read as their
    target (None when there is no such node: no type is asked)."""
    nodes = index.graph.node
    wanted = {nodes[i].input[1] for i in positions(ops, "CastLike")
              if len(nodes[i].input) == 2 and nodes[i].input[1]}
    wanted -= set(index.initializers)
    if not wanted:
        return None
    from ..types import TypeOracle

    oracle = TypeOracle(index)
    found = {name: oracle.elem_type(name) for name in sorted(wanted)}
    return {name: t for name, t in found.items() if t}


def _nothing_folds(index: GraphIndex, ops: list[str], inputs: set[str]) -> bool:
    """True when provably no main-graph node folds, from the int dataflow graph (numpy, no
    node read): no Constant, Shape, Size or CastLike node, and no node reading only constant
    leaves (initializers that are not inputs) and omitted inputs — the first node to fold, in
    graph order, would be one. False when it cannot tell (no int graph). O(edges) in numpy."""
    edges = index.known_int_graph()
    if edges is None or not _SPECIAL.isdisjoint(ops):
        return False
    preds, starts = int_arrays(edges, index.memo)
    constant = np.zeros(max(map(abs, edges.leaves), default=1) + 1, bool)  # by -leaf id
    inits = index.initializers
    for k, name in edges.leaves.items():
        constant[-k] = name in inits and name not in inputs
    leaf = preds <= -2
    ok = preds == -1
    ok[leaf] = constant[-preds[leaf]]
    counts = np.diff(starts)
    node_of = np.repeat(np.arange(len(counts)), counts)
    bad = np.bincount(node_of[~ok], minlength=len(counts))
    return not bool(np.any((counts > 0) & (bad == 0)))
