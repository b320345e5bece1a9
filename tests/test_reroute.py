"""reroute: structure (rewired reads, outputs, order), numbers (onnxruntime, exact: the rewritten
model equals the original with the rerouted consumers fed the target's values), refusals that
leave the model byte-identical, determinism."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsurgeon.errors import NotFoundError, RewriteError, UsageError
from onnxsurgeon.index import GraphIndex
from onnxsurgeon.io import Model
from onnxsurgeon.record import rewrites
from onnxsurgeon.surgery import reroute
from tests import builders as B
from tests.rewire_helpers import as_input, clone, expose, feed_consumers, rand, run, serialized

F = TensorProto.FLOAT
CNN_FEEDS = {"x": rand((1, 3, 8, 8), 0)}


def _node(model: onnx.ModelProto, name: str) -> onnx.NodeProto:
    return next(n for n in model.graph.node if n.name == name)


def test_reroute_all_consumers_and_the_output():
    orig = B.tiny_cnn()
    model = clone(orig)
    r = reroute(model, "act", "conv5_out")
    assert r.rerouted == ["pool", "side"]
    assert r.rerouted_outputs == ["act"]
    assert [o.name for o in model.graph.output] == ["logits", "conv5_out", "side_out"]
    assert list(_node(model, "pool").input) == ["conv5_out"]
    assert list(_node(model, "side").input) == ["conv5_out"]
    assert "act" not in GraphIndex(model).consumers
    onnx.checker.check_model(model, full_check=True)
    # reference: the original with every reader of act fed conv5_out's values
    target = run(expose(orig, "conv5_out"), CNN_FEEDS)["conv5_out"]
    ref = run(as_input(orig, "act"), {**CNN_FEEDS, "act": target})
    new = run(model, CNN_FEEDS)
    assert np.array_equal(new["logits"], ref["logits"])
    assert np.array_equal(new["side_out"], ref["side_out"])
    assert np.array_equal(new["conv5_out"], ref["act"])
    assert not np.array_equal(new["logits"], run(orig, CNN_FEEDS)["logits"])  # it did change
    assert rewrites(model)[-1] == {"op": "reroute", "from": "act", "to": "conv5_out",
                                   "rerouted": ["pool", "side"], "rerouted_outputs": ["act"]}


def test_partial_reroute_touches_only_the_named_consumers():
    orig = B.tiny_cnn()
    model = clone(orig)
    r = reroute(Model(model), "act", "conv5_out", consumers=["side"])
    assert r.rerouted == ["side"] and r.rerouted_outputs == []
    assert list(_node(model, "pool").input) == ["act"]
    assert list(_node(model, "side").input) == ["conv5_out"]
    assert [o.name for o in model.graph.output] == ["logits", "act", "side_out"]
    onnx.checker.check_model(model, full_check=True)
    target = run(expose(orig, "conv5_out"), CNN_FEEDS)["conv5_out"]
    ref = run(feed_consumers(orig, "act", ["side"], "feed"), {**CNN_FEEDS, "feed": target})
    new = run(model, CNN_FEEDS)
    for name in ("logits", "act", "side_out"):
        assert np.array_equal(new[name], ref[name]), name
    assert np.array_equal(new["logits"], run(orig, CNN_FEEDS)["logits"])


@pytest.mark.parametrize("x", [np.float32([1.0, -2.0, 3.0]), np.float32([-1.0, -2.0, 0.5])],
                         ids=["then", "else"])
def test_reads_inside_if_branches_are_rerouted(x):
    orig = B.if_capture()
    model = clone(orig)
    r = reroute(model, "a", "x")
    assert r.rerouted == ["branch", "add"]
    inner = [n for a in _node(model, "branch").attribute for n in a.g.node]
    assert [list(n.input) for n in inner] == [["x", "W"], ["x", "W"]]
    onnx.checker.check_model(model, full_check=True)
    ref = run(as_input(orig, "a"), {"x": x, "a": x})
    assert np.array_equal(run(model, {"x": x})["z"], ref["z"])


def test_partial_reroute_of_a_node_with_a_body_rewires_its_inner_reads_only():
    orig = B.if_capture()
    model = clone(orig)
    r = reroute(model, "a", "x", consumers=["branch"])
    assert r.rerouted == ["branch"]
    assert list(_node(model, "add").input) == ["y", "a"]
    inner = [n for a in _node(model, "branch").attribute for n in a.g.node]
    assert all(n.input[0] == "x" for n in inner)
    x = np.float32([-1.0, 2.0, 0.5])
    want = x * numpy_helper.to_array(next(t for t in orig.graph.initializer if t.name == "W"))
    assert np.array_equal(run(model, {"x": x})["z"], want + np.maximum(x, 0))


def test_reads_inside_a_loop_body_are_rerouted():
    orig = B.loop_capture()
    model = clone(orig)
    r = reroute(model, "b", "x")
    assert r.rerouted == ["loop"]
    body = _node(model, "loop").attribute[0].g
    assert list(body.node[2].input) == ["m", "x"]
    x = np.float32([0.5, -2.0])
    ref = run(as_input(orig, "b"), {"x": x, "b": x})
    assert np.array_equal(run(model, {"x": x})["z"], ref["z"])


def _late_target() -> onnx.ModelProto:
    """x -> a = Relu(x) -> f = Neg(a); u = Abs(x) (unrelated); c = Sigmoid(x); t = Exp(c);
    out = Add(f, t) + side output u. The target t is produced after f, its consumer-to-be."""
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="relu"),
        helper.make_node("Neg", ["a"], ["f"], name="f"),
        helper.make_node("Abs", ["x"], ["u"], name="unrelated"),
        helper.make_node("Sigmoid", ["x"], ["c"], name="sig"),
        helper.make_node("Exp", ["c"], ["t"], name="exp"),
        helper.make_node("Add", ["f", "t"], ["out"], name="add"),
    ]
    g = helper.make_graph(nodes, "late", [helper.make_tensor_value_info("x", F, [4])],
                          [helper.make_tensor_value_info("out", F, [4]),
                           helper.make_tensor_value_info("u", F, [4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


def test_target_produced_later_moves_only_its_producers_stably():
    orig = _late_target()
    model = clone(orig)
    r = reroute(model, "a", "t", consumers=["f"])
    assert r.rerouted == ["f"]
    assert [n.name for n in model.graph.node] == ["relu", "sig", "exp", "f", "unrelated", "add"]
    onnx.checker.check_model(model, full_check=True)
    x = rand((4,), 1)
    got = run(model, {"x": x})
    tvals = run(expose(orig, "t"), {"x": x})["t"]
    ref = run(feed_consumers(orig, "a", ["f"], "feed"), {"x": x, "feed": tvals})
    assert np.array_equal(got["out"], ref["out"]) and np.array_equal(got["u"], ref["u"])


def test_cycle_is_refused_naming_the_nodes():
    model = B.chain(3)
    before = serialized(model)
    with pytest.raises(RewriteError, match=r"cycle: 'relu1' is computed from \['MatMul_1'\]"):
        reroute(model, "relu0", "relu1", consumers=["MatMul_1"])
    with pytest.raises(RewriteError, match=r"computed from \['Add_0'\]"):
        reroute(model, "mm0", "mm1")
    assert serialized(model) == before
    cnn = B.tiny_cnn()
    before = serialized(cnn)
    with pytest.raises(RewriteError, match=r"'act' is computed from \['relu5'\]"):
        reroute(cnn, "conv5_out", "act")  # relu5 would read its own output
    assert serialized(cnn) == before


def _refused(model, exc, pattern, *args, **kwargs):
    before = serialized(model)
    with pytest.raises(exc, match=pattern):
        reroute(model, *args, **kwargs)
    assert serialized(model) == before


def test_refusals_leave_the_model_unchanged():
    _refused(B.loop_capture(), RewriteError, "'b' is float but 'trips' is int64", "b", "trips")
    _refused(B.tiny_cnn(), RewriteError, r"dim 2 of 'act' is 8 but of 'pooled' is 1", "act", "pooled")
    _refused(B.tiny_cnn(), RewriteError, "rank 4 .* rank 2", "act", "flat")
    _refused(B.tiny_cnn(), NotFoundError, "node 'sid' not found in the main graph; did you mean 'side'",
             "act", "conv5_out", consumers=["sid"])
    _refused(B.tiny_cnn(), UsageError, r"node 'fc' does not read 'act'; its consumers are \['pool', 'side'\]",
             "act", "conv5_out", consumers=["fc"])
    _refused(B.tiny_cnn(), UsageError, "both 'act'", "act", "relu5")
    _refused(B.tiny_cnn(), NotFoundError, "tensor 'nope' not found", "nope", "act")
    _refused(B.tiny_cnn(), RewriteError, "cycle: 'side_out' is computed from \\['side'\\]",
             "act", "side_out")
    _refused(B.tiny_cnn(), RewriteError, "'act', which is already a graph output", "side_out", "act")
    dead = B.chain(2)
    dead.graph.node.append(helper.make_node("Neg", ["x"], ["unused"], name="dead"))
    _refused(dead, UsageError, "nothing reads 'unused'", "unused", "x")


def test_symbolic_dims_pass_the_shape_check():
    model = B.tiny_cnn()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"  # conv5_out: [N, 4, 8, 8]
    r = reroute(model, "act", "conv5_out")
    assert r.rerouted_outputs == ["act"]
    out = model.graph.output[1]
    assert out.name == "conv5_out" and out.type.tensor_type.shape.dim[0].dim_param == "N"
    onnx.checker.check_model(model, full_check=True)
    assert run(model, CNN_FEEDS)["conv5_out"].shape == (1, 4, 8, 8)


def test_same_call_twice_is_byte_identical():
    a, b = _late_target(), _late_target()
    reroute(a, "a", "t", consumers=["f"])
    reroute(b, "a", "t", consumers=["f"])
    assert serialized(a) == serialized(b)


def test_unused_nodes_are_counted_and_pruned_with_their_weights():
    from onnxsurgeon.verify import verify_log
    from tests.test_verify import mlp

    orig = mlp()
    kept = clone(orig)
    r = reroute(kept, "relu2", "relu0", consumers=["MatMul_3"])
    assert r.rerouted == ["MatMul_3"] and r.unused_nodes == 3 and r.pruned_nodes == 0
    assert len(kept.graph.node) == len(orig.graph.node)
    pruned = clone(orig)
    p = reroute(pruned, "relu2", "relu0", consumers=["MatMul_3"], prune=True)
    assert (p.unused_nodes, p.pruned_nodes, p.pruned_initializers) == (0, 3, 2)
    names = [n.name for n in pruned.graph.node]
    assert not {"MatMul_2", "Add_2", "Relu_2"} & set(names)
    assert len(names) == len(orig.graph.node) - 3
    assert {t.name for t in orig.graph.initializer} - {t.name for t in pruned.graph.initializer} \
        == {"W2", "b2"}
    assert [i.name for i in pruned.graph.input] == ["x"]
    onnx.checker.check_model(pruned, full_check=True)
    feeds = {"x": rand((1, 8), 3)}
    assert np.array_equal(run(pruned, feeds)["y"], run(kept, feeds)["y"])
    record = rewrites(pruned)[-1]
    assert record["pruned_nodes"] == ["MatMul_2", "Add_2", "Relu_2"]
    assert record["pruned_initializers"] == ["W2", "b2"]
    assert "pruned_nodes" not in rewrites(kept)[-1]  # without prune the record is as before
    assert verify_log(orig, pruned).ok
    extract_after = clone(pruned)
    reroute(extract_after, "relu3", "relu0", consumers=["MatMul_4"])
    assert verify_log(orig, extract_after).ok  # the pruning step replays


def test_consumers_take_module_paths_and_tensor_names():
    """--consumers accepts what every other name does: a torch module path (TorchScript-style
    node names '/head/Gemm') means the module's nodes that read the source; a tensor means its
    producer."""
    W = numpy_helper.from_array(np.eye(4, dtype=np.float32), "W")
    nodes = [helper.make_node("Relu", ["x"], ["/body/Relu_output_0"], name="/body/Relu"),
             helper.make_node("Neg", ["x"], ["/alt/Neg_output_0"], name="/alt/Neg"),
             helper.make_node("MatMul", ["/body/Relu_output_0", "W"], ["/head/MatMul_output_0"],
                              name="/head/MatMul"),
             helper.make_node("Sigmoid", ["/body/Relu_output_0"], ["side"], name="/side/Sigmoid")]
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", F, [1, 4])],
                          [helper.make_tensor_value_info("/head/MatMul_output_0", F, [1, 4]),
                           helper.make_tensor_value_info("side", F, [1, 4]),
                           helper.make_tensor_value_info("/alt/Neg_output_0", F, [1, 4])], [W])
    orig = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    by_module = clone(orig)
    r = reroute(by_module, "body", "alt", consumers=["head"])
    assert r.rerouted == ["/head/MatMul"]
    by_tensor = clone(orig)
    assert reroute(by_tensor, "body", "alt", consumers=["side"]).rerouted == ["/side/Sigmoid"]
    by_node = clone(orig)
    reroute(by_node, "/body/Relu_output_0", "/alt/Neg_output_0", consumers=["/head/MatMul"])
    assert serialized(by_module) != serialized(orig)
    assert list(_node(by_module, "/head/MatMul").input) == list(_node(by_node, "/head/MatMul").input)
    x = {"x": np.float32([[1, -2, 3, -4]])}
    assert np.array_equal(run(by_module, x)["/head/MatMul_output_0"], -x["x"])
    with pytest.raises(NotFoundError, match="consumers of '/body/Relu_output_0'"):
        reroute(clone(orig), "body", "alt", consumers=["tail"])
