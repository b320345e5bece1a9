"""From a model's rewrite log to the recipe that replays it (``onnxsurgeon recipe MODEL``).

Every rewrite a verb makes leaves a record in ``metadata_props`` (:mod:`onnxsurgeon.record`); each
record becomes the step that makes the same rewrite on the model the log started from, with
resolved ONNX names (so the replay does not depend on how names were first written). A rewrite
done by hand with the CLI can so be replayed on the next version of the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..record import (
    BypassRecord,
    CopyRecord,
    ExtractRecord,
    InsertRecord,
    MergeRecord,
    RenameRecord,
    RerouteRecord,
    RewriteRecord,
)
from .format import Recipe, RecipeError, parse_recipe


def step_for_record(record: RewriteRecord, number: int) -> dict[str, Any]:
    """The recipe step (``{verb: {key: value}}``) that replays one typed rewrite record.

    Raises:
        RecipeError: the record cannot be replayed from the log alone (an inserted user graph or
            framework function, the second model of a merge, an unknown op).
    """
    where = f"rewrite {number} ({record.op})"
    if isinstance(record, ExtractRecord):
        return {"extract": {"outputs": list(record.outputs), "inputs": list(record.inputs)}}
    if isinstance(record, CopyRecord):
        from ..verify.log import _copy_prefix

        try:
            prefix = _copy_prefix(record)
        except UsageError as exc:
            raise RecipeError(f"{where}: {exc}") from None
        return {"copy": {"outputs": list(record.outputs), "weights": record.weights,
                         "prefix": prefix, "replace_inputs": dict(record.replace_inputs)}}
    if isinstance(record, InsertRecord):
        if record.block == "graph":
            raise RecipeError(
                f"{where}: the inserted block was a user graph or function, which the rewrite log "
                "does not store; write that step by hand (insert: {at: ..., graph: FILE.onnx})")
        step: dict[str, Any] = {"at": record.at, "op": record.block, "as_output": record.as_output}
        if record.params:
            step["params"] = dict(record.params)
        return {"insert": step}
    if isinstance(record, RerouteRecord):
        step = {"from": record.source, "to": record.target}
        if not record.rerouted_outputs:
            step["consumers"] = list(record.rerouted)
        return {"reroute": step}
    if isinstance(record, RenameRecord):
        return {"rename": {"mapping": dict(record.renamed), "nodes": record.nodes}}
    if isinstance(record, BypassRecord):
        return {"bypass": {"nodes": list(record.removed), "input": record.input}}
    if isinstance(record, MergeRecord):
        raise RecipeError(
            f"{where}: the second model of a merge is not stored in the rewrite log; write that "
            "step by hand (merge: {second: FILE.onnx, connect: {...}})")
    raise RecipeError(f"{where}: no recipe step replays rewrite op {record.op!r}")


def recipe_from_log(records: Sequence[RewriteRecord], *, source: str = "model",
                    base_dir: str | Path = ".") -> Recipe:
    """The recipe whose steps replay ``records`` (typed, oldest first; see
    :func:`onnxsurgeon.record.records`), checked against the schema.

    Raises:
        RecipeError: no records, or one cannot be replayed from the log alone.
    """
    if not records:
        raise RecipeError(f"{source} records no rewrite (metadata 'onnxsurgeon.rewrites'); "
                          "only models written by onnxsurgeon verbs have one")
    steps = [step_for_record(r, k + 1) for k, r in enumerate(records)]
    return parse_recipe({"onnxsurgeon": 1, "steps": steps}, base_dir=base_dir, source=source)
