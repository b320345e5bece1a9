"""Comparing two models (or a framework callable and a model) on the same inputs."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..closure import closure
from ..errors import SurgeryError, UsageError
from ..index import GraphIndex
from ..metadata import get_metadata
from ..record_base import REWRITES_KEY
from ..select import Selector, name_map
from ..types import dtype_name
from .deep import (
    DEEP_BUDGET_BYTES,
    DEEP_MAX_TENSORS,
    FORCED_MAX_TENSORS,
    SATURATION_BOUNDS,
    batches,
    node_check,
    shared_tensors,
)
from .deepen import settle
from .inputs import (
    ALL_FLOATS,
    InputsLike,
    InputSpec,
    Range,
    Sample,
    describe_inputs,
    has_if,
    input_specs,
    merge_specs,
    random_samples,
    save_samples,
    stream_samples,
    user_samples,
)
from .isolate import ResourceLimitError, make_limits
from .locate import LOCATE_BUDGET_BYTES, Side, describe, first_probes, locate, tensor_bytes
from .report import DeepResult, Divergence, PairReport, VerifyReport, make_report
from .run import DEFAULT_BATCH, ModelLike, Staged, Workspace, to_model
from .shard import (
    ShardMap,
    fold_samples,
    if_conditions,
    make_accumulators,
    merge_shards,
    path_of,
    run_shard,
    shard_jobs,
)

PairsLike = Mapping[str, str] | Sequence[tuple[str, str]]


DEFAULT_SAMPLES = 2
"""Random samples drawn by default: two, so a tensor that does not vary with the input shows."""


def default_samples(*protos: Any) -> int:
    """Random samples drawn by default: :data:`DEFAULT_SAMPLES` (mirror pairs when a model holds
    an If, so sign-dependent branches both run)."""
    return DEFAULT_SAMPLES


@dataclass
class Feeds:
    """The samples of a verification, what each input got, and notes about them."""

    samples: Sequence[Sample]
    described: dict[str, str]
    notes: list[str] = field(default_factory=list)


def _check_options(specs: Sequence[InputSpec], dims: Mapping[str, int] | None,
                   ranges: Mapping[str, Range] | None) -> None:
    symbols = {d for s in specs if s.shape for d in s.shape if isinstance(d, str)}
    for name in dims or {}:
        if name not in symbols:
            raise UsageError(
                f"--dim {name}=...: no input has a dimension named '{name}' (symbolic dims: "
                f"{sorted(symbols)[:8]}); use one of those names"
            )
    names = {s.name for s in specs}
    for name in ranges or {}:
        if name != ALL_FLOATS and name not in names:
            raise UsageError(
                f"--range {name}=...: the models have no input '{name}' (inputs: "
                f"{sorted(names)[:8]}); use one of those names"
            )


def _range_inputs(staged: Sequence[Staged], specs: Sequence[InputSpec],
                  ranges: Mapping[str, Range] | None) -> Mapping[str, Range] | None:
    """``ranges`` keyed by input names: a key that is no input is resolved like every selector
    (name map, TF ':0', ...) in each model; the first that names an input wins."""
    if not ranges:
        return ranges
    names = {s.name for s in specs}
    out: dict[str, Range] = {}
    for name, value in ranges.items():
        key = name
        if name != ALL_FLOATS and name not in names:
            for s in staged:
                try:
                    tensor = Selector(s.index).resolve(name)
                except SurgeryError:
                    continue
                if tensor in names:
                    key = tensor
                    break
        out[key] = value
    return out


def _check_same_inputs(groups: Sequence[tuple[str, Sequence[InputSpec]]], user: bool) -> None:
    """Refuse models fed differently: an input name one lacks, or one name with two types."""
    if len(groups) < 2:
        return
    (la, a), (lb, b) = groups[0], groups[1]
    ta, tb = {s.name: s.elem_type for s in a}, {s.name: s.elem_type for s in b}
    for name in sorted(set(ta) & set(tb)):
        if ta[name] and tb[name] and ta[name] != tb[name]:
            raise UsageError(
                f"input '{name}' is {dtype_name(ta[name])} in the {la} but {dtype_name(tb[name])} "
                f"in the {lb}; the models cannot be fed the same data, so comparing them means "
                "nothing; compare models with the same inputs"
            )
    required_a = {s.name for s in a if not s.has_default}
    required_b = {s.name for s in b if not s.has_default}
    if (required_a - set(tb) or required_b - set(ta)) and not user:  # a default needs no data
        raise UsageError(
            f"the models take different inputs ({la}: {sorted(ta)[:6]}, {lb}: {sorted(tb)[:6]}); "
            "random data for one is no input to the other: give --inputs FILE.npz holding every "
            "input, or compare models with the same inputs"
        )


def make_samples(staged: Sequence[Staged], *, inputs: InputsLike | None, seed: int,
                 dims: Mapping[str, int] | None, samples: int | None,
                 progress: Callable[[int, int], None] | None = None,
                 stream: bool = False, ranges: Mapping[str, Range] | None = None,
                 save_inputs: str | os.PathLike | None = None,
                 same_inputs: bool = False) -> Feeds:
    """The samples fed to every model in ``staged`` (their inputs merged, first model first).

    With ``stream``, an .npz folder (or file) gives a lazy sequence that reads one sample at a
    time on demand (:class:`~.inputs.NpzSamples`); otherwise every sample is loaded now. Random
    samples: ``samples`` (default :data:`DEFAULT_SAMPLES`), floats uniform in ``ranges[name]``,
    ``ranges["*"]`` or ``[-1, 1)``. ``save_inputs`` writes the random samples to an .npz file.
    ``same_inputs`` refuses models whose inputs differ (names, or types of one name).

    Raises:
        UsageError: unusable inputs, a --dim or --range naming no input, models fed differently.
    """
    groups = [(s.label, input_specs(s.index, s.oracle)) for s in staged]
    specs = merge_specs(*(g for _, g in groups))
    if same_inputs:
        _check_same_inputs(groups, inputs is not None)
    ranges = _range_inputs(staged, specs, ranges)
    _check_options(specs, dims, ranges)
    if inputs is not None:
        if ranges:
            raise UsageError("--range shapes random inputs; it does nothing with --inputs: drop one")
        if save_inputs is not None:
            raise UsageError("--save-inputs saves random inputs; --inputs already names a file: "
                             "drop one")
        converted: dict[str, str] = {}
        feeds: Sequence[Sample]
        if stream:
            feeds = stream_samples(inputs, specs)
        else:
            feeds = user_samples(inputs, specs, progress=progress, converted=converted)
        where = str(inputs) if isinstance(inputs, (str, os.PathLike)) else "the given arrays"
        described = {s.name: f"from {where}" for s in specs}
        feeds_obj = Feeds(feeds, described)
        feeds_obj.notes.extend(_conversion_notes(converted))
        if len(feeds) == 1:
            feeds_obj.notes.append("one sample: whether tensors vary with the input is not "
                                   "measured; give several samples to tell constant outputs")
        return feeds_obj
    count = samples if samples is not None else default_samples(*(s.model.proto for s in staged))
    mirror = any(has_if(s.model.proto) for s in staged)
    default = (ranges or {}).get(ALL_FLOATS)
    named = {k: v for k, v in (ranges or {}).items() if k != ALL_FLOATS}
    drawn = random_samples(specs, seed=seed, samples=count, dims=dims, ranges=named,
                           default=default, mirror=mirror)
    described = describe_inputs(specs, dims=dims, ranges=named, default=default, mirror=mirror)
    out = Feeds(drawn, described)
    if save_inputs is not None:
        path = save_samples(save_inputs, drawn)
        out.notes.append(f"inputs saved to {path}; replay them with --inputs {path}")
    if count == 1:
        out.notes.append("one sample: whether tensors vary with the input is not measured")
    return out


def _conversion_notes(converted: Mapping[str, str]) -> list[str]:
    return [f"input '{n}' converted {c} to the model's type" for n, c in converted.items()]


def _resolve_pairs(ref: Staged, cand: Staged, pairs: PairsLike | None) -> list[tuple[str, str]]:
    if pairs is None:
        cand_outputs = set(cand.output_names)
        return [(n, n) for n in ref.output_names if n in cand_outputs]
    items = list(pairs.items()) if isinstance(pairs, Mapping) else list(pairs)
    rsel, csel = Selector(ref.index), Selector(cand.index)
    return [(rsel.resolve(r), csel.resolve(c)) for r, c in items]


def _branch_notes(conds: dict[str, str], seen: dict[str, set[bool]], samples: int) -> list[str]:
    notes = []
    for label, cond in conds.items():
        values = seen.get(cond, set())
        if len(values) == 1:
            branch = "then" if True in values else "else"
            notes.append(f"If node '{label}' took only its {branch} branch over {samples} "
                         "sample(s); add --samples or inputs that take the other branch")
    return notes


def _log_renames(ref: Staged, cand: Staged) -> dict[str, str]:
    """Reference -> candidate names through the renames the candidate's rewrite log records
    beyond the reference's own log (``rename`` of tensors; ``insert`` at a graph output that kept
    its name, whose unprocessed value moved to a new name), composed in order. Empty when the
    reference's log is not a prefix of the candidate's (unrelated models) or a record does not
    read. O(records + renamed names)."""
    if get_metadata(cand.model.proto, REWRITES_KEY) is None:
        return {}  # no log, nothing renamed (the typed records are not even imported)
    from ..record import InsertRecord, RenameRecord, as_record, rewrites

    old, new = rewrites(ref.model.proto), rewrites(cand.model.proto)
    if new[:len(old)] != old:
        return {}
    try:
        extra = [as_record(r) for r in new[len(old):]]
    except UsageError:
        return {}
    current: dict[str, str] = {}
    for rec in extra:
        step: Mapping[str, str]
        if isinstance(rec, RenameRecord) and not rec.nodes:
            step = rec.renamed
        elif isinstance(rec, InsertRecord):
            step = rec.renamed or {}
        else:
            continue
        origin = {now: first for first, now in current.items()}
        for before, after in step.items():
            current[origin.get(before, before)] = after
    return {r: c for r, c in current.items() if r != c}


def _shared_names(ref: Staged, cand: Staged) -> dict[str, str]:
    """Reference -> candidate tensor names that differ but hold the same value: renames the
    candidate's rewrite log records (:func:`_log_renames`) first, then the pairs the converters'
    name maps give (framework names both models record)."""
    out = {r: c for r, c in _log_renames(ref, cand).items()
           if ref.is_tensor(r) and cand.is_tensor(c)}
    rmap, cmap = name_map(ref.model.proto), name_map(cand.model.proto)
    for key in rmap.keys() & cmap.keys():
        r, c = rmap[key], cmap[key]
        if r != c and ref.is_tensor(r) and cand.is_tensor(c):
            out.setdefault(r, c)
    return out


def compare(reference: ModelLike, candidate: ModelLike, *, pairs: PairsLike | None = None,
            inputs: InputsLike | None = None, rtol: float | None = None,
            atol: float | None = None, seed: int = 0, dims: Mapping[str, int] | None = None,
            samples: int | None = None, exact: bool = False, locate_divergence: bool = True,
            batch: int = DEFAULT_BATCH, threads: int = 0,
            progress: Callable[[int, int], None] | None = None, isolate: bool = False,
            timeout: float | None = None, memory_limit: int | None = None,
            ranges: Mapping[str, Range] | None = None,
            save_inputs: str | os.PathLike | None = None, deep: bool = False,
            shards: ShardMap | None = None, shard_count: int = 2) -> VerifyReport:
    """Run ``reference`` and ``candidate`` on the same inputs and compare paired tensors.

    Pairs default to the graph outputs both models name alike; ``pairs`` names them explicitly
    (reference -> candidate; any tensor, resolved with :class:`~onnxsurgeon.select.Selector`).
    Inputs are ``inputs`` (an .npz file, a folder of them, feed dicts) or seeded random samples
    (``samples`` of them, default 2; floats uniform in ``[-1, 1)`` or ``ranges[name]`` /
    ``ranges["*"]``; symbolic dims from ``dims``, default 1); ``save_inputs`` writes them to an
    .npz file that ``inputs`` replays. Models fed differently (input names or types) are refused.

    Every pair is judged informative or not (could it show a difference at all?). Pairs that
    agree but are not informative are settled deeper (:func:`~.deepen.settle`): the tensors both
    models share on the way to them are compared; ``deep`` compares every shared tensor. The
    verdict is "fail" when anything differs, "inconclusive" when a pair could show nothing and
    nothing deeper settled it, else "pass". When the models differ, the first tensor where they
    part is located and its node is checked alone on the reference's inputs (a wrong node, or
    drift it inherited).

    A folder of .npz files is streamed: one sample is read, both models run on it, the per-pair
    statistics are folded in, and its arrays are dropped before the next is read
    (``progress(done, total)`` is called after each sample). With ``shards`` (a
    :data:`~.shard.ShardMap`, e.g. Ray tasks) an .npz dataset is split into ``shard_count``
    contiguous shards folded in worker processes and merged exactly (:mod:`~.shard`): the report
    equals the one-process report.

    ``isolate`` runs every onnxruntime session in a child process that may take ``timeout``
    seconds per step and ``memory_limit`` MB of address space (defaults 30 s and 4096 MB; giving
    either implies ``isolate``); see :mod:`onnxsurgeon.verify.isolate`.

    Returns:
        A :class:`VerifyReport`; ``ok`` only when the verdict is "pass".

    Raises:
        SurgeryError: unknown pair names, unusable inputs, or a reference that cannot run.
        ResourceLimitError: an isolated run exceeded its time or memory limit.
    """
    limits = make_limits(isolate, timeout, memory_limit)
    ref_model, cand_model = to_model(reference), to_model(candidate)
    with Workspace() as ws:
        ref = Staged(ref_model, ws, "reference", threads=threads, limits=limits)
        cand = Staged(cand_model, ws, "candidate", threads=threads, limits=limits)
        pair_list = _resolve_pairs(ref, cand, pairs)
        if not pair_list:
            return make_report([], samples=0, kind="compare", reason=(
                f"nothing was compared: no output names in common (reference {ref.output_names[:6]}, "
                f"candidate {cand.output_names[:6]}); pair them with --pair R=C"))
        made = make_samples([ref, cand], inputs=inputs, seed=seed, dims=dims, samples=samples,
                            stream=True, ranges=ranges, save_inputs=save_inputs,
                            same_inputs=True)
        feeds = made.samples
        notes = list(made.notes)
        conds = if_conditions(ref)
        accs = make_accumulators(ref, pair_list, rtol=rtol, atol=atol, exact=exact)
        converted: Mapping[str, str] = getattr(feeds, "converted", {})
        mapping = _shared_names(ref, cand)
        probed: dict[int, dict[str, tuple[bool, float | None]]] = {}
        if shards is None:
            probes = _probes(ref, cand, pair_list, mapping, batch) if locate_divergence else []
            also = _speculative(ref, cand, pair_list, mapping, deep)
            if deep and not also:  # not every tensor fits: the batch the deep pass ends with
                also = _last_batch(ref, cand, pair_list, mapping, dims)
            keep = _keepable(ref, feeds, pair_list, also, limits is None, every=deep)
            seen, ran = fold_samples(ref, cand, pair_list, accs, feeds, range(len(feeds)),
                                     progress=progress, probes=probes, probed=probed,
                                     rtol=rtol, atol=atol, exact=exact, also=also,
                                     keep=keep, keep_failed=deep)
        else:
            if not isinstance(inputs, (str, os.PathLike)) or limits is not None:
                raise UsageError("sharded verification reads an .npz file or folder (--inputs) "
                                 "and runs without --isolate; give --inputs DIR, drop --isolate")
            jobs = shard_jobs(path_of(reference, ref), path_of(candidate, cand), os.fspath(inputs),
                              pair_list, len(feeds), shard_count, rtol=rtol, atol=atol,
                              exact=exact, threads=threads)
            seen, ran, converted = merge_shards(accs, shards(run_shard, jobs))
            keep = []
        reports = [acc.result() for acc in accs]
        notes.extend(_conversion_notes(converted))
        notes.extend(_branch_notes(conds, seen, len(feeds)))
        deep_result = None
        if ran:
            reports, deep_result = settle(ref, cand, feeds, feeds, reports, mapping=mapping,
                                          forced=deep, rtol=rtol, atol=atol, exact=exact,
                                          dims=dims, notes=notes)
        kept = _kept_values(ref, cand, feeds, keep, deep_result)
        for staged in (ref, cand):
            staged.drop_kept()
        divergence = None
        if locate_divergence and ran:
            divergence = _locate(ref, cand, feeds, reports, deep_result, mapping, notes,
                                 rtol=rtol, atol=atol, exact=exact, batch=batch, probed=probed,
                                 kept=kept)
        del kept
        return make_report(reports, samples=len(feeds), kind="compare", notes=notes,
                           divergence=divergence, inputs=made.described, deep=deep_result)


PROBE_PAIRS = 4
"""Pairs whose first probes the comparison computes on every sample (:func:`_probes`)."""


def _probes(ref: Staged, cand: Staged, pair_list: Sequence[tuple[str, str]],
            mapping: Mapping[str, str], batch: int) -> list[tuple[str, str]]:
    """(reference, candidate) tensors the search for the first difference compares first (its
    probes, or a small window whole) for the first :data:`PROBE_PAIRS` pairs, when they fit one
    run (:data:`~.locate.LOCATE_BUDGET_BYTES`): the sessions that compare the pairs compute them
    too, so a pair that differs is searched from them without running them again."""
    own = {r for r, _ in pair_list}
    names: dict[str, None] = {}
    for r, c in pair_list[:PROBE_PAIRS]:
        try:
            found = first_probes(ref, cand, r, mapping={**mapping, r: c}, batch=batch)
        except SurgeryError:
            return []
        names.update(dict.fromkeys(n for n in found if n not in own))
    if sum(tensor_bytes(ref, n) for n in names) > LOCATE_BUDGET_BYTES:
        return []
    return [(n, mapping.get(n, n)) for n in names]


SPECULATIVE_BYTES = 16 * 2**20
"""Most estimated bytes (per model and sample) of the tensors the comparing sessions compute
besides the pairs, for the comparisons after them (:func:`_speculative`)."""
KEPT_BYTES = 64 * 2**20
"""Most estimated bytes (both models, every sample) of those tensors' values kept from the
comparing runs for the settling after them (:func:`_keepable`): settling reads them instead of
running every sample again."""


def _keepable(ref: Staged, feeds: Sequence[Sample], pair_list: Sequence[tuple[str, str]],
              also: Sequence[tuple[str, str]], local: bool, *,
              every: bool = False) -> list[tuple[str, str]]:
    """The tensors of ``also`` whose values the comparing runs keep (in-process sessions, within
    :data:`KEPT_BYTES` for every sample and both models): all of them when a pair is made by an
    op that saturates (a softmax's probabilities: the pair settling is usually for), else the
    frontier (what the pairs' nodes read; fetching every tensor of a transformer on every
    sample costs more than settling it would save). ``every``: all of them (``--deep``
    compares each)."""
    if not also or not local:
        return []
    index = ref.index
    saturating = every or any(index.graph.node[index.producer[r]].op_type in SATURATING
                              for r, _ in pair_list if r in index.producer)
    if not saturating:
        fronts = [index.producer[x] for r, _ in pair_list if r in index.producer
                  for x in index.graph.node[index.producer[r]].input if x in index.producer]
        reads = {x for i in [*fronts, *_behind(index, fronts)] for x in index.graph.node[i].output}
        also = [(r, c) for r, c in also if r in reads]
    per_sample = sum(tensor_bytes(ref, r) for r, _ in also)
    return list(also) if 2 * per_sample * len(feeds) <= KEPT_BYTES else []


def _behind(index: GraphIndex, nodes: Sequence[int]) -> list[int]:
    """The nodes computing what ``nodes`` read (one step behind them): their values are what
    the check of a differing frontier node (:func:`~.deep.node_check`) feeds it."""
    return [index.producer[x] for i in nodes for x in index.graph.node[i].input
            if x in index.producer]


SATURATING = frozenset({*SATURATION_BOUNDS, "Clip"})
"""Ops that saturate (:func:`~.deep.saturation_bounds`): their outputs are often not
informative."""


def _speculative(ref: Staged, cand: Staged, pair_list: Sequence[tuple[str, str]],
                 mapping: Mapping[str, str], deep: bool) -> list[tuple[str, str]]:
    """(reference, candidate) tensors the sessions that compare the pairs compute too, so that
    the comparisons after them reuse those sessions (a 90k-node model's session costs seconds):
    with ``deep`` every tensor both compute, else the first :data:`~.deep.DEEP_MAX_TENSORS` the
    pairs depend on (settling a pair that cannot show a difference compares its frontier, then
    its ancestors in that order), when they stay under :data:`SPECULATIVE_BYTES`; else the
    frontier and the ring behind it (:func:`_behind`) when they do, else the frontier alone
    when it does (the logits before a softmax: settling's first wave), else none."""
    full = {**mapping, **dict(pair_list)}
    rindex, cindex = ref.index, cand.index
    targets = [r for r, _ in pair_list if r in rindex.producer]
    frontier: list[int] = []  # the nodes computing what the pairs' nodes read (their frontier)
    behind: list[int] = []  # and the nodes computing what those read (a node check's inputs)
    if deep:
        nodes: Sequence[int] = range(len(rindex.graph.node))
        limit = FORCED_MAX_TENSORS
    else:
        nodes = closure(rindex, targets).nodes if targets else []
        limit = DEEP_MAX_TENSORS + 64
        for r in targets:
            reads = rindex.graph.node[rindex.producer[r]].input
            frontier.extend(rindex.producer[n] for n in reads if n in rindex.producer)
        behind = _behind(rindex, frontier)
    out: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()
    used = 0
    fronts = list(dict.fromkeys(frontier))
    rings = [*fronts, *dict.fromkeys(behind)]
    whole = 0  # tensors of the frontier (then of the ring behind it) once all of it is in out
    for at, i in enumerate([*rings, *nodes]):
        if at in (len(fronts), len(rings)) and at:
            whole = len(out)
        for name in rindex.graph.node[i].output:
            other = full.get(name, name)
            if not name or other not in cindex.producer or (name, other) in seen:
                continue
            seen.add((name, other))
            used += tensor_bytes(ref, name)
            if used > SPECULATIVE_BYTES:
                return out[:whole]
            out.append((name, other))
            if len(out) >= limit:
                return out
    return out


def _last_batch(ref: Staged, cand: Staged, pair_list: Sequence[tuple[str, str]],
                mapping: Mapping[str, str], dims: Mapping[str, int] | None,
                ) -> list[tuple[str, str]]:
    """``--deep`` when not every tensor fits :data:`SPECULATIVE_BYTES`: the (reference,
    candidate) tensors of the last batch the deep comparison will compare
    (:func:`~.deepen.settle`'s, the pairs' own tensors among them), when they stay under it: the
    sessions that compare the pairs run the whole model anyway, so they compute that batch too
    (and keep it, :func:`_keepable`); else none. O(nodes)."""
    full = {**mapping, **{r: c for r, c in pair_list if ref.is_tensor(r) and cand.is_tensor(c)}}
    groups = batches(ref, shared_tensors(ref, cand, mapping=full), budget=DEEP_BUDGET_BYTES,
                     dims=dict(dims or {}), max_tensors=FORCED_MAX_TENSORS)
    last = groups[-1] if groups else []
    if sum(tensor_bytes(ref, s.ref) for s in last) > SPECULATIVE_BYTES:
        return []
    return [(s.ref, s.cand) for s in last]


def _kept_values(ref: Staged, cand: Staged, feeds: Sequence[Sample],
                 keep: Sequence[tuple[str, str]], deep: DeepResult | None,
                 ) -> dict[str, tuple[Any, Any, str]]:
    """The first sample's values the comparing runs kept (``keep``) of the deep comparison's
    first difference and of what its node reads, as :func:`~.deep.node_check` takes them
    (reference name -> (reference value, candidate value, candidate name)): the node is then
    checked without running either model again. Empty when nothing was kept for ``feeds``."""
    first = deep.first_difference if deep is not None else None
    if first is None or ref.kept_feeds is not feeds or cand.kept_feeds is not feeds:
        return {}
    index = ref.index
    wanted = {first.tensor}
    if first.tensor in index.producer:
        wanted.update(index.graph.node[index.producer[first.tensor]].input)
    return {r: (ref.kept[r][0], cand.kept[c][0], c) for r, c in keep
            if r in wanted and ref.kept.get(r) and cand.kept.get(c)}


def _locate(ref: Staged, cand: Staged, feeds: Sequence[Sample], reports: Sequence[PairReport],
            deep: DeepResult | None, mapping: Mapping[str, str], notes: list[str], *,
            rtol: float | None, atol: float | None, exact: bool, batch: int,
            probed: Mapping[int, Mapping[str, tuple[bool, float | None]]] | None = None,
            kept: Mapping[str, tuple[Any, Any, str]] | None = None) -> Divergence | None:
    """Where the models part: bisection from the first failing pair, else the deep comparison's
    first difference; then its node alone on the reference's inputs (wrong node or drift).
    ``kept``: the first sample's values of that difference and its node's inputs
    (:func:`_kept_values`), read instead of running the models again."""
    failed = next((p for p in reports if not p.agree), None)
    divergence: Divergence | None = None
    sample: Sample | None = None
    values: dict[str, tuple[Any, Any, str]] = {}
    if failed is not None:
        sample = feeds[failed.worst_sample or 0]
        try:
            divergence = locate(Side(ref, sample), Side(cand, sample), failed.reference,
                                mapping={**mapping, failed.reference: failed.candidate},
                                rtol=rtol, atol=atol, exact=exact, batch=batch,
                                start_diff=(failed.max_abs_diff if failed.mismatches and failed.reason is None
                                            else None), values=values,
                                known=(probed or {}).get(failed.worst_sample or 0))
        except ResourceLimitError:
            raise
        except SurgeryError as exc:
            notes.append(f"could not locate the first difference: {exc}")
    if divergence is None and deep is not None and deep.first_difference is not None:
        first = deep.first_difference
        divergence = describe(ref, cand, first.tensor, {**mapping, first.tensor: first.candidate},
                              max_abs=first.max_abs_diff)
    if divergence is None:
        return None
    if sample is None:
        sample = feeds[0]
        values.update(kept or {})
    try:
        cause = node_check(ref, cand, sample, sample, divergence.tensor,
                           divergence.candidate_tensor, mapping=mapping, rtol=rtol, atol=atol,
                           exact=exact, values=values)
        values.clear()
    except ResourceLimitError:
        raise
    except SurgeryError:
        cause = None
    if cause is not None:
        divergence = replace(divergence, cause=cause[0], cause_detail=cause[1])
    return divergence


__all__ = ["PairReport", "compare", "default_samples", "make_samples"]
