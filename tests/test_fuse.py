"""``fold``'s constant-weight simplifications (issue 30): no-ops removed, MatMul + Add -> Gemm,
Conv + BatchNormalization -> Conv, on hand-built graphs: the structure, each listed in
``--json``, proved by ``--verify`` (onnxruntime, within tolerance) and by an explicit run, the
sites that must stay (a graph output's producer, a 3-D MatMul, a MatMul read twice, a training
Dropout), and ``--no-fuse``."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsurgeon import load, surgery
from onnxsurgeon.record import FoldRecord, RewriteRecord, records
from onnxsurgeon.schema import validate

from .cli_helpers import cli_main

F = TensorProto.FLOAT
RNG = np.random.default_rng(0)


def _w(name: str, *shape: int) -> onnx.TensorProto:
    return numpy_helper.from_array(RNG.standard_normal(shape).astype(np.float32), name)


def _model(nodes, inputs, outputs, inits, opset: int = 17) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, outputs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _mlp() -> onnx.ModelProto:
    """x[3,4] -> Identity -> MatMul W1 -> Add b1 -> Cast(float) -> Relu -> Reshape [3,5] ->
    Transpose(0,1) -> Dropout -> MatMul W2 -> Add b2[1,2] -> y; a 3-D branch z: x3[2,3,4] MatMul
    W1 + b1 (stays); a MatMul read twice (stays); an Identity making a graph output (stays)."""
    vi = helper.make_tensor_value_info
    nodes = [
        helper.make_node("Identity", ["x"], ["xi"], name="id"),
        helper.make_node("MatMul", ["xi", "W1"], ["m1"], name="mm1"),
        helper.make_node("Add", ["m1", "b1"], ["a1"], name="add1"),
        helper.make_node("Cast", ["a1"], ["c1"], name="cast", to=F),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu"),
        helper.make_node("Reshape", ["r1", "shape35"], ["s1"], name="reshape"),
        helper.make_node("Transpose", ["s1"], ["t1"], name="tr", perm=[0, 1]),
        helper.make_node("Dropout", ["t1"], ["d1"], name="drop"),
        helper.make_node("MatMul", ["d1", "W2"], ["m2"], name="mm2"),
        helper.make_node("Add", ["b2", "m2"], ["y"], name="add2"),
        helper.make_node("MatMul", ["x3", "W1"], ["m3"], name="mm3"),
        helper.make_node("Add", ["m3", "b1"], ["z"], name="add3"),
        helper.make_node("MatMul", ["x", "W4"], ["m4"], name="mm4"),
        helper.make_node("Add", ["m4", "b1"], ["u"], name="add4"),
        helper.make_node("Neg", ["m4"], ["v"], name="neg4"),
        helper.make_node("Identity", ["u"], ["w"], name="id_out"),
    ]
    inits = [_w("W1", 4, 5), _w("b1", 5), _w("W2", 5, 2), _w("b2", 1, 2),
             numpy_helper.from_array(np.array([3, 5], np.int64), "shape35"),
             _w("W4", 4, 5)]  # not W1: MatMul(x, W1) would merge into mm1 (a duplicate)
    return _model(nodes, [vi("x", F, [3, 4]), vi("x3", F, [2, 3, 4])],
                  [vi("y", F, [3, 2]), vi("z", F, [2, 3, 5]), vi("v", F, [3, 5]),
                   vi("w", F, [3, 5])], inits)


def _conv_bn(with_bias: bool) -> onnx.ModelProto:
    vi = helper.make_tensor_value_info
    conv_in = ["x", "W", "B"] if with_bias else ["x", "W"]
    nodes = [helper.make_node("Conv", conv_in, ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "s", "bb", "mean", "var"], ["n"],
                              name="bn", epsilon=1e-3),
             helper.make_node("Relu", ["n"], ["y"], name="relu")]
    var = numpy_helper.from_array(RNG.uniform(0.5, 2.0, 4).astype(np.float32), "var")
    inits = [_w("W", 4, 3, 3, 3), _w("B", 4), _w("s", 4), _w("bb", 4), _w("mean", 4), var]
    if not with_bias:
        inits = [t for t in inits if t.name != "B"]
    return _model(nodes, [vi("x", F, [1, 3, 6, 6])], [vi("y", F, [1, 4, 6, 6])], inits)


def _run(m: onnx.ModelProto, feeds):
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    s = ort.InferenceSession(m.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds), strict=True))


def test_fold_fuses_and_removes_no_ops_where_provable_and_the_outputs_agree():
    m = _mlp()
    feeds = {"x": RNG.standard_normal((3, 4)).astype(np.float32),
             "x3": RNG.standard_normal((2, 3, 4)).astype(np.float32)}
    before = _run(m, feeds)
    r = surgery.fold(m)
    rules = sorted((f["rule"], tuple(f["nodes"]), f["into"]) for f in r.fused)
    assert rules == [("cast", ("cast",), ""), ("dropout", ("drop",), ""),
                     ("identity", ("id",), ""),
                     ("matmul_add_gemm", ("mm1", "add1"), "mm1"),
                     ("matmul_add_gemm", ("mm2", "add2"), "mm2"),
                     ("reshape", ("reshape",), ""), ("transpose", ("tr",), "")]
    ops = {n.name: n.op_type for n in m.graph.node}
    assert ops == {"mm1": "Gemm", "relu": "Relu", "mm2": "Gemm", "mm3": "MatMul",
                   "add3": "Add", "mm4": "MatMul", "add4": "Add", "neg4": "Neg",
                   "id_out": "Identity"}  # 3-D, read twice, a graph output's producer: stay
    assert [n.input[:] for n in m.graph.node if n.name == "mm1"] == [["x", "W1", "b1"]]
    assert "shape35" not in {t.name for t in m.graph.initializer}  # read by nothing now
    after = _run(m, feeds)
    for name, value in before.items():
        np.testing.assert_allclose(after[name], value, rtol=1e-5, atol=1e-6)
    onnx.checker.check_model(m, full_check=True)
    again = surgery.fold(m)  # idempotent
    assert again.fused == () and again.removed == ()


@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no-bias"])
def test_fold_folds_batchnorm_into_conv(with_bias):
    m = _conv_bn(with_bias)
    feeds = {"x": RNG.standard_normal((1, 3, 6, 6)).astype(np.float32)}
    before = _run(m, feeds)["y"]
    r = surgery.fold(m)
    assert [dict(f) for f in r.fused] == [{"rule": "conv_batchnorm", "nodes": ["conv", "bn"],
                                           "into": "conv"}]
    assert [n.op_type for n in m.graph.node] == ["Conv", "Relu"]
    conv = m.graph.node[0]
    assert conv.output[:] == ["n"] and conv.input[1:] == ["W_bn", "B_bn_bias" if with_bias
                                                           else "W_bn_bias"]
    assert {t.name for t in m.graph.initializer} == set(conv.input[1:])  # the old ones dead
    np.testing.assert_allclose(_run(m, feeds)["y"], before, rtol=1e-4, atol=1e-5)


def test_a_training_dropout_and_no_fuse_stay():
    vi = helper.make_tensor_value_info
    train = numpy_helper.from_array(np.array(True), "train")
    m = _model([helper.make_node("Dropout", ["x", "", "train"], ["d"], name="drop"),
                helper.make_node("Relu", ["d"], ["y"], name="relu")],
               [vi("x", F, [3])], [vi("y", F, [3])], [train])
    assert surgery.fold(m).fused == ()
    m = _mlp()
    r = surgery.fold(m, fuse=False)
    assert r.fused == () and r.fuse is False and len(m.graph.node) == 16


def test_fold_cli_lists_the_fusions_proves_them_and_replays(tmp_path, capsys):
    src, out, plain = tmp_path / "m.onnx", tmp_path / "o.onnx", tmp_path / "p.onnx"
    onnx.save(_mlp(), src)
    code, stdout, err = cli_main(capsys, "fold", src, "-o", out, "--verify", "--json")
    assert code == 0, err
    data = json.loads(stdout)
    validate("fold", data)
    assert data["verify"]["ok"] is True and data["fuse"] is True
    assert {f["rule"] for f in data["fused"]} == {"identity", "cast", "reshape", "transpose",
                                                 "dropout", "matmul_add_gemm"}
    record = records(load(out).proto)[-1]
    assert isinstance(record, FoldRecord) and record.fuse and len(record.fused) == 7
    code, stdout, err = cli_main(capsys, "verify", src, out, "--rewrite-log", "--json")
    assert code == 0 and json.loads(stdout)["ok"] is True, err
    code, stdout, err = cli_main(capsys, "fold", src, "-o", plain, "--no-fuse", "--json")
    assert code == 0, err
    data = json.loads(stdout)
    assert data["fuse"] is False and data["fused"] == []
    assert len(load(plain).proto.graph.node) == 16
    old = {"op": "fold", "folded": [], "removed": [], "kept": [], "body_folded": [],
           "max_bytes": 1}  # a record written before fold fused replays without fusing
    assert RewriteRecord.from_json(old).replay_call().options == {"max_bytes": 1, "fuse": False}


def test_a_castlike_to_a_typed_tensor_folds_and_its_conv_then_takes_the_batchnorm():
    # torch's dynamo exporter writes a bias-less Conv's zero bias as CastLike(0, x) + Expand:
    # folded as a Cast to x's type, the bias is a constant and Conv + BatchNormalization fuse
    m = _conv_bn(with_bias=False)
    g = m.graph
    g.initializer.append(numpy_helper.from_array(np.array(0.0, np.float64), "zero"))
    g.initializer.append(numpy_helper.from_array(np.array([4], np.int64), "four"))
    g.node.insert(0, helper.make_node("CastLike", ["zero", "x"], ["z"], name="like"))
    g.node.insert(1, helper.make_node("Expand", ["z", "four"], ["B0"], name="expand"))
    g.node[2].input.append("B0")
    feeds = {"x": RNG.standard_normal((1, 3, 6, 6)).astype(np.float32)}
    before = _run(m, feeds)["y"]
    r = surgery.fold(m)
    assert {"like", "expand"} <= set(r.removed)  # B0 folded, then read by nothing: not listed
    assert [f["rule"] for f in r.fused] == ["conv_batchnorm"]
    assert [n.op_type for n in m.graph.node] == ["Conv", "Relu"]
    np.testing.assert_allclose(_run(m, feeds)["y"], before, rtol=1e-4, atol=1e-5)


def _gemm_mix() -> onnx.ModelProto:
    """MatMul + Add pairs of every kind the Gemm rule looks at: sites (the MatMul in either
    slot, x typed by the int-graph pass or a graph input) and pairs that must stay."""
    mk, vi = helper.make_node, helper.make_tensor_value_info
    d = numpy_helper.from_array(RNG.standard_normal(4).astype(np.float64), "Bd")
    nodes = [
        mk("MatMul", ["x", "W"], ["m0"], name="mm0"), mk("Add", ["m0", "B"], ["a0"], name="add0"),
        mk("Relu", ["a0"], ["r0"]),
        mk("MatMul", ["r0", "W"], ["m1"], name="mm1"), mk("Add", ["B", "m1"], ["a1"], name="add1"),
        mk("MatMul", ["a1", "W"], ["m2"], name="mm2"), mk("Add", ["m2", "B3"], ["a2"]),  # bias 3
        mk("MatMul", ["a1", "W"], ["m3"], name="mm3"), mk("Add", ["m3", "B"], ["a3"]),
        mk("Relu", ["m3"], ["r3"]),  # m3 read twice
        mk("MatMul", ["a1", "W"], ["m4"], name="mm4"), mk("Add", ["m4", "m4"], ["a4"]),
        mk("MatMul", ["a1", "W"], ["m5"], name="mm5"), mk("Add", ["m5", "Bd"], ["a5"]),  # f64
        mk("MatMul", ["x3", "W"], ["m6"], name="mm6"), mk("Add", ["m6", "B"], ["a6"]),  # 3-D
        mk("MatMul", ["a1", "W"], ["m7"], name="mm7"), mk("Add", ["m7", "B"], ["a7"]),  # output
        mk("MatMul", ["a1", "x2"], ["m8"], name="mm8"), mk("Add", ["m8", "B"], ["a8"]),  # W fed
        mk("Add", ["a1", "B"], ["a9"]), mk("MatMul", ["a9", "W"], ["m9"], name="mm9"),
        mk("Add", ["m9", "B"], ["a10"], name=""),  # an unnamed Add: a site
    ]
    outs = [helper.make_tensor_value_info(n, F, None)
            for n in ("r3", "a2", "a4", "a5", "a6", "m7", "a7", "a8", "a10")]
    return _model(nodes, [vi("x", F, [2, 4]), vi("x3", F, [2, 2, 4]), vi("x2", F, [4, 4])],
                  outs, [_w("W", 4, 4), _w("B", 4), _w("B3", 3), d])


def test_gemm_sites_found_on_the_int_graph_are_those_each_add_finds(tmp_path):
    from onnxsurgeon.index import positions
    from onnxsurgeon.session import indexed
    from onnxsurgeon.surgery._fuse_gemm import _gemm, _gemm_sites
    from onnxsurgeon.surgery.fuse import _Facts

    path = tmp_path / "mix.onnx"
    onnx.save(_gemm_mix(), path)
    m = load(path)
    index = indexed(m)
    facts = _Facts(index, {i.name for i in m.proto.graph.input}, m.base_dir)
    facts.type_all()
    nodes = m.proto.graph.node
    ops = [n.op_type for n in nodes]
    found = _gemm_sites(facts, nodes, ops)
    assert found is not None  # the int graph answered
    fast, written = found
    slow = {i: got for i in positions(ops, "Add")
            if (got := _gemm(facts, nodes, ops, i)) is not None}
    assert fast == slow
    made = {index.node_label(i) for i in fast}
    assert made == {"add0", "add1", "Add#22"}
    gemm = onnx.NodeProto()
    gemm.ParseFromString(fast[4][1])
    assert gemm == helper.make_node("Gemm", ["r0", "W", "B"], ["a1"], name="mm1")
    assert list(written.inputs[1]) == ["r0", "W", "B"] and list(written.outputs[1]) == ["a1"]


def test_gemm_sites_of_a_main_graph_holding_a_body_are_typed_by_one_inference(tmp_path,
                                                                              monkeypatch):
    """A main graph with an If has no int dataflow graph: the Gemm candidates' types come from
    one shape inference, not a walk of each candidate's closure (O(n^2) on a chain: a 30k-block
    chain with one If took over 11 minutes)."""
    from onnxsurgeon.surgery import _proto
    from tests import builders

    model = builders.chain(60)
    out = model.graph.output[0].name
    branch = [helper.make_graph([helper.make_node(op, [out], [op.lower()], name=op)], op, [],
                                [helper.make_tensor_value_info(op.lower(), F, None)])
              for op in ("Relu", "Neg")]
    model.graph.input.append(helper.make_tensor_value_info("c", TensorProto.BOOL, []))
    model.graph.node.append(helper.make_node("If", ["c"], ["yy"], name="if",
                                             then_branch=branch[0], else_branch=branch[1]))
    model.graph.output.append(helper.make_tensor_value_info("yy", F, None))
    path = tmp_path / "chain_if.onnx"
    onnx.save(model, str(path))
    walks: list[str] = []
    plain = _proto.quick_value_info
    monkeypatch.setattr(_proto, "quick_value_info",
                        lambda index, name: walks.append(name) or plain(index, name))
    m = load(path)
    result = surgery.fold(m)
    assert sum(e["rule"] == "matmul_add_gemm" for e in result.fused) == 60, result.fused[:2]
    assert walks == []
    feeds = {"x": RNG.standard_normal((1, 4)).astype(np.float32), "c": np.array(True)}
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    got = ort.InferenceSession(m.proto.SerializeToString()).run(None, feeds)
    assert all(np.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(want, got, strict=True))
