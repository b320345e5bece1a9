"""Comparing arrays and reporting: tolerances by dtype, per-pair statistics, the report types.

An element fails only when its absolute difference exceeds ``atol`` *and* its relative difference
exceeds ``rtol`` (relative to the reference). NaN and Inf must sit at the same positions (Inf with
the same sign) and are otherwise ignored by the statistics. A shape or dtype mismatch fails the
pair. ``exact`` compares bit patterns. A report with no pair compared is a failure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

TOLERANCES: dict[str, tuple[float, float]] = {
    "float32": (1e-4, 1e-5),
    "float64": (1e-4, 1e-5),
    "float16": (1e-3, 2.5e-3),
    "bfloat16": (1e-2, 2e-2),
}
"""Default (rtol, atol) by dtype name; other float8-like types use bfloat16's, ints/bool exact."""


def default_tolerance(dtype_name: str) -> tuple[float, float]:
    """(rtol, atol) for a numpy/ONNX dtype name; (0, 0) for integers, bool and strings."""
    name = dtype_name.lower()
    if name in TOLERANCES:
        return TOLERANCES[name]
    if name.startswith("float8") or name.startswith("float4"):
        return TOLERANCES["bfloat16"]
    if name == "float":
        return TOLERANCES["float32"]
    return (0.0, 0.0)


def _finite_or_none(x: float | None) -> float | None:
    if x is None or not math.isfinite(x):
        return None
    return float(x)


@dataclass(frozen=True)
class PairReport:
    """How one candidate tensor compares with its reference over every sample.

    Non-finite statistics are ``None`` in JSON. ``reason`` says why a pair failed beyond value
    differences (shape, dtype, NaN/Inf positions, missing tensor, run failure).
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

    @property
    def mismatch_percent(self) -> float:
        return 100.0 * self.mismatches / self.elements if self.elements else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "reference": self.reference, "candidate": self.candidate,
            "max_abs_diff": _finite_or_none(self.max_abs_diff),
            "max_rel_diff": _finite_or_none(self.max_rel_diff), "ok": self.ok,
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

    def to_json(self) -> dict[str, Any]:
        return {
            "tensor": self.tensor, "candidate_tensor": self.candidate_tensor, "node": self.node,
            "op_type": self.op_type, "framework_name": self.framework_name, "module": self.module,
            "max_abs_diff": _finite_or_none(self.max_abs_diff),
            "differing_weights": list(self.differing_weights),
            "reference_inputs": None if self.reference_inputs is None else list(self.reference_inputs),
            "candidate_inputs": None if self.candidate_inputs is None else list(self.candidate_inputs),
            "attribute_changes": list(self.attribute_changes), "sessions": self.sessions,
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
        return text


@dataclass(frozen=True)
class VerifyReport:
    """The outcome of a verification. ``ok`` is False when any pair failed or nothing was compared.

    Attributes:
        pairs: one entry per compared pair (rewrite checks label theirs with ``check``).
        samples: input samples run.
        kind: "compare", "against", or "rewrite:<op>".
        divergence: where the models part, when a pair failed and it could be located.
        notes: facts worth knowing (branches never taken, a rewrite check skipped and why).
    """

    ok: bool
    pairs: tuple[PairReport, ...]
    samples: int = 0
    kind: str = "compare"
    reason: str | None = None
    divergence: Divergence | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict: ``{"ok", "pairs": [{"reference", "candidate", "max_abs_diff",
        "max_rel_diff", "ok", ...}], ...}``."""
        return {
            "ok": self.ok, "pairs": [p.to_json() for p in self.pairs], "samples": self.samples,
            "kind": self.kind, "reason": self.reason,
            "divergence": None if self.divergence is None else self.divergence.to_json(),
            "notes": list(self.notes),
        }

    def summary(self) -> str:
        """One line: verdict, pairs, worst difference, and where the models part."""
        failed = [p for p in self.pairs if not p.ok]
        diffs = [p.max_abs_diff for p in self.pairs if p.max_abs_diff is not None]
        worst = f", max abs diff {max(diffs):.3g}" if diffs else ""
        head = "ok" if self.ok else "FAILED"
        text = (f"{head}: {len(self.pairs) - len(failed)}/{len(self.pairs)} pairs agree over "
                f"{self.samples} sample(s){worst}")
        if self.reason:
            text += f"; {self.reason}"
        if self.divergence is not None:
            text += f"; {self.divergence.to_text()}"
        return text

    def to_text(self) -> str:
        """A plain-text table plus the summary (what the CLI prints without --json)."""
        return format_report(self)

    def rich_table(self) -> Any:
        """The pairs as a ``rich.table.Table`` (None when rich is not installed)."""
        try:
            from rich.table import Table
        except ImportError:
            return None
        table = Table(title=self.summary())
        for column in _COLUMNS:
            table.add_column(column, justify="right" if column not in ("reference", "candidate",
                                                                      "check") else "left")
        for row in _rows(self):
            table.add_row(*row)
        return table


_COLUMNS = ("check", "reference", "candidate", "ok", "max_abs", "max_rel", "mismatch", "cosine",
            "worst")


def _fmt(x: float | None) -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    return f"{x:.3g}"


def _rows(report: VerifyReport) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for p in report.pairs:
        worst = "-" if p.worst_index is None else str(list(p.worst_index))
        if p.worst_sample:
            worst += f"@{p.worst_sample}"
        ok = "ok" if p.ok else ("FAIL: " + p.reason if p.reason else "FAIL")
        rows.append((p.check or "-", p.reference, p.candidate, ok, _fmt(p.max_abs_diff),
                     _fmt(p.max_rel_diff), f"{p.mismatches} ({p.mismatch_percent:.2g}%)",
                     _fmt(p.cosine), worst))
    return rows


def format_report(report: VerifyReport) -> str:
    """The report as an aligned plain-text table followed by notes and the summary line."""
    rows = [_COLUMNS, *_rows(report)]
    show_check = any(p.check for p in report.pairs)
    if not show_check:
        rows = [r[1:] for r in rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip()
             for r in rows]
    if len(rows) == 1:
        lines = []
    lines.extend(f"note: {n}" for n in report.notes)
    lines.append(report.summary())
    return "\n".join(lines)


# -------------------------------------------------------------------------------- comparing
def _as_comparable(a: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "fc":
        return a
    if a.dtype.kind in "iub":
        return a
    if a.dtype.name in ("bfloat16",) or a.dtype.name.startswith("float8"):
        return a.astype(np.float32)
    return a


def _structure(value: Any, path: str = "") -> list[tuple[str, Any]] | None:
    """(path, leaf) pairs of a sequence/map value in a stable order; None when not one.
    Iterative-enough: ONNX sequences and maps nest at most a few levels."""
    if isinstance(value, (np.ndarray, int, float, bool, np.generic)):
        return [(path, value)]
    if isinstance(value, dict):
        out: list[tuple[str, Any]] = []
        for k in sorted(value, key=repr):
            sub = _structure(value[k], f"{path}/{k!r}")
            if sub is None:
                return None
            out += sub
        return out
    if isinstance(value, (list, tuple)):
        out = [(f"{path}#len", len(value))]
        for i, v in enumerate(value):
            sub = _structure(v, f"{path}[{i}]")
            if sub is None:
                return None
            out += sub
        return out
    return None


class PairAccumulator:
    """Folds the comparison of one pair over several samples into a :class:`PairReport`."""

    def __init__(self, reference: str, candidate: str, *, dtype: str = "", rtol: float | None = None,
                 atol: float | None = None, exact: bool = False, check: str = "") -> None:
        self.reference, self.candidate, self.check = reference, candidate, check
        self.dtype = dtype
        self.rtol, self.atol, self.exact = rtol, atol, exact
        self.max_abs = 0.0
        self.max_rel = 0.0
        self.mismatches = 0
        self.elements = 0
        self.worst_index: tuple[int, ...] | None = None
        self.worst_sample: int | None = None
        self.worst_abs = 0.0
        self._worst_failing = False
        self.cosine: float | None = None
        self.reason: str | None = None
        self.shape: tuple[int, ...] | None = None
        self.candidate_shape: tuple[int, ...] | None = None
        self.samples = 0

    def fail(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason

    def tolerances(self) -> tuple[float, float]:
        rtol, atol = default_tolerance(self.dtype)
        return (rtol if self.rtol is None else self.rtol, atol if self.atol is None else self.atol)

    def add(self, ref: Any, cand: Any, sample: int = 0) -> bool:
        """Compare one sample; returns True when it agrees."""
        self.samples += 1
        if not isinstance(ref, np.ndarray) or not isinstance(cand, np.ndarray):
            # sequence / map outputs (ZipMap in every scikit-learn classifier): compared leaf by
            # leaf once their structure (lengths, keys) agrees (gauntlet bug: always failed)
            ref_leaves, cand_leaves = _structure(ref), _structure(cand)
            if ref_leaves is None or cand_leaves is None:
                self.fail("not a tensor, sequence or map")
                return False
            if [k for k, _ in ref_leaves] != [k for k, _ in cand_leaves]:
                self.fail("sequence or map structure (lengths, keys) differs from the reference's")
                return False
            if not ref_leaves:
                return True
            ref = np.concatenate([np.asarray(v).ravel() for _, v in ref_leaves])
            cand = np.concatenate([np.asarray(v).ravel() for _, v in cand_leaves])
        if not self.dtype:
            self.dtype = ref.dtype.name
        self.shape, self.candidate_shape = tuple(ref.shape), tuple(cand.shape)
        if ref.dtype != cand.dtype:
            self.fail(f"dtype {cand.dtype} differs from the reference's {ref.dtype}")
            return False
        if ref.shape != cand.shape:
            self.fail(f"shape {list(cand.shape)} differs from the reference's {list(ref.shape)}")
            return False
        self.elements += ref.size
        if ref.size == 0:
            return True
        if self.exact:
            return self._add_exact(ref, cand, sample)
        r = _as_comparable(ref)
        c = _as_comparable(cand)
        unequal_ints = None
        if r.dtype.kind in "biu":
            unequal_ints = r != c  # exact, even beyond float64's 2**53
            r, c = r.astype(np.float64), c.astype(np.float64)
        if r.dtype.kind == "c":
            finite = np.isfinite(r) & np.isfinite(c)
            bad_special = ~finite & (r != c)
            diff = np.where(finite, np.abs(r - c), 0.0).astype(np.float64)
            mag = np.where(finite, np.abs(r), 0.0).astype(np.float64)
        else:
            finite = np.isfinite(r) & np.isfinite(c)
            with np.errstate(invalid="ignore"):
                bad_special = ~finite & ~((np.isnan(r) & np.isnan(c)) | (r == c))
            diff = np.abs(np.where(finite, r, 0).astype(np.float64)
                          - np.where(finite, c, 0).astype(np.float64))
            mag = np.abs(np.where(finite, r, 0).astype(np.float64))
        rtol, atol = self.tolerances()
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.where(diff == 0, 0.0, diff / mag)
        bad = ((diff > atol) & (rel > rtol)) | bad_special
        if unequal_ints is not None and rtol == 0.0 and atol == 0.0:
            bad |= unequal_ints
        if bad_special.any():
            self.fail("NaN/Inf positions differ")
        count = int(bad.sum())
        self.mismatches += count
        self.max_abs = max(self.max_abs, float(diff.max()))
        self.max_rel = max(self.max_rel, float(rel.max()))
        if count:
            score = np.where(bad, np.where(bad_special, np.inf, diff), -1.0)
            flat = int(np.argmax(score))
            worst = float(score.reshape(-1)[flat])
            if not self._worst_failing or worst > self.worst_abs:
                self._set_worst(worst, flat, ref.shape, sample, failing=True)
        elif not self._worst_failing:
            flat = int(np.argmax(diff))
            worst = float(diff.reshape(-1)[flat])
            if worst > self.worst_abs:
                self._set_worst(worst, flat, ref.shape, sample, failing=False)
        if r.dtype.kind != "c":
            cos = _cosine(np.where(finite, r, 0), np.where(finite, c, 0))
            if cos is not None:
                self.cosine = cos if self.cosine is None else min(self.cosine, cos)
        return count == 0

    def _set_worst(self, value: float, flat: int, shape: tuple[int, ...], sample: int, *,
                   failing: bool) -> None:
        self.worst_abs = value
        self.worst_index = tuple(int(i) for i in np.unravel_index(flat, shape))
        self.worst_sample = sample
        self._worst_failing = failing

    def _add_exact(self, ref: np.ndarray, cand: np.ndarray, sample: int) -> bool:
        a = np.ascontiguousarray(ref).reshape(-1)
        b = np.ascontiguousarray(cand).reshape(-1)
        if ref.dtype.kind == "O":
            bad = a != b
        else:
            bad = np.any(a.view(np.uint8).reshape(a.size, -1) != b.view(np.uint8).reshape(b.size, -1),
                         axis=1)
        count = int(bad.sum())
        self.mismatches += count
        if ref.dtype.kind in "fiub" or ref.dtype.name == "bfloat16":
            r = _as_comparable(ref).astype(np.float64)
            c = _as_comparable(cand).astype(np.float64)
            both = np.isfinite(r) & np.isfinite(c)
            diff = np.where(both, np.abs(r - c), np.where(bad.reshape(ref.shape), np.inf, 0.0))
            with np.errstate(divide="ignore", invalid="ignore"):
                rel = np.where(diff == 0, 0.0, diff / np.abs(r))
            self.max_abs = max(self.max_abs, float(diff.max()))
            self.max_rel = max(self.max_rel, float(np.nan_to_num(rel, nan=np.inf).max()))
            cos = _cosine(np.where(both, r, 0), np.where(both, c, 0))
            if cos is not None:
                self.cosine = cos if self.cosine is None else min(self.cosine, cos)
        if count and self.worst_index is None:
            flat = int(np.argmax(bad))
            self.worst_index = tuple(int(i) for i in np.unravel_index(flat, ref.shape))
            self.worst_sample = sample
        if count:
            self.fail("not bit-identical")
        return count == 0

    def result(self) -> PairReport:
        rtol, atol = (0.0, 0.0) if self.exact else self.tolerances()
        ok = self.reason is None and self.mismatches == 0 and self.samples > 0
        reason = self.reason
        if self.samples == 0:
            reason = reason or "never computed"
        return PairReport(
            reference=self.reference, candidate=self.candidate, ok=ok,
            max_abs_diff=self.max_abs if self.elements else None,
            max_rel_diff=self.max_rel if self.elements else None,
            mismatches=self.mismatches, elements=self.elements, worst_index=self.worst_index,
            worst_sample=self.worst_sample, cosine=self.cosine, dtype=self.dtype,
            shape=self.shape, candidate_shape=self.candidate_shape, rtol=rtol, atol=atol,
            exact=self.exact, check=self.check, reason=reason,
        )


def _cosine(a: np.ndarray, b: np.ndarray) -> float | None:
    a = a.astype(np.float64).reshape(-1)
    b = b.astype(np.float64).reshape(-1)
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0.0 and nb == 0.0:
        return 1.0
    if na == 0.0 or nb == 0.0 or not (math.isfinite(na) and math.isfinite(nb)):
        return None
    return float(min(1.0, max(-1.0, float(np.dot(a, b)) / (na * nb))))


def compare_arrays(ref: Any, cand: Any, *, rtol: float | None = None, atol: float | None = None,
                   exact: bool = False, dtype: str = "", reference: str = "reference",
                   candidate: str = "candidate") -> PairReport:
    """Compare one pair of arrays (one sample). See the module docstring for the rules."""
    acc = PairAccumulator(reference, candidate, dtype=dtype, rtol=rtol, atol=atol, exact=exact)
    acc.add(ref, cand)
    return acc.result()


def make_report(pairs: list[PairReport], *, samples: int, kind: str, notes: list[str] | None = None,
                divergence: Divergence | None = None, reason: str | None = None) -> VerifyReport:
    """A :class:`VerifyReport`; nothing compared means not ok."""
    if not pairs and reason is None:
        reason = "nothing was compared (no pairs); name pairs explicitly"
    ok = bool(pairs) and all(p.ok for p in pairs) and samples > 0
    return VerifyReport(ok=ok, pairs=tuple(pairs), samples=samples, kind=kind, reason=reason,
                        divergence=divergence, notes=tuple(notes or ()))
