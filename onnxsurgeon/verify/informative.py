"""Informativeness: whether a pair of tensors *could* have shown a difference.

Folded in sample by sample from bounded statistics of each side (never every sample,
:class:`SideStats`): a pair is not informative when both sides are

* constant across samples (compared on up to :data:`PROBE_ELEMENTS` evenly spaced elements of
  the first sample, within the pair's tolerance),
* below the tolerance's resolution: no probed element's spread across samples (its max - min)
  reaches :data:`RESOLUTION` times the tolerance at it (``atol + rtol * |value|``). A tensor that
  varies only by about the tolerance cannot show a difference at the tolerance (a softmax over
  many classes whose probabilities all sit near ``1/classes``): its changes hide under ``atol``.
* saturated: at least :data:`SATURATED_FRACTION` of the elements within ``atol`` of 0 or of the
  producing op's bounds (softmax/sigmoid 0 and 1, tanh -1 and 1, clip min and max), or
* non-finite everywhere.

With one sample, neither constancy nor resolution can be measured; neither is held against
the pair. Integers, bool and strings are compared exactly, so any variation resolves them.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence

import numpy as np

PROBE_ELEMENTS = 65536
"""Elements of the first sample kept per side to tell whether a tensor varies across samples."""
SATURATED_FRACTION = 0.99
"""A side is saturated when at least this fraction of its elements sits at 0 or a bound."""
RESOLUTION = 10.0
"""A side resolves its tolerance when some element's spread across samples reaches this many
tolerances (an order of magnitude): differences at the tolerance are then small against what the
tensor carries, not of its size."""

RESOLUTION_ADVICE = "compare the tensors before it (--deep) or give a tighter --atol"
"""What to do about a pair below its tolerance's resolution (in ``verify``'s flags; the CLI
rewords it for ``--verify``)."""


def _probe(flat: np.ndarray) -> np.ndarray:
    """At most PROBE_ELEMENTS evenly spaced elements of a flat array: a copy, or the array
    itself when it has no more (never written: a copy would hold the same bytes again)."""
    if flat.size <= PROBE_ELEMENTS:
        return flat
    step = -(-flat.size // PROBE_ELEMENTS)
    return np.array(flat[::step][:PROBE_ELEMENTS])


def _spread_ratio(lo: np.ndarray, hi: np.ndarray, first: np.ndarray, rtol: float,
                  atol: float) -> float:
    """Largest spread (hi - lo) across samples over the tolerance at that element (relative to
    the first sample, as constancy is: so the ratio only grows and merging shards is exact);
    inf when the tolerance is 0 and something varies. NaN ratios (Inf - Inf) are ignored.
    In float64, divided only where the spread is positive (elsewhere the ratio is 0)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        spread = np.subtract(hi, lo, dtype=np.float64)
        tol = np.abs(first, dtype=np.float64)
        tol *= rtol
        tol += atol
        varied = spread > 0
        count = int(np.count_nonzero(varied))
        if count == 0:
            return 0.0
        some_still = count < spread.size  # their ratio, 0, takes part in the max
        if some_still:
            spread, tol = spread[varied], tol[varied]
        np.divide(spread, tol, out=spread)
        top = float(np.fmax.reduce(spread))  # NaN only when every ratio is NaN
    if math.isnan(top):
        return 0.0
    return max(top, 0.0) if some_still else top


def _as_real(probe: np.ndarray) -> np.ndarray:
    """A float probe as real values of its precision (complex: real and imaginary parts side
    by side); min and max are exact in it."""
    if probe.dtype.kind == "c":
        return np.concatenate([probe.real, probe.imag])
    return probe


def _near_bounds(flat: np.ndarray, bounds: Sequence[float], atol: float,
                 mag: np.ndarray | None = None) -> int:
    """How many elements of a flat float array sit within ``atol`` of one of ``bounds``
    (in the array's own precision). One bound (0 alone: most ops) costs two passes. ``mag``:
    ``abs(flat)`` computed already (the distance to 0)."""
    with np.errstate(invalid="ignore"):
        if len(bounds) == 1:
            b = bounds[0]
            # x - 0.0 is x for every x (-0.0, NaN and Inf included): no subtraction then
            if b == 0.0 and mag is not None:
                return int(np.count_nonzero(mag <= atol))
            return int(np.count_nonzero(np.abs(flat if b == 0.0 else flat - b) <= atol))
        near = np.zeros(flat.shape, dtype=bool)
        for b in bounds:
            near |= (mag if b == 0.0 and mag is not None else np.abs(flat - b)) <= atol
    return int(np.count_nonzero(near))


VARIES_MARGIN = 1e-4
"""How far below the tolerance a float32 estimate of an element's distance must be for
:func:`_beyond_tolerance` to take the element as within it without the float64 test (the
estimate errs by a few 1e-7; :meth:`SideStats._reaches_resolution`'s margin too)."""


def _beyond_tolerance(now: np.ndarray, first: np.ndarray, rtol: float, atol: float) -> bool:
    """Whether some element of ``now`` is more than ``atol + rtol * |first|`` from ``first``'s
    (NaN in both and equal values are not), judged in float64. For float32 probes, the
    elements a float32 estimate puts clearly within (:data:`VARIES_MARGIN`) are not tested
    again: the float64 test runs on the others only (a side that varies by less than its
    tolerance's resolution asks this on every sample; in float64 throughout it was a dozen
    passes over the probe)."""
    x, y = now, first
    if (now.dtype == np.float32 and first.dtype == np.float32 and now.shape == first.shape
            and float(atol) >= 1e-30 and 0.0 <= float(rtol) <= 1.0):
        with np.errstate(all="ignore"):
            tol = np.abs(first)
            tol *= np.float32(rtol)
            tol += np.float32(atol)
            distance = np.subtract(now, first)
            np.abs(distance, out=distance)
            distance /= tol
            unclear = np.flatnonzero(~(distance <= np.float32(1 - VARIES_MARGIN)))  # NaN too
        if unclear.size == 0:
            return False
        x, y = now[unclear], first[unclear]
    x, y = x.astype(np.float64), y.astype(np.float64)
    with np.errstate(invalid="ignore"):
        same = (np.abs(x - y) <= atol + rtol * np.abs(y)) | (np.isnan(x) & np.isnan(y)) | (x == y)
    return not bool(same.all())


class SideStats:
    """Bounded statistics of one side of a pair over samples: does it vary, by how many
    tolerances (per-element min and max of the probe), is it saturated, is any element finite.
    Memory: the first sample's probe and its running min/max, PROBE_ELEMENTS elements each."""

    def __init__(self, bounds: Sequence[float] = (0.0,)) -> None:
        self.bounds = tuple(dict.fromkeys(float(b) for b in (0.0, *bounds)))
        self.first: np.ndarray | None = None
        self.first_shape: tuple[int, ...] | None = None
        self.varies = False
        self.samples = 0
        self.elements = 0
        self.float_elements = 0
        self.at_bounds = 0
        self.finite = 0
        self.finite_last = 0
        self.lo: np.ndarray | None = None
        self.hi: np.ndarray | None = None
        self.resolves = False
        self.rtol = 0.0
        self.atol = 0.0

    def add(self, a: np.ndarray, *, rtol: float, atol: float,
            mag: np.ndarray | None = None) -> None:
        """Fold one sample (a numeric array) in. O(size x bounds). ``mag``: ``abs(a)`` when
        its caller computed it (a float array)."""
        self.samples += 1
        self.elements += a.size
        flat = a.reshape(-1)
        self.finite_last = a.size
        if a.dtype.kind in "fc":
            self.finite_last = int(np.count_nonzero(np.isfinite(flat)))
            self.finite += self.finite_last
            if a.dtype.kind == "f":
                self.float_elements += a.size
                self.at_bounds += _near_bounds(flat, self.bounds, atol,
                                               None if mag is None else mag.reshape(-1))
        else:
            self.finite += a.size
        self.rtol, self.atol = rtol, atol
        if self.varies and (self.resolves or a.dtype.kind not in "fc"):
            return
        now = _probe(flat)
        if self.first is None:
            self.first, self.first_shape = now, tuple(a.shape)
        elif tuple(a.shape) != self.first_shape:
            self.varies = self.resolves = True
            self.lo = self.hi = None
            return
        if a.dtype.kind in "fc":
            self._fold_range(_as_real(now))
        if self.resolves and a.dtype.kind == "f":
            # some element's spread reaches ten tolerances at it: a sample differs from the
            # first by more than one there (the float64 test below would say so)
            self.varies = True
        if self.varies or now is self.first:
            return
        if self.resolves and now.dtype.kind == "f":
            # some probed element spread over RESOLUTION tolerances (at the first sample's
            # value) across the samples: one of them is then more than a tolerance from the
            # first sample's, which is what the test below would find
            self.varies = True
            return
        if now.dtype.kind in "fc":
            self.varies = _beyond_tolerance(now, self.first, rtol, atol)
        else:
            self.varies = not bool(np.array_equal(now, self.first))
        if now.dtype.kind not in "fc":
            self.resolves = self.varies  # compared exactly: any variation shows a difference

    def _fold_range(self, values: np.ndarray) -> None:
        """Fold ``values`` into the running min and max. After one sample both are ``values``
        itself (one array, never written: a deep batch keeps a probe per tensor, not three);
        the second sample makes them two arrays, updated in place from then on."""
        if self.resolves:
            return
        if self.lo is None or self.hi is None:
            self.lo = self.hi = values
            return
        if values.shape != self.lo.shape:
            self.resolves, self.lo, self.hi = True, None, None
            return
        if self.lo is self.hi:
            self.lo, self.hi = np.fmin(self.lo, values), np.fmax(self.hi, values)
        else:
            np.fmin(self.lo, values, out=self.lo)
            np.fmax(self.hi, values, out=self.hi)
        if self._reaches_resolution():
            self.resolves, self.lo, self.hi = True, None, None

    def _reaches_resolution(self) -> bool:
        """``spread_ratio() >= RESOLUTION``, in float64 only for the elements a float32 estimate
        puts near it or above (a float32 probe with an atol far from float32's subnormals: the
        estimate errs by a few 1e-7, the margin is 1e-4; elsewhere the exact ratio throughout)."""
        lo, hi, first = self.lo, self.hi, self.first
        if (lo is None or hi is None or first is None or lo.dtype != np.float32
                or first.dtype != np.float32 or first.shape != lo.shape
                or not float(self.atol) >= 1e-30 or not float(self.rtol) >= 0.0):
            return self.spread_ratio() >= RESOLUTION
        with np.errstate(all="ignore"):
            tol = np.abs(first)
            tol *= np.float32(self.rtol)
            tol += np.float32(self.atol)
            estimate = np.subtract(hi, lo)
            estimate /= tol
            if np.any(estimate >= RESOLUTION * (1 + 1e-4)):
                return True  # beyond the estimate's error: the exact ratio reaches it too
            near = np.flatnonzero(estimate >= RESOLUTION * (1 - 1e-4))
        if near.size == 0:
            return False
        return _spread_ratio(lo[near], hi[near], first[near], self.rtol, self.atol) >= RESOLUTION

    def spread_ratio(self) -> float:
        """The largest spread across samples of a probed element, in tolerances at it."""
        if self.resolves:
            return math.inf
        if self.lo is None or self.hi is None or self.first is None:
            return 0.0
        first = _as_real(self.first)
        if first.shape != self.lo.shape:
            return math.inf
        return _spread_ratio(self.lo, self.hi, first, self.rtol, self.atol)

    def copy(self) -> SideStats:
        """An equal, independent copy (the running min/max arrays are updated in place; one
        array standing for both is never written, so it is shared)."""
        twin = copy.copy(self)
        if self.lo is not None and self.lo is not self.hi:
            twin.lo = self.lo.copy()
        if self.hi is not None and self.hi is not self.lo:
            twin.hi = self.hi.copy()
        return twin

    def merge(self, later: SideStats) -> None:
        """Fold in the statistics of the samples that follow this side's (a later shard of the
        same dataset). Exact when ``later`` was primed with this side's first sample (see
        :meth:`PairAccumulator.prime`): constancy is then judged against the same sample. O(1)."""
        self.samples += later.samples
        self.elements += later.elements
        self.float_elements += later.float_elements
        self.at_bounds += later.at_bounds
        self.finite += later.finite
        if self.first is None:
            self.first, self.first_shape = later.first, later.first_shape
        self.varies = self.varies or later.varies
        if later.samples:
            self.rtol, self.atol = later.rtol, later.atol
        if self.resolves or later.resolves:
            self.resolves, self.lo, self.hi = True, None, None
        elif later.lo is not None and later.hi is not None:
            if self.lo is None or self.hi is None:
                self.lo, self.hi = later.lo.copy(), later.hi.copy()
            else:
                self._fold_range(later.lo)
                self._fold_range(later.hi)

    def saturated(self) -> float | None:
        """Fraction of float elements at 0 or a bound when it reaches SATURATED_FRACTION."""
        if not self.float_elements:
            return None
        frac = self.at_bounds / self.float_elements
        return frac if frac >= SATURATED_FRACTION else None


def uninformative_reason(ref: SideStats, cand: SideStats) -> str | None:
    """Why a pair with these side statistics cannot show a difference (None: it can)."""
    if ref.elements == 0 and cand.elements == 0:
        return "empty on both sides" if ref.samples else None
    if ref.elements and cand.elements and ref.finite == 0 and cand.finite == 0:
        return "non-finite everywhere on both sides"
    rs, cs = ref.saturated(), cand.saturated()
    if rs is not None and cs is not None:
        bounds = " or ".join(f"{b:g}" for b in ref.bounds)
        return f"saturated: {100 * min(rs, cs):.4g}% of elements at {bounds} on both sides"
    if ref.samples >= 2 and not ref.varies and not cand.varies:
        return f"constant across {ref.samples} samples on both sides"
    if ref.samples >= 2 and not ref.resolves and not cand.resolves:
        ratio = max(ref.spread_ratio(), cand.spread_ratio())
        return (f"below the tolerance's resolution: across {ref.samples} samples no element "
                f"varies by more than {ratio:.3g}x its tolerance (atol + rtol*|value|) on either "
                f"side, {RESOLUTION:g}x needed to show a difference at the tolerance; "
                f"{RESOLUTION_ADVICE}")
    return None
