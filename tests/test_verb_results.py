"""One result type per verb (issue 25): the verb's result carries every name it resolved
(selectors, TensorFlow-style names, torch module paths -> ONNX names), and its rewrite record,
its ``--json`` payload, its recipe step and its ``result`` in ``apply --json`` are derived from
it. Each verb is given names that are not ONNX names, through the CLI, and all four must carry
the same resolved ONNX names; the library call with the same arguments gives the same record,
payload and step."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx
import pytest
import yaml

from onnxsurgeon import cli_output
from onnxsurgeon.recipe.format import parse_recipe
from onnxsurgeon.recipe.fromlog import step_for_result
from onnxsurgeon.record import RewriteRecord, records
from onnxsurgeon.schema import validate
from onnxsurgeon.surgery import Weights, bypass, copy, extract, insert, merge, rename, reroute
from tests.cli_helpers import cli_main
from tests.test_bypass_modules import gelu_model

ROOT = Path(__file__).resolve().parent.parent
SEED = ROOT / "models" / "seed_cnn.onnx"  # TensorFlow names: 'network/layer_conv5/Relu:0'
TORCH = ROOT / "models" / "torch_cnn.onnx"  # module paths: conv5 -> 'conv2d', fc -> 'logits'
RELU, CONV = "network/layer_conv5/Relu:0", "network/layer_conv5/Conv2D:0"
CLI_KEYS = {"schema", "command", "model", "output", "verify"}
"""Keys of a rewriting command's --json that the command adds around the verb's payload."""

Names = Callable[[Any], Any]


@dataclass(frozen=True)
class Case:
    model: str  # "seed", "torch", "gelu" or "merge" (FIRST; SECOND is passed as a flag)
    flags: tuple[str, ...]
    step: dict[str, Any]  # the same call as a recipe step, with the user's names
    call: Callable[[onnx.ModelProto, Path], Any]  # the same call in the Python API
    names: tuple[Names, Names, Names]  # resolved names read off payload, record, recipe step
    expected: Any
    payload: Callable[[Any], dict[str, Any]]


CASES = {
    "extract": Case(
        "seed", ("--outputs", "logits", "--inputs", "network/layer_conv5/Relu"),
        {"outputs": ["logits"], "inputs": ["network/layer_conv5/Relu"]},
        lambda m, d: extract(m, ["logits"], inputs=["network/layer_conv5/Relu"]),
        (lambda p: (p["outputs"], p["inputs"]), lambda r: (list(r.outputs), list(r.inputs)),
         lambda s: (s["outputs"], s["inputs"])),
        (["logits:0"], [RELU]), cli_output.extract_payload),
    "copy": Case(
        "torch", ("--outputs", "fc", "--prefix", "twin/", "--stop-at", "conv5"),
        {"outputs": ["fc"], "prefix": "twin/", "replace_inputs": {"conv5": "conv5"}},
        lambda m, d: copy(m, ["fc"], prefix="twin/", stop_at=["conv5"]),
        (lambda p: list(p["outputs"]), lambda r: list(r.outputs), lambda s: s["outputs"]),
        ["logits"], cli_output.copy_payload),
    "insert": Case(
        "torch", ("--at", "conv5", "--op", "identity"), {"at": "conv5", "op": "identity"},
        lambda m, d: insert(m, "conv5", op="identity"),
        (lambda p: p["at"], lambda r: r.at, lambda s: s["at"]), "conv2d",
        cli_output.insert_payload),
    "reroute": Case(
        "seed", ("--from", "network/layer_conv5/Relu", "--to", "network/layer_conv5/Conv2D",
                 "--consumers", "network/aux/pool"),
        {"from": "network/layer_conv5/Relu", "to": "network/layer_conv5/Conv2D",
         "consumers": ["network/aux/pool"]},
        lambda m, d: reroute(m, "network/layer_conv5/Relu", "network/layer_conv5/Conv2D",
                             consumers=["network/aux/pool"]),
        (lambda p: (p["from"], p["to"], p["rerouted"]),
         lambda r: (r.source, r.target, list(r.rerouted)),
         lambda s: (s["from"], s["to"], s["consumers"])),
        (RELU, CONV, ["network/aux/pool"]), cli_output.reroute_payload),
    "rename": Case(
        "torch", ("--map", "fc=scores"), {"mapping": {"fc": "scores"}},
        lambda m, d: rename(m, {"fc": "scores"}),
        (lambda p: p["renamed"], lambda r: r.renamed, lambda s: s["mapping"]),
        {"logits": "scores"}, cli_output.rename_payload),
    "bypass": Case(
        "gelu", ("--node", "act", "--prune"), {"nodes": ["act"], "prune": True},
        lambda m, d: bypass(m, "act", prune=True),
        (lambda p: (p["removed"], p["modules"], p["pruned"]),
         lambda r: (list(r.removed), r.modules, list(r.pruned)),
         # the step names the module again (replaying it resolves it the same way)
         lambda s: (["/act/Mul_1"] if s["nodes"] == ["act"] else s["nodes"], {"act": "/act/Mul_1"},
                    ["/act/Div", "/act/Erf", "/act/Add", "/act/Mul"] if s["prune"] else [])),
        (["/act/Mul_1"], {"act": "/act/Mul_1"}, ["/act/Div", "/act/Erf", "/act/Add", "/act/Mul"]),
        cli_output.bypass_payload),
    "merge": Case(
        "merge", ("--connect", f"network/layer_conv5/Relu={RELU}"),
        {"connect": {"network/layer_conv5/Relu": RELU}},
        lambda m, d: merge(m, onnx.load(str(d / "second.onnx")),
                           connect={"network/layer_conv5/Relu": RELU}),
        (lambda p: (p["outputs"], p["renamed"]), lambda r: (list(r.outputs), r.renamed), None),
        None, lambda r: cli_output.merge_payload(r, second="second.onnx")),
}


def _source(kind: str, tmp_path: Path) -> Path:
    if kind == "seed":
        return SEED
    if kind == "torch":
        return TORCH
    path = tmp_path / f"{kind}.onnx"
    if kind == "gelu":
        onnx.save(gelu_model(), str(path))
        return path
    first, second = onnx.load(str(SEED)), onnx.load(str(SEED))
    extract(first, [RELU])
    extract(second, ["logits:0"], inputs=[RELU])
    onnx.save(first, str(path))
    onnx.save(second, str(tmp_path / "second.onnx"))
    return path


def _last_record(path: Path) -> RewriteRecord:
    return records(onnx.load(str(path)))[-1]


@pytest.mark.parametrize("verb", list(CASES))
def test_record_payload_and_recipe_step_carry_the_resolved_names(verb, tmp_path, capsys,
                                                                  monkeypatch):
    case = CASES[verb]
    monkeypatch.chdir(tmp_path)  # merge's SECOND as given: 'second.onnx'
    src = _source(case.model, tmp_path)
    second = ("second.onnx",) if verb == "merge" else ()
    out = tmp_path / "out.onnx"
    code, stdout, err = cli_main(capsys, verb, src, *second, "-o", out, *case.flags, "--json")
    assert code == 0, err
    data = json.loads(stdout)
    validate(verb, data)
    payload = {k: v for k, v in data.items() if k not in CLI_KEYS}
    record = _last_record(out)
    from_payload, from_record, from_step = case.names
    assert from_payload(payload) == from_record(record)
    if case.expected is not None:
        assert from_payload(payload) == case.expected

    # the recipe that replays the log: its step carries the record's ONNX names
    code, stdout, err = cli_main(capsys, "recipe", out, "--json")
    if verb == "merge":  # the log does not hold the second model
        assert code == 2 and "write that step by hand" in err
        step = None
    else:
        assert code == 0, err
        (step,) = [s[verb] for s in json.loads(stdout)["steps"]]
        assert from_step is not None and from_step(step) == from_record(record)
    if verb == "copy":
        assert payload["outputs"] == record.outputs == {"logits": "twin/logits"}
        assert record.replace_inputs == step["replace_inputs"] == {"conv2d": "conv2d"}
        assert step["outputs"] == ["logits"] and step["prefix"] == payload["prefix"] == "twin/"
    if verb == "insert":
        assert payload["processed"] == record.processed
        assert payload["block_nodes"] == list(record.block_nodes)

    # the same step in a recipe, with the user's names: its result is the verb's --json fields
    recipe = tmp_path / "r.yaml"
    params = {**case.step, **({"second": "second.onnx"} if verb == "merge" else {})}
    recipe.write_text(yaml.safe_dump({"onnxsurgeon": 1, "steps": [{verb: params}]}))
    code, stdout, err = cli_main(capsys, "apply", recipe, src, "-o", tmp_path / "applied.onnx",
                                 "--json")
    assert code == 0, err
    (ran,) = json.loads(stdout)["steps"]
    drop = {"second"} if verb == "merge" else set()  # the path as each command was given it
    assert ({k: v for k, v in ran["result"].items() if k not in drop}
            == {k: v for k, v in payload.items() if k not in drop})
    assert _last_record(tmp_path / "applied.onnx") == record

    # the library: the result derives the record the verb wrote, the payload and the step
    model = onnx.load(str(src))
    result = case.call(model, tmp_path)
    assert result.record() == records(model)[-1] == record
    assert case.payload(result) == payload
    if step is not None:
        made = parse_recipe({"onnxsurgeon": 1, "steps": [step_for_result(result)]})
        assert made.to_data()["steps"] == [{verb: step}]  # as the recipe command prints it


def test_copy_result_carries_the_options_it_was_made_with():
    model = onnx.load(str(TORCH))
    result = copy(model, ["fc"], weights="shared", prefix="twin/", stop_at=["conv5"])
    assert (result.weights, result.prefix, result.replace_inputs) == (
        Weights.SHARED, "twin/", {"conv2d": "conv2d"})
    assert result.copied_nodes == len(result.nodes) == 3  # relu, mean, linear
    assert result.record().copied == {"nodes": 3, "initializers": 0}
