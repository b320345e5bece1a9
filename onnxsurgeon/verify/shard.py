"""Folding samples into per-pair statistics, locally or in shards merged exactly.

:func:`fold_samples` is the comparison loop of :func:`~onnxsurgeon.verify.compare`: one session
per model, one sample at a time, every pair's :class:`~.accumulate.PairAccumulator` fed in sample
order. A dataset of .npz files can instead be split into contiguous shards (:func:`shard_jobs`),
each folded by :func:`run_shard` in a worker process (one session per model per worker, e.g. a
Ray task through :mod:`onnxsurgeon.cluster`), and the shards' accumulators merged in order
(:meth:`~.accumulate.PairAccumulator.merge`): every statistic (max abs/rel diff, mismatch counts,
worst index and sample, cosine, informativeness) equals the one a single loop computes. Shards
after the first also run sample 0 (not counted) so that constancy across samples is judged
against the same first sample.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .accumulate import PairAccumulator, _same_bits
from .deep import saturation_bounds
from .locate import numpy_dtype_name, one_sample
from .run import ModelRunError, Staged

Sample = Mapping[str, np.ndarray]


def make_accumulators(ref: Staged, pair_list: Sequence[tuple[str, str]], *, rtol: float | None,
                      atol: float | None, exact: bool) -> list[PairAccumulator]:
    """One accumulator per (reference, candidate) pair, typed and bounded from the reference."""
    return [PairAccumulator(r, c, rtol=rtol, atol=atol, exact=exact,
                            dtype=numpy_dtype_name(ref.elem_type(r)),
                            bounds=saturation_bounds(ref, r))
            for r, c in pair_list]


def if_conditions(staged: Staged) -> dict[str, str]:
    """Main-graph If node label -> its condition tensor."""
    index = staged.index
    return {index.node_label(i): n.input[0] for i, n in enumerate(index.graph.node)
            if n.op_type == "If" and n.input and n.input[0]}


def fold_samples(ref: Staged, cand: Staged, pair_list: Sequence[tuple[str, str]],
                 accs: Sequence[PairAccumulator], feeds: Sequence[Sample],
                 indices: Sequence[int], *, prime: bool = False,
                 progress: Callable[[int, int], None] | None = None,
                 probes: Sequence[tuple[str, str]] = (),
                 probed: dict[int, dict[str, tuple[bool, float | None]]] | None = None,
                 rtol: float | None = None, atol: float | None = None, exact: bool = False,
                 also: Sequence[tuple[str, str]] = (), keep: Sequence[tuple[str, str]] = (),
                 keep_failed: bool = False) -> tuple[dict[str, set[bool]], bool]:
    """Run both models on ``feeds[k]`` for each ``k`` in ``indices`` (in order) and fold every
    pair in as sample ``k``. ``prime``: first run sample 0 only to seed the constancy probes.
    Stops at the first sample the candidate cannot run (every pair fails with that reason).
    ``probes``: (reference, candidate) tensors the same sessions compute too, judged per sample
    once a pair fails as the search for the first difference judges them
    (:func:`~.locate.one_sample`, with ``rtol``/``atol``/``exact``) into ``probed[k]``; their
    arrays are dropped with the sample's.
    ``also``: (reference, candidate) tensors the sessions compute besides, not read here (for
    later requests that reuse these sessions, :meth:`~.run.Staged.session`). ``keep`` (of
    ``also``; with ``indices`` every sample in order): their values are kept too, in each model's
    :attr:`~.run.Staged.kept` for ``feeds``, so those requests need not run the samples again;
    once every pair fails they are dropped and no longer fetched (nothing is left to settle),
    unless ``keep_failed`` (``--deep`` compares them whatever the pairs say).

    Returns:
        (the values each If condition took, whether every sample ran).
    """
    conds = if_conditions(ref)
    ref_names = list(dict.fromkeys([r for r, _ in pair_list] + list(conds.values())
                                   + [r for r, _ in probes]))
    cand_names = list(dict.fromkeys([c for _, c in pair_list] + [c for _, c in probes]))
    seen: dict[str, set[bool]] = {}
    if prime or list(indices) != list(range(len(feeds))):
        keep = ()
    for staged in (ref, cand):
        staged.drop_kept()
    with ref.session(ref_names, also=[r for r, _ in also], read=[r for r, _ in keep]) as rrun, \
            cand.session(cand_names, also=[c for _, c in also], read=[c for _, c in keep]) as crun:
        if prime:
            feed = feeds[0]
            try:
                rvals, cvals = rrun.run(feed), crun.run(feed)
            except ModelRunError:
                pass  # sample 0 fails in the first shard too, which stops the merge there
            else:
                for acc, (r, c) in zip(accs, pair_list, strict=True):
                    acc.prime(rvals[r], cvals[c])
                del rvals, cvals
            del feed
        for done, k in enumerate(indices):
            # by index: enumerate() over feeds would keep the previous sample alive
            feed = feeds[k]
            rvals = rrun.run(feed)
            try:
                cvals = crun.run(feed)
            except ModelRunError as exc:
                for acc in accs:
                    acc.fail(f"candidate failed to run: {exc}")
                return seen, False
            for acc, (r, c) in zip(accs, pair_list, strict=True):
                acc.add(rvals[r], cvals[c], k)
            if probed is not None and probes and any(acc.failed for acc in accs):
                # judged only once a pair fails (the search starts at a failing pair's worst
                # sample, a failing one): a pair that agrees needs no search
                probed[k] = {r: one_sample(ref, r, c, rvals[r], cvals[c], rtol=rtol, atol=atol,
                                           exact=exact, cand=cand) for r, c in probes}
            if keep and not keep_failed and all(acc.failed for acc in accs):
                for staged in (ref, cand):
                    staged.drop_kept()
                keep = ()
                rrun, crun = rrun.only(ref_names), crun.only(cand_names)
            if keep:
                _keep(ref, feeds, rvals, [r for r, _ in keep])
                _keep(cand, feeds, cvals, [c for _, c in keep],
                      twins={c: ref.kept[r][-1] for r, c in keep if ref.kept.get(r)})
            if progress is not None:
                progress(done + 1, len(indices))
            for cond in conds.values():
                value = rvals.get(cond)
                if isinstance(value, np.ndarray) and value.size == 1:
                    seen.setdefault(cond, set()).add(bool(value.reshape(-1)[0]))
            del feed, rvals, cvals  # a streamed dataset keeps one sample alive at a time
    return seen, True


def _keep(staged: Staged, feeds: Sequence[Sample], values: Mapping[str, Any],
          names: Sequence[str], twins: Mapping[str, Any] | None = None) -> None:
    """Append this sample's values of ``names`` (those the run returned) to ``staged.kept``.
    ``twins``: the other model's value of a name for this sample; one with the same bits is
    kept in its place (the tensors before a change are equal: one copy of them, not two)."""
    if staged.kept_feeds is not feeds:
        staged.kept, staged.kept_feeds = {n: [] for n in names if n in values}, feeds
    for n, got in staged.kept.items():
        value = values[n]
        twin = (twins or {}).get(n)
        if isinstance(value, np.ndarray) and isinstance(twin, np.ndarray) \
                and _same_bits(twin, value):
            value = twin
        got.append(value)


@dataclass(frozen=True)
class ShardJob:
    """One shard of a verification: the models and dataset by path, the resolved pairs, and the
    global indices of the samples it folds."""

    reference: str
    candidate: str
    inputs: str
    pairs: tuple[tuple[str, str], ...]
    indices: tuple[int, ...]
    prime: bool
    rtol: float | None = None
    atol: float | None = None
    exact: bool = False
    threads: int = 0


@dataclass
class ShardResult:
    """A shard's accumulators (in pair order), If conditions seen, whether every sample ran, and
    input arrays converted to the model's dtype."""

    accumulators: list[PairAccumulator]
    seen: dict[str, set[bool]]
    ran: bool
    converted: dict[str, str] = field(default_factory=dict)


ShardMap = Callable[[Callable[[ShardJob], ShardResult], Sequence[ShardJob]], Sequence[ShardResult]]
"""Runs ``run_shard`` over jobs (in worker processes) and returns the results in job order."""


def shard_jobs(reference: str, candidate: str, inputs: str,
               pair_list: Sequence[tuple[str, str]], samples: int, shards: int, *,
               rtol: float | None, atol: float | None, exact: bool,
               threads: int = 0) -> list[ShardJob]:
    """``shards`` contiguous jobs over ``samples`` samples (fewer when there are fewer samples)."""
    count = max(1, min(shards, samples))
    bounds = [samples * i // count for i in range(count + 1)]
    return [ShardJob(reference, candidate, inputs, tuple(pair_list),
                     tuple(range(bounds[i], bounds[i + 1])), prime=i > 0, rtol=rtol, atol=atol,
                     exact=exact, threads=threads)
            for i in range(count)]


def run_shard(job: ShardJob) -> ShardResult:
    """Fold one shard in this process: load both models, one session each, its samples in
    order. A plain function of picklable data, so any process pool or Ray can run it."""
    from .compare import make_samples
    from .run import Workspace, to_model

    with Workspace() as ws:
        ref = Staged(to_model(job.reference), ws, "reference", threads=job.threads)
        cand = Staged(to_model(job.candidate), ws, "candidate", threads=job.threads)
        feeds = make_samples([ref, cand], inputs=job.inputs, seed=0, dims=None, samples=None,
                             stream=True, same_inputs=True).samples
        accs = make_accumulators(ref, job.pairs, rtol=job.rtol, atol=job.atol, exact=job.exact)
        seen, ran = fold_samples(ref, cand, job.pairs, accs, feeds, job.indices, prime=job.prime)
        return ShardResult(accs, seen, ran, dict(getattr(feeds, "converted", {})))


def merge_shards(accs: Sequence[PairAccumulator], results: Sequence[ShardResult],
                 ) -> tuple[dict[str, set[bool]], bool, dict[str, str]]:
    """Fold shard results (in sample order) into ``accs`` (fresh, in pair order), exactly as one
    loop over every sample would; shards after one whose candidate failed to run are dropped,
    as the loop would have stopped there. Mutates accs.

    Returns:
        (If conditions seen, whether every sample ran, converted inputs).
    """
    seen: dict[str, set[bool]] = {}
    converted: dict[str, str] = {}
    for result in results:
        for acc, part in zip(accs, result.accumulators, strict=True):
            acc.merge(part)
        for cond, values in result.seen.items():
            seen.setdefault(cond, set()).update(values)
        converted.update(result.converted)
        if not result.ran:
            return seen, False, converted
    return seen, True, converted


def local_map(fn: Callable[[ShardJob], ShardResult], jobs: Sequence[ShardJob]) -> list[ShardResult]:
    """A :data:`ShardMap` running every shard here, one after another (tests, no cluster)."""
    return [fn(job) for job in jobs]


def path_of(model: Any, staged: Staged) -> str:
    """The path a worker loads: the model's own file when given as a path, else the staged
    copy (visible to workers on this machine only)."""
    return os.fspath(model) if isinstance(model, (str, os.PathLike)) else str(staged.path)
