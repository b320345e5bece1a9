"""The pictures the CLI draws: ``--html`` of a rewriting verb and ``diff``'s page (coloured by a
verification when there is one), and the checks on the page's path."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from .cli_io import _isolation
from .errors import SurgeryError, UsageError


def _drawn_model(args: argparse.Namespace) -> str:
    """The model a page is titled by: diff's AFTER, else the (first) input model."""
    if args.command == "diff":
        return str(args.after)
    return str(getattr(args, "model", None) or args.models[0])


def _check_html_path(args: argparse.Namespace) -> None:
    """The page (``--html``, or diff's ``-o``) must not overwrite a model; its folder must exist."""
    page = args.output if args.command == "diff" else getattr(args, "html", None)
    if not page:
        return
    models = [getattr(args, k, None) for k in ("model", "second", "before", "after")]
    models += list(getattr(args, "models", None) or [])
    if args.command != "diff":
        models.append(getattr(args, "output", None))
    for path in filter(None, models):
        same = os.path.abspath(path) == os.path.abspath(page) or (
            Path(path).exists() and Path(page).exists() and os.path.samefile(path, page))
        if same:
            raise UsageError(f"the HTML page '{page}' would overwrite the model '{path}'; "
                             "choose another path")
    folder = Path(page).parent
    if not folder.is_dir():
        raise UsageError(f"folder '{folder}' of the HTML page does not exist; create it first")


def _input_as_it_was(args: argparse.Namespace) -> Any:
    """The rewriting command's input, parsed only (its load validated it, and it is never
    modified): a page reads nodes and types, never weights."""
    from .io import Model, parse_model

    return Model(parse_model(Path(args.model).read_bytes(), args.model))


def page_tensors(args: argparse.Namespace, model: Any) -> frozenset[str] | bool:
    """What ``--verify`` compares layer by layer for ``--html``: the tensors the page will draw
    (a cost bounded by the drawing, not the model); False without ``--html``."""
    if not getattr(args, "html", None):
        return False
    from .diff import diff_models
    from .io import as_model

    drawn = diff_models(_input_as_it_was(args).proto, as_model(model).proto, context=args.context)
    return frozenset(e.tensor for e in drawn.edges if e.change.value != "removed")


def _html_of(args: argparse.Namespace, model: Any, summary: str, report: Any) -> None:
    """``--html``: draw the rewrite, coloured by the verification when there was one."""
    if getattr(args, "html", None):
        from .io import as_model

        _write_html(_input_as_it_was(args), as_model(model), args.html, args, summary=summary,
                    report=report)


def _write_html(before: Any, after: Any, path: str, args: argparse.Namespace, *, summary: str,
                report: Any = None, deep: Any = None) -> None:
    from .diff import diff_models, render_html
    from .diff.output import errors_from_report, write_page

    errors: dict[str, Any] = {}
    divergent = ""
    if report is not None:
        errors, divergent = errors_from_report(report, deep)
    before, after = before.proto, after.proto
    if report is not None:
        summary = f"{summary}\nverify: {report.summary()}".strip()
    drawn = diff_models(before, after, context=args.context, include=[divergent] if divergent else [])
    page = render_html(drawn,
                       title=f"onnxsurgeon {args.command}: {Path(_drawn_model(args)).name}",
                       summary=summary, errors=errors, divergent=divergent)
    write_page(page, path)


def _deep_for_page(before: Any, after: Any, args: argparse.Namespace, *, replay: bool) -> Any:
    """With diff --verify: the layer-wise comparison the page colours its tensors by (the
    verdict stays that of the verification). It compares every tensor ``after`` shares with
    ``before`` or, with ``replay`` (``after`` records rewrites since ``before``), with ``before``
    after those rewrites are replayed on it -- so a tampered tensor shows, not the rewrite's own
    intended change. None when the replay or the run is impossible."""
    from .io import Model
    from .record import records
    from .verify import compare
    from .verify.log import replay as replay_record

    reference = before
    if replay:
        proto = type(before.proto)()
        proto.CopyFrom(before.proto)
        reference = Model(proto, base_dir=before.base_dir)
        try:
            for record in records(after.proto)[len(records(before.proto)):]:
                replay_record(reference, record)
        except SurgeryError:
            return None
    try:
        from .cli_flags import verify_options

        return compare(reference, after, deep=True, locate_divergence=False,
                       **verify_options(args), **_isolation(args)).deep
    except SurgeryError:
        return None
