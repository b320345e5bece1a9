"""The ``onnxsurgeon`` command line. Parses, calls one library function, prints.

Exit codes: 0 success; 1 verification failed; 2 bad input or usage (one line on stderr naming the
problem and the fix, no output file left behind); 3 internal error (a bug: please report it; set
ONNXSURGEON_DEBUG=1 for the traceback).

Every written model is checked with ``onnx.checker`` before the command succeeds: the full check
(strict shape inference included) when the output has at most :data:`FULL_CHECK_MAX_NODES` nodes
(main graph plus nested If/Loop/Scan bodies); above that, the plain structural check only (SSA,
topological order, scoping, op schemas), because full inference over a large graph costs several
times the whole surgery.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from .checking import FULL_CHECK_MAX_NODES as FULL_CHECK_MAX_NODES
from .cli_flags import EXIT_CODES_HELP as EXIT_CODES_HELP
from .cli_flags import HelpFormatter as _HelpFormatter
from .errors import SurgeryError, UsageError

EXIT_OK, EXIT_VERIFY_FAILED, EXIT_BAD_INPUT, EXIT_INTERNAL = 0, 1, 2, 3


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit 2) instead of usage dumps, no abbreviated flags (a
    prefix such as --out is an unknown flag, not --output), defaults shown in --help, and the
    exit codes in every --help."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("epilog", EXIT_CODES_HELP)
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}; see '{self.prog} --help'\n")


def _csv(value: str) -> list[str]:
    items = [v.strip() for v in value.split(",")]
    if not all(items):
        raise argparse.ArgumentTypeError(f"empty name in list {value!r}; separate names with commas")
    return items


def _pair(value: str) -> tuple[str, str]:
    left, sep, right = value.partition("=")
    if not sep or not left or not right:
        raise argparse.ArgumentTypeError(f"expected A=B, got {value!r}")
    return left, right


def _dim(value: str) -> tuple[str, int]:
    name, right = _pair(value)
    if not right.isdigit() or int(right) < 1:
        raise argparse.ArgumentTypeError(f"dimension size must be a positive integer in {value!r}")
    return name, int(right)


def _range(value: str) -> tuple[str, tuple[float, float]]:
    name, sep, bounds = value.rpartition("=")
    lo, comma, hi = bounds.partition(",")
    try:
        low, high = float(lo), float(hi)
    except ValueError:
        comma = ""
    if not comma or (sep and not name) or not low < high:
        raise argparse.ArgumentTypeError(
            f"expected LO,HI or NAME=LO,HI with LO < HI, got {value!r} (negative bounds: "
            "--range=-1,1)")
    return (name if sep else "*"), (low, high)


def _add_input_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--range", dest="ranges", type=_range, action="append", default=[],
                   metavar="[NAME=]LO,HI",
                   help="draw random inputs uniform in [LO,HI) (default [-1,1) for floats); "
                        "NAME= for one input (integers too, e.g. token ids); repeatable")
    p.add_argument("--allow-inconclusive", action="store_true",
                   help="exit 0 (with a warning) when nothing compared could show a difference")


def _add_model_io(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", metavar="MODEL", help="input .onnx file (never modified)")
    _add_output(p)
    _add_share_data_flag(p)


def _add_output(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", required=True, metavar="OUT",
                   help="output .onnx file (written atomically; an existing file that is not "
                        "an ONNX model is refused unless --force)")
    p.add_argument("--force", action="store_true",
                   help="overwrite OUT even when it exists and is not an ONNX model")


def _add_share_data_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--share-data", action="store_true",
                   help="the output reads the input's external data file(s) in place instead of "
                        "a copy (OUT must be in the input's folder or a folder above it; the "
                        "output then needs those files, unchanged)")


def _positive_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if not number > 0 or number == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {value!r}")
    return number


def _positive_count(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {value!r}")
    return int(value)


def _positive_int(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number of MB, got {value!r}")
    return int(value)


def _add_isolation_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--isolate", action="store_true",
                   help="run onnxruntime in a child process with time and memory limits "
                        "(for untrusted models)")
    p.add_argument("--timeout", type=_positive_float, default=None, metavar="S",
                   help="with --isolate: seconds one load or run may take (default 30; implies "
                        "--isolate)")
    p.add_argument("--memory-limit", type=_positive_int, default=None, metavar="MB",
                   help="with --isolate: address space of the child process in MB (default "
                        "4096; implies --isolate)")


def _add_verify_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--verify", action="store_true",
                   help="check this rewrite's invariant with onnxruntime before writing (exit 1 "
                        "and nothing written if it fails or is inconclusive)")
    _add_isolation_flags(p)
    _add_input_flags(p)


def _context(value: str) -> int:
    if not value.isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number of hops >= 0, got {value!r}")
    return int(value)


def _add_context_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--context", type=_context, default=2, metavar="K",
                   help="hops of unchanged neighbours drawn around the changes (default 2)")


def _add_html_flag(p: argparse.ArgumentParser) -> None:
    """``--html FILE`` (+ ``--context K``): every rewriting verb draws what it did."""
    p.add_argument("--html", metavar="FILE.html",
                   help="also write a self-contained HTML picture of this rewrite")
    _add_context_flag(p)


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of every command (the public CLI contract)."""
    parser = _Parser(
        prog="onnxsurgeon",
        description="Cut, copy and splice ONNX models; prove the result with onnxruntime.",
    )
    from . import __version__

    parser.add_argument("--version", action="version", version=f"onnxsurgeon {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="show the log output of TensorFlow, PyTorch and their exporters "
                             "(captured and hidden by default)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p = sub.add_parser("inspect", help="inputs, outputs, opsets, op histogram, weights")
    p.add_argument("model", metavar="MODEL", help="the .onnx file")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--around", metavar="T",
                   help="the neighbourhood of tensor T (its producer, readers and --context hops; "
                        "any selector); narrows --nodes/--tensors too")
    p.add_argument("--html", metavar="FILE.html", help="with --around: draw it as an HTML page")
    _add_context_flag(p)
    from .cli_inspect import add_listing_flags

    add_listing_flags(p)

    p = sub.add_parser("extract", help="the dependency closure of tensors as a standalone model")
    _add_model_io(p)
    p.add_argument("--outputs", type=_csv, required=True, metavar="T[,T...]",
                   help="tensors to extract (ONNX, TF ':0', node name or torch module path)")
    p.add_argument("--inputs", "--stop-at", dest="inputs", type=_csv, default=[],
                   metavar="T[,T...]",
                   help="stop tensors: the cut, they become graph inputs (any selector)")
    _add_verify_flag(p)
    _add_html_flag(p)
    p.add_argument("--json", action="store_true", help="machine-readable result on stdout")

    p = sub.add_parser("copy", help="duplicate the closure of tensors inside the model")
    _add_model_io(p)
    p.add_argument("--outputs", type=_csv, required=True, metavar="T[,T...]",
                   help="tensors whose closure is copied (ONNX, TF ':0', node name or torch "
                        "module path); each copy becomes a new graph output")
    p.add_argument("--weights", choices=["independent", "shared"], default="independent",
                   help="independent: the copy gets its own initializers; shared: it reads the "
                        "original's")
    p.add_argument("--prefix", default="copy/", metavar="P", help="name prefix of the copy")
    p.add_argument("--replace-input", type=_pair, action="extend", nargs="+", default=[],
                   metavar="A=B", help="the copy reads B wherever the original read A "
                                       "(several pairs, or the flag repeated)")
    _add_verify_flag(p)
    _add_html_flag(p)
    p.add_argument("--json", action="store_true", help="print the rename map")

    p = sub.add_parser("insert", help="splice a processing block in at a tensor")
    _add_model_io(p)
    p.add_argument("--at", required=True, metavar="T",
                   help="the activation to process (ONNX, TF ':0', node name or torch module path)")
    group = p.add_mutually_exclusive_group(required=True)
    from .processing import blocks_help

    group.add_argument("--op", metavar="NAME[:k=v,...]",
                       help="built-in block, parameters after ':' separated by ',', list values "
                            "by '|' (reduce_mean:axes=2|3,keepdims=0). Blocks: "
                            + blocks_help().replace("%", "%%"))
    group.add_argument("--graph", metavar="FILE.onnx", help="any one-input one-output ONNX model")
    group.add_argument("--func", metavar="FILE.py:NAME",
                       help="a TensorFlow or PyTorch function (imports and runs FILE.py: your own code)")
    p.add_argument("--framework", choices=["tf", "torch"], help="framework of --func")
    p.add_argument("--as-output", action="store_true",
                   help="reroute nothing; the processed tensor becomes a new graph output")
    p.add_argument("--rename-output", action="store_true",
                   help="when --at is a graph output, give the processed tensor a new name and "
                        "rename that graph output too (default: the graph output keeps its name "
                        "and the unprocessed tensor is renamed '<at>/pre_<block>')")
    _add_verify_flag(p)
    _add_html_flag(p)
    p.add_argument("--json", action="store_true", help="machine-readable result on stdout")

    p = sub.add_parser("reroute", help="consumers of A read B instead")
    _add_model_io(p)
    p.add_argument("--from", dest="source", required=True, metavar="A",
                   help="the tensor whose readers move (any selector)")
    p.add_argument("--to", dest="target", required=True, metavar="B",
                   help="the tensor they read instead (any selector)")
    p.add_argument("--consumers", type=_csv, default=None, metavar="NODE[,NODE...]",
                   help="only these readers of A: node names, torch module paths (the module's "
                        "nodes that read A) or tensors (their producer) (default: every reader "
                        "and graph output)")
    p.add_argument("--prune", action="store_true",
                   help="remove the nodes (and initializers) no graph output depends on any more")
    _add_verify_flag(p)
    _add_html_flag(p)
    p.add_argument("--json", action="store_true", help="machine-readable result on stdout")

    p = sub.add_parser("rename", help="rename tensors (or nodes) keeping every reader and output")
    _add_model_io(p)
    p.add_argument("--map", type=_pair, action="extend", nargs="+", default=[], metavar="OLD=NEW",
                   help="old name (any selector) -> new name (several pairs, or the flag repeated)")
    p.add_argument("--regex", type=_pair, action="extend", nargs="+", default=[],
                   metavar="PATTERN=REPLACEMENT",
                   help="re.sub over every other name (split at the first '='; \\1 for groups)")
    p.add_argument("--nodes", action="store_true", help="rename node names instead of tensors")
    _add_verify_flag(p)
    _add_html_flag(p)
    p.add_argument("--json", action="store_true", help="machine-readable result on stdout")

    p = sub.add_parser("bypass", help="remove a node; its readers read its input")
    _add_model_io(p)
    p.add_argument("--node", type=_csv, action="extend", required=True, metavar="NAME[,NAME...]",
                   help="node(s) to remove (a chain may be given at once)")
    p.add_argument("--input", type=int, default=0, metavar="K",
                   help="which input the readers read instead (default 0)")
    _add_verify_flag(p)
    _add_html_flag(p)
    p.add_argument("--json", action="store_true", help="machine-readable result on stdout")

    p = sub.add_parser("merge", help="put SECOND behind FIRST: SECOND's inputs read FIRST's tensors")
    p.add_argument("model", metavar="FIRST", help="the model that runs first (never modified)")
    p.add_argument("second", metavar="SECOND", help="the model that runs second (never modified)")
    _add_output(p)
    _add_share_data_flag(p)
    p.add_argument("--connect", type=_pair, action="extend", nargs="+", required=True,
                   metavar="FIRST_OUT=SECOND_IN",
                   help="SECOND_IN reads FIRST's tensor FIRST_OUT (several pairs, or the flag repeated)")
    p.add_argument("--prefix", default=None, metavar="P",
                   help="prefix for SECOND's names that collide with FIRST's (default: SECOND's "
                        "graph name and '/')")
    p.add_argument("--outputs", type=_csv, default=None, metavar="T[,T...]",
                   help="outputs of the merged model (default: SECOND's outputs, then FIRST's "
                        "outputs no connection consumed)")
    _add_verify_flag(p)
    _add_html_flag(p)
    p.add_argument("--json", action="store_true", help="machine-readable result on stdout")

    p = sub.add_parser("verify", help="compare two models numerically with onnxruntime")
    p.add_argument("reference", metavar="REFERENCE", help="the reference .onnx file")
    p.add_argument("candidate", metavar="CANDIDATE", help="the .onnx file checked against it")
    p.add_argument("--pair", type=_pair, action="extend", nargs="+", default=[], metavar="R=C",
                   help="compare reference output R with candidate output C (several pairs, or "
                        "the flag repeated); default: outputs with equal names")
    p.add_argument("--inputs", "--data", dest="inputs", metavar="FILE.npz|DIR",
                   help="input arrays (.npz, one array per graph input) or a folder of them "
                        "(default: seeded random inputs)")
    p.add_argument("--rtol", type=float, default=None,
                   help="relative tolerance (default: by dtype, 1e-4 for float32)")
    p.add_argument("--atol", type=float, default=None,
                   help="absolute tolerance (default: by dtype, 1e-5 for float32)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    p.add_argument("--dim", type=_dim, action="extend", nargs="+", default=[], metavar="NAME=SIZE",
                   help="size of a symbolic dimension (default 1)")
    p.add_argument("--samples", type=_positive_count, default=None, metavar="N",
                   help="random input samples (default 2)")
    _add_input_flags(p)
    p.add_argument("--save-inputs", metavar="FILE.npz",
                   help="write the random inputs used to FILE.npz (replay them with --inputs)")
    p.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="shard the --inputs .npz samples over Ray workers and merge the "
                        "statistics exactly (a local instance, or the cluster at ADDRESS: "
                        "'auto', ray://HOST:10001; needs onnxsurgeon[ray])")
    p.add_argument("--deep", action="store_true",
                   help="compare every tensor both models share, layer by layer, with a "
                        "per-tensor error table")
    p.add_argument("--plot", metavar="FILE.png",
                   help="with --deep: plot the error of every shared tensor against depth")
    p.add_argument("--exact", action="store_true", help="require bit-identical outputs")
    p.add_argument("--against-tf", metavar="SOURCE",
                   help="instead of REFERENCE.onnx, compare CANDIDATE with this TF source "
                        "(.keras, SavedModel dir; REFERENCE is then ignored, pass '-')")
    p.add_argument("--against-torch", metavar="FILE.py:FACTORY",
                   help="compare CANDIDATE with the torch module FACTORY() returns "
                        "(imports and runs FILE.py: your own code; REFERENCE ignored, pass '-')")
    p.add_argument("--rewrite-log", action="store_true",
                   help="check the invariants of the rewrites recorded in CANDIDATE against REFERENCE")
    _add_isolation_flags(p)
    p.add_argument("--json", action="store_true", help="machine-readable result on stdout")

    p = sub.add_parser("convert", help="TensorFlow or PyTorch to ONNX with a name map")
    conv = p.add_subparsers(dest="framework", metavar="FRAMEWORK", parser_class=_Parser)
    c = conv.add_parser("tf", help="Keras model/.keras, SavedModel dir, frozen .pb")
    c.add_argument("source", metavar="SOURCE", help=".keras file, SavedModel folder or frozen .pb")
    _add_output(c)
    c.add_argument("--inputs", "--input", dest="inputs", type=_csv, default=None,
                   metavar="NAME[:SHAPE],...",
                   help="graph inputs with shapes, e.g. input:0:1x8x8x3 (default: the model's "
                        "signature)")
    c.add_argument("--outputs", type=_csv, default=None, metavar="NAME,...",
                   help="TF output tensor names (default: the model's signature)")
    c.add_argument("--opset", type=int, default=None,
                   help="ONNX opset (default: the exporter's choice)")
    c.add_argument("--json", action="store_true", help="machine-readable result on stdout")
    c = conv.add_parser("torch", help="a module returned by FACTORY in FILE.py (imports and runs your code)")
    c.add_argument("source", metavar="FILE.py:FACTORY",
                   help="FACTORY() in FILE.py returns the torch.nn.Module")
    _add_output(c)
    c.add_argument("--input", "--inputs", dest="input", action="extend", nargs="+", required=True,
                   metavar="NAME:SHAPE[:DTYPE]",
                   help="e.g. x:1x3x32x32 or ids:1x8:int64 (several, or the flag repeated)")
    c.add_argument("--exporter", choices=["dynamo", "torchscript"], default="dynamo",
                   help="torch.onnx exporter")
    c.add_argument("--opset", type=int, default=None,
                   help="ONNX opset (default: the exporter's choice)")
    c.add_argument("--json", action="store_true", help="machine-readable result on stdout")

    p = sub.add_parser("diff", help="draw what changed between two models as one HTML page")
    p.add_argument("before", metavar="BEFORE")
    p.add_argument("after", metavar="AFTER")
    p.add_argument("-o", "--output", required=True, metavar="FILE.html", help="the page to write")
    _add_context_flag(p)
    p.add_argument("--verify", action="store_true",
                   help="also compare the models with onnxruntime and colour the drawn tensors by "
                        "their error (exit 1 if they differ)")
    _add_isolation_flags(p)

    sub.add_parser("demo", help="run the whole job on the bundled models and print a report")
    from .recipe.command import add_parsers as add_recipe_parsers

    add_recipe_parsers(sub, _add_isolation_flags)
    return parser


# ------------------------------------------------------------------------------ helpers
def _out(text: str) -> None:
    sys.stdout.write(text + ("" if text.endswith("\n") else "\n"))


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


def _warn(text: str) -> None:
    sys.stderr.write(f"onnxsurgeon: warning: {text}\n")


def _check_paths(model: str, output: str, force: bool = False) -> None:
    from .outfile import check_overwrite

    src, dst = Path(model), Path(output)
    if dst.exists() and src.exists() and os.path.samefile(src, dst):
        raise UsageError(f"output '{output}' is the input model; choose another -o path")
    check_overwrite(output, force=force)


def _load(path: str) -> Any:
    from .io import load

    model = load(path)
    for w in model.warnings:
        _warn(w)
    return model


def _node_count(model: Any, limit: int) -> int:
    """Nodes of ``model`` including nested bodies, counted up to just past ``limit``."""
    from .checking import node_count
    from .io import as_model

    return node_count(as_model(model).proto, limit)


def _write(model: Any, output: str, source: str, *, share_data: bool = False) -> None:
    """Save atomically with the CLI's checker guarantee (``Check.AUTO``: the full check up to
    FULL_CHECK_MAX_NODES nodes, the plain check above); a file that fails while the input
    ``source`` passes is removed and reported as an internal error (exit 3)."""
    from .checking import Check
    from .io import Model, as_model, save

    m = as_model(model)
    if m.source is None:  # a bare proto: compare a failing output with the given source file
        m = Model(m.proto, base_dir=m.base_dir, source=Path(source))
    seen = len(m.warnings)
    save(m, output, check=Check.AUTO, share_data=share_data)
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


def _verify_in_memory(args: argparse.Namespace, model: Any,
                      check: Callable[[Any], Any] | None = None) -> Any:
    """With --verify: the report on the rewritten ``model`` (``check(model)``, by default its
    rewrite log against the input file), printed to stdout (stderr with --json); else None."""
    if not getattr(args, "verify", False):
        return None
    from .io import load
    from .verify import verify_log

    if check is not None:
        report = check(model)
    else:
        report = verify_log(load(args.model), model, ranges=_ranges(args), **_isolation(args))
    if not getattr(args, "json", False):  # with --json the report is embedded in the result
        _out(report.to_text())
    return report


def _html_of(args: argparse.Namespace, model: Any, summary: str, report: Any) -> None:
    """``--html``: draw the rewrite, coloured by the verification when there was one."""
    if getattr(args, "html", None):
        from .io import as_model

        _write_html(_load(args.model), as_model(model), args.html, args,
                    summary=summary, report=report)


def _print_result(command: str, args: argparse.Namespace, payload: dict[str, Any], text: str,
                  report: Any, *, written: bool) -> None:
    """The result of a rewriting command: one JSON object (schema ``command``) with the
    verification embedded, or the summary line."""
    from .cli_output import dump, verify_json

    if args.json:
        _out(dump(command, {"model": args.model, "output": args.output if written else None,
                            **payload, "verify": verify_json(report)}))
    elif written:
        _out(text)


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
        return compare(reference, after, deep=True, locate_divergence=False,
                       **_isolation(args)).deep
    except SurgeryError:
        return None


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
                       title=f"onnxsurgeon {args.command}: {Path(args.model if args.command != 'diff' else args.after).name}",
                       summary=summary, errors=errors, divergent=divergent)
    write_page(page, path)


def _check_html_path(args: argparse.Namespace) -> None:
    """The page (``--html``, or diff's ``-o``) must not overwrite a model; its folder must exist."""
    page = args.output if args.command == "diff" else getattr(args, "html", None)
    if not page:
        return
    models = [getattr(args, k, None) for k in ("model", "second", "before", "after")]
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


# ------------------------------------------------------------------------------ commands
def _cmd_inspect(args: argparse.Namespace) -> int:
    from .cli_inspect import listing_json, listing_text, wants_listing
    from .cli_output import dump
    from .inspect import inspect_model

    if args.around is not None and not args.json and not wants_listing(args):
        return _inspect_around(args)
    if args.html:
        raise UsageError("--html on inspect draws a neighbourhood: add --around TENSOR")
    model = _load(args.model)
    result = inspect_model(model)
    if args.json:
        _out(dump("inspect", {"model": args.model, **result.to_json(), **listing_json(model, args)}))
    else:
        _out(listing_text(model, args) if wants_listing(args) else result.to_text())
    return EXIT_OK


Summary = tuple[dict[str, Any], str]
"""What a rewriting command reports: the JSON payload for ``--json`` (stamped with the command's
schema, see ``onnxsurgeon/schemas/``) and the one-line text."""


def _rewrite(args: argparse.Namespace, command: str, apply: Callable[[Any], Summary],
             check: Callable[[Any], Any] | None = None) -> int:
    """The skeleton every rewriting command shares: refuse ``-o`` onto the input, load (warnings
    on stderr), ``apply`` the verb to the model (it returns the summary); with ``--verify`` check
    it in memory first (``check``, default its rewrite log; nothing is written unless it passes);
    save atomically with the checker guarantee, print the summary (JSON with ``--json``), then
    ``--html`` (coloured by the verification when both are given)."""
    from .io import handed_over

    _check_paths(args.model, args.output, args.force)
    model = handed_over(_load(args.model))  # nothing touches the proto before the verb
    payload, text = apply(model)
    report = _verify_in_memory(args, model, check)
    code = EXIT_OK if report is None else _exit_code(report, args)
    if code != EXIT_OK:
        _print_result(command, args, payload, text, report, written=False)
        sys.stderr.write(f"onnxsurgeon: nothing written to {args.output} (--verify did not pass)\n")
        _html_of(args, model, text, report)
        return code
    _write(model, args.output, args.model, share_data=bool(getattr(args, "share_data", False)))
    _print_result(command, args, payload, text, report, written=True)
    _html_of(args, model, text, report)
    return EXIT_OK


def _inspect_around(args: argparse.Namespace) -> int:
    from .diff import neighbourhood, render_html
    from .diff.output import write_page
    from .index import GraphIndex
    from .select import resolve

    model = _load(args.model)
    tensor = resolve(GraphIndex(model.proto), args.around)
    view = neighbourhood(model.proto, tensor, context=args.context)
    lines = [f"{args.around} = tensor '{tensor}': {len(view.nodes)} nodes within "
             f"{args.context} hops"]
    lines += [f"  {n.op_type} {n.name}: {', '.join(n.inputs)} -> {', '.join(n.outputs)}"
              for n in view.nodes]
    if args.json:
        _out(json.dumps({"tensor": tensor, "nodes": [
            {"name": n.name, "op_type": n.op_type, "inputs": list(n.inputs),
             "outputs": list(n.outputs)} for n in view.nodes]}, indent=2))
    else:
        _out("\n".join(lines))
    if args.html:
        write_page(render_html(view, title=f"onnxsurgeon inspect: {tensor}",
                               summary=lines[0]), args.html)
    return EXIT_OK


def _cmd_diff(args: argparse.Namespace) -> int:
    before, after = _load(args.before), _load(args.after)
    report = deep = None
    if args.verify:
        from . import verify
        from .record import rewrites

        old, new = rewrites(before.proto), rewrites(after.proto)
        if len(new) > len(old) and new[:len(old)] == old:
            report = verify.verify_log(before, after, **_isolation(args))
        else:
            report = verify.compare(before, after, **_isolation(args))
        deep = _deep_for_page(before, after, args, replay=report.kind != "compare")
        _out(report.to_text())
    _write_html(before, after, args.output, args, summary="", report=report, deep=deep)
    _out(f"drew {args.before} -> {args.after} -> {args.output}")
    if report is None:
        return EXIT_OK
    return _exit_code(report, args)


def _cmd_extract(args: argparse.Namespace) -> int:
    from .cli_output import extract_payload
    from .surgery import extract

    def apply(model: Any) -> Summary:
        result = extract(model, args.outputs, inputs=args.inputs)
        return (extract_payload(result),
                f"extracted {result.kept_nodes} nodes (dropped {result.removed_nodes}) -> "
                f"{args.output}")

    return _rewrite(args, "extract", apply)


def _cmd_copy(args: argparse.Namespace) -> int:
    from .cli_output import copy_payload
    from .surgery import Weights, copy

    def apply(model: Any) -> Summary:
        result = copy(model, args.outputs, weights=Weights(args.weights), prefix=args.prefix,
                      replace_inputs=dict(args.replace_input) or None)
        pairs = ", ".join(f"{k} -> {v}" for k, v in result.outputs.items())
        return (copy_payload(result, weights=args.weights, prefix=args.prefix),
                f"copied {len(result.nodes)} nodes, {len(result.initializers)} initializers "
                f"({args.weights} weights): {pairs} -> {args.output}")

    return _rewrite(args, "copy", apply)


def _cmd_insert(args: argparse.Namespace) -> int:
    if args.func and not args.framework:
        raise UsageError("--func needs --framework tf|torch")
    if args.framework and not args.func:
        raise UsageError("--framework goes with --func")

    def apply(model: Any) -> Summary:
        from .cli_output import insert_payload, insert_summary
        from .record import rewrites
        from .surgery import insert

        keep = not args.rename_output
        if args.func:
            from .converters import insert_function

            with _framework_step(args, f"exporting {args.func} with {args.framework}"):
                result = insert_function(model, args.at, args.func, args.framework,
                                         as_output=args.as_output, keep_output_name=keep)
        elif args.graph:
            from .io import load

            result = insert(model, args.at, graph=load(args.graph), as_output=args.as_output,
                            keep_output_name=keep)
        else:
            from .processing import parse_op

            name, params = parse_op(args.op)
            result = insert(model, args.at, op=name, params=params, as_output=args.as_output,
                            keep_output_name=keep)
        at = str(rewrites(model.proto)[-1]["at"])
        block = args.op.partition(":")[0].strip() if args.op else ("graph" if args.graph else "func")
        return (insert_payload(result, at=at, block=block, as_output=args.as_output),
                insert_summary(args.at, result, as_output=args.as_output, output=args.output))

    return _rewrite(args, "insert", apply)


def _cmd_reroute(args: argparse.Namespace) -> int:
    from .cli_output import reroute_payload, reroute_summary
    from .record import rewrites
    from .surgery import reroute

    def apply(model: Any) -> Summary:
        result = reroute(model, args.source, args.target, consumers=args.consumers,
                         prune=args.prune)
        record = rewrites(model.proto)[-1]
        return (reroute_payload(result, source=str(record["from"]), target=str(record["to"])),
                reroute_summary(args.source, args.target, result, output=args.output))

    return _rewrite(args, "reroute", apply)


def _cmd_rename(args: argparse.Namespace) -> int:
    from .surgery import rename

    def apply(model: Any) -> Summary:
        result = rename(model, dict(args.map), regex=list(args.regex), nodes=args.nodes)
        what = "nodes" if args.nodes else "tensors"
        return ({"renamed": result.renamed},
                f"renamed {len(result.renamed)} {what} -> {args.output}")

    return _rewrite(args, "rename", apply)


def _cmd_bypass(args: argparse.Namespace) -> int:
    from .surgery import bypass

    def apply(model: Any) -> Summary:
        result = bypass(model, args.node, input=args.input)
        return ({"removed": result.removed, "rerouted": result.rerouted,
                 "rerouted_outputs": result.rerouted_outputs},
                f"removed {', '.join(result.removed)}; rerouted {len(result.rerouted)} consumers "
                f"-> {args.output}")

    return _rewrite(args, "bypass", apply)


def _cmd_merge(args: argparse.Namespace) -> int:
    from .io import load
    from .surgery import merge
    from .verify import verify_merge

    _check_paths(args.second, args.output, args.force)
    second = _load(args.second)

    def apply(model: Any) -> Summary:
        result = merge(model, second, connect=list(args.connect), prefix=args.prefix,
                       outputs=args.outputs)
        return ({"second": args.second, "inputs": result.inputs, "outputs": result.outputs,
                 "renamed": result.renamed, "prefix": result.prefix},
                f"merged: inputs {result.inputs}, outputs {result.outputs}, "
                f"{len(result.renamed)} names of SECOND changed (prefix '{result.prefix}') "
                f"-> {args.output}")

    def check(model: Any) -> Any:
        return verify_merge(load(args.model), load(args.second), model, ranges=_ranges(args),
                            **_isolation(args))

    return _rewrite(args, "merge", apply, check)


def _ray_shards(args: argparse.Namespace) -> dict[str, Any]:
    """compare()'s shard options for ``verify --ray`` ({} without it): one shard per CPU."""
    if args.ray is None:
        return {}
    if args.inputs is None or args.rewrite_log or args.against_tf or args.against_torch:
        raise UsageError("--ray shards an --inputs folder of .npz samples between two models; "
                         "give --inputs DIR (and no --rewrite-log / --against-*)")
    if _isolation(args):
        raise UsageError("--ray runs each shard in its own worker process; drop --isolate, "
                         "--timeout and --memory-limit")
    from .cluster import ray_shards

    cpus = max(2, os.cpu_count() or 2)
    return {"shards": ray_shards(args.ray or None, cpus), "shard_count": cpus}


def _cmd_verify(args: argparse.Namespace) -> int:
    from . import verify

    shards = _ray_shards(args)
    if args.against_tf or args.against_torch:
        if args.against_tf and args.against_torch:
            raise UsageError("give one of --against-tf / --against-torch")
        from . import converters

        candidate = _load(args.candidate)
        with _framework_step(args, "running the framework and onnxruntime"):
            fn = (converters.tf_reference(args.against_tf) if args.against_tf
                  else converters.torch_reference(args.against_torch))
            report = verify.verify_against(
                fn, candidate, inputs=args.inputs, rtol=args.rtol, atol=args.atol,
                seed=args.seed, dims=dict(args.dim) or None, samples=args.samples,
                ranges=_ranges(args), save_inputs=args.save_inputs, **_isolation(args))
        _print_report(report, args.json)
        return _exit_code(report, args)
    if args.plot and not args.deep:
        raise UsageError("--plot draws the --deep comparison; add --deep")
    if args.plot:
        from .verify.plot import require_matplotlib

        require_matplotlib()
    reference, candidate = _load(args.reference), _load(args.candidate)
    if args.rewrite_log:
        if args.deep:
            raise UsageError("--deep compares two models tensor by tensor; drop --rewrite-log "
                             "(which checks each rewrite's own invariant) or --deep")
        report = verify.verify_log(reference, candidate, inputs=args.inputs, seed=args.seed,
                                   dims=dict(args.dim) or None, samples=args.samples,
                                   ranges=_ranges(args), save_inputs=args.save_inputs,
                                   **_isolation(args))
    else:
        report = verify.compare(
            args.reference if shards else reference, args.candidate if shards else candidate,
            pairs=dict(args.pair) or None, inputs=args.inputs,
            rtol=args.rtol, atol=args.atol, seed=args.seed, dims=dict(args.dim) or None,
            samples=args.samples, exact=args.exact, progress=_Progress("verify"),
            ranges=_ranges(args), save_inputs=args.save_inputs, deep=args.deep,
            **_isolation(args), **shards,
        )
    if args.plot and report.deep is not None:
        from .verify.plot import plot_deep

        plot_deep(report.deep, args.plot)
    _print_report(report, args.json)
    return _exit_code(report, args)


def _cmd_convert(args: argparse.Namespace) -> int:
    if args.framework is None:
        raise UsageError("convert needs a framework: 'convert tf ...' or 'convert torch ...'")
    from . import converters
    from .cli_output import convert_payload, convert_summary, dump
    from .outfile import check_overwrite

    check_overwrite(args.output, force=args.force)
    with _framework_step(args, f"converting {args.source} ({args.framework})"):
        if args.framework == "tf":
            report = converters.cli_convert_tf(args.source, args.output, inputs=args.inputs,
                                               outputs=args.outputs, opset=args.opset)
        else:
            report = converters.cli_convert_torch(args.source, args.output, inputs=args.input,
                                                  exporter=args.exporter, opset=args.opset)
    _out(dump("convert", convert_payload(report, source=args.source)) if args.json
         else convert_summary(report))
    return EXIT_OK


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    with _framework_step(args, "running the demo (TensorFlow and PyTorch steps take a while)"):
        return run_demo(_out)


def _cmd_apply(args: argparse.Namespace) -> int:
    from .recipe.command import cmd_apply

    return cmd_apply(args, _isolation(args))


def _cmd_recipe(args: argparse.Namespace) -> int:
    from .recipe.command import cmd_recipe

    return cmd_recipe(args)


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "inspect": _cmd_inspect, "extract": _cmd_extract, "copy": _cmd_copy, "insert": _cmd_insert,
    "reroute": _cmd_reroute, "verify": _cmd_verify, "convert": _cmd_convert, "demo": _cmd_demo,
    "rename": _cmd_rename, "bypass": _cmd_bypass, "merge": _cmd_merge,
    "apply": _cmd_apply, "recipe": _cmd_recipe,
    "diff": _cmd_diff,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit code (see the module docstring)."""
    from .cli_flags import check_flags

    parser = build_parser()
    check_flags(parser, list(sys.argv[1:] if argv is None else argv))
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_BAD_INPUT
    try:
        if getattr(args, "verify", True) is False and _isolation(args):
            raise UsageError("--isolate, --timeout and --memory-limit go with --verify; add "
                             "--verify or drop them")
        _check_html_path(args)
        return COMMANDS[args.command](args)
    except SurgeryError as exc:
        from .cli_flags import cli_words

        sys.stderr.write(f"onnxsurgeon: error: {cli_words(_one_line(exc))}\n")
        return EXIT_BAD_INPUT
    except ImportError as exc:
        missing = getattr(exc, "name", None) or str(exc)
        sys.stderr.write(
            f"onnxsurgeon: error: this command needs the package '{missing}'; install it "
            "(pip install 'onnxsurgeon[tf]' or 'onnxsurgeon[torch]')\n"
        )
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        sys.stderr.write("onnxsurgeon: interrupted; no output was written\n")
        return 130
    except Exception as exc:  # noqa: BLE001 - the CLI never shows a traceback by default
        if os.environ.get("ONNXSURGEON_DEBUG"):
            raise
        sys.stderr.write(
            f"onnxsurgeon: internal error: {type(exc).__name__}: {_one_line(exc)}; rerun with "
            "ONNXSURGEON_DEBUG=1 for a traceback and report it\n"
        )
        return EXIT_INTERNAL


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:500] if text else type(exc).__name__


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
