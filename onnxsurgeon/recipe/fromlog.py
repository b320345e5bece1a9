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
from ..record import Recorded, RewriteRecord
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


def step_for_result(result: Recorded, number: int = 1) -> dict[str, Any]:
    """The recipe step that makes a verb's rewrite again, from the verb's result: the step of
    the record the result derives (``result.record()``, the entry the verb wrote to the log),
    so the step carries the result's resolved ONNX names. ``number`` names it in errors.

    Raises:
        RecipeError: as :func:`step_for_record`.
    """
    return step_for_record(result.record(), number)


def recipe_from_log(records: Sequence[RewriteRecord], *, source: str = "model",
                    base_dir: str | Path = ".", stored: Recipe | None = None) -> Recipe:
    """The recipe whose steps replay ``records`` (typed, oldest first; see
    :func:`onnxsurgeon.record.records`), checked against the schema.

    A record the log alone cannot replay (an inserted user graph or framework function, the
    second model of a merge) takes its step from ``stored``, the recipe that made the model
    (its ``onnxsurgeon.recipe`` metadata, :func:`~onnxsurgeon.recipe.recorded_recipe`): the
    stored recipe's rewrite steps are matched verb by verb with one run of consecutive records
    that holds every such record, and each of those records gets its stored step as the recipe
    wrote it (paths relative to that recipe's folder). O(records x stored steps).

    Raises:
        RecipeError: no records, or one cannot be replayed from the log alone and ``stored``
            does not say how (none, or it matches no run, or several, of the log).
    """
    if not records:
        raise RecipeError(f"{source} records no rewrite (metadata 'onnxsurgeon.rewrites'); "
                          "only models written by onnxsurgeon verbs have one")
    steps: list[dict[str, Any] | None] = []
    errors: dict[int, RecipeError] = {}
    for k, record in enumerate(records):
        try:
            steps.append(step_for_record(record, k + 1))
        except RecipeError as exc:
            steps.append(None)
            errors[k] = exc
    if errors:
        steps = _fill_from_stored(records, steps, stored, errors)
    return parse_recipe({"onnxsurgeon": 1, "steps": steps}, base_dir=base_dir, source=source)


def _fill_from_stored(records: Sequence[RewriteRecord], steps: list[dict[str, Any] | None],
                      stored: Recipe | None,
                      errors: dict[int, RecipeError]) -> list[dict[str, Any] | None]:
    """``steps`` with each gap (a record the log cannot replay, ``errors`` says why) filled
    from ``stored``."""
    gaps = sorted(errors)
    if stored is None:
        raise errors[gaps[0]]
    made = [s for s in stored.steps if STEPS[s.verb].rewrites]
    verbs = [s.verb for s in made]
    matching = [i for i in range(len(records) - len(made) + 1)
                if [r.op for r in records[i:i + len(made)]] == verbs]
    covering = [i for i in matching if gaps[0] >= i and gaps[-1] < i + len(made)]
    stored_is = "the recipe recorded in the model (metadata 'onnxsurgeon.recipe')"
    if len(covering) > 1:
        raise RecipeError(f"{errors[gaps[0]]}; {stored_is} matches several runs of the log, "
                          "so which of its steps made it is unclear")
    if not covering:
        if not matching:
            raise RecipeError(f"{errors[gaps[0]]}; {stored_is} does not match the log")
        last = matching[-1]
        outside = next(k for k in gaps if not last <= k < last + len(made))
        raise RecipeError(f"{errors[outside]}; {stored_is} did not make it")
    filled = list(steps)
    for k in gaps:
        step = made[k - covering[0]]
        filled[k] = {step.verb: dict(step.params)}
    return filled
