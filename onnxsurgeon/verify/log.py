"""Verifying a rewrite log: every rewrite a model records since the model it came from.

One new record is verified directly. Several are verified step by step: the earlier steps are
replayed with the surgery verbs from their records (deterministic, and the replay must reproduce
the record exactly), each step is checked against its own input, and the last step is checked on
the actual rewritten model. A step that cannot be replayed (an inserted user graph is not stored
in the record) is a usage error that says to verify after each step.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import onnx

from ..errors import SurgeryError, UsageError
from ..io import Model
from ..record import RewriteRecord, records
from .report import PairReport, VerifyReport, make_report
from .rewrite import verify_rewrite
from .run import ModelLike, to_model


def replay(model: Model, record: RewriteRecord) -> None:
    """Apply the rewrite ``record`` describes to ``model`` with the surgery verb its
    :meth:`~onnxsurgeon.record.RewriteRecord.replay_call` names. Mutates model.

    Raises:
        UsageError: the record cannot be replayed (unknown op, inserted user graph, second model
            of a merge, or the replay records something else than ``record``).
    """
    from .. import surgery

    call = record.replay_call()
    getattr(surgery, call.verb)(model, *call.args.values(), **call.options)
    if records(model.proto)[-1] != record:
        raise UsageError(f"replaying the {record.op} record does not reproduce it")


def verify_log(original: ModelLike, rewritten: ModelLike, **options: Any) -> VerifyReport:
    """Verify every rewrite ``rewritten`` records since ``original`` (see the module docstring).

    Options are those of :func:`~onnxsurgeon.verify.verify_rewrite`. With several steps, pair
    checks are labelled ``<step>:<op>:<check>``, and ``deep`` (True, or the tensor names of
    ``rewritten`` to compare) compares the last step (the one producing ``rewritten``) layer by
    layer.

    Raises:
        UsageError: the log does not extend the original's, records nothing new, or a step
            before the last cannot be replayed.
    """
    orig_model, new_model = to_model(original), to_model(rewritten)
    before, after = records(orig_model.proto), records(new_model.proto)
    if after[:len(before)] != before:
        raise UsageError(
            "the rewritten model's rewrite log does not continue the original's; give the model "
            "the rewrite started from"
        )
    steps = after[len(before):]
    if not steps:
        raise UsageError(
            "the rewritten model records no rewrite since the original; compare them with "
            "'onnxsurgeon verify' instead"
        )
    if len(steps) == 1:
        return verify_rewrite(orig_model, new_model, steps[0], **options)
    reports: list[VerifyReport] = []
    current = orig_model
    for k, record in enumerate(steps):
        if k == len(steps) - 1:
            nxt = new_model
        else:
            proto = onnx.ModelProto()
            proto.CopyFrom(current.proto)
            nxt = Model(proto, base_dir=current.base_dir)
            try:
                replay(nxt, record)
            except SurgeryError as exc:
                raise UsageError(
                    f"rewrite {k + 1} of {len(steps)} ({record.op}) cannot be replayed: "
                    f"{exc}; verify after each step (--verify on each command)"
                ) from None
        last = k == len(steps) - 1  # a forced deep comparison is of the actual model only
        reports.append(verify_rewrite(current, nxt, record,
                                      **(options if last else {**options, "deep": False})))
        current = nxt
    return merge_reports(reports, [r.op for r in steps])


def merge_reports(reports: list[VerifyReport], ops: list[str], *,
                  numbers: list[int] | None = None) -> VerifyReport:
    """One report for several steps: pairs and notes labelled by step, first divergence kept.
    ``numbers``: the steps' numbers (default 1, 2, ...; a recipe passes its step numbers)."""
    pairs: list[PairReport] = []
    notes: list[str] = []
    labels = numbers if numbers is not None else list(range(1, len(reports) + 1))
    for n, report, op in zip(labels, reports, ops, strict=True):
        pairs.extend(replace(p, check=f"{n}:{op}:{p.check}") for p in report.pairs)
        notes.extend(f"step {n} ({op}): {note}" for note in report.notes)
        if report.reason:
            notes.append(f"step {n} ({op}): {report.reason}")
    divergence = next((r.divergence for r in reports if r.divergence is not None), None)
    deep = reports[-1].deep if reports and reports[-1].deep is not None \
        and reports[-1].deep.forced else None
    merged = make_report(pairs, samples=min(r.samples for r in reports), kind="rewrite:log",
                         notes=notes, divergence=divergence, deep=deep)
    if merged.ok and not all(r.ok for r in reports):
        merged = replace(merged, ok=False)
    return merged
