"""insert: structure (names, rewired reads, outputs, checker), numbers (onnxruntime, exact),
refusals that leave the model byte-identical, opset reconciliation, determinism."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsurgeon.errors import NotFoundError, RewriteError, UsageError
from onnxsurgeon.index import GraphIndex
from onnxsurgeon.io import Model, load
from onnxsurgeon.processing import make_block
from onnxsurgeon.record import rewrites
from onnxsurgeon.surgery import insert
from tests import builders as B
from tests.rewire_helpers import as_input, clone, expose, rand, run, serialized

F = TensorProto.FLOAT
CNN_FEEDS = {"x": rand((1, 3, 8, 8), 0)}


def check_downstream(orig: onnx.ModelProto, model: onnx.ModelProto, at: str, processed: str,
                     feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The rewritten model equals the original fed the processed values at ``at`` (exactly)."""
    onnx.checker.check_model(model, full_check=True)
    new = run(expose(model, processed), feeds)
    ref_model = as_input(orig, at)
    vi = next(i for i in ref_model.graph.input if i.name == at)
    for d in vi.type.tensor_type.shape.dim:  # the processed tensor may have another shape
        d.dim_param = "d"
    ref = run(ref_model, {**feeds, at: new[processed]})
    for out in orig.graph.output:
        name = processed if out.name == at else out.name
        assert np.array_equal(new[name], ref[out.name]), out.name
    return new


def block_on(orig: onnx.ModelProto, at: str, block: onnx.ModelProto,
             feeds: dict[str, np.ndarray]) -> np.ndarray:
    """The block run by itself on the original activation values."""
    act = run(expose(orig, at), feeds)[at]
    return run(block, {block.graph.input[0].name: act})[block.graph.output[0].name]


# ----------------------------------------------------------------------------- built-in blocks
def test_a_graph_output_keeps_its_name_and_the_raw_values_move():
    orig = B.tiny_cnn()
    model = clone(orig)
    r = insert(model, "act", op="l2_normalize", params={"axis": 1})
    assert r.processed == "act"
    assert r.renamed == {"act": "act/pre_l2_normalize"}
    assert r.rerouted == ["pool", "side"]
    assert r.rerouted_outputs == ["act"]
    assert [o.name for o in model.graph.output] == ["logits", "act", "side_out"]
    index = GraphIndex(model)
    assert index.graph.node[index.producer["act/pre_l2_normalize"]].name == "relu5"
    readers = {index.node_label(u.node) for u in index.consumers["act/pre_l2_normalize"]}
    assert readers == {"act/l2_normalize/ReduceSumSquare", "act/l2_normalize/Div"}
    assert {index.node_label(u.node) for u in index.consumers["act"]} == {"pool", "side"}
    assert index.graph.node[index.producer["act"]].name == "act/l2_normalize/Div"
    new = check_downstream(orig, model, "act", "act", CNN_FEEDS)
    block = make_block("l2_normalize", {"axis": 1}, elem_type=F, opset=17, shape=[1, 4, 8, 8])
    assert np.array_equal(new["act"], block_on(orig, "act", block, CNN_FEEDS))
    assert np.array_equal(run(expose(model, "act/pre_l2_normalize"), CNN_FEEDS)["act/pre_l2_normalize"],
                          run(orig, CNN_FEEDS)["act"])
    assert rewrites(model)[-1] == {
        "op": "insert", "at": "act", "processed": "act", "block": "l2_normalize",
        "params": {"axis": 1}, "block_nodes": r.block_nodes, "rerouted": ["pool", "side"],
        "rerouted_outputs": ["act"], "as_output": False,
        "renamed": {"act": "act/pre_l2_normalize"},
    }


def test_a_graph_output_that_is_also_an_input_is_renamed():
    x = helper.make_tensor_value_info("x", F, [2])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "io",
                          [x], [helper.make_tensor_value_info("y", F, [2]), x])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    r = insert(model, "x", op="scale", params={"factor": 2})
    assert r.renamed == {} and r.processed == "x/scale"
    assert [o.name for o in model.graph.output] == ["y", "x/scale"]
    assert [i.name for i in model.graph.input] == ["x"]


def test_keep_output_name_off_renames_the_graph_output():
    orig = B.tiny_cnn()
    model = clone(orig)
    r = insert(model, "act", op="l2_normalize", params={"axis": 1}, keep_output_name=False)
    assert r.renamed == {}
    assert r.processed == "act/l2_normalize"
    assert r.rerouted == ["pool", "side"]
    assert r.rerouted_outputs == ["act"]
    assert r.block_nodes == ["act/l2_normalize/ReduceSumSquare", "act/l2_normalize/Max",
                             "act/l2_normalize/Sqrt", "act/l2_normalize/Div"]
    assert [o.name for o in model.graph.output] == ["logits", "act/l2_normalize", "side_out"]
    index = GraphIndex(model)
    readers = {index.node_label(u.node) for u in index.consumers["act"]}
    assert readers == {"act/l2_normalize/ReduceSumSquare", "act/l2_normalize/Div"}
    assert {index.node_label(u.node) for u in index.consumers[r.processed]} == {"pool", "side"}
    assert {t.name for t in model.graph.initializer} >= {"act/l2_normalize/epsilon"}
    assert any(vi.name == r.processed for vi in model.graph.output)
    new = check_downstream(orig, model, "act", r.processed, CNN_FEEDS)
    block = make_block("l2_normalize", {"axis": 1}, elem_type=F, opset=17, shape=[1, 4, 8, 8])
    assert np.array_equal(new[r.processed], block_on(orig, "act", block, CNN_FEEDS))
    assert not np.array_equal(new["logits"], run(orig, CNN_FEEDS)["logits"])
    assert rewrites(model)[-1] == {
        "op": "insert", "at": "act", "processed": "act/l2_normalize", "block": "l2_normalize",
        "params": {"axis": 1}, "block_nodes": r.block_nodes, "rerouted": ["pool", "side"],
        "rerouted_outputs": ["act"], "as_output": False,
    }


@pytest.mark.parametrize(("op", "params"), [
    ("global_avg_pool", {}), ("reduce_mean", {"axes": [2, 3]}), ("softmax", {"axis": 1}),
    ("scale", {"factor": -0.5}), ("clip", {"min": 0.1, "max": 0.6}), ("identity", {}),
])
def test_every_builtin_block_feeds_the_downstream_exactly(op, params):
    orig = B.tiny_cnn()
    model = clone(orig)
    r = insert(model, "act", op=op, params=params)
    new = check_downstream(orig, model, "act", r.processed, CNN_FEEDS)
    shape = list(new[r.processed].shape)
    block = make_block(op, params, elem_type=F, opset=17, shape=[1, 4, 8, 8])
    assert np.array_equal(new[r.processed], block_on(orig, "act", block, CNN_FEEDS))
    out = next(o for o in model.graph.output if o.name == r.processed)
    assert [d.dim_value for d in out.type.tensor_type.shape.dim] == shape


def test_as_output_reroutes_nothing_and_adds_the_processed_output():
    orig = B.tiny_cnn()
    model = clone(orig)
    r = insert(model, "act", op="reduce_mean", params={"axes": [2, 3], "keepdims": 0},
               as_output=True)
    assert r.rerouted == [] and r.rerouted_outputs == []
    assert [o.name for o in model.graph.output] == ["logits", "act", "side_out", r.processed]
    onnx.checker.check_model(model, full_check=True)
    new, old = run(model, CNN_FEEDS), run(orig, CNN_FEEDS)
    for name in old:
        assert np.array_equal(new[name], old[name])
    block = make_block("reduce_mean", {"axes": [2, 3], "keepdims": 0}, elem_type=F, opset=17,
                       shape=[1, 4, 8, 8])
    assert np.array_equal(new[r.processed], block_on(orig, "act", block, CNN_FEEDS))
    assert new[r.processed].shape == (1, 4)
    assert rewrites(model)[-1]["as_output"] is True


@pytest.mark.parametrize("x", [np.float32([1.0, -2.0, 3.0]), np.float32([-1.0, -2.0, 0.5])],
                         ids=["then", "else"])
def test_if_branches_capturing_the_tensor_are_rewired(x):
    orig = B.if_capture()
    model = clone(orig)
    r = insert(model, "a", op="scale", params={"factor": 3})
    assert r.rerouted == ["branch", "add"]
    branch = next(n for n in model.graph.node if n.name == "branch")
    inner = [n for a in branch.attribute for n in a.g.node]
    assert [list(n.input) for n in inner] == [["a/scale", "W"], ["a/scale", "W"]]
    new = check_downstream(orig, model, "a", r.processed, {"x": x})
    assert np.array_equal(new[r.processed], np.maximum(x, 0) * np.float32(3))


def test_loop_body_capturing_the_tensor_is_rewired():
    orig = B.loop_capture()
    model = clone(orig)
    r = insert(model, "b", op="clip", params={"max": 0.0})
    assert r.rerouted == ["loop"]
    body = next(n for n in model.graph.node if n.name == "loop").attribute[0].g
    assert list(body.node[2].input) == ["m", "b/clip"]
    feeds = {"x": np.float32([0.5, -2.0])}
    new = check_downstream(orig, model, "b", r.processed, feeds)
    assert np.array_equal(new[r.processed], np.minimum(-feeds["x"], 0))


def test_insert_at_a_graph_input_goes_first():
    orig = B.tiny_cnn()
    model = clone(orig)
    r = insert(model, "x", op="scale", params={"factor": 2})
    assert model.graph.node[0].name == "x/scale/Mul"
    assert r.rerouted == ["conv5"]
    check_downstream(orig, model, "x", r.processed, CNN_FEEDS)


def test_old_ir_host_lists_the_new_initializers_as_inputs():
    orig = B.init_as_input()  # IR 3, opset 9: initializers must also be graph inputs
    model = clone(orig)
    r = insert(model, "h", op="l2_normalize")
    assert "h/l2_normalize/epsilon" in [i.name for i in model.graph.input]
    check_downstream(orig, model, "h", r.processed, {"x": rand((2, 3), 8)})


def test_inserting_twice_at_one_tensor_gives_fresh_names():
    model = B.tiny_cnn()
    first = insert(model, "act", op="l2_normalize")
    second = insert(model, first.processed, op="l2_normalize")
    assert first.processed == second.processed == "act"  # the graph output keeps its name
    assert first.renamed == {"act": "act/pre_l2_normalize"}
    assert second.renamed == {"act": "act/pre_l2_normalize__1"}
    third = insert(model, "act", op="l2_normalize", as_output=True)
    assert third.processed == "act/l2_normalize"
    assert len(set(third.block_nodes) & set(first.block_nodes)) == 0
    assert len(set(second.block_nodes) & set(first.block_nodes)) == 0
    fourth = insert(model, "act", op="l2_normalize", keep_output_name=False)
    assert fourth.processed == "act/l2_normalize__1"
    onnx.checker.check_model(model, full_check=True)
    run(model, CNN_FEEDS)
    assert len(rewrites(model)) == 4


# ------------------------------------------------------------------------------ graph blocks
def _block(nodes, inputs, outputs, inits=(), opset=17, functions=(), extra_opsets=()):
    g = helper.make_graph(nodes, "blk", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), *extra_opsets],
                          functions=list(functions))
    m.ir_version = 8
    return m


def test_block_from_file_with_initializers_and_older_opset(tmp_path):
    """Opset 11 ReduceMean (axes attribute) + Mul + Add, initializers named like host tensors:
    converted to the host's opset 17, names prefixed, weights merged."""
    w = numpy_helper.from_array(rand((1, 4, 1, 1), 3), "fc.weight")
    b = numpy_helper.from_array(rand((1, 1, 1, 1), 4), "bias")
    blk = _block(
        [helper.make_node("ReduceMean", ["feat"], ["r"], axes=[2, 3], keepdims=1, name="mean"),
         helper.make_node("Mul", ["r", "fc.weight"], ["rw"], name="mul"),
         helper.make_node("Add", ["rw", "bias"], ["out"], name="add")],
        [helper.make_tensor_value_info("feat", F, ["N", 4, "H", "W"])],
        [helper.make_tensor_value_info("out", F, ["N", 4, 1, 1])], [w, b], opset=11)
    onnx.checker.check_model(blk, full_check=True)
    path = tmp_path / "block.onnx"
    onnx.save(blk, str(path))
    orig = B.tiny_cnn()
    model = clone(orig)
    host_fc = serialized_tensor(orig, "fc.weight")
    r = insert(Model(model), "act", graph=load(path), keep_output_name=False)
    assert r.processed == "act/blk"
    assert all(n.startswith("act/blk/") for n in r.block_nodes)
    assert [op.version for op in model.opset_import if op.domain == ""] == [17]
    names = {t.name for t in model.graph.initializer}
    assert {"act/blk/fc.weight", "act/blk/bias"} <= names
    assert serialized_tensor(model, "fc.weight") == host_fc
    new = check_downstream(orig, model, "act", r.processed, CNN_FEEDS)
    act = run(expose(orig, "act"), CNN_FEEDS)["act"]
    want = act.mean(axis=(2, 3), keepdims=True) * numpy_helper.to_array(w) + numpy_helper.to_array(b)
    np.testing.assert_allclose(new[r.processed], want, rtol=1e-6, atol=1e-6)
    assert rewrites(model)[-1]["block"] == "graph"


def serialized_tensor(model: onnx.ModelProto, name: str) -> bytes:
    return next(t for t in model.graph.initializer if t.name == name).SerializeToString()


def test_newer_block_whose_ops_did_not_change_keeps_the_host_opset():
    blk = _block([helper.make_node("Relu", ["i"], ["o"])],
                 [helper.make_tensor_value_info("i", F, ["batch", "c", 8, 8])],
                 [helper.make_tensor_value_info("o", F, ["batch", "c", 8, 8])], opset=18)
    orig = B.tiny_cnn()
    model = clone(orig)
    r = insert(model, "act", graph=blk)
    assert [op.version for op in model.opset_import if op.domain == ""] == [17]
    new = check_downstream(orig, model, "act", r.processed, CNN_FEEDS)
    assert np.array_equal(new[r.processed], np.maximum(run(orig, CNN_FEEDS)["act"], 0))


def _sin_host(op: str = "Sin") -> onnx.ModelProto:
    g = helper.make_graph(
        [helper.make_node(op, ["x"], ["h"], name="first"),
         helper.make_node("GlobalAveragePool", ["h"], ["y"], name="gap")],
        "host", [helper.make_tensor_value_info("x", F, [1, 2, 3, 3])],
        [helper.make_tensor_value_info("y", F, [1, 2, 1, 1])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)])
    m.ir_version = 6
    onnx.checker.check_model(m, full_check=True)
    return m


def _gelu_block() -> onnx.ModelProto:
    return _block([helper.make_node("Gelu", ["i"], ["o"], name="gelu")],
                  [helper.make_tensor_value_info("i", F, ["N", "C", "H", "W"])],
                  [helper.make_tensor_value_info("o", F, ["N", "C", "H", "W"])], opset=20)


def test_newer_block_raises_the_host_opset_when_no_host_op_changes():
    orig = _sin_host()
    model = clone(orig)
    r = insert(model, "h", graph=_gelu_block())
    assert [op.version for op in model.opset_import if op.domain == ""] == [20]
    feeds = {"x": rand((1, 2, 3, 3), 5)}
    new = check_downstream(orig, model, "h", r.processed, feeds)
    h = np.sin(feeds["x"].astype(np.float64))
    gelu = 0.5 * h * (1 + np.vectorize(math.erf)(h / math.sqrt(2)))
    np.testing.assert_allclose(new[r.processed], gelu, rtol=1e-5, atol=1e-6)


def test_newer_block_is_refused_when_the_host_would_change():
    # Softmax changed meaning at 13 (coerced-2D -> one axis) with an identical signature
    model = _sin_host("Softmax")
    before = serialized(model)
    with pytest.raises(RewriteError, match=r"opset 20 and the host opset 11.*\['Softmax'\]"):
        insert(model, "h", graph=_gelu_block())
    assert serialized(model) == before


def test_host_ops_that_only_gained_types_do_not_block_a_newer_opset():
    # gauntlet bug: Relu-14 only added integer types, so raising an opset-11 host to 20 is safe
    orig = _sin_host("Relu")
    model = clone(orig)
    r = insert(model, "h", graph=_gelu_block())
    assert [op.version for op in model.opset_import if op.domain == ""] == [20]
    check_downstream(orig, model, "h", r.processed, {"x": rand((1, 2, 3, 3), 5)})


def test_block_with_symbolic_dims_fits_and_static_mismatch_is_refused():
    ok = _block([helper.make_node("Neg", ["i"], ["o"])],
                [helper.make_tensor_value_info("i", F, ["N", 4, None, "W"])],
                [helper.make_tensor_value_info("o", F, ["N", 4, None, "W"])])
    model = B.tiny_cnn()
    insert(model, "act", graph=ok)
    onnx.checker.check_model(model, full_check=True)
    bad = _block([helper.make_node("Neg", ["i"], ["o"])],
                 [helper.make_tensor_value_info("i", F, ["N", 5, 8, 8])],
                 [helper.make_tensor_value_info("o", F, ["N", 5, 8, 8])])
    model = B.tiny_cnn()
    before = serialized(model)
    with pytest.raises(RewriteError, match="dim 1 of 'i' is 5 but of 'act' is 4"):
        insert(model, "act", graph=bad)
    assert serialized(model) == before


def test_block_function_clashing_with_a_host_function_is_renamed():
    fn = helper.make_function(
        "local", "Affine", ["X"], ["Y"], [helper.make_node("Neg", ["X"], ["Y"])],
        opset_imports=[helper.make_opsetid("", 17)])
    blk = _block([helper.make_node("Affine", ["i"], ["o"], domain="local", name="call")],
                 [helper.make_tensor_value_info("i", F, [4])],
                 [helper.make_tensor_value_info("o", F, [4])],
                 functions=[fn], extra_opsets=[helper.make_opsetid("local", 1)])
    orig = B.local_function()
    model = clone(orig)
    r = insert(model, "h", graph=blk)
    assert sorted(f.name for f in model.functions) == ["Affine", "Affine__1"]
    call = next(n for n in model.graph.node if n.name == r.block_nodes[0])
    assert (call.domain, call.op_type) == ("local", "Affine__1")
    feeds = {"x": rand((4,), 6)}
    new = check_downstream(orig, model, "h", r.processed, feeds)
    assert np.array_equal(new[r.processed], -run(expose(orig, "h"), feeds)["h"])
    # the same definition again is reused, not duplicated
    insert(model, "ht", graph=blk)
    assert sorted(f.name for f in model.functions) == ["Affine", "Affine__1"]
    onnx.checker.check_model(model, full_check=True)


def test_block_with_external_data_is_merged_inline(tmp_path):
    w = numpy_helper.from_array(rand((1, 4, 8, 8), 7), "w")
    blk = _block([helper.make_node("Mul", ["i", "w"], ["o"])],
                 [helper.make_tensor_value_info("i", F, [1, 4, 8, 8])],
                 [helper.make_tensor_value_info("o", F, [1, 4, 8, 8])], [w])
    onnx.save(blk, str(tmp_path / "blk.onnx"), save_as_external_data=True,
              all_tensors_to_one_file=True, location="blk.data", size_threshold=0)
    loaded = load(tmp_path / "blk.onnx")
    assert loaded.proto.graph.initializer[0].data_location == TensorProto.EXTERNAL
    orig = B.tiny_cnn()
    model = clone(orig)
    r = insert(model, "act", graph=loaded)
    merged = next(t for t in model.graph.initializer if t.name == "act/blk/w")
    assert merged.data_location != TensorProto.EXTERNAL and not merged.external_data
    new = check_downstream(orig, model, "act", r.processed, CNN_FEEDS)
    act = run(expose(orig, "act"), CNN_FEEDS)["act"]
    assert np.array_equal(new[r.processed], act * numpy_helper.to_array(w))


def test_block_with_an_if_is_renamed_inside_its_branches():
    then_g = helper.make_graph([helper.make_node("Mul", ["i", "two"], ["o1"], name="t")], "then",
                               [], [helper.make_tensor_value_info("o1", F, [1, 4, 8, 8])])
    else_g = helper.make_graph([helper.make_node("Neg", ["i"], ["o2"], name="e")], "else",
                               [], [helper.make_tensor_value_info("o2", F, [1, 4, 8, 8])])
    blk = _block(
        [helper.make_node("ReduceSum", ["i"], ["s"], keepdims=0, name="sum"),
         helper.make_node("Greater", ["s", "zero"], ["c"], name="gt"),
         helper.make_node("If", ["c"], ["o"], then_branch=then_g, else_branch=else_g, name="if")],
        [helper.make_tensor_value_info("i", F, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("o", F, [1, 4, 8, 8])],
        [numpy_helper.from_array(np.float32(2), "two"), numpy_helper.from_array(np.float32(0), "zero")])
    orig = B.tiny_cnn()
    model = clone(orig)
    r = insert(model, "act", graph=blk, keep_output_name=False)
    node_if = next(n for n in model.graph.node if n.name == "act/blk/if")
    branches = {a.name: a.g for a in node_if.attribute}
    assert list(branches["then_branch"].node[0].input) == ["act", "act/blk/two"]
    assert branches["then_branch"].node[0].name == "act/blk/t"
    assert branches["then_branch"].output[0].name == "act/blk/o1"
    new = check_downstream(orig, model, "act", r.processed, CNN_FEEDS)
    act = run(expose(orig, "act"), CNN_FEEDS)["act"]
    want = act * np.float32(2) if act.sum() > 0 else -act
    assert np.array_equal(new[r.processed], want)


def test_declared_downstream_value_info_is_retyped():
    orig = onnx.shape_inference.infer_shapes(B.tiny_cnn())
    assert any(vi.name == "pooled" for vi in orig.graph.value_info)
    model = clone(orig)
    r = insert(model, "act", op="reduce_mean", params={"axes": [3], "keepdims": 1})
    onnx.checker.check_model(model, full_check=True)
    side = next(o for o in model.graph.output if o.name == "side_out")
    assert [d.dim_value for d in side.type.tensor_type.shape.dim] == [1, 4, 8, 1]
    check_downstream(orig, model, "act", r.processed, CNN_FEEDS)


def test_retyping_stops_at_ops_inference_cannot_see():
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["a"], name="r"),
         helper.make_node("Foo", ["a"], ["b"], domain="custom", name="foo"),
         helper.make_node("Neg", ["a"], ["c"], name="neg")], "h",
        [helper.make_tensor_value_info("x", F, [2, 3])],
        [helper.make_tensor_value_info("b", F, [2, 3]), helper.make_tensor_value_info("c", F, [2, 3])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                                helper.make_opsetid("custom", 1)])
    insert(model, "a", op="reduce_mean", params={"axes": [1]})
    dims = {o.name: [d.dim_value for d in o.type.tensor_type.shape.dim] for o in model.graph.output}
    assert dims == {"b": [2, 3], "c": [2, 1]}  # b: unknown op, old declaration kept
    onnx.checker.check_model(model, full_check=True)


# ---------------------------------------------------------------------------------- refusals
def _refused(model, exc, pattern, *args, **kwargs):
    before = serialized(model)
    with pytest.raises(exc, match=pattern):
        insert(model, *args, **kwargs)
    assert serialized(model) == before


def test_dtype_mismatch_is_refused():
    half = _block([helper.make_node("Neg", ["i"], ["o"])],
                  [helper.make_tensor_value_info("i", TensorProto.FLOAT16, [1, 4, 8, 8])],
                  [helper.make_tensor_value_info("o", TensorProto.FLOAT16, [1, 4, 8, 8])])
    _refused(B.tiny_cnn(), RewriteError, "'i' is float16 but 'act' is float", "act", graph=half)
    _refused(B.loop_capture(), RewriteError, "does not accept int64", "trips", op="softmax")


def test_other_refusals_leave_the_model_unchanged():
    two = _block([helper.make_node("Add", ["i", "j"], ["o"])],
                 [helper.make_tensor_value_info("i", F, [3]), helper.make_tensor_value_info("j", F, [3])],
                 [helper.make_tensor_value_info("o", F, [3])])
    _refused(B.if_capture(), RewriteError, r"inputs \['i', 'j'\] and outputs \['o'\]", "a", graph=two)
    _refused(B.if_capture(), RewriteError, "rank >= 3", "a", op="global_avg_pool")
    _refused(B.tiny_cnn(), RewriteError, "axis=4 is out of range", "act", op="softmax",
             params={"axis": 4})
    _refused(B.tiny_cnn(), NotFoundError, "tensor 'actt' not found; did you mean 'act'", "actt",
             op="identity")
    _refused(B.tiny_cnn(), UsageError, "exactly one of op", "act")
    _refused(B.tiny_cnn(), UsageError, "exactly one of op", "act", op="identity",
             graph=B.tied_weights())
    _refused(B.tiny_cnn(), UsageError, "valid blocks", "act", op="l2norm")
    _refused(B.tiny_cnn(), UsageError, "no parameter 'axes'", "act", op="softmax",
             params={"axes": 1})
    dead = B.chain(2)
    dead.graph.node.append(helper.make_node("Neg", ["x"], ["unused"], name="dead"))
    _refused(dead, UsageError, "nothing reads tensor 'unused'", "unused", op="identity")


def test_shape_changing_block_retypes_the_downstream_or_is_refused():
    model = B.tiny_cnn()
    insert(model, "act", op="global_avg_pool")
    side = next(o for o in model.graph.output if o.name == "side_out")
    assert [d.dim_value for d in side.type.tensor_type.shape.dim] == [1, 4, 1, 1]
    onnx.checker.check_model(model, full_check=True)
    # averaging the channels away breaks fc (Gemm wants 4 features): refused, model unchanged
    _refused(B.tiny_cnn(), RewriteError, r"graph after 'act' cannot take.*node name: fc",
             "act", op="reduce_mean", params={"axes": [1]})


def test_same_call_twice_is_byte_identical():
    a, b = B.tiny_cnn(), B.tiny_cnn()
    insert(a, "act", op="reduce_mean", params={"axes": [2]})
    insert(b, "act", op="reduce_mean", params={"axes": "2"})
    assert serialized(a) == serialized(b)
    blk = _gelu_block()
    c, d = _sin_host(), _sin_host()
    insert(c, "h", graph=blk)
    insert(d, "h", graph=blk)
    assert serialized(c) == serialized(d)


# ------------------------------------------------ gauntlet regression (moved from test_gauntlet.py)


def test_regression_insert_as_output_of_unknown_rank_is_a_usage_error(tmp_path):
    import onnx
    import pytest

    from onnxsurgeon.errors import RewriteError
    from onnxsurgeon.surgery import insert
    from tests import gauntlet_models as gm

    model = onnx.load(str(gm.loop_rnn(tmp_path)))
    before = model.SerializeToString()
    with pytest.raises(RewriteError, match="rank of tensor 'h_last' is unknown"):
        insert(model, "h_last", op="identity", as_output=True)
    assert model.SerializeToString() == before


def test_the_name_map_follows_the_renamed_activation():
    """torch_cnn.onnx maps module 'fc' to its graph output 'logits'. After an insert there, 'fc'
    still names the tensor with fc's values (the unprocessed one), not the processed output."""
    from pathlib import Path

    from onnxsurgeon.select import Selector, name_map

    path = Path(__file__).resolve().parent.parent / "models" / "torch_cnn.onnx"
    orig = onnx.load(str(path))
    assert name_map(orig)["fc"] == "logits"
    model = clone(orig)
    r = insert(model, "fc", op="scale", params={"factor": 3.0})
    assert r.processed == "logits" and r.renamed == {"logits": "logits/pre_scale"}
    assert name_map(model)["fc"] == "logits/pre_scale"
    assert name_map(model)["conv5"] == name_map(orig)["conv5"]
    fc = Selector(GraphIndex(model)).resolve("fc")
    feeds = {"x": rand((2, 3, 8, 8), 7)}
    want = run(orig, feeds)["logits"]
    got = run(expose(model, fc), feeds)
    assert np.array_equal(got[fc], want)
    assert np.array_equal(got["logits"], want * np.float32(3))
