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
from .format import Recipe, RecipeError, parse_recipe


def _copy_prefix(record: Mapping[str, Any]) -> str:
    from ..verify.log import _copy_prefix as prefix

    return prefix(record)


def step_for_record(record: Mapping[str, Any], number: int) -> dict[str, Any]:
    """The recipe step (``{verb: {key: value}}``) that replays one rewrite record.

    Raises:
        RecipeError: the record cannot be replayed from the log alone (an inserted user graph or
            framework function is not stored in it; an unknown op).
    """
    op = record.get("op")
    where = f"rewrite {number} ({op})"
    if op == "extract":
        return {"extract": {"outputs": list(record["outputs"]),
                            "inputs": list(record.get("inputs") or [])}}
    if op == "copy":
        try:
            prefix = _copy_prefix(record)
        except UsageError as exc:
            raise RecipeError(f"{where}: {exc}") from None
        return {"copy": {"outputs": list(dict(record["outputs"])),
                         "weights": str(record.get("weights", "independent")), "prefix": prefix,
                         "replace_inputs": dict(record.get("replace_inputs") or {})}}
    if op == "insert":
        if record.get("block") in (None, "graph"):
            raise RecipeError(
                f"{where}: the inserted block was a user graph or function, which the rewrite log "
                "does not store; write that step by hand (insert: {at: ..., graph: FILE.onnx})")
        step: dict[str, Any] = {"at": str(record["at"]), "op": str(record["block"]),
                                "as_output": bool(record.get("as_output"))}
        if record.get("params"):
            step["params"] = dict(record["params"])
        return {"insert": step}
    if op == "reroute":
        step = {"from": str(record["from"]), "to": str(record["to"])}
        if not record.get("rerouted_outputs"):
            step["consumers"] = list(record.get("rerouted") or [])
        return {"reroute": step}
    if op == "rename":
        return {"rename": {"mapping": dict(record["renamed"]), "nodes": bool(record.get("nodes"))}}
    if op == "bypass":
        return {"bypass": {"nodes": list(record["removed"]), "input": int(record.get("input", 0))}}
    if op == "merge":
        raise RecipeError(
            f"{where}: the second model of a merge is not stored in the rewrite log; write that "
            "step by hand (merge: {second: FILE.onnx, connect: {...}})")
    raise RecipeError(f"{where}: no recipe step replays rewrite op {op!r}")


def recipe_from_log(records: Sequence[Mapping[str, Any]], *, source: str = "model",
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
