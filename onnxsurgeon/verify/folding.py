"""The evaluator ``fold`` computes constants with, and the rewrite invariants of ``fold``,
``dims`` and ``opset``.

* fold -- every graph output of the rewritten model agrees with the original's on the same
  inputs, within the dtype's tolerance: the folded values are computed by the same kernels, but
  onnxruntime pre-packs constant inputs (a MatMul whose weight became an initializer runs
  another kernel path), so floats may differ in the last bits;
* opset -- every graph output agrees within the dtype's tolerance (the version converter may
  replace an op by an equivalent one);
* dims -- the rewritten model, run at two batch sizes (its own static batch when it has one),
  equals the original run sample by sample: the original at its own batch on each slice of the
  batch, the slices' outputs concatenated along axis 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx

from ..index import GraphIndex, real_inputs
from ..record import DimsRecord, FoldRecord, OpsetRecord
from ..surgery.fold import RANDOM_OPS, Runner, reference_evaluator
from ..types import shape_of
from .compare import make_samples
from .invariant import Check, Context, dtype_of, rewrite_check, run_all
from .locate import Side


def ort_evaluator(model: onnx.ModelProto) -> Runner:
    """An evaluator for ``fold``: one onnxruntime session (graph optimizations off, CPU) on
    ``model`` (no inputs), run for the outputs asked; onnx's reference evaluator when
    onnxruntime has no kernel for one of its nodes (or cannot build the session)."""
    import onnxruntime as ort

    data = model.SerializeToString()
    try:
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        options.log_severity_level = 4  # a kernel failing at run time logs an error: hushed
        session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - no kernel (or a type onnxruntime refuses): reference
        return reference_evaluator(model)

    def run(names: Sequence[str]) -> Mapping[str, np.ndarray]:
        try:
            values = session.run(list(names), {})
        except Exception:  # noqa: BLE001 - a kernel failing at run time: the reference
            return reference_evaluator(model)(names)
        return dict(zip(names, values, strict=True))

    return run


def _random(index: GraphIndex) -> set[str]:
    """Tensors computed (at any distance) from a random op: no two runs agree on them."""
    found: set[str] = set()
    for node in index.graph.node:
        if node.op_type in RANDOM_OPS or any(i in found for i in node.input):
            found.update(o for o in node.output if o)
    return found


def _same_outputs(ctx: Context, check: Check, name: str, *, exact: bool) -> None:
    orig, new, feeds = ctx.orig, ctx.new, ctx.feeds
    random = _random(orig.index)
    outs = [n for n in orig.output_names if n not in random]
    if len(outs) < len(orig.output_names):
        check.notes.append(f"{len(orig.output_names) - len(outs)} outputs computed from random "
                           "ops are not compared (no two runs agree)")
    orig_vals = run_all(orig, feeds, outs)
    new_feeds = [{k: v for k, v in f.items() if k in new.index.inputs} for f in feeds]
    new_vals = run_all(new, new_feeds, outs)

    def sides(k: int) -> tuple[Side, Side]:
        return Side(orig, feeds[k]), Side(new, new_feeds[k])

    for n in outs:
        if not new.is_tensor(n):
            check.missing(name, n, f"the rewritten model has no output '{n}'")
            continue
        check.compare(name, n, n, orig_vals, new_vals, dtype=dtype_of(orig, n), exact=exact,
                      sides=sides)


@rewrite_check(FoldRecord)
def _check_fold(ctx: Context, record: FoldRecord, check: Check) -> None:
    if record.kept:
        check.notes.append(f"{len(record.kept)} foldable tensors over {record.max_bytes} bytes "
                           "stay computed")
    _same_outputs(ctx, check, "fold", exact=False)


@rewrite_check(OpsetRecord)
def _check_opset(ctx: Context, record: OpsetRecord, check: Check) -> None:
    check.notes.append(f"opset {record.source} -> {record.target}: outputs compared within "
                       "tolerance")
    _same_outputs(ctx, check, "opset", exact=False)


def _batch_of(vi: onnx.ValueInfoProto) -> int | str | None:
    shape = shape_of(vi)
    return shape[0] if shape else None


def _split(feed: Mapping[str, np.ndarray], size: int, inputs: Sequence[str]) -> list[dict[str, np.ndarray]]:
    total = next((int(feed[n].shape[0]) for n in inputs if feed[n].ndim), size)
    return [{n: (feed[n][k:k + size] if feed[n].ndim else feed[n]) for n in inputs}
            for k in range(0, total, size)]


def _joined(parts: Sequence[np.ndarray], shape: tuple[int, ...] | None) -> np.ndarray:
    """The original's outputs of consecutive sample groups joined along the axis where the
    batch sits in the rewritten output of shape ``shape`` (axis 0 unless the batch was merged
    into another dim: the axis whose size is the parts' sum, the others equal)."""
    if not parts[0].ndim or len(parts) == 1:
        return parts[0]
    first = parts[0].shape
    axes = [a for a in range(len(first)) if shape is not None and len(shape) == len(first)
            and shape[a] == sum(p.shape[a] for p in parts)
            and all(shape[k] == first[k] for k in range(len(first)) if k != a)]
    return np.concatenate(parts, axis=0 if not axes or 0 in axes else axes[0])


@rewrite_check(DimsRecord)
def _check_dims(ctx: Context, record: DimsRecord, check: Check) -> None:
    orig, new = ctx.orig, ctx.new
    outs = list(orig.output_names)
    new_inputs = real_inputs(new.index.model)
    old_batch = {vi.name: _batch_of(vi) for vi in real_inputs(orig.index.model)}
    symbols = {b for vi in new_inputs if isinstance(b := _batch_of(vi), str) and b}
    static = [b for vi in new_inputs if isinstance(b := _batch_of(vi), int)]
    old = next((b for b in old_batch.values() if isinstance(b, int) and b > 0), 1)
    sizes = [old, 3 * old] if symbols else [static[0] if static else old]
    if not symbols:
        check.notes.append(f"the rewritten model's batch is static ({sizes[0]}): one batch size")
    names = [vi.name for vi in new_inputs]
    for size in sizes:
        made = make_samples([new], inputs=None, seed=7 + size, samples=2, ranges=None,
                            dims=dict.fromkeys(symbols, size))
        feeds = made.samples
        new_vals = run_all(new, feeds, outs)
        new_shapes = {n: new_vals[0][n].shape for n in outs}
        per_orig = old if isinstance(old, int) and old > 0 and size % old == 0 else size
        orig_vals: list[dict[str, np.ndarray]] = []
        for feed in feeds:
            parts = run_all(orig, _split(feed, per_orig, names), outs)
            orig_vals.append({n: _joined([p[n] for p in parts], new_shapes.get(n))
                              for n in outs})
        for n in outs:
            check.compare(f"dims:batch {size}", n, n, orig_vals, new_vals,
                          dtype=dtype_of(orig, n), exact=False)

