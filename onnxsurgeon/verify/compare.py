"""Comparing two models (or a framework callable and a model) on the same inputs."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import SurgeryError
from ..select import Selector
from .inputs import (
    InputsLike,
    Sample,
    has_if,
    input_specs,
    merge_specs,
    random_samples,
    stream_samples,
    user_samples,
)
from .isolate import ResourceLimitError, make_limits
from .locate import Side, locate, numpy_dtype_name
from .report import PairAccumulator, PairReport, VerifyReport, make_report
from .run import DEFAULT_BATCH, ModelLike, ModelRunError, Staged, Workspace, to_model

AGAINST_TOLERANCE = (1e-3, 1e-5)
"""(rtol, atol) floor for float comparisons against the source framework."""

PairsLike = Mapping[str, str] | Sequence[tuple[str, str]]
ReferenceFn = Callable[[dict[str, np.ndarray]], Mapping[str, Any] | Sequence[Any]]
"""A callable mapping the candidate's input arrays to reference outputs (by name or in order)."""


def default_samples(*protos: Any) -> int:
    """2 when any model holds an If (so sign-dependent branches both run), else 1."""
    return 2 if any(has_if(p) for p in protos) else 1


def make_samples(staged: Sequence[Staged], *, inputs: InputsLike | None, seed: int,
                 dims: Mapping[str, int] | None, samples: int | None,
                 progress: Callable[[int, int], None] | None = None,
                 stream: bool = False) -> Sequence[Sample]:
    """The samples fed to every model in ``staged`` (their inputs merged, first model first).

    With ``stream``, an .npz folder (or file) gives a lazy sequence that reads one file per
    sample on demand (:class:`~.inputs.NpzSamples`); otherwise every sample is loaded now.
    """
    specs = merge_specs(*(input_specs(s.index, s.oracle) for s in staged))
    if inputs is not None:
        if stream:
            return stream_samples(inputs, specs)
        return user_samples(inputs, specs, progress=progress)
    count = samples if samples is not None else default_samples(*(s.model.proto for s in staged))
    return random_samples(specs, seed=seed, samples=count, dims=dims)


def _resolve_pairs(ref: Staged, cand: Staged, pairs: PairsLike | None) -> list[tuple[str, str]]:
    if pairs is None:
        cand_outputs = set(cand.output_names)
        return [(n, n) for n in ref.output_names if n in cand_outputs]
    items = list(pairs.items()) if isinstance(pairs, Mapping) else list(pairs)
    rsel, csel = Selector(ref.index), Selector(cand.index)
    return [(rsel.resolve(r), csel.resolve(c)) for r, c in items]


def _if_conditions(staged: Staged) -> dict[str, str]:
    """Main-graph If node label -> its condition tensor."""
    index = staged.index
    return {index.node_label(i): n.input[0] for i, n in enumerate(index.graph.node)
            if n.op_type == "If" and n.input and n.input[0]}


def _branch_notes(conds: dict[str, str], seen: dict[str, set[bool]], samples: int) -> list[str]:
    notes = []
    for label, cond in conds.items():
        values = seen.get(cond, set())
        if len(values) == 1:
            branch = "then" if True in values else "else"
            notes.append(f"If node '{label}' took only its {branch} branch over {samples} "
                         "sample(s); add --samples or inputs that take the other branch")
    return notes


def compare(reference: ModelLike, candidate: ModelLike, *, pairs: PairsLike | None = None,
            inputs: InputsLike | None = None, rtol: float | None = None,
            atol: float | None = None, seed: int = 0, dims: Mapping[str, int] | None = None,
            samples: int | None = None, exact: bool = False, locate_divergence: bool = True,
            batch: int = DEFAULT_BATCH, threads: int = 0,
            progress: Callable[[int, int], None] | None = None, isolate: bool = False,
            timeout: float | None = None, memory_limit: int | None = None) -> VerifyReport:
    """Run ``reference`` and ``candidate`` on the same inputs and compare paired tensors.

    Pairs default to the graph outputs both models name alike; ``pairs`` names them explicitly
    (reference -> candidate; any tensor, resolved with :class:`~onnxsurgeon.select.Selector`).
    Inputs are ``inputs`` (an .npz file, a folder of them, feed dicts) or seeded random samples
    (``samples`` of them; default 2 when a model holds an If, else 1; symbolic dims from ``dims``,
    default 1). When a pair fails, the first tensor where the models part is located.

    A folder of .npz files is streamed: one file is read per sample, both models run on it, the
    per-pair statistics are folded in, and its arrays are dropped before the next file is read
    (``progress(done, total)`` is called after each sample).

    ``isolate`` runs every onnxruntime session in a child process that may take ``timeout``
    seconds per step and ``memory_limit`` MB of address space (defaults 30 s and 4096 MB; giving
    either implies ``isolate``); see :mod:`onnxsurgeon.verify.isolate`.

    Returns:
        A :class:`VerifyReport`; ``ok`` is False when any pair differs or nothing was compared.

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
        feeds = make_samples([ref, cand], inputs=inputs, seed=seed, dims=dims, samples=samples,
                             stream=True)
        conds = _if_conditions(ref)
        ref_names = list(dict.fromkeys([r for r, _ in pair_list] + list(conds.values())))
        cand_names = list(dict.fromkeys(c for _, c in pair_list))
        accs = [PairAccumulator(r, c, rtol=rtol, atol=atol, exact=exact,
                                dtype=numpy_dtype_name(ref.elem_type(r)))
                for r, c in pair_list]
        seen: dict[str, set[bool]] = {}
        ran = True
        with ref.session(ref_names) as rrun, cand.session(cand_names) as crun:
            for k in range(len(feeds)):
                # by index: enumerate() would keep the previous sample alive in its cached tuple
                feed = feeds[k]
                rvals = rrun.run(feed)
                try:
                    cvals = crun.run(feed)
                except ModelRunError as exc:
                    for acc in accs:
                        acc.fail(f"candidate failed to run: {exc}")
                    ran = False
                    break
                for acc, (r, c) in zip(accs, pair_list, strict=True):
                    acc.add(rvals[r], cvals[c], k)
                if progress is not None:
                    progress(k + 1, len(feeds))
                for cond in conds.values():
                    value = rvals.get(cond)
                    if isinstance(value, np.ndarray) and value.size == 1:
                        seen.setdefault(cond, set()).add(bool(value.reshape(-1)[0]))
                del feed, rvals, cvals  # a streamed dataset keeps one sample alive at a time
        reports = [acc.result() for acc in accs]
        notes = _branch_notes(conds, seen, len(feeds))
        divergence = None
        failed = next((p for p in reports if not p.ok), None)
        if failed is not None and locate_divergence and ran:
            sample = feeds[failed.worst_sample or 0]
            try:
                divergence = locate(Side(ref, sample), Side(cand, sample), failed.reference,
                                    mapping={failed.reference: failed.candidate}, rtol=rtol,
                                    atol=atol, exact=exact, batch=batch)
            except ResourceLimitError:
                raise
            except SurgeryError as exc:
                notes.append(f"could not locate the first difference: {exc}")
        return make_report(reports, samples=len(feeds), kind="compare", notes=notes,
                           divergence=divergence)


def verify_against(reference_fn: ReferenceFn, candidate: ModelLike, *,
                   pairs: PairsLike | None = None, inputs: InputsLike | None = None,
                   rtol: float | None = None, atol: float | None = None, seed: int = 0,
                   dims: Mapping[str, int] | None = None, samples: int | None = None,
                   threads: int = 0, isolate: bool = False, timeout: float | None = None,
                   memory_limit: int | None = None) -> VerifyReport:
    """Compare ``candidate`` with reference outputs computed by ``reference_fn`` (the hook the
    converters plug TensorFlow / PyTorch into; the core never imports them).

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
        feeds = make_samples([cand], inputs=inputs, seed=seed, dims=dims, samples=samples,
                             stream=True)
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
                        lo_r, lo_a = _against_tolerance(dtype)
                        accs[(r, c)] = PairAccumulator(
                            r, c, dtype=dtype, rtol=lo_r if rtol is None else rtol,
                            atol=lo_a if atol is None else atol)
                    if r not in ref_vals:
                        accs[(r, c)].fail(f"the reference returned no '{r}'")
                        continue
                    accs[(r, c)].add(np.asarray(ref_vals[r]), cvals[c], k)
                del feed, cvals, got, ref_vals
        return make_report([a.result() for a in accs.values()], samples=len(feeds), kind="against")


def _reference_values(got: Mapping[str, Any] | Sequence[Any], outputs: list[str]) -> dict[str, Any]:
    if isinstance(got, Mapping):
        return {str(k): v for k, v in got.items()}
    if isinstance(got, np.ndarray):
        got = [got]
    return dict(zip(outputs, list(got), strict=False))


def _against_tolerance(dtype: str) -> tuple[float, float]:
    from .report import default_tolerance

    rtol, atol = default_tolerance(dtype)
    if rtol == 0.0 and atol == 0.0:
        return rtol, atol
    return max(rtol, AGAINST_TOLERANCE[0]), max(atol, AGAINST_TOLERANCE[1])


__all__ = ["PairReport", "compare", "default_samples", "make_samples", "verify_against"]
