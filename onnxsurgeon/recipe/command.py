"""The ``apply`` and ``recipe`` commands (parsed by :mod:`onnxsurgeon.cli_parser`, run by
:mod:`onnxsurgeon.cli`).

``apply RECIPE MODEL -o OUT``: one load, every step in memory, one checked save.
``apply RECIPE SRC1 SRC2 ... -o OUTDIR/``: a fleet (:mod:`onnxsurgeon.recipe.fleet`).
``recipe MODEL``: the recipe that replays the model's recorded rewrites (YAML, or ``--json``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from ..errors import SurgeryError, UsageError
from ..schema import stamp
from .apply import ApplyResult, apply_recipe
from .format import Recipe, load_recipe
from .spec import StepContext

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


def _summary(result: dict[str, Any]) -> str:
    """One line for a verb's result: scalars shown, lists and maps counted."""
    parts = []
    for key, value in result.items():
        if isinstance(value, list) and 0 < len(value) <= 3:
            value = ", ".join(map(str, value))
        elif isinstance(value, (list, dict)):
            value = len(value)
        parts.append(f"{key}: {value}")
    return "; ".join(parts)


def _plan_line(plan: dict[str, Any]) -> str:
    n = plan["nodes"]
    text = (f"nodes {n['before']} -> {n['after']} (kept {n['kept']}, added {n['added']}, "
            f"dropped {n['dropped']})")
    for key in ("new_outputs", "dropped_outputs", "new_inputs", "dropped_inputs"):
        if plan[key]:
            text += f"; {key.replace('_', ' ')}: {', '.join(plan[key])}"
    return text


def _print_text(result: ApplyResult, out: str, planned: bool) -> None:
    from ..cli_io import _out

    for s in result.steps:
        if s.step.verb == "verify":
            covered = ", ".join(map(str, s.result.get("steps") or s.result.get("would_verify", [])))
            if planned:
                _out(f"step {s.step.number} verify: would prove steps {covered}")
            else:
                _out(f"step {s.step.number} verify: steps {covered} "
                     f"{'proven' if s.report.ok else 'FAILED'}")
                if not s.report.ok:
                    _out(s.report.to_text())
            continue
        line = f"step {s.step.number} {s.step.verb}: {_summary(s.result)}"
        if s.made is not None:   # a last split step: its stages, as the split command says
            costs = ", ".join(str(st.cost) for st in s.made.stages)
            line = (f"step {s.step.number} {s.step.verb}: {len(s.made.stages)} stages "
                    f"({s.made.by}: {costs}; crossing "
                    f"{', '.join(map(str, s.made.crossing_bytes))} bytes)")
            if s.report is not None:
                line += (" chained equal the model" if s.report.ok
                         else f" FAILED --verify\n{s.report.to_text()}")
        if s.plan is not None:
            line += f"\n    {_plan_line(s.plan)}"
        _out(line)
    for number, report in result.reports:
        if number == "final":
            _out(f"--verify: {'proven' if report.ok else 'FAILED'}")
            if not report.ok:
                _out(report.to_text())
    if planned:
        _out(f"plan only: {len(result.steps)} steps checked, nothing written")
    elif result.ok:
        _out(f"applied {len(result.steps)} steps (recipe sha256 {result.recipe_sha256[:12]}) -> {out}")
    else:
        _out(f"verification failed: nothing written to {out}")


def _is_fleet(args: argparse.Namespace) -> bool:
    return len(args.models) > 1 or args.output.endswith(("/", os.sep)) or Path(args.output).is_dir()


def apply_one(recipe: Recipe, source: str, output: str, *, plan: bool = False,
              verify: bool = False, isolation: dict[str, Any] | None = None,
              progress: Any = None, force: bool = False,
              done: Any = None) -> ApplyResult:
    """Load ``source``, run ``recipe`` on it in memory and (unless a plan or a failed check)
    save it to ``output`` with the CLI's checked, atomic write; ``done(model)`` then sees the
    rewritten model (``--html``). Raises SurgeryError."""
    from ..cli_io import _check_paths, _load, _paused_gc, _write
    from ..session import Session

    stages = _ends_in_split(recipe)
    if stages:
        from ..cli_split import check_folder

        check_folder(Path(output))
    else:
        _check_paths(source, output, force)
    context = StepContext()
    exports = any("func" in s.params for s in recipe.steps)
    if exports:
        from ..converters import insert_function  # the CLI may dispatch to converters

        context = StepContext(insert_function=insert_function)
    # one session for every step and the save: the first step reuses load's index
    with _paused_gc(not exports and not verify), \
            Session(_load(source), loaded=True) as session:  # exports, ort make garbage
        model = session.model
        result = apply_recipe(model, recipe, plan=plan, verify=verify,
                              verify_options=isolation or {}, progress=progress,
                              context=context, session=session)
        if not plan and result.ok and stages:   # -o is the folder of the stages
            from ..cli_split import write_stages

            last = result.steps[-1]
            written = write_stages(last.made, Path(output), source, output)
            last.result.update(last.made.manifest([st["file"] for st in written["stages"]]))
        elif not plan and result.ok:
            _write(model, output, source, journal=session.journal)
    if done is not None:
        done(model)
    return result


def _ends_in_split(recipe: Recipe) -> bool:
    """Whether the recipe's last step makes stages (``split``): ``-o`` is then their folder."""
    from .steps import STEPS

    return STEPS[recipe.steps[-1].verb].make is not None


def run_task(recipe_path: str, source: str, output: str, options: dict[str, Any]) -> dict[str, Any]:
    """One fleet model: apply and save, never raise; the fleet's JSON line for it.

    ``status`` is ``ok``, ``verify_failed`` (a checkpoint failed, nothing written), ``failed``
    (bad model, name not found, refused rewrite: the one-line error) or ``error`` (a bug)."""
    start = time.perf_counter()
    line: dict[str, Any] = {"model": source, "output": output}
    try:
        recipe = load_recipe(recipe_path)
        result = apply_one(recipe, source, output, verify=bool(options.get("verify")),
                           force=bool(options.get("force")),
                           isolation=options.get("isolation") or {})
        line["status"] = "ok" if result.ok else "verify_failed"
        line["recipe_sha256"] = result.recipe_sha256
        line["steps"] = [s.to_json() for s in result.steps]
        line["verify"] = result.verify_json()
    except SurgeryError as exc:
        line["status"], line["error"] = "failed", " ".join(str(exc).split())
    except Exception as exc:  # noqa: BLE001 - one model's bug must not stop the fleet
        line["status"], line["error"] = "error", f"{type(exc).__name__}: {exc}"
    if line["status"] != "ok":
        line["output"] = None
    line["seconds"] = round(time.perf_counter() - start, 3)
    return line


def cmd_apply(args: argparse.Namespace, isolation: dict[str, Any]) -> int:
    """``onnxsurgeon apply``: run a recipe (see the module docstring)."""
    from ..cli_io import _out, _Progress

    recipe = load_recipe(args.recipe)
    if _ends_in_split(recipe) and len(args.models) > 1:
        raise UsageError(f"recipe '{args.recipe}' ends in split, which writes a folder of stages "
                         "per model; apply it to one model at a time (-o DIR)")
    if not _ends_in_split(recipe) and _is_fleet(args):
        from .fleet import run_fleet

        if args.plan or args.html:
            raise UsageError(f"{'--plan' if args.plan else '--html'} takes one model; run it on "
                             "one model of the fleet")
        return run_fleet(args.recipe, args.models, args.output, jobs=args.jobs, ray=args.ray,
                         as_json=args.json, options={"verify": args.verify, "isolation": isolation,
                                                     "force": args.force},
                         quiet=not getattr(args, "verbose", False))
    if args.ray is not None or args.jobs != 1:
        raise UsageError("--jobs and --ray are for fleets; give several models and -o OUTDIR/")
    if args.html and args.plan:
        raise UsageError("--plan writes nothing; drop --html (or --plan)")
    source = args.models[0]
    progress = None if args.json else _Progress("apply")
    after: list[Any] = []
    options = {**isolation, "deep": True} if args.html else isolation  # the page's colours
    result = _advised(apply_one(recipe, source, args.output, plan=args.plan, verify=args.verify,
                                isolation=options, progress=progress, force=args.force,
                                done=after.append), args)
    if args.json:
        data = stamp("apply", {"model": source,
                               "output": None if args.plan or not result.ok else args.output,
                               **result.to_json()})
        _out(json.dumps(data, indent=2))
    else:
        _print_text(result, args.output, args.plan)
    if args.html and after:
        from ..cli_html import _write_html
        from ..cli_io import _load

        steps = "\n".join(f"step {s.step.number} {s.step.verb}: {_summary(s.result)}"
                          for s in result.steps if s.step.verb != "verify")
        report = result.reports[-1][1] if result.reports else None
        _write_html(_load(source), after[0], args.html, args, summary=steps, report=report)
    return EXIT_OK if result.ok or args.plan else EXIT_FAILED


def _advised(result: ApplyResult, args: argparse.Namespace) -> ApplyResult:
    """``result`` with every checkpoint's inconclusive advice in apply's own flags."""
    from dataclasses import replace

    from ..cli_flags import advised

    steps = tuple(s if s.report is None else replace(s, report=advised(s.report, args))
                  for s in result.steps)
    return replace(result, steps=steps,
                   reports=tuple((n, advised(r, args)) for n, r in result.reports))


def to_yaml(recipe: Recipe) -> str:
    """The recipe as YAML: one step per line, its keys in flow style."""
    import yaml

    data = recipe.to_data()
    head = {k: v for k, v in data.items() if k != "steps"}
    text = yaml.safe_dump(head, sort_keys=False, allow_unicode=True)
    lines = [text.rstrip("\n"), "steps:"]
    for step in data["steps"]:
        body = yaml.safe_dump(step, default_flow_style=True, sort_keys=True, width=10**6,
                              allow_unicode=True).strip()
        lines.append(f"  - {body[1:-1] if body.startswith('{') else body}")
    return "\n".join(lines) + "\n"


def _stored_recipe(proto: Any, source: str) -> Recipe | None:
    """The recipe recorded in ``proto`` by the ``apply`` that wrote it (None: none, or one
    whose text no longer matches its sha256 or no longer reads)."""
    import hashlib

    from .apply import recorded_recipe
    from .format import RecipeError, parse_recipe

    found = recorded_recipe(proto)
    if found is None or hashlib.sha256(found[0].encode()).hexdigest() != found[1]:
        return None
    try:
        return parse_recipe(json.loads(found[0]), source=f"{source} (its recorded recipe)")
    except (ValueError, RecipeError):
        return None


def cmd_recipe(args: argparse.Namespace) -> int:
    """``onnxsurgeon recipe MODEL``: print the recipe that replays its rewrite log (steps the
    log cannot say, such as a merge's second model, come from the recipe recorded by the
    ``apply`` that made the model)."""
    from ..cli_io import _load, _out
    from ..record import records
    from .fromlog import recipe_from_log

    model = _load(args.model)
    recipe = recipe_from_log(records(model.proto), source=args.model,
                             stored=_stored_recipe(model.proto, args.model))
    if args.json:   # a stamped document that is itself a recipe (parse_recipe skips the stamp)
        _out(json.dumps(stamp("recipe", {"model": args.model, **recipe.to_data()}), indent=2))
    else:
        _out(to_yaml(recipe))
    return EXIT_OK


def emit_error(text: str) -> None:
    """One error line on stderr, as the CLI writes it."""
    sys.stderr.write(f"onnxsurgeon: error: {text}\n")
