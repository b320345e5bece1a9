"""The step registry: every verb a recipe may use, with its typed keys and the library call.

This table is the one definition of the recipe format (the README's step table is generated
from it and a test checks they agree). A new surgery verb becomes a recipe step with one
:class:`~onnxsurgeon.recipe.spec.Verb` entry here: its keys are the Python API's keywords, and
``run`` calls the library function and returns the same result the verb's CLI ``--json`` prints
(the verb's payload in :mod:`onnxsurgeon.cli_output`, derived from its result type).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..cli_output import (
    bypass_payload,
    cleanup_payload,
    copy_payload,
    dims_payload,
    extract_payload,
    fold_payload,
    insert_payload,
    merge_payload,
    opset_payload,
    outputs_payload,
    precision_payload,
    rename_payload,
    replace_payload,
    reroute_payload,
    set_payload,
    toposort_payload,
)
from ..errors import UsageError
from .spec import Kind, Param, StepContext, Verb


def _extract(model: Any, p: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
    from ..surgery import extract

    return extract_payload(extract(model, p["outputs"], inputs=p["inputs"]))


def _copy(model: Any, p: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
    from ..surgery import Weights, copy

    return copy_payload(copy(model, p["outputs"], weights=Weights(p["weights"]),
                             prefix=p["prefix"], replace_inputs=dict(p["replace_inputs"]) or None))


def _insert(model: Any, p: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
    from ..surgery import insert

    keep = p.get("keep_output_name", True)
    block = None
    if "func" in p:
        if ctx.insert_function is None:
            raise UsageError("an insert step with func: needs the framework converters; pass "
                             "insert_function=onnxsurgeon.converters.insert_function")
        r = ctx.insert_function(model, p["at"], p["func"], p["framework"],
                                as_output=p["as_output"], keep_output_name=keep)
        block = "func"
    elif "graph" in p:
        from ..io import load

        r = insert(model, p["at"], graph=load(p["graph"]), as_output=p["as_output"],
                   keep_output_name=keep)
    else:
        r = insert(model, p["at"], op=p["op"], params=p.get("params") or None,
                   as_output=p["as_output"], keep_output_name=keep)
    return insert_payload(r, block=block)


def _rename(model: Any, p: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
    from ..surgery import rename

    return rename_payload(rename(model, p.get("mapping") or None,
                                 regex=[tuple(i) for i in p.get("regex") or []], nodes=p["nodes"]))


def _precision(model: Any, p: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
    from ..surgery import precision
    from ..surgery.replace import _tolerance

    budget = _tolerance(p.get("budget"))
    if not p.get("auto_block"):
        return precision_payload(precision(model, to=p["to"], keep_io_types=p["keep_io_types"],
                                           block=p.get("block") or [],
                                           keep=p.get("keep") or None, budget=budget))
    import argparse

    from ..cli_flags import split_ranges
    from ..cli_values import input_range
    from ..verify.precision import auto_block

    try:
        ranges = dict(input_range(item) for item in split_ranges(p["range"])) if p.get("range") \
            else None
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"precision range: {exc}") from None
    rtol, atol = budget or (None, None)
    auto = auto_block(model, to=p["to"], keep_io_types=p["keep_io_types"],
                      block=p.get("block") or [], inputs=p.get("inputs"), ranges=ranges,
                      seed=p["seed"], rtol=rtol, atol=atol)
    return precision_payload(auto.result, auto)


def _bypass(model: Any, p: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
    from ..surgery import bypass

    return bypass_payload(bypass(model, p["nodes"], input=p["input"], prune=p["prune"]))


def _merge(model: Any, p: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
    from ..io import load
    from ..surgery import merge

    r = merge(model, load(p["second"]), connect=list(p["connect"].items()),
              prefix=p.get("prefix"), outputs=p.get("outputs"))
    return merge_payload(r, second=str(p["second"]))


def _verify_merge(before: Any, after: Any, record: Any, p: Mapping[str, Any],
                  options: Mapping[str, Any]) -> Any:
    from ..io import load
    from ..verify import verify_merge

    return verify_merge(before, load(p["second"]), after, record=record, **options)


def _reroute(model: Any, p: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
    from ..surgery import reroute

    return reroute_payload(reroute(model, p["from"], p["to"], consumers=p.get("consumers"),
                                   prune=p.get("prune", False)))


def _replace(model: Any, p: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
    from ..surgery import replace

    return replace_payload(replace(model, pattern=p["pattern"], replacement=p["replacement"],
                                   any_constant=p.get("any_constant") or (),
                                   tolerance=p.get("tolerance")))


# ---- hygiene verbs (issue 30): cleanup, toposort, outputs, set_values
def _cleanup(model: Any, p: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
    from ..surgery import cleanup

    return cleanup_payload(cleanup(model))


def _toposort(model: Any, p: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
    from ..surgery import toposort

    return toposort_payload(toposort(model))


def _outputs(model: Any, p: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
    from ..surgery import outputs

    return outputs_payload(outputs(model, add=p.get("add") or [], remove=p.get("remove") or []))


def _set_values(model: Any, p: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
    from ..surgery import set_values

    return set_payload(set_values(model, attrs=dict(p.get("attrs") or {}),
                                  weights=dict(p.get("weights") or {}),
                                  reshape=p.get("reshape", False)))


def _split(model: Any, p: Mapping[str, Any], ctx: StepContext) -> tuple[dict[str, Any], Any]:
    from ..surgery.split import SplitBy, split

    result = split(model, stages=p.get("stages"), by=SplitBy(p["by"]), at=p.get("at") or (),
                   dims=dict(p.get("dims") or {}))
    return result.manifest([]), result


def _split_stage(model: Any, p: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
    from ..surgery.split import split_stage

    s = split_stage(model, at=p["at"], stage=p["stage"], by=p["by"],
                    dims=dict(p.get("dims") or {}))
    return {"stage": s.stage, "stages": s.stages, "inputs": s.inputs, "outputs": s.outputs,
            "nodes": [s.first_node, s.last_node], "cost": s.cost}


def _fold(model: Any, p: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
    from ..surgery import fold
    from ..verify.folding import ort_evaluator

    return fold_payload(fold(model, max_bytes=p["max_bytes"], evaluate=ort_evaluator,
                             fuse=p.get("fuse", True)))


def _dims(model: Any, p: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
    from ..surgery import dims

    batch = p.get("batch")
    return dims_payload(dims(model, inputs=dict(p.get("inputs") or {}) or None,
                             batch=None if batch is None else str(batch)))


def _opset(model: Any, p: Mapping[str, Any], ctx: StepContext) -> dict[str, Any]:
    from ..surgery import opset

    return opset_payload(opset(model, to=p["to"]))


STEPS: dict[str, Verb] = {
    v.name: v
    for v in (
        Verb("extract", (
            Param("outputs", Kind.NAMES, required=True, help="tensors the result computes"),
            Param("inputs", Kind.NAMES, default=[], help="stop tensors that become graph inputs"),
        ), _extract, help="keep only the dependency closure of `outputs`"),
        Verb("copy", (
            Param("outputs", Kind.NAMES, required=True, help="tensors whose closure is copied"),
            Param("weights", Kind.CHOICE, default="independent", choices=("independent", "shared"),
                  help="copy the weights or share them"),
            Param("prefix", Kind.TEXT, default="copy/", help="name prefix of the copy"),
            Param("replace_inputs", Kind.RENAMES, default={},
                  help="the copy reads B wherever the original reads A"),
        ), _copy, help="duplicate the closure of `outputs`; the copies become graph outputs"),
        Verb("insert", (
            Param("at", Kind.NAME, required=True, help="the activation to process"),
            Param("op", Kind.TEXT, help="a built-in block (l2_normalize, scale, ...)"),
            Param("params", Kind.PARAMS, help="the built-in block's parameters"),
            Param("graph", Kind.FILE, help="a one-input one-output .onnx block"),
            Param("func", Kind.FUNC, help="FILE.py:NAME, a TensorFlow or PyTorch function"),
            Param("framework", Kind.CHOICE, choices=("tf", "torch"), help="framework of `func`"),
            Param("as_output", Kind.BOOL, default=False,
                  help="expose the result as a new output instead of rerouting"),
            Param("keep_output_name", Kind.BOOL,
                  help="when `at` is a graph output, the processed tensor takes its name "
                       "(default true; false: the graph output is renamed)"),
        ), _insert, one_of=(("op", "graph", "func"),),
            requires={"params": "op", "framework": "func", "func": "framework"},
            help="splice a processing block in at `at`"),
        Verb("reroute", (
            Param("from", Kind.NAME, required=True, help="the tensor whose readers move"),
            Param("to", Kind.NAME, required=True, help="the tensor they read instead"),
            Param("consumers", Kind.NAMES, help="only these consumer nodes (default: all)"),
            Param("prune", Kind.BOOL,
                  help="remove what no graph output depends on any more (default false)"),
        ), _reroute, help="consumers of `from` read `to` instead"),
        Verb("rename", (
            Param("mapping", Kind.RENAMES, help="old name (any selector) -> new name"),
            Param("regex", Kind.PAIRS, help="re.sub PATTERN -> REPLACEMENT over every other name, "
                                            "in order"),
            Param("nodes", Kind.BOOL, default=False, help="rename node names instead of tensors"),
        ), _rename, help="rename tensors (or nodes), keeping every reader and output"),
        Verb("bypass", (
            Param("nodes", Kind.NAMES, required=True, help="node(s) to remove (a chain at once)"),
            Param("input", Kind.NATURAL, default=0, help="which input their readers read instead"),
            Param("prune", Kind.BOOL, default=False,
                  help="also remove the nodes (and initializers) no graph output depends on any more"),
        ), _bypass, help="remove nodes; their readers read their input"),
        Verb("merge", (
            Param("second", Kind.FILE, required=True, help="the .onnx model appended behind"),
            Param("connect", Kind.RENAMES, required=True,
                  help="this model's tensor -> the second model's input it feeds"),
            Param("prefix", Kind.TEXT, help="prefix of the second's colliding names"),
            Param("outputs", Kind.NAMES, help="graph outputs of the merged model"),
        ), _merge, check=_verify_merge, help="append a second model behind this one"),
        Verb("replace", (
            Param("pattern", Kind.FILE, required=True,
                  help="the pattern graph P: an .onnx or ONNX text file, or inline "
                       "(onnx-base64:...)"),
            Param("replacement", Kind.FILE, required=True,
                  help="what each match becomes (R, bound to P by position)"),
            Param("any_constant", Kind.NAMES, help="pattern constants that match any value"),
            Param("tolerance", Kind.TEXT, help="RTOL,ATOL the proof compares R with P under"),
        ), _replace, help="replace every match of a structural pattern"),
        Verb("cleanup", (), _cleanup,
             help="drop what no graph output needs (nodes, initializers, value_info, local "
                  "functions, opsets; bodies too)"),
        Verb("toposort", (), _toposort,
             help="sort every graph's nodes topologically, stably (bodies, local functions)"),
        Verb("outputs", (
            Param("add", Kind.NAMES, help="tensors to make graph outputs (typed)"),
            Param("remove", Kind.NAMES, help="graph outputs to drop, with what only they needed"),
        ), _outputs, help="expose tensors as graph outputs, or drop outputs"),
        Verb("set_values", (
            Param("attrs", Kind.RENAMES, help="NODE.KEY -> value text, typed by the op schema"),
            Param("weights", Kind.RENAMES, help="initializer -> .npy file with its new values"),
            Param("reshape", Kind.BOOL, default=False,
                  help="allow a weight of another shape (same dtype)"),
        ), _set_values, help="change node attributes or initializer values (CLI: `set`)"),
        Verb("precision", (
            Param("to", Kind.CHOICE, required=True, choices=("fp16", "bf16"), help="the low type"),
            Param("keep_io_types", Kind.BOOL, default=False,
                  help="graph inputs and outputs stay float32"),
            Param("block", Kind.NAMES, help="op types, node names or selectors kept in float32"),
            Param("keep", Kind.RENAMES, help="node name -> why it stays float32"),
            Param("budget", Kind.TEXT,
                  help="RTOL,ATOL the outputs may err against float32 (recorded for verify)"),
            Param("auto_block", Kind.BOOL, default=False,
                  help="keep float32 the nodes whose local error exceeds the budget or that "
                       "overflow, found layer by layer"),
            Param("inputs", Kind.FILE, help="an .npz file or a folder of them (auto_block)"),
            Param("range", Kind.TEXT, help="[NAME=]LO,HI of the random inputs (auto_block)"),
            Param("seed", Kind.NATURAL, default=0, help="seed of the random inputs (auto_block)"),
        ), _precision, help="convert to float16/bfloat16, Casts only where float32 stays"),
        Verb("fold", (
            Param("max_bytes", Kind.NATURAL, default=1 << 20,
                  help="a folded value over this many bytes stays computed"),
            Param("fuse", Kind.BOOL, default=True,
                  help="also remove no-ops and fuse MatMul+Add -> Gemm, Conv+BatchNormalization "
                       "-> Conv (false: fold only)"),
        ), _fold, help="replace every subgraph of constants by its value"),
        Verb("dims", (
            Param("inputs", Kind.RENAMES, help="graph input -> its new shape (1x3x224x224)"),
            Param("batch", Kind.TEXT, help="dim 0 of every input: a size, dynamic or a symbol"),
        ), _dims,
            help="set input shapes or the batch; shape constants follow it"),
        Verb("opset", (
            Param("to", Kind.NATURAL, required=True, help="the opset to convert to"),
        ), _opset, help="convert the default-domain opset (onnx's version converter)"),
        Verb("split", (
            Param("stages", Kind.COUNT, help="the number of stages (>= 2)"),
            Param("by", Kind.CHOICE, default="flops", choices=("flops", "params", "activations"),
                  help="the cost the stages balance"),
            Param("at", Kind.NAMES, help="cut right after the nodes computing these tensors"),
            Param("dims", Kind.DIMS, help="sizes of symbolic dimensions for the costs"),
        ), None, rewrites=False, make=_split,
            help="the last step only: cut into stages, written as `-o DIR` (stage_K.onnx + "
                 "manifest.json)"),
        Verb("split_stage", (
            Param("at", Kind.NAMES, required=True, help="every cut tensor of the split"),
            Param("stage", Kind.NATURAL, required=True, help="the stage kept (0 is the first)"),
            Param("by", Kind.CHOICE, default="flops", choices=("flops", "params", "activations"),
                  help="the cost the stage's record reports"),
            Param("dims", Kind.DIMS, help="sizes of symbolic dimensions for the costs"),
        ), _split_stage, help="keep one stage of a split (what `split` writes as stage_K)"),
        Verb("verify", (
            Param("samples", Kind.COUNT, help="random input samples"),
            Param("seed", Kind.NATURAL, default=0, help="seed of the random inputs"),
            Param("dims", Kind.DIMS, help="sizes of symbolic dimensions"),
            Param("inputs", Kind.FILE, help="an .npz file or a folder of them"),
        ), None, rewrites=False,
            help="checkpoint: prove every rewrite step since the previous checkpoint"),
    )
}
"""Verb name -> its definition, in the order the README lists them."""

ALIASES: dict[str, dict[str, str]] = {"reroute": {"source": "from", "target": "to"},
                                       "rename": {"map": "mapping"}, "bypass": {"node": "nodes"}}
"""Per verb, the Python API's names of positional arguments -> the recipe key."""


def markdown_table() -> str:
    """The README's table of recipe steps, generated from :data:`STEPS` (a test keeps them equal)."""
    rows = ["| step | keys (required in **bold**) | what it does |", "|---|---|---|"]
    for verb in STEPS.values():
        keys = ", ".join(f"**{p.key}**" if p.required else p.key for p in verb.params)
        rows.append(f"| `{verb.name}` | {keys or '-'} | {verb.help} |")
    return "\n".join(rows)
