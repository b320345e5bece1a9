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

import os
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from ..closure import downstream_nodes
from ..errors import UsageError
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
from .deep import isolate_nodes, loose_value_info
from .inputs import InputsLike, Range
from .invariant import (
    Check,
    Context,
    Values,
    check_of,
    dtype_of,
    node_position,
    resolve,
    rewrite_check,
    run_all,
)
from .isolate import make_limits
from .light import referencing
from .locate import Side
from .report import VerifyReport
from .run import DEFAULT_BATCH, ModelLike, Staged, Workspace, to_model

_FALLBACK_OPSET = 17
"""Opset of a rebuilt block when the rewritten model imports no default domain (insert refuses
such hosts, so only a hand-edited model gets here)."""


# ------------------------------------------------------------------------------ cut models
def cut_model(original: Model, oracle_index: Staged, source: str, nodes: Sequence[str | int],
              outputs: Sequence[str]) -> tuple[Model, str, GraphIndex]:
    """A copy of ``original`` (staged as ``oracle_index``) where the main-graph ``nodes``
    (names or positions; their bodies included) and the graph ``outputs`` read a new graph
    input instead of ``source``. Returns it, the input name and its index (the original's
    producers: the nodes are the same, in order, only their reads renamed).

    Raises:
        UsageError: a node the record names is not in the original.
    """
    proto, base_dir = _copy_of(original)
    index = oracle_index.index  # node names and positions are the copy's too
    fresh = NameAllocator.for_model(proto).fresh(f"{source}__fed")
    for name in nodes:
        i = name if isinstance(name, int) else node_position(index, name)
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
    return Model(proto, base_dir=base_dir, source=None), fresh, cut_index


def _copy_of(original: Model) -> tuple[onnx.ModelProto, Path | None]:
    """A copy of ``original``'s proto and the folder its external locations are relative to:
    when ``original`` is its heavy source file's model (``Model._as_source``), its heavy weights
    are references into that file (:func:`~.light.referencing`: no copy of them made, and
    onnxruntime reads them in place), else a full copy."""
    source = original.source
    if original._as_source and source is not None and not original.data_dirs:
        real = Path(os.path.realpath(source))
        if Path(os.path.realpath(original.base_dir or real.parent)) == real.parent \
                and real.is_file():
            light = referencing(original.proto, real, vouched=True)
            if light is not None:
                return light, real.parent
    proto = onnx.ModelProto()
    proto.CopyFrom(original.proto)
    return proto, original.base_dir


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

@rewrite_check(ExtractRecord)
def _check_extract(ctx: Context, record: ExtractRecord, check: Check) -> None:
    check_closure(ctx, record.inputs, check, "extract")


def check_closure(ctx: Context, inputs: Sequence[str], check: Check, label: str) -> None:
    """Each graph output of the new model equals the original's tensor of that name exactly,
    the new model fed the original's values of the stop tensors ``inputs`` (extract, and a
    split's stage); pairs are labelled ``label``."""
    orig, new, feeds = ctx.orig, ctx.new, ctx.feeds
    outs = list(new.output_names)
    stops = [s for s in inputs if s in new.index.inputs]
    known = [n for n in outs + stops if orig.is_tensor(n)]
    for n in outs:
        if not orig.is_tensor(n):
            check.missing(label, n, f"'{n}' is not a tensor of the original model")
    orig_vals = run_all(orig, feeds, known)
    new_feeds = [{**{k: v for k, v in f.items() if k in new.index.inputs},
                  **{s: ov[s] for s in stops if s in ov}} for f, ov in zip(feeds, orig_vals,
                                                                        strict=True)]
    new_vals = run_all(new, new_feeds, outs)

    def sides(k: int) -> tuple[Side, Side]:
        return Side(orig, feeds[k]), Side(new, new_feeds[k])

    for n in outs:
        if orig.is_tensor(n):
            check.compare(label, n, n, orig_vals, new_vals, dtype=dtype_of(orig, n), exact=True,
                          sides=sides, fed=stops)


def _untouched(check: Check, orig: Staged, new: Staged, orig_vals: Values, new_vals: Values,
               names: Sequence[str], sides: Callable[[int], tuple[Side, Side]]) -> None:
    for n in names:
        check.compare("untouched", n, n, orig_vals, new_vals, dtype=dtype_of(orig, n), exact=True,
                      sides=sides)


@rewrite_check(CopyRecord)
def _check_copy(ctx: Context, record: CopyRecord, check: Check) -> None:
    orig, new, feeds = ctx.orig, ctx.new, ctx.feeds
    pairs = {resolve(new, k): v for k, v in record.outputs.items()}
    replace = {resolve(orig, a): resolve(new, b)
               for a, b in record.replace_inputs.items()}
    from ..surgery.copy import copied_names

    node_map, tensor_map = copied_names(new.index, record)
    for src, dst in node_map.items():
        i, j = new.index.node_names.get(src), new.index.node_names.get(dst)
        if i is not None and j is not None:
            tensor_map.update(zip(new.index.graph.node[i].output, new.index.graph.node[j].output,
                                  strict=False))
    kept = [n for n in orig.output_names if n in new.index.outputs]
    new_vals = run_all(new, feeds, list(pairs) + list(pairs.values()) + kept + list(replace.values()))
    if not replace:
        def same(k: int) -> tuple[Side, Side]:
            return Side(new, feeds[k]), Side(new, feeds[k])

        for o, c in pairs.items():
            check.compare("copy", o, c, new_vals, new_vals, dtype=dtype_of(new, o), exact=True,
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
        cut_vals = run_all(cut_staged, cut_feeds, list(pairs))

        def cut_sides(k: int) -> tuple[Side, Side]:
            return Side(cut_staged, cut_feeds[k]), Side(new, feeds[k])

        fed_with = ", ".join(f"{a} := {b}" for a, b in replace.items())
        # the cut's fed inputs hold the rewritten model's values of what the copy reads: fed
        # alike, so the settlement's structural walk may stop there (as at extract's stops)
        linked = {**tensor_map, **fed}
        for o, c in pairs.items():
            check.compare("copy", o, c, cut_vals, new_vals, dtype=dtype_of(new, o), exact=True,
                          sides=cut_sides, mapping=linked, strict=True,
                          label=f"{o} recomputed with {fed_with}")
    orig_vals = run_all(orig, feeds, kept)
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


def _check_downstream(ctx: Context, check: Check, source: str, rerouted: Sequence[str],
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
    cut_vals = run_all(cut_staged, cut_feeds, [c for c, _ in pairs])

    def cut_sides(k: int) -> tuple[Side, Side]:
        return Side(cut_staged, cut_feeds[k]), Side(new, feeds[k])

    for c, n in pairs:
        if n is None:
            check.missing("downstream", c, f"the rewritten model lost output '{c}'")
        elif c in affected:
            check.compare("downstream", c, n, cut_vals, new_vals, dtype=dtype_of(cut_staged, c),
                          exact=True, sides=cut_sides, mapping={**(renamed or {}), fed: replacement},
                          display=shown.get(c, c),
                          label=f"{shown.get(c, c)} recomputed with {source} := {replacement}")
        else:
            check.compare("untouched", c, n, orig_vals, new_vals, dtype=dtype_of(orig, c),
                          exact=True, sides=lambda k: (Side(orig, feeds[k]), Side(new, feeds[k])))


@rewrite_check(InsertRecord)
def _check_insert(ctx: Context, record: InsertRecord, check: Check) -> None:
    if record.sites and any(site.get("graph") for site in record.sites):
        from .bodies import check_insert_bodies  # sites inside If/Loop/Scan bodies

        check_insert_bodies(ctx, record, check)
        return
    if record.sites:
        _check_insert_sites(ctx, record, check)
        return
    orig, new, feeds = ctx.orig, ctx.new, ctx.feeds
    at = resolve(orig, record.at)
    renamed = dict(record.renamed or {})
    # a graph output that kept its name: 'at' is the processed tensor in the rewritten model and
    # the unprocessed values live under renamed[at]
    at_new = renamed[at] if at in renamed else resolve(new, at)
    processed = record.processed if at in renamed else resolve(new, record.processed)
    orig_vals = run_all(orig, feeds, [at, *orig.output_names])
    new_vals = run_all(new, feeds, [at_new, processed, *new.output_names])

    def plain(k: int) -> tuple[Side, Side]:
        return Side(orig, feeds[k]), Side(new, feeds[k])

    check.compare("at", at, at_new, orig_vals, new_vals, dtype=dtype_of(orig, at), exact=True,
                  sides=plain, mapping=renamed, display=at)
    _check_block(ctx, check, record, at, at_new, processed,
                 [ov[at] for ov in orig_vals], new_vals)
    as_output = record.as_output
    rerouted = [] if as_output else list(record.rerouted)
    rerouted_outputs = [] if as_output else list(record.rerouted_outputs)
    _check_downstream(ctx, check, at, rerouted, rerouted_outputs,
                      lambda k: new_vals[k][processed], processed, 1 if as_output else 0,
                      orig_vals, new_vals, renamed=renamed)


def _check_block(ctx: Context, check: Check, record: InsertRecord, at: str, at_new: str,
                 processed: str, at_values: list[np.ndarray], new_vals: Values) -> None:
    """The block evaluated alone on ``at_values`` (per sample) equals ``processed`` of the
    rewritten model: rebuilt from the record when a built-in, else isolated from the model."""
    orig, new, feeds = ctx.orig, ctx.new, ctx.feeds
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
        note = f"block '{record.block}' rebuilt from the record's parameters"
        if note not in check.notes:
            check.notes.append(note)
    else:
        block = ctx.stage(isolate_nodes(new, [processed], [at_new]), "block")
        b_in, b_out = at_new, processed
        note = "block isolated from the rewritten model (not a built-in block)"
        if note not in check.notes:
            check.notes.append(note)
    block_feeds = [{**f, b_in: v} for f, v in zip(feeds, at_values, strict=True)]
    block_vals = run_all(block, block_feeds, [b_out])
    mapping[b_out] = processed
    mapping[b_in] = at_new
    name = record.block
    what = f"{name if name and name != 'graph' else 'inserted graph'}({at})"
    check.compare("block", b_out, processed, block_vals, new_vals, dtype=dtype_of(new, processed),
                  exact=False, sides=lambda k: (Side(block, block_feeds[k]), Side(new, feeds[k])),
                  mapping=mapping, strict=True, display=what, label=f"{what} evaluated alone")


def _check_insert_sites(ctx: Context, record: InsertRecord, check: Check) -> None:
    """A multi-site insert: the original, cut at every site (the site's readers and outputs
    read a fed input), fed the rewritten model's processed values, computes the rewritten
    model's activation at each site ("at") and its outputs ("downstream"); and each block,
    evaluated alone on the rewritten model's activation, gives its processed tensor ("block").
    Together, in node order, they prove the rewrite site by site."""
    orig, new, feeds = ctx.orig, ctx.new, ctx.feeds
    sites = record.each()
    renamed = record.all_renamed()
    cut, cut_staged = orig.model, orig
    ats, fed, processed, at_new = [], [], [], []
    for site in sites:
        at = resolve(orig, site.at)
        ats.append(at)
        at_new.append(renamed[at] if at in renamed else resolve(new, at))
        processed.append(site.processed if at in renamed else resolve(new, site.processed))
        rerouted = [] if site.as_output else list(site.rerouted)
        outs = [] if site.as_output else list(site.rerouted_outputs)
        cut, name, cut_index = cut_model(cut, cut_staged, at, rerouted, outs)
        cut_staged = ctx.stage(cut, "cut", cut_index)
        fed.append(name)
    new_vals = run_all(new, feeds, [*at_new, *processed, *new.output_names])
    cut_feeds = [{**f, **{n: nv[p] for n, p in zip(fed, processed, strict=True)}}
                 for f, nv in zip(feeds, new_vals, strict=True)]
    cut_outs = list(cut_staged.output_names)
    cut_vals = run_all(cut_staged, cut_feeds, [*ats, *cut_outs])

    def cut_sides(k: int) -> tuple[Side, Side]:
        return Side(cut_staged, cut_feeds[k]), Side(new, feeds[k])

    linked = {**renamed, **dict(zip(fed, processed, strict=True))}
    fed_with = f"{len(sites)} sites fed their processed values"
    for site, at, a_new, p in zip(sites, ats, at_new, processed, strict=True):
        check.compare("at", at, a_new, cut_vals, new_vals, dtype=dtype_of(orig, at), exact=True,
                      sides=cut_sides, mapping=linked, display=at,
                      label=f"{at} recomputed with {fed_with}")
        _check_block(ctx, check, site, at, a_new, p, [nv[a_new] for nv in new_vals], new_vals)
    new_outs = list(new.output_names)
    extra = len(sites) if record.as_output else 0
    if len(new_outs) != len(cut_outs) + extra:
        check.missing("downstream", cut_outs[0] if cut_outs else "-",
                      f"the rewritten model has {len(new_outs)} outputs, the original "
                      f"{len(cut_outs)} (+{extra} processed)")
        return
    shown = dict(zip(cut_outs, orig.output_names, strict=True))
    for c, n in zip(cut_outs, new_outs, strict=False):
        check.compare("downstream", c, n, cut_vals, new_vals, dtype=dtype_of(cut_staged, c),
                      exact=True, sides=cut_sides, mapping=linked, display=shown.get(c, c),
                      label=f"{shown.get(c, c)} recomputed with {fed_with}")


@rewrite_check(RerouteRecord)
def _check_reroute(ctx: Context, record: RerouteRecord, check: Check) -> None:
    if record.graph:
        from .bodies import check_reroute_body  # inside an If/Loop/Scan body

        check_reroute_body(ctx, record, check)
        return
    orig, new, feeds = ctx.orig, ctx.new, ctx.feeds
    source = resolve(orig, record.source)
    target = resolve(orig, record.target)
    orig_vals = run_all(orig, feeds, [target, *orig.output_names])
    new_vals = run_all(new, feeds, new.output_names)
    _check_downstream(ctx, check, source, list(record.rerouted), list(record.rerouted_outputs),
                      lambda k: orig_vals[k][target], target, 0, orig_vals, new_vals)



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
    typed = as_record(record)
    run_check = check_of(typed)
    limits = make_limits(isolate, timeout, memory_limit)
    orig_model, new_model = to_model(original), to_model(rewritten)
    with Workspace() as ws:
        ctx = Context(orig_model, new_model, ws, threads=threads, inputs=inputs, seed=seed,
                      dims=dims, samples=samples, limits=limits, ranges=ranges,
                      save_inputs=save_inputs)
        check = Check(batch, len(ctx.feeds), ctx.notes, rtol=rtol, atol=atol)
        run_check(ctx, typed, check)
        return check.report(f"rewrite:{typed.op}", len(ctx.feeds),
                            locate_divergence=locate_divergence, inputs=ctx.described,
                            deep_all=deep)
