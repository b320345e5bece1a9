"""The TF -> ONNX conversion check: outputs compared at batch 1 and at batch 2 (when the batch is
dynamic) on inputs that can show a difference, and a failure localised to the first TF tensor
whose value the ONNX model lost, with the TF op and the ONNX node computing it.

Localising does not trust names (tf2onnx names a fused ``Conv`` after the first TF op it absorbed,
holding the last one's value): every TF tensor of the failing sample is looked up by value among
the ONNX tensors, as TensorFlow lays it out or channels-first (NCHW), the layout tf2onnx gives
convolutions. Walking back from the differing output over TF tensors whose value is missing, the
first (in graph order) whose inputs are all held is where the models part. A value that cannot
identify a tensor (a scalar, a constant fill) is compared with the ONNX tensor of its name. A tensor fused away
(``Conv2D:0`` without its bias) is missing too, but the walk only reaches it when what follows it
is missing as well.

When the batch is dynamic and one batch size fails while another agrees, the graph is converted
again with that batch size static: when that conversion agrees, the message names the
``--inputs`` spec that converts correctly (a converter pattern that loses a size-1 batch, say).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx

from onnxsurgeon.verify.run import ModelRunError

from .check import CheckOutcome, SampleFailed, SampleSkipped, outcome_message, run_check
from .common import (
    ATOL,
    RTOL,
    ConversionMismatchError,
    ValueIndex,
    run_all_tensors,
    run_onnx,
)
from .tf_sources import Frozen, tensor_name

LAYOUTS = {3: "NCW", 4: "NCHW", 5: "NCDHW"}
"""Channels-first layout names by rank: where tf2onnx keeps a TF (channels-last) value."""


def held(vindex: ValueIndex, value: np.ndarray) -> tuple[str, str] | None:
    """(ONNX tensor, layout) holding ``value`` as TF lays it out (layout ``""``) or channels-first
    (:data:`LAYOUTS`); None when none does or ``value`` cannot identify a tensor."""
    found = vindex.matches(value)
    if found:
        return found[0], ""
    rank = np.ndim(value)
    if rank in LAYOUTS:
        perm = (0, rank - 1, *range(1, rank - 1))
        found = vindex.matches(np.ascontiguousarray(np.transpose(value, perm)))
        if found:
            return found[0], LAYOUTS[rank]
    return None


def dynamic_batch(fr: Frozen) -> bool:
    """Whether every input has a leading dimension of unknown size (a batch)."""
    return bool(fr.specs) and all(len(shape) >= 1 and shape[0] is None for shape, _ in fr.specs)


def pair_for(fr: Frozen, model: onnx.ModelProto) -> Callable[[list[np.ndarray]], Any]:
    """``arrays -> (ONNX outputs, TF outputs)`` for :func:`~.check.run_check`."""
    def pair(arrays: list[np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray]]:
        feeds = {fr.rename.get(n, n): a for n, a in zip(fr.inputs, arrays, strict=True)}
        try:
            ref = [np.asarray(r) for r in fr.run_reference(list(arrays))]
        except Exception as exc:  # noqa: BLE001 - TF itself cannot run this batch size
            raise SampleSkipped(str(exc)) from exc
        try:
            got = run_onnx(model, feeds)
        except ModelRunError as exc:
            batch = np.shape(arrays[0])[0] if arrays and np.ndim(arrays[0]) else "?"
            raise SampleFailed(f"onnxruntime cannot run batch {batch} where TensorFlow "
                               f"can: {str(exc)[:240]}") from exc
        return [got[fr.rename.get(n, n)] for n in fr.outputs], ref
    return pair


def check_tf(fr: Frozen, model: onnx.ModelProto, arrays: Sequence[np.ndarray],
             examples: Callable[[Frozen, int], list[np.ndarray]], *, rtol: float, atol: float,
             convert: Callable[[Frozen], onnx.ModelProto]) -> CheckOutcome:
    """Run the check (batch 1 and 2 when the batch is dynamic); raise
    :class:`ConversionMismatchError` with the localisation when it fails. ``examples(fr, batch)``
    makes example inputs; ``convert(fr)`` converts again (for the static-shape retry)."""
    dynamic = dynamic_batch(fr)
    base_batch = int(np.shape(arrays[0])[0]) if arrays and np.ndim(arrays[0]) else 1
    other = {b: examples(fr, b) for b in (1, 2) if dynamic and b != base_batch}
    names = [fr.rename.get(n, n) for n in fr.outputs]
    outcome = run_check(pair_for(fr, model), arrays, names=names, rtol=rtol, atol=atol,
                        other_batches=other)
    if outcome.verdict != "fail":
        return outcome
    info: dict[str, Any] = {
        "max_abs_diff": outcome.max_abs, "max_excess": outcome.excess,
        "output": names[outcome.output or 0],
        "batches": {str(b): ok for b, ok in sorted(outcome.batches.items())},
    }
    where = ""
    try:
        found = localise(fr, model, list(outcome.feeds or arrays), outcome.output or 0)
    except Exception as exc:  # noqa: BLE001 - localising is best effort; the failure stands
        found = {}
        info["localise_error"] = f"{type(exc).__name__}: {exc}"[:200]
    info.update(found)
    if found.get("framework_name"):
        where = (f"; first differing TF tensor '{found['framework_name']}' "
                 f"({found['framework_op']})")
        if found.get("onnx_node"):
            where += f" -> ONNX node '{found['onnx_node']}' ({found['onnx_op']})"
        if found.get("shapes"):
            where += f", {found['shapes']}"
    failing = sorted(b for b, ok in outcome.batches.items() if not ok)
    agreeing = sorted(b for b, ok in outcome.batches.items() if ok)
    for batch in (failing[:1] + agreeing[:1]) if dynamic and failing and agreeing else []:
        # the failing batch made static first (a pattern that loses a size-1 batch converts
        # right when it is known), else the agreeing one (a graph right at that batch only)
        static = _static_retry(fr, batch, examples, convert, rtol=rtol, atol=atol)
        if static:
            info["static_inputs"] = static
            where += (f"; converting with --inputs {','.join(static)} gives a model that agrees "
                      f"at batch {batch}")
            break
    raise ConversionMismatchError(
        outcome_message("TF -> ONNX conversion", outcome, rtol=rtol, atol=atol, names=names,
                        where=where),
        info)


def _static_retry(fr: Frozen, batch: int, examples: Callable[[Frozen, int], list[np.ndarray]],
                  convert: Callable[[Frozen], onnx.ModelProto], *, rtol: float,
                  atol: float) -> list[str]:
    """Input specs with ``batch`` static when converting so makes the check agree ([] if not)."""
    specs = [([batch, *shape[1:]], dtype) for shape, dtype in fr.specs]
    static = dataclasses.replace(
        fr, specs=specs, rename=dict(fr.rename),
        shape_override={**fr.shape_override, **{n: s for n, (s, _) in zip(fr.inputs, specs,
                                                                          strict=True)}})
    try:
        model = convert(static)
        outcome = run_check(pair_for(static, model), examples(static, batch),
                            names=[static.rename.get(n, n) for n in static.outputs],
                            rtol=rtol, atol=atol)
    except Exception:  # noqa: BLE001 - a retry that fails suggests nothing
        return []
    if outcome.verdict == "fail":
        return []
    return [f"{fr.rename.get(n, n)}:{'x'.join(str(d) if d is not None else '?' for d in s)}"
            for n, (s, _) in zip(fr.inputs, specs, strict=True)]


def _topo_rank(gd: Any) -> dict[str, int]:
    """TF op name -> position in a topological order of ``gd`` (Kahn, iterative; O(ops+edges))."""
    ops = {node.name: node for node in gd.node}
    indeg = {name: 0 for name in ops}
    users: dict[str, list[str]] = {}
    for node in gd.node:
        for inp in node.input:
            src = inp.lstrip("^").split(":")[0]
            if src in ops:
                indeg[node.name] += 1
                users.setdefault(src, []).append(node.name)
    ready = [node.name for node in gd.node if indeg[node.name] == 0]
    rank: dict[str, int] = {}
    while ready:
        name = ready.pop()
        rank[name] = len(rank)
        for user in users.get(name, ()):
            indeg[user] -= 1
            if indeg[user] == 0:
                ready.append(user)
    for node in gd.node:   # cycles (loop frames) keep graph order after the rest
        rank.setdefault(node.name, len(rank))
    return rank


def localise(fr: Frozen, model: onnx.ModelProto, arrays: list[np.ndarray],
             output: int) -> dict[str, str]:
    """The first TF tensor on the way to output ``output`` whose value no ONNX tensor holds
    while its inputs are held (see the module docstring): ``framework_name``, ``framework_op``
    and, when found, ``onnx_node``/``onnx_op`` and ``shapes`` (when the same-named ONNX tensor
    has another shape). {} when nothing is missing. O(tensors) TF and onnxruntime evaluations."""
    from .tf import _constant_ops, _consumers, _tf_values

    gd = fr.graph_def
    const = _constant_ops(gd)
    tf_vals = _tf_values(gd, fr.inputs, arrays)
    feeds = {fr.rename.get(n, n): a for n, a in zip(fr.inputs, arrays, strict=True)}
    onnx_vals = {**run_all_tensors(model, feeds), **feeds}
    vindex = ValueIndex(onnx_vals)
    ops = {node.name: node for node in gd.node}

    def state(t: str) -> bool | None:
        op = t.rsplit(":", 1)[0]
        if op in const or t in fr.inputs:
            return True
        v = tf_vals.get(t)
        if v is None:
            return None
        if not (v.size >= 2 and v.dtype.kind in "fiu" and np.ptp(v.reshape(-1)) > 0):
            # a value that cannot identify a tensor (a scalar, a constant fill) is compared with
            # the ONNX tensor of its name, when there is one of its shape
            same = onnx_vals.get(t)
            if same is None or np.shape(same) != v.shape or v.dtype.kind not in "fiub":
                return None
            return bool(np.allclose(np.asarray(same, dtype=np.float64), v.astype(np.float64),
                                    rtol=RTOL, atol=ATOL, equal_nan=True))
        return held(vindex, v) is not None

    seen: dict[str, bool | None] = {}
    stack = [fr.outputs[output]]
    while stack:
        t = stack.pop()
        if t in seen:
            continue
        seen[t] = st = state(t)
        node = ops.get(t.rsplit(":", 1)[0])
        if st is True or node is None or node.op == "Placeholder":
            continue
        stack.extend(tensor_name(i) for i in node.input if not i.startswith("^"))
    rank = _topo_rank(gd)
    walked = sorted((t for t, st in seen.items() if st is not True),
                    key=lambda t: (rank.get(t.rsplit(":", 1)[0], 0), t))
    tainted: dict[str, bool] = {}
    first = None
    for t in walked:
        node = ops.get(t.rsplit(":", 1)[0])
        ins = [tensor_name(i) for i in node.input if not i.startswith("^")] if node else []
        above = any(tainted.get(i, False) for i in ins)
        tainted[t] = above or seen[t] is False
        if seen[t] is False and not above:
            first = t
            break
    if first is None:
        return {}
    op_name = first.rsplit(":", 1)[0]
    result = {"framework_name": first, "framework_op": ops[op_name].op if op_name in ops else ""}
    nodes = {n.name: n for n in model.graph.node}
    producer = {o: n for n in model.graph.node for o in n.output}
    onnx_node = nodes.get(op_name) or producer.get(first)
    cons = _consumers(gd)
    nxt = first
    for _ in range(8):
        if onnx_node is not None:
            break
        users = cons.get(nxt, [])
        if len(users) != 1:
            break
        nxt = users[0]
        onnx_node = nodes.get(nxt.rsplit(":", 1)[0]) or producer.get(nxt)
    if onnx_node is not None:
        result.update(onnx_node=onnx_node.name, onnx_op=onnx_node.op_type)
    if first in onnx_vals and first in tf_vals:
        a, b = np.shape(tf_vals[first]), np.shape(onnx_vals[first])
        if a != b:
            result["shapes"] = f"TF gives shape {list(a)}, ONNX {list(b)}"
    return result

