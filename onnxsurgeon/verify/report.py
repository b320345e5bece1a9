"""The report types of a verification and their JSON form.

* :class:`PairReport` -- one compared pair: statistics, whether it was informative (could show a
  difference at all) and its verdict;
* :class:`Divergence` -- where two models part;
* :class:`TensorError` / :class:`DeepResult` -- the layer-wise comparison (``--deep`` and the
  automatic deepening of pairs that are not informative);
* :class:`VerifyReport` -- the whole outcome with its verdict: ``"pass"``, ``"fail"`` or
  ``"inconclusive"`` (nothing compared could show a difference). ``ok`` is True only for pass.

Comparing arrays lives in :mod:`.accumulate`, rendering text in :mod:`.render`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

PASS, FAIL, INCONCLUSIVE = "pass", "fail", "inconclusive"
VERDICTS = (PASS, FAIL, INCONCLUSIVE)

INCONCLUSIVE_ADVICE = ("give real inputs (--inputs FILE.npz), another --range LO,HI, or --deep to "
                       "compare every shared tensor")


def _finite_or_none(x: float | None) -> float | None:
    if x is None or not math.isfinite(x):
        return None
    return float(x)


@dataclass(frozen=True)
class PairReport:
    """How one candidate tensor compares with its reference over every sample.

    Non-finite statistics are ``None`` in JSON. ``reason`` says why a pair failed beyond value
    differences (shape, dtype, NaN/Inf positions, missing tensor, run failure).

    Attributes:
        verdict: "pass" (informative and agrees), "fail" (differs), or "inconclusive" (agrees
            but could not have shown a difference, and nothing deeper settled it).
        ok: ``verdict == "pass"``.
        agree: the values agree within tolerance (whatever their informativeness).
        informative: the pair could show a difference; ``why`` says why not (constant across
            samples, varying by less than its tolerance can resolve, saturated, non-finite
            everywhere).
        evidence: what settled a pair that was not informative (a deeper tensor that differs,
            or an identical graph from informative tensors that agree).
        label: how the reference value was computed, when it is not simply the reference
            tensor (e.g. "linear recomputed with relu_1 := conv2d_1").
    """

    reference: str
    candidate: str
    ok: bool
    max_abs_diff: float | None = None
    max_rel_diff: float | None = None
    mismatches: int = 0
    elements: int = 0
    worst_index: tuple[int, ...] | None = None
    worst_sample: int | None = None
    cosine: float | None = None
    dtype: str = ""
    shape: tuple[int, ...] | None = None
    candidate_shape: tuple[int, ...] | None = None
    rtol: float = 0.0
    atol: float = 0.0
    exact: bool = False
    check: str = ""
    reason: str | None = None
    verdict: str = ""
    agree: bool | None = None
    informative: bool = True
    why: str | None = None
    evidence: str | None = None
    label: str = ""

    def __post_init__(self) -> None:
        if not self.verdict:
            object.__setattr__(self, "verdict", PASS if self.ok else FAIL)
        if self.agree is None:
            object.__setattr__(self, "agree", self.ok)

    @property
    def mismatch_percent(self) -> float:
        return 100.0 * self.mismatches / self.elements if self.elements else 0.0

    @property
    def reference_text(self) -> str:
        """The reference side as the table shows it."""
        return self.label or self.reference

    def to_json(self) -> dict[str, Any]:
        return {
            "reference": self.reference, "candidate": self.candidate,
            "reference_label": self.reference_text,
            "max_abs_diff": _finite_or_none(self.max_abs_diff),
            "max_rel_diff": _finite_or_none(self.max_rel_diff), "ok": self.ok,
            "verdict": self.verdict, "agree": self.agree, "informative": self.informative,
            "why": self.why, "evidence": self.evidence,
            "mismatches": self.mismatches, "elements": self.elements,
            "mismatch_percent": round(self.mismatch_percent, 6),
            "worst_index": None if self.worst_index is None else list(self.worst_index),
            "worst_sample": self.worst_sample, "cosine": _finite_or_none(self.cosine),
            "dtype": self.dtype, "shape": None if self.shape is None else list(self.shape),
            "candidate_shape": None if self.candidate_shape is None else list(self.candidate_shape),
            "rtol": self.rtol, "atol": self.atol, "exact": self.exact, "check": self.check,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class Divergence:
    """Where two models part: the first tensor that differs while its inputs agree.

    Attributes:
        tensor: the tensor name in the reference; ``candidate_tensor`` its name in the candidate.
        node / op_type: the node producing it (in the candidate).
        framework_name: its name in the source framework when the converters' name map knows it.
        module: the PyTorch module path of the node, when the exporter recorded one.
        max_abs_diff: the largest difference at that tensor.
        differing_weights: initializers read by that node that differ between the models.
        reference_inputs / candidate_inputs: the node's inputs in each model, when they differ.
        attribute_changes: "name: reference -> candidate" for attributes that differ.
        sessions: onnxruntime sessions the search used.
        cause: "wrong node" (fed the reference's inputs, the node still differs) or "inherited
            drift" (fed the reference's inputs it agrees: only its inputs drifted); None when
            not checked. ``cause_detail`` says what was measured.
    """

    tensor: str
    candidate_tensor: str
    node: str
    op_type: str
    framework_name: str | None = None
    module: str | None = None
    max_abs_diff: float | None = None
    differing_weights: tuple[str, ...] = ()
    reference_inputs: tuple[str, ...] | None = None
    candidate_inputs: tuple[str, ...] | None = None
    attribute_changes: tuple[str, ...] = ()
    sessions: int = 0
    cause: str | None = None
    cause_detail: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "tensor": self.tensor, "candidate_tensor": self.candidate_tensor, "node": self.node,
            "op_type": self.op_type, "framework_name": self.framework_name, "module": self.module,
            "max_abs_diff": _finite_or_none(self.max_abs_diff),
            "differing_weights": list(self.differing_weights),
            "reference_inputs": None if self.reference_inputs is None else list(self.reference_inputs),
            "candidate_inputs": None if self.candidate_inputs is None else list(self.candidate_inputs),
            "attribute_changes": list(self.attribute_changes), "sessions": self.sessions,
            "cause": self.cause, "cause_detail": self.cause_detail,
        }

    def to_text(self) -> str:
        where = f"tensor '{self.tensor}'"
        if self.candidate_tensor != self.tensor:
            where += f" (candidate '{self.candidate_tensor}')"
        text = f"first difference at {where}, made by node '{self.node}' ({self.op_type})"
        if self.framework_name:
            text += f", framework name '{self.framework_name}'"
        if self.module:
            text += f", module '{self.module}'"
        if self.max_abs_diff is not None:
            text += f"; max abs diff {self.max_abs_diff:.3g}"
        if self.differing_weights:
            text += f"; its weights differ: {', '.join(self.differing_weights)}"
        if self.attribute_changes:
            text += f"; attributes differ: {', '.join(self.attribute_changes)}"
        if self.reference_inputs is not None and self.candidate_inputs is not None:
            text += (f"; it reads {list(self.reference_inputs)} in the reference but "
                     f"{list(self.candidate_inputs)} in the candidate")
        if self.cause:
            text += f"; {self.cause}" + (f" ({self.cause_detail})" if self.cause_detail else "")
        return text


@dataclass(frozen=True)
class TensorError:
    """One tensor of a layer-wise comparison.

    Attributes:
        tensor / candidate: its name in the reference and in the candidate.
        node / op_type: the reference node producing it.
        position: index of that node in the reference's topological order.
        depth: longest path (in nodes) from a graph input to that node.
        max_abs_diff / max_rel_diff: over every sample (None when nothing finite was compared).
        ok: the values agree within tolerance.
        informative: the tensor could show a difference (``why`` says why not).
    """

    tensor: str
    candidate: str
    node: str
    op_type: str
    position: int
    depth: int
    max_abs_diff: float | None
    max_rel_diff: float | None
    ok: bool
    informative: bool
    why: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "tensor": self.tensor, "candidate": self.candidate, "node": self.node,
            "op_type": self.op_type, "position": self.position, "depth": self.depth,
            "max_abs_diff": _finite_or_none(self.max_abs_diff),
            "max_rel_diff": _finite_or_none(self.max_rel_diff), "ok": self.ok,
            "informative": self.informative, "why": self.why,
        }


@dataclass(frozen=True)
class DeepResult:
    """A layer-wise comparison: every compared tensor in the reference's topological order.

    Attributes:
        tensors: one :class:`TensorError` per compared tensor, topological order.
        forced: True for ``--deep`` (every shared tensor); False for the automatic deepening of
            pairs that were not informative (their ancestors only).
        skipped: shared names not compared (shapes differ at run time, not tensors).
        batches: sessions per model (tensors are exposed in bounded batches).
    """

    tensors: tuple[TensorError, ...]
    forced: bool = False
    skipped: int = 0
    batches: int = 0

    @property
    def first_difference(self) -> TensorError | None:
        return next((t for t in self.tensors if not t.ok), None)

    @property
    def informative(self) -> int:
        return sum(1 for t in self.tensors if t.informative)

    def to_json(self) -> dict[str, Any]:
        first = self.first_difference
        return {
            "forced": self.forced, "compared": len(self.tensors),
            "informative": self.informative, "skipped": self.skipped, "batches": self.batches,
            "first_difference": None if first is None else first.tensor,
            "tensors": [t.to_json() for t in self.tensors],
        }

    def summary(self) -> str:
        first = self.first_difference
        text = (f"deep comparison: {len(self.tensors)} shared tensors compared "
                f"({self.informative} informative")
        text += f", {self.skipped} skipped: shapes differ)" if self.skipped else ")"
        if first is not None:
            text += (f"; first difference at '{first.tensor}' (node '{first.node}', "
                     f"{first.op_type}, position {first.position})")
        else:
            text += "; all agree"
        return text


@dataclass(frozen=True)
class VerifyReport:
    """The outcome of a verification.

    Attributes:
        verdict: "pass", "fail" or "inconclusive"; ``ok`` is True only for "pass".
        pairs: one entry per compared pair (rewrite checks label theirs with ``check``).
        samples: input samples run.
        kind: "compare", "against", or "rewrite:<op>".
        reason: why the verification failed or was inconclusive beyond the pairs, and what to do.
        divergence: where the models part, when a pair failed and it could be located.
        notes: facts worth knowing (branches never taken, a rewrite check skipped and why).
        inputs: per input name, the data it got ("uniform[-1,1) float32 1x3x8x8", "from d.npz").
        deep: the layer-wise comparison, when one ran.
    """

    ok: bool
    pairs: tuple[PairReport, ...]
    samples: int = 0
    kind: str = "compare"
    reason: str | None = None
    divergence: Divergence | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    verdict: str = ""
    inputs: dict[str, str] = field(default_factory=dict)
    deep: DeepResult | None = None

    def __post_init__(self) -> None:
        if not self.verdict:
            object.__setattr__(self, "verdict", PASS if self.ok else FAIL)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict: ``{"verdict", "ok", "pairs": [{"reference", "candidate",
        "verdict", "informative", "why", "max_abs_diff", ...}], "inputs", "deep", ...}``."""
        return {
            "verdict": self.verdict, "ok": self.ok, "pairs": [p.to_json() for p in self.pairs],
            "samples": self.samples, "kind": self.kind, "reason": self.reason,
            "inputs": dict(self.inputs),
            "divergence": None if self.divergence is None else self.divergence.to_json(),
            "deep": None if self.deep is None else self.deep.to_json(),
            "notes": list(self.notes),
        }

    def summary(self) -> str:
        """One line: verdict, pairs, worst difference, and where the models part."""
        agree = [p for p in self.pairs if p.agree]
        diffs = [p.max_abs_diff for p in self.pairs if p.max_abs_diff is not None]
        worst = f", max abs diff {max(diffs):.3g}" if diffs else ""
        head = {PASS: "ok", FAIL: "FAILED", INCONCLUSIVE: "INCONCLUSIVE"}[self.verdict]
        blind = sum(1 for p in agree if not p.informative)
        text = (f"{head}: {len(agree)}/{len(self.pairs)} pairs agree over "
                f"{self.samples} sample(s)" + (f" ({blind} not informative)" if blind else "")
                + worst)
        if self.reason:
            text += f"; {self.reason}"
        if self.divergence is not None:
            text += f"; {self.divergence.to_text()}"
        return text

    def to_text(self, *, deep_table: bool | None = None) -> str:
        """A plain-text table plus the summary (what the CLI prints without --json); the
        per-tensor table of a deep comparison when ``deep_table`` (default: when forced)."""
        from .render import format_report

        return format_report(self, deep_table=deep_table)

    def _repr_html_(self) -> str:
        """A notebook's display: the pairs with coloured verdicts, the deep error plot (SVG)."""
        from ..notebook import report_html

        return report_html(self)

    def rich_table(self) -> Any:
        """The pairs as a ``rich.table.Table`` (None when rich is not installed)."""
        from .render import rich_table

        return rich_table(self)


def overall_verdict(pairs: list[PairReport] | tuple[PairReport, ...], samples: int,
                    deep: DeepResult | None = None) -> str:
    """The report's verdict: "fail" when any pair fails (or a deep tensor differs),
    "inconclusive" when any pair is, else "pass". Nothing compared is a failure."""
    if not pairs or samples <= 0:
        return FAIL
    if any(p.verdict == FAIL for p in pairs):
        return FAIL
    if deep is not None and deep.first_difference is not None:
        return FAIL
    if any(p.verdict == INCONCLUSIVE for p in pairs):
        return INCONCLUSIVE
    return PASS


def inconclusive_reason(pairs: list[PairReport] | tuple[PairReport, ...]) -> str:
    """One line naming why nothing settled the verification and what to do."""
    open_pairs = [p for p in pairs if p.verdict == INCONCLUSIVE]
    shown = "; ".join(f"{p.candidate}: {p.why}" for p in open_pairs[:3])
    more = f" (+{len(open_pairs) - 3} more)" if len(open_pairs) > 3 else ""
    return f"inconclusive: no compared tensor could show a difference ({shown}{more}); {INCONCLUSIVE_ADVICE}"


def make_report(pairs: list[PairReport], *, samples: int, kind: str, notes: list[str] | None = None,
                divergence: Divergence | None = None, reason: str | None = None,
                inputs: dict[str, str] | None = None, deep: DeepResult | None = None) -> VerifyReport:
    """A :class:`VerifyReport` with its verdict (see :func:`overall_verdict`)."""
    if not pairs and reason is None:
        reason = "nothing was compared (no pairs); name pairs explicitly"
    verdict = overall_verdict(pairs, samples, deep)
    if verdict == INCONCLUSIVE and reason is None:
        reason = inconclusive_reason(pairs)
    return VerifyReport(ok=verdict == PASS, pairs=tuple(pairs), samples=samples, kind=kind,
                        reason=reason, divergence=divergence, notes=tuple(notes or ()),
                        verdict=verdict, inputs=dict(inputs or {}), deep=deep)
