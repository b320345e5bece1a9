"""The ``onnxsurgeon`` argument parser: every command, its flags and their value types (the
public CLI contract; flags may be added, never renamed)."""

from __future__ import annotations

import argparse
from typing import Any, NoReturn

from . import cli_values as _v
from .cli_flags import EXIT_CODES_HELP, LIST_HELP, ListAction, split_ranges, whole
from .cli_flags import HelpFormatter as _HelpFormatter
from .cli_io import EXIT_BAD_INPUT


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit 2) instead of usage dumps, no abbreviated flags (a
    prefix such as --out is an unknown flag, not --output), defaults shown in --help, and the
    exit codes in every --help (and how lists are written, when it has a list flag)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("epilog", EXIT_CODES_HELP)
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def format_help(self) -> str:
        if any(isinstance(a, ListAction) for a in self._actions) and LIST_HELP not in (self.epilog or ""):
            self.epilog = f"{self.epilog}. {LIST_HELP}" if self.epilog else LIST_HELP
        return super().format_help()

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}; see '{self.prog} --help'\n")


def _add_pattern_framework_flags(p: argparse.ArgumentParser) -> None:
    """Match and replace: a pattern (and replacement) written as a framework function."""
    p.add_argument("--framework", choices=["tf", "torch"], default=None,
                   help="--pattern (and --replacement) FILE.py:NAME is a TensorFlow or PyTorch "
                        "function, converted as insert --func converts one (imports and runs "
                        "FILE.py: your own code)")
    p.add_argument("--pattern-input", action=ListAction, default=[], metavar="NAME:SHAPE[:DTYPE]",
                   help="with --framework: the function's input, e.g. x:1x8x8x3 or "
                        "x:Nx16:float16 (default dtype float32)")


def _add_input_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--range", dest="ranges", action=ListAction, item=_v.input_range, split=split_ranges,
                   default=[],
                   metavar="[NAME=]LO,HI",
                   help="draw random inputs uniform in [LO,HI) (default [-1,1) for floats); "
                        "NAME= for one input (integers too, e.g. token ids); repeatable, or "
                        "x=0,1,y=-2,2")
    p.add_argument("--allow-inconclusive", action="store_true",
                   help="exit 0 (with a warning) when nothing compared could show a difference")


def _add_model_io(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", metavar="MODEL", help="input .onnx file (never modified)")
    _add_output(p)
    _add_share_data_flag(p)
    _add_check_flag(p)


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


def _add_check_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--check", choices=("touched", "structure", "full"), default="touched",
                   help="onnx.checker on the output: 'touched' the full check up to 20,000 "
                        "nodes, above it what the rewrite touched (untouched nodes are the "
                        "input's); 'structure' the plain check of the whole output; 'full' with "
                        "strict shape inference, at any size (default: touched)")


def _add_isolation_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--isolate", action="store_true",
                   help="run onnxruntime in a child process with time and memory limits "
                        "(for untrusted models)")
    p.add_argument("--timeout", type=_v.positive_float, default=None, metavar="S",
                   help="with --isolate: seconds one load or run may take (default 30; implies "
                        "--isolate)")
    p.add_argument("--memory-limit", type=_v.positive_int, default=None, metavar="MB",
                   help="with --isolate: address space of the child process in MB (default "
                        "4096; implies --isolate)")


VERIFY_OPTIONS = ("--verify-inputs", "--verify-samples", "--verify-seed", "--verify-dim",
                  "--verify-range", "--verify-rtol", "--verify-atol", "--verify-deep",
                  "--verify-threads")
"""The data and tolerance options of ``verify`` under names no verb's own flags clash with
(``extract --inputs`` are stop tensors): every command with ``--verify`` takes all of them."""


def _add_verify_options(p: argparse.ArgumentParser, *, range_alias: bool = False) -> None:
    """The one definition of :data:`VERIFY_OPTIONS` (``range_alias``: ``--range`` too, the name
    the rewriting verbs had first). Their defaults are verify's."""
    g = p.add_argument_group("verification data and tolerances (with --verify)")
    g.add_argument("--verify-inputs", metavar="FILE.npz|DIR", default=None,
                   help="real input arrays for the check (.npz, one array per graph input of the "
                        "model the check runs, or a folder of them) instead of seeded random "
                        "inputs")
    g.add_argument("--verify-samples", type=_v.positive_count, default=None, metavar="N",
                   help="random input samples (default 2)")
    g.add_argument("--verify-seed", type=_v.seed, default=0, metavar="N",
                   help="seed of the random inputs")
    g.add_argument("--verify-dim", dest="verify_dims", action=ListAction, item=_v.dim, nargs="+",
                   default=[], metavar="NAME=SIZE",
                   help="size of a symbolic dimension (default 1)")
    names = ("--range", "--verify-range") if range_alias else ("--verify-range",)
    g.add_argument(*names, dest="ranges", action=ListAction, item=_v.input_range, split=split_ranges,
                   default=[], metavar="[NAME=]LO,HI",
                   help="draw random inputs uniform in [LO,HI) (default [-1,1) for floats); "
                        "NAME= for one input (integers too, e.g. token ids); repeatable, or "
                        "x=0,1,y=-2,2")
    g.add_argument("--verify-rtol", type=_v.tolerance_value, default=None, metavar="RTOL",
                   help="relative tolerance of the comparisons that are not exact (default: by "
                        "dtype, 1e-4 for float32)")
    g.add_argument("--verify-atol", type=_v.tolerance_value, default=None, metavar="ATOL",
                   help="absolute tolerance of the comparisons that are not exact (default: by "
                        "dtype, 1e-5 for float32)")
    g.add_argument("--verify-deep", action="store_true",
                   help="also compare every tensor on the way to each checked output, layer by "
                        "layer (a differing one fails the check; the table goes to --json)")
    g.add_argument("--verify-threads", type=_v.positive_count, default=None, metavar="N",
                   help="onnxruntime threads per session (default: the machine's cores)")
    p.set_defaults(verify_advice=("--verify-inputs FILE.npz", "--verify-range LO,HI",
                                  "--verify-deep"))


def _add_verify_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--verify", action="store_true",
                   help="check this rewrite's invariant with onnxruntime before writing (exit 1 "
                        "and nothing written if it fails or is inconclusive)")
    _add_isolation_flags(p)
    _add_verify_options(p, range_alias=True)
    p.add_argument("--allow-inconclusive", action="store_true",
                   help="exit 0 (with a warning) when nothing compared could show a difference")


def _add_context_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--context", type=_v.context, default=2, metavar="K",
                   help="hops of unchanged neighbours drawn around the changes (default 2)")


def _add_html_flag(p: argparse.ArgumentParser) -> None:
    """``--html FILE`` (+ ``--context K``): every rewriting verb draws what it did."""
    p.add_argument("--html", metavar="FILE.html",
                   help="also write a self-contained HTML picture of this rewrite")
    _add_context_flag(p)


def _add_rewrite_flags(p: argparse.ArgumentParser, *,
                       json_help: str = "machine-readable result on stdout") -> None:
    """What every rewriting verb ends with: ``--verify`` (and its isolation and input flags),
    ``--html`` (and ``--context``), ``--json``."""
    _add_verify_flag(p)
    _add_html_flag(p)
    p.add_argument("--json", action="store_true", help=json_help)


class _Version(argparse.Action):
    """``--version``: the package metadata's version, read only when asked (a metadata lookup
    costs milliseconds every command would pay)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        import sys

        from . import __version__

        sys.stdout.write(f"onnxsurgeon {__version__}\n")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of every command (the public CLI contract)."""
    parser = _Parser(
        prog="onnxsurgeon",
        description="Cut, copy and splice ONNX models; prove the result with onnxruntime.",
    )
    parser.add_argument("--version", action=_Version, nargs=0,
                        help="show the version (the package metadata's) and exit")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="show the log output of TensorFlow, PyTorch, their exporters, "
                             "onnxruntime and Ray (captured and hidden by default)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p = sub.add_parser("inspect", help="inputs, outputs, opsets, op histogram, weights")
    p.add_argument("model", metavar="MODEL", help="the .onnx file")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--around", type=_v.one_name, metavar="T",
                   help="the neighbourhood of tensor T (its producer, readers and --context hops; "
                        "any selector); narrows --nodes/--tensors too")
    p.add_argument("--html", metavar="FILE.html", help="with --around: draw it as an HTML page")
    _add_context_flag(p)
    from .cli_inspect import add_listing_flags, add_profile_flags

    add_listing_flags(p)
    add_profile_flags(p, _v.dim)

    p = sub.add_parser("extract", help="the dependency closure of tensors as a standalone model")
    _add_model_io(p)
    p.add_argument("--outputs", action=ListAction, required=True, metavar="T[,T...]",
                   help="tensors to extract (ONNX, TF ':0', node name or torch module path; a "
                        "selector glob:/re:/op: gives every match)")
    p.add_argument("--inputs", "--stop-at", dest="inputs", action=ListAction, default=[],
                   metavar="T[,T...]",
                   help="stop tensors: the cut, they become graph inputs (any selector)")
    _add_rewrite_flags(p)

    p = sub.add_parser("copy", help="duplicate the closure of tensors inside the model")
    _add_model_io(p)
    p.add_argument("--outputs", action=ListAction, required=True, metavar="T[,T...]",
                   help="tensors whose closure is copied (ONNX, TF ':0', node name or torch "
                        "module path; a selector glob:/re:/op: gives every match); each copy "
                        "becomes a new graph output")
    p.add_argument("--weights", choices=["independent", "shared"], default="independent",
                   help="independent: the copy gets its own initializers; shared: it reads the "
                        "original's")
    p.add_argument("--prefix", default="copy/", metavar="P", help="name prefix of the copy")
    p.add_argument("--replace-input", action=ListAction, item=_v.pair, nargs="+", default=[],
                   metavar="A=B", help="the copy reads B wherever the original read A "
                                       "(several pairs A=B,C=D, or the flag repeated)")
    p.add_argument("--stop-at", "--stop", dest="stop", action=ListAction, nargs="+", default=[],
                   metavar="T[,T...]",
                   help="stop tensors: the copied closure is cut there and the copy reads the "
                        "original's values (T=T of --replace-input; any selector)")
    _add_rewrite_flags(p, json_help="print the rename map")

    p = sub.add_parser("insert", help="splice a processing block in at a tensor")
    _add_model_io(p)
    p.add_argument("--at", type=_v.one_name, required=True, metavar="T",
                   help="the activation to process (ONNX, TF ':0', node name or torch module "
                        "path); a selector (glob:encoder.layer.?.output, re:..., op:Relu) puts "
                        "one block at every match, in one rewrite")
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
    p.add_argument("--exporter", choices=["dynamo", "torchscript"], default=None,
                   help="with --func --framework torch: the torch.onnx exporter (default: dynamo "
                        "for a model at opset >= 18, torchscript below)")
    p.add_argument("--as-output", action="store_true",
                   help="reroute nothing; the processed tensor becomes a new graph output")
    p.add_argument("--rename-output", action="store_true",
                   help="when --at is a graph output, give the processed tensor a new name and "
                        "rename that graph output too (default: the graph output keeps its name "
                        "and the unprocessed tensor is renamed '<at>/pre_<block>')")
    _add_rewrite_flags(p)

    p = sub.add_parser("reroute", help="consumers of A read B instead")
    _add_model_io(p)
    p.add_argument("--from", dest="source", type=_v.one_name, required=True, metavar="A",
                   help="the tensor whose readers move (any selector)")
    p.add_argument("--to", dest="target", type=_v.one_name, required=True, metavar="B",
                   help="the tensor they read instead (any selector)")
    p.add_argument("--consumers", action=ListAction, default=None, metavar="NODE[,NODE...]",
                   help="only these readers of A: node names, torch module paths (the module's "
                        "nodes that read A) or tensors (their producer) (default: every reader "
                        "and graph output)")
    p.add_argument("--prune", action="store_true",
                   help="remove the nodes (and initializers) no graph output depends on any more")
    _add_rewrite_flags(p)

    p = sub.add_parser("rename", help="rename tensors (or nodes) keeping every reader and output")
    _add_model_io(p)
    p.add_argument("--map", action=ListAction, item=_v.pair, nargs="+", default=[], metavar="OLD=NEW",
                   help="old name (any selector; glob:/re:/op: must match one name) -> new name "
                        "(several pairs a=b,c=d, or the flag repeated)")
    p.add_argument("--regex", action=ListAction, item=_v.regex, split=whole, nargs="+", default=[],
                   metavar="PATTERN=REPLACEMENT",
                   help="re.sub over every other name (split at the first '='; \\1 for groups; "
                        "commas are regex syntax: one pair per value)")
    p.add_argument("--nodes", action="store_true", help="rename node names instead of tensors")
    _add_rewrite_flags(p)

    p = sub.add_parser("precision", help="convert to float16/bfloat16, Casts only where fp32 stays")
    _add_model_io(p)
    p.add_argument("--to", choices=["fp16", "bf16"], required=True, help="the low-precision type")
    p.add_argument("--keep-io-types", action="store_true",
                   help="graph inputs and outputs stay float32 (Casts at the boundary)")
    p.add_argument("--block", action=ListAction, default=[], metavar="OP|NODE|SELECTOR",
                   help="what stays float32: op types (Softmax), node names, selectors "
                        "(glob:, re:, op:, framework names, module paths)")
    p.add_argument("--auto-block", action="store_true",
                   help="compare with float32 layer by layer on the inputs and keep float32 the "
                        "nodes whose local error exceeds the budget or that overflow")
    p.add_argument("--inputs", dest="auto_inputs", metavar="DATA.npz|DIR", default=None,
                   help="real inputs for --auto-block (default: random, --range LO,HI)")
    p.add_argument("--budget", type=_v.budget, default=None, metavar="RTOL,ATOL",
                   help="the error the outputs may have against float32 (default 1e-2,1e-3 for "
                        "fp16, 5e-2,1e-2 for bf16); --auto-block and --verify use it")
    _add_rewrite_flags(p)

    p = sub.add_parser("bypass", help="remove a node; its readers read its input")
    _add_model_io(p)
    p.add_argument("--node", action=ListAction, required=True, metavar="NAME[,NAME...]",
                   help="node(s) to remove (a chain may be given at once); a torch module path "
                        "naming several nodes removes the module (one input, one output): its "
                        "readers read its input, and all its nodes go; a selector (op:Dropout, "
                        "glob:*dropout*, re:...) removes every node it matches")
    p.add_argument("--input", type=int, default=0, metavar="K",
                   help="which input the readers read instead (default 0)")
    p.add_argument("--prune", action="store_true",
                   help="also remove the nodes no graph output depends on after the bypass "
                        "and the initializers no remaining node reads (graph inputs stay)")
    _add_rewrite_flags(p)

    p = sub.add_parser("merge", help="put SECOND behind FIRST: SECOND's inputs read FIRST's tensors")
    p.add_argument("model", metavar="FIRST", help="the model that runs first (never modified)")
    p.add_argument("second", metavar="SECOND", help="the model that runs second (never modified)")
    _add_output(p)
    _add_share_data_flag(p)
    _add_check_flag(p)
    p.add_argument("--connect", action=ListAction, item=_v.pair, nargs="+", required=True,
                   metavar="FIRST_OUT=SECOND_IN",
                   help="SECOND_IN reads FIRST's tensor FIRST_OUT (several pairs a=b,c=d, or the "
                        "flag repeated)")
    p.add_argument("--prefix", default=None, metavar="P",
                   help="prefix for SECOND's names that collide with FIRST's (default: SECOND's "
                        "graph name and '/')")
    p.add_argument("--outputs", action=ListAction, default=None, metavar="T[,T...]",
                   help="outputs of the merged model (default: SECOND's outputs, then FIRST's "
                        "outputs no connection consumed)")
    _add_rewrite_flags(p)

    p = sub.add_parser("match", help="list every match of a selector or a structural pattern")
    p.add_argument("model", metavar="MODEL", help="the .onnx model (never modified)")
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--select", metavar="SEL",
                     help="a selector (glob:..., re:..., op:TYPE[,TYPE...] or a name)")
    how.add_argument("--pattern", metavar="P",
                     help="the pattern graph: an .onnx file or a file in the ONNX text syntax "
                          "(a model with its <ir_version, opset_import> header, or a bare graph)")
    p.add_argument("--any-constant", action=ListAction, default=[], metavar="NAME[,NAME...]",
                   help="pattern constants that match any constant of their dtype and rank")
    _add_pattern_framework_flags(p)
    p.add_argument("--explain", action="store_true",
                   help="also list the near misses, each with the first reason")
    p.add_argument("--json", action="store_true", help="machine-readable result on stdout")

    p = sub.add_parser("replace", help="replace every match of pattern P by replacement R")
    _add_model_io(p)
    p.add_argument("--pattern", required=True, metavar="P",
                   help="the pattern graph (.onnx, or ONNX text: a model or a bare graph)")
    p.add_argument("--replacement", required=True, metavar="R",
                   help="what each match becomes (.onnx or ONNX text); its inputs and outputs "
                        "bind to P's by position")
    p.add_argument("--any-constant", action=ListAction, default=[], metavar="NAME[,NAME...]",
                   help="pattern constants that match any constant of their dtype and rank")
    _add_pattern_framework_flags(p)
    p.add_argument("--tolerance", type=_v.tolerance, default=None, metavar="RTOL,ATOL",
                   help="with --verify: R is compared with P at each site (and the outputs) "
                        "under these tolerances, for an R that computes the same function "
                        "differently (a fused op); default: exactly")
    _add_rewrite_flags(p)

    # ---- hygiene verbs (issue 30): cleanup, toposort, outputs, set
    p = sub.add_parser("cleanup", help="drop nodes, initializers, value_info, functions and "
                                       "opsets no graph output needs (bodies too)")
    _add_model_io(p)
    _add_rewrite_flags(p, json_help="print what was removed, by kind")

    p = sub.add_parser("toposort", help="sort every graph's nodes topologically (stable; bodies "
                                        "and local functions too)")
    _add_model_io(p)
    _add_rewrite_flags(p)

    p = sub.add_parser("outputs", help="expose tensors as graph outputs, or drop outputs (and "
                                       "what only they needed)")
    _add_model_io(p)
    p.add_argument("--add", action=ListAction, default=[], metavar="T[,T...]",
                   help="tensors to make graph outputs, typed (any selector)")
    p.add_argument("--remove", action=ListAction, default=[], metavar="T[,T...]",
                   help="graph outputs to drop; the nodes and initializers only they needed go too")
    _add_rewrite_flags(p)

    p = sub.add_parser("set", help="change node attributes or initializer values (type-checked)")
    _add_model_io(p)
    p.add_argument("--attr", action=ListAction, item=_v.attr, split=whole, nargs="+", default=[],
                   metavar="NODE.KEY=VALUE",
                   help="attribute KEY of node NODE (split at the last '.') takes VALUE, parsed "
                        "per the op schema's type: 3, 0.5, text, ints 1,2,3, floats 0.5,1 "
                        "(one pair per value, the flag repeated)")
    p.add_argument("--weight", action=ListAction, item=_v.pair, nargs="+", default=[],
                   metavar="NAME=FILE.npy",
                   help="initializer NAME takes the values of FILE.npy (same dtype and shape)")
    p.add_argument("--reshape", action="store_true",
                   help="with --weight: allow a different shape (the dtype must still match)")
    _add_rewrite_flags(p)

    # ---- folding, dims and opsets (issue 30, part 2)
    p = sub.add_parser("fold", help="replace every subgraph of constants by its value")
    _add_model_io(p)
    p.add_argument("--max-bytes", type=_v.byte_size, default=1 << 20, metavar="N",
                   help="a folded value larger than N bytes stays computed (default 1048576)")
    p.add_argument("--no-fuse", dest="fuse", action="store_false",
                   help="fold only: no constant-weight simplification (by default fold also "
                        "removes no-ops (Identity, inference Dropout, same-type Cast, "
                        "same-shape Reshape, identity Transpose) and fuses MatMul+Add into "
                        "Gemm and Conv+BatchNormalization into Conv, as simplifiers do)")
    _add_rewrite_flags(p, json_help="print what was folded and fused")

    p = sub.add_parser("dims", help="set input shapes or the batch; shape constants follow it")
    _add_model_io(p)
    p.add_argument("--input", dest="input_shapes", action=ListAction, item=_v.pair, nargs="+",
                   default=[], metavar="NAME=SHAPE",
                   help="graph input NAME gets SHAPE (1x3x224x224, batch x3x224x224 with a "
                        "symbol, or batch,3,224,224); several pairs, or the flag repeated")
    p.add_argument("--batch", default=None, metavar="N|dynamic",
                   help="dim 0 of every graph input: a size, 'dynamic' (symbol 'batch') or a "
                        "symbol name")
    _add_rewrite_flags(p)

    p = sub.add_parser("opset", help="convert the default-domain opset (onnx's version converter)")
    _add_model_io(p)
    p.add_argument("--to", type=int, required=True, metavar="N", help="the opset to convert to")
    _add_rewrite_flags(p)

    p = sub.add_parser("verify", help="compare two models numerically with onnxruntime")
    p.add_argument("reference", metavar="REFERENCE", help="the reference .onnx file")
    p.add_argument("candidate", metavar="CANDIDATE", help="the .onnx file checked against it")
    p.add_argument("--pair", action=ListAction, item=_v.pair, nargs="+", default=[], metavar="R=C",
                   help="compare reference output R with candidate output C (several pairs, or "
                        "the flag repeated); default: outputs with equal names")
    p.add_argument("--inputs", "--data", dest="inputs", metavar="FILE.npz|DIR",
                   help="input arrays (.npz, one array per graph input) or a folder of them "
                        "(default: seeded random inputs)")
    p.add_argument("--rtol", type=_v.tolerance_value, default=None,
                   help="relative tolerance (default: by dtype, 1e-4 for float32)")
    p.add_argument("--atol", type=_v.tolerance_value, default=None,
                   help="absolute tolerance (default: by dtype, 1e-5 for float32)")
    p.add_argument("--seed", type=_v.seed, default=0, help="seed of the random inputs")
    p.add_argument("--dim", action=ListAction, item=_v.dim, nargs="+", default=[], metavar="NAME=SIZE",
                   help="size of a symbolic dimension (default 1)")
    p.add_argument("--samples", type=_v.positive_count, default=None, metavar="N",
                   help="random input samples (default 2)")
    _add_input_flags(p)
    p.set_defaults(verify_advice=("--inputs FILE.npz", "--range LO,HI", "--deep"))
    p.add_argument("--save-inputs", metavar="FILE.npz",
                   help="write the random inputs used to FILE.npz (replay them with --inputs)")
    p.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="shard the --inputs .npz samples over Ray workers and merge the "
                        "statistics exactly (alone: a private local instance; or the cluster "
                        "at ADDRESS: 'auto', HOST:PORT, ray://HOST:10001; needs onnxsurgeon[ray])")
    p.add_argument("--deep", action="store_true",
                   help="compare every tensor both models share, layer by layer, with a "
                        "per-tensor error table")
    p.add_argument("--plot", metavar="FILE.png",
                   help="with --deep: plot the error of every shared tensor against depth")
    p.add_argument("--exact", action="store_true", help="require bit-identical outputs")
    p.add_argument("--threads", type=_v.positive_count, default=None, metavar="N",
                   help="onnxruntime threads per session (default: the machine's cores)")
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
    c.add_argument("--inputs", "--input", dest="inputs", action=ListAction, default=None,
                   metavar="NAME[:SHAPE],...",
                   help="graph inputs with shapes, e.g. input:0:1x8x8x3 (default: the model's "
                        "signature)")
    c.add_argument("--outputs", action=ListAction, default=None, metavar="NAME,...",
                   help="TF output tensor names (default: the model's signature)")
    c.add_argument("--opset", type=int, default=None,
                   help="ONNX opset (default: the exporter's choice)")
    _add_keep_mismatch_flag(c)
    c.add_argument("--json", action="store_true", help="machine-readable result on stdout")
    c = conv.add_parser("torch", help="a module returned by FACTORY in FILE.py (imports and runs your code)")
    c.add_argument("source", metavar="FILE.py:FACTORY",
                   help="FACTORY() in FILE.py returns the torch.nn.Module")
    _add_output(c)
    c.add_argument("--input", "--inputs", dest="input", action=ListAction, nargs="+", required=True,
                   metavar="NAME:SHAPE[:DTYPE]",
                   help="e.g. x:1x3x32x32 or ids:1x8:int64 (several, or the flag repeated)")
    c.add_argument("--exporter", choices=["dynamo", "torchscript"], default="dynamo",
                   help="torch.onnx exporter")
    c.add_argument("--opset", type=int, default=None,
                   help="ONNX opset (default: the exporter's choice)")
    c.add_argument("--dynamic", action=ListAction, nargs="+", default=[],
                   metavar="NAME:AXIS=SYMBOL",
                   help="make an axis of an input (or of an output named by --output-names) "
                        "dynamic, e.g. x:0=batch (x:0=batch,2=h for several axes; several, or "
                        "the flag repeated); a symbolic dim in --input does the same")
    c.add_argument("--output-names", action=ListAction, nargs="+", default=None, metavar="NAME,...",
                   help="ONNX names of the module's outputs, one per returned tensor, in order "
                        "(default: the exporter's, e.g. 2037)")
    _add_keep_mismatch_flag(c)
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
    _add_verify_options(p)

    from .cli_split import add_split_parser

    add_split_parser(sub, _v.dim)

    p = sub.add_parser("demo", help="run the whole job on the bundled models and print a report")
    p.add_argument("--files", metavar="DIR",
                   help="instead, copy the bundled models and examples into DIR/models and "
                        "DIR/examples (the README's commands run in DIR, outside a checkout)")

    _add_recipe_parsers(sub, _add_isolation_flags)
    return parser


def _add_keep_mismatch_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--keep-mismatch", action="store_true",
                   help="write the model even when its check against the framework fails; the "
                        "mismatch is recorded in its metadata (onnxsurgeon.conversion_check, "
                        '"ok": false) and printed')


def _add_recipe_parsers(sub: Any, add_isolation_flags: Any) -> None:
    """Add ``apply`` and ``recipe`` to the CLI's subparsers (run by
    :mod:`onnxsurgeon.recipe.command`; defined here so that parsing the command line does not
    import the recipe package, ~25 ms of start-up for every other command)."""
    p = sub.add_parser("apply", help="run a recipe (YAML/JSON steps) on a model or a fleet of models")
    p.add_argument("recipe", metavar="RECIPE", help="the recipe file (.yaml or .json)")
    p.add_argument("models", nargs="+", metavar="MODEL",
                   help="input .onnx file(s), never modified; several make a fleet")
    p.add_argument("-o", "--output", required=True, metavar="OUT|OUTDIR/",
                   help="output .onnx file; for several models (or a path ending in '/') a "
                        "folder that receives one file per model, under its own name")
    p.add_argument("--force", action="store_true",
                   help="overwrite outputs even when they exist and are not ONNX models")
    p.add_argument("--plan", action="store_true",
                   help="check every step and print what it would do; write nothing")
    p.add_argument("--verify", action="store_true",
                   help="prove every rewrite since the last verify step before saving (exit 1 "
                        "and nothing written if a check fails)")
    add_isolation_flags(p)
    _add_verify_options(p)  # every checkpoint's, a verify step's own keys first
    p.add_argument("--jobs", type=_v.jobs, default=1, metavar="N",
                   help="fleet: models processed in parallel (processes; default 1)")
    p.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="fleet: run the per-model tasks on Ray (alone: a private local instance "
                        "with --jobs CPUs; or the cluster at ADDRESS: 'auto', HOST:PORT, "
                        "ray://HOST:10001; needs onnxsurgeon[ray] and a shared filesystem)")
    p.add_argument("--json", action="store_true",
                   help="machine-readable result (a fleet: one JSON line per model)")
    _add_html_flag(p)  # one model: draws MODEL -> OUT

    p = sub.add_parser("recipe", help="print the recipe that replays a model's recorded rewrites")
    p.add_argument("model", metavar="MODEL")
    p.add_argument("--json", action="store_true", help="JSON instead of YAML")


