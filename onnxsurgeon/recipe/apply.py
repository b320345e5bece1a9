"""Running a recipe on a model in memory: every step in order, verify checkpoints, provenance.

One model is loaded once, every step mutates it in memory, and the caller saves it once. A
``verify`` step proves the invariant of every rewrite step since the previous checkpoint, each
against the model as it was just before that step (snapshots are kept only when a checkpoint
follows, so a recipe without one costs no copies). With ``plan=True`` the steps still run on the
in-memory model (so each step is checked against the model as the steps before it leave it), a
per-step account of nodes kept, added and dropped and of new and dropped outputs is returned, no
checkpoint runs and nothing is stamped; the caller writes nothing.

After the last step the model's ``metadata_props`` hold the recipe in canonical form
(:data:`RECIPE_KEY`) and its sha256 (:data:`RECIPE_SHA_KEY`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx

from ..errors import SurgeryError, UsageError
from ..io import Model, as_model
from ..metadata import set_metadata
from ..record import RewriteRecord, records, rewrites
from ..session import Session, active
from .format import Recipe, Step
from .spec import Kind, StepContext
from .steps import STEPS

RECIPE_KEY = "onnxsurgeon.recipe"
"""``metadata_props`` key of the canonical recipe that produced the model."""
RECIPE_SHA_KEY = "onnxsurgeon.recipe.sha256"
"""``metadata_props`` key of that recipe's sha256 (hex)."""


@dataclass(frozen=True)
class StepOutcome:
    """What one step did: the verb's own ``--json`` result, a plan account, a verify report."""

    step: Step
    result: dict[str, Any]
    plan: dict[str, Any] | None = None
    report: Any = None
    """For ``verify`` steps (and a last ``split`` step under ``verify``): the
    :class:`~onnxsurgeon.verify.VerifyReport` (None in a plan)."""
    made: Any = None
    """For a last ``split`` step: the :class:`~onnxsurgeon.surgery.SplitResult` to write."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"step": self.step.number, "verb": self.step.verb,
                               "result": self.result}
        if self.plan is not None:
            out["plan"] = self.plan
        return out


@dataclass(frozen=True)
class ApplyResult:
    """What :func:`apply_recipe` did.

    Attributes:
        steps: one outcome per step run, in order (a failed checkpoint ends the list).
        recipe_sha256: the sha256 of the recipe's canonical form.
        planned: True for a plan (nothing verified, nothing stamped).
    """

    steps: tuple[StepOutcome, ...]
    recipe_sha256: str
    planned: bool = False
    total_steps: int = 0
    reports: tuple[tuple[int | str, Any], ...] = field(default=())
    """(step number, VerifyReport) of every checkpoint that ran; ``"final"`` for ``verify=True``."""

    @property
    def ok(self) -> bool:
        """Every checkpoint passed and every step ran."""
        return len(self.steps) == self.total_steps and all(r.ok for _, r in self.reports)

    def verify_json(self) -> dict[str, Any] | None:
        if not self.reports:
            return None
        return {"ok": all(r.ok for _, r in self.reports),
                "checkpoints": [{"step": n, **r.to_json()} for n, r in self.reports]}

    def to_json(self) -> dict[str, Any]:
        return {"recipe_sha256": self.recipe_sha256, "plan": self.planned,
                "steps": [s.to_json() for s in self.steps], "verify": self.verify_json()}


Progress = Callable[[int, int], None]


def _snapshot(model: Model) -> Model:
    proto = onnx.ModelProto()
    proto.CopyFrom(model.proto)
    return Model(proto, base_dir=model.base_dir)


def _key_in_message(step: Step, params: Mapping[str, Any], message: str) -> str | None:
    """The step key whose value (a name or path) the error message quotes first, if any."""
    spec = STEPS[step.verb]
    best: tuple[int, str] | None = None
    for param in spec.params:
        value = params.get(param.key)
        if param.kind in (Kind.NAME, Kind.FILE):
            values = [value]
        elif param.kind is Kind.FUNC:
            values = [str(value).rpartition(":")[0]] if value else []
        elif param.kind is Kind.NAMES:
            values = list(value or [])
        elif param.kind is Kind.RENAMES:
            values = [*dict(value or {}), *dict(value or {}).values()]
        else:
            continue
        for v in values:
            at = message.find(f"'{v}'") if isinstance(v, str) else -1
            if at >= 0 and (best is None or at < best[0]):
                best = (at, param.key)
    return None if best is None else best[1]


def step_error(recipe: Recipe, step: Step, params: Mapping[str, Any],
               exc: SurgeryError) -> SurgeryError:
    """``exc`` with the recipe, step number, verb and (when it can tell) key in front."""
    message = " ".join(str(exc).split())
    key = _key_in_message(step, params, message)
    where = f"{recipe.source}: {step.label}" + (f", key '{key}'" if key else "")
    try:
        return type(exc)(f"{where}: {message}")
    except TypeError:  # pragma: no cover - an error type with another constructor
        return SurgeryError(f"{where}: {message}")


def _node_key(node: onnx.NodeProto) -> tuple[str, tuple[str, ...]]:
    return node.name, tuple(node.output)


def _account(before: onnx.ModelProto, after: onnx.ModelProto) -> dict[str, Any]:
    """Nodes kept, added, dropped and graph inputs/outputs gained or lost. O(nodes)."""
    a = {_node_key(n) for n in before.graph.node}
    b = {_node_key(n) for n in after.graph.node}
    outs_a = [o.name for o in before.graph.output]
    outs_b = [o.name for o in after.graph.output]
    ins_a = [i.name for i in before.graph.input]
    ins_b = [i.name for i in after.graph.input]
    return {
        "nodes": {"before": len(before.graph.node), "after": len(after.graph.node),
                  "kept": len(a & b), "added": len(b - a), "dropped": len(a - b)},
        "new_outputs": [o for o in outs_b if o not in set(outs_a)],
        "dropped_outputs": [o for o in outs_a if o not in set(outs_b)],
        "new_inputs": [i for i in ins_b if i not in set(ins_a)],
        "dropped_inputs": [i for i in ins_a if i not in set(ins_b)],
    }


def stamp(proto: onnx.ModelProto, recipe: Recipe) -> None:
    """Record ``recipe`` (canonical) and its sha256 in ``metadata_props``. Mutates proto."""
    set_metadata(proto, {RECIPE_KEY: recipe.canonical(), RECIPE_SHA_KEY: recipe.sha256()})


def recorded_recipe(proto: onnx.ModelProto) -> tuple[str, str] | None:
    """(canonical recipe, sha256) recorded by :func:`stamp`, or None."""
    props = {p.key: p.value for p in proto.metadata_props}
    if RECIPE_KEY not in props:
        return None
    return props[RECIPE_KEY], props.get(RECIPE_SHA_KEY, "")


def _verify_options(step: Step, recipe: Recipe, base: Mapping[str, Any]) -> dict[str, Any]:
    params = step.resolved(recipe.base_dir)
    options = dict(base)
    for key in ("samples", "seed", "dims", "inputs"):
        if key in params:
            options[key] = params[key]
    return options


def apply_recipe(model: Model | onnx.ModelProto, recipe: Recipe, /, *, plan: bool = False,
                 verify: bool = False, verify_options: Mapping[str, Any] | None = None,
                 progress: Progress | None = None,
                 context: StepContext | None = None,
                 session: Session | None = None) -> ApplyResult:
    """Run every step of ``recipe`` on ``model`` in memory. Mutates model.

    Each step calls its library verb with the step's keys (see
    :data:`~onnxsurgeon.recipe.steps.STEPS`); ``verify`` steps prove the rewrites since the
    previous checkpoint with :func:`~onnxsurgeon.verify.verify_rewrite` (``verify_options``, e.g.
    ``isolate=True``, are passed on). ``verify`` adds a final checkpoint after the last step
    (reported as step ``"final"``). A failed checkpoint ends the run (``result.ok`` is False).
    ``context`` carries what steps may need beyond their keys (the framework-function inserter
    for ``insert`` steps with ``func:``, see :class:`~onnxsurgeon.recipe.spec.StepContext`).
    Unless ``plan``, the recipe and its sha256 are stamped into the metadata at the end.

    The steps share one :class:`~onnxsurgeon.session.Session`: each verb starts from the index
    the one before kept with its edits (no rebuild), and the session's journal is the last
    step's, for the save. ``session``: the caller's, open on ``model`` (e.g. opened with
    ``loaded=True`` right after load, so the first step reuses load's index, and saved from
    after); default the model's open session, else one opened for the run and closed after.

    Before:  model
    After:   model with every step applied, its rewrite log extended by one record per rewrite

    Cost: the steps' own; with checkpoints, one proto copy per rewrite step before a checkpoint.

    Raises:
        SurgeryError (its own subclass): a step failed; the message starts with the recipe,
            step number, verb and, when known, the key. The model may hold the earlier steps.
    """
    m = as_model(model)
    own = session is None and active(m) is None
    s = session or active(m) or Session(m)
    if s.model.proto is not m.proto:
        raise UsageError("apply_recipe: the session given is open on another model; pass the "
                         "session's own model")
    try:
        return _run(m, s, recipe, plan=plan, verify=verify, verify_options=verify_options,
                    progress=progress, context=context)
    finally:
        if own:
            s.close()  # the caller owns the proto again


def _run(m: Model, session: Session, recipe: Recipe, *, plan: bool, verify: bool,
         verify_options: Mapping[str, Any] | None, progress: Progress | None,
         context: StepContext | None) -> ApplyResult:
    """:func:`apply_recipe`'s steps, in ``session``."""
    steps = recipe.steps
    last_check = len(steps) if verify and not plan else max(
        (k for k, s in enumerate(steps) if s.verb == "verify"), default=-1)
    pending: list[tuple[Model, RewriteRecord, Step]] = []
    outcomes: list[StepOutcome] = []
    reports: list[tuple[int | str, Any]] = []
    base_options = dict(verify_options or {})
    ctx = context or StepContext()
    for k, step in enumerate(steps):
        if step.verb == "verify":
            covered = [s.number for _, _, s in pending]
            if plan:
                outcomes.append(StepOutcome(step, {"would_verify": covered}))
                pending = []
                continue
            session.forget()  # no kept index past a checkpoint
            report = _checkpoint(m, pending, _verify_options(step, recipe, base_options),
                                 recipe.base_dir)
            pending = []
            reports.append((step.number, report))
            outcomes.append(StepOutcome(step, {"ok": report.ok, "steps": covered}, report=report))
            if progress is not None:
                progress(k + 1, len(steps))
            if not report.ok:
                break
            continue
        make = STEPS[step.verb].make
        if make is not None:   # the last step (parse_recipe): it makes the stages
            outcome, report = _make(m, session, step, recipe, ctx, make, plan=plan,
                                    verify=verify, options=base_options)
            outcomes.append(outcome)
            if report is not None:
                reports.append((step.number, report))
            if progress is not None:
                progress(k + 1, len(steps))
            continue
        before = _snapshot(m) if (k < last_check or plan) else None
        logged = len(rewrites(m.proto))
        run = STEPS[step.verb].run
        assert run is not None
        params = step.resolved(recipe.base_dir)
        try:
            result = run(m, params, ctx)
        except BaseException as exc:
            session.forget()  # whatever the step did, nobody vouches for the proto now
            if isinstance(exc, SurgeryError):
                raise step_error(recipe, step, params, exc) from None
            raise
        session.verb_returned()  # what it handed on goes to the next step; else nothing does
        account = _account(before.proto, m.proto) if plan and before is not None else None
        if before is not None and k < last_check:
            new = records(m.proto)[logged:]
            pending.extend((before, record, step) for record in new[-1:])
        outcomes.append(StepOutcome(step, result, plan=account))
        if progress is not None:
            progress(k + 1, len(steps))
    complete = len(outcomes) == len(steps) and all(r.ok for _, r in reports)
    if pending and verify and not plan and complete:
        reports.append(("final", _checkpoint(m, pending, base_options, recipe.base_dir)))
    if not plan and len(outcomes) == len(steps) and all(r.ok for _, r in reports):
        stamp(m.proto, recipe)
        if outcomes[-1].made is not None:
            for stage in outcomes[-1].made.stages:
                stamp(stage.model.proto, recipe)
    return ApplyResult(tuple(outcomes), recipe.sha256(), plan, len(steps), tuple(reports))


def _make(m: Model, session: Session, step: Step, recipe: Recipe, ctx: StepContext,
          make: Any, *, plan: bool, verify: bool,
          options: Mapping[str, Any]) -> tuple[StepOutcome, Any]:
    """Run a last step that makes something else than the model (``split``); with ``verify``
    (not a plan) prove it: the stages chained equal the model bit for bit."""
    params = step.resolved(recipe.base_dir)
    try:
        payload, made = make(m, params, ctx)
    except SurgeryError as exc:
        raise step_error(recipe, step, params, exc) from None
    finally:
        session.forget()
    report = None
    if verify and not plan:
        from ..verify.split import verify_split

        report = verify_split(m, [s.model for s in made.stages], **options)
    return StepOutcome(step, payload, made=made, report=report), report


def _checkpoint(model: Model, pending: list[tuple[Model, RewriteRecord, Step]],
                options: Mapping[str, Any], base_dir: Path) -> Any:
    """One report proving each pending rewrite against the model just before it."""
    from ..verify import verify_rewrite
    from ..verify.log import merge_reports

    reports = []
    for i, (before, record, step) in enumerate(pending):
        after = pending[i + 1][0] if i + 1 < len(pending) else model
        check = STEPS[step.verb].check
        if check is not None:
            reports.append(check(before, after, record, step.resolved(base_dir), options))
        else:
            reports.append(verify_rewrite(before, after, record, **options))
    return merge_reports(reports, [s.verb for _, _, s in pending],
                         numbers=[s.number for _, _, s in pending])
