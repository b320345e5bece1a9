"""What a rewrite check is given and uses, and the one registry of checks, keyed by record type.

A rewrite check proves the invariant one :class:`~onnxsurgeon.record.RewriteRecord` implies. It
is a function ``(ctx, record, check)``: :class:`Context` holds the original and the rewritten
model staged for onnxruntime and the samples they are fed; :class:`Check` accumulates the
compared pairs (settled deeper when they cannot show a difference, located when they differ).
The module that defines a verb's check registers it with ``@rewrite_check(<Verb>Record)``
(:mod:`~onnxsurgeon.verify.rewrite`: extract, copy, insert, reroute;
:mod:`~onnxsurgeon.verify.verbs`: rename, bypass, merge; and :data:`CHECK_MODULES`' others);
:func:`check_of` finds it. The registry imports those modules when it is first read, so it is
complete whichever part of verify was imported, and ``verify A B`` does not load them
(``tests/test_verify_rewrite.py`` holds it to one check per record type).
"""

from __future__ import annotations

import math
import os
import weakref
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import numpy as np

from ..errors import SurgeryError, UsageError
from ..index import GraphIndex
from ..io import Model
from ..record import RewriteRecord
from ..select import Selector
from .accumulate import PairAccumulator
from .compare import make_samples
from .deep import deep_compare, saturation_bounds, shared_tensors
from .deepen import settle
from .inputs import InputsLike, Range, Sample
from .isolate import Limits, ResourceLimitError
from .locate import Side, locate, numpy_dtype_name
from .report import (
    INCONCLUSIVE,
    DeepResult,
    Divergence,
    PairReport,
    TensorError,
    VerifyReport,
    make_report,
)
from .run import Staged, Workspace

__all__ = ["CHECKS", "Check", "CheckFunction", "Context", "Values", "check_of",
           "dtype_of", "node_position", "resolve", "rewrite_check", "run_all"]

Values = list[dict[str, np.ndarray]]
"""Values of named tensors, one dict per sample."""
_CPU_UPCAST = frozenset({"float16", "bfloat16"})


@dataclass
class _Entry:
    acc: PairAccumulator
    ref_name: str
    sides: Callable[[int], tuple[Side, Side]] | None
    mapping: dict[str, str]
    strict: bool
    fed: tuple[str, ...] = ()


class Check:
    """Accumulates the pairs of one rewrite verification, settles the pairs that could not show
    a difference (:func:`~.deepen.settle`) and locates the first failure."""

    def __init__(self, batch: int, samples: int, notes: Sequence[str] = (), *,
                 rtol: float | None = None, atol: float | None = None) -> None:
        self.entries: list[_Entry] = []
        self.notes: list[str] = list(notes)
        self.batch = batch
        self.samples = samples
        self.rtol, self.atol = rtol, atol  # of the comparisons that are not exact
        self.explain: Callable[[Divergence], Divergence] | None = None
        """Rewords the located divergence in the check's terms (``precision``: see
        :meth:`~.precision.LowFloat.explain`)."""

    def compare(self, check: str, ref_name: str, cand_name: str, ref_vals: Values,
                cand_vals: Values, *, dtype: str, exact: bool,
                sides: Callable[[int], tuple[Side, Side]] | None = None,
                mapping: Mapping[str, str] | None = None, strict: bool = False,
                display: str | None = None, label: str = "", fed: Sequence[str] = ()) -> None:
        """Compare ``ref_name`` (shown as ``display``; ``label`` says how the reference was
        computed) with ``cand_name`` over every sample."""
        if exact and dtype in _CPU_UPCAST:
            # onnxruntime's CPU provider computes float16/bfloat16 chains in float32 and drops the
            # Cast pairs between them, so a tensor fed across a cut is rounded where the original's
            # was not: the same graph is only equal within the dtype's tolerance (gauntlet bug 1).
            exact = False
            note = f"{dtype} tensors compared within tolerance (onnxruntime CPU computes them in float32)"
            if note not in self.notes:
                self.notes.append(note)
        bounds = saturation_bounds(sides(0)[0].staged, ref_name) if sides is not None else ()
        acc = PairAccumulator(display or ref_name, cand_name, dtype=dtype, exact=exact,
                              check=check, bounds=bounds, label=label, rtol=self.rtol,
                              atol=self.atol)
        for k, (r, c) in enumerate(zip(ref_vals, cand_vals, strict=True)):
            if ref_name not in r:
                acc.fail(f"'{ref_name}' is not computed by the reference")
                break
            if cand_name not in c:
                acc.fail(f"'{cand_name}' is not computed by the rewritten model")
                break
            acc.add(r[ref_name], c[cand_name], k)
        self.entries.append(_Entry(acc, ref_name, sides, dict(mapping or {}), strict, tuple(fed)))

    def missing(self, check: str, ref_name: str, reason: str) -> None:
        acc = PairAccumulator(ref_name, "-", check=check)
        acc.fail(reason)
        self.entries.append(_Entry(acc, ref_name, None, {}, False))

    def _settle(self, results: list[PairReport]) -> tuple[list[PairReport], DeepResult | None]:
        """``results`` (one per entry) with their open pairs settled: entries comparing the same
        two staged models on the same samples, with the same mapping and exactness, are settled
        together, in one deep pass (:func:`~.deepen.settle`), their other pairs counting as
        compared. The deep result is the first group's."""
        groups: dict[tuple[Any, ...], list[int]] = {}
        sides_of: dict[tuple[Any, ...], list[tuple[Side, Side]]] = {}
        opened: set[tuple[Any, ...]] = set()
        mappings: dict[tuple[tuple[str, str], ...], int] = {}  # a mapping's items, hashed once
        for k, (result, entry) in enumerate(zip(results, self.entries, strict=True)):
            if entry.sides is None:
                continue
            sides = [entry.sides(i) for i in range(self.samples)]
            ref, cand = sides[0][0].staged, sides[0][1].staged
            if not (ref.is_tensor(entry.ref_name) and cand.is_tensor(result.candidate)):
                continue
            key = (id(ref), id(cand), tuple(id(r.feeds) for r, _ in sides),
                   tuple(id(c.feeds) for _, c in sides),
                   mappings.setdefault(tuple(entry.mapping.items()), len(mappings)),
                   entry.strict, entry.acc.exact, entry.fed)
            groups.setdefault(key, []).append(k)
            sides_of.setdefault(key, sides)
            if result.verdict == INCONCLUSIVE:
                opened.add(key)
        out = list(results)
        deep: DeepResult | None = None
        pending = [key for key in groups if key in opened]
        for g, key in enumerate(pending):
            members = groups[key]
            sides = sides_of[key]
            entry = self.entries[members[0]]
            ref, cand = sides[0][0].staged, sides[0][1].staged
            # an idle session no later group reads is closed first: the models' sessions are
            # not all held at once (a 90k-node chain's: ~300 MB each)
            later = {id(s) for k in pending[g + 1:] for s in (sides_of[k][0][0].staged,
                                                               sides_of[k][0][1].staged)}
            for done in {id(s.staged): s.staged for k in pending[:g] for s in sides_of[k][0]
                         }.values():
                if id(done) not in later and done not in (ref, cand):
                    done.workspace.release(done)
            named = [_named(results[k], self.entries[k].ref_name) for k in members]
            full = {**entry.mapping, **{p.reference: p.candidate for p in named}}
            settled, found = settle(ref, cand, [dict(r.feeds) for r, _ in sides],
                                    [dict(c.feeds) for _, c in sides], named,
                                    mapping=entry.mapping, strict=entry.strict,
                                    exact=entry.acc.exact, notes=self.notes, fed=entry.fed,
                                    rtol=self.rtol, atol=self.atol,
                                    seen=self._seen(sides, full, entry.acc.exact))
            for k, result in zip(members, settled, strict=True):
                out[k] = _named(result, results[k].reference)
            deep = deep or found
        return out, deep

    def _seen(self, sides: list[tuple[Side, Side]], mapping: Mapping[str, str],
              exact: bool) -> list[PairReport]:
        """The tensors near the pairs both models computed already (:func:`run_all`) compared
        as the settling pass compares its tensors: what it need not run again."""
        ref, cand = sides[0][0].staged, sides[0][1].staged
        rvals = _NEAR.get(ref, {}).get(tuple(id(r.feeds) for r, _ in sides), ((), []))[1]
        cvals = _NEAR.get(cand, {}).get(tuple(id(c.feeds) for _, c in sides), ((), []))[1]
        if not rvals or not cvals:
            return []
        out = []
        for r in rvals[0]:
            c = mapping.get(r, r)
            if not all(r in rv and c in cv for rv, cv in zip(rvals, cvals, strict=True)):
                continue
            acc = PairAccumulator(r, c, rtol=self.rtol, atol=self.atol, exact=exact,
                                  dtype=numpy_dtype_name(ref.elem_type(r)),
                                  bounds=saturation_bounds(ref, r))
            usable = True
            for k, (rv, cv) in enumerate(zip(rvals, cvals, strict=True)):
                a, b = rv[r], cv[c]
                if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)
                        and a.shape == b.shape and a.dtype == b.dtype):
                    usable = False
                    break
                acc.add(a, b, k)
            if usable:
                out.append(acc.result())
        return out

    def deep_all(self, results: Sequence[PairReport],
                 only: Collection[str] | None = None) -> DeepResult | None:
        """The forced layer-wise comparison: every tensor on the way to each compared pair,
        against that pair's own reference (the original, the cut original fed the new values, the
        block alone, ...). One :func:`~.deep.deep_compare` per reference/candidate model pair over
        the ancestors of its pairs; a tensor compared twice keeps its larger error. Nodes and
        positions are those of the candidate (the rewritten model), whose order the result
        follows; ``only`` keeps the candidate tensors named there (a page's drawn tensors).
        None when no pair can be deepened."""
        groups: dict[tuple[int, int], dict[str, Any]] = {}
        for result, entry in zip(results, self.entries, strict=True):
            if entry.sides is None:
                continue
            sides = [entry.sides(k) for k in range(self.samples)]
            ref, cand = sides[0][0].staged, sides[0][1].staged
            if not (ref.is_tensor(entry.ref_name) and cand.is_tensor(result.candidate)):
                continue
            group = groups.setdefault((id(ref), id(cand)), {
                "ref": ref, "cand": cand, "sides": sides, "targets": [], "mapping": {},
                "strict": False, "exact": True})
            group["targets"].append(entry.ref_name)
            group["mapping"].update({**entry.mapping, entry.ref_name: result.candidate})
            group["strict"] = group["strict"] or entry.strict
            group["exact"] = group["exact"] and entry.acc.exact
        if not groups:
            return None
        best: dict[str, TensorError] = {}
        skipped = batches = 0
        for group in groups.values():
            ref, cand, sides = group["ref"], group["cand"], group["sides"]
            items = shared_tensors(ref, cand, mapping=group["mapping"], strict=group["strict"],
                                   targets=group["targets"])
            if only is not None:
                items = [item for item in items if item.cand in only]
            found = deep_compare(ref, cand, [dict(r.feeds) for r, _ in sides],
                                 [dict(c.feeds) for _, c in sides], items=items,
                                 exact=group["exact"], forced=True, notes=self.notes,
                                 rtol=self.rtol, atol=self.atol)
            skipped += found.skipped
            batches += found.batches
            index = cand.index
            for t in found.tensors:
                j = index.producer.get(t.candidate, -1)
                t = replace(t, node=index.node_label(j) if j >= 0 else t.node, position=j)
                old = best.get(t.candidate)
                if old is None or _worse(t, old):
                    best[t.candidate] = t
        ordered = sorted(best.values(), key=lambda t: (t.position, t.candidate))
        return DeepResult(tensors=tuple(ordered), forced=True, skipped=skipped, batches=batches)

    def report(self, kind: str, samples: int, *, locate_divergence: bool,
               inputs: Mapping[str, str] | None = None,
               deep_all: bool | Collection[str] = False) -> VerifyReport:
        results, deep = self._settle([entry.acc.result() for entry in self.entries])
        if deep_all is not False:
            only = None if deep_all is True else set(deep_all)
            deep = self.deep_all(results, only) or deep
        divergence: Divergence | None = None
        if locate_divergence:
            for result, entry in zip(results, self.entries, strict=True):
                if result.agree or entry.sides is None:
                    continue
                ref, cand = entry.sides(result.worst_sample or 0)
                full = {**entry.mapping, entry.ref_name: result.candidate}
                try:
                    divergence = locate(ref, cand, entry.ref_name, mapping=full,
                                        exact=entry.acc.exact, batch=self.batch,
                                        strict_mapping=entry.strict, rtol=self.rtol,
                                        atol=self.atol)
                except ResourceLimitError:
                    raise
                except SurgeryError as exc:
                    self.notes.append(f"could not locate the first difference: {exc}")
                if divergence is not None and self.explain is not None:
                    divergence = self.explain(divergence)
                break
        return make_report(results, samples=samples, kind=kind, notes=self.notes,
                           divergence=divergence, inputs=dict(inputs or {}), deep=deep)


def _named(result: PairReport, reference: str) -> PairReport:
    """``result`` with ``reference`` as its reference name (itself when it has it)."""
    return result if result.reference == reference else replace(result, reference=reference)


def _worse(a: TensorError, b: TensorError) -> bool:
    """True when ``a`` shows a larger error than ``b`` (a failure beats an agreement)."""
    if a.ok != b.ok:
        return not a.ok
    return (a.max_abs_diff if a.max_abs_diff is not None else math.inf) > (
        b.max_abs_diff if b.max_abs_diff is not None else math.inf)


NEAR_MAX = 16
"""Most tensors one step behind its names a check's session computes besides them (see
:func:`run_all`)."""

_NEAR: weakref.WeakKeyDictionary[Staged, dict[tuple[int, ...], tuple[tuple[Sample, ...], Values]]] = (
    weakref.WeakKeyDictionary())
"""Staged model -> (ids of the samples it was fed) -> (those samples, held so that their ids
name them only, and the values of the tensors one step behind the ones a check asked for):
what :meth:`Check._settle` compares instead of a session."""


def _near(staged: Staged, names: Sequence[str]) -> list[str]:
    """The tensors the producers of ``names`` read (computed, not weights or graph inputs),
    at most :data:`NEAR_MAX`: the nearest frontier of a pair that cannot show a difference (a
    saturated softmax's logits), usually. O(inputs of those producers)."""
    index = staged.index
    asked = set(names)
    out: dict[str, None] = {}
    for name in names:
        j = index.producer.get(name)
        if j is None:
            continue
        for x in index.graph.node[j].input:
            if x and x not in asked and x in index.producer and staged.is_tensor(x):
                out[x] = None
    return list(out)[:NEAR_MAX]


def run_all(staged: Staged, feeds: Sequence[Sample], names: Sequence[str]) -> Values:
    """Values of ``names`` for every sample, in one session. The session computes the tensors
    one step behind them too (:func:`_near`), kept for :meth:`Check._settle`: a pair that cannot
    show a difference is then usually settled by its frontier without another session (each
    costs a model load: 5 s for a 90k-node chain), and the step behind those (computed, not
    read: the idle session serves the settling's request for them)."""
    wanted = [n for n in dict.fromkeys(names) if staged.is_tensor(n)]
    near = _near(staged, wanted)
    # the session computes the step behind those too, unread: the settling's first deep batch
    # (a frontier that cannot show a difference either) then reuses it, no model load again
    far = [n for n in _near(staged, [*wanted, *near]) if n not in near]
    with staged.session([*wanted, *near], also=far) as runner:
        values = [runner.run(feed) for feed in feeds]
    if near:
        _NEAR.setdefault(staged, {})[tuple(map(id, feeds))] = (tuple(feeds), [
            {n: v.pop(n) for n in near if n in v} for v in values])
    return values


def dtype_of(staged: Staged, name: str) -> str:
    """The numpy dtype name of tensor ``name`` of ``staged`` (as pairs are compared in)."""
    return numpy_dtype_name(staged.elem_type(name))


def resolve(staged: Staged, name: str) -> str:
    """``name`` as a record writes it (a framework or user name) -> the tensor of ``staged``."""
    return Selector(staged.index).resolve(name)


def node_position(index: GraphIndex, label: str) -> int | None:
    """Node position for a label from a rewrite record: a node name, or ``OpType#i``."""
    if label in index.node_names:
        return index.node_names[label]
    op, sep, pos = label.rpartition("#")
    if sep and pos.isdigit() and int(pos) < len(index.graph.node):
        node = index.graph.node[int(pos)]
        if node.op_type == op and not node.name:
            return int(pos)
    return None


class Context:
    """What a check is given besides its record: the ``orig`` and ``new`` models staged in one
    workspace, the samples both are fed (``feeds``, described by ``described``, with ``notes``),
    and :meth:`stage` for a reference model the check builds."""

    def __init__(self, original: Model, rewritten: Model, ws: Workspace, *, threads: int,
                 inputs: InputsLike | None, seed: int, dims: Mapping[str, int] | None,
                 samples: int | None, limits: Limits | None = None,
                 ranges: Mapping[str, Range] | None = None,
                 save_inputs: str | os.PathLike | None = None) -> None:
        self.ws = ws
        self.threads = threads
        self.limits = limits
        self.orig = Staged(original, ws, "original", threads=threads, limits=limits)
        self.new = Staged(rewritten, ws, "rewritten", threads=threads, limits=limits)
        made = make_samples([self.orig], inputs=inputs, seed=seed, dims=dims, samples=samples,
                            ranges=ranges, save_inputs=save_inputs)
        self.feeds = made.samples
        self.described = made.described
        self.notes = made.notes

    def stage(self, model: Model, label: str, index: GraphIndex | None = None) -> Staged:
        """``model`` staged in the check's workspace, with the same threads and limits
        (``index``: its index when the caller has it, e.g. a cut model's)."""
        return Staged(model, self.ws, label, threads=self.threads, limits=self.limits,
                      index=index)


CheckFunction = Callable[[Context, Any, Check], None]
"""A rewrite check: ``(ctx, record, check)``, adding its pairs to ``check``."""

CHECK_HOMES = {
    "extract": "rewrite", "copy": "rewrite", "insert": "rewrite", "reroute": "rewrite",
    "rename": "verbs", "bypass": "verbs", "merge": "verbs",
    "fold": "folding", "opset": "folding", "dims": "folding",
    "cleanup": "hygiene", "toposort": "hygiene", "outputs": "hygiene", "set_values": "hygiene",
    "precision": "precision", "split_stage": "split", "replace": "sites",
}
"""Record op -> the module of ``onnxsurgeon.verify`` that defines its check (what
:func:`check_of` imports: a rename's check does not load the folding checks' surgery)."""
CHECK_MODULES = tuple(dict.fromkeys(CHECK_HOMES.values()))
"""The modules of ``onnxsurgeon.verify`` that define rewrite checks."""


class _Registry(dict[type[RewriteRecord], CheckFunction]):
    """A dict that imports :data:`CHECK_MODULES` (each registers its checks) before it is
    first read, so that it is complete whichever part of verify was imported; registering
    (:func:`rewrite_check`) does not read it."""

    _loaded = False

    def _load(self) -> None:
        if not self._loaded:
            self._loaded = True
            from importlib import import_module

            for name in CHECK_MODULES:
                import_module(f".{name}", __package__)

    def __iter__(self) -> Iterator[type[RewriteRecord]]:
        self._load()
        return super().__iter__()

    def __len__(self) -> int:
        self._load()
        return super().__len__()

    def __contains__(self, key: object) -> bool:
        self._load()
        return super().__contains__(key)

    def __getitem__(self, key: type[RewriteRecord]) -> CheckFunction:
        self._load()
        return super().__getitem__(key)

    def get(self, key: type[RewriteRecord], default: Any = None) -> Any:
        self._load()
        return super().get(key, default)

    def keys(self) -> Any:
        self._load()
        return super().keys()

    def values(self) -> Any:
        self._load()
        return super().values()

    def items(self) -> Any:
        self._load()
        return super().items()


CHECKS: dict[type[RewriteRecord], CheckFunction] = _Registry()
"""Record type -> its check (filled by :func:`rewrite_check` as the checks' modules are
imported: :data:`CHECK_MODULES`, imported when it is first read)."""

_F = TypeVar("_F", bound=CheckFunction)


def rewrite_check(record_type: type[RewriteRecord]) -> Callable[[_F], _F]:
    """Register the decorated function as the check of ``record_type`` (one per type: a second
    registration is a bug, refused at import)."""

    def register(function: _F) -> _F:
        if dict.__contains__(CHECKS, record_type):
            raise TypeError(f"{record_type.__name__} has a check already "
                            f"({dict.__getitem__(CHECKS, record_type).__qualname__})")
        dict.__setitem__(CHECKS, record_type, function)  # type: ignore[misc]
        return function

    return register


def check_of(record: RewriteRecord) -> CheckFunction:
    """The check registered for ``record``'s type.

    Raises:
        UsageError: no check is registered for it.
    """
    found = dict.get(CHECKS, type(record))
    home = CHECK_HOMES.get(str(getattr(record, "op", "")))
    if found is None and home is not None:
        from importlib import import_module

        import_module(f".{home}", __package__)
        found = dict.get(CHECKS, type(record))
    if found is None:
        found = CHECKS.get(type(record))  # every check module imported
    if found is None:
        raise UsageError(f"rewrite record op {record.op!r} has no check; expected one of "
                         f"{sorted(t.op for t in CHECKS)}")
    return found
