"""Layer-wise comparison: every tensor two models share, in bounded batches.

Shared tensors are the reference's main-graph node outputs whose counterpart (same name, or the
name a mapping gives) the candidate computes with the same element type (or, from a
:class:`Converted` candidate, the type it converted to) and static shape. They
are compared in the reference's topological order, exposed in batches whose estimated size stays
under a byte budget (never every tensor in memory at once): per batch one session per model, every
sample run through both, statistics folded in (:class:`~.accumulate.PairAccumulator`), arrays
dropped. Cost: (batches x samples) runs per model; memory: one batch of tensors per model.

:func:`structurally_covered` proves a pair equal without its values: the same graph computes it in
both models from tensors that agree informatively (or from identical inputs and weights).
:func:`node_check` tells a wrong node from inherited drift: the candidate's node is fed the
reference's inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import helper

from ..closure import closure
from ..external import read_tensor
from ..index import GraphIndex
from ..io import Model
from ..protos import rename_reads
from .accumulate import PairAccumulator
from .informative import PROBE_ELEMENTS
from .inputs import Sample
from .locate import numpy_dtype_name, same_initializer, tensor_bytes
from .report import DeepResult, TensorError
from .run import ModelRunError, Staged

DEEP_BUDGET_BYTES = 128 * 2**20
"""Estimated bytes of one batch per model: the tensors it exposes and their comparison state
(:func:`state_bytes`)."""
DEEP_MAX_TENSORS = 2048
"""Most tensors one batch exposes when settling pairs (whose comparison may stop after a
batch)."""
FORCED_MAX_TENSORS = 1 << 20
"""Most tensors one batch of ``--deep`` exposes (it compares them all: fewer, larger batches
cost fewer sessions; a 90k-node chain's 90k tiny tensors fit one)."""

SATURATION_BOUNDS = {"Softmax": (1.0,), "Sigmoid": (1.0,), "HardSigmoid": (1.0,),
                     "Tanh": (-1.0, 1.0), "Softsign": (-1.0, 1.0), "HardSwish": (), "Relu": ()}
"""Op -> the values it saturates at besides 0 (Clip's come from its attributes or inputs)."""


_BODIES = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
"""Attribute types that hold a body."""


class Converted(Staged):
    """A candidate made from the reference by a float type conversion (``precision``: the
    one kind, :class:`~.precision.LowFloat`): a tensor it converted pairs with the reference's
    float32 one of the same name, compared upcast (never exactly), and its nodes step with the
    reference's as the conversion maps them (:func:`same_step`, through :meth:`through`, :meth:`same_weight` and :meth:`node_attrs`). The
    same graph from the same inputs is then no proof of equal values: only a frontier that was
    compared is (:func:`~.deepen.settle`)."""

    def pairs(self, ref_elem: int, cand_elem: int) -> bool:
        """Whether a reference tensor of ``ref_elem`` pairs with one of ours of ``cand_elem``."""
        raise NotImplementedError

    def upcast(self, ref_value: Any, value: Any) -> Any:
        """Our ``value`` of a converted tensor in the type of the reference's ``ref_value``
        (others unchanged)."""
        raise NotImplementedError

    def through(self, ref: Staged, a: str, b: str) -> str:
        """Our tensor ``b`` with the Casts the conversion added between it and the computation
        of the reference's ``a`` looked through (:func:`same_step` steps from there)."""
        raise NotImplementedError

    def same_weight(self, ref: Staged, a: str, b: str) -> bool:
        """Whether our weight ``b`` is the reference's ``a`` as the conversion makes it."""
        raise NotImplementedError

    def node_attrs(self, staged: Staged, node: onnx.NodeProto) -> list[bytes]:
        """``node``'s attributes (of ``staged``: the reference or us) as the conversion compares
        them (a float type the conversion changed reads as one)."""
        raise NotImplementedError


@dataclass(frozen=True)
class Shared:
    """A tensor both models compute: names, producing node, order and saturation bounds."""

    ref: str
    cand: str
    node: str
    op_type: str
    position: int
    depth: int
    bounds: tuple[float, ...]


def saturation_bounds(staged: Staged, name: str) -> tuple[float, ...]:
    """Values the op producing ``name`` saturates at besides 0 (softmax 1, tanh +-1, clip's
    constant min and max)."""
    index = staged.index
    i = index.producer.get(name)
    if i is None:
        return ()
    node = index.graph.node[i]
    if node.op_type == "Clip":
        out: list[float] = []
        for a in node.attribute:
            if a.name in ("min", "max") and a.type == onnx.AttributeProto.FLOAT:
                out.append(float(a.f))
        for slot in (1, 2):
            if len(node.input) > slot and node.input[slot] in index.initializers:
                pos = index.initializers[node.input[slot]]
                if pos >= 0:
                    value = read_tensor(index.graph.initializer[pos], staged.model.base_dir)
                    if value.size == 1:
                        out.append(float(value.reshape(-1)[0]))
        return tuple(out)
    return SATURATION_BOUNDS.get(node.op_type, ())


def node_depths(index: GraphIndex) -> list[int]:
    """Per main-graph node, the longest path (in nodes) from a graph input. O(nodes + edges)."""
    depth: list[int] = []
    by_tensor: dict[str, int] = {}
    for i, node in enumerate(index.graph.node):
        reads = [n for n in node.input if n]
        reads.extend(name for name, _ in index.captures.get(i, ()))
        d = 1 + max((by_tensor.get(n, 0) for n in reads), default=0)
        depth.append(d)
        for out in node.output:
            if out:
                by_tensor[out] = d
    return depth


def _static(shape: Sequence[int | str | None] | None) -> tuple[int | None, ...] | None:
    if shape is None:
        return None
    return tuple(d if isinstance(d, int) else None for d in shape)


def _compatible(a: Sequence[int | str | None] | None, b: Sequence[int | str | None] | None) -> bool:
    sa, sb = _static(a), _static(b)
    if sa is None or sb is None:
        return True
    if len(sa) != len(sb):
        return False
    return all(x is None or y is None or x == y for x, y in zip(sa, sb, strict=True))


def shared_tensors(ref: Staged, cand: Staged, *, mapping: Mapping[str, str] | None = None,
                   strict: bool = False, targets: Sequence[str] | None = None) -> list[Shared]:
    """Tensors both models compute, in the reference's topological order (restricted to the
    ancestors of ``targets``, targets included, when given). ``mapping``: reference name ->
    candidate name (identity otherwise; only mapped names when ``strict``). O(nodes + edges)."""
    mapping = dict(mapping or {})
    rindex, cindex = ref.index, cand.index
    allowed: set[int] | None = None
    if targets is not None:
        allowed = set(closure(rindex, [t for t in targets if t in rindex.producer]).nodes)
    depths = node_depths(rindex)
    out: list[Shared] = []
    for i, node in enumerate(rindex.graph.node):
        if allowed is not None and i not in allowed:
            continue
        for name in node.output:
            if not name or (strict and name not in mapping):
                continue
            other = mapping.get(name, name)
            if other not in cindex.producer:
                continue
            elem = ref.elem_type(name)
            if elem != cand.elem_type(other) and not (
                    isinstance(cand, Converted) and cand.pairs(elem, cand.elem_type(other))):
                continue
            if not _compatible(ref.oracle.shape(name), cand.oracle.shape(other)):
                continue
            out.append(Shared(name, other, rindex.node_label(i), node.op_type, i, depths[i],
                              saturation_bounds(ref, name)))
    return out


def _bytes(staged: Staged, name: str, dims: Mapping[str, int]) -> int:
    size = tensor_bytes(staged, name, dims)
    return size + state_bytes(staged, name, size)


def state_bytes(staged: Staged, name: str, size: int) -> int:
    """Estimated bytes a :class:`~.accumulate.PairAccumulator` keeps per side of a tensor of
    ``size`` bytes across samples: the first sample's probe and its running min and max."""
    elem = staged.elem_type(name)
    try:
        item = np.dtype(helper.tensor_dtype_to_np_dtype(elem)).itemsize if elem else 4
    except (KeyError, TypeError, ValueError):
        item = 4
    return 3 * min(size, PROBE_ELEMENTS * item)


def _tensor_batches(staged: Staged, names: Sequence[str], *, budget: int,
                    dims: Mapping[str, int], max_tensors: int) -> Iterator[list[str]]:
    """Tensor ``names`` of ``staged`` in order, one batch at a time (a comparison that stops
    early sizes no more)."""
    current: list[str] = []
    used = 0
    for name in names:
        size = _bytes(staged, name, dims)
        if current and (used + size > budget or len(current) >= max_tensors):
            yield current
            current, used = [], 0
        current.append(name)
        used += size
    if current:
        yield current


def tensor_batches(staged: Staged, names: Sequence[str], *, budget: int, dims: Mapping[str, int],
                   max_tensors: int = DEEP_MAX_TENSORS) -> list[list[str]]:
    """Tensor ``names`` of ``staged`` split in order into batches of estimated size (one
    sample, with the comparison's state) at most ``budget`` bytes and at most ``max_tensors``
    tensors (a tensor larger than the budget gets a batch of its own). O(names)."""
    return list(_tensor_batches(staged, names, budget=budget, dims=dims, max_tensors=max_tensors))


def _batches(staged: Staged, items: Sequence[Shared], *, budget: int, dims: Mapping[str, int],
             max_tensors: int) -> Iterator[list[Shared]]:
    """:func:`batches`, one at a time: :func:`_tensor_batches` of the items' reference names."""
    rest = iter(items)
    for group in _tensor_batches(staged, [item.ref for item in items], budget=budget, dims=dims,
                                 max_tensors=max_tensors):
        yield [next(rest) for _ in group]


def batches(staged: Staged, items: Sequence[Shared], *, budget: int, dims: Mapping[str, int],
            max_tensors: int = DEEP_MAX_TENSORS) -> list[list[Shared]]:
    """``items`` split in order into batches of estimated size at most ``budget`` bytes (a
    tensor larger than the budget gets a batch of its own)."""
    return list(_batches(staged, items, budget=budget, dims=dims, max_tensors=max_tensors))


def _fold(cand: Staged, group: Sequence[Shared], accs: Sequence[PairAccumulator],
          usable: list[bool], k: int, rvals: Mapping[str, Any], cvals: Mapping[str, Any],
          part: Sequence[int] | None = None) -> None:
    """Fold sample ``k`` of a batch in (``part``: only the items at these positions): each
    usable tensor's pair of values (a value that is no array, or whose shape or type differs
    from its counterpart's, makes its tensor unusable)."""
    for j in range(len(group)) if part is None else part:
        s = group[j]
        a, b = rvals.get(s.ref), cvals.get(s.cand)
        if isinstance(cand, Converted):
            b = cand.upcast(a, b)
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)
                and a.shape == b.shape and a.dtype == b.dtype):
            usable[j] = False
        if usable[j]:
            accs[j].add(a, b, k)


RUN_BYTES = 40 * 2**20
"""Most bytes of a batch's values one run of a model returns (the tensors' own sizes): a larger
batch is computed by several runs of about equal size, each of the model up to its last tensor
(a session's variant computes only what its tensors need), its statistics unchanged. Both
models' values of one run are held at once: this bounds that memory, not the batch
(:data:`DEEP_BUDGET_BYTES`, which decides what one comparison step covers)."""


def _parts(ref: Staged, group: Sequence[Shared], *, dims: Mapping[str, int]) -> list[list[int]]:
    """Positions of ``group`` split in order into the fewest runs of at most about
    :data:`RUN_BYTES` of values, of about equal size. O(group)."""
    sizes = [tensor_bytes(ref, s.ref, dims) for s in group]
    total = sum(sizes)
    count = max(1, -(-total // RUN_BYTES))
    parts: list[list[int]] = [[]]
    used = 0
    for j, size in enumerate(sizes):
        if parts[-1] and len(parts) < count and used + size / 2 > total * len(parts) / count:
            parts.append([])
        parts[-1].append(j)
        used += size
    return parts


def deep_compare(ref: Staged, cand: Staged, ref_feeds: Sequence[Sample],
                 cand_feeds: Sequence[Sample], *, items: Sequence[Shared],
                 rtol: float | None = None, atol: float | None = None, exact: bool = False,
                 budget: int = DEEP_BUDGET_BYTES, dims: Mapping[str, int] | None = None,
                 forced: bool = False, notes: list[str] | None = None,
                 until: Callable[[Sequence[TensorError]], bool] | None = None,
                 max_tensors: int = DEEP_MAX_TENSORS) -> DeepResult:
    """Compare every shared tensor in ``items`` over every sample, batch by batch (see the
    module docstring). A batch whose session cannot be built or run is skipped with a note.
    ``until(compared so far)``, asked after each batch, ends the comparison early when True."""
    results: dict[int, TensorError] = {}
    skipped = done = 0
    groups = _batches(ref, items, budget=budget, dims=dict(dims or {}), max_tensors=max_tensors)
    for group in groups:
        if done and until is not None and until(list(results.values())):
            break
        done += 1
        accs = [PairAccumulator(s.ref, s.cand, rtol=rtol, atol=atol, exact=exact,
                                dtype=numpy_dtype_name(ref.elem_type(s.ref)), bounds=s.bounds)
                for s in group]
        usable = [True] * len(group)
        # values the comparison's own runs kept (its sessions computed them): no run again
        rkept = ref.kept_runs(ref_feeds, [s.ref for s in group])
        ckept = cand.kept_runs(cand_feeds, [s.cand for s in group])
        try:
            if rkept is not None and ckept is not None:
                for k in range(len(ref_feeds)):
                    _fold(cand, group, accs, usable, k, rkept[k], ckept[k])
            else:
                for part in _parts(ref, group, dims=dict(dims or {})):
                    with ref.session([group[j].ref for j in part]) as rrun, \
                            cand.session([group[j].cand for j in part]) as crun:
                        for k in range(len(ref_feeds)):
                            rvals = rrun.run(ref_feeds[k])
                            cvals = crun.run(cand_feeds[k])
                            _fold(cand, group, accs, usable, k, rvals, cvals, part)
                            del rvals, cvals
        except ModelRunError as exc:
            if notes is not None:
                notes.append(f"deep comparison skipped {len(group)} tensors: {exc}")
            skipped += len(group)
            continue
        for j, (s, acc) in enumerate(zip(group, accs, strict=True)):
            if not usable[j]:
                skipped += 1
                continue
            r = acc.result()
            results[len(results)] = TensorError(
                tensor=s.ref, candidate=s.cand, node=s.node, op_type=s.op_type,
                position=s.position, depth=s.depth, max_abs_diff=r.max_abs_diff,
                max_rel_diff=r.max_rel_diff, ok=bool(r.agree), informative=r.informative,
                why=r.why if r.agree else r.reason)  # a failure's reason (NaN/Inf positions)
    ordered = sorted(results.values(), key=lambda t: (t.position, t.tensor))
    return DeepResult(tensors=tuple(ordered), forced=forced, skipped=skipped, batches=done)


# --------------------------------------------------------------------- structural cover
def _attrs(node: onnx.NodeProto, captured: Sequence[str] = ()) -> list[bytes]:
    """The node's attributes serialized; bodies read the outer ``captured`` names as
    placeholders (by position), so bodies that differ only in what they capture compare equal."""
    if captured:
        node = copy_node(node)
        rename_reads(node, {name: f"\x00capture{k}" for k, name in enumerate(captured)})
    return sorted(a.SerializeToString(deterministic=True) for a in node.attribute)


def copy_node(node: onnx.NodeProto) -> onnx.NodeProto:
    """A deep copy of ``node``."""
    out = onnx.NodeProto()
    out.CopyFrom(node)
    return out


def same_step(ref: Staged, cand: Staged, a: str, b: str,
              mapping: Mapping[str, str]) -> list[tuple[str, str]] | None:
    """One step of a walk over the same graph in both models: the (reference, candidate) tensor
    pairs to walk next when ``a`` and ``b`` are computed alike (same op, attributes and wiring;
    ``[]`` for equal initializers or a graph input fed alike), None when they differ. A
    :class:`Converted` candidate steps by its conversion (its Casts looked through, its weights
    and attributes compared as it made them)."""
    conv = cand if isinstance(cand, Converted) else None
    if conv is not None:
        b = conv.through(ref, a, b)
    rindex, cindex = ref.index, cand.index
    r_init = rindex.initializers.get(a, -1) >= 0
    c_init = cindex.initializers.get(b, -1) >= 0
    if r_init or c_init:  # an initializer on one side only (a Constant folded): not alike
        if not (r_init and c_init):
            return None
        same = (conv.same_weight(ref, a, b) if conv is not None
                else same_initializer(ref, cand, a, b))
        return [] if same else None
    if a in rindex.inputs and a not in rindex.producer:
        return [] if mapping.get(a, a) == b else None
    i, j = rindex.producer.get(a), cindex.producer.get(b)
    if i is None or j is None:
        return None
    rn, cn = rindex.graph.node[i], cindex.graph.node[j]
    if conv is not None:  # a converted body is not compared: a node holding one never steps
        if any(x.type in _BODIES for x in (*rn.attribute, *cn.attribute)):
            return None
        rcap: list[str] = []
        ccap: list[str] = []
        rattrs, cattrs = conv.node_attrs(ref, rn), conv.node_attrs(conv, cn)
    else:
        rcap = list(dict.fromkeys(n for n, _ in rindex.captures.get(i, ())))
        ccap = list(dict.fromkeys(n for n, _ in cindex.captures.get(j, ())))
        rattrs, cattrs = _attrs(rn, rcap), _attrs(cn, ccap)
    if (rn.op_type != cn.op_type or rn.domain != cn.domain or len(rn.input) != len(cn.input)
            or len(rcap) != len(ccap) or list(rn.output).index(a) != list(cn.output).index(b)
            or rattrs != cattrs):
        return None
    out = list(zip(rcap, ccap, strict=True))
    for x, y in zip(rn.input, cn.input, strict=True):
        if bool(x) != bool(y):
            return None
        if x:
            out.append((x, y))
    return out


def structurally_covered(ref: Staged, cand: Staged, r: str, c: str, *, agreed: Collection[str],
                         mapping: Mapping[str, str] | None = None,
                         fed: Collection[str] = ()) -> list[str] | None:
    """The ``agreed`` tensors the walk stopped at when the candidate computes ``c`` with the
    same graph the reference computes ``r`` with (same ops, attributes, weights and wiring),
    walking back until tensors in ``agreed`` (reference names that agreed informatively, at their
    mapped counterpart) or graph inputs fed alike (the same name, or the mapped one); None when
    the graphs differ. ``fed``: candidate graph inputs fed the reference's values of their
    counterparts (an extracted model's stop tensors). O(nodes + weight bytes) of the walked
    region."""
    mapping = dict(mapping or {})
    cuts: list[str] = []
    stack = [(r, c)]
    seen: set[tuple[str, str]] = set()
    while stack:
        a, b = stack.pop()
        if (a, b) in seen:
            continue
        seen.add((a, b))
        if a in agreed and mapping.get(a, a) == b:
            cuts.append(a)
            continue
        if b in fed and mapping.get(a, a) == b:
            continue
        step = same_step(ref, cand, a, b, mapping)
        if step is None:
            return None
        stack.extend(step)
    return cuts


# ------------------------------------------------------------------------- node check
def loose_value_info(staged: Staged, name: str) -> onnx.ValueInfoProto:
    """``name`` typed by its dtype only (values of another shape may be fed), or by its full
    type when it is not a tensor (a sequence or an optional value)."""
    vi = staged.oracle.value_info(name)
    if vi is not None and vi.type.WhichOneof("value") not in (None, "tensor_type"):
        out = onnx.ValueInfoProto()
        out.CopyFrom(vi)
        out.name = name
        return out
    return helper.make_tensor_value_info(name, staged.elem_type(name), None)


def isolate_nodes(staged: Staged, outputs: Sequence[str], stop_at: Sequence[str]) -> Model:
    """The nodes of ``staged`` computing ``outputs`` from ``stop_at`` as a standalone model whose
    inputs are the stop tensors (first) and any graph inputs read."""
    index = staged.index
    clo = closure(index, list(outputs), stop_at=list(stop_at))
    graph = index.graph
    nodes = [graph.node[i] for i in clo.nodes]
    inits = [graph.initializer[index.initializers[n]] for n in clo.initializers
             if index.initializers[n] >= 0]
    inputs = [loose_value_info(staged, n) for n in clo.stops]
    inputs += [loose_value_info(staged, n) for n in clo.inputs if n not in clo.stops]
    outs = [loose_value_info(staged, n) for n in outputs]
    g = helper.make_graph(nodes, "isolated", inputs, outs, inits)
    proto = helper.make_model(g, opset_imports=list(staged.model.proto.opset_import),
                              functions=list(staged.model.proto.functions))
    proto.ir_version = staged.model.proto.ir_version
    return Model(proto, base_dir=staged.model.base_dir)


def node_check(ref: Staged, cand: Staged, ref_feed: Sample, cand_feed: Sample, tensor: str,
               cand_tensor: str, *, mapping: Mapping[str, str] | None = None,
               rtol: float | None = None, atol: float | None = None,
               exact: bool = False,
               values: Mapping[str, tuple[np.ndarray, np.ndarray, str]] | None = None,
               ) -> tuple[str, str] | None:
    """("wrong node" | "inherited drift", detail) for the candidate node producing
    ``cand_tensor``, fed the reference's values of its inputs; None when an input has no
    reference counterpart or the check cannot run. ``values``: (reference, candidate) arrays of
    these feeds already computed, with the candidate tensor, by reference name (what :func:`~.locate.locate` fills); the
    models run only for what is missing."""
    inverse = {v: k for k, v in dict(mapping or {}).items()}
    cindex = cand.index
    j = cindex.producer.get(cand_tensor)
    if j is None:
        return None
    node = cindex.graph.node[j]
    reads = [n for n in node.input if n] + [n for n, _ in cindex.captures.get(j, ())]
    computed = [n for n in dict.fromkeys(reads) if n in cindex.producer]
    ref_names = [inverse.get(n, n) for n in computed]
    if any(not ref.is_tensor(n) for n in ref_names):
        return None
    known = dict(values or {})
    try:
        if tensor in known and known[tensor][2] == cand_tensor and all(
                r in known and known[r][2] == c for c, r in zip(computed, ref_names, strict=True)):
            rvals = {r: known[r][0] for r in [tensor, *ref_names]}
            cvals = {c: known[r][1] for c, r in zip(computed, ref_names, strict=True)}
        else:
            rvals = ref.run(ref_feed, [tensor, *ref_names])
            cvals = cand.run(cand_feed, computed) if computed else {}
        alone = isolate_nodes(cand, [cand_tensor], computed)
        staged = Staged(alone, cand.workspace, "node", threads=cand.threads, limits=cand.limits)
        feed = {**{k: v for k, v in cand_feed.items() if k in staged.input_names},
                **{c: rvals[r] for c, r in zip(computed, ref_names, strict=True)}}
        fed = staged.run(feed, [cand_tensor])
    except ModelRunError:
        return None
    dtype = numpy_dtype_name(ref.elem_type(tensor))
    own = PairAccumulator(tensor, cand_tensor, rtol=rtol, atol=atol, exact=exact, dtype=dtype)
    own.add(rvals[tensor], fed[cand_tensor])
    drift = 0.0
    for c, r in zip(computed, ref_names, strict=True):
        acc = PairAccumulator(r, c, rtol=rtol, atol=atol, exact=exact,
                              dtype=numpy_dtype_name(ref.elem_type(r)))
        acc.add(rvals[r], cvals[c])
        drift = max(drift, acc.result().max_abs_diff or 0.0)
    mine = own.result()
    if not mine.agree:
        return ("wrong node", f"fed the reference's inputs it still differs by up to "
                              f"{mine.max_abs_diff or 0:.3g}")
    return ("inherited drift", f"fed the reference's inputs it agrees (max abs diff "
                               f"{mine.max_abs_diff or 0:.3g}); its inputs differ by up to "
                               f"{drift:.3g}")
