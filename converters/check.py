"""The conversion check shared by the converters: outputs compared with the framework over
several samples by verify's engine (:class:`~onnxsurgeon.verify.PairAccumulator`, its
``framework`` tolerance policy and informativeness rules), on inputs varied until the outputs can
show a difference, and at other batch sizes when the converter asks (:func:`run_check`). A
check that could show nothing is ``inconclusive``, never a pass by a vacuous zero difference.

Nothing here imports TensorFlow or PyTorch.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from onnxsurgeon.verify.accumulate import PairAccumulator

from .common import ConversionError

# ------------------------------------------------------------------- the conversion check
INPUT_ROUNDS: tuple[tuple[str, str], ...] = (
    ("example", "the example inputs"),
    ("wide", "inputs 10x wider"),
    ("image", "inputs uniform in [0, 255)"),
)
"""Input rounds of the conversion check, tried in turn until the outputs can show a difference
(verify's informativeness rules): the example inputs (and a variation of them), the same 10x
wider, then image-like values. Integer and bool inputs are permuted, never invented, so indices
stay valid."""


class SampleSkipped(Exception):
    """Raised by a check's ``pair`` when the framework cannot run a sample of another batch size
    (a graph written for its batch): that batch size is left out of the check."""


class SampleFailed(Exception):
    """Raised by a check's ``pair`` when the ONNX model cannot run a sample the framework runs:
    that sample fails the check with this message."""


@dataclass(frozen=True)
class CheckOutcome:
    """The conversion check over several samples.

    Attributes:
        verdict: ``"pass"``, ``"fail"`` or ``"inconclusive"`` (verify's rules).
        max_abs: largest |onnx - framework| over every output and sample compared.
        excess: largest excess over the tolerance (> 0 fails).
        why: why the first differing output failed beyond its values ("" when by its values),
            why no output could show a difference (inconclusive), or why the example inputs
            could not (a pass decided by other inputs).
        output: index of the first differing output (None unless failed).
        feeds: the input arrays of the failing sample (None unless failed).
        batches: batch size -> whether every sample of that size agreed.
        inputs: which inputs decided (an :data:`INPUT_ROUNDS` description).
    """

    verdict: str
    max_abs: float
    excess: float
    why: str | None = None
    output: int | None = None
    feeds: tuple[np.ndarray, ...] | None = None
    batches: Mapping[int, bool] = field(default_factory=dict)
    inputs: str = ""


def vary_inputs(arrays: Sequence[np.ndarray], kind: str, seed: int) -> list[np.ndarray]:
    """A sample like ``arrays`` for an :data:`INPUT_ROUNDS` kind (``seed`` 0 of ``example`` is
    ``arrays`` itself): floats drawn around the example's mean and spread (``wide``: 10x the
    spread; ``image``: uniform in [0, 255)), integers and bools permuted."""
    if kind == "example" and seed == 0:
        return [np.asarray(a) for a in arrays]
    rng = np.random.default_rng(1000 + seed)
    out = []
    for a in arrays:
        a = np.asarray(a)
        if a.dtype.kind == "f" and a.size:
            if kind == "image":
                v = rng.uniform(0.0, 255.0, a.shape)
            else:
                x = a.astype(np.float64)
                spread = float(x.std()) or 1.0
                v = rng.standard_normal(a.shape) * spread * (10.0 if kind == "wide" else 1.0)
                v += float(x.mean())
            out.append(v.astype(a.dtype))
        elif a.dtype.kind in "iub" and a.size > 1:
            out.append(rng.permutation(a.reshape(-1)).reshape(a.shape))
        else:
            out.append(a.copy())
    return out


def run_check(
    pair: Callable[[list[np.ndarray]], tuple[Sequence[np.ndarray], Sequence[np.ndarray]]],
    base: Sequence[np.ndarray],
    *,
    names: Sequence[str],
    rtol: float,
    atol: float,
    other_batches: Mapping[int, Sequence[np.ndarray]] | None = None,
) -> CheckOutcome:
    """The conversion check: ``pair(arrays)`` gives (ONNX outputs, framework outputs) for one
    sample; each output is folded over the samples of a round by verify's engine
    (:class:`PairAccumulator`, its informativeness rules). A round holds ``base`` varied twice
    (:func:`vary_inputs`) plus one sample per ``other_batches`` entry (batch size -> arrays of that
    batch), so a converter that handles one batch size only is caught. The first failing sample
    decides ``fail``; a round whose every output agrees and could show a difference decides
    ``pass``; otherwise the next :data:`INPUT_ROUNDS` entry is tried, and ``inconclusive`` says
    why the first could not. Cost: up to 3 rounds of (2 + len(other_batches)) runs of both."""
    base_batch = int(np.shape(base[0])[0]) if base and np.ndim(base[0]) else 0
    sets: list[tuple[int, Sequence[np.ndarray]]] = [(base_batch, base)]
    sets += [(b, arrays) for b, arrays in sorted((other_batches or {}).items()) if b != base_batch]
    first_why: str | None = None
    max_abs = 0.0
    excess = -float("inf")
    for kind, described in INPUT_ROUNDS:
        accs: dict[int, list[PairAccumulator]] = {}   # by batch size: shapes differ
        batches: dict[int, bool] = {}
        failed: tuple[int, str, tuple[np.ndarray, ...]] | None = None
        plan = [(b, vary_inputs(arrays, kind, k)) for b, arrays in sets[:1] for k in (0, 1)]
        plan += [(b, vary_inputs(arrays, kind, 0)) for b, arrays in sets[1:]]
        for sample, (batch, arrays) in enumerate(plan):
            try:
                actual, expected = pair(arrays)
            except SampleSkipped:
                if batch == base_batch:
                    raise
                continue
            except SampleFailed as exc:
                batches[batch] = False
                failed = failed or (0, str(exc), tuple(arrays))
                continue
            if len(actual) != len(expected):
                raise ConversionError(
                    f"the ONNX model has {len(actual)} outputs but the framework gives "
                    f"{len(expected)}; return tensors only")
            if batch not in accs:
                accs[batch] = [_accumulator(names[i] if i < len(names) else f"output {i}", e,
                                            rtol, atol) for i, e in enumerate(expected)]
            ok = True
            for i, (acc, a, e) in enumerate(zip(accs[batch], actual, expected, strict=True)):
                a, e = _comparable(np.asarray(a), np.asarray(e))
                before = acc.mismatches, acc.reason
                acc.add(e, a, sample)
                max_abs = max(max_abs, acc.max_abs)
                excess = max(excess, acc.max_excess)
                if (acc.mismatches, acc.reason) != before:
                    ok = False
                    if failed is None:
                        failed = (i, acc.reason or "", tuple(arrays))
            batches[batch] = batches.get(batch, True) and ok
        if failed is not None:
            return CheckOutcome("fail", max_abs, excess, failed[1], output=failed[0],
                                feeds=failed[2], batches=batches, inputs=described)
        reports = [acc.result() for acc in accs.get(base_batch, [])]   # the varied samples
        whys = [f"{r.reference}: {r.why}" for r in reports if r.why]
        if not whys:
            return CheckOutcome("pass", max_abs, excess, first_why, batches=batches,
                                inputs=described)
        first_why = first_why or "; ".join(whys)
    return CheckOutcome("inconclusive", max_abs, excess if excess != -float("inf") else 0.0,
                        first_why, batches=batches,
                        inputs=", ".join(d for _, d in INPUT_ROUNDS))


def _accumulator(name: str, expected: Any, rtol: float, atol: float) -> PairAccumulator:
    floats = np.asarray(expected).dtype.kind in "fc"
    dtype = str(np.asarray(expected).dtype) if floats else ""
    return PairAccumulator(name, name, dtype=dtype, rtol=rtol if floats else None,
                           atol=atol if floats else None)


def _comparable(a: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if a.dtype != e.dtype and a.shape == e.shape:   # a framework's float64 reference, say
        common = np.result_type(a, e)
        return a.astype(common), e.astype(common)
    return a, e


def check_notes(outcome: CheckOutcome, path: str | os.PathLike[str], against: str) -> list[str]:
    """The report's notes about the check: which inputs decided a pass when the example inputs
    could show nothing, or what to do when no inputs could (``against``: ``--against-tf SOURCE``
    or ``--against-torch FILE.py:FACTORY``)."""
    if outcome.verdict == "inconclusive":
        return [f"check inconclusive on {outcome.inputs}: {outcome.why}; verify with real inputs: "
                f"onnxsurgeon verify - {os.fspath(path)} {against} --inputs FILE.npz"]
    if outcome.verdict == "pass" and outcome.why:
        return [f"check decided on {outcome.inputs} (on the example inputs {outcome.why})"]
    return []


def outcome_message(what: str, outcome: CheckOutcome, *, rtol: float, atol: float,
                    names: Sequence[str] = (), where: str = "") -> str:
    """One line for a failed check: the differing output, the batch sizes that agree and
    ``where`` (the localisation a converter adds)."""
    agree = sorted(b for b, ok in outcome.batches.items() if ok)
    fail = sorted(b for b, ok in outcome.batches.items() if not ok)
    batches, facts = "", []
    if fail and (agree or len(outcome.batches) > 1 or fail != [1]):
        batches = f" at batch {', '.join(map(str, fail))}"
        if agree:
            facts.append(f"batch {', '.join(map(str, agree))} agrees")
    facts.append(f"tolerance rtol={rtol:g}, atol={atol:g}")
    if outcome.inputs and outcome.inputs != INPUT_ROUNDS[0][1]:
        facts.append(f"on {outcome.inputs}")
    if outcome.why:
        facts.append(outcome.why)
    i = outcome.output or 0
    output = f" '{names[i]}'" if i < len(names) else ""
    differs = (f"differs from the framework by up to {outcome.max_abs:.3g}"
               if outcome.max_abs > 0 or not outcome.why else "disagrees with the framework")
    return (f"{what}: ONNX output{output} {differs}{batches} ({'; '.join(facts)}){where}; "
            "report the op or pass keep_mismatch=True to keep it")
