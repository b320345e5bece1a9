"""``precision --block`` and ``set`` act at selector matches inside If/Loop/Scan bodies (issue 28):
a blocked body node stays float32 inside its converted body (Casts at its boundaries there), a
body node's attribute and a body's initializer take new values, type-checked as in the main
graph. Records name body sites by an exact address (``<body path>/<node label>``), so a replay
is byte-identical, an unnamed node included; ``--verify`` proves each."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsurgeon.errors import SurgeryError
from onnxsurgeon.record import RewriteRecord, rewrites
from onnxsurgeon.schema import validate
from onnxsurgeon.surgery import bypass, precision, rename, reroute, set_values
from tests.cli_helpers import cli_main

F = TensorProto.FLOAT
TRIPS = 2
BW = np.array([[0.5, -1.0, 1.5, 2.0]], np.float32)
TW = np.array([[1.0, 2.0, -0.5, 0.25]], np.float32)


def twin() -> onnx.ModelProto:
    """x -> Loop_0 (2 trips, carries v = x): body v_in -> LeakyRelu(0.1) 'body_leaky' -> l ->
    Mul(l, bw) 'body_mul' -> mb -> ReduceSum -> Greater(zero) -> If_1 (then: Relu 'act' ->
    Mul(tw) -> t_out; else: Relu 'act' -> an unnamed Neg -> e_out) -> w; Loop -> y -> Identity
    -> out. ``bw`` is the Loop body's initializer, ``tw`` the then branch's; both branches have
    a node named 'act'."""
    then_g = helper.make_graph(
        [helper.make_node("Relu", ["mb"], ["ta"], name="act"),
         helper.make_node("Mul", ["ta", "tw"], ["t_out"], name="then_mul")],
        "then", [], [helper.make_tensor_value_info("t_out", F, [2, 4])],
        [numpy_helper.from_array(TW, "tw")])
    else_g = helper.make_graph(
        [helper.make_node("Relu", ["mb"], ["ea"], name="act"),
         helper.make_node("Neg", ["ea"], ["e_out"])],
        "else", [], [helper.make_tensor_value_info("e_out", F, [2, 4])])
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"], name="body_cond"),
         helper.make_node("LeakyRelu", ["v_in"], ["l"], name="body_leaky", alpha=0.1),
         helper.make_node("Mul", ["l", "bw"], ["mb"], name="body_mul"),
         helper.make_node("ReduceSum", ["mb"], ["rs"], keepdims=0, name="body_sum"),
         helper.make_node("Greater", ["rs", "zero"], ["gt"], name="body_gt"),
         helper.make_node("If", ["gt"], ["w"], name="If_1", then_branch=then_g,
                          else_branch=else_g)],
        "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                 helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
                 helper.make_tensor_value_info("v_in", F, [2, 4])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("w", F, [2, 4])],
        [numpy_helper.from_array(BW, "bw")])
    nodes = [helper.make_node("Loop", ["trips", "", "x"], ["y"], name="Loop_0", body=body),
             helper.make_node("Identity", ["y"], ["out"], name="top_id")]
    inits = [numpy_helper.from_array(np.array(TRIPS, np.int64), "trips"),
             numpy_helper.from_array(np.array(0, np.float32), "zero")]
    graph = helper.make_graph(nodes, "twin", [helper.make_tensor_value_info("x", F, [2, 4])],
                              [helper.make_tensor_value_info("out", F, [2, 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    return model


def expected(x: np.ndarray, *, alpha: float = 0.1, bw: np.ndarray = BW, tw: np.ndarray = TW,
             then_act: bool = True, else_act: bool = True, neg: bool = True) -> np.ndarray:
    """The model by hand (``*_act=False``: that branch's 'act' bypassed; ``neg=False``: the
    else branch's Neg)."""
    v = x
    for _ in range(TRIPS):
        mb = np.where(v >= 0, v, alpha * v) * bw
        if mb.sum() > 0:
            v = (np.maximum(mb, 0) if then_act else mb) * tw
        else:
            v = (np.maximum(mb, 0) if else_act else mb) * (-1 if neg else 1)
    return v


XS = [np.linspace(-2, 2, 8, dtype=np.float32).reshape(2, 4),      # then
      -np.linspace(0.5, 3, 8, dtype=np.float32).reshape(2, 4)]    # else


def run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def _graph(model: onnx.ModelProto, *path: str) -> onnx.GraphProto:
    graph = model.graph
    for name in path:
        node_name, _, attr = name.partition(".")
        node = next(n for n in graph.node if n.name == node_name)
        graph = next(a.g for a in node.attribute if a.name == attr)
    return graph


def _replayed(model: onnx.ModelProto, verb) -> onnx.ModelProto:
    """A fresh twin() rewritten by the replay call of ``model``'s last record."""
    call = RewriteRecord.from_json(rewrites(model)[-1]).replay_call()
    again = twin()
    verb(again, *call.args.values(), **call.options)
    assert rewrites(again) == rewrites(model)
    return again


def test_a_blocked_body_node_stays_float32_in_its_body_and_replays(tmp_path, capsys):
    src, out = tmp_path / "twin.onnx", tmp_path / "out.onnx"
    src.write_bytes(twin().SerializeToString())
    code, stdout, err = cli_main(capsys, "precision", src, "-o", out, "--to", "fp16",
                                 "--keep-io-types", "--block", "glob:body_mul", "--block",
                                 "op:Neg", "--verify", "--json")
    assert code == 0, err
    data = json.loads(stdout)
    validate("precision", data)
    unnamed = "Loop_0/body/If_1/else_branch/Neg#1"  # an address, not a name: exact
    assert data["blocked"] == ["Loop_0/body/body_mul", unnamed]
    assert {k["node"]: k["why"] for k in data["kept"]} == {"Loop_0/body/body_mul": "blocked",
                                                          unnamed: "blocked"}
    assert data["verify"]["verdict"] == "pass"
    model = onnx.load(out)
    onnx.checker.check_model(model, full_check=True)
    body = _graph(model, "Loop_0.body")
    by_out = {o: n for n in body.node for o in n.output}
    mul = next(n for n in body.node if n.name == "body_mul")
    leaky = next(n for n in body.node if n.name == "body_leaky")
    assert by_out[mul.input[0]].op_type == "Cast" and by_out[mul.input[0]].input[0] == "l"
    assert by_out[mul.input[0]].attribute[0].i == F  # read in float32 through a body Cast
    assert next(t for t in body.initializer if t.name == "bw").data_type == F
    assert leaky.op_type == "LeakyRelu"  # converted: its output read through a Cast to fp32
    sums = [n for n in body.node if n.op_type == "Cast" and n.input[0] == "mb"]
    assert [a.i for n in sums for a in n.attribute] == [TensorProto.FLOAT16]
    neg = _graph(model, "Loop_0.body", "If_1.else_branch").node
    assert [(n.op_type, [a.i for a in n.attribute]) for n in neg] == [
        ("Cast", [TensorProto.FLOAT16]), ("Relu", []), ("Cast", [F]), ("Neg", []),
        ("Cast", [TensorProto.FLOAT16])]  # the unnamed Neg in float32 between two Casts
    for x in XS:
        np.testing.assert_allclose(run(model, x), expected(x), rtol=5e-3, atol=5e-3)
    assert _replayed(model, precision).SerializeToString() == model.SerializeToString()


@pytest.mark.parametrize("verb, options, error", [
    (precision, {"block": ["glob:nothing_here*"]}, "matches no node"),
    (set_values, {"attrs": {"glob:body_leaky.alpha": "abc"}}, "is not a float"),
    (set_values, {"attrs": {"op:LeakyRelu.alphas": "1"}}, "no attribute 'alphas'"),
    (set_values, {"weights": {"glob:tw": "{wide}"}}, "has shape [1, 5]"),
    (set_values, {"weights": {"glob:mb": "{bw}"}}, "is not an initializer"),
], ids=["precision-none", "set-type", "set-attr", "set-shape", "set-not-init"])
def test_a_refused_body_site_leaves_the_model_unchanged(verb, options, error, tmp_path):
    np.save(tmp_path / "wide.npy", np.zeros((1, 5), np.float32))
    np.save(tmp_path / "bw.npy", BW)
    files = {"wide": tmp_path / "wide.npy", "bw": tmp_path / "bw.npy"}
    options = {k: ({a: b.format(**files) for a, b in v.items()} if isinstance(v, dict) else v)
               for k, v in options.items()}
    model = twin()
    before = model.SerializeToString()
    with pytest.raises(SurgeryError, match=error.replace("[", r"\[")) as info:
        verb(model, **options)
    assert "\n" not in str(info.value)
    assert model.SerializeToString() == before


def test_set_acts_on_body_nodes_and_body_initializers_and_replays(tmp_path, capsys):
    src, out = tmp_path / "twin.onnx", tmp_path / "out.onnx"
    src.write_bytes(twin().SerializeToString())
    bw, tw = BW * 2, TW - 1
    np.save(tmp_path / "bw.npy", bw)
    np.save(tmp_path / "tw.npy", tw)
    code, stdout, err = cli_main(capsys, "set", src, "-o", out, "--attr",
                                 "op:LeakyRelu.alpha=0.3", "--weight",
                                 f"glob:bw={tmp_path / 'bw.npy'}", "--weight",
                                 f"re:tw={tmp_path / 'tw.npy'}", "--verify", "--json")
    assert code == 0, err
    data = json.loads(stdout)
    validate("set", data)
    assert data["attrs"] == {"Loop_0/body/body_leaky.alpha": "0.3"}
    assert list(data["weights"]) == ["Loop_0/body/bw", "Loop_0/body/If_1/then_branch/tw"]
    assert data["verify"]["verdict"] == "pass"
    model = onnx.load(out)
    onnx.checker.check_model(model, full_check=True)
    body = _graph(model, "Loop_0.body")
    leaky = next(n for n in body.node if n.name == "body_leaky")
    assert [(a.name, round(a.f, 6)) for a in leaky.attribute] == [("alpha", 0.3)]
    assert numpy_helper.to_array(body.initializer[0]).tolist() == bw.tolist()
    then = _graph(model, "Loop_0.body", "If_1.then_branch")
    assert numpy_helper.to_array(then.initializer[0]).tolist() == tw.tolist()
    for x in XS:
        np.testing.assert_allclose(run(model, x), expected(x, alpha=0.3, bw=bw, tw=tw),
                                   rtol=1e-6)
    assert _replayed(model, set_values).SerializeToString() == model.SerializeToString()
    # a wrong value in the body is caught: the reference puts the recorded one in by hand
    bad = onnx.load(out)
    leaky = next(n for n in _graph(bad, "Loop_0.body").node if n.name == "body_leaky")
    leaky.attribute[0].f = 0.7
    onnx.save(bad, tmp_path / "bad.onnx")
    code, stdout, _ = cli_main(capsys, "verify", src, tmp_path / "bad.onnx", "--rewrite-log",
                               "--json")
    assert code == 1 and json.loads(stdout)["verdict"] == "fail"


THEN, ELSE = "Loop_0/body/If_1/then_branch", "Loop_0/body/If_1/else_branch"
REPLAYED = {  # verb, args, options, the record's body part, the model by hand
    "bypass-unnamed": (bypass, ["op:Neg"], {}, ("bodies", {ELSE: {
        "removed": ["Neg#1"], "rerouted": [], "rerouted_outputs": [], "pruned": []}}),
        {"neg": False}),
    "bypass-shared-name": (bypass, ["glob:ta"], {}, ("bodies", {THEN: {
        "removed": ["act"], "rerouted": ["then_mul"], "rerouted_outputs": [], "pruned": []}}),
        {"then_act": False}),
    "rename-shared-name": (rename, [{"glob:ea": "else_act"}], {"nodes": True},
                           ("bodies", {ELSE: {"act": "else_act"}}), {}),
    "reroute": (reroute, ["glob:ta", "mb"], {}, ("graph", THEN), {"then_act": False}),
}


@pytest.mark.parametrize("case", list(REPLAYED))
def test_body_sites_replay_by_their_exact_address(case):
    """A record names a body site by its body's path and the node's label (an unnamed node by
    its position) or the tensor's name, so a replay acts there only: not at the other body's
    node of the same name, and an unnamed node too. Before, a replay re-found body nodes by an
    ``re:`` selector of their names ('act' matched both branches; 'Neg#1' was refused)."""
    verb, args, options, (key, part), by_hand = REPLAYED[case]
    model = twin()
    verb(model, *args, **options)
    onnx.checker.check_model(model, full_check=True)
    (entry,) = rewrites(model)
    assert entry[key] == part
    other = _graph(model, "Loop_0.body", "If_1.else_branch" if "then" in json.dumps(part)
                   else "If_1.then_branch")
    assert [n.name for n in other.node][0] == "act"  # the other body's namesake untouched
    for x in XS:
        np.testing.assert_allclose(run(model, x), expected(x, **by_hand), rtol=1e-6)
    assert _replayed(model, verb).SerializeToString() == model.SerializeToString()
