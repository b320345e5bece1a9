"""Rewrite invariants of the structural verbs ``rename``, ``bypass`` and ``merge``.

With graph optimizations off, compared bit for bit:

* rename -- every output (and every renamed tensor) of the rewritten model equals the original's
  under its old name, the rewritten model fed the original's inputs under their new names;
* bypass -- the rewritten model equals the original whose removed nodes are replaced by Identity
  of the bypassed input (that model is built from the original and the record);
* merge -- the rewritten model equals running FIRST, then SECOND on FIRST's connected outputs
  (SECOND's renamed tensors mapped back through the record).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

import onnx

from ..errors import UsageError
from ..index import GraphIndex
from ..io import Model
from ..record import BypassRecord, MergeRecord, RenameRecord, as_record, records
from .compare import make_samples
from .deep import structurally_covered
from .inputs import InputsLike, Range
from .invariant import Check, Context, dtype_of, node_position, rewrite_check, run_all
from .isolate import make_limits
from .locate import Side
from .report import INCONCLUSIVE, VerifyReport
from .run import DEFAULT_BATCH, ModelLike, Staged, Workspace, to_model


@rewrite_check(RenameRecord)
def _check_rename(ctx: Context, record: RenameRecord, check: Check) -> None:
    orig, new, feeds = ctx.orig, ctx.new, ctx.feeds
    renamed = dict(record.renamed)
    tensors = {} if record.nodes else renamed
    new_feeds = [{tensors.get(k, k): v for k, v in f.items()} for f in feeds]
    names = list(dict.fromkeys([*orig.output_names,
                                *(n for n in tensors if orig.is_tensor(n))]))
    inner = [n for n in tensors if not orig.is_tensor(n)]
    if inner:
        check.notes.append(f"{len(inner)} tensors renamed inside nested bodies are checked "
                           "through the outputs")
    targets = [tensors.get(n, n) for n in names]
    orig_vals = run_all(orig, feeds, names)
    new_vals = run_all(new, new_feeds, targets)

    def sides(k: int) -> tuple[Side, Side]:
        return Side(orig, feeds[k]), Side(new, new_feeds[k])

    # a pair's values are dropped once compared (the next pairs' temporaries reuse the memory)
    # when no other pair reads them: every target is one name's (a rename is one-to-one)
    drop = len(set(targets)) == len(targets)
    for n, target in zip(names, targets, strict=True):
        if not new.is_tensor(target):
            check.missing("rename", n, f"the rewritten model has no tensor '{target}'")
            continue
        check.compare("rename", n, target, orig_vals, new_vals, dtype=dtype_of(orig, n), exact=True,
                      sides=sides, mapping=tensors)
        if drop:
            for values, key in ((orig_vals, n), (new_vals, target)):
                for v in values:
                    v.pop(key, None)


def _identity_reference(original: Model, record: BypassRecord) -> Model:
    """The original with every removed node replaced by ``Identity(bypassed input)``: input
    ``record.input`` of the node, or the module input ``record.sources`` names. The nodes the
    bypass pruned stay: nothing reads them, so the outputs are the same either way."""
    proto = onnx.ModelProto()
    proto.CopyFrom(original.proto)
    removed = list(record.removed)
    slot = record.input
    sources = record.sources or {}
    index = GraphIndex(proto)
    for name in removed:
        k = node_position(index, str(name))
        if k is None:
            raise UsageError(
                f"the rewrite record removes node '{name}', which the original model does not "
                "have; give the model the rewrite started from"
            )
        node = proto.graph.node[k]
        src = sources.get(str(name)) or (node.input[slot] if slot < len(node.input) else "")
        out = node.output[0]
        node.CopyFrom(onnx.helper.make_node("Identity", [src], [out], name=node.name))
    for path, body in (record.bodies or {}).items():  # nodes removed inside If/Loop/Scan bodies
        from ..surgery._bodies import locate

        graph = locate(proto, path)
        for name in body.get("removed", ()):
            k = _body_position(graph, str(name))
            if k is None:
                raise UsageError(
                    f"the rewrite record removes node '{name}' inside the body '{path}', which "
                    "the original model does not have; give the model the rewrite started from")
            node = graph.node[k]
            src = node.input[slot] if slot < len(node.input) else ""
            node.CopyFrom(onnx.helper.make_node("Identity", [src], [node.output[0]],
                                                name=node.name))
    return Model(proto, base_dir=original.base_dir)


def _body_position(graph: onnx.GraphProto, label: str) -> int | None:
    """Position in ``graph`` of the node a record's label names (its name, or ``OpType#i``)."""
    for i, node in enumerate(graph.node):
        if node.name == label:
            return i
    op, sep, pos = label.rpartition("#")
    if sep and pos.isdigit() and int(pos) < len(graph.node):
        node = graph.node[int(pos)]
        if node.op_type == op and not node.name:
            return int(pos)
    return None


@rewrite_check(BypassRecord)
def _check_bypass(ctx: Context, record: BypassRecord, check: Check) -> None:
    """Outputs pair by position: a graph output keeps its name, or (``rerouted_outputs``) takes
    the bypassed input's name."""
    new, feeds = ctx.new, ctx.feeds
    ref = ctx.stage(_identity_reference(ctx.orig.model, record), "identity")
    if len(ref.output_names) != len(new.output_names):
        raise UsageError(
            f"the rewritten model has {len(new.output_names)} outputs but the original "
            f"{len(ref.output_names)}; give the model the bypass started from"
        )
    pairs = list(zip(ref.output_names, new.output_names, strict=True))
    ref_vals = run_all(ref, feeds, [r for r, _ in pairs])
    new_vals = run_all(new, feeds, [c for _, c in pairs])

    def sides(k: int) -> tuple[Side, Side]:
        return Side(ref, feeds[k]), Side(new, feeds[k])

    for r, c in pairs:
        check.compare("bypass", r, c, ref_vals, new_vals, dtype=dtype_of(ref, r), exact=True,
                      sides=sides)


@rewrite_check(MergeRecord)
def _check_merge(ctx: Context, record: MergeRecord, check: Check) -> None:
    raise UsageError(
        "a merge is checked against its second model, which the rewrite log does not store; use "
        "'onnxsurgeon merge ... --verify' or onnxsurgeon.verify.verify_merge(first, second, merged)"
    )


def verify_merge(first: ModelLike, second: ModelLike, merged: ModelLike, *,
                 record: MergeRecord | Mapping[str, Any] | None = None,
                 inputs: InputsLike | None = None,
                 seed: int = 0, dims: Mapping[str, int] | None = None, samples: int | None = None,
                 batch: int = DEFAULT_BATCH, threads: int = 0, isolate: bool = False,
                 timeout: float | None = None, memory_limit: int | None = None,
                 ranges: Mapping[str, Range] | None = None,
                 deep: bool | Collection[str] = False, rtol: float | None = None,
                 atol: float | None = None) -> VerifyReport:
    """Check that ``merged`` equals running ``first``, then ``second`` on first's connected
    tensors: every output of the merged model, bit for bit (optimizations off). ``record`` is
    the merge record (default: the merged model's last one). An output that could not show a
    difference (saturated, constant) is settled as :func:`~onnxsurgeon.verify.verify_rewrite`
    settles one: deeper shared tensors, or the same graph from tensors that agree (a connected
    input of ``second`` counts as fed alike when the merged model computes its tensor with
    ``first``'s graph). ``deep`` also compares every tensor on the way to each output with its
    model's (or those named, see :func:`~onnxsurgeon.verify.verify_rewrite`); ``rtol`` /
    ``atol`` are the tolerances of those deeper comparisons' inexact parts.

    Raises:
        UsageError: no merge record, or a record that does not fit the models.
    """
    new_model = to_model(merged)
    if record is None:
        log = records(new_model.proto)
        if not log or not isinstance(log[-1], MergeRecord):
            raise UsageError("the merged model's last rewrite is not a merge; pass record=")
        record = log[-1]
    typed = as_record(record)
    if not isinstance(typed, MergeRecord):
        raise UsageError(f"record= is a '{typed.op}' record; pass the merge record")
    renamed = dict(typed.renamed)
    back = {v: k for k, v in renamed.items()}
    connect = list(typed.connect)
    limits = make_limits(isolate, timeout, memory_limit)
    with Workspace() as ws:
        fst = Staged(to_model(first), ws, "first", threads=threads, limits=limits)
        snd = Staged(to_model(second), ws, "second", threads=threads, limits=limits)
        new = Staged(new_model, ws, "merged", threads=threads, limits=limits)
        made = make_samples([new], inputs=inputs, seed=seed, dims=dims, samples=samples,
                            ranges=ranges)
        feeds = made.samples
        outs = list(new.output_names)
        mine = {o: (fst if fst.is_tensor(o) else snd) for o in outs}
        first_feeds = [{k: v for k, v in f.items() if k in fst.input_names} for f in feeds]
        first_vals = run_all(fst, first_feeds,
                              [a for a, _ in connect] + [o for o in outs if mine[o] is fst])
        linked = {b: a for a, b in connect}
        second_feeds = [
            {i: (fv[linked[i]] if i in linked else f[renamed.get(i, i)]) for i in snd.input_names
             if i in linked or renamed.get(i, i) in f}  # else: an input left at its default
            for f, fv in zip(feeds, first_vals, strict=True)
        ]
        second_vals = run_all(snd, second_feeds,
                               [back.get(o, o) for o in outs if mine[o] is snd])
        new_vals = run_all(new, feeds, outs)
        check = Check(batch, len(feeds), made.notes, rtol=rtol, atol=atol)

        def first_sides(k: int) -> tuple[Side, Side]:
            return Side(fst, first_feeds[k]), Side(new, feeds[k])

        def second_sides(k: int) -> tuple[Side, Side]:
            return Side(snd, second_feeds[k]), Side(new, feeds[k])

        for o in outs:
            if mine[o] is fst:
                check.compare("merge:first", o, o, first_vals, new_vals, dtype=dtype_of(new, o),
                              exact=True, sides=first_sides)
            elif not snd.is_tensor(back.get(o, o)):
                check.missing("merge", o, f"'{o}' is a tensor of neither model")
            else:
                check.compare("merge:second", back.get(o, o), o, second_vals, new_vals,
                              dtype=dtype_of(new, o), exact=True, sides=second_sides,
                              mapping=renamed)
        _link_connections(check, fst, new, connect)
        return check.report("rewrite:merge", len(feeds), locate_divergence=False,
                            inputs=made.described, deep_all=deep)


def _link_connections(check: Check, fst: Staged, new: Staged,
                      connect: Sequence[tuple[str, str]]) -> None:
    """Let the settlement of SECOND's open pairs walk through the connections: SECOND's input
    ``b`` was fed FIRST's values of ``a``, which equal the merged model's ``a`` when the merged
    model computes ``a`` with FIRST's graph from the same inputs and weights (proved by
    structure, only when a pair of SECOND is open). O(nodes + weight bytes) of FIRST's part."""
    entries = [e for e in check.entries
               if e.acc.check == "merge:second" and e.acc.result().verdict == INCONCLUSIVE]
    if not entries:
        return
    proven = {b: a for a, b in connect if new.is_tensor(a) and fst.is_tensor(a)
              and structurally_covered(fst, new, a, a, agreed=()) is not None}
    for entry in entries:
        entry.mapping.update(proven)

