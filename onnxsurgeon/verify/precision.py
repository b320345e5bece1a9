"""The rewrite invariant of ``precision``: the converted model's outputs equal the float32
original's within the precision budget (:func:`~.accumulate.precision_budget`; ``--verify-rtol``
/ ``--verify-atol`` replace it), never exactly. Inputs the conversion turned to float16 are fed
the same samples rounded to float16.

A graph output that cannot show a difference (a saturated or near-uniform softmax) is settled
like any other rewrite's, by its nearest informative frontier (:func:`~.deepen.settle`): the
converted model is staged as a :class:`LowFloat` candidate, so each tensor it converted pairs
with its float32 original (same name), compared upcast under the budget, and its nodes step
with the original's as the conversion maps them (the Casts it added looked through, dtype
attributes and constants and weights equal after rounding to the low type). The logits before
the softmax are compared and settle it; a converted tensor that overflowed (inf where float32
is finite) on the way fails it, named. ``--verify-deep`` compares every converted tensor.

:func:`auto_block` finds the nodes to keep in float32: where, layer by layer, the error of the
converted model is born (local) rather than inherited, or a value overflows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..errors import UsageError
from ..external import read_tensor
from ..index import GraphIndex
from ..io import Model, snapshot
from ..record import PrecisionRecord
from ..surgery.precision import _DEFAULT_FLOAT_DTYPE, _DTYPE_ATTRS, FP16_MAX, PrecisionResult
from .accumulate import effective_atol, precision_budget
from .compare import make_samples
from .deep import DEEP_BUDGET_BYTES, Converted, tensor_batches
from .inputs import InputsLike, Range, Sample
from .invariant import Check, Context, dtype_of, rewrite_check, run_all
from .isolate import Limits
from .locate import Side, describe, same_initializer
from .report import Divergence
from .run import Staged, Workspace

FLOAT = TensorProto.FLOAT


class LowFloat(Converted):
    """The model ``precision`` converted, staged as a candidate of its float32 original: a
    tensor of the low type (``low``: FLOAT16 or BFLOAT16) pairs with the original's float32
    tensor of the same name, compared upcast to float32 (see the module docstring)."""

    def __init__(self, model: Model, workspace: Workspace, label: str, *, low: int,
                 threads: int = 0, limits: Limits | None = None,
                 index: GraphIndex | None = None) -> None:
        """``low``: the element type the conversion made (the others as :class:`Staged`)."""
        super().__init__(model, workspace, label, threads=threads, limits=limits, index=index)
        self.low = low
        self._floats = (FLOAT, low)

    def pairs(self, ref_elem: int, cand_elem: int) -> bool:
        """A float32 reference tensor pairs with our low-type one."""
        return ref_elem == FLOAT and cand_elem == self.low

    def upcast(self, ref_value: Any, value: Any) -> Any:
        """``value`` in float32 when it is the low type and ``ref_value`` float32."""
        if (isinstance(value, np.ndarray) and isinstance(ref_value, np.ndarray)
                and ref_value.dtype == np.float32 and value.dtype.name in ("float16", "bfloat16")):
            return value.astype(np.float32)
        return value

    def rounded(self, values: np.ndarray) -> np.ndarray:
        """``values`` rounded to the low type, as float32 (idempotent: our own values pass
        unchanged). Beyond float16's range is inf: a weight the conversion clipped differs."""
        if self.low == TensorProto.FLOAT16:
            with np.errstate(over="ignore"):
                return np.asarray(values, dtype=np.float32).astype(np.float16).astype(np.float32)
        low = helper.tensor_dtype_to_np_dtype(TensorProto.BFLOAT16)
        return np.asarray(values, dtype=np.float32).astype(low).astype(np.float32)

    def _float_cast(self, staged: Staged, node: onnx.NodeProto) -> bool:
        """A Cast between float32 and the low type (either way)."""
        if node.op_type != "Cast" or node.domain not in ("", "ai.onnx") or not node.input:
            return False
        to = next((a.i for a in node.attribute if a.name == "to"), 0)
        return to in self._floats and staged.elem_type(node.input[0]) in self._floats

    def through(self, ref: Staged, a: str, b: str) -> str:
        """``b`` with the Casts between float types that compute it looked through (those the
        conversion added), unless the original computes ``a`` with such a Cast too."""
        i = ref.index.producer.get(a)
        if i is not None and self._float_cast(ref, ref.index.graph.node[i]):
            return b
        while (j := self.index.producer.get(b)) is not None and self._float_cast(
                self, self.index.graph.node[j]):
            b = self.index.graph.node[j].input[0]
        return b

    def _added(self, ref: Staged, a: str, b: str) -> str:
        """``b`` with the Casts between float types and the Identities the conversion added
        on the way to it looked through (the original computes ``a`` with another op)."""
        i = ref.index.producer.get(a)
        op = ref.index.graph.node[i].op_type if i is not None else None
        while (j := self.index.producer.get(b)) is not None:
            node = self.index.graph.node[j]
            if node.op_type == op or not node.input or not (
                    self._float_cast(self, node) or node.op_type == "Identity"):
                break
            b = node.input[0]
        return b

    def explain(self, ref: Staged, found: Divergence, budget: tuple[float, float]) -> Divergence:
        """``found`` (located against the float32 ``ref``) as the conversion made it: the node
        behind the Casts and Identities it added, weights that differ beyond their rounding to
        the low type, and the fix: its error is local (its inputs agree within ``budget``), so
        keeping it float32 (``--block``) or ``--auto-block`` is what to do."""
        cand = self._added(ref, found.tensor, found.candidate_tensor)
        if cand != found.candidate_tensor and cand in self.index.producer:
            found = describe(ref, self, found.tensor, {found.tensor: cand},
                             max_abs=found.max_abs_diff, sessions=found.sessions)
        rnode = ref.index.graph.node[ref.index.producer[found.tensor]]
        cnode = self.index.graph.node[self.index.producer[found.candidate_tensor]]
        weights = tuple(w for w in found.differing_weights
                        if w in self.index.initializers and not self.same_weight(ref, w, w))
        rewired = found.reference_inputs is not None and (
            len(rnode.input) != len(cnode.input) or any(
                self._added(ref, x, y) != x for x, y in zip(rnode.input, cnode.input, strict=True)))
        if not rewired:
            found = replace(found, reference_inputs=None, candidate_inputs=None)
        rtol, atol = budget
        return replace(found, differing_weights=weights, cause="local error", cause_detail=(
            f"its inputs agree within the budget (rtol={rtol:g}, atol={float(atol):g} or "
            f"{getattr(atol, 'scale', 0.0):.3g}*max|tensor|) and its {self.type_name} output "
            f"does not: keep it float32 with --block '{found.node}', or let --auto-block find "
            f"every such node"))

    @property
    def type_name(self) -> str:
        """The low type's name (float16 or bfloat16)."""
        return "float16" if self.low == TensorProto.FLOAT16 else "bfloat16"

    def node_attrs(self, staged: Staged, node: onnx.NodeProto) -> list[bytes]:
        """The node's attributes serialized as the conversion would have made them in float32:
        dtype attributes naming either float type name float32, float constants rounded to the
        low type (a Constant's ``value_float(s)`` as its ``value``), implied defaults spelled."""
        out: list[onnx.AttributeProto] = []
        for a in node.attribute:
            b = onnx.AttributeProto()
            b.CopyFrom(a)
            is_const = node.op_type == "Constant"
            if a.type == onnx.AttributeProto.INT and a.name in _DTYPE_ATTRS and a.i in self._floats:
                b.i = FLOAT
            elif a.type == onnx.AttributeProto.TENSOR and a.t.data_type in self._floats:
                values = read_tensor(a.t, staged.model.base_dir)
                b = helper.make_attribute(a.name, numpy_helper.from_array(
                    self.rounded(values), a.t.name))
            elif is_const and a.type in (onnx.AttributeProto.FLOAT, onnx.AttributeProto.FLOATS):
                values = np.array(a.f if a.type == onnx.AttributeProto.FLOAT else list(a.floats))
                b = helper.make_attribute("value", numpy_helper.from_array(self.rounded(values), ""))
            out.append(b)
        names = {a.name for a in node.attribute}
        if node.op_type in _DEFAULT_FLOAT_DTYPE and "dtype" not in names:
            out.append(helper.make_attribute("dtype", FLOAT))
        if node.op_type == "ConstantOfShape" and "value" not in names:
            out.append(helper.make_attribute("value", numpy_helper.from_array(
                np.zeros([1], np.float32), "")))
        return sorted(x.SerializeToString(deterministic=True) for x in out)

    def same_weight(self, ref: Staged, a: str, b: str) -> bool:
        """Initializer ``b`` holds ``a``'s values (rounded to the low type when converted)."""
        rt = ref.model.proto.graph.initializer[ref.index.initializers[a]]
        ct = self.model.proto.graph.initializer[self.index.initializers[b]]
        if rt.data_type == ct.data_type:
            return same_initializer(ref, self, a, b)
        if rt.data_type != FLOAT or ct.data_type != self.low or list(rt.dims) != list(ct.dims):
            return False
        return bool(np.array_equal(self.rounded(read_tensor(rt, ref.model.base_dir)),
                                   self.rounded(read_tensor(ct, self.model.base_dir)),
                                   equal_nan=True))


@rewrite_check(PrecisionRecord)
def _check_precision(ctx: Context, record: PrecisionRecord, check: Check) -> None:
    orig, new, feeds = ctx.orig, ctx.new, ctx.feeds
    if not record.keep_io_types and record.to == "bf16":
        raise UsageError("a bfloat16 model with bfloat16 inputs cannot be fed from numpy; "
                         "convert with --keep-io-types to verify it")
    if record.keep_io_types:
        new_feeds = feeds
    else:
        new_feeds = [{k: v.astype(np.float16) if v.dtype == np.float32 else v
                      for k, v in f.items()} for f in feeds]
    new = LowFloat(new.model, ctx.ws, new.label, threads=ctx.threads, limits=ctx.limits,
                   low=TensorProto.FLOAT16 if record.to == "fp16" else TensorProto.BFLOAT16,
                   index=new.index)  # its converted tensors pair with the originals
    names = list(orig.output_names)
    orig_vals = run_all(orig, feeds, names)
    raw = run_all(new, new_feeds, names)
    new_vals = [{k: new.upcast(o.get(k), v) for k, v in r.items()}
                for o, r in zip(orig_vals, raw, strict=True)]
    given = record.budget or {}  # the budget the conversion was made under; a given one wins
    check.rtol, check.atol = precision_budget(
        record.to, given.get("rtol") if check.rtol is None else check.rtol,
        given.get("atol") if check.atol is None else check.atol)
    scale = getattr(check.atol, "scale", 0.0)
    check.notes.append(f"{record.to} outputs compared within rtol={check.rtol:g}, "
                       f"atol={check.atol:g} (the precision budget; atol raised per tensor to "
                       f"{scale:.3g}*max|tensor|)")

    def sides(k: int) -> tuple[Side, Side]:
        return Side(orig, feeds[k]), Side(new, new_feeds[k])

    budget = (check.rtol, check.atol)
    check.explain = lambda found: new.explain(orig, found, budget)
    for n in names:
        check.compare("precision", n, n, orig_vals, new_vals, dtype=dtype_of(orig, n),
                      exact=False, sides=sides)


AUTO_ROUNDS = 8
"""Most conversion rounds ``auto_block`` runs before it gives up on the budget."""


@dataclass(frozen=True)
class AutoBlock:
    """What ``auto_block`` found.

    Attributes:
        result: the conversion of the model (its ``kept`` names every node kept, with why).
        rounds: conversions tried (the last one is the model's).
        met: the graph outputs meet the budget on the inputs.
        worst: graph output -> its largest error as a multiple of the budget (<= 1 meets it).
        rtol, atol: the budget.
        batches: tensor batches each model ran in, per sample, in the last round (memory is
            one batch of one sample per model).
    """

    result: PrecisionResult
    rounds: int
    met: bool
    worst: dict[str, float]
    rtol: float
    atol: float
    batches: int = 1


def _excess(ref: np.ndarray, cand: np.ndarray, rtol: float, atol: float) -> float:
    """The largest |cand - ref| / (atol + rtol*|ref|); inf where cand is not finite and ref is."""
    r = np.asarray(ref, dtype=np.float64)
    c = np.asarray(cand).astype(np.float64)
    if r.shape != c.shape:
        return float("inf")
    if r.size == 0:
        return 0.0
    bad = ~np.isfinite(c) & np.isfinite(r)
    if bad.any():
        return float("inf")
    ok = np.isfinite(r)
    if not ok.any():
        return 0.0
    atol = effective_atol(atol, r)
    return float(np.max(np.abs(c[ok] - r[ok]) / (atol + rtol * np.abs(r[ok]))))


def auto_block(model: Model, /, *, to: str = "fp16", keep_io_types: bool = False,
               block: Sequence[str] = (), inputs: InputsLike | None = None,
               ranges: Mapping[str, Range] | None = None, seed: int = 0,
               dims: Mapping[str, int] | None = None, samples: int | None = None,
               rtol: float | None = None, atol: float | None = None,
               rounds: int = AUTO_ROUNDS, batch_bytes: int = DEEP_BUDGET_BYTES) -> AutoBlock:
    """Convert ``model`` (:func:`~onnxsurgeon.surgery.precision`), keeping float32 the nodes
    where the error starts. Mutates model.

    Each round converts a copy of the float32 model and runs both on the samples, every
    main-graph float tensor exposed; a converted node whose output exceeds the budget (or turns
    inf/NaN) while each computed float input of it is within the budget has a *local* error (the
    error is born there, not inherited) and stays float32 in the next round. A low-type tensor
    that overflows is kept float32 even when the outputs meet the budget (onnxruntime's CPU
    provider computes many float16 ops in float32; a device computing in float16 would not).
    Rounds repeat until the graph outputs meet the budget and nothing overflows, nothing new is
    found, or ``rounds`` ran. The model gets the last conversion, its record naming each
    auto-kept node and why, and the budget.

    The tensors are streamed as verify's deep comparison streams them
    (:func:`~.deep.tensor_batches`): exposed in batches of at most ``batch_bytes`` estimated
    bytes a sample, one session per model and batch, every sample run through both, only the
    largest error (and, first, the float32 peak) of each tensor kept. Cost: per round one
    conversion and (batches x samples) runs of each model; memory: one batch of one sample per
    model, whatever the model's size.

    Raises:
        UsageError: unusable inputs or options (as :func:`~onnxsurgeon.verify.compare`).
    """
    from ..surgery.precision import precision

    b_rtol, b_atol = precision_budget(to, rtol, atol)
    original = snapshot(model)
    keep: dict[str, str] = {}
    tried: dict[str, str] = {}
    met, worst, done, groups = False, {}, 0, 0
    sizes = dict(dims or {})
    with Workspace() as ws:
        ref = Staged(original, ws, "float32")
        feeds = make_samples([ref], inputs=inputs, seed=seed, dims=dims, samples=samples,
                             ranges=ranges).samples
        index = ref.index
        floats = [o for node in index.graph.node for o in node.output
                  if o and ref.is_tensor(o) and ref.elem_type(o) == onnx.TensorProto.FLOAT]
        outputs = list(ref.output_names)
        if to == "fp16":
            peaks = _peaks(ref, feeds, tensor_batches(ref, floats, budget=batch_bytes,
                                                      dims=sizes))
            keep.update(_out_of_range(index, peaks))
        for done in range(1, rounds + 1):  # noqa: B007 - the count is reported
            trial = snapshot(original)
            tried = dict(keep)  # what the model gets: the conversion measured last
            res = precision(trial, to=to, keep_io_types=True, block=block, keep=tried)
            cand = Staged(trial, ws, f"round{done}")
            names = [n for n in dict.fromkeys([*floats, *outputs]) if cand.is_tensor(n)]
            batched = tensor_batches(ref, names, budget=batch_bytes, dims=sizes)
            excess = _excesses(ref, cand, feeds, batched, b_rtol, b_atol)
            groups = len(batched)
            worst = {n: excess.get(n, float("inf")) for n in outputs}
            met = all(v <= 1.0 for v in worst.values())
            found = _local_errors(index, excess, res.kept, keep, overflow_only=met)
            if not found:
                break
            keep.update(found)
    result = precision(model, to=to, keep_io_types=keep_io_types, block=block, keep=tried,
                       budget=(b_rtol, b_atol))
    return AutoBlock(result, done, met, worst, b_rtol, b_atol, batches=groups)


def _peaks(ref: Staged, feeds: Sequence[Sample], groups: Sequence[Sequence[str]]) -> dict[str, float]:
    """Tensor -> its largest finite magnitude over the samples, batch by batch."""
    peak: dict[str, float] = {}
    for group in groups:
        with ref.session(list(group)) as run:
            for feed in feeds:
                values = run.run(feed)
                for n in group:
                    v = values.get(n)
                    if isinstance(v, np.ndarray) and v.size:
                        finite = np.abs(v[np.isfinite(v)])
                        if finite.size:
                            peak[n] = max(peak.get(n, 0.0), float(finite.max()))
                del values
    return peak


def _excesses(ref: Staged, cand: Staged, feeds: Sequence[Sample],
              groups: Sequence[Sequence[str]], rtol: float, atol: float) -> dict[str, float]:
    """Tensor -> its largest error over the samples as a multiple of the budget (inf: not
    finite where float32 is), batch by batch: both models' sessions of a batch open together,
    each sample run through both, the arrays dropped.

    onnxruntime's CPU provider computes float16 ops that lack a kernel in float32 and drops the
    Cast pair between two such ops unless the tensor between is a graph output, so a tensor's
    float16 error can depend on which others a batch exposes (a few percent of the budget on
    the committed CNN); a planted overflow is found whatever the batches."""
    excess: dict[str, float] = {}
    for group in groups:
        with ref.session(list(group)) as rrun, cand.session(list(group)) as crun:
            for feed in feeds:
                rvals, cvals = rrun.run(feed), crun.run(feed)
                for n in group:
                    e = _excess(rvals[n], cvals[n], rtol, atol)
                    excess[n] = max(excess.get(n, e), e)
                del rvals, cvals
    return excess


def _local_errors(index: GraphIndex, excess: Mapping[str, float], kept: Mapping[str, str],
                  keep: Mapping[str, str], *, overflow_only: bool) -> dict[str, str]:
    """Main-graph node label -> why it should stay float32: its output's error exceeds the
    budget (``overflow_only``: is inf/NaN) while its computed inputs are within it.
    O(nodes + edges)."""
    found: dict[str, str] = {}
    for i, node in enumerate(index.graph.node):
        label = index.node_label(i)
        if label in keep and not overflow_only:
            found.update(_rounding_sources(index, i, excess, kept, keep))
        if label in kept or label in keep:
            continue
        outs = [excess[o] for o in node.output if o in excess]
        if not outs:
            continue
        worst = max(outs)
        ins = [excess[n] for n in node.input if n in excess]
        if worst == float("inf"):
            inherited = any(v == float("inf") for v in ins)
        elif overflow_only or worst <= 1.0:
            continue
        else:
            inherited = any(v > 1.0 for v in ins)
        if inherited:
            continue
        found[label] = ("auto-block: overflow (inf/NaN in the low type)" if worst == float("inf")
                            else f"auto-block: local error {worst:.3g}x the budget")
    return found


def _rounding_sources(index: GraphIndex, i: int, excess: Mapping[str, float],
                      kept: Mapping[str, str], keep: Mapping[str, str]) -> dict[str, str]:
    """A node kept in float32 whose output still exceeds the budget while its inputs are
    within it suffers from the rounding of its low-type inputs: their converted producers stay
    float32 too."""
    node, label = index.graph.node[i], index.node_label(i)
    outs = [excess[o] for o in node.output if o in excess]
    ins = [excess[n] for n in node.input if n in excess]
    if not outs or max(outs) <= 1.0 or (ins and max(ins) > 1.0):
        return {}
    found: dict[str, str] = {}
    todo, seen = [n for n in node.input if n], set()
    while todo:  # through the producers kept already (a rounding passes them unchanged)
        n = todo.pop()
        j = index.producer.get(n)
        if j is None or j in seen:
            continue
        seen.add(j)
        src = index.node_label(j)
        if src in keep or src in kept:
            todo.extend(x for x in index.graph.node[j].input if x)
            continue
        found[src] = (f"auto-block: its float16 rounding of '{n}' makes '{label}' "
                      f"(kept) err {max(outs):.3g}x the budget")
    return found


def _out_of_range(index: GraphIndex, peak: Mapping[str, float]) -> dict[str, str]:
    """Main-graph node label -> why it stays float32: a float tensor it makes or reads reaches
    beyond float16's range (65504) in the float32 model (``peak``: its largest magnitude), so
    it would overflow whichever runtime computes it in float16. O(nodes + edges)."""
    over = {n for n, p in peak.items() if p > FP16_MAX}
    found: dict[str, str] = {}
    for i, node in enumerate(index.graph.node):
        label = index.node_label(i)
        made = [o for o in node.output if o in over]
        read = [n for n in node.input if n in over]
        if made:
            found[label] = (f"auto-block: overflow: '{made[0]}' reaches {peak[made[0]]:.3g}, "
                                f"beyond float16's {FP16_MAX:g}")
        elif read:
            found[label] = (f"auto-block: overflow: it reads '{read[0]}', which reaches "
                                f"{peak[read[0]]:.3g}, beyond float16's {FP16_MAX:g}")
    return found
