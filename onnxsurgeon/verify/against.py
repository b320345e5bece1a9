"""A model against its source framework (``verify --against-tf / --against-torch``).

The core never imports TensorFlow or PyTorch: the converters hand in a reference function
(:mod:`onnxsurgeon.converters.reference`) that maps the candidate's input arrays to the
framework's outputs and, through ``intermediates``, to the values of framework names the
candidate's name map knows, which locates the first difference as between two ONNX models.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from ..select import Selector, name_map, node_module
from .accumulate import FRAMEWORK, PairAccumulator, default_tolerance
from .compare import PairsLike, _conversion_notes, make_samples
from .deep import node_depths, saturation_bounds
from .inputs import InputsLike, Range, Sample
from .isolate import make_limits
from .locate import numpy_dtype_name
from .render import fmt
from .report import (
    FAIL,
    INCONCLUSIVE,
    PASS,
    DeepResult,
    Divergence,
    TensorError,
    VerifyReport,
    make_report,
)
from .run import ModelLike, ModelRunError, Staged, Workspace, to_model

ReferenceFn = Callable[[dict[str, np.ndarray]], Mapping[str, Any] | Sequence[Any]]
"""A callable mapping the candidate's input arrays to reference outputs (by name or in order);
optionally with ``intermediates(feeds, framework_names) -> {name: array}``."""

Intermediates = Callable[[dict[str, np.ndarray], Sequence[str]], Mapping[str, Any]]


def localize(intermediates: Intermediates, cand: Staged, feed: Sample, *, rtol: float | None,
             atol: float | None) -> tuple[Divergence | None, DeepResult | None]:
    """Compare the framework's values of the name map's names with the candidate's tensors on
    one sample, in the candidate's topological order. Returns the first difference (None when
    all agree) and the comparison (None when the framework gave no intermediate)."""
    index = cand.index
    fmap = {k: v for k, v in name_map(cand.model.proto).items() if v in index.producer}
    if not fmap:
        return None, None
    keys = sorted(fmap, key=lambda k: (index.producer[fmap[k]], k))
    got = intermediates({n: v.copy() for n, v in feed.items()}, keys)
    keys = [k for k in keys if k in got]
    if not keys:
        return None, None
    try:
        values = cand.run(feed, list(dict.fromkeys(fmap[k] for k in keys)))
    except ModelRunError:
        return None, None
    depths = node_depths(index)
    rows: list[TensorError] = []
    first: tuple[str, TensorError] | None = None
    for k in keys:
        tensor = fmap[k]
        a, b = np.asarray(got[k]), values[tensor]
        if not isinstance(b, np.ndarray) or a.shape != b.shape:
            continue
        dtype = numpy_dtype_name(cand.elem_type(tensor))
        lo_r, lo_a = default_tolerance(dtype, FRAMEWORK)
        acc = PairAccumulator(k, tensor, dtype=dtype, rtol=lo_r if rtol is None else rtol,
                              atol=lo_a if atol is None else atol,
                              bounds=saturation_bounds(cand, tensor))
        acc.add(a.astype(b.dtype) if a.dtype != b.dtype and a.dtype.kind == b.dtype.kind else a, b)
        r = acc.result()
        i = index.producer[tensor]
        row = TensorError(tensor=k, candidate=tensor, node=index.node_label(i),
                          op_type=index.graph.node[i].op_type, position=i, depth=depths[i],
                          max_abs_diff=r.max_abs_diff, max_rel_diff=r.max_rel_diff,
                          ok=bool(r.agree), informative=r.informative, why=r.why)
        rows.append(row)
        if first is None and not row.ok:
            first = (k, row)
    deep = DeepResult(tensors=tuple(rows), forced=False, batches=1)
    if first is None:
        return None, deep
    key, row = first
    node = index.graph.node[index.producer[row.candidate]]
    return Divergence(tensor=row.candidate, candidate_tensor=row.candidate, node=row.node,
                      op_type=row.op_type, framework_name=key, module=node_module(node),
                      max_abs_diff=row.max_abs_diff, sessions=1), deep


def verify_against(reference_fn: ReferenceFn, candidate: ModelLike, *,
                   pairs: PairsLike | None = None, inputs: InputsLike | None = None,
                   rtol: float | None = None, atol: float | None = None, seed: int = 0,
                   dims: Mapping[str, int] | None = None, samples: int | None = None,
                   threads: int = 0, isolate: bool = False, timeout: float | None = None,
                   memory_limit: int | None = None, ranges: Mapping[str, Range] | None = None,
                   save_inputs: str | os.PathLike | None = None) -> VerifyReport:
    """Compare ``candidate`` with reference outputs computed by ``reference_fn`` (the hook the
    converters plug TensorFlow / PyTorch into; the core never imports them).

    Pairs are judged informative as in :func:`~.compare.compare`. When a pair fails, or agrees
    but could show nothing, and ``reference_fn.intermediates(feeds, names)`` exists (the
    converters' reference functions have it), the framework names of the candidate's name map
    are compared in the candidate's topological order on one sample (:func:`localize`): the first
    that differs is the divergence, and settles a pair that could show nothing as failed.
    Inputs, ``ranges`` and ``save_inputs`` are those of :func:`~.compare.compare`.

    ``reference_fn`` receives the candidate's input arrays by name and returns outputs by name
    (a mapping) or in the candidate's output order (a sequence). ``pairs`` maps reference keys
    to candidate tensors (default: the candidate's outputs, by name or position). Float tolerances
    are at least rtol 1e-3 / atol 1e-5 unless given. An .npz folder is streamed and the
    isolation options are those of :func:`compare`.
    """
    limits = make_limits(isolate, timeout, memory_limit)
    cand_model = to_model(candidate)
    with Workspace() as ws:
        cand = Staged(cand_model, ws, "candidate", threads=threads, limits=limits)
        made = make_samples([cand], inputs=inputs, seed=seed, dims=dims, samples=samples,
                            stream=True, ranges=ranges, save_inputs=save_inputs)
        feeds = made.samples
        pair_list: list[tuple[str, str]] | None = None
        if pairs is not None:
            items = list(pairs.items()) if isinstance(pairs, Mapping) else list(pairs)
            csel = Selector(cand.index)
            pair_list = [(r, csel.resolve(c)) for r, c in items]
        accs: dict[tuple[str, str], PairAccumulator] = {}
        names = list(cand.output_names) if pair_list is None else [c for _, c in pair_list]
        with cand.session(list(dict.fromkeys(names))) as crun:
            for k in range(len(feeds)):
                feed = feeds[k]
                cvals = crun.run(feed)
                got = reference_fn({n: v.copy() for n, v in feed.items()})
                ref_vals = _reference_values(got, cand.output_names)
                current = pair_list or [(n, n) for n in cand.output_names if n in ref_vals]
                for r, c in current:
                    if (r, c) not in accs:
                        dtype = numpy_dtype_name(cand.elem_type(c))
                        lo_r, lo_a = default_tolerance(dtype, FRAMEWORK)
                        accs[(r, c)] = PairAccumulator(
                            r, c, dtype=dtype, rtol=lo_r if rtol is None else rtol,
                            atol=lo_a if atol is None else atol, bounds=saturation_bounds(cand, c))
                    if r not in ref_vals:
                        accs[(r, c)].fail(f"the reference returned no '{r}'")
                        continue
                    accs[(r, c)].add(np.asarray(ref_vals[r]), cvals[c], k)
                del feed, cvals, got, ref_vals
        made.notes.extend(_conversion_notes(getattr(feeds, "converted", {})))
        reports = [a.result() for a in accs.values()]
        divergence, deep = None, None
        open_pairs = [p for p in reports if p.verdict != PASS]
        intermediates = getattr(reference_fn, "intermediates", None)
        if open_pairs and callable(intermediates):
            worst = next((p.worst_sample for p in open_pairs if not p.agree), None) or 0
            divergence, deep = localize(intermediates, cand, feeds[worst], rtol=rtol, atol=atol)
            if deep is not None and divergence is not None:
                reports = [p if p.verdict != INCONCLUSIVE else replace(
                    p, verdict=FAIL, ok=False, evidence=(
                        f"'{divergence.framework_name}' ({divergence.tensor}) on the way differs "
                        f"by up to {fmt(divergence.max_abs_diff)}")) for p in reports]
        return make_report(reports, samples=len(feeds), kind="against", notes=made.notes,
                           inputs=made.described, divergence=divergence, deep=deep)


def _reference_values(got: Mapping[str, Any] | Sequence[Any], outputs: list[str]) -> dict[str, Any]:
    if isinstance(got, Mapping):
        return {str(k): v for k, v in got.items()}
    if isinstance(got, np.ndarray):
        got = [got]
    return dict(zip(outputs, list(got), strict=False))
