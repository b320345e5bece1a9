"""Comparing arrays over samples: tolerances by dtype, per-pair statistics.

An element fails only when its absolute difference exceeds ``atol`` *and* its relative difference
exceeds ``rtol`` (relative to the reference). NaN and Inf must sit at the same positions (Inf with
the same sign) and are otherwise ignored by the statistics. A shape or dtype mismatch fails the
pair. ``exact`` compares bit patterns. Whether a pair could have shown a difference at all (its
informativeness) is told from each side's statistics (:mod:`.informative`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .informative import SideStats, uninformative_reason
from .report import PairReport

TOLERANCES: dict[str, tuple[float, float]] = {
    "float32": (1e-4, 1e-5),
    "float64": (1e-4, 1e-5),
    "float16": (1e-3, 2.5e-3),
    "bfloat16": (1e-2, 2e-2),
}
"""Default (rtol, atol) by dtype name; other float8-like types use bfloat16's, ints/bool exact."""

REWRITE = "rewrite"
"""Tolerance policy of rewrite checks: both sides run in onnxruntime (:data:`TOLERANCES`)."""
FRAMEWORK = "framework"
"""Tolerance policy of comparisons against a source framework (TensorFlow or PyTorch kernels
against onnxruntime's): the conversion check of ``onnxsurgeon.converters`` and
``verify --against-tf/--against-torch``. Summation order and fused kernels differ between
runtimes, so floats get at least :data:`POLICY_FLOORS` ``["framework"]``."""
POLICY_FLOORS: dict[str, tuple[float, float]] = {
    REWRITE: (0.0, 0.0),
    FRAMEWORK: (1e-3, 1e-5),
}
"""Tolerance policy -> (rtol, atol) floor raised over :data:`TOLERANCES` for float dtypes
(integers, bool and strings stay exact under every policy)."""
MATCH_SCALE_ATOL = 1e-4
"""Matching tensors by value (the converters' name maps) adds this fraction of the reference's
largest magnitude to the framework policy's atol: a large activation carries more rounding."""


def default_tolerance(dtype_name: str, policy: str = REWRITE) -> tuple[float, float]:
    """(rtol, atol) for a numpy/ONNX dtype name under a tolerance ``policy`` (:data:`REWRITE` or
    :data:`FRAMEWORK`); (0, 0) for integers, bool and strings."""
    name = dtype_name.lower()
    if name in TOLERANCES:
        rtol, atol = TOLERANCES[name]
    elif name.startswith("float8") or name.startswith("float4"):
        rtol, atol = TOLERANCES["bfloat16"]
    elif name == "float":
        rtol, atol = TOLERANCES["float32"]
    else:
        return (0.0, 0.0)
    floor_rtol, floor_atol = POLICY_FLOORS[policy]
    return max(rtol, floor_rtol), max(atol, floor_atol)


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
    """Folds the comparison of one pair over several samples into a :class:`PairReport`.

    ``bounds``: values the producing op saturates at besides 0 (softmax 1, tanh -1 and 1, ...).
    """

    def __init__(self, reference: str, candidate: str, *, dtype: str = "", rtol: float | None = None,
                 atol: float | None = None, exact: bool = False, check: str = "",
                 bounds: Sequence[float] = (), label: str = "", light: bool = False) -> None:
        self.reference, self.candidate, self.check = reference, candidate, check
        self.light = light
        """Only what :meth:`add` returns and the differences (``max_abs``, ``max_rel``,
        ``mismatches``) are kept: no side statistics (informativeness), cosine or worst element
        (:func:`differs`, the search for the first difference)."""
        self.label = label
        self.ref_stats, self.cand_stats = SideStats(bounds), SideStats(bounds)
        self.dtype = dtype
        self.rtol, self.atol, self.exact = rtol, atol, exact
        self.max_abs = 0.0
        self.max_rel = 0.0
        self.max_excess = -math.inf
        """Largest ``|difference| - max(atol, rtol*|reference|)`` over the compared elements: an
        element fails when it is positive (inf for a failed structure, dtype, shape or NaN/Inf
        position; -inf before any element is compared)."""
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
        self._twins = True
        """Every sample so far was bit-identical on both sides: the two sides' statistics are
        equal, so one is computed and is both (see :meth:`_fold_stats`, :meth:`_split_twins`)."""

    @property
    def failed(self) -> bool:
        """Whether the pair fails already, whatever the samples still to come."""
        return self.reason is not None or self.mismatches > 0

    def fail(self, reason: str) -> None:
        self.max_excess = math.inf
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
        same = _same_bits(ref, cand)
        # equal sides: one abs() serves the saturation count and the smallest magnitude below
        absolute = None
        if not self.light:
            absolute = np.abs(ref) if same and ref.dtype.kind == "f" else None
            self._fold_stats(ref, cand, same=same, mag=absolute)
        if ref.size == 0:
            return True
        if same and self.exact:
            return self._add_identical(ref)
        if self.exact or ref.dtype.kind in "OSU":  # strings: equal or not, no distance
            return self._add_exact(ref, cand, sample)
        r = _as_comparable(ref)
        c = _as_comparable(cand)
        rtol, atol = self.tolerances()
        atol = effective_atol(atol, r)
        if r.dtype.kind in "fiub" and (same or np.array_equal(r, c)):
            # equal values (no NaN: same bits with a NaN go on below, as array_equal says
            # False there): nothing differs; one pass instead of a dozen (deep runs)
            finite = (bool(np.isfinite(r).all()) if self.light
                      else self.ref_stats.finite_last == r.size)
            if r.dtype.kind != "f" or finite:
                if self.cosine is None:
                    self.cosine = 1.0
                smallest = float((np.abs(r) if absolute is None else absolute).min()) if rtol else 0.0
                self.max_excess = max(self.max_excess, -max(atol, rtol * smallest))
                return True

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
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.where(diff == 0, 0.0, diff / mag)
        bad = ((diff > atol) & (rel > rtol)) | bad_special
        if unequal_ints is not None and rtol == 0.0 and atol == 0.0:
            bad |= unequal_ints
        excess = np.where(bad_special, np.inf, diff - np.maximum(atol, rtol * mag))
        if unequal_ints is not None and rtol == 0.0 and atol == 0.0:
            excess = np.where(unequal_ints, np.maximum(excess, 1.0), excess)  # beyond 2**53
        self.max_excess = max(self.max_excess, float(excess.max()))
        if bad_special.any():
            self.fail("NaN/Inf positions differ")
        count = int(bad.sum())
        self.mismatches += count
        self.max_abs = max(self.max_abs, float(diff.max()))
        self.max_rel = max(self.max_rel, float(rel.max()))
        if self.light:
            return count == 0
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

    def _fold_stats(self, ref: np.ndarray, cand: np.ndarray, *, same: bool = False,
                    mag: np.ndarray | None = None) -> None:
        """Fold one sample into both sides' statistics; ``same``: the sides are bit-identical
        (while every sample was, one side's statistics are computed and copied to the other:
        they are a function of the bits, so the copy equals what the other side would fold)."""
        self._twins = self._twins and same
        if self._twins and (ref.dtype.kind in "fciub" or ref.dtype.name == "bfloat16"):
            rtol, atol = default_tolerance(self.dtype) if self.exact else self.tolerances()
            self.ref_stats.add(_as_comparable(ref), rtol=rtol, atol=atol, mag=mag)
            self.cand_stats = self.ref_stats  # one object while the sides are twins
            return
        self._split_twins()
        if ref.dtype.kind not in "fciub" and ref.dtype.name != "bfloat16":
            # strings and objects: only constancy can be told (compared as bytes)
            for stats, a in ((self.ref_stats, ref), (self.cand_stats, cand)):
                stats.add(np.frombuffer(str(a.tolist()).encode(), dtype=np.uint8), rtol=0, atol=0)
            return
        rtol, atol = default_tolerance(self.dtype) if self.exact else self.tolerances()
        self.ref_stats.add(_as_comparable(ref), rtol=rtol, atol=atol, mag=mag)
        self.cand_stats.add(_as_comparable(cand), rtol=rtol, atol=atol, mag=mag)

    def _split_twins(self) -> None:
        """Give the candidate side statistics of its own (they were the reference's object
        while every sample was bit-identical on both sides)."""
        if self.cand_stats is self.ref_stats:
            self.cand_stats = self.ref_stats.copy()

    def _set_worst(self, value: float, flat: int, shape: tuple[int, ...], sample: int, *,
                   failing: bool) -> None:
        self.worst_abs = value
        self.worst_index = tuple(int(i) for i in np.unravel_index(flat, shape))
        self.worst_sample = sample
        self._worst_failing = failing

    def _add_identical(self, ref: np.ndarray) -> bool:
        """:meth:`_add_exact` of a sample whose sides are bit-identical, in a few passes: no
        element differs (difference 0 everywhere), the cosine of the finite values with
        themselves is 1 (None where their squared norm overflows)."""
        self.max_excess = max(self.max_excess, 0.0)
        if ref.dtype.kind in "fiub" or ref.dtype.name == "bfloat16":
            self.max_abs = max(self.max_abs, 0.0)
            self.max_rel = max(self.max_rel, 0.0)
            if self.light:
                return True
            r = _as_comparable(ref).astype(np.float64).reshape(-1)
            # the statistics just counted this sample's finite elements (of these values)
            if self.ref_stats.finite_last != r.size:
                r = np.where(np.isfinite(r), r, 0.0)
            # a vector's cosine with itself is 1 exactly: no dot product (BLAS splits one
            # over threads, which made its last bits, and the report, depend on the machine);
            # undefined only where the squared norm overflows
            square = float(np.einsum("i,i->", r, r))  # one C pass, not threaded
            cos = 1.0 if math.isfinite(square) else None
            if cos is not None:
                self.cosine = cos if self.cosine is None else min(self.cosine, cos)
        return True

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
        self.max_excess = max(self.max_excess, math.inf if count else 0.0)
        if ref.dtype.kind in "fiub" or ref.dtype.name == "bfloat16":
            r = _as_comparable(ref).astype(np.float64)
            c = _as_comparable(cand).astype(np.float64)
            both = np.isfinite(r) & np.isfinite(c)
            with np.errstate(divide="ignore", invalid="ignore"):  # inf - inf where not both finite
                diff = np.where(both, np.abs(r - c), np.where(bad.reshape(ref.shape), np.inf, 0.0))
                rel = np.where(diff == 0, 0.0, diff / np.abs(r))
            self.max_abs = max(self.max_abs, float(diff.max()))
            self.max_rel = max(self.max_rel, float(np.nan_to_num(rel, nan=np.inf).max()))
            cos = None if self.light else _cosine(np.where(both, r, 0), np.where(both, c, 0))
            if cos is not None:
                self.cosine = cos if self.cosine is None else min(self.cosine, cos)
        if count and self.worst_index is None:
            flat = int(np.argmax(bad))
            self.worst_index = tuple(int(i) for i in np.unravel_index(flat, ref.shape))
            self.worst_sample = sample
        if count:
            self.fail("not bit-identical")
        return count == 0

    def prime(self, ref: Any, cand: Any) -> None:
        """Seed the constancy probes with the dataset's first sample without counting it: a
        shard after the first primes with sample 0 so that :meth:`merge` is exact."""
        probe = PairAccumulator(self.reference, self.candidate, dtype=self.dtype, rtol=self.rtol,
                                atol=self.atol, exact=self.exact, bounds=self.ref_stats.bounds)
        probe.add(ref, cand)
        self._split_twins()
        self._twins = self._twins and probe._twins  # sides primed apart are no twins
        for mine, first in ((self.ref_stats, probe.ref_stats), (self.cand_stats, probe.cand_stats)):
            mine.first, mine.first_shape = first.first, first.first_shape

    def merge(self, later: PairAccumulator) -> None:
        """Fold in ``later``: the same pair accumulated over the samples that follow this one's
        (the next shard of a dataset, primed with its first sample). The result equals one
        accumulator fed every sample in order: counts add, differences take the max, cosine the
        min, the first failure reason and the last shape seen are kept, and the worst element is
        the largest failing one (else the largest difference) with ties to the earlier sample
        (exact mode: the first failing sample). Mutates self. O(1)."""
        self.samples += later.samples
        self.elements += later.elements
        self.mismatches += later.mismatches
        self.max_abs = max(self.max_abs, later.max_abs)
        self.max_rel = max(self.max_rel, later.max_rel)
        self.max_excess = max(self.max_excess, later.max_excess)
        if later.cosine is not None:
            self.cosine = later.cosine if self.cosine is None else min(self.cosine, later.cosine)
        if self.reason is None:
            self.reason = later.reason
        self.dtype = self.dtype or later.dtype
        if later.shape is not None:
            self.shape, self.candidate_shape = later.shape, later.candidate_shape
        if later.worst_index is not None:
            if self.exact:
                take = self.worst_index is None
            elif later._worst_failing:
                take = not self._worst_failing or later.worst_abs > self.worst_abs
            else:
                take = not self._worst_failing and later.worst_abs > self.worst_abs
            if take:
                self.worst_abs, self.worst_index = later.worst_abs, later.worst_index
                self.worst_sample, self._worst_failing = later.worst_sample, later._worst_failing
        if self.cand_stats is self.ref_stats and later.cand_stats is later.ref_stats:
            self.ref_stats.merge(later.ref_stats)  # twins on both: one object, merged once
        else:
            self._split_twins()
            self.ref_stats.merge(later.ref_stats)
            self.cand_stats.merge(later.cand_stats)
        self._twins = self._twins and later._twins

    def result(self) -> PairReport:
        rtol, atol = (0.0, 0.0) if self.exact else self.tolerances()
        agree = self.reason is None and self.mismatches == 0 and self.samples > 0
        reason = self.reason
        if self.samples == 0:
            reason = reason or "never computed"
        why = uninformative_reason(self.ref_stats, self.cand_stats) if agree else None
        verdict = "fail" if not agree else ("inconclusive" if why else "pass")
        return PairReport(
            reference=self.reference, candidate=self.candidate, ok=verdict == "pass",
            verdict=verdict, agree=agree, informative=why is None, why=why, label=self.label,
            max_abs_diff=self.max_abs if self.elements else None,
            max_rel_diff=self.max_rel if self.elements else None,
            mismatches=self.mismatches, elements=self.elements, worst_index=self.worst_index,
            worst_sample=self.worst_sample, cosine=self.cosine, dtype=self.dtype,
            shape=self.shape, candidate_shape=self.candidate_shape, rtol=rtol, atol=atol,
            exact=self.exact, check=self.check, reason=reason,
        )


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two arrays of one dtype and shape hold the same bytes (objects: never said)."""
    if a is b and a.dtype.kind != "O":
        return True
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind == "O" or a.size == 0:
        return a.size == 0 and a.dtype.kind != "O"
    x = np.ascontiguousarray(a).reshape(-1)
    y = np.ascontiguousarray(b).reshape(-1)
    unit = _UNSIGNED.get(a.dtype.itemsize, np.uint8)  # one comparison per element, not per byte
    return bool(np.array_equal(x.view(unit), y.view(unit)))


_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _cosine(a: np.ndarray, b: np.ndarray) -> float | None:
    a = a.astype(np.float64).reshape(-1)
    b = b.astype(np.float64).reshape(-1)
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0.0 and nb == 0.0:
        return 1.0
    if na == 0.0 or nb == 0.0 or not (math.isfinite(na) and math.isfinite(nb)):
        return None
    return float(min(1.0, max(-1.0, float(np.dot(a, b)) / (na * nb))))


def differs(ref: Any, cand: Any, *, dtype: str = "", rtol: float | None = None,
            atol: float | None = None, exact: bool = False) -> tuple[bool, float | None]:
    """(whether one sample of a pair differs, its max abs diff or None when nothing was
    compared), as a :class:`PairAccumulator` of that sample says them, without the statistics
    neither reads (informativeness, cosine, worst element): the search for the first
    difference asks this of every tensor on the way (hundreds per sample)."""
    if (not exact and isinstance(ref, np.ndarray) and isinstance(cand, np.ndarray)
            and ref.dtype == cand.dtype and ref.dtype.name in _PLAIN_FLOATS
            and ref.shape == cand.shape and ref.size and not getattr(atol, "scale", 0.0)):
        # finite floats within a tolerance, as PairAccumulator.add compares them (its NaN/Inf
        # handling, float overflow and scaled tolerances take the path below)
        with np.errstate(all="ignore"):
            r = ref.astype(np.float64)
            diff = np.abs(r - cand)
            top = float(diff.max())
            if math.isfinite(top):
                d_rtol, d_atol = default_tolerance(dtype or ref.dtype.name)
                rt = d_rtol if rtol is None else rtol
                at = float(d_atol if atol is None else atol)
                rel = diff / np.abs(r)  # where diff is 0 it is never above atol
                return bool(np.any((diff > at) & (rel > rt))), max(0.0, top)
    acc = PairAccumulator("", "", dtype=dtype, rtol=rtol, atol=atol, exact=exact, light=True)
    same = acc.add(ref, cand)
    return not same, (acc.max_abs if acc.elements else None)


_PLAIN_FLOATS = frozenset({"float16", "float32", "float64"})


def compare_arrays(ref: Any, cand: Any, *, rtol: float | None = None, atol: float | None = None,
                   exact: bool = False, dtype: str = "", reference: str = "reference",
                   candidate: str = "candidate") -> PairReport:
    """Compare one pair of arrays (one sample; so constancy across samples is not measured).
    See the module docstring for the rules."""
    acc = PairAccumulator(reference, candidate, dtype=dtype, rtol=rtol, atol=atol, exact=exact)
    acc.add(ref, cand)
    return acc.result()




PRECISION = "precision"
"""Tolerance policy of ``precision --verify``: a float16/bfloat16 model against its float32
original, never exact; the budget is :data:`PRECISION_BUDGETS` unless the user gives one, its
atol raised per tensor by the scale term (:class:`ScaledAtol`)."""
PRECISION_BUDGETS: dict[str, tuple[float, float]] = {
    "fp16": (1e-2, 1e-3),
    "bf16": (5e-2, 1e-2),
}
"""(rtol, atol) a converted model's outputs meet against float32, by target type."""
LOW_EPS: dict[str, float] = {"fp16": 2.0 ** -10, "bf16": 2.0 ** -7}
"""Machine epsilon of the low type (float16 9.77e-4, bfloat16 7.8e-3)."""
SCALE_ULPS = 4.0
"""``c`` of the scale term ``c * eps * max|reference tensor|``. Low-float arithmetic errs with
the magnitude of what it combined, not of the result: an element of a sum, a normalisation or
an attention score near zero carries the rounding of operands as large as the tensor's largest
values. The last op's inputs and output are each rounded to the low type (half an eps each at
that scale), and its inputs carry the roundings of the ops before: 4 eps at the tensor's peak
covers about eight such half-eps roundings. It is below ``rtol`` (1e-2 is 10 float16 eps,
5e-2 is 6.4 bfloat16 eps), so an element as large as the peak is still held to ``rtol``; only
elements well below the peak get the looser absolute bound. (clip_vision's fc1 MatMul: an
element near 0 off by 0.0017 where the tensor reaches about 2, within 4 eps * 2 = 0.0078.)"""


class ScaledAtol(float):
    """An absolute tolerance that rises with the compared tensor's magnitude: an element
    passes within ``max(atol, scale * max|finite reference element|)`` (per tensor and sample)
    or within ``rtol`` of its reference. Arithmetic on it gives a plain float."""

    scale: float

    def __new__(cls, atol: float, scale: float) -> ScaledAtol:
        obj = super().__new__(cls, atol)
        obj.scale = float(scale)
        return obj

    def __reduce__(self) -> tuple[Any, ...]:
        return (ScaledAtol, (float(self), self.scale))


def effective_atol(atol: float, ref: np.ndarray) -> float:
    """``atol`` for ``ref``: a :class:`ScaledAtol` raised to its scale times the largest finite
    magnitude of ``ref`` (a plain float is returned as it is)."""
    scale = getattr(atol, "scale", 0.0)
    if not scale or ref.dtype.kind not in "fc" or ref.size == 0:
        return float(atol)
    mag = np.abs(ref[np.isfinite(ref)])
    return max(float(atol), scale * float(mag.max())) if mag.size else float(atol)


def precision_budget(to: str, rtol: float | None = None,
                     atol: float | None = None) -> tuple[float, float]:
    """(rtol, atol) of the precision policy for target ``to`` ("fp16"/"bf16"); a given
    ``rtol``/``atol`` replaces the default. The atol is a :class:`ScaledAtol` with scale
    ``min(SCALE_ULPS * LOW_EPS[to], rtol)``, given or not: the given atol is the floor under
    the scale term, and the term never allows an element more than ``rtol`` allows the
    tensor's largest one (so a tighter given ``rtol`` tightens it too)."""
    d_rtol, d_atol = PRECISION_BUDGETS[to]
    base = d_atol if atol is None else float(atol)
    r = d_rtol if rtol is None else rtol
    return r, ScaledAtol(base, min(SCALE_ULPS * LOW_EPS[to], r))
