"""``fold``: replace every subgraph whose inputs are all constants by its value.

Constants are initializers (that are not graph inputs: an input with a default may be fed),
``Constant`` nodes, ``Shape``/``Size`` of a tensor whose shape is statically known, a ``Gather``
or ``Slice`` of a ``Shape`` that selects only static dims of a partly dynamic shape
(``x[N,3,H,W] -> Shape -> Gather(1)`` is 3; :mod:`onnxsurgeon.surgery._foldshape`), and a
``CastLike`` of a constant to a computed tensor whose element type is known (it folds as the
``Cast`` to that type: torch's exporter writes those for a zero bias). A node
folds when every input it reads is a constant, its op is a deterministic standard-domain op
(never ``RandomNormal*``, ``RandomUniform*``, ``Multinomial``, ``Bernoulli``, a ``Dropout`` that
may train, sequence/optional ops or a node holding a body), and it is not the producer of a graph
output. All foldable nodes of one graph are evaluated together: one model whose outputs are
every foldable tensor, run once (the evaluator is the caller's: the CLI passes onnxruntime's from
:mod:`onnxsurgeon.verify.folding`; the default is onnx's reference evaluator, since the core
never runs onnxruntime). A folded value over ``max_bytes`` stays computed (its producer is kept
and what it reads is folded instead). Bodies of If/Loop/Scan fold the same way over their own
constants. Folded values become initializers (an external-data model's save writes the big ones
to its data file); the folded nodes and the initializers nothing reads any more are removed.
A main-graph ``If`` whose condition is constant then is replaced by the branch it takes, and
what that makes constant folds in turn (:mod:`onnxsurgeon.surgery._inline_if`); so does a
``Shape`` of a ``Slice`` whose axes were computed (the dims it does not slice are its input's).
Then, on the folded graph (its shapes static now), a node that passes an input through unchanged
(``x + 0``, ``x - 0``, ``x * 1``, ``x / 1`` with a constant that broadcasts ``x`` to no other
shape or type) is removed, its readers reading ``x``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter
from typing import Any

import numpy as np
import onnx

from ..edit import Edit
from ..errors import UsageError
from ..index import (
    DEFAULT_INPUT_IR,
    GraphIndex,
    iter_graphs,
    node_label,
    subgraphs,
)
from ..io import Model, as_model
from ..protos import default_opset
from ..record import FoldRecord, add_rewrite
from ..session import indexed
from ._foldeval import Evaluator, Runner
from ._foldplan import NEVER_FOLDED as NEVER_FOLDED  # re-exported: their home before _foldplan
from ._foldplan import RANDOM_OPS as RANDOM_OPS
from ._foldplan import (
    _like_types,
    _nothing_folds,
    _Plan,
    _plan_graph,
    _still_read,
)
from ._foldshape import (
    known_shapes,
    slice_shapes,
)
from ._neutral import neutral_constants, neutral_nodes

DEFAULT_MAX_BYTES = 1 << 20
"""A folded value larger than this (1 MiB) stays computed."""

_INPUTS = attrgetter("input")
_OP_TYPE = attrgetter("op_type")
_ATTRIBUTES = attrgetter("attribute")

def reference_evaluator(model: onnx.ModelProto) -> Runner:
    """The onnx reference evaluator on ``model`` (no inputs): the default :data:`Evaluator`."""
    from onnx.reference import ReferenceEvaluator

    ev = ReferenceEvaluator(model)

    def run(names: Sequence[str]) -> Mapping[str, np.ndarray]:
        values = ev.run(list(names), {})
        return dict(zip(names, values, strict=True))

    return run


@dataclass(frozen=True)
class FoldResult:
    """What ``fold`` did.

    Attributes:
        folded: main-graph tensors that are initializers now, in graph order.
        removed: labels of the main-graph nodes removed (folded, passing an input through, or
            duplicating an earlier node).
        kept: foldable main-graph tensors left computed (value over ``max_bytes``).
        body_folded: tensors folded inside nested bodies.
        max_bytes: the limit used.
        fused: with ``fuse``, each simplification made: ``{"rule", "nodes", "into"}`` (see
            :mod:`onnxsurgeon.surgery.fuse`; main-graph no-ops and duplicates removed are in
            ``removed`` too), with ``"graph"`` (the body path, ``function <domain.name>``) for one made
            inside an If/Loop/Scan body or a local function.
        fuse: whether the simplifications were asked for.
    """

    folded: tuple[str, ...]
    removed: tuple[str, ...]
    kept: tuple[str, ...]
    body_folded: tuple[str, ...]
    max_bytes: int
    fused: tuple[dict[str, Any], ...] = ()
    fuse: bool = True

    def record(self) -> FoldRecord:
        """The rewrite record of this fold."""
        return FoldRecord(folded=self.folded, removed=self.removed, kept=self.kept,
                          body_folded=self.body_folded, max_bytes=self.max_bytes,
                          fused=tuple(map(dict, self.fused)), fuse=self.fuse)


def fold(model: Model | onnx.ModelProto, /, *, max_bytes: int = DEFAULT_MAX_BYTES,
         evaluate: Evaluator | None = None, fuse: bool = True) -> FoldResult:
    """Replace every subgraph whose inputs are all constants by its value. Mutates model.

    See the module docstring for what folds. ``evaluate`` computes the folded values (default
    :func:`reference_evaluator`; the CLI passes onnxruntime's,
    :func:`onnxsurgeon.verify.folding.ort_evaluator`). ``fuse`` (default true, as simplifiers
    do): then also the constant-weight simplifications of :mod:`onnxsurgeon.surgery.fuse`
    (no-ops removed, MatMul + Add -> Gemm, Conv + BatchNormalization -> Conv).

    Before:  x -> Shape -> Gather(0) -> Unsqueeze -> Concat([., -1]) -> Reshape(y, .) -> out
    After (x static 2x8):  Reshape(y, <initializer [2, -1]>) -> out

    O(nodes) plus the evaluation of what folds (one session per graph that folds).

    Raises:
        UsageError: ``max_bytes`` negative. (A model with nothing to fold is left as it is,
            with an empty record: folding is idempotent.)
    """
    if not isinstance(max_bytes, int) or max_bytes < 0:
        raise UsageError(f"max_bytes {max_bytes!r} is not a size in bytes >= 0; give e.g. 1048576")
    m = as_model(model)
    proto = m.proto
    index = indexed(m)
    run = evaluate or reference_evaluator
    opsets = list(proto.opset_import)
    inputs = {i.name for i in proto.graph.input}
    edges = index.known_int_graph()
    if edges is not None and "" not in edges.ops:  # every node's op type, as load read them
        ops = list(edges.ops)
    else:
        ops = list(map(_OP_TYPE, proto.graph.node))  # C-level: the candidates are read further
    sliced = "Shape" in ops and "Slice" in ops and slice_shapes(index, ops)
    main = None if _nothing_folds(index, ops, inputs) else _plan_graph(
        proto.graph, inputs=inputs, base_dir=m.base_dir, shapes=known_shapes(index, ops),
        max_bytes=max_bytes, evaluate=run, opsets=opsets, ir_version=proto.ir_version,
        like=_like_types(index, ops))
    bodies: list[_Plan] = []
    for i in index.body_holders:
        for body in subgraphs(proto.graph.node[i]):
            for g in iter_graphs(body):
                plan = _plan_graph(g, inputs={x.name for x in g.input}, base_dir=m.base_dir,
                                   shapes=None, max_bytes=max_bytes, evaluate=run, opsets=opsets,
                                   ir_version=proto.ir_version)
                if plan is not None:
                    bodies.append(plan)
    gone = set(main.removed) if main is not None else set()
    removed_labels = tuple(node_label(proto.graph.node[i], i) for i in sorted(gone))
    folded = list(main.folded) if main is not None else []
    read = _still_read(proto.graph, gone) if gone else set()
    dead = [k for k, t in enumerate(proto.graph.initializer)
            if t.name not in read and t.name not in inputs] if gone else []
    # ------------------------------------------------------------------ mutate (all planned)
    # nothing folds and fusions follow: no empty edit first, so that the fusions edit load's
    # index as it is (the save's touched check builds on its validation); ``pending``: it
    pending: GraphIndex | None = None
    if fuse and not (dead or gone or bodies or main is not None):
        pending = index
    else:
        _fold_edit(m, index, dead, main, bodies, gone)
    if "If" in ops:  # an If whose condition is constant now takes its branch; that folds too
        inlined, more = _inline_ifs(m, index, inputs, max_bytes=max_bytes, evaluate=run)
        if inlined:
            removed_labels += inlined
            folded += more
            pending = None
            index = indexed(m)
    if main is not None and sliced:  # a Slice's axes are constants now: the dims it keeps
        more_labels, more = _refold(m, inputs, max_bytes=max_bytes, evaluate=run)
        removed_labels += more_labels
        folded += more
        index = indexed(m)
    # second pass, on the folded graph (its shapes are static now): x + 0, x * 1 pass x on
    neutral = neutral_constants(proto.graph, inputs)
    if neutral and pending is None:
        index = indexed(m)
    nops = neutral_nodes(index, neutral) if neutral else {}
    if nops:
        removed_labels += tuple(index.node_label(i) for i in sorted(nops))
        read = _still_read(proto.graph, set(nops)) | set(nops.values())
        dead = [k for k, t in enumerate(proto.graph.initializer)
                if t.name not in read and t.name not in inputs]
        folded = [n for n in folded if n in read]
        e = Edit(index)
        for i, source in sorted(nops.items()):
            e.rewire(index.uses_of(proto.graph.node[i].output[0]), source)
        if dead:
            drop = set(dead)
            e.keep_initializers([k for k in range(len(proto.graph.initializer)) if k not in drop])
        e.remove_nodes(set(nops))
        e.hand_on(m)
        pending = None
    fused: list[dict[str, Any]] = []
    if fuse:
        index = indexed(m) if pending is None else pending
        removed_labels += _fuse(m, index, inputs, fused,
                                ops=None if gone or nops or dead else ops)
        if index.body_holders or proto.functions:  # planned, then one edit
            from ._fuse_bodies import fuse_bodies

            fuse_bodies(m, fused)
        if fused and folded:
            read = _read_now(proto.graph)
            folded = [n for n in folded if n in read]
        if pending is not None and not fused:  # nothing changed: the journal of no edit
            Edit(pending).hand_on(m)
    result = FoldResult(
        folded=tuple(folded), removed=removed_labels,
        kept=tuple(main.kept) if main else (),
        body_folded=tuple(n for p in bodies for n in p.folded), max_bytes=max_bytes,
        fused=tuple(fused), fuse=fuse)
    add_rewrite(proto, result.record())
    return result


def _inline_ifs(m: Model, index: GraphIndex, inputs: set[str], *, max_bytes: int,
                evaluate: Evaluator) -> tuple[tuple[str, ...], list[str]]:
    """Main-graph Ifs whose condition is a constant replaced by the branch they take
    (:mod:`~onnxsurgeon.surgery._inline_if`), then what the inlined nodes compute from
    constants folded; a round per level of nesting, until no If is constant. The labels of the
    Ifs and nodes removed, and the tensors folded. Each round: one edit for the Ifs, one for
    the fold. O(rounds x nodes)."""
    from ._inline_if import apply_inline, plan_inline

    labels: tuple[str, ...] = ()
    folded: list[str] = []
    while True:
        plans = plan_inline(index, inputs)
        if not plans:
            return labels, folded
        labels += tuple(p.label for p in plans)
        e = Edit(index)
        apply_inline(e, plans)
        e.hand_on(m)
        more, values = _refold(m, inputs, max_bytes=max_bytes, evaluate=evaluate)
        labels += more
        folded += values
        index = indexed(m)


def _refold(m: Model, inputs: set[str], *, max_bytes: int, evaluate: Evaluator
            ) -> tuple[tuple[str, ...], list[str]]:
    """One more fold round of the main graph as it is now (one edit when something folds or
    an initializer is read by nothing any more); the labels of the nodes removed and the
    tensors folded. O(nodes) plus the evaluation."""
    proto = m.proto
    index = indexed(m)
    ops = list(map(_OP_TYPE, proto.graph.node))
    again = _plan_graph(proto.graph, inputs=inputs, base_dir=m.base_dir,
                        shapes=known_shapes(index, ops), max_bytes=max_bytes,
                        evaluate=evaluate, opsets=list(proto.opset_import),
                        ir_version=proto.ir_version, like=_like_types(index, ops))
    gone = set(again.removed) if again is not None else set()
    labels = tuple(node_label(proto.graph.node[i], i) for i in sorted(gone))
    read = _still_read(proto.graph, gone)  # the conditions and what other branches read go
    drop = [k for k, t in enumerate(proto.graph.initializer)
            if t.name not in read and t.name not in inputs]
    if not (drop or gone):
        return labels, []
    _fold_edit(m, index, drop, again, [], gone)
    return labels, list(again.folded) if again is not None else []


def _fold_edit(m: Model, index: GraphIndex, dead: list[int], main: _Plan | None,
               bodies: list[_Plan], gone: set[int]) -> None:
    """The fold's one edit (all planned): dead initializers dropped, folded values added,
    folded nodes removed, bodies folded; its journal handed on."""
    proto = m.proto
    inputs_ir = proto.ir_version < DEFAULT_INPUT_IR  # before IR 4 an initializer is an input
    folded = list(main.folded) if main is not None else []
    e = Edit(index)
    if dead:
        drop = set(dead)
        e.keep_initializers([k for k in range(len(proto.graph.initializer)) if k not in drop])
    if main is not None:
        e.add_initializers([main.values[n] for n in folded], made=True)
        if inputs_ir:
            e.add_inputs([onnx.helper.make_tensor_value_info(n, main.values[n].data_type,
                                                             list(main.values[n].dims))
                          for n in folded])
    if gone:
        e.remove_nodes(gone)
    for plan in bodies:
        e.fold_body(plan.graph, plan.removed, [plan.values[n] for n in plan.folded],
                    plan.dead_inits)
    e.hand_on(m)


def _read_now(graph: onnx.GraphProto) -> set[str]:
    """Names read by the graph's nodes (C-level), the bodies they hold and the graph outputs."""
    nodes = graph.node
    read = set(chain.from_iterable(map(_INPUTS, nodes)))
    read.update(o.name for o in graph.output)
    for attrs, node in zip(map(_ATTRIBUTES, nodes), nodes, strict=True):
        if attrs:
            for body in subgraphs(node):
                for g in iter_graphs(body):
                    for n in g.node:
                        read.update(n.input)
    read.discard("")
    return read


def _drop_dead_initializers(e: Edit, graph: onnx.GraphProto, inputs: set[str]) -> None:
    read = _read_now(graph)
    keep = [k for k, t in enumerate(graph.initializer) if t.name in read or t.name in inputs]
    if len(keep) < len(graph.initializer):
        e.keep_initializers(keep)


def _fuse(m: Model, index: GraphIndex, inputs: set[str], fused: list[dict[str, Any]], *,
          ops: list[str] | None = None) -> tuple[str, ...]:
    """The simplifications of :mod:`~onnxsurgeon.surgery.fuse` on the folded main graph (each
    appended to ``fused``); the labels of the no-ops and duplicates removed. Three edits at most. ``ops``: the
    op types of the main graph's nodes as they are (the fold changed none), else None."""
    from ._cse import apply_duplicates, plan_duplicates
    from .fuse import apply_fusions, apply_noops, plan_fusions, plan_noops

    proto = m.proto
    opset = default_opset(proto) or 1
    noops, entries = plan_noops(index, inputs=inputs, base_dir=m.base_dir, opset=opset,
                                ops=ops)
    labels = tuple(index.node_label(i) for i in sorted(noops))

    def applied(index: GraphIndex, apply: Any, found: Any, made: list[dict[str, Any]]
                ) -> GraphIndex:
        """One rule's edit (its dead initializers dropped, its entries said); the new index."""
        e = Edit(index)
        apply(e, index, found)
        _drop_dead_initializers(e, proto.graph, inputs)
        e.hand_on(m)
        fused.extend(made)
        return indexed(m)

    if noops:
        index = applied(index, apply_noops, noops, entries)
    dups, entries = plan_duplicates(index, inputs)
    if dups:
        labels += tuple(index.node_label(i) for i in sorted(dups))
        index = applied(index, apply_duplicates, dups, entries)
    plan = plan_fusions(index, inputs=inputs, base_dir=m.base_dir, opset=opset,
                        ops=None if noops or dups else ops)
    if plan.fused:
        e = Edit(index)
        apply_fusions(e, plan)
        if plan.convs:  # a Gemm reads the weight and bias its MatMul and Add read
            _drop_dead_initializers(e, proto.graph, inputs)
        e.hand_on(m)
        fused.extend(plan.fused)
    return labels


def fold_names(result: FoldResult) -> Iterable[str]:
    """Every tensor the fold made a constant (main graph, then bodies)."""
    return (*result.folded, *result.body_folded)
