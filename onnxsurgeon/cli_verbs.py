"""The rewriting commands (extract, copy, insert, reroute, rename, bypass, merge) and the one
skeleton they share, ``_rewrite``: load -> verb -> ``--verify`` in memory -> checked save ->
print -> ``--html``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from itertools import compress
from operator import attrgetter
from typing import Any

from .cli_flags import advised, verify_options
from .cli_html import _html_of, page_tensors
from .cli_io import (
    EXIT_OK,
    _check_paths,
    _exit_code,
    _framework_step,
    _isolation,
    _load,
    _out,
    _paused_gc,
    _write,
)
from .errors import UsageError

Summary = tuple[dict[str, Any], str]
"""What a rewriting command reports: the JSON payload for ``--json`` (stamped with the command's
schema, see ``onnxsurgeon/schemas/``) and the one-line text."""


def _rewrite(args: argparse.Namespace, command: str, apply: Callable[[Any], Summary],
             check: Callable[[Any, Any], Any] | None = None) -> int:
    """The skeleton every rewriting command shares: refuse ``-o`` onto the input, load (warnings
    on stderr), ``apply`` the verb to the model (it returns the summary); with ``--verify`` check
    it in memory first against a copy of the input taken before the verb (``check``, default its
    rewrite log; nothing is written unless it passes);
    save atomically with the checker guarantee, print the summary (JSON with ``--json``), then
    ``--html`` (coloured by the verification when both are given)."""
    from .cli_noise import phase
    from .session import Session

    _check_paths(args.model, args.output, args.force)
    verify = bool(getattr(args, "verify", False))
    with _paused_gc(not getattr(args, "func", None)):  # framework exports make real garbage
        # one session from load to save: nothing but the verb and --verify touches the proto
        # (a verb that raises leaves it to the garbage collector: the registry is weak)
        session = Session(_load(args.model,  # toposort sorts what load would refuse
                                unsorted_functions=command == "toposort"), loaded=True)
        model = session.model
        twin = session.snapshot() if verify else None  # what --verify compares against
        with phase(f"{command}: rewriting"):
            payload, text = apply(model)
        session.verb_returned()
    with session:
        report = None
        if twin is not None:
            with twin, phase(f"{command}: verifying the rewrite"):  # reads the verb's index
                report = _verify_in_memory(args, model, check, twin.model)
        code = EXIT_OK if report is None else _exit_code(report, args)
        if code != EXIT_OK:
            _print_result(command, args, payload, text, report, written=False)
            sys.stderr.write(
                f"onnxsurgeon: nothing written to {args.output} (--verify did not pass)\n")
            _html_of(args, model, text, report)
            return code
        with _paused_gc(), phase(f"saving {args.output}"):
            _write(model, args.output, args.model,
                   share_data=bool(getattr(args, "share_data", False)),
                   check=getattr(args, "check", "touched"), journal=session.journal)
    _print_result(command, args, payload, text, report, written=True)
    _html_of(args, model, text, report)
    return EXIT_OK


def _verify_in_memory(args: argparse.Namespace, model: Any,
                      check: Callable[[Any, Any], Any] | None = None,
                      original: Any = None) -> Any:
    """With --verify: the report on the rewritten ``model`` (``check(model, original)``, by
    default its rewrite log against ``original``, the input as loaded, or the input file
    loaded again when not given, with the ``--verify-*`` data and tolerances), printed to stdout
    (stderr with --json); else None. With ``--html`` too, the log's check also compares the
    tensors the page draws layer by layer (forced deep) for its colours, with ``--verify-deep``
    every tensor on the way; that table is left to the page and ``--json``. An inconclusive
    report's advice names this command's flags."""
    if not getattr(args, "verify", False):
        return None
    from .io import load
    from .verify import verify_log

    if original is None:
        original = load(args.model)
    if check is not None:
        report = check(model, original)
    else:
        report = verify_log(original, model, deep=_deep(args, model),
                            **verify_options(args), **_isolation(args))
    report = advised(report, args)
    if not getattr(args, "json", False):  # with --json the report is embedded in the result
        _out(report.to_text(deep_table=False))
    return report


def _deep(args: argparse.Namespace, model: Any) -> Any:
    """Verify's ``deep``: True with ``--verify-deep``, else the tensors ``--html`` draws (or
    False)."""
    return True if getattr(args, "verify_deep", False) else page_tensors(args, model)


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
                      replace_inputs=dict(args.replace_input) or None, stop_at=args.stop)
        pairs = ", ".join(f"{k} -> {v}" for k, v in result.outputs.items())
        return (copy_payload(result),
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
        from .surgery import insert

        keep = not args.rename_output
        if args.func:
            from .converters import insert_function

            with _framework_step(args, f"exporting {args.func} with {args.framework}"):
                result = insert_function(model, args.at, args.func, args.framework,
                                         as_output=args.as_output, keep_output_name=keep,
                                         exporter=args.exporter)
        elif args.graph:
            from .io import load

            result = insert(model, args.at, graph=load(args.graph), as_output=args.as_output,
                            keep_output_name=keep)
        else:
            from .processing import parse_op

            name, params = parse_op(args.op)
            result = insert(model, args.at, op=name, params=params, as_output=args.as_output,
                            keep_output_name=keep)
        return (insert_payload(result, block="func" if args.func else None),
                insert_summary(args.at, result, as_output=args.as_output, output=args.output))

    return _rewrite(args, "insert", apply)


def _cmd_reroute(args: argparse.Namespace) -> int:
    from .cli_output import reroute_payload, reroute_summary
    from .surgery import reroute

    def apply(model: Any) -> Summary:
        result = reroute(model, args.source, args.target, consumers=args.consumers,
                         prune=args.prune)
        return (reroute_payload(result),
                reroute_summary(args.source, args.target, result, output=args.output))

    return _rewrite(args, "reroute", apply)


def _cmd_rename(args: argparse.Namespace) -> int:
    from .cli_output import rename_payload
    from .surgery import rename

    def apply(model: Any) -> Summary:
        result = rename(model, dict(args.map), regex=list(args.regex), nodes=args.nodes)
        what = "nodes" if args.nodes else "tensors"
        return (rename_payload(result),
                f"renamed {len(result.renamed)} {what} -> {args.output}")

    return _rewrite(args, "rename", apply)


def _cmd_bypass(args: argparse.Namespace) -> int:
    from .cli_output import bypass_payload
    from .surgery import bypass

    def apply(model: Any) -> Summary:
        result = bypass(model, args.node, input=args.input, prune=args.prune)
        by_node = {node: path for path, node in result.modules.items()}
        what = ", ".join([*(f"module {by_node[n]}" if n in by_node else n
                            for n in result.removed),
                          *(f"{n} (in {path})" for path, body in result.bodies.items()
                            for n in body["removed"])])
        extra = len(result.pruned) + len(result.pruned_initializers)
        return (bypass_payload(result),
                f"removed {what}"
                + (f" (+{len(result.pruned)} nodes, {len(result.pruned_initializers)} "
                   "initializers)" if extra else "")
                + f"; rerouted {len(result.rerouted)} consumers -> {args.output}")

    return _rewrite(args, "bypass", apply)


def _cmd_merge(args: argparse.Namespace) -> int:
    from .cli_output import merge_payload
    from .io import load
    from .surgery import merge
    from .verify import verify_merge

    _check_paths(args.second, args.output, args.force)
    second = _load(args.second)

    def apply(model: Any) -> Summary:
        result = merge(model, second, connect=list(args.connect), prefix=args.prefix,
                       outputs=args.outputs)
        return (merge_payload(result, second=args.second),
                f"merged: inputs {result.inputs}, outputs {result.outputs}, "
                f"{len(result.renamed)} names of SECOND changed (prefix '{result.prefix}') "
                f"-> {args.output}")

    def check(model: Any, original: Any) -> Any:
        return verify_merge(original, load(args.second), model, deep=_deep(args, model),
                            **verify_options(args), **_isolation(args))

    return _rewrite(args, "merge", apply, check)


def framework_names(model: Any) -> dict[str, list[str]]:
    """ONNX tensor -> the framework names the converters' name map gives it, and main-graph
    node label -> ``[module path]`` where the torch exporter recorded one (empty without)."""
    from .index import node_label
    from .select import name_map, node_module

    found: dict[str, list[str]] = {}
    for fw, onnx_name in sorted(name_map(model.proto).items()):
        if fw != onnx_name:
            found.setdefault(onnx_name, []).append(fw)
    nodes = model.proto.graph.node
    # only the nodes with metadata, found by a C-level pass
    for i in compress(range(len(nodes)), map(attrgetter("metadata_props"), nodes)):
        module = node_module(nodes[i])
        if module is not None:
            found.setdefault(node_label(nodes[i], i), []).append(module)
    return found


def framework_pattern(args: argparse.Namespace, model: Any, source: str) -> Any:
    """``source`` as match/replace take it: with ``--framework``, a ``FILE.py:NAME`` function
    converted (``converters.export_pattern``) at the model's opset; else the path itself."""
    framework = getattr(args, "framework", None)
    if args.pattern_input and not framework:
        raise UsageError("--pattern-input goes with --framework tf|torch")
    if not framework or ".py:" not in source:
        if framework and source == args.pattern:
            raise UsageError("--framework needs --pattern FILE.py:NAME (a function)")
        return source
    from .converters.patterns import export_pattern
    from .protos import default_opset

    opset = default_opset(model.proto) or 17
    with _framework_step(args, f"exporting {source} with {framework}"):
        return export_pattern(source, framework, list(args.pattern_input), opset=opset)


def _cmd_replace(args: argparse.Namespace) -> int:
    from .cli_output import replace_payload
    from .surgery import replace

    def apply(model: Any) -> Summary:
        pattern, replacement = framework_pattern(args, model, args.pattern), \
            framework_pattern(args, model, args.replacement)
        result = replace(model, pattern=pattern, replacement=replacement,
                         any_constant=args.any_constant, tolerance=args.tolerance)
        n = len(result.sites)  # the sites' JSON only for --json (15k sites: ~0.1 s)
        return (replace_payload(result, framework_names(model)) if args.json else {},
                f"replaced {n} match{'es' if n != 1 else ''} of {args.pattern} by "
                f"{args.replacement} -> {args.output}")

    return _rewrite(args, "replace", apply)


# ---- hygiene verbs (issue 30): cleanup, toposort, outputs, set
def _cmd_cleanup(args: argparse.Namespace) -> int:
    from .cli_output import cleanup_payload
    from .surgery import cleanup

    def apply(model: Any) -> Summary:
        result = cleanup(model)
        counts = result.counts()
        what = ", ".join(f"{v} {k}" for k, v in counts.items() if v) or "nothing"
        return cleanup_payload(result), f"cleanup removed {what} -> {args.output}"

    return _rewrite(args, "cleanup", apply)


def _cmd_toposort(args: argparse.Namespace) -> int:
    from .cli_output import toposort_payload
    from .surgery import toposort

    def apply(model: Any) -> Summary:
        result = toposort(model)
        moved = ", ".join(f"{k}: {v}" for k, v in result.moved.items())
        at_load = any("topological order" in w for w in model.warnings)
        text = (f"sorted ({moved} nodes moved)" if moved else
                "nothing else out of order" if at_load else
                "every graph was in order (nothing moved)")
        if at_load:  # load sorts main graphs and bodies itself (its warning says how many)
            text = f"sorted at load (see the warning); {text}"
        return toposort_payload(result), f"{text} -> {args.output}"

    return _rewrite(args, "toposort", apply)


def _cmd_outputs(args: argparse.Namespace) -> int:
    from .cli_output import outputs_payload
    from .surgery import outputs

    def apply(model: Any) -> Summary:
        result = outputs(model, add=args.add, remove=args.remove)
        return (outputs_payload(result),
                f"outputs: added {len(result.added)}, removed {len(result.removed)} (+"
                f"{len(result.pruned_nodes)} nodes, {len(result.pruned_initializers)} "
                f"initializers) -> {args.output}")

    return _rewrite(args, "outputs", apply)


def _cmd_set(args: argparse.Namespace) -> int:
    from .cli_output import set_payload
    from .surgery import set_values

    def apply(model: Any) -> Summary:
        result = set_values(model, attrs=dict(args.attr), weights=dict(args.weight),
                            reshape=args.reshape)
        return (set_payload(result),
                f"set {len(result.attrs)} attributes, {len(result.weights)} weights -> "
                f"{args.output}")

    return _rewrite(args, "set", apply)


def _cmd_precision(args: argparse.Namespace) -> int:
    from .cli_output import precision_payload
    from .surgery import precision

    rtol, atol = args.budget or (None, None)
    if args.budget:  # --verify judges under the same budget unless told otherwise
        args.verify_rtol = rtol if args.verify_rtol is None else args.verify_rtol
        args.verify_atol = atol if args.verify_atol is None else args.verify_atol

    def apply(model: Any) -> Summary:
        auto = None
        if args.auto_block:
            from .verify.precision import auto_block

            auto = auto_block(model, to=args.to, keep_io_types=args.keep_io_types,
                              block=list(args.block),
                              inputs=args.auto_inputs or args.verify_inputs,
                              ranges=dict(args.ranges) or None, seed=args.verify_seed,
                              dims=dict(args.verify_dims) or None, samples=args.verify_samples,
                              rtol=rtol, atol=atol)
            result = auto.result
        else:
            result = precision(model, to=args.to, keep_io_types=args.keep_io_types,
                               block=list(args.block), budget=args.budget)
        line = (f"{result.converted} nodes in {result.to}, {len(result.kept)} kept in float32, "
                f"{len(result.casts)} Casts added -> {args.output}")
        if auto is not None:
            line += (f"; auto-block: {auto.rounds} round(s), outputs "
                     f"{'meet' if auto.met else 'do NOT meet'} the budget "
                     f"(rtol={auto.rtol:g}, atol={auto.atol:g})")
        for node, why in result.kept.items():
            fw = result.framework.get(node)
            line += f"\n  kept float32: {node}{f' ({fw})' if fw else ''}: {why}"
        return precision_payload(result, auto), line

    return _rewrite(args, "precision", apply)


# ---- folding, dims and opsets (issue 30, part 2)
def _cmd_fold(args: argparse.Namespace) -> int:
    from .cli_output import fold_payload
    from .surgery import fold

    def ort_evaluator(model: Any) -> Any:
        """``verify.folding.ort_evaluator``, imported when something folds (``verify`` and
        its checks cost ~0.03 s of a run that folds nothing)."""
        from .verify.folding import ort_evaluator as evaluate

        return evaluate(model)

    def apply(model: Any) -> Summary:
        result = fold(model, max_bytes=args.max_bytes, evaluate=ort_evaluator, fuse=args.fuse)
        kept = f"; {len(result.kept)} over --max-bytes kept computed" if result.kept else ""
        inner = f" (+{len(result.body_folded)} in bodies)" if result.body_folded else ""
        fusions = sum(1 for f in result.fused if f["into"])
        fused = f", fused {fusions} node pairs" if fusions else ""
        return (fold_payload(result) if args.json else {},  # (30,000 entries on the chain)
                f"folded {len(result.folded)} tensors{inner}, removed {len(result.removed)} "
                f"nodes{kept}{fused} -> {args.output}")

    return _rewrite(args, "fold", apply)


def _cmd_dims(args: argparse.Namespace) -> int:
    from .cli_output import dims_payload
    from .surgery import dims

    def apply(model: Any) -> Summary:
        result = dims(model, inputs=dict(args.input_shapes) or None, batch=args.batch)
        shapes = ", ".join(f"{k}: {v}" for k, v in result.shapes.items())
        extra = (f"; {len(result.rewritten)} shape constants follow the batch"
                 if result.rewritten else "")
        return dims_payload(result), f"{shapes}{extra} -> {args.output}"

    return _rewrite(args, "dims", apply)


def _cmd_opset(args: argparse.Namespace) -> int:
    from .cli_output import opset_payload
    from .surgery import opset

    def apply(model: Any) -> Summary:
        result = opset(model, to=args.to)
        return (opset_payload(result),
                f"opset {result.source} -> {result.target} ({len(result.changed)} nodes "
                f"rewritten by adapters) -> {args.output}")

    return _rewrite(args, "opset", apply)
