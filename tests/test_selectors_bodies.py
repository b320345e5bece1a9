"""Verbs act at selector matches inside If/Loop/Scan bodies (issue 28): ``insert`` puts a block
in the body (its readers there and in deeper bodies, through outer-scope reads, read the
block's output), ``bypass`` removes body nodes, ``reroute`` moves a body tensor's readers, ``rename`` renames body tensors in their scope,
``outputs`` refuses a body match in one line; records carry the body path and replay, and
``--verify`` proves the rewrite through onnxruntime (a wrong block in a body fails)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsurgeon.errors import RewriteError, SurgeryError
from onnxsurgeon.record import RewriteRecord, rewrites
from onnxsurgeon.schema import validate
from onnxsurgeon.surgery import bypass, insert, reroute
from tests.cli_helpers import cli_main

F = TensorProto.FLOAT
TRIPS = 3


def bodied() -> onnx.ModelProto:
    """x -> Sigmoid -> a; Loop_0 (3 trips, carries v = x): body v_in -> Mul(v_in, a) -> m ->
    Relu -> r -> {ReduceSum -> Greater(0) -> gt, If_1 (then: Neg(r) -> tr -> Sigmoid -> t_out;
    else: Relu(r) -> e_out) -> w}, m -> Neg -> dead (read by nothing); Loop -> y -> Relu -> out.
    ``a`` is read inside the body by name, ``r`` inside the If's branches."""
    then_g = helper.make_graph([helper.make_node("Neg", ["r"], ["tr"], name="then_neg"),
                                helper.make_node("Sigmoid", ["tr"], ["t_out"], name="then_sig")],
                               "then", [], [helper.make_tensor_value_info("t_out", F, [2, 4])])
    else_g = helper.make_graph([helper.make_node("Relu", ["r"], ["e_out"], name="else_relu")],
                               "else", [], [helper.make_tensor_value_info("e_out", F, [2, 4])])
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"], name="body_cond"),
         helper.make_node("Mul", ["v_in", "a"], ["m"], name="body_mul"),
         helper.make_node("Relu", ["m"], ["r"], name="body_relu"),
         helper.make_node("Neg", ["m"], ["dead"], name="body_dead"),
         helper.make_node("ReduceSum", ["r"], ["rs"], keepdims=0, name="body_sum"),
         helper.make_node("Greater", ["rs", "zero"], ["gt"], name="body_gt"),
         helper.make_node("If", ["gt"], ["w"], name="If_1", then_branch=then_g,
                          else_branch=else_g)],
        "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                 helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
                 helper.make_tensor_value_info("v_in", F, [2, 4])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("w", F, [2, 4])])
    nodes = [helper.make_node("Sigmoid", ["x"], ["a"], name="top_sig"),
             helper.make_node("Loop", ["trips", "", "x"], ["y"], name="Loop_0", body=body),
             helper.make_node("Relu", ["y"], ["out"], name="top_relu")]
    inits = [numpy_helper.from_array(np.array(TRIPS, np.int64), "trips"),
             numpy_helper.from_array(np.array(0, np.float32), "zero")]
    graph = helper.make_graph(nodes, "bodied", [helper.make_tensor_value_info("x", F, [2, 4])],
                              [helper.make_tensor_value_info("out", F, [2, 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    return model


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-v))


def expected(x: np.ndarray, *, r_factor: float = 1, e_factor: float = 1, out_factor: float = 1,
             skip_relu: bool = False, skip_neg: bool = False, a_factor: float = 1,
             a_is_x: bool = False) -> np.ndarray:
    """The model by hand, with the inserts (factors), bypasses (skips) and reroutes the tests
    make."""
    a, v = (x if a_is_x else _sigmoid(x)) * a_factor, x
    for _ in range(TRIPS):
        m = v * a
        r = (m if skip_relu else np.maximum(m, 0)) * r_factor
        v = (_sigmoid(r if skip_neg else -r) if r.sum() > 0
             else np.maximum(r, 0) * e_factor)
    return np.maximum(v, 0) * out_factor


def run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


XS = [np.linspace(-2, 2, 8, dtype=np.float32).reshape(2, 4),
      -np.linspace(-2, 2, 8, dtype=np.float32).reshape(2, 4) ** 2]  # the second takes 'else'


def _body(model: onnx.ModelProto, *path: str) -> onnx.GraphProto:
    graph = model.graph
    for name in path:
        node_name, _, attr = name.partition(".")
        node = next(n for n in graph.node if n.name == node_name)
        graph = next(a.g for a in node.attribute if a.name == attr)
    return graph


def test_insert_at_every_match_in_bodies_is_one_rewrite_that_replays():
    model = bodied()
    result = insert(model, "op:Relu", op="scale", params={"factor": 2.0})
    assert [(r.graph, r.at) for r in result.each()] == [
        ("", "out"), ("Loop_0/body", "r"), ("Loop_0/body/If_1/else_branch", "e_out")]
    onnx.checker.check_model(model, full_check=True)
    body = _body(model, "Loop_0.body")
    block = next(n for n in body.node if n.name == "r/scale/Mul")
    assert list(block.input)[0] == "r"
    assert next(n for n in body.node if n.name == "body_sum").input[0] == "r/scale"
    # a deeper body reads the Loop body's 'r' by name: it reads the block's output now
    assert list(_body(model, "Loop_0.body", "If_1.then_branch").node[0].input) == ["r/scale"]
    assert [vi.name for vi in body.input] == ["i", "c_in", "v_in"]  # outer reads stay outer
    for x in XS:
        np.testing.assert_allclose(run(model, x), expected(x, r_factor=2, e_factor=2,
                                                           out_factor=2), rtol=1e-6)
    (entry,) = rewrites(model)
    assert [s.get("graph", "") for s in entry["sites"]] == [r.graph for r in result.each()]
    record = RewriteRecord.from_json(entry)
    assert record == result.record()
    call = record.replay_call()
    again = bodied()
    insert(again, call.args["at"], **call.options)
    assert again.SerializeToString() == model.SerializeToString()


def test_one_body_site_is_recorded_with_its_path():
    model = bodied()
    result = insert(model, "glob:tr", op="identity")
    assert result.graph == "Loop_0/body/If_1/then_branch" and len(result.each()) == 1
    (entry,) = rewrites(model)
    assert entry["version"] == 2 and entry["sites"][0]["graph"] == result.graph


def test_bypass_in_bodies_reads_through_and_replays():
    model = bodied()
    result = bypass(model, "re:body_relu|then_neg")
    assert result.removed == [] and result.bodies == {
        "Loop_0/body": {"removed": ["body_relu"], "rerouted": ["body_sum", "If_1"],
                        "rerouted_outputs": [], "pruned": []},
        "Loop_0/body/If_1/then_branch": {"removed": ["then_neg"], "rerouted": ["then_sig"],
                                         "rerouted_outputs": [], "pruned": []}}
    onnx.checker.check_model(model, full_check=True)
    for x in XS:
        np.testing.assert_allclose(run(model, x), expected(x, skip_relu=True, skip_neg=True),
                                   rtol=1e-6)
    record = RewriteRecord.from_json(rewrites(model)[0])
    call = record.replay_call()
    again = bodied()
    bypass(again, call.args["nodes"], **call.options)
    assert again.SerializeToString() == model.SerializeToString()


@pytest.mark.parametrize("verb, args, options, error", [
    # a body output that would become a value of the enclosing scope (onnxruntime refuses it)
    (bypass, "op:Relu", {}, "a value from outside the body"),
    # 'tr' (the deeper body, done first) would go in; then nothing reads 'dead': all undone
    (insert, "re:tr|dead", {"op": "identity"}, "nothing reads tensor 'dead'"),
    (insert, "op:Relu", {"op": "identity", "as_output": True}, "inside the body 'Loop_0/body'"),
], ids=["bypass-outer-output", "insert-later-site", "insert-as-output"])
def test_a_refused_body_site_leaves_the_model_unchanged(verb, args, options, error):
    model = bodied()
    before = model.SerializeToString()
    with pytest.raises(SurgeryError, match=error) as info:
        verb(model, args, **options)
    assert "\n" not in str(info.value)
    assert model.SerializeToString() == before


@pytest.fixture()
def bodied_file(tmp_path):
    path = tmp_path / "bodied.onnx"
    path.write_bytes(bodied().SerializeToString())
    return path


CLI = {
    "insert": (["insert", "--at", "op:Relu", "--op", "scale:factor=2"], 0, "sites"),
    "bypass": (["bypass", "--node", "re:body_relu|then_neg|top_relu"], 0, "bodies"),
    "rename": (["rename", "--map", r"re:(t|e)_out=\1_result", "--map", "op:Mul=product"], 0,
               "renamed"),
    "outputs": (["outputs", "--add", "op:Sigmoid"], 2,
                "'t_out' inside the body 'Loop_0/body/If_1/then_branch'"),
    "reroute": (["reroute", "--from", "glob:tr", "--to", "r"], 0, "rerouted"),
    "reroute-unseen": (["reroute", "--from", "glob:tr", "--to", "e_out"], 2,
                       "inside the body 'Loop_0/body/If_1/then_branch'"),
    "reroute-several": (["reroute", "--from", "op:Neg", "--to", "r"], 2,
                        "matches 2 tensors ('dead' (in 'Loop_0/body')"),
}


@pytest.mark.parametrize("case", list(CLI))
def test_cli_at_body_sites_verified(case, bodied_file, tmp_path, capsys):
    argv, code, key = CLI[case]
    out = tmp_path / "out.onnx"
    got, stdout, stderr = cli_main(capsys, argv[0], bodied_file, "-o", out, *argv[1:],
                                   "--verify", "--json")
    assert got == code, stderr
    if code == 2:
        assert key in stderr and stderr.count("\n") == 1 and not out.exists()
        return
    data = json.loads(stdout)
    validate(argv[0], data)
    assert data[key] and data["verify"]["verdict"] == "pass"
    assert onnx.load(out).graph.node  # written
    if case == "insert":
        assert [s.get("graph", "") for s in data["sites"]] == [
            "", "Loop_0/body", "Loop_0/body/If_1/else_branch"]
    if case == "reroute":  # then: Sigmoid(r) instead of Sigmoid(Neg(r))
        assert data["graph"] == "Loop_0/body/If_1/then_branch"
        model = onnx.load(out)
        for x in XS:
            np.testing.assert_allclose(run(model, x), expected(x, skip_neg=True), rtol=1e-6)
        call = RewriteRecord.from_json(rewrites(model)[0]).replay_call()
        again = bodied()
        reroute(again, call.args["source"], call.args["target"], **call.options)
        assert rewrites(again) == rewrites(model)


def test_a_wrong_block_in_a_body_fails_verify(bodied_file, tmp_path, capsys):
    out = tmp_path / "out.onnx"
    code, _, stderr = cli_main(capsys, "insert", bodied_file, "-o", out, "--at", "glob:r",
                               "--op", "scale:factor=2")
    assert code == 0, stderr
    model = onnx.load(out)
    body = _body(model, "Loop_0.body")
    factor = next(t for t in body.initializer if t.name == "r/scale/factor")
    factor.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(factor) * 1.5, factor.name))
    bad = tmp_path / "bad.onnx"
    onnx.save(model, bad)
    code, stdout, _ = cli_main(capsys, "verify", bodied_file, bad, "--rewrite-log", "--json")
    assert code == 1
    failed = [p for p in json.loads(stdout)["pairs"] if p["verdict"] == "fail"]
    assert failed and failed[0]["check"] == "downstream"
    code, stdout, _ = cli_main(capsys, "verify", bodied_file, out, "--rewrite-log", "--json")
    assert code == 0 and json.loads(stdout)["verdict"] == "pass"


def test_rewrite_error_is_the_block_type_refusal_for_several_body_sites():
    cast = helper.make_model(helper.make_graph(
        [helper.make_node("Cast", ["i"], ["o"], to=TensorProto.DOUBLE)], "cast",
        [helper.make_tensor_value_info("i", F, [2, 4])],
        [helper.make_tensor_value_info("o", TensorProto.DOUBLE, [2, 4])]),
        opset_imports=[helper.make_opsetid("", 17)])
    model = bodied()
    before = model.SerializeToString()
    with pytest.raises(RewriteError, match="several sites"):
        insert(model, "re:r|tr", graph=cast)
    assert model.SerializeToString() == before


@pytest.mark.parametrize("verb, args, want", [
    (insert, ("glob:a",), {"a_factor": 2}),
    (insert, ("a",), {"a_factor": 2}),
    (reroute, ("a", "x"), {"a_is_x": True}),
], ids=["insert-selector", "insert-plain", "reroute"])
def test_a_main_tensor_read_inside_a_body_by_name_is_rewritten_there_too(verb, args, want):
    """'a' is a main-graph tensor the Loop body reads by name (an outer-scope read): a block
    at it, or a reroute of it, reaches that read as it reaches the main graph's."""
    model = bodied()
    options = {"op": "scale", "params": {"factor": 2.0}} if verb is insert else {}
    result = verb(model, *args, **options)
    assert result.rerouted == ["Loop_0"] and not result.graph
    mul = next(n for n in _body(model, "Loop_0.body").node if n.name == "body_mul")
    assert mul.input[1] == ("a/scale" if verb is insert else "x")
    for x in XS:
        np.testing.assert_allclose(run(model, x), expected(x, **want), rtol=1e-6)


def test_renamed_body_tensors_replay_from_the_record():
    from onnxsurgeon.surgery import rename

    model = bodied()
    rename(model, {r"re:(t|e)_out": r"\1_result", "op:Mul": "product"})
    assert [vi.name for vi in _body(model, "Loop_0.body", "If_1.then_branch").output] == [
        "t_result"]
    call = RewriteRecord.from_json(rewrites(model)[0]).replay_call()
    again = bodied()
    rename(again, *call.args.values(), **call.options)
    assert again.SerializeToString() == model.SerializeToString()


def test_body_nodes_renamed_by_selector_replay_and_clashes_are_refused():
    from onnxsurgeon.surgery import rename

    model = bodied()
    result = rename(model, {"glob:then_s*": "s_node", "op:Mul": "m_node"}, nodes=True)
    assert result.renamed == {} and result.bodies == {
        "Loop_0/body/If_1/then_branch": {"then_sig": "s_node"},
        "Loop_0/body": {"body_mul": "m_node"}}
    assert _body(model, "Loop_0.body", "If_1.then_branch").node[1].name == "s_node"
    call = RewriteRecord.from_json(rewrites(model)[0]).replay_call()
    again = bodied()
    rename(again, *call.args.values(), **call.options)
    assert again.SerializeToString() == model.SerializeToString()
    before = bodied().SerializeToString()
    clash = bodied()
    with pytest.raises(SurgeryError, match="another node of that body has it"):
        rename(clash, {"glob:then_s*": "then_neg"}, nodes=True)
    assert clash.SerializeToString() == before


def test_recipe_steps_act_at_body_sites(bodied_file, tmp_path, capsys):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("onnxsurgeon: 1\nsteps:\n"
                      "  - insert: {at: 'op:Relu', op: scale, params: {factor: 2}}\n"
                      "  - verify: {}\n")
    out = tmp_path / "r.onnx"
    code, stdout, stderr = cli_main(capsys, "apply", recipe, bodied_file, "-o", out, "--json")
    assert code == 0, stderr
    sites = json.loads(stdout)["steps"][0]["result"]["sites"]
    assert [s.get("graph", "") for s in sites] == ["", "Loop_0/body",
                                                  "Loop_0/body/If_1/else_branch"]
    model = onnx.load(out)
    for x in XS:
        np.testing.assert_allclose(run(model, x), expected(x, r_factor=2, e_factor=2,
                                                           out_factor=2), rtol=1e-6)


def test_a_body_initializer_is_a_site():
    model = bodied()
    insert(model, "glob:r", op="scale", params={"factor": 2.0})  # leaves r/scale/factor there
    result = insert(model, "glob:r/scale/factor", op="scale", params={"factor": 3.0})
    assert (result.graph, result.rerouted) == ("Loop_0/body", ["r/scale/Mul"])
    onnx.checker.check_model(model, full_check=True)
    for x in XS:
        np.testing.assert_allclose(run(model, x), expected(x, r_factor=6), rtol=1e-6)


@pytest.mark.parametrize("argv", [
    ["extract", "{m}", "-o", "{o}", "--outputs", "glob:r"],
    ["extract", "{m}", "-o", "{o}", "--outputs", "out", "--stop-at", "glob:r"],
    ["copy", "{m}", "-o", "{o}", "--outputs", "glob:r"],
    ["split", "{m}", "-o", "{d}", "--at", "glob:r"],
    ["dims", "{m}", "-o", "{o}", "--input", "glob:v_in=2x4"],
    ["inspect", "{m}", "--around", "glob:r"],
    ["verify", "{m}", "{m}", "--pair", "glob:r=glob:r"],
    ["merge", "{m}", "{m}", "-o", "{o}", "--connect", "glob:r=x", "--prefix", "2/"],
    ["reroute", "{m}", "-o", "{o}", "--from", "out", "--to", "y", "--consumers",
     "glob:body_sum"],
], ids=lambda argv: f"{argv[0]} {next(a for a in argv if a.startswith('glob:'))}")
def test_main_graph_arguments_refuse_a_body_match_in_one_line(argv, bodied_file, tmp_path,
                                                              capsys):
    """Arguments naming main-graph places (outputs, cut points, stages, graph inputs, pairs
    compared, merge ties) refuse a body match: exit 2, one line naming the body (or, for dims,
    that it is no graph input), nothing written (precision and set act in bodies:
    tests/test_bodies_values.py)."""
    out = tmp_path / "out.onnx"
    code, _, err = cli_main(capsys, *[a.format(m=bodied_file, o=out, d=tmp_path / "stages")
                                      for a in argv])
    assert code == 2 and err.count("\n") == 1, err
    assert "inside the body 'Loop_0/body'" in err or "not a graph input" in err, err
    assert not out.exists()
