"""Rewrite-aware verification: check the invariant each rewrite record implies.

With graph optimizations off, everything a rewrite should leave exact is compared bit for bit:

* extract -- each output of the extracted model equals the same tensor of the original (fed the
  original's values at the stop tensors);
* copy -- each copy equals its original in ONE session of the rewritten model (both are
  outputs); with input replacements, the copy equals the original closure fed the replacement's
  values; outputs the original had are bit-identical to the original's;
* insert -- the block's output equals the block evaluated alone on the original activation (a
  fresh built-in block from the record's parameters, else the block isolated from the rewritten
  model), compared with dtype tolerances; the downstream equals the original graph whose
  rerouted consumers read a new input fed the processed values; untouched outputs are
  bit-identical;
* reroute -- the rewritten model equals the original whose rerouted consumers read a new input
  fed the target's values; untouched outputs are bit-identical.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import onnx

from ..closure import downstream_nodes
from ..errors import SurgeryError, UsageError
from ..index import GraphIndex
from ..io import Model
from ..names import NameAllocator
from ..protos import default_opset, rename_reads
from ..record import (
    CopyRecord,
    ExtractRecord,
    InsertRecord,
    RerouteRecord,
    RewriteRecord,
    as_record,
)
from ..select import Selector
from .accumulate import PairAccumulator
from .compare import make_samples
from .deep import (
    deep_compare,
    isolate_nodes,
    loose_value_info,
    saturation_bounds,
    shared_tensors,
)
from .deepen import settle
from .inputs import InputsLike, Range, Sample
from .isolate import Limits, ResourceLimitError, make_limits
from .locate import Side, locate, numpy_dtype_name
from .report import (
    INCONCLUSIVE,
    DeepResult,
    Divergence,
    PairReport,
    TensorError,
    VerifyReport,
    make_report,
)
from .run import DEFAULT_BATCH, ModelLike, Staged, Workspace, to_model

Values = list[dict[str, np.ndarray]]
_CPU_UPCAST = frozenset({"float16", "bfloat16"})
_FALLBACK_OPSET = 17
"""Opset of a rebuilt block when the rewritten model imports no default domain (insert refuses
such hosts, so only a hand-edited model gets here)."""


@dataclass
class _Entry:
    acc: PairAccumulator
    ref_name: str
    sides: Callable[[int], tuple[Side, Side]] | None
    mapping: dict[str, str]
    strict: bool
    fed: tuple[str, ...] = ()


class _Check:
    """Accumulates the pairs of one rewrite verification, settles the pairs that could not show
    a difference (:func:`~.deepen.settle`) and locates the first failure."""

    def __init__(self, batch: int, samples: int, notes: Sequence[str] = (), *,
                 rtol: float | None = None, atol: float | None = None) -> None:
        self.entries: list[_Entry] = []
        self.notes: list[str] = list(notes)
        self.batch = batch
        self.samples = samples
        self.rtol, self.atol = rtol, atol  # of the comparisons that are not exact

    def compare(self, check: str, ref_name: str, cand_name: str, ref_vals: Values,
                cand_vals: Values, *, dtype: str, exact: bool,
                sides: Callable[[int], tuple[Side, Side]] | None = None,
                mapping: Mapping[str, str] | None = None, strict: bool = False,
                display: str | None = None, label: str = "", fed: Sequence[str] = ()) -> None:
        """Compare ``ref_name`` (shown as ``display``; ``label`` says how the reference was
        computed) with ``cand_name`` over every sample."""
        if exact and dtype in _CPU_UPCAST:
            # onnxruntime's CPU provider computes float16/bfloat16 chains in float32 and drops the
            # Cast pairs between them, so a tensor fed across a cut is rounded where the original's
            # was not: the same graph is only equal within the dtype's tolerance (gauntlet bug 1).
            exact = False
            note = f"{dtype} tensors compared within tolerance (onnxruntime CPU computes them in float32)"
            if note not in self.notes:
                self.notes.append(note)
        bounds = saturation_bounds(sides(0)[0].staged, ref_name) if sides is not None else ()
        acc = PairAccumulator(display or ref_name, cand_name, dtype=dtype, exact=exact,
                              check=check, bounds=bounds, label=label, rtol=self.rtol,
                              atol=self.atol)
        for k, (r, c) in enumerate(zip(ref_vals, cand_vals, strict=True)):
            if ref_name not in r:
                acc.fail(f"'{ref_name}' is not computed by the reference")
                break
            if cand_name not in c:
                acc.fail(f"'{cand_name}' is not computed by the rewritten model")
                break
            acc.add(r[ref_name], c[cand_name], k)
        self.entries.append(_Entry(acc, ref_name, sides, dict(mapping or {}), strict, tuple(fed)))

    def missing(self, check: str, ref_name: str, reason: str) -> None:
        acc = PairAccumulator(ref_name, "-", check=check)
        acc.fail(reason)
        self.entries.append(_Entry(acc, ref_name, None, {}, False))

    def _settle(self, result: PairReport, entry: _Entry) -> tuple[PairReport, DeepResult | None]:
        if result.verdict != INCONCLUSIVE or entry.sides is None:
            return result, None
        sides = [entry.sides(k) for k in range(self.samples)]
        ref, cand = sides[0][0].staged, sides[0][1].staged
        if not (ref.is_tensor(entry.ref_name) and cand.is_tensor(result.candidate)):
            return result, None
        settled, deep = settle(ref, cand, [dict(r.feeds) for r, _ in sides],
                               [dict(c.feeds) for _, c in sides],
                               [replace(result, reference=entry.ref_name)], mapping=entry.mapping,
                               strict=entry.strict, exact=entry.acc.exact, notes=self.notes,
                               fed=entry.fed, rtol=self.rtol, atol=self.atol)
        return replace(settled[0], reference=result.reference), deep

    def deep_all(self, results: Sequence[PairReport],
                 only: Collection[str] | None = None) -> DeepResult | None:
        """The forced layer-wise comparison: every tensor on the way to each compared pair,
        against that pair's own reference (the original, the cut original fed the new values, the
        block alone, ...). One :func:`~.deep.deep_compare` per reference/candidate model pair over
        the ancestors of its pairs; a tensor compared twice keeps its larger error. Nodes and
        positions are those of the candidate (the rewritten model), whose order the result
        follows; ``only`` keeps the candidate tensors named there (a page's drawn tensors).
        None when no pair can be deepened."""
        groups: dict[tuple[int, int], dict[str, Any]] = {}
        for result, entry in zip(results, self.entries, strict=True):
            if entry.sides is None:
                continue
            sides = [entry.sides(k) for k in range(self.samples)]
            ref, cand = sides[0][0].staged, sides[0][1].staged
            if not (ref.is_tensor(entry.ref_name) and cand.is_tensor(result.candidate)):
                continue
            group = groups.setdefault((id(ref), id(cand)), {
                "ref": ref, "cand": cand, "sides": sides, "targets": [], "mapping": {},
                "strict": False, "exact": True})
            group["targets"].append(entry.ref_name)
            group["mapping"].update({**entry.mapping, entry.ref_name: result.candidate})
            group["strict"] = group["strict"] or entry.strict
            group["exact"] = group["exact"] and entry.acc.exact
        if not groups:
            return None
        best: dict[str, TensorError] = {}
        skipped = batches = 0
        for group in groups.values():
            ref, cand, sides = group["ref"], group["cand"], group["sides"]
            items = shared_tensors(ref, cand, mapping=group["mapping"], strict=group["strict"],
                                   targets=group["targets"])
            if only is not None:
                items = [item for item in items if item.cand in only]
            found = deep_compare(ref, cand, [dict(r.feeds) for r, _ in sides],
                                 [dict(c.feeds) for _, c in sides], items=items,
                                 exact=group["exact"], forced=True, notes=self.notes,
                                 rtol=self.rtol, atol=self.atol)
            skipped += found.skipped
            batches += found.batches
            index = cand.index
            for t in found.tensors:
                j = index.producer.get(t.candidate, -1)
                t = replace(t, node=index.node_label(j) if j >= 0 else t.node, position=j)
                old = best.get(t.candidate)
                if old is None or _worse(t, old):
                    best[t.candidate] = t
        ordered = sorted(best.values(), key=lambda t: (t.position, t.candidate))
        return DeepResult(tensors=tuple(ordered), forced=True, skipped=skipped, batches=batches)

    def report(self, kind: str, samples: int, *, locate_divergence: bool,
               inputs: Mapping[str, str] | None = None,
               deep_all: bool | Collection[str] = False) -> VerifyReport:
        results: list[PairReport] = []
        deep: DeepResult | None = None
        for entry in self.entries:
            result, found = self._settle(entry.acc.result(), entry)
            results.append(result)
            deep = deep or found
        if deep_all is not False:
            only = None if deep_all is True else set(deep_all)
            deep = self.deep_all(results, only) or deep
        divergence: Divergence | None = None
        if locate_divergence:
            for result, entry in zip(results, self.entries, strict=True):
                if result.agree or entry.sides is None:
                    continue
                ref, cand = entry.sides(result.worst_sample or 0)
                full = {**entry.mapping, entry.ref_name: result.candidate}
                try:
                    divergence = locate(ref, cand, entry.ref_name, mapping=full,
                                        exact=entry.acc.exact, batch=self.batch,
                                        strict_mapping=entry.strict)
                except ResourceLimitError:
                    raise
                except SurgeryError as exc:
                    self.notes.append(f"could not locate the first difference: {exc}")
                break
        return make_report(results, samples=samples, kind=kind, notes=self.notes,
                           divergence=divergence, inputs=dict(inputs or {}), deep=deep)


def _worse(a: TensorError, b: TensorError) -> bool:
    """True when ``a`` shows a larger error than ``b`` (a failure beats an agreement)."""
    if a.ok != b.ok:
        return not a.ok
    return (a.max_abs_diff if a.max_abs_diff is not None else math.inf) > (
        b.max_abs_diff if b.max_abs_diff is not None else math.inf)


def _run_all(staged: Staged, feeds: Sequence[Sample], names: Sequence[str]) -> Values:
    """Values of ``names`` for every sample, in one session."""
    wanted = [n for n in dict.fromkeys(names) if staged.is_tensor(n)]
    with staged.session(wanted) as runner:
        return [runner.run(feed) for feed in feeds]


def _dtype(staged: Staged, name: str) -> str:
    return numpy_dtype_name(staged.elem_type(name))


def _resolve(staged: Staged, name: str) -> str:
    return Selector(staged.index).resolve(name)


# ------------------------------------------------------------------------------ cut models
def _node_position(index: GraphIndex, label: str) -> int | None:
    """Node position for a label from a rewrite record: a node name, or ``OpType#i``."""
    if label in index.node_names:
        return index.node_names[label]
    op, sep, pos = label.rpartition("#")
    if sep and pos.isdigit() and int(pos) < len(index.graph.node):
        node = index.graph.node[int(pos)]
        if node.op_type == op and not node.name:
            return int(pos)
    return None


def cut_model(original: Model, oracle_index: Staged, source: str, nodes: Sequence[str | int],
              outputs: Sequence[str]) -> tuple[Model, str, GraphIndex]:
    """A copy of ``original`` (staged as ``oracle_index``) where the main-graph ``nodes``
    (names or positions; their bodies included) and the graph ``outputs`` read a new graph
    input instead of ``source``. Returns it, the input name and its index (the original's
    producers: the nodes are the same, in order, only their reads renamed).

    Raises:
        UsageError: a node the record names is not in the original.
    """
    proto = onnx.ModelProto()
    proto.CopyFrom(original.proto)
    index = oracle_index.index  # node names and positions are the copy's too
    fresh = NameAllocator.for_model(proto).fresh(f"{source}__fed")
    for name in nodes:
        i = name if isinstance(name, int) else _node_position(index, name)
        if i is None:
            raise UsageError(
                f"the rewrite record names node '{name}', which the original model does not "
                "have; give the model the rewrite started from"
            )
        rename_reads(proto.graph.node[i], {source: fresh})
    for out in proto.graph.output:
        if out.name in outputs:
            out.name = fresh
    # The fed values need not have the source's shape (global_avg_pool turns [1,8,16,16] into
    # [1,8,1,1]): declare the element type only (sequences and optionals keep their type), and
    # drop the shapes recorded for everything downstream, which onnxruntime would otherwise hold
    # the new values to.
    fed_vi = loose_value_info(oracle_index, source)
    fed_vi.name = fresh
    proto.graph.input.append(fed_vi)
    cut_index = GraphIndex(proto, _producer=index.producer)  # same producers (see above)
    affected = {fresh} | {o for i in downstream_nodes(cut_index, [fresh])
                          for o in proto.graph.node[i].output}
    kept = [vi for vi in proto.graph.value_info if vi.name not in affected]
    del proto.graph.value_info[:]
    proto.graph.value_info.extend(kept)
    for out in proto.graph.output:
        if out.name in affected and out.type.HasField("tensor_type"):
            out.type.tensor_type.ClearField("shape")
    return Model(proto, base_dir=original.base_dir, source=None), fresh, cut_index


def _fresh_block(record: InsertRecord, elem_type: int, opset: int,
                 shape: Sequence[int | str | None] | None,
                 value_type: onnx.TypeProto | None = None) -> onnx.ModelProto | None:
    block = record.block
    if not block or block == "graph":
        return None
    try:
        from ..processing import make_block
    except ImportError:
        return None
    params = record.params
    return make_block(str(block), dict(params), elem_type=elem_type, opset=opset, shape=shape,
                      value_type=value_type)


# ------------------------------------------------------------------------- the verifiers
class _Context:
    def __init__(self, original: Model, rewritten: Model, ws: Workspace, *, threads: int,
                 inputs: InputsLike | None, seed: int, dims: Mapping[str, int] | None,
                 samples: int | None, limits: Limits | None = None,
                 ranges: Mapping[str, Range] | None = None,
                 save_inputs: str | os.PathLike | None = None) -> None:
        self.ws = ws
        self.threads = threads
        self.limits = limits
        self.orig = Staged(original, ws, "original", threads=threads, limits=limits)
        self.new = Staged(rewritten, ws, "rewritten", threads=threads, limits=limits)
        made = make_samples([self.orig], inputs=inputs, seed=seed, dims=dims, samples=samples, ranges=ranges,
                            save_inputs=save_inputs)
        self.feeds = made.samples
        self.described = made.described
        self.notes = made.notes

    def stage(self, model: Model, label: str, index: GraphIndex | None = None) -> Staged:
        return Staged(model, self.ws, label, threads=self.threads, limits=self.limits,
                      index=index)


def _check_extract(ctx: _Context, record: ExtractRecord, check: _Check) -> None:
    orig, new, feeds = ctx.orig, ctx.new, ctx.feeds
    outs = list(new.output_names)
    stops = [s for s in record.inputs if s in new.index.inputs]
    known = [n for n in outs + stops if orig.is_tensor(n)]
    for n in outs:
        if not orig.is_tensor(n):
            check.missing("extract", n, f"'{n}' is not a tensor of the original model")
    orig_vals = _run_all(orig, feeds, known)
    new_feeds = [{**{k: v for k, v in f.items() if k in new.index.inputs},
                  **{s: ov[s] for s in stops if s in ov}} for f, ov in zip(feeds, orig_vals,
                                                                        strict=True)]
    new_vals = _run_all(new, new_feeds, outs)

    def sides(k: int) -> tuple[Side, Side]:
        return Side(orig, feeds[k]), Side(new, new_feeds[k])

    for n in outs:
        if orig.is_tensor(n):
            check.compare("extract", n, n, orig_vals, new_vals, dtype=_dtype(orig, n), exact=True,
                          sides=sides, fed=stops)


def _untouched(check: _Check, orig: Staged, new: Staged, orig_vals: Values, new_vals: Values,
               names: Sequence[str], sides: Callable[[int], tuple[Side, Side]]) -> None:
    for n in names:
        check.compare("untouched", n, n, orig_vals, new_vals, dtype=_dtype(orig, n), exact=True,
                      sides=sides)


def _check_copy(ctx: _Context, record: CopyRecord, check: _Check) -> None:
    orig, new, feeds = ctx.orig, ctx.new, ctx.feeds
    pairs = {_resolve(new, k): v for k, v in record.outputs.items()}
    replace = {_resolve(orig, a): _resolve(new, b)
               for a, b in record.replace_inputs.items()}
    from ..surgery.copy import copied_names

    node_map, tensor_map = copied_names(new.index, record)
    for src, dst in node_map.items():
        i, j = new.index.node_names.get(src), new.index.node_names.get(dst)
        if i is not None and j is not None:
            tensor_map.update(zip(new.index.graph.node[i].output, new.index.graph.node[j].output,
                                  strict=False))
    kept = [n for n in orig.output_names if n in new.index.outputs]
    new_vals = _run_all(new, feeds, list(pairs) + list(pairs.values()) + kept + list(replace.values()))
    if not replace:
        def same(k: int) -> tuple[Side, Side]:
            return Side(new, feeds[k]), Side(new, feeds[k])

        for o, c in pairs.items():
            check.compare("copy", o, c, new_vals, new_vals, dtype=_dtype(new, o), exact=True,
                          sides=same, mapping=tensor_map, strict=True)
    else:
        cut_proto: Model = orig.model
        fed: dict[str, str] = {}
        cut_staged = orig
        for a, b in replace.items():
            users = sorted({u.node for u in cut_staged.index.consumers.get(a, ())})
            cut_proto, n_in, cut_index = cut_model(cut_proto, cut_staged, a, list(users), [])
            cut_staged = ctx.stage(cut_proto, "cut", cut_index)
            fed[n_in] = b
        cut_feeds = [{**f, **{n: nv[b] for n, b in fed.items()}}
                     for f, nv in zip(feeds, new_vals, strict=True)]
        cut_vals = _run_all(cut_staged, cut_feeds, list(pairs))

        def cut_sides(k: int) -> tuple[Side, Side]:
            return Side(cut_staged, cut_feeds[k]), Side(new, feeds[k])

        fed_with = ", ".join(f"{a} := {b}" for a, b in replace.items())
        # the cut's fed inputs hold the rewritten model's values of what the copy reads: fed
        # alike, so the settlement's structural walk may stop there (as at extract's stops)
        linked = {**tensor_map, **fed}
        for o, c in pairs.items():
            check.compare("copy", o, c, cut_vals, new_vals, dtype=_dtype(new, o), exact=True,
                          sides=cut_sides, mapping=linked, strict=True,
                          label=f"{o} recomputed with {fed_with}")
    orig_vals = _run_all(orig, feeds, kept)
    _untouched(check, orig, new, orig_vals, new_vals, kept,
               lambda k: (Side(orig, feeds[k]), Side(new, feeds[k])))


def _pair_outputs(orig: Staged, new: Staged, rerouted_outputs: Sequence[str], fed_name: str,
                  replacement: str, extra: int) -> list[tuple[str, str | None]]:
    """(cut-original output, rewritten output) pairs: by position when the lists line up."""
    orig_outs = list(orig.output_names)
    cut_outs = [fed_name if o in rerouted_outputs else o for o in orig_outs]
    new_outs = list(new.output_names)
    if len(new_outs) == len(orig_outs) + extra:
        return list(zip(cut_outs, new_outs[:len(orig_outs)], strict=True))
    pairs: list[tuple[str, str | None]] = []
    for o, c in zip(orig_outs, cut_outs, strict=True):
        if o in rerouted_outputs:
            pairs.append((c, replacement if replacement in new_outs else None))
        else:
            pairs.append((c, o if o in new_outs else None))
    return pairs


def _check_downstream(ctx: _Context, check: _Check, source: str, rerouted: Sequence[str],
                      rerouted_outputs: Sequence[str], values: Callable[[int], np.ndarray],
                      replacement: str, extra: int, orig_vals: Values, new_vals: Values,
                      renamed: Mapping[str, str] | None = None) -> None:
    """The rewritten outputs equal the original whose rerouted readers read a fed input
    (``renamed``: tensors of the original that the rewritten model holds under a new name)."""
    orig, new, feeds = ctx.orig, ctx.new, ctx.feeds
    if not rerouted and not rerouted_outputs:
        _untouched(check, orig, new, orig_vals, new_vals,
                   [n for n in orig.output_names if n in new.index.outputs],
                   lambda k: (Side(orig, feeds[k]), Side(new, feeds[k])))
        return
    cut, fed, cut_index = cut_model(orig.model, orig, source, rerouted, rerouted_outputs)
    cut_staged = ctx.stage(cut, "cut", cut_index)
    cut_feeds = [{**f, fed: values(k)} for k, f in enumerate(feeds)]
    pairs = _pair_outputs(orig, new, rerouted_outputs, fed, replacement, extra)
    shown = dict(zip([fed if o in rerouted_outputs else o for o in orig.output_names],
                     orig.output_names, strict=True))
    affected_nodes = downstream_nodes(cut_staged.index, [fed])
    affected = {fed} | {o for i in affected_nodes for o in cut_staged.index.graph.node[i].output}
    cut_vals = _run_all(cut_staged, cut_feeds, [c for c, _ in pairs])

    def cut_sides(k: int) -> tuple[Side, Side]:
        return Side(cut_staged, cut_feeds[k]), Side(new, feeds[k])

    for c, n in pairs:
        if n is None:
            check.missing("downstream", c, f"the rewritten model lost output '{c}'")
        elif c in affected:
            check.compare("downstream", c, n, cut_vals, new_vals, dtype=_dtype(cut_staged, c),
                          exact=True, sides=cut_sides, mapping={**(renamed or {}), fed: replacement},
                          display=shown.get(c, c),
                          label=f"{shown.get(c, c)} recomputed with {source} := {replacement}")
        else:
            check.compare("untouched", c, n, orig_vals, new_vals, dtype=_dtype(orig, c),
                          exact=True, sides=lambda k: (Side(orig, feeds[k]), Side(new, feeds[k])))


def _check_insert(ctx: _Context, record: InsertRecord, check: _Check) -> None:
    orig, new, feeds = ctx.orig, ctx.new, ctx.feeds
    at = _resolve(orig, record.at)
    renamed = dict(record.renamed or {})
    # a graph output that kept its name: 'at' is the processed tensor in the rewritten model and
    # the unprocessed values live under renamed[at]
    at_new = renamed[at] if at in renamed else _resolve(new, at)
    processed = record.processed if at in renamed else _resolve(new, record.processed)
    orig_vals = _run_all(orig, feeds, [at, *orig.output_names])
    new_vals = _run_all(new, feeds, [at_new, processed, *new.output_names])

    def plain(k: int) -> tuple[Side, Side]:
        return Side(orig, feeds[k]), Side(new, feeds[k])

    check.compare("at", at, at_new, orig_vals, new_vals, dtype=_dtype(orig, at), exact=True,
                  sides=plain, mapping=renamed, display=at)
    elem = orig.elem_type(at)
    at_vi = orig.oracle.value_info(at)
    fresh = _fresh_block(record, elem, default_opset(new.model.proto) or _FALLBACK_OPSET,
                         orig.oracle.shape(at), at_vi.type if at_vi is not None else None)
    mapping: dict[str, str] = {}
    if fresh is not None:
        block = ctx.stage(Model(fresh), "block")
        b_in, b_out = block.input_names[0], block.output_names[0]
        block_nodes = [new.index.node_names.get(n) for n in record.block_nodes]
        ours = list(block.index.graph.node)
        if len(block_nodes) == len(ours) and all(j is not None for j in block_nodes):
            for mine, j in zip(ours, block_nodes, strict=True):
                theirs = new.index.graph.node[int(j or 0)]
                if mine.op_type == theirs.op_type:
                    mapping.update(zip(mine.output, theirs.output, strict=False))
        check.notes.append(f"block '{record.block}' rebuilt from the record's parameters")
    else:
        block = ctx.stage(isolate_nodes(new, [processed], [at_new]), "block")
        b_in, b_out = at_new, processed
        check.notes.append("block isolated from the rewritten model (not a built-in block)")
    block_feeds = [{**f, b_in: ov[at]} for f, ov in zip(feeds, orig_vals, strict=True)]
    block_vals = _run_all(block, block_feeds, [b_out])
    mapping[b_out] = processed
    mapping[b_in] = at_new
    name = record.block
    what = f"{name if name and name != 'graph' else 'inserted graph'}({at})"
    check.compare("block", b_out, processed, block_vals, new_vals, dtype=_dtype(new, processed),
                  exact=False, sides=lambda k: (Side(block, block_feeds[k]), Side(new, feeds[k])),
                  mapping=mapping, strict=True, display=what, label=f"{what} evaluated alone")
    as_output = record.as_output
    rerouted = [] if as_output else list(record.rerouted)
    rerouted_outputs = [] if as_output else list(record.rerouted_outputs)
    _check_downstream(ctx, check, at, rerouted, rerouted_outputs,
                      lambda k: new_vals[k][processed], processed, 1 if as_output else 0,
                      orig_vals, new_vals, renamed=renamed)


def _check_reroute(ctx: _Context, record: RerouteRecord, check: _Check) -> None:
    orig, new, feeds = ctx.orig, ctx.new, ctx.feeds
    source = _resolve(orig, record.source)
    target = _resolve(orig, record.target)
    orig_vals = _run_all(orig, feeds, [target, *orig.output_names])
    new_vals = _run_all(new, feeds, new.output_names)
    _check_downstream(ctx, check, source, list(record.rerouted), list(record.rerouted_outputs),
                      lambda k: orig_vals[k][target], target, 0, orig_vals, new_vals)


_CHECKS: dict[type[RewriteRecord], Callable[[_Context, Any, _Check], None]] = {
    ExtractRecord: _check_extract, CopyRecord: _check_copy, InsertRecord: _check_insert,
    RerouteRecord: _check_reroute,
}
"""The check of each record type (a new verb registers its own here)."""


def verify_rewrite(original: ModelLike, rewritten: ModelLike,
                   record: RewriteRecord | Mapping[str, Any], *,
                   inputs: InputsLike | None = None, seed: int = 0,
                   dims: Mapping[str, int] | None = None, samples: int | None = None,
                   batch: int = DEFAULT_BATCH, threads: int = 0,
                   locate_divergence: bool = True, isolate: bool = False,
                   timeout: float | None = None, memory_limit: int | None = None,
                   ranges: Mapping[str, Range] | None = None,
                   save_inputs: str | os.PathLike | None = None,
                   deep: bool | Collection[str] = False, rtol: float | None = None,
                   atol: float | None = None) -> VerifyReport:
    """Check the invariant ``record`` (one rewrite of ``original`` into ``rewritten``) implies.

    ``record`` is a typed :class:`~onnxsurgeon.record.RewriteRecord` or its JSON object (read
    strictly: a missing or misspelt key is an error, never a default).

    See the module docstring for what each op must satisfy. Inputs are those of ``original``
    (random unless ``inputs`` is given; ``ranges`` and ``save_inputs`` as in
    :func:`~onnxsurgeon.verify.compare`). Every check is judged informative; one that could show
    nothing is settled deeper (shared tensors on its way, or the same graph from tensors that
    agree) or stays inconclusive. When a check fails the first differing tensor is located.
    ``isolate`` / ``timeout`` / ``memory_limit`` run every session in a child process under
    limits, as in :func:`~onnxsurgeon.verify.compare`. ``deep`` also compares, layer by layer,
    every tensor on the way to each compared pair against that pair's reference (the report's
    ``deep``, in the rewritten model's order: what an HTML page colours its tensors by); a tensor
    that differs there fails the verification too. It costs one deep comparison per reference
    model, in bounded batches (see :func:`~onnxsurgeon.verify.compare`'s ``deep``); ``deep`` as
    a collection of tensor names of ``rewritten`` compares only those (what a page draws: a
    cost bounded by the drawing, not the model). ``rtol`` / ``atol`` replace the dtype's
    tolerance in the comparisons that are not exact (an inserted block against the block alone,
    the deeper comparisons of those).

    Raises:
        UsageError: an unknown op or a record that does not fit the models.
        ResourceLimitError: an isolated run exceeded its time or memory limit.
    """
    from .verbs import checks

    typed = as_record(record)
    run_check = _CHECKS.get(type(typed))
    if run_check is None:
        known = checks()
        if typed.op not in known:
            raise UsageError(f"rewrite record op {typed.op!r} has no check; expected one of "
                             f"{sorted([c.op for c in _CHECKS] + list(known))}")
        run_check = known[typed.op]
    limits = make_limits(isolate, timeout, memory_limit)
    orig_model, new_model = to_model(original), to_model(rewritten)
    with Workspace() as ws:
        ctx = _Context(orig_model, new_model, ws, threads=threads, inputs=inputs, seed=seed,
                       dims=dims, samples=samples, limits=limits, ranges=ranges,
                       save_inputs=save_inputs)
        check = _Check(batch, len(ctx.feeds), ctx.notes, rtol=rtol, atol=atol)
        run_check(ctx, typed, check)
        return check.report(f"rewrite:{typed.op}", len(ctx.feeds),
                            locate_divergence=locate_divergence, inputs=ctx.described,
                            deep_all=deep)
