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
from ..record import RewriteRecord
from .format import Recipe, RecipeError, parse_recipe
from .steps import ALIASES, STEPS

BY_HAND = {
    "insert": "insert: {at: ..., graph: FILE.onnx}",
    "merge": "merge: {second: FILE.onnx, connect: {...}}",
}
"""Per verb, the step to write by hand when its record cannot be replayed from the log alone."""


def step_for_record(record: RewriteRecord, number: int) -> dict[str, Any]:
    """The recipe step (``{verb: {key: value}}``) that replays one typed rewrite record: its
    :meth:`~onnxsurgeon.record.RewriteRecord.replay_call` (the verb call ``verify`` replays too)
    with the Python API's argument names turned into the step's keys.

    Raises:
        RecipeError: the record cannot be replayed from the log alone (an inserted user graph or
            framework function, the second model of a merge, an unknown op).
    """
    where = f"rewrite {number} ({record.op})"
    try:
        call = record.replay_call()
    except UsageError as exc:
        hint = BY_HAND.get(record.op)
        raise RecipeError(f"{where}: {exc}" + (f"; write that step by hand ({hint})" if hint
                                                else "")) from None
    aliases = ALIASES.get(call.verb, {})
    step = {aliases.get(name, name): value for name, value in {**call.args, **call.options}.items()}
    keys = {p.key for p in STEPS[call.verb].params}
    missing = [key for key in step if key not in keys]
    if missing:  # a verb option the recipe format cannot say: refuse rather than drop it
        raise RecipeError(f"{where}: a recipe {call.verb} step has no key {missing[0]!r}; "
                          "write that step by hand")
    return {call.verb: step}


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
