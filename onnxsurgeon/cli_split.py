"""``split MODEL -o DIR --stages N``: the stages as files in DIR and ``DIR/manifest.json``."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from .errors import UsageError

MANIFEST = "manifest.json"


def add_split_parser(sub: Any, dim: Any) -> None:
    """The ``split`` command's parser (``dim`` parses NAME=SIZE)."""
    from .cli_flags import ListAction

    p = sub.add_parser("split", help="cut a model into N stages that run in order (pipeline "
                                     "parallelism, memory limits): DIR/stage_K.onnx + manifest")
    p.add_argument("model", metavar="MODEL", help="input .onnx file (never modified)")
    p.add_argument("-o", "--output", required=True, metavar="DIR",
                   help="folder for stage_0.onnx ... and manifest.json (created; other files "
                        "in it are refused)")
    p.add_argument("--stages", type=int, default=None, metavar="N",
                   help="the number of stages (>= 2)")
    p.add_argument("--by", choices=["flops", "params", "activations"], default="flops",
                   help="the cost the stages balance (default flops); among balanced cuts the "
                        "one with the fewest bytes crossing it is taken")
    p.add_argument("--at", action=ListAction, default=[], metavar="T[,T...]",
                   help="cut right after the nodes computing these tensors (any selector), in "
                        "node order: len + 1 stages")
    p.add_argument("--dim", dest="dims", action=ListAction, item=dim, nargs="+", default=[],
                   metavar="NAME=SIZE", help="the size of a symbolic dimension for the costs")
    p.add_argument("--json", action="store_true", help="the manifest on stdout")
    from .cli_parser import _add_verify_flag

    _add_verify_flag(p)


def check_folder(folder: Path) -> None:
    """Refuse ``-o`` when it is a file, or a folder holding other files than a split's."""
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"-o '{folder}' is a file; give a folder for the stages")
    if folder.is_dir():
        alien = sorted(p.name for p in folder.iterdir()
                       if not (p.name == MANIFEST or p.name.startswith("stage_")))
        if alien:
            raise UsageError(f"folder '{folder}' holds '{alien[0]}', not a split; choose an "
                             "empty or new folder for -o")


def write_stages(result: Any, folder: Path, source: str, output: str | None = None) -> dict[str, Any]:
    """Write each stage of ``result`` (a :class:`~onnxsurgeon.surgery.SplitResult`) to
    ``folder/stage_K.onnx`` (checked, atomic; external data streamed from ``source``'s files),
    then ``folder/manifest.json``; returns the manifest (the ``split`` command's ``--json``;
    ``output``: the folder as the user wrote it, for the manifest)."""
    from .atomic import file_mode
    from .cli_io import _write
    from .schema import stamp

    folder.mkdir(parents=True, exist_ok=True)
    files = [f"stage_{k}.onnx" for k in range(len(result.stages))]
    for name, stage in zip(files, result.stages, strict=True):
        _write(stage.model, str(folder / name), source, check="full")
    manifest = stamp("split", {"model": source, "output": output or str(folder),
                               **result.manifest(files)})
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".manifest.", suffix=".tmp")
    os.fchmod(fd, file_mode())
    with os.fdopen(fd, "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
    os.replace(tmp, folder / MANIFEST)
    return manifest


def _cmd_split(args: argparse.Namespace) -> int:
    from .cli_io import EXIT_OK, _load, _out
    from .cli_output import verify_json
    from .schema import stamp
    from .surgery.split import SplitBy, split

    folder = Path(args.output)
    check_folder(folder)
    if args.stages is not None and args.stages < 2:
        raise UsageError("--stages takes a whole number >= 2")
    model = _load(args.model)
    result = split(model, stages=args.stages, by=SplitBy(args.by), at=args.at,
                   dims=dict(args.dims))
    code, report = EXIT_OK, None
    if args.verify:
        from .cli_flags import advised, verify_options
        from .cli_io import _exit_code, _isolation
        from .verify.split import verify_split

        report = advised(verify_split(model, [s.model for s in result.stages],
                                      deep=bool(args.verify_deep), **verify_options(args),
                                      **_isolation(args)), args)
        if not args.json:
            _out(report.to_text(deep_table=False))
        code = _exit_code(report, args)
        if code != EXIT_OK:
            if args.json:
                _out(json.dumps(stamp("split", {"model": args.model, "output": None,
                                                **result.manifest([]),
                                                "verify": verify_json(report)}), indent=2))
            sys.stderr.write(f"onnxsurgeon: nothing written to {folder} (--verify did not pass)\n")
            return code
    manifest = write_stages(result, folder, args.model, args.output)
    files = [s["file"] for s in manifest["stages"]]
    if args.json:
        shown = manifest if report is None else {**manifest, "verify": verify_json(report)}
        _out(json.dumps(shown, indent=2))
    else:
        costs = ", ".join(str(s.cost) for s in result.stages)
        _out(f"split into {len(files)} stages ({args.by}: {costs}; crossing "
             f"{', '.join(map(str, result.crossing_bytes))} bytes) -> {folder}/")
    return EXIT_OK
