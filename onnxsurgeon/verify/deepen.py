"""Settling pairs that could not show a difference: look deeper, or prove them by structure.

A pair that agrees but is not informative (constant, below the tolerance's resolution,
saturated, non-finite) is neither a pass nor a fail yet. :func:`settle` compares the tensors
both models share on the way to it (the logits before a saturated or nearly uniform softmax,
and every shared ancestor; every shared tensor with
``forced``), in bounded batches (:mod:`.deep`), then per open pair:

* a shared ancestor differs -> fail, naming it;
* the same graph computes the pair in both models from tensors that agreed informatively (or
  from the same inputs and weights) -> pass;
* otherwise it stays inconclusive.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace

from ..closure import closure
from .deep import deep_compare, shared_tensors, structurally_covered
from .inputs import Sample
from .render import fmt
from .report import FAIL, INCONCLUSIVE, PASS, DeepResult, PairReport
from .run import Staged


def settle(ref: Staged, cand: Staged, ref_feeds: Sequence[Sample], cand_feeds: Sequence[Sample],
           pairs: Sequence[PairReport], *, mapping: Mapping[str, str] | None = None,
           strict: bool = False, forced: bool = False, rtol: float | None = None,
           atol: float | None = None, exact: bool = False, dims: Mapping[str, int] | None = None,
           notes: list[str] | None = None,
           fed: Collection[str] = ()) -> tuple[list[PairReport], DeepResult | None]:
    """The pairs with open (inconclusive) verdicts settled where possible, and the deep result
    (None when nothing needed it). ``pairs`` name reference tensors of ``ref`` and candidate
    tensors of ``cand``; ``mapping`` maps further shared names (reference -> candidate)."""
    pairs = list(pairs)
    open_pairs = [p for p in pairs if p.verdict == INCONCLUSIVE and ref.is_tensor(p.reference)]
    if not forced and not open_pairs:
        return pairs, None
    full = {**dict(mapping or {}), **{p.reference: p.candidate for p in pairs
                                      if ref.is_tensor(p.reference) and cand.is_tensor(p.candidate)}}
    targets = None if forced else [p.reference for p in open_pairs]
    items = shared_tensors(ref, cand, mapping=full, strict=strict, targets=targets)
    deep = deep_compare(ref, cand, ref_feeds, cand_feeds, items=items, rtol=rtol, atol=atol,
                        exact=exact, dims=dims, forced=forced, notes=notes)
    agreed = {t.tensor for t in deep.tensors if t.ok and t.informative}
    agreed |= {p.reference for p in pairs if p.verdict == PASS and full.get(p.reference) == p.candidate}
    failing = [t for t in deep.tensors if not t.ok]
    out: list[PairReport] = []
    for p in pairs:
        if p.verdict != INCONCLUSIVE or p not in open_pairs:
            out.append(p)
            continue
        ancestors = (closure(ref.index, [p.reference]).tensors
                     if p.reference in ref.index.producer else frozenset([p.reference]))
        bad = next((t for t in failing if t.tensor in ancestors), None)
        if bad is not None:
            out.append(replace(p, verdict=FAIL, ok=False, evidence=(
                f"'{bad.tensor}' on the way to it differs by up to {fmt(bad.max_abs_diff)}")))
            continue
        cuts = structurally_covered(ref, cand, p.reference, p.candidate,
                                    agreed=agreed - {p.reference}, mapping=full, fed=fed)
        if cuts is None:
            out.append(p)
            continue
        if cuts:
            shown = ", ".join(f"'{c}'" for c in list(dict.fromkeys(cuts))[:3])
            evidence = f"the same graph computes it from {shown}, which agree informatively"
        else:
            evidence = "the same graph computes it from the same inputs and weights"
        out.append(replace(p, verdict=PASS, ok=True, evidence=evidence))
    return out, deep
