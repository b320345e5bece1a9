"""Settling pairs that could not show a difference: the nearest informative frontier.

A pair that agrees but is not informative (constant, below the tolerance's resolution,
saturated, non-finite) is neither a pass nor a fail yet. :func:`settle` settles every open pair
of one report in one deep pass. From each open pair it walks back over the graph both models
compute alike (same ops, attributes, weights and wiring) and stops at the nearest shared tensors
(the logits before a saturated softmax). Those frontiers, of every open pair at once, are
compared in bounded batches (:mod:`.deep`); a frontier tensor that agrees informatively ends the
walk there, one that agrees without being informative is walked through (the next wave compares
the tensors behind it). Then per open pair:

* its frontier agrees informatively and both models compute that frontier with the same graph
  from the same inputs and weights (a structural walk, no values) -> pass: the same graph
  computes the pair from equal values;
* otherwise -- a frontier tensor differs, the graphs differ on the way, or they differ behind a
  frontier that agrees (a change there may show only deeper) -- every shared tensor the pair
  depends on is compared, as before this rule: the first that differs fails it, else the same
  graph from informative tensors passes it, else it stays inconclusive.

So the verdicts and the evidence are those of comparing every shared ancestor, but a pair whose
frontier settles it costs its frontier only. What the report already compared (its other pairs)
counts as compared: a report whose pairs are every tensor (a whole-model rename) needs no
session at all. After :data:`MAX_WAVES` waves the pairs still open compare all they depend on at
once, so settling costs at most ``MAX_WAVES + 1`` batches of sessions per pass: it grows with
the model, never with its square. ``forced`` (``--deep``) compares every shared tensor.

A candidate a type conversion made (:class:`~.deep.Converted`: ``precision``'s float16 model)
computes with the same graph only modulo rounding, so there a pair passes only through a
frontier that was compared (never by the same graph from the same inputs and weights alone).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

from ..closure import closure
from .deep import (
    FORCED_MAX_TENSORS,
    Converted,
    Shared,
    deep_compare,
    same_step,
    shared_tensors,
    structurally_covered,
)
from .inputs import Sample
from .render import fmt
from .report import FAIL, INCONCLUSIVE, PASS, DeepResult, PairReport, TensorError
from .run import COUNTS, Staged

MAX_WAVES = 1
"""Frontier waves before the pairs still open compare everything they depend on at once (a
wave costs a session per model: on a deep chain of tensors that cannot show anything, walking
back wave by wave costs more than comparing it all)."""


_Step = Callable[[str, str], "list[tuple[str, str]] | None"]
"""One step of the walk over the same graph (:func:`~.deep.same_step` with the pass's models
and mapping), answered once per pair of tensors in a pass."""


def _stepper(ref: Staged, cand: Staged, mapping: Mapping[str, str]) -> _Step:
    """:func:`~.deep.same_step` of ``ref`` and ``cand`` under ``mapping``, each answer kept: the
    walks of one pass's open pairs cross the same nodes and weights (a whole-model rename: every
    tensor is an open pair's ancestor), so each node and weight is compared once per pass."""
    answers: dict[tuple[str, str], list[tuple[str, str]] | None] = {}

    def step(a: str, b: str) -> list[tuple[str, str]] | None:
        key = (a, b)
        if key not in answers:
            answers[key] = same_step(ref, cand, a, b, mapping)
        return answers[key]

    return step


@dataclass
class _Walk:
    """Where one open pair's walk back ended: a failing tensor, a graph mismatch, tensors still
    to compare, or the informative tensors it stopped at."""

    failed: TensorError | None = None
    mismatch: bool = False
    pending: list[str] = field(default_factory=list)
    cuts: list[str] = field(default_factory=list)


_FAILED, _CUT, _LEAF, _PENDING, _EXPAND = range(5)


@dataclass
class _Reach:
    """What the walk back from one pair of tensors reaches (not the start of a walk): whether a
    compared tensor that differs or a graph mismatch, and the tensors it stops at."""

    failed: TensorError | None
    mismatch: bool
    pending: frozenset[str]
    cuts: frozenset[str]
    first: tuple[str, ...] = ()
    """The first :data:`_SHOWN` distinct cuts in the order of a depth-first walk."""


_NOTHING = _Reach(None, False, frozenset(), frozenset())
_SHOWN = 3
"""Cuts a pass's evidence names (:func:`_passed`)."""


class _Walker:
    """The walks back of one wave's open pairs (:meth:`walk`). What the walk from a pair of
    tensors reaches is the same for every open pair crossing it (the stops depend on the wave's
    compared tensors only), so it is answered once per wave (:meth:`reach`): one wave walks each
    node once, not once per open pair above it (a whole-model rename: every tensor is an open
    pair's ancestor). Where a depth-first walk stops first (a pass's evidence) composes too: the
    first cuts of a node are the first distinct ones of its inputs' in the order the walk takes
    them (the last input first), since a depth-first walk skips only what it walked already."""

    def __init__(self, known: Mapping[str, TensorError], shared: Mapping[str, Shared],
                 tried: Collection[str], agreed: Collection[str], mapping: Mapping[str, str],
                 fed: Collection[str], step: _Step) -> None:
        self.known, self.shared, self.tried, self.agreed = known, shared, tried, agreed
        self.mapping, self.fed, self.step = mapping, fed, step
        self.memo: dict[tuple[str, str], _Reach] = {}

    def _kind(self, a: str, b: str) -> tuple[int, TensorError | None]:
        """How the walk treats (a, b) when it is not the walk's start."""
        same = self.mapping.get(a, a) == b
        t = self.known.get(a)
        if t is not None and t.candidate == b:
            if not t.ok:
                return _FAILED, t
            return (_CUT, None) if t.informative else (_EXPAND, None)
        if a in self.agreed and same:
            return _CUT, None
        if b in self.fed and same:
            return _LEAF, None
        s = self.shared.get(a)
        if s is not None and s.cand == b and a not in self.tried:
            return _PENDING, None
        return _EXPAND, None

    def reach(self, start: tuple[str, str]) -> _Reach:
        """What the walk from ``start`` (not a walk's start) reaches. Iterative, post-order;
        O(nodes + edges) of the region not answered yet."""
        memo = self.memo
        below: dict[tuple[str, str], list[tuple[str, str]]] = {}
        stack: list[tuple[tuple[str, str], bool]] = [(start, False)]
        while stack:
            key, expanded = stack.pop()
            if key in memo:
                continue
            if expanded:
                memo[key] = _union([memo[k] for k in below.pop(key)])
                continue
            kind, t = self._kind(*key)
            if kind == _FAILED:
                memo[key] = _Reach(t, False, frozenset(), frozenset())
            elif kind == _CUT:
                memo[key] = _Reach(None, False, frozenset(), frozenset([key[0]]), (key[0],))
            elif kind == _LEAF:
                memo[key] = _NOTHING
            elif kind == _PENDING:
                memo[key] = _Reach(None, False, frozenset([key[0]]), frozenset())
            else:
                pairs = self.step(*key)
                if pairs is None:
                    memo[key] = _Reach(None, True, frozenset(), frozenset())
                    continue
                below[key] = pairs
                stack.append((key, True))
                stack.extend((k, False) for k in pairs if k not in memo)
        return memo[start]

    def walk(self, r: str, c: str) -> _Walk:
        """Walk back from the open pair (r, c) over the graph both compute alike, stopping at
        tensors that agree informatively (``agreed``, or compared in ``known``), at shared
        tensors not compared yet (``pending``) and at a compared tensor that differs
        (``failed``). ``cuts`` lists the first three it stopped at in the order of a
        depth-first walk, then the others."""
        if c in self.fed and self.mapping.get(r, r) == c:
            return _Walk()
        pairs = self.step(r, c)
        if pairs is None:
            return _Walk(mismatch=True)
        reached = _union([self.reach(k) for k in pairs])
        if reached.failed is not None or reached.mismatch:
            return _Walk(failed=reached.failed, mismatch=reached.mismatch)
        rest = sorted(reached.cuts.difference(reached.first))
        return _Walk(pending=sorted(reached.pending), cuts=[*reached.first, *rest])


def _union(parts: Sequence[_Reach]) -> _Reach:
    """What a walk reaching each of ``parts`` (in the order a walk pushes them: it takes the
    last first) reaches; one part: the same object."""
    if len(parts) == 1:
        return parts[0]
    if not parts:
        return _NOTHING
    failed = next((p.failed for p in parts if p.failed is not None), None)
    first: dict[str, None] = {}
    for p in reversed(parts):
        first.update(dict.fromkeys(p.first))
        if len(first) >= _SHOWN:
            break
    return _Reach(failed, any(p.mismatch for p in parts),
                  frozenset().union(*(p.pending for p in parts)),
                  frozenset().union(*(p.cuts for p in parts)), tuple(first)[:_SHOWN])


def _identical_below(ref: Staged, cand: Staged, starts: Sequence[tuple[str, str]], *,
                     mapping: Mapping[str, str], fed: Collection[str],
                     memo: dict[tuple[str, str], bool], step: _Step | None = None) -> bool:
    """Whether both models compute every pair of ``starts`` with the same graph all the way to
    graph inputs fed alike and equal weights (then their values are equal whatever was
    compared). ``memo`` keeps each answer for the other pairs of the pass, so one pass walks
    each region once. O(nodes + weight bytes) of the region not in ``memo``; iterative."""
    steps: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for start in starts:
        stack: list[tuple[tuple[str, str], bool]] = [(start, False)]
        while stack:
            key, expanded = stack.pop()
            if key in memo:
                continue
            a, b = key
            if expanded:
                memo[key] = all(memo.get(k, False) for k in steps.pop(key))
                continue
            if b in fed and mapping.get(a, a) == b:
                memo[key] = True
                continue
            pairs = step(a, b) if step is not None else same_step(ref, cand, a, b, mapping)
            if pairs is None:
                memo[key] = False
                continue
            steps[key] = pairs
            stack.append((key, True))
            stack.extend((k, False) for k in pairs if k not in memo)
        if not memo.get(start, False):
            return False
    return True


def _known_from_pairs(pairs: Sequence[PairReport], shared: Mapping[str, Shared],
                      ) -> dict[str, TensorError]:
    """The report's own pairs as compared tensors (their values are compared already)."""
    out: dict[str, TensorError] = {}
    for p in pairs:
        s = shared.get(p.reference)
        if s is None or s.cand != p.candidate or p.reference in out:
            continue
        out[p.reference] = TensorError(
            tensor=s.ref, candidate=s.cand, node=s.node, op_type=s.op_type,
            position=s.position, depth=s.depth, max_abs_diff=p.max_abs_diff,
            max_rel_diff=p.max_rel_diff, ok=bool(p.agree), informative=p.informative,
            why=p.why)
    return out


def settle(ref: Staged, cand: Staged, ref_feeds: Sequence[Sample], cand_feeds: Sequence[Sample],
           pairs: Sequence[PairReport], *, mapping: Mapping[str, str] | None = None,
           strict: bool = False, forced: bool = False, rtol: float | None = None,
           atol: float | None = None, exact: bool = False, dims: Mapping[str, int] | None = None,
           notes: list[str] | None = None, fed: Collection[str] = (),
           seen: Sequence[PairReport] = ()) -> tuple[list[PairReport], DeepResult | None]:
    """The pairs with open (inconclusive) verdicts settled where possible (see the module
    docstring), and the deep result (None when nothing needed it). ``pairs`` name reference
    tensors of ``ref`` and candidate tensors of ``cand``; ``mapping`` maps further shared names
    (reference -> candidate). One pass for all of them: at most ``MAX_WAVES + 1`` batches of
    sessions per model, each over the tensors still needed. ``seen``: shared tensors compared
    already besides the pairs (their sessions computed them), counted as compared: listed in the
    deep result when a verdict rests on them."""
    pairs = list(pairs)
    opened = [i for i, p in enumerate(pairs)
              if p.verdict == INCONCLUSIVE and ref.is_tensor(p.reference)]
    open_pairs = [pairs[i] for i in opened]
    at = {i: k for k, i in enumerate(opened)}  # position in pairs -> position in open_pairs
    if not forced and not open_pairs:
        return pairs, None
    COUNTS["deep passes"] += 1
    full = {**dict(mapping or {}), **{p.reference: p.candidate for p in pairs
                                      if ref.is_tensor(p.reference) and cand.is_tensor(p.candidate)}}
    agreed = {p.reference for p in pairs if p.verdict == PASS and full.get(p.reference) == p.candidate}
    if forced:
        return _settle_forced(ref, cand, ref_feeds, cand_feeds, pairs, set(opened), full=full,
                              agreed=agreed, strict=strict, rtol=rtol, atol=atol, exact=exact,
                              dims=dims, notes=notes, fed=fed)
    items = shared_tensors(ref, cand, mapping=full, strict=strict,
                           targets=[p.reference for p in open_pairs])
    shared = {s.ref: s for s in items}
    known = _known_from_pairs([*pairs, *seen], shared)
    extra = set(known) - {p.reference for p in pairs}  # of seen: shown when a verdict uses it
    # what the deep result lists: the open pairs and what was compared for them
    shown = {p.reference: known[p.reference] for p in open_pairs if p.reference in known}
    tried: set[str] = set(known)
    skipped = batches = 0
    verdicts: dict[int, PairReport] = {}
    deeper: set[int] = set()  # pairs judged by every shared tensor they depend on
    memo: dict[tuple[str, str], bool] = {}
    converted = isinstance(cand, Converted)  # the same graph alone proves nothing: a frontier does
    step = _stepper(ref, cand, full)
    todo = list(range(len(open_pairs)))
    wave = 0
    while todo:
        wanted: dict[str, None] = {}
        waiting: list[int] = []
        # a pair's own tensor is no ancestor of itself: the walks of a wave share one agreed
        walker = _Walker(known, shared, tried, agreed, full, fed, step)
        for k in todo:
            p = open_pairs[k]
            if k not in deeper:
                walk = walker.walk(p.reference, p.candidate)
                if walk.pending and not (walk.mismatch or walk.failed) and wave < MAX_WAVES:
                    wanted.update(dict.fromkeys(walk.pending))
                    waiting.append(k)
                    continue
                if not (walk.pending or walk.mismatch or walk.failed) and (
                        walk.cuts or not converted) and _identical_below(
                        ref, cand, [(c, full.get(c, c)) for c in walk.cuts], mapping=full,
                        fed=fed, memo=memo, step=step):
                    verdicts[k] = _passed(p, walk.cuts)
                    shown.update((c, known[c]) for c in walk.cuts if c in extra)
                    continue
                if not (walk.mismatch or walk.failed or converted) and _identical_below(
                        ref, cand, [(p.reference, p.candidate)], mapping=full, fed=fed,
                        memo=memo, step=step):
                    # no informative frontier near it, but the same graph all the way: equal
                    verdicts[k] = _passed(p, ())
                    continue
                # a frontier tensor differs (the report names the first that does), the graphs
                # differ on the way or behind a frontier that agrees (a change there may show
                # only deeper), or the waves ran out: compare every shared tensor it reads
                deeper.add(k)
                shown.update((n, known[n]) for n in extra & _ancestors(ref, p.reference))
            missing = sorted(n for n in _ancestors(ref, p.reference) & shared.keys()
                             if n not in tried)
            if missing:
                wanted.update(dict.fromkeys(missing))
                waiting.append(k)
            else:
                verdicts[k] = _judged(ref, cand, p, known, agreed, full, fed)
        if not wanted:
            break
        group = sorted((shared[n] for n in wanted), key=lambda s: (s.position, s.ref))
        until = None
        if all(k in deeper for k in waiting):
            # batches go in topological order: once each waiting pair has a differing tensor it
            # depends on, the first such tensor (its evidence) is known; stop there
            needs = [_ancestors(ref, open_pairs[k].reference) for k in waiting]

            def until(done: Sequence[TensorError], needs: list[frozenset[str]] = needs) -> bool:
                bad = {t.tensor for t in done if not t.ok} | {
                    t.tensor for t in known.values() if not t.ok}
                return all(not bad.isdisjoint(n) for n in needs)
        found = deep_compare(ref, cand, ref_feeds, cand_feeds, items=group, rtol=rtol, atol=atol,
                             exact=exact, dims=dims, notes=notes, until=until)
        skipped += found.skipped
        batches += found.batches
        tried.update(wanted)
        for t in found.tensors:
            known[t.tensor] = shown[t.tensor] = t
        todo = waiting
        wave += 1
    out = [verdicts.get(at[i], p) if i in at else p for i, p in enumerate(pairs)]
    ordered = sorted(shown.values(), key=lambda t: (t.position, t.tensor))
    return out, DeepResult(tensors=tuple(ordered), forced=False, skipped=skipped, batches=batches)


def _ancestors(ref: Staged, name: str) -> frozenset[str]:
    if name in ref.index.producer:
        return closure(ref.index, [name]).tensors
    return frozenset([name])


def _failed(p: PairReport, bad: TensorError) -> PairReport:
    reason = f" ({bad.why})" if bad.why and bad.informative else ""  # an overflow's inf
    return replace(p, verdict=FAIL, ok=False, evidence=(
        f"'{bad.tensor}' on the way to it differs by up to {fmt(bad.max_abs_diff)}{reason}"))


def _passed(p: PairReport, cuts: Sequence[str]) -> PairReport:
    if cuts:
        shown = ", ".join(f"'{c}'" for c in list(dict.fromkeys(cuts))[:_SHOWN])
        evidence = f"the same graph computes it from {shown}, which agree informatively"
    else:
        evidence = "the same graph computes it from the same inputs and weights"
    return replace(p, verdict=PASS, ok=True, evidence=evidence)


def _judged(ref: Staged, cand: Staged, p: PairReport, known: Mapping[str, TensorError],
            agreed: set[str], full: Mapping[str, str], fed: Collection[str]) -> PairReport:
    """An open pair judged by every compared tensor it depends on: one that differs fails it,
    else the same graph from informative tensors passes it, else it stays open."""
    ancestors = _ancestors(ref, p.reference)
    bad = next((t for t in sorted(known.values(), key=lambda t: (t.position, t.tensor))
                if not t.ok and t.tensor in ancestors), None)
    if bad is not None:
        return _failed(p, bad)
    good = agreed | {t.tensor for t in known.values() if t.ok and t.informative}
    cuts = structurally_covered(ref, cand, p.reference, p.candidate,
                                agreed=good - {p.reference}, mapping=full, fed=fed)
    if cuts is None or (not cuts and isinstance(cand, Converted)):
        return p
    return _passed(p, cuts)


def _settle_forced(ref: Staged, cand: Staged, ref_feeds: Sequence[Sample],
                   cand_feeds: Sequence[Sample], pairs: list[PairReport],
                   opened: set[int], *, full: Mapping[str, str], agreed: set[str],
                   strict: bool, rtol: float | None, atol: float | None, exact: bool,
                   dims: Mapping[str, int] | None, notes: list[str] | None,
                   fed: Collection[str]) -> tuple[list[PairReport], DeepResult]:
    """``--deep``: every shared tensor compared; each open pair judged by all its ancestors."""
    items = shared_tensors(ref, cand, mapping=full, strict=strict)
    deep = deep_compare(ref, cand, ref_feeds, cand_feeds, items=items, rtol=rtol, atol=atol,
                        exact=exact, dims=dims, forced=True, notes=notes,
                        max_tensors=FORCED_MAX_TENSORS)
    known = {t.tensor: t for t in deep.tensors}
    out = [_judged(ref, cand, p, known, agreed, full, fed) if i in opened else p
           for i, p in enumerate(pairs)]
    return out, deep
