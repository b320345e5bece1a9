"""From a model's rewrite log to the recipe that replays it (``onnxsurgeon recipe MODEL``).

Every rewrite a verb makes leaves a record in ``metadata_props`` (:mod:`onnxsurgeon.record`); each
record becomes the step that makes the same rewrite on the model the log started from, with
resolved ONNX names (so the replay does not depend on how names were first written). A rewrite
done by hand with the CLI can so be replayed on the next version of the model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..record import (
    RECORD_TYPES,
    BypassRecord,
    CopyRecord,
    ExtractRecord,
    InsertRecord,
    MergeRecord,
    RenameRecord,
    RerouteRecord,
    RewriteRecord,
    as_record,
)
from .format import Recipe, RecipeError, parse_recipe


def step_for_record(record: RewriteRecord | Mapping[str, Any], number: int) -> dict[str, Any]:
    """The recipe step (``{verb: {key: value}}``) that replays one rewrite record (typed, or its
    JSON object read strictly).

    Raises:
        RecipeError: the record cannot be replayed from the log alone (an inserted user graph or
            framework function is not stored in it; an unknown op).
    """
    op = record.op if isinstance(record, RewriteRecord) else record.get("op")
    where = f"rewrite {number} ({op})"
    if op == MergeRecord.op:  # whatever the record says, its second model is not in the log
        raise RecipeError(
            f"{where}: the second model of a merge is not stored in the rewrite log; write that "
            "step by hand (merge: {second: FILE.onnx, connect: {...}})")
    if op not in RECORD_TYPES:
        raise RecipeError(f"{where}: no recipe step replays rewrite op {op!r}")
    try:
        rec = as_record(record)
    except UsageError as exc:
        raise RecipeError(f"rewrite {number}: {exc}") from None
    if isinstance(rec, ExtractRecord):
        return {"extract": {"outputs": list(rec.outputs), "inputs": list(rec.inputs)}}
    if isinstance(rec, CopyRecord):
        from ..verify.log import _copy_prefix

        try:
            prefix = _copy_prefix(rec)
        except UsageError as exc:
            raise RecipeError(f"{where}: {exc}") from None
        return {"copy": {"outputs": list(rec.outputs), "weights": rec.weights, "prefix": prefix,
                         "replace_inputs": dict(rec.replace_inputs)}}
    if isinstance(rec, InsertRecord):
        if rec.block == "graph":
            raise RecipeError(
                f"{where}: the inserted block was a user graph or function, which the rewrite log "
                "does not store; write that step by hand (insert: {at: ..., graph: FILE.onnx})")
        step: dict[str, Any] = {"at": rec.at, "op": rec.block, "as_output": rec.as_output}
        if rec.params:
            step["params"] = dict(rec.params)
        return {"insert": step}
    if isinstance(rec, RerouteRecord):
        step = {"from": rec.source, "to": rec.target}
        if not rec.rerouted_outputs:
            step["consumers"] = list(rec.rerouted)
        return {"reroute": step}
    if isinstance(rec, RenameRecord):
        return {"rename": {"mapping": dict(rec.renamed), "nodes": rec.nodes}}
    if isinstance(rec, BypassRecord):
        return {"bypass": {"nodes": list(rec.removed), "input": rec.input}}
    raise RecipeError(f"{where}: no recipe step replays rewrite op {rec.op!r}")


def recipe_from_log(records: Sequence[RewriteRecord | Mapping[str, Any]], *, source: str = "model",
                    base_dir: str | Path = ".") -> Recipe:
    """The recipe whose steps replay ``records`` (oldest first), checked against the schema.

    Raises:
        RecipeError: no records, or one cannot be replayed from the log alone.
    """
    if not records:
        raise RecipeError(f"{source} records no rewrite (metadata 'onnxsurgeon.rewrites'); "
                          "only models written by onnxsurgeon verbs have one")
    steps = [step_for_record(r, k + 1) for k, r in enumerate(records)]
    return parse_recipe({"onnxsurgeon": 1, "steps": steps}, base_dir=base_dir, source=source)
