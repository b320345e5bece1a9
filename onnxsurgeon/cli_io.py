"""What the CLI reads and writes around a command: stdout/stderr (results, warnings, progress,
verification reports), exit codes, and models loaded and saved with the checker guarantee."""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .errors import UsageError

EXIT_OK, EXIT_VERIFY_FAILED, EXIT_BAD_INPUT, EXIT_INTERNAL = 0, 1, 2, 3
EXIT_PIPE = 141
"""Standard output closed early by its reader (``| head``): 128 + SIGPIPE, as a shell reports."""


def _out(text: str) -> None:
    sys.stdout.write(text + ("" if text.endswith("\n") else "\n"))


def _warn(text: str) -> None:
    sys.stderr.write(f"onnxsurgeon: warning: {text}\n")


class _Progress:
    """A one-line progress bar on stderr, drawn only when stderr is a terminal."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.enabled = sys.stderr.isatty()
        self.drawn = False

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled or total <= 1:
            return
        width = 30
        filled = width * done // total
        sys.stderr.write(f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
        self.drawn = True
        if done >= total:
            sys.stderr.write("\n")
            self.drawn = False


def _print_report(report: Any, as_json: bool) -> None:
    """A verification report: JSON, a rich table on a terminal, else the plain table."""
    if as_json:
        from .cli_output import verify_json

        _out(json.dumps(verify_json(report), indent=2))
        return
    table = report.rich_table() if sys.stdout.isatty() else None
    if table is None or (report.deep is not None and report.deep.forced):
        _out(report.to_text())
        return
    from rich.console import Console

    console = Console()
    for name, text in report.inputs.items():
        console.print(f"input {name}: {text}", markup=False, highlight=False)
    console.print(table)
    if report.deep is not None:
        console.print(report.deep.summary(), markup=False, highlight=False)
    if report.divergence is not None:
        console.print(report.divergence.to_text(), markup=False, highlight=False)
    for note in report.notes:
        console.print(f"note: {note}", markup=False, highlight=False)


def _exit_code(report: Any, args: argparse.Namespace) -> int:
    """0 for pass; 1 for fail; 1 for inconclusive (one line on stderr saying why and what to
    do) unless --allow-inconclusive (0 and a warning)."""
    if report.verdict == "pass":
        return EXIT_OK
    if report.verdict == "inconclusive":
        if getattr(args, "allow_inconclusive", False):
            _warn(f"{report.reason or 'inconclusive'} (allowed by --allow-inconclusive)")
            return EXIT_OK
        sys.stderr.write(f"onnxsurgeon: {report.reason or 'inconclusive'}\n")
    return EXIT_VERIFY_FAILED


def _check_paths(model: str, output: str, force: bool = False) -> None:
    from .outfile import check_overwrite

    src, dst = Path(model), Path(output)
    if dst.exists() and src.exists() and os.path.samefile(src, dst):
        raise UsageError(f"output '{output}' is the input model; choose another -o path")
    check_overwrite(output, force=force)


@contextlib.contextmanager
def _paused_gc(pause: bool = True) -> Iterator[None]:
    """Cyclic garbage collection off (when ``pause``) for a load -> rewrite -> save: those make
    10^5-10^6 long-lived objects and no garbage cycles to speak of, and each full collection
    walks them all (~15% of a 90k-node copy, ~5% of a reroute). The CLI owns the process;
    collection resumes afterwards (verification, drawing)."""
    enabled = gc.isenabled()
    if not pause:
        yield
        return
    if enabled and _FROZEN:
        gc.unfreeze()  # what an earlier pause froze is the collector's again (a later pass)
        _FROZEN.clear()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            # what the pause made is long-lived: frozen, the collector's next pass does not
            # walk it all (its youngest generation holds every object made since the pause:
            # ~0.015 s on a 90k-node graph); the next pause gives it back
            gc.freeze()
            _FROZEN.append(True)
            gc.enable()


_FROZEN: list[bool] = []
"""Non-empty once a pause froze what it made (the next pause unfreezes; a process whose pauses
never froze anything keeps what it froze itself)."""


def _load(path: str, *, unsorted_functions: bool = False, light: bool = False) -> Any:
    """``light``: heavy inline weights stay in the file (``verify``'s models, which are only run
    and read: :func:`onnxsurgeon.verify.light.load_light`)."""
    from .cli_noise import phase
    from .io import load

    with phase(f"loading {path}"):
        if light:
            from .verify.light import load_light

            model = load_light(path)
        else:
            model = load(path, unsorted_functions=unsorted_functions)
    for w in model.warnings:
        _warn(w)
    return model


def _node_count(model: Any, limit: int) -> int:
    """Nodes of ``model`` including nested bodies, counted up to just past ``limit``."""
    from .checking import node_count
    from .io import as_model

    return node_count(as_model(model).proto, limit)


def _write(model: Any, output: str, source: str, *, share_data: bool = False,
           check: str = "touched", journal: Any = None) -> None:
    """Save atomically with the CLI's checker guarantee (``Check.TOUCHED``: the full check up to
    FULL_CHECK_MAX_NODES nodes; above, the checks of what the verb touched, or the plain check
    when those cannot vouch for the model; ``check``: a :class:`Check` value, the ``--check``
    flag; ``journal``: the verb's edits, from its session); a file that fails while the input
    ``source`` passes is removed and reported as an internal error (exit 3)."""
    from .checking import Check
    from .io import Model, as_model, save

    m = as_model(model)
    if m.source is None:  # a bare proto: compare a failing output with the given source file
        m = Model(m.proto, base_dir=m.base_dir, source=Path(source))
    seen = len(m.warnings)
    save(m, output, check=Check(check), share_data=share_data, journal=journal)
    for w in m.warnings[seen:]:
        _warn(w)


def _framework_step(args: argparse.Namespace, phase: str) -> Any:
    """A framework step: its log noise captured (shown with -v), its phase named on a terminal."""
    from .cli_noise import framework_step

    return framework_step(phase, verbose=bool(getattr(args, "verbose", False)))


def _isolation(args: argparse.Namespace) -> dict[str, Any]:
    """The isolation keyword options the flags ask for ({} when none is given: in-process)."""
    isolate = bool(getattr(args, "isolate", False))
    timeout, memory = getattr(args, "timeout", None), getattr(args, "memory_limit", None)
    if not isolate and timeout is None and memory is None:
        return {}
    return {"isolate": True, "timeout": timeout, "memory_limit": memory}


def _ranges(args: argparse.Namespace) -> dict[str, tuple[float, float]] | None:
    return dict(getattr(args, "ranges", None) or []) or None
