"""Recipes: every verb as a step, one load and one save, --plan, errors per step, provenance."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import yaml
from onnx import TensorProto, helper

import onnxsurgeon as osg
from onnxsurgeon.pattern import load_pattern, pattern_bytes
from onnxsurgeon.recipe import (
    RECIPE_KEY,
    RECIPE_SHA_KEY,
    STEPS,
    RecipeError,
    apply_recipe,
    load_recipe,
    parse_recipe,
    recipe_from_log,
)
from onnxsurgeon.record import (
    RECORD_TYPES,
    BypassRecord,
    CopyRecord,
    DimsRecord,
    ExtractRecord,
    FoldRecord,
    InsertRecord,
    OpsetRecord,
    PrecisionRecord,
    RenameRecord,
    ReplaceRecord,
    RerouteRecord,
    rewrites,
)
from onnxsurgeon.surgery import (
    Weights,
    bypass,
    copy,
    dims,
    extract,
    fold,
    insert,
    merge,
    opset,
    precision,
    rename,
    replace,
    reroute,
)
from onnxsurgeon.verify.folding import ort_evaluator
from tests import builders
from tests.cli_helpers import cli

ROOT = Path(__file__).resolve().parent.parent
SEED = ROOT / "models" / "seed_cnn.onnx"
RELU = "network/layer_conv5/Relu:0"
CONV = "network/layer_conv5/Conv2D:0"


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


from tests.conftest import run  # noqa: E402 - the shared onnxruntime helper


def write_recipe(path: Path, steps: list[dict[str, Any]], **top: Any) -> Path:
    path.write_text(yaml.safe_dump({"onnxsurgeon": 1, **top, "steps": steps}, sort_keys=False))
    return path


def without_recipe(proto: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    keep = [p for p in out.metadata_props if p.key not in (RECIPE_KEY, RECIPE_SHA_KEY)]
    del out.metadata_props[:]
    out.metadata_props.extend(keep)
    return out


def block_model(dims: tuple[str, ...] = ("n", "c", "h", "w")) -> onnx.ModelProto:
    """A one-input one-output block: y = 2 * x (a float tensor of rank len(dims))."""
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "two"], ["y"], name="double")], "double",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(dims))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(dims))],
        [helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


X = {"input:0": np.random.default_rng(0).standard_normal((1, 8, 8, 3)).astype(np.float32)}

RELU_P = pattern_bytes(load_pattern(b"g (float[N,C,H,W] x) => (float[N,C,H,W] y) { y = Relu(x) }"))
MAX0_R = pattern_bytes(load_pattern(
    b"g (float[N,C,H,W] x) => (float[N,C,H,W] y) <float zero = {0.0}> { y = Max(x, zero) }"))
"""A pattern and its replacement inline (a recipe's ``replace`` keys may be paths or inline)."""

# verb -> (step keys, the same rewrite through the Python API). A verb added to STEPS without a
# case here fails test_every_registered_verb_has_a_case.
CASES: dict[str, tuple[dict[str, Any], Callable[[osg.Model, Path], Any]]] = {
    "extract": ({"outputs": ["logits:0"], "inputs": [RELU]},
                lambda m, d: extract(m, ["logits:0"], inputs=[RELU])),
    "copy": ({"outputs": ["logits:0"], "weights": "shared", "prefix": "twin/",
              "replace_inputs": {RELU: CONV}},
             lambda m, d: copy(m, ["logits:0"], weights=Weights.SHARED, prefix="twin/",
                               replace_inputs={RELU: CONV})),
    "insert": ({"at": RELU, "op": "l2_normalize", "params": {"axis": 1}},
               lambda m, d: insert(m, RELU, op="l2_normalize", params={"axis": 1})),
    "reroute": ({"from": RELU, "to": CONV, "consumers": ["network/aux/pool"]},
                lambda m, d: reroute(m, RELU, CONV, consumers=["network/aux/pool"])),
    "precision": ({"to": "fp16", "keep_io_types": True, "block": ["Softmax"]},
                  lambda m, d: precision(m, to="fp16", keep_io_types=True, block=["Softmax"])),
    "rename": ({"mapping": {"logits:0": "scores"}, "regex": [["^network/aux/", "side/"]]},
               lambda m, d: rename(m, {"logits:0": "scores"}, regex=[("^network/aux/", "side/")])),
    "bypass": ({"nodes": ["network/layer_conv5/Relu"]},
               lambda m, d: bypass(m, ["network/layer_conv5/Relu"], input=0)),
    "merge": ({"second": "blocks/head.onnx", "connect": {"logits:0": "x"}, "prefix": "head/"},
              lambda m, d: merge(m, osg.load(d / "blocks/head.onnx"), connect=[("logits:0", "x")],
                                 prefix="head/")),
    "replace": ({"pattern": RELU_P, "replacement": MAX0_R},
                lambda m, d: replace(m, pattern=RELU_P, replacement=MAX0_R)),
    "cleanup": ({}, lambda m, d: osg.surgery.cleanup(m)),
    "toposort": ({}, lambda m, d: osg.surgery.toposort(m)),
    "outputs": ({"add": [RELU], "remove": ["aux:0"]},
                lambda m, d: osg.surgery.outputs(m, add=[RELU], remove=["aux:0"])),
    "set_values": ({"attrs": {"network/aux/dense.alpha": "0.5"}},
                   lambda m, d: osg.surgery.set_values(
                       m, attrs={"network/aux/dense.alpha": "0.5"})),
    "fold": ({"max_bytes": 1024}, lambda m, d: fold(m, max_bytes=1024, evaluate=ort_evaluator)),
    "dims": ({"inputs": {"input:0": "2x8x8x3"}}, lambda m, d: dims(m, inputs={"input:0": "2x8x8x3"})),
    "opset": ({"to": 18}, lambda m, d: opset(m, to=18)),
    "split_stage": ({"at": [CONV], "stage": 1, "dims": {"batch": 1}},
                    lambda m, d: osg.surgery.split_stage(m, at=[CONV], stage=1,
                                                         dims={"batch": 1})),
}
EXTRA_CASES = {
    "rename-nodes": ("rename", {"map": {"network/fc1/MatMul": "fc/mm"}, "nodes": True},
                     lambda m, d: rename(m, {"network/fc1/MatMul": "fc/mm"}, nodes=True)),
    "insert-graph": ("insert", {"at": RELU, "graph": "blocks/double.onnx", "as_output": True},
                     lambda m, d: insert(m, RELU, graph=osg.load(d / "blocks/double.onnx"),
                                         as_output=True)),
}


def blocks(folder: Path) -> None:
    (folder / "blocks").mkdir()
    osg.save(block_model(), folder / "blocks" / "double.onnx")
    osg.save(block_model(("n", "k")), folder / "blocks" / "head.onnx")


def test_every_registered_verb_has_a_case():
    assert set(CASES) == {v for v, spec in STEPS.items() if spec.rewrites}


@pytest.mark.parametrize("case", [*CASES, *EXTRA_CASES])
def test_step_equals_the_python_api_call(case, tmp_path):
    verb, keys, call = ((case, *CASES[case]) if case in CASES else EXTRA_CASES[case])
    blocks(tmp_path)
    recipe = parse_recipe({"onnxsurgeon": 1, "steps": [{verb: keys}]}, base_dir=tmp_path)
    by_recipe, by_api = osg.load(SEED), osg.load(SEED)
    result = apply_recipe(by_recipe, recipe)
    call(by_api, tmp_path)
    assert result.ok and [s.step.verb for s in result.steps] == [verb]
    assert without_recipe(by_recipe.proto).SerializeToString() == by_api.proto.SerializeToString()
    assert rewrites(by_recipe.proto)[-1]["op"] == verb


@pytest.mark.parametrize("verb", list(CASES))
def test_every_verb_is_proven_at_a_checkpoint(verb, tmp_path):
    blocks(tmp_path)
    recipe = parse_recipe({"onnxsurgeon": 1, "steps": [{verb: CASES[verb][0]}, {"verify": {}}]},
                          base_dir=tmp_path)
    result = apply_recipe(osg.load(SEED), recipe)
    ((number, report),) = result.reports
    assert number == 2 and report.ok and report.pairs
    assert all(p.check.startswith(f"1:{verb}:") and p.ok for p in report.pairs)


def test_apply_equals_chained_cli_calls_and_is_deterministic(tmp_path):
    steps = [
        {"copy": {"outputs": ["logits:0"], "prefix": "twin/"}},
        {"reroute": {"from": RELU, "to": CONV, "consumers": ["network/aux/pool"]}},
        {"insert": {"at": RELU, "op": "l2_normalize", "params": {"axis": 1}}},
        {"extract": {"outputs": ["logits:0", "twin/logits:0", "aux:0"]}},
    ]
    recipe = write_recipe(tmp_path / "r.yaml", steps)
    before = sha(SEED)
    out1, out2 = tmp_path / "a.onnx", tmp_path / "b.onnx"
    for out in (out1, out2):
        proc = cli("apply", recipe, SEED, "-o", out)
        assert proc.returncode == 0, proc.stderr
    assert sha(out1) == sha(out2) and sha(SEED) == before
    chained = [
        ("copy", "--outputs", "logits:0", "--prefix", "twin/"),
        ("reroute", "--from", RELU, "--to", CONV, "--consumers", "network/aux/pool"),
        ("insert", "--at", RELU, "--op", "l2_normalize:axis=1"),
        ("extract", "--outputs", "logits:0,twin/logits:0,aux:0"),
    ]
    src = SEED
    for k, (verb, *flags) in enumerate(chained):
        dst = tmp_path / f"step{k}.onnx"
        proc = cli(verb, src, "-o", dst, *flags)
        assert proc.returncode == 0, proc.stderr
        src = dst
    applied, by_cli = onnx.load(str(out1)), onnx.load(str(src))
    assert applied.graph == by_cli.graph
    assert rewrites(applied) == rewrites(by_cli)
    got, want = run(out1, X), run(src, X)
    assert list(got) == list(want) == ["logits:0", "twin/logits:0", "aux:0"]
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])
    # the twin is untouched by the insert: it still equals the original logits
    np.testing.assert_array_equal(got["twin/logits:0"], run(SEED, X)["logits:0"])


def test_plan_accounts_for_each_step_and_writes_nothing(tmp_path):
    steps = [
        {"copy": {"outputs": ["logits:0"], "prefix": "twin/"}},
        {"reroute": {"from": RELU, "to": CONV, "consumers": ["network/aux/pool"]}},
        {"verify": {}},
        {"extract": {"outputs": ["logits:0"]}},
    ]
    recipe = write_recipe(tmp_path / "r.yaml", steps)
    out = tmp_path / "out.onnx"
    proc = cli("apply", recipe, SEED, "-o", out, "--plan", "--json")
    assert proc.returncode == 0, proc.stderr
    assert not out.exists() and list(tmp_path.iterdir()) == [recipe]
    data = json.loads(proc.stdout)
    assert data["plan"] is True and data["output"] is None and data["verify"] is None
    copy_plan, reroute_plan, check, extract_plan = data["steps"]
    assert copy_plan["plan"]["nodes"] == {"before": 9, "after": 15, "kept": 9, "added": 6,
                                          "dropped": 0}
    assert copy_plan["plan"]["new_outputs"] == ["twin/logits:0"]
    assert reroute_plan["result"]["rerouted"] == ["network/aux/pool"]
    assert check["result"] == {"would_verify": [1, 2]}
    # extract is checked against the model as the steps before it leave it (15 nodes, 3 outputs)
    assert extract_plan["plan"]["nodes"]["before"] == 15
    assert extract_plan["plan"]["dropped_outputs"] == ["aux:0", "twin/logits:0"]
    assert extract_plan["plan"]["nodes"]["after"] == 6
    text = cli("apply", recipe, SEED, "-o", out, "--plan").stdout
    assert "nodes 9 -> 15 (kept 9, added 6, dropped 0); new outputs: twin/logits:0" in text
    assert "step 3 verify: would prove steps 1, 2" in text and "nothing written" in text


def test_plan_checks_a_step_against_the_model_the_earlier_steps_leave(tmp_path):
    # after the extract, aux:0 is gone: the reroute must fail in the plan, naming step 2
    steps = [{"extract": {"outputs": ["logits:0"]}},
             {"reroute": {"from": RELU, "to": CONV, "consumers": ["network/aux/pool"]}}]
    recipe = write_recipe(tmp_path / "r.yaml", steps)
    proc = cli("apply", recipe, SEED, "-o", tmp_path / "out.onnx", "--plan")
    assert proc.returncode == 2
    assert "step 2 (reroute), key 'consumers'" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(("steps", "expected"), [
    ([{"extract": {"outptus": ["logits:0"]}}],
     "step 1 (extract): unknown key 'outptus'; extract takes outputs, inputs; did you mean 'outputs'?"),
    ([{"extract": {"outputs": ["logits:0"]}}, {"extrct": {"outputs": ["x"]}}],
     "step 2: unknown verb 'extrct'"),
    ([{"copy": {"outputs": ["logits:0"], "weights": "indep"}}],
     "step 1 (copy): key 'weights' must be one of independent, shared, got 'indep'; did you mean "
     "'independent'?"),
    ([{"extract": {"outputs": ["logit:0"]}}],
     "step 1 (extract), key 'outputs': tensor 'logit:0' not found; did you mean 'logits:0'"),
    ([{"extract": {"outputs": ["logits:0"]}}, {"insert": {"at": "nope", "op": "identity"}}],
     "step 2 (insert), key 'at': tensor 'nope' not found"),
    ([{"insert": {"at": RELU, "op": "l2_normalize", "params": {"axs": 1}}}],
     "step 1 (insert): key 'params': block 'l2_normalize' has no parameter 'axs'"),
    ([{"insert": {"at": RELU, "op": "l2_normalize", "graph": "b.onnx"}}],
     "step 1 (insert): give exactly one of the keys op, graph, func"),
    ([{"insert": {"at": RELU, "func": "p.py:f"}}], "step 1 (insert): key 'func' needs key 'framework'"),
    ([{"reroute": {"from": RELU}}], "step 1 (reroute): missing key 'to'"),
    ([{"verify": {}}], "step 1 (verify): no rewrite step since the previous checkpoint"),
    ([{"extract": {"outputs": ["logits:0"]}, "verify": {}}], "step 1 must be a mapping with one verb"),
    ([{"verify": {"samples": 0}}], "step 1 (verify): key 'samples' must be a whole number >= 1"),
    ([{"insert": {"at": RELU, "graph": "missing.onnx"}}], "step 1 (insert), key 'graph'"),
])
def test_errors_name_step_verb_and_key(steps, expected, tmp_path):
    recipe = write_recipe(tmp_path / "r.yaml", steps)
    out = tmp_path / "out.onnx"
    proc = cli("apply", recipe, SEED, "-o", out)
    assert proc.returncode == 2, proc.stdout
    assert expected in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert not out.exists()


@pytest.mark.parametrize(("text", "expected"), [
    ("steps: [{extract: {outputs: [a]}}]\n", "missing 'onnxsurgeon: 1'"),
    ("onnxsurgeon: 2\nsteps: [{extract: {outputs: [a]}}]\n", "format version 2 is not supported"),
    ("onnxsurgeon: 1\nstep: []\n", "unknown top-level key 'step'"),
    ("onnxsurgeon: 1\nsteps: []\n", "'steps' must be a non-empty list"),
    ("onnxsurgeon: 1\nsteps: [{extract: {outputs: [a]}\n", "not valid YAML"),
    ('{"onnxsurgeon": 1, "steps": [}', "not valid JSON"),
])
def test_recipe_file_errors(text, expected, tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text(text)
    with pytest.raises(RecipeError, match=expected.replace("'", ".").replace("[", r"\[")):
        load_recipe(path)
    proc = cli("apply", path, SEED, "-o", tmp_path / "o.onnx")
    assert proc.returncode == 2 and expected in proc.stderr


def test_yaml_and_json_share_one_schema_and_one_canonical_form(tmp_path):
    steps = [{"insert": {"at": RELU, "op": "scale", "params": {"factor": 2}}},
             {"reroute": {"source": RELU, "target": CONV}}]  # the API's names are accepted too
    y = write_recipe(tmp_path / "r.yaml", steps)
    j = tmp_path / "r.json"
    j.write_text(json.dumps({"steps": [{"insert": {"params": {"factor": 2.0}, "op": "scale",
                                                   "at": RELU, "as_output": False}},
                                       {"reroute": {"to": CONV, "from": RELU}}],
                             "onnxsurgeon": 1}))
    a, b = load_recipe(y), load_recipe(j)
    assert a.canonical() == b.canonical() and a.sha256() == b.sha256()
    assert json.loads(a.canonical())["steps"][1] == {"reroute": {"from": RELU, "to": CONV}}


def test_provenance_recipe_and_sha_in_metadata(tmp_path):
    recipe = write_recipe(tmp_path / "r.yaml", [{"copy": {"outputs": ["logits:0"]}}],
                          description="twin head")
    out = tmp_path / "out.onnx"
    data = json.loads(cli("apply", recipe, SEED, "-o", out, "--json").stdout)
    props = {p.key: p.value for p in onnx.load(str(out)).metadata_props}
    canonical = props[RECIPE_KEY]
    assert hashlib.sha256(canonical.encode()).hexdigest() == props[RECIPE_SHA_KEY]
    assert props[RECIPE_SHA_KEY] == data["recipe_sha256"] == load_recipe(recipe).sha256()
    assert json.loads(canonical) == {
        "onnxsurgeon": 1, "description": "twin head",
        "steps": [{"copy": {"outputs": ["logits:0"], "prefix": "copy/", "replace_inputs": {},
                            "weights": "independent"}}]}
    # the recorded recipe is itself a recipe that reproduces the file
    again = tmp_path / "again.json"
    again.write_text(canonical)
    out2 = tmp_path / "out2.onnx"
    assert cli("apply", again, SEED, "-o", out2).returncode == 0
    assert sha(out2) == sha(out)


def test_recipe_command_replays_rewrites_done_by_hand(tmp_path):
    """CLI calls by hand -> `recipe` -> `apply` on the original reproduces the model."""
    a, b, c, d, e = (tmp_path / f"{n}.onnx" for n in "abcde")
    assert cli("reroute", SEED, "-o", a, "--from", RELU, "--to", CONV,
               "--consumers", "network/aux/pool").returncode == 0
    assert cli("insert", a, "-o", b, "--at", "network/layer_conv5/Relu",
               "--op", "clip:min=0,max=0.5").returncode == 0
    assert cli("copy", b, "-o", c, "--outputs", "logits", "--weights", "shared",
               "--prefix", "v2/").returncode == 0
    assert cli("rename", c, "-o", d, "--map", "logits=scores", "--regex", "^v2/network/=v2/"
               ).returncode == 0
    assert cli("bypass", d, "-o", e, "--node", "v2/network/layer_conv5/Relu").returncode == 0
    c = e
    proc = cli("recipe", c)
    assert proc.returncode == 0, proc.stderr
    recipe = tmp_path / "replay.yaml"
    recipe.write_text(proc.stdout)
    assert [next(iter(s)) for s in yaml.safe_load(proc.stdout)["steps"]] == [
        "reroute", "insert", "copy", "rename", "bypass"]
    out = tmp_path / "replayed.onnx"
    assert cli("apply", recipe, SEED, "-o", out).returncode == 0
    replayed, by_hand = onnx.load(str(out)), onnx.load(str(c))
    assert replayed.graph == by_hand.graph and rewrites(replayed) == rewrites(by_hand)
    # and the JSON form is the same recipe
    as_json = json.loads(cli("recipe", c, "--json").stdout)
    assert parse_recipe(as_json).canonical() == load_recipe(recipe).canonical()


def test_recipe_command_refuses_what_the_log_cannot_replay(tmp_path):
    block = tmp_path / "double.onnx"
    osg.save(block_model(), block)
    out = tmp_path / "g.onnx"
    assert cli("insert", SEED, "-o", out, "--at", RELU, "--graph", block).returncode == 0
    proc = cli("recipe", out)
    assert proc.returncode == 2 and "rewrite 1 (insert)" in proc.stderr and "user graph" in proc.stderr
    proc = cli("recipe", SEED)
    assert proc.returncode == 2 and "records no rewrite" in proc.stderr
    from onnxsurgeon.record import MergeRecord

    merged = MergeRecord(connect=(("a", "b"),), renamed={}, prefix="p/", outputs=("y",))
    with pytest.raises(RecipeError, match="rewrite 1 .merge.: the second model"):
        recipe_from_log([merged])


def test_paths_are_relative_to_the_recipe_file(tmp_path):
    folder = tmp_path / "recipes"
    (folder / "blocks").mkdir(parents=True)
    osg.save(block_model(), folder / "blocks" / "double.onnx")
    recipe = write_recipe(folder / "r.yaml", [
        {"insert": {"at": RELU, "graph": "blocks/double.onnx"}}, {"verify": {}}])
    out = tmp_path / "out.onnx"
    proc = cli("apply", recipe.relative_to(tmp_path), SEED.resolve(), "-o", "out.onnx", "--json",
               cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["verify"]["ok"] is True
    got, orig = run(out, X), run(SEED, X)
    assert not np.array_equal(got["logits:0"], orig["logits:0"])  # the block doubled the activation


def test_replace_pattern_files_are_relative_to_the_recipe_file(tmp_path):
    """``pattern:`` and ``replacement:`` of a replace step are read next to the recipe, as
    ``graph:`` of insert is (they were read from the working directory: 'pattern file
    'relu.txt' not found' when apply ran elsewhere); an inline pattern stays inline."""
    folder = tmp_path / "recipes"
    folder.mkdir()
    (folder / "relu.txt").write_text("g (float x) => (float y) { y = Relu(x) }")
    (folder / "max0.txt").write_text(
        "g (float x) => (float y) <float zero = {0.0}> { y = Max(x, zero) }")
    recipe = write_recipe(folder / "r.yaml", [
        {"replace": {"pattern": "relu.txt", "replacement": "max0.txt"}}, {"verify": {}}])
    out = tmp_path / "out.onnx"
    proc = cli("apply", recipe.relative_to(tmp_path), SEED.resolve(), "-o", "out.onnx", "--json",
               cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["verify"]["ok"] is True
    got = onnx.load(str(out))
    assert "Relu" not in {n.op_type for n in got.graph.node}
    assert np.array_equal(run(out, X)["logits:0"], run(SEED, X)["logits:0"])
    inline = pattern_bytes(load_pattern(folder / "relu.txt"))
    again = write_recipe(folder / "inline.yaml", [
        {"replace": {"pattern": inline, "replacement": "max0.txt"}}])
    proc = cli("apply", again, SEED.resolve(), "-o", tmp_path / "inline.onnx")
    assert proc.returncode == 0, proc.stderr
    assert onnx.load(str(tmp_path / "inline.onnx")).graph == got.graph


def test_verify_checkpoints_prove_each_step_against_the_model_before_it(tmp_path):
    recipe = parse_recipe({"onnxsurgeon": 1, "steps": [
        {"copy": {"outputs": ["logits:0"], "prefix": "twin/"}},
        {"insert": {"at": RELU, "op": "l2_normalize", "params": {"axis": 1}}},
        {"verify": {"samples": 2, "seed": 3}},
        {"extract": {"outputs": ["twin/logits:0"]}},
    ]}, base_dir=tmp_path)
    model = osg.load(SEED)
    result = apply_recipe(model, recipe, verify=True)
    assert result.ok
    (n1, first), (n2, final) = result.reports
    assert (n1, n2) == (3, "final")
    checks = {p.check.split(":")[0] for p in first.pairs}
    assert checks == {"1", "2"} and first.samples == 2
    assert {p.check.split(":")[1] for p in final.pairs} == {"extract"}
    assert all(p.ok for p in first.pairs + final.pairs)


_REROUTE = STEPS["reroute"].run


def _corrupting_reroute(model: Any, params: Any, ctx: Any) -> dict[str, Any]:
    """A test-only verb: a reroute whose model then gets one weight changed (a broken rewrite)."""
    assert _REROUTE is not None
    result = _REROUTE(model, params, ctx)
    weight = next(t for t in model.proto.graph.initializer if t.name == "network/fc1/bias")
    arr = onnx.numpy_helper.to_array(weight).copy()
    arr[0] += 1.0
    weight.CopyFrom(onnx.numpy_helper.from_array(arr, weight.name))
    return result


def test_a_failing_checkpoint_is_a_gate_nothing_written(tmp_path, monkeypatch, capsys):
    from dataclasses import replace

    from onnxsurgeon.cli import main

    monkeypatch.setitem(STEPS, "reroute", replace(STEPS["reroute"], run=_corrupting_reroute))
    recipe = write_recipe(tmp_path / "r.yaml", [
        {"reroute": {"from": RELU, "to": CONV, "consumers": ["network/aux/pool"]}},
        {"verify": {}}, {"extract": {"outputs": ["logits:0"]}}])
    out = tmp_path / "out.onnx"
    assert main(["apply", str(recipe), str(SEED), "-o", str(out), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert not out.exists() and data["output"] is None
    assert [s["verb"] for s in data["steps"]] == ["reroute", "verify"]  # stopped at the gate
    assert data["verify"]["ok"] is False
    failing = [p for p in data["verify"]["checkpoints"][0]["pairs"] if not p["ok"]]
    assert failing and all(p["check"].startswith("1:reroute:") for p in failing)


def test_apply_verify_flag_and_text_output(tmp_path):
    recipe = write_recipe(tmp_path / "r.yaml", [{"extract": {"outputs": ["aux:0"]}}])
    out = tmp_path / "out.onnx"
    proc = cli("apply", recipe, SEED, "-o", out, "--verify")
    assert proc.returncode == 0, proc.stderr
    assert "step 1 extract:" in proc.stdout and "--verify: proven" in proc.stdout
    assert f"-> {out}" in proc.stdout
    proc = cli("apply", recipe, SEED, "-o", SEED)
    assert proc.returncode == 2 and "is the input model" in proc.stderr


def test_apply_on_a_chain_with_nested_models(tmp_path):
    """If/Loop captures and a local function: a recipe runs the verbs there as the API does."""
    for name, build, target in (("if", builders.if_capture, None),
                                ("fn", builders.local_function, None)):
        path = tmp_path / f"{name}.onnx"
        osg.save(build(), path)
        outs = [o.name for o in onnx.load(str(path)).graph.output]
        target = outs[0]
        recipe = write_recipe(tmp_path / f"{name}.yaml", [
            {"copy": {"outputs": [target], "prefix": "c/"}}, {"verify": {}}])
        proc = cli("apply", recipe, path, "-o", tmp_path / f"{name}_out.onnx", "--json")
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["verify"]["ok"] is True


def test_readme_documents_the_registry_and_its_recipe_block_runs(tmp_path):
    import re

    from onnxsurgeon.recipe.steps import markdown_table

    readme = (ROOT / "README.md").read_text()
    assert f"<!-- recipe-steps -->\n{markdown_table()}\n" in readme
    yaml_block = re.findall(r"```yaml\n(.*?)```", readme, flags=re.S)[0]
    assert yaml_block == (ROOT / "examples" / "seed_recipe.yaml").read_text()
    block = next(b for b in re.findall(r"```bash\n(.*?)```", readme, flags=re.S)
                 if "onnxsurgeon apply" in b).replace("/tmp/", f"{tmp_path}/")
    script = f'onnxsurgeon() {{ "{sys.executable}" -m onnxsurgeon "$@"; }}\nset -e\n{block}'
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    replayed, applied = onnx.load(str(tmp_path / "replayed.onnx")), onnx.load(
        str(tmp_path / "recipe_out.onnx"))
    assert replayed.graph == applied.graph
    assert (tmp_path / "fleet" / "seed_cnn.onnx").is_file()
    assert not (tmp_path / "fleet" / "tf1_seed.onnx").exists() and "some models failed" in proc.stdout


def test_a_func_step_needs_the_converters_from_the_caller(tmp_path):
    """The core never imports converters: apply_recipe takes the inserter from its caller."""
    from onnxsurgeon.errors import UsageError

    recipe = parse_recipe({"onnxsurgeon": 1, "steps": [
        {"insert": {"at": RELU, "func": "proc.py:f", "framework": "torch"}}]}, base_dir=tmp_path)
    with pytest.raises(UsageError, match=r"step 1 \(insert\): an insert step with func: needs"):
        apply_recipe(osg.load(SEED), recipe)


@pytest.mark.slow
def test_insert_func_step_equals_the_cli_call(tmp_path):
    """A framework function (`func:` relative to the recipe, `framework: torch`) as a step."""
    pytest.importorskip("torch")
    folder = tmp_path / "recipes"
    folder.mkdir()
    (folder / "proc.py").write_text(
        "import torch\ndef normalize(a):\n    return torch.nn.functional.normalize(a, dim=1)\n")
    recipe = write_recipe(folder / "r.yaml", [
        {"insert": {"at": RELU, "func": "proc.py:normalize", "framework": "torch"}},
        {"verify": {}}])
    out, by_cli = tmp_path / "out.onnx", tmp_path / "cli.onnx"
    proc = cli("apply", recipe, SEED, "-o", out, "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["verify"]["ok"] is True
    assert cli("insert", SEED, "-o", by_cli, "--at", RELU, "--func", f"{folder / 'proc.py'}:normalize",
               "--framework", "torch").returncode == 0
    assert onnx.load(str(out)).graph == onnx.load(str(by_cli)).graph


def test_recipe_from_log_keeps_prune_and_a_renamed_output():
    """The recipe step and verify's replay come from one mapping (``record.replay_call``), so
    options a step used to drop come through: a pruned reroute, and an insert at a graph output
    that gave it a new name (``keep_output_name=False``), replay to the same model."""
    from onnxsurgeon.record import records

    by_hand = osg.load(SEED)
    reroute(by_hand, RELU, CONV, prune=True)
    insert(by_hand, "logits", op="identity", keep_output_name=False)
    recipe = recipe_from_log(records(by_hand.proto))
    reroute_step, insert_step = (next(iter(s.values())) for s in recipe.to_data()["steps"])
    assert reroute_step["prune"] is True and insert_step["keep_output_name"] is False
    replayed = osg.load(SEED)
    apply_recipe(replayed, recipe)
    assert replayed.proto.graph == by_hand.proto.graph
    assert rewrites(replayed.proto) == rewrites(by_hand.proto)


@pytest.mark.parametrize("op", sorted(o for o in RECORD_TYPES if o != "merge"))
def test_every_replayable_record_maps_to_its_verb_and_recipe_step(op):
    """Each record's replay_call names a surgery verb with parameters it has, and keys its
    recipe step takes (the one record -> verb mapping of verify's replay and the recipe)."""
    import inspect

    from onnxsurgeon import surgery
    from onnxsurgeon.recipe.steps import ALIASES
    from onnxsurgeon.record import (
        CleanupRecord,
        OutputsRecord,
        SetRecord,
        SplitRecord,
        ToposortRecord,
    )

    examples = {
        "extract": ExtractRecord(outputs=("y",), inputs=("x",)),
        "copy": CopyRecord(outputs={"y": "c/y"}, initializers={}, nodes={}, weights="shared",
                           replace_inputs={"x": "z"}, prefix="c/"),
        "insert": InsertRecord(at="y", processed="y", block="scale", params={"factor": 2.0},
                               block_nodes=(), rerouted=(), rerouted_outputs=("y",),
                               as_output=False, renamed=None),
        "reroute": RerouteRecord(source="a", target="b", rerouted=("n",), rerouted_outputs=(),
                                 pruned_nodes=("m",)),
        "rename": RenameRecord(renamed={"a": "b"}, nodes=True),
        "bypass": BypassRecord(removed=("n",), input=1, rerouted=(), rerouted_outputs=()),
        "replace": ReplaceRecord(pattern="onnx-base64:AA==", replacement="onnx-base64:AA==",
                                 sites=({"nodes": ["n"], "inputs": {}, "outputs": {}},),
                                 any_constant=("c",), tolerance={"rtol": 0.1, "atol": 0.2}),
        "cleanup": CleanupRecord(nodes=("n",), body_nodes=(), initializers=(), value_info=(),
                                 functions=(), opsets=()),
        "toposort": ToposortRecord(moved={"main": 2}),
        "outputs": OutputsRecord(added=("a",), removed=("y",), pruned_nodes=(),
                                 pruned_initializers=()),
        "set_values": SetRecord(attrs={"n.alpha": "0.5"}, weights={"W": "w.npy"},
                                digests={"W": "0" * 64}, reshape=True),
        "precision": PrecisionRecord(to="bf16", keep_io_types=True, blocked=("Softmax",),
                                     kept={"n": "auto-block: local error 0.5 > budget"}),
        "fold": FoldRecord(folded=("c",), removed=("n",), kept=(), body_folded=(), max_bytes=8),
        "dims": DimsRecord(shapes={"x": "batchx3"}, batch="dynamic", rewritten={}),
        "opset": OpsetRecord(source=17, target=18),
        "split_stage": SplitRecord(stage=1, stages=3, at=("a", "b"), by="params",
                                   dims={"batch": 2}, inputs=("a",), outputs=("b",), cost=7),
    }
    record = examples[op]
    call = record.replay_call()
    assert call.verb == op
    params = inspect.signature(getattr(surgery, op)).parameters
    assert list(params)[1:1 + len(call.args)] == list(call.args)
    assert set(call.options) <= set(params)
    assert all(params[k].kind is inspect.Parameter.KEYWORD_ONLY for k in call.options)
    step = recipe_from_log([record]).to_data()["steps"][0][op]
    aliases = ALIASES.get(op, {})
    for name, value in {**call.args, **call.options}.items():
        assert step[aliases.get(name, name)] == value


def test_recipe_command_takes_a_merge_from_the_recorded_recipe(tmp_path):
    """`recipe OUT` of a model whose log holds a merge (the second model is not in the log)
    takes that step from the recipe recorded by the apply that made it; rewrites done by hand
    afterwards are replayed from the log; the printed recipe reproduces the model."""
    folder = tmp_path / "recipes"
    folder.mkdir()
    head = helper.make_graph([helper.make_node("Sigmoid", ["x"], ["y"], name="act")], "head",
                             [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 2])],
                             [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 2])])
    onnx.save(helper.make_model(head, opset_imports=[helper.make_opsetid("", 17)]),
              str(folder / "head.onnx"))
    recipe = write_recipe(folder / "r.yaml", [
        {"extract": {"outputs": ["aux:0"]}},
        {"merge": {"second": "head.onnx", "connect": {"aux:0": "x"}, "prefix": "m/"}},
        {"verify": {}},
        {"rename": {"mapping": {"y": "scores"}}}])
    made, by_hand = tmp_path / "made.onnx", tmp_path / "by_hand.onnx"
    assert cli("apply", recipe, SEED, "-o", made).returncode == 0
    assert cli("rename", made, "-o", by_hand, "--map", "scores=final").returncode == 0
    proc = cli("recipe", by_hand)
    assert proc.returncode == 0, proc.stderr
    steps = yaml.safe_load(proc.stdout)["steps"]
    assert [next(iter(s)) for s in steps] == ["extract", "merge", "rename", "rename"]
    assert steps[1]["merge"]["second"] == "head.onnx"  # as the recorded recipe wrote it
    replay = folder / "replay.yaml"  # beside the recipe its paths are relative to
    replay.write_text(proc.stdout)
    out = tmp_path / "replayed.onnx"
    assert cli("apply", replay, SEED, "-o", out).returncode == 0
    replayed, original = onnx.load(str(out)), onnx.load(str(by_hand))
    assert replayed.graph == original.graph and rewrites(replayed) == rewrites(original)
    # a merge the recorded recipe did not make is still refused, naming the record
    merged = tmp_path / "merged.onnx"
    assert cli("merge", made, folder / "head.onnx", "--connect", "scores=x", "-o",
               merged).returncode == 0
    proc = cli("recipe", merged)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "rewrite 4 (merge): the second model" in proc.stderr
    assert proc.stderr.rstrip().endswith("(metadata 'onnxsurgeon.recipe') did not make it")
