"""``fold``'s constant-weight simplifications (on by default; ``fold(fuse=False)``, ``fold
--no-fuse`` folds only): what a simplifier such as onnxsim does besides folding.

On the main graph, after the constants are folded:

* no-ops removed, their readers reading their input: ``Identity``; ``Dropout`` in inference (no
  ``training_mode``, or a constant false one; the mask unused); ``Cast`` to the type its input
  has; ``Reshape`` to the shape its input has (static sizes, a 0 copying a dim, one -1
  inferring it); ``Transpose`` by the identity permutation; a ``Concat`` putting every dim of
  ``Shape(x)`` back together in order (``Unsqueeze(Gather(Shape(x), k))``), which is ``Shape(x)``.
  A node whose output is a graph output stays (the output keeps its name and producer);
* ``MatMul(x, W) + B`` -> ``Gemm(x, W, B)``: ``x`` 2-D, ``W`` a 2-D initializer, ``B`` an
  initializer broadcast over the last dim (shape ``[]``, ``[1]``, ``[N]``, ``[1, N]``), float
  types, the MatMul's output read by the Add only. The Gemm takes the MatMul's name and the
  Add's output;
* ``Conv`` + ``BatchNormalization`` (constant scale, bias, mean and variance; inference) ->
  one ``Conv`` whose weight and bias are the folded products (float32/float64), the Conv's
  output read by the BatchNormalization only. The Conv keeps its name and takes the
  BatchNormalization's output; its new weight and bias get fresh names;
* main-graph nodes computing what an earlier node computes merged into it (common
  subexpressions: :mod:`onnxsurgeon.surgery._cse`), ``"rule": "duplicate"``.

Each is listed in :attr:`~onnxsurgeon.surgery.fold.FoldResult.fused` as ``{"rule", "nodes",
"into"}`` (the labels of the nodes removed, the label of the node made, "" for a no-op) and is
proved by ``fold --verify`` like the fold itself (every graph output agrees within the dtype's
tolerance: a Gemm runs another kernel than MatMul + Add, the folded Conv weight rounds
differently). Bodies of If/Loop/Scan (any depth) and local functions are simplified the
same way by :mod:`onnxsurgeon.surgery._fuse_bodies`, their entries tagged ``"graph"``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain, repeat
from operator import attrgetter, itemgetter
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from ..edit import Edit
from ..external import read_tensor
from ..index import GraphIndex, iter_graphs, positions, subgraphs
from ..names import NameAllocator
from ..protos import node_entries
from ..upkeep import Written
from ._fuse_gemm import _gemm, _gemm_sites

NOOP_RULES = {"Identity": "identity", "Dropout": "dropout", "Cast": "cast",
              "Reshape": "reshape", "Transpose": "transpose", "Concat": "shape_concat"}
"""Op -> rule name of the no-op elimination."""

_INPUTS = attrgetter("input")
_OP_TYPE = attrgetter("op_type")
_DOMAIN_INPUTS = attrgetter("domain", "input")
_OUTPUTS = attrgetter("output")
_FIRST, _SECOND = itemgetter(0), itemgetter(1)

RULES = ("identity", "dropout", "cast", "reshape", "transpose", "shape_concat",
         "matmul_add_gemm", "conv_batchnorm", "duplicate")
"""Every rule, as ``fused`` names them."""


@dataclass
class _Plan:
    noops: dict[int, str] = field(default_factory=dict)  # node -> the input its readers read
    gemms: dict[int, tuple[int, bytes]] = field(default_factory=dict)  # add -> (mm, gemm's bytes)
    convs: dict[int, tuple[int, onnx.NodeProto]] = field(default_factory=dict)  # bn -> (conv, new)
    tensors: list[onnx.TensorProto] = field(default_factory=list)
    fused: list[dict[str, Any]] = field(default_factory=list)
    written: Written | None = None  # the Gemms' fields in order, when they are all it makes


def _attr(node: onnx.NodeProto, name: str) -> onnx.AttributeProto | None:
    for a in node.attribute:
        if a.name == name:
            return a
    return None


class _Facts:
    """What the rules ask of one indexed main graph: initializers, uses, graph outputs, types
    (the type oracle is built only when a rule asks for a type)."""

    def __init__(self, index: GraphIndex, inputs: set[str], base_dir: object) -> None:
        graph = index.graph
        self.index = index
        self.base_dir = base_dir
        self.inits = {t.name: t for t in graph.initializer if t.name not in inputs}
        self.outputs = {o.name for o in graph.output}
        self._oracle: Any = None
        self._reads: Counter[str] | None = None
        self._captured: set[str] = set()
        self._edge_types: dict[int, Any] | None = None
        self._node_reads: list[int] | None = None

    def oracle(self) -> Any:
        """The type oracle, its cheap step the forward pass on the int dataflow graph
        (memoized on the index: asking the Gemm candidates in graph order types each node
        once, so a 90k-node chain needs no shape inference)."""
        if self._oracle is None:
            from ..types import TypeOracle
            from ._proto import quick_value_info

            index = self.index
            # the cheap step only on the int dataflow graph (memoized there); without it (a
            # main graph holding bodies) each ask would walk the tensor's whole closure, O(n^2)
            # over a chain's candidates: one shape inference answers all asks instead
            quick = (lambda name: quick_value_info(index, name)) \
                if index.int_graph() is not None else None
            self._oracle = TypeOracle(index, quick=quick)
        return self._oracle

    def type_all(self) -> None:
        """Type every node by one forward pass on the int dataflow graph (the memo
        :func:`~onnxsurgeon.surgery._edgewalk.type_by_edges` keeps on the index), as far as
        the pass knows the ops. O(nodes), ~0.5 us per node."""
        from ._edgewalk import propagate_edges

        if self.index.int_graph() is None:
            return
        self._edge_types = self.index.memo.setdefault("edge_types", {})
        propagate_edges(self.index, range(len(self.index.graph.node)), {}, (),
                        cache=self._edge_types)

    def is_matrix(self, name: str, dtype: int) -> bool:
        """``name`` is a 2-D tensor of element type ``dtype``."""
        j = self.index.producer.get(name)
        if j is not None and self._edge_types is not None:
            t = self._edge_types.get(j)
            if t is not None:
                return bool(t[0] == dtype and len(t[1]) == 2)
        shape = self.oracle().shape(name)
        return shape is not None and len(shape) == 2 and self.oracle().elem_type(name) == dtype

    def only_reader(self, name: str, reader: int) -> bool:
        """``name``, read by node ``reader``, is read by it alone (once), inside no body, and
        is no graph output. The reads are counted once per graph (C-level), O(reads)."""
        if name in self.outputs:
            return False
        edges = self.index.known_int_graph()  # no body then: reads counted per producer
        j = self.index.producer.get(name)
        if edges is not None and j is not None and len(self.index.graph.node[j].output) == 1:
            if self._node_reads is None:
                preds = np.fromiter(edges.preds, np.int64, count=len(edges.preds))
                self._node_reads = np.bincount(preds[preds >= 0],
                                               minlength=len(edges.starts) - 1).tolist()
            return self._node_reads[j] == 1 and name in self.index.graph.node[reader].input
        if self._reads is None:
            graph = self.index.graph
            self._reads = Counter(chain.from_iterable(map(_INPUTS, graph.node)))
            for i in self.index.body_holders:
                for body in subgraphs(graph.node[i]):
                    for g in iter_graphs(body):
                        for n in g.node:
                            self._captured.update(x for x in n.input if x)
        return (self._reads[name] == 1 and name not in self._captured
                and name in self.index.graph.node[reader].input)

    def value(self, name: str) -> np.ndarray:
        t = self.inits[name]
        return np.asarray(read_tensor(t, self.base_dir))  # type: ignore[arg-type]


def _same_shape(target: list[int], shape: Sequence[int | str | None], *, copy: bool) -> bool:
    """A Reshape to ``target`` gives ``shape`` back: the same rank, each entry the static size
    of that dim (> 0), a 0 copying it (``copy``: no ``allowzero``), or one -1 while every other
    dim has a static size > 0 (then it infers that dim)."""
    if len(target) != len(shape):
        return False
    free = [k for k, t in enumerate(target) if t == -1]
    if len(free) > 1:
        return False
    for k, (t, d) in enumerate(zip(target, shape, strict=True)):
        static = isinstance(d, int) and d > 0
        if free and k != free[0] and not static:
            return False
        if not (t == -1 or (t == 0 and copy) or (static and t == d)):
            return False
    return True


def _noop_source(facts: _Facts, node: onnx.NodeProto, opset: int) -> str | None:
    """The input ``node`` passes through unchanged, or None."""
    if node.domain not in ("", "ai.onnx") or not node.input or not node.input[0]:
        return None
    if not node.output or node.output[0] in facts.outputs:
        return None
    op, x = node.op_type, node.input[0]
    if op == "Identity":
        return x
    if op == "Dropout":
        if any(o for o in node.output[1:]):
            return None  # the mask is asked for
        if opset < 7:
            is_test = _attr(node, "is_test")
            return x if is_test is not None and is_test.i else None
        if len(node.input) > 2 and node.input[2]:
            flag = facts.inits.get(node.input[2])
            if flag is None or facts.value(node.input[2]).any():
                return None
        return x
    if op == "Cast":
        to = _attr(node, "to")
        return x if to is not None and facts.oracle().elem_type(x) == to.i else None
    if op == "Reshape":
        if len(node.input) < 2 or node.input[1] not in facts.inits:
            return None
        shape = facts.oracle().shape(x)
        if shape is None:
            return None
        target = facts.value(node.input[1])
        allowzero = _attr(node, "allowzero")
        same = target.ndim == 1 and _same_shape(target.tolist(), shape,
                                                  copy=not (allowzero and allowzero.i))
        return x if same else None
    if op == "Concat":  # every dim of Shape(x) gathered and put back together: Shape(x)
        from ._foldshape import whole_shape

        def rank(name: str) -> int | None:
            shape = facts.oracle().shape(name)
            return None if shape is None else len(shape)

        return whole_shape(node, facts.index.graph.node, facts.index.producer,
                           lambda n: facts.value(n) if n in facts.inits else None, rank)
    if op == "Transpose":
        perm = _attr(node, "perm")
        shape = facts.oracle().shape(x)
        if shape is None:
            return None
        if perm is None:
            return x if len(shape) <= 1 else None
        return x if list(perm.ints) == list(range(len(shape))) else None
    return None


def _conv_bn(facts: _Facts, nodes: Sequence[onnx.NodeProto], bn_at: int, names: NameAllocator
             ) -> tuple[int, onnx.NodeProto, list[onnx.TensorProto]] | None:
    """The Conv replacing BatchNormalization ``bn_at`` and the Conv it reads, or None."""
    bn = nodes[bn_at]
    if bn.domain not in ("", "ai.onnx") or len(bn.input) != 5 or any(o for o in bn.output[1:]):
        return None
    training = _attr(bn, "training_mode")
    spatial = _attr(bn, "spatial")
    if (training is not None and training.i) or (spatial is not None and not spatial.i):
        return None
    if not all(n in facts.inits for n in bn.input[1:]):
        return None
    conv_at = facts.index.producer.get(bn.input[0])
    if conv_at is None:
        return None
    conv = nodes[conv_at]
    if conv.op_type != "Conv" or conv.domain not in ("", "ai.onnx") or len(conv.input) < 2:
        return None
    w = conv.input[1]
    bias = conv.input[2] if len(conv.input) > 2 and conv.input[2] else None
    wt = facts.inits.get(w)
    if wt is None or wt.data_type not in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE):
        return None
    if bias is not None and bias not in facts.inits:
        return None
    if not facts.only_reader(bn.input[0], bn_at):
        return None
    eps_attr = _attr(bn, "epsilon")
    eps = eps_attr.f if eps_attr is not None else 1e-5
    scale, beta, mean, var = (facts.value(n).astype(np.float64) for n in bn.input[1:])
    weight = facts.value(w)
    m = weight.shape[0]
    if any(v.shape != (m,) for v in (scale, beta, mean, var)):
        return None
    factor = scale / np.sqrt(var + eps)
    b0 = facts.value(bias).astype(np.float64) if bias is not None else np.zeros(m)
    if b0.shape != (m,):
        return None
    dtype = weight.dtype
    new_w = (weight.astype(np.float64) * factor.reshape((m,) + (1,) * (weight.ndim - 1))
             ).astype(dtype)
    new_b = ((b0 - mean) * factor + beta).astype(dtype)
    w_name, b_name = names.fresh(f"{w}_bn"), names.fresh(f"{bias or w}_bn_bias")
    made = onnx.NodeProto()
    made.CopyFrom(conv)
    del made.input[:]
    made.input.extend([conv.input[0], w_name, b_name])
    del made.output[:]
    made.output.append(bn.output[0])
    return conv_at, made, [numpy_helper.from_array(new_w, w_name),
                           numpy_helper.from_array(new_b, b_name)]


def plan_noops(index: GraphIndex, *, inputs: set[str], base_dir: object, opset: int,
               ops: list[str] | None = None) -> tuple[dict[int, str], list[dict[str, Any]]]:
    """The no-op nodes of the main graph (node -> the tensor its readers read instead; a chain
    of them reads the first input) and their ``fused`` entries. O(nodes); the type oracle only
    when a Cast, Reshape or Transpose is a candidate. ``ops``: every node's op type, when the
    caller has them (else read here, C-level: only the candidates are read further)."""
    facts = _Facts(index, inputs, base_dir)
    found: dict[int, str] = {}
    fused: list[dict[str, Any]] = []
    nodes = index.graph.node
    ops = list(map(_OP_TYPE, nodes)) if ops is None else ops
    for i in sorted(chain.from_iterable(positions(ops, op) for op in NOOP_RULES)):
        rule, node = NOOP_RULES[ops[i]], nodes[i]
        src = _noop_source(facts, node, opset)
        if src is None:
            continue
        found[i] = src
        fused.append({"rule": rule, "nodes": [index.node_label(i)], "into": ""})
    through: dict[str, str] = {}
    for i in sorted(found):  # topological: a no-op's source is resolved before it
        found[i] = through.get(found[i], found[i])
        through[index.graph.node[i].output[0]] = found[i]
    return found, fused


def plan_fusions(index: GraphIndex, *, inputs: set[str], base_dir: object, opset: int,
                 ops: list[str] | None = None, names: NameAllocator | None = None) -> _Plan:
    """MatMul + Add -> Gemm and Conv + BatchNormalization -> Conv sites of the main graph (no
    node in two sites). O(nodes); reads the weights of the Conv sites only. ``ops``: every
    node's op type, when the caller has them. ``names``: the allocator of the Conv sites' new
    weight names (default: one for the index's model; a body's caller passes one that also
    knows the host's names)."""
    facts = _Facts(index, inputs, base_dir)
    plan = _Plan()
    nodes = index.graph.node
    if opset < 9:
        return plan
    used: set[int] = set()
    if ops is None:
        ops = list(map(_OP_TYPE, nodes))  # C-level: only the candidates are read further
    if "MatMul" in ops:
        facts.type_all()
    found = _gemm_sites(facts, nodes, ops) if "MatMul" in ops else ({}, None)
    sites = found[0] if found is not None else None
    label = index.node_label
    edges = index.known_int_graph()
    if edges is not None:  # the names as load read them: no node touched for its label
        enames = edges.names

        def label(i: int) -> str:
            return enames[i] or f"{ops[i]}#{i}"
    bns = positions(ops, "BatchNormalization")
    if sites is not None and not bns:  # Gemms only (a MatMul is in one site at most)
        plan.gemms, plan.written = sites, found[1] if found is not None else None
        if edges is not None:  # the labels of the names as load read them, C-level
            firsts = list(map(enames.__getitem__, map(_FIRST, sites.values())))
            seconds = list(map(enames.__getitem__, sites))
            if "" in firsts or "" in seconds:
                firsts = list(map(label, map(_FIRST, sites.values())))
                seconds = list(map(label, sites))
        else:
            firsts = list(map(label, map(_FIRST, sites.values())))
            seconds = list(map(label, sites))
        plan.fused = [{"rule": "matmul_add_gemm", "nodes": [first, second], "into": first}
                      for first, second in zip(firsts, seconds, strict=True)]
        return plan
    for i in sorted([*(positions(ops, "Add") if sites is None else sites), *bns]):
        if ops[i] == "Add":
            got = sites[i] if sites is not None else _gemm(facts, nodes, ops, i)
            if got is not None and got[0] not in used:
                used.update((i, got[0]))
                plan.gemms[i] = got
                first = label(got[0])
                plan.fused.append({"rule": "matmul_add_gemm", "nodes": [first, label(i)],
                                   "into": first})
        else:
            if names is None:
                names = NameAllocator.for_index(index)
            made = _conv_bn(facts, nodes, i, names)
            if made is not None and made[0] not in used:
                used.update((i, made[0]))
                plan.convs[i] = (made[0], made[1])
                plan.tensors.extend(made[2])
                plan.fused.append({"rule": "conv_batchnorm",
                                   "nodes": [index.node_label(made[0]), index.node_label(i)],
                                   "into": index.node_label(made[0])})
    return plan


def apply_noops(e: Edit, index: GraphIndex, noops: Mapping[int, str]) -> None:
    """Readers of each no-op read its source; the no-ops are removed (through ``e``)."""
    for i, source in sorted(noops.items()):
        e.rewire(index.uses_of(index.graph.node[i].output[0]), source)
    e.remove_nodes(set(noops))


def apply_fusions(e: Edit, plan: _Plan) -> None:
    """Each site's two nodes replaced by the one made, at the second's place (through ``e``)."""
    removed = set(plan.gemms)
    removed.update(map(_FIRST, plan.gemms.values()))
    inserted = dict(zip(plan.gemms, zip(repeat(1), node_entries(
        list(map(_SECOND, plan.gemms.values())))), strict=True))
    for second, (first, made) in plan.convs.items():
        removed.update((first, second))
        inserted[second] = (1, node_entries([made.SerializeToString()])[0])
    if plan.tensors:
        e.add_initializers(plan.tensors, made=True)
    if plan.written is not None and not plan.convs and plan.gemms:
        # every Gemm is the stand-in but for its names: the save checks its schema once
        e.splice_nodes(removed, inserted, written=plan.written,
                       stand_ins=[onnx.NodeProto(op_type="Gemm", input=["x", "w", "b"],
                                                 output=["y"])])
    else:
        e.splice_nodes(removed, inserted)
