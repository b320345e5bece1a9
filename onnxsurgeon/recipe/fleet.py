"""Fleets: one recipe on many models, in parallel processes or as Ray tasks.

Every model is one task, :func:`onnxsurgeon.recipe.command.run_task`: load, apply, checked save
to ``OUTDIR/<model file name>``, and one JSON line saying what happened. Locally each task runs in
its own child process (``python -m onnxsurgeon.recipe.fleet``), at most ``jobs`` at a time, so a
model that crashes or exhausts memory takes only its own process down. With Ray the same
function runs as a Ray task (:mod:`onnxsurgeon.cluster`: a private local instance, or a cluster
whose workers see the same paths, a shared filesystem). A failed model never stops the others;
the fleet's exit code is 1 when any failed. The lines come out in the order the models were
given (each as soon as every model before it is done), each with its ``index`` there.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from ..errors import UsageError

Task = tuple[str, str]
"""(source model, output path), both absolute."""


def plan_outputs(sources: Sequence[str], outdir: str, *, make: bool = True) -> list[Task]:
    """One output path per source in ``outdir`` (created if missing and ``make``; its parent
    must exist).

    Raises:
        UsageError: two sources share a file name, or the folder cannot be made.
    """
    folder = Path(outdir)
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"-o {outdir}: a fleet writes into a folder, and this is a file; give "
                         "a folder path ending in '/'")
    if not folder.parent.is_dir():
        raise UsageError(f"output folder '{folder.parent}' does not exist; create it first")
    seen: dict[str, str] = {}
    tasks: list[Task] = []
    for src in sources:
        name = Path(src).name
        if name in seen:
            raise UsageError(f"models '{seen[name]}' and '{src}' have the same file name "
                             f"'{name}' and would overwrite each other in {outdir}; rename one")
        seen[name] = src
        tasks.append((os.path.abspath(src), os.path.abspath(folder / name)))
    if make:
        folder.mkdir(exist_ok=True)
    return tasks


def _child(recipe: str, task: Task, options: dict[str, Any]) -> dict[str, Any]:
    """Run one task in a fresh child process; a crash becomes a ``failed`` line."""
    src, out = task
    cmd = [sys.executable, "-m", "onnxsurgeon.recipe.fleet", recipe, src, out, json.dumps(options)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode == 0 and lines:
        line: dict[str, Any] = json.loads(lines[-1])
        return line
    tail = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
    why = (f"the worker process died (signal {-proc.returncode})" if proc.returncode < 0
           else f"the worker process failed: {tail}")
    return {"model": src, "output": None, "status": "failed", "error": why[:500],
            "seconds": round(time.perf_counter() - start, 3)}


def run_local(recipe: str, tasks: Sequence[Task], options: dict[str, Any], *,
              jobs: int) -> Iterator[tuple[int, dict[str, Any]]]:
    """Each task in its own child process, ``jobs`` at a time; ``(task number, line)`` in
    completion order."""
    with ThreadPoolExecutor(max_workers=min(jobs, len(tasks))) as pool:
        futures = {pool.submit(_child, recipe, task, options): k for k, task in enumerate(tasks)}
        for future in as_completed(futures):
            yield futures[future], future.result()


def run_ray(recipe: str, tasks: Sequence[Task], options: dict[str, Any], *,
            address: str | None, jobs: int,
            quiet: bool = False) -> Iterator[tuple[int, dict[str, Any]]]:
    """Each task as a Ray task (:func:`onnxsurgeon.cluster.ray_map`; ``quiet`` keeps Ray's log
    lines off stderr); ``(task number, line)`` in completion order. A task Ray could not run
    is that model's ``failed`` line.

    Raises:
        ClusterError: Ray cannot start or reach ``address`` (nothing has run).
    """
    from ..cluster import ray_map
    from .command import run_task

    def failed(k: int, reason: str) -> dict[str, Any]:
        return {"model": tasks[k][0], "output": None, "status": "failed", "error": reason,
                "seconds": 0.0}

    args = [(recipe, src, out, options) for src, out in tasks]
    yield from ray_map(run_task, args, address=address, cpus=jobs, quiet=quiet, failed=failed)


def in_input_order(lines: Iterable[tuple[int, dict[str, Any]]]) -> Iterator[dict[str, Any]]:
    """The lines of ``(task number, line)`` pairs arriving in any order, each as soon as every
    earlier task's line is out (task numbers 0, 1, 2, ... each once), with ``index`` set."""
    waiting: dict[int, dict[str, Any]] = {}
    upto = 0
    for k, line in lines:
        waiting[k] = {**line, "index": k}
        while upto in waiting:
            yield waiting.pop(upto)
            upto += 1
    yield from (waiting[k] for k in sorted(waiting))  # only if a task number was skipped


def _table(lines: Sequence[dict[str, Any]]) -> str:
    rows = [("model", "status", "seconds", "output / error")]
    for line in lines:
        rows.append((Path(line["model"]).name, line["status"], f"{line.get('seconds', 0):.2f}",
                     line.get("output") or line.get("error", "")))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(r[:3], widths, strict=True)) + "  " + r[3]
        for r in rows)


def run_fleet(recipe: str, sources: Sequence[str], outdir: str, *, jobs: int = 1,
              ray: str | None = None, as_json: bool = False, options: dict[str, Any],
              out: Callable[[str], None] | None = None, quiet: bool = False) -> int:
    """The fleet command: run, print one JSON line per model (``as_json``; in the order of
    ``sources``, each with its ``index`` there, as soon as the models before it are done) or a
    progress bar and a summary table; 0 when every model succeeded, else 1. ``ray`` is None
    (local processes), "" (a private local Ray instance) or a cluster address; ``quiet`` keeps
    Ray's own log lines off stderr.

    Raises:
        UsageError: see :func:`plan_outputs`. ClusterError: Ray cannot start or reach ``ray``.
    """
    from ..cli_io import _out, _Progress
    from ..schema import stamp

    write = out or _out
    tasks = plan_outputs(sources, outdir, make=False)
    recipe_path = os.path.abspath(recipe)
    done: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        if ray is not None:  # connected before the folder is made: a refusal leaves nothing
            from ..cluster import connected

            stack.enter_context(connected(ray or None, jobs, quiet=quiet))
            lines = run_ray(recipe_path, tasks, options, address=ray or None, jobs=jobs,
                            quiet=quiet)
        else:
            lines = run_local(recipe_path, tasks, options, jobs=jobs)
        plan_outputs(sources, outdir)
        progress = _Progress("apply") if not as_json else None
        for line in in_input_order(_counted(lines, progress, len(tasks))):
            done.append(line)
            if as_json:
                write(json.dumps(stamp("apply", line), sort_keys=True))
    failed = sum(1 for ln in done if ln["status"] != "ok")
    if not as_json:
        write(_table(done))
        write(f"{len(done) - failed} of {len(done)} models ok" + (f", {failed} failed" if failed else ""))
    return 1 if failed else 0


def _counted(lines: Iterable[tuple[int, dict[str, Any]]], progress: Callable[[int, int], None] | None,
             total: int) -> Iterator[tuple[int, dict[str, Any]]]:
    """``lines`` passed on, the progress bar advanced as each model finishes (in any order)."""
    for count, item in enumerate(lines, 1):
        if progress is not None:
            progress(count, total)
        yield item


def main(argv: Sequence[str] | None = None) -> int:
    """Child entry point: ``RECIPE SRC OUT OPTIONS_JSON`` -> one JSON line on stdout."""
    from .command import run_task

    recipe, src, out, options = list(argv if argv is not None else sys.argv[1:])
    sys.stdout.write(json.dumps(run_task(recipe, src, out, json.loads(options)), sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":  # pragma: no cover - run as the fleet's child process
    sys.exit(main())
