"""copy: structural, numeric (onnxruntime, optimizations off, bit-exact) and error behaviour."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsurgeon import io
from onnxsurgeon.errors import NotFoundError, RewriteError, UsageError
from onnxsurgeon.index import iter_graphs
from onnxsurgeon.record import rewrites
from onnxsurgeon.session import Session
from onnxsurgeon.surgery import Weights, copy
from tests import builders
from tests.test_extract import random_feeds, run, session

MODELS = {
    # builder -> (outputs to copy, number of initializers in their closure)
    "tiny_cnn": (["logits"], 4),
    "tied_weights": (["y"], 1),
    "if_capture": (["z"], 2),
    "loop_capture": (["z"], 3),
    "local_function": (["y"], 4),
    "init_as_input": (["y"], 1),
    "chain": (["y"], 2),
}


def build(name: str) -> onnx.ModelProto:
    return builders.chain(5) if name == "chain" else getattr(builders, name)()


def all_names(model: onnx.ModelProto) -> list[str]:
    names = []
    for g in iter_graphs(model.graph):
        names += [o for n in g.node for o in n.output if o]
        names += [t.name for t in g.initializer]
        names += [i.name for i in g.input if i.name not in {t.name for t in g.initializer}]
    return names


@pytest.mark.parametrize("weights", list(Weights), ids=str)
@pytest.mark.parametrize("name", list(MODELS))
def test_copy_equals_original_bit_exactly(name, weights):
    outputs, n_inits = MODELS[name]
    model = build(name)
    before_inits = len(model.graph.initializer)
    before_nodes = len(model.graph.node)
    result = copy(model, outputs, weights=weights)
    onnx.checker.check_model(model, full_check=True)
    names = all_names(model)
    assert len(names) == len(set(names)), "every name is defined once (SSA across scopes)"
    assert result.outputs == {o: f"copy/{o}" for o in outputs}
    assert [o.name for o in model.graph.output][-len(outputs):] == list(result.outputs.values())
    expected_inits = before_inits + (n_inits if weights is Weights.INDEPENDENT else 0)
    assert len(model.graph.initializer) == expected_inits
    assert len(result.initializers) == (n_inits if weights is Weights.INDEPENDENT else 0)
    assert len(model.graph.node) == before_nodes + len(result.nodes)
    assert all(v.startswith("copy/") for v in result.nodes.values())
    got = run(model, random_feeds(model))
    for orig, dup in result.outputs.items():
        np.testing.assert_array_equal(got[dup], got[orig])
    # copied outputs are typed like the originals
    by_name = {o.name: o for o in model.graph.output}
    for orig, dup in result.outputs.items():
        assert by_name[dup].type == by_name[orig].type


@pytest.mark.parametrize("name", list(MODELS))
def test_perturbing_a_copied_weight_moves_only_the_copy(name):
    outputs, _ = MODELS[name]
    model = build(name)
    result = copy(model, outputs, weights=Weights.INDEPENDENT)
    feeds = random_feeds(model)
    before = run(model, feeds)
    # perturb every copied initializer
    for t in model.graph.initializer:
        if t.name in set(result.initializers.values()):
            arr = numpy_helper.to_array(t)
            t.CopyFrom(numpy_helper.from_array(
                (arr + 1).astype(arr.dtype) if arr.dtype != bool else arr, t.name))
    after = run(model, feeds)
    for orig, dup in result.outputs.items():
        np.testing.assert_array_equal(after[orig], before[orig])
        assert not np.array_equal(after[dup], before[dup])


@pytest.mark.parametrize("name", list(MODELS))
def test_shared_copy_reads_original_weights(name):
    outputs, _ = MODELS[name]
    model = build(name)
    result = copy(model, outputs, weights=Weights.SHARED)
    feeds = random_feeds(model)
    before = run(model, feeds)
    for t in model.graph.initializer:
        arr = numpy_helper.to_array(t)
        if arr.dtype == np.float32:
            t.CopyFrom(numpy_helper.from_array(arr * 2 + 1, t.name))
    after = run(model, feeds)
    for orig, dup in result.outputs.items():
        np.testing.assert_array_equal(after[dup], after[orig])
        assert not np.array_equal(after[orig], before[orig])


def test_tied_weights_stay_tied_in_the_copy():
    model = builders.tied_weights()
    result = copy(model, ["y"])
    assert result.initializers == {"W": "copy/W"}
    reads = [n.input[1] for n in model.graph.node if n.name.startswith("copy/mm")]
    assert reads == ["copy/W", "copy/W"]


def test_if_bodies_are_renamed_and_captures_mapped():
    model = builders.if_capture()
    copy(model, ["z"], prefix="twin/")
    (branch,) = [n for n in model.graph.node if n.name == "twin/branch"]
    then_g = next(a.g for a in branch.attribute if a.name == "then_branch")
    (inner,) = then_g.node
    assert inner.name == "twin/then_mul"
    assert list(inner.input) == ["twin/a", "twin/W"]
    assert list(inner.output) == ["twin/t"] and then_g.output[0].name == "twin/t"
    # the original branch is untouched
    (orig,) = [n for n in model.graph.node if n.name == "branch"]
    assert list(next(a.g for a in orig.attribute if a.name == "then_branch").node[0].input) == ["a", "W"]


def test_if_bodies_under_shared_weights_read_original_weight():
    model = builders.if_capture()
    copy(model, ["z"], weights="shared")
    (branch,) = [n for n in model.graph.node if n.name == "copy/branch"]
    else_g = next(a.g for a in branch.attribute if a.name == "else_branch")
    assert list(else_g.node[0].input) == ["copy/a", "W"]


def test_loop_body_inputs_renamed():
    model = builders.loop_capture()
    copy(model, ["z"])
    (loop,) = [n for n in model.graph.node if n.name == "copy/loop"]
    body = loop.attribute[0].g
    assert [i.name for i in body.input] == ["copy/iter", "copy/cond_in", "copy/acc"]
    assert [o.name for o in body.output] == ["copy/cond_out", "copy/acc_out"]
    assert list(loop.input) == ["copy/trips", "copy/true", "x"]  # graph input x is shared


def test_local_function_is_shared():
    model = builders.local_function()
    result = copy(model, ["y"])
    assert [f.name for f in model.functions] == ["Affine"]
    copied = [n for n in model.graph.node if n.name in result.nodes.values()]
    assert sum(n.op_type == "Affine" and n.domain == "local" for n in copied) == 2


def test_init_as_input_copy_is_listed_as_input():
    model = builders.init_as_input()
    copy(model, ["y"])
    assert [i.name for i in model.graph.input] == ["x", "W", "copy/W"]
    assert model.ir_version == 3


def _constant_model() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Constant", [], ["c"], name="const",
                         value=numpy_helper.from_array(np.array([1.0, 2.0], np.float32))),
        helper.make_node("Mul", ["x", "c"], ["y"], name="mul"),
    ]
    graph = helper.make_graph(nodes, "const", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize(("weights", "copied"), [(Weights.INDEPENDENT, ["const", "mul"]),
                                                 (Weights.SHARED, ["mul"])])
def test_constant_nodes_count_as_weights(weights, copied):
    model = _constant_model()
    result = copy(model, ["y"], weights=weights)
    assert list(result.nodes) == copied
    (mul,) = [n for n in model.graph.node if n.name == "copy/mul"]
    assert mul.input[1] == ("copy/c" if weights is Weights.INDEPENDENT else "c")
    got = run(model, {"x": np.array([3.0, 4.0], np.float32)})
    np.testing.assert_array_equal(got["copy/y"], got["y"])


def test_unnamed_nodes_get_names():
    model = _constant_model()
    for n in model.graph.node:
        n.name = ""
    result = copy(model, ["y"])
    names = [n.name for n in model.graph.node]
    assert all(names)
    for orig, dup in result.nodes.items():
        assert orig in names and dup in names


def test_replace_inputs_reads_the_replacement():
    model = builders.tiny_cnn()
    result = copy(model, ["logits"], replace_inputs={"act": "side_out"})
    assert set(result.nodes) == {"pool", "flatten", "fc"}  # conv and relu are not copied
    (pool,) = [n for n in model.graph.node if n.name == "copy/pool"]
    assert list(pool.input) == ["side_out"]
    onnx.checker.check_model(model, full_check=True)
    got = run(model, random_feeds(model))
    w = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    expected = got["side_out"].mean(axis=(2, 3)) @ w["copy/fc.weight"].T + w["copy/fc.bias"]
    np.testing.assert_allclose(got["copy/logits"], expected, rtol=1e-5, atol=1e-6)
    assert not np.allclose(got["copy/logits"], got["logits"])
    assert rewrites(model)[-1]["replace_inputs"] == {"act": "side_out"}


def test_replace_inputs_dtype_mismatch_refused():
    model = builders.loop_capture()
    before = model.SerializeToString(deterministic=True)
    with pytest.raises(RewriteError, match="same dtype"):
        copy(model, ["z"], replace_inputs={"b": "trips"})
    assert model.SerializeToString(deterministic=True) == before


@pytest.mark.parametrize(("kwargs", "error", "text"), [
    ({"outputs": ["logit"]}, NotFoundError, "did you mean 'logits'"),
    ({"outputs": ["logits"], "replace_inputs": {"actt": "side_out"}}, NotFoundError, "did you mean"),
    ({"outputs": ["logits"], "replace_inputs": {"side_out": "act"}}, UsageError, "not on the path"),
    ({"outputs": ["logits"], "weights": "deep"}, UsageError, "not a weights mode"),
    ({"outputs": ["x"]}, UsageError, "graph input"),
    ({"outputs": ["act"], "replace_inputs": {"act": "side_out"}}, UsageError, "nothing to copy"),
    ({"outputs": []}, UsageError, "at least one output"),
])
def test_errors_leave_model_unchanged(kwargs, error, text):
    model = builders.tiny_cnn()
    before = model.SerializeToString(deterministic=True)
    outputs = kwargs.pop("outputs")
    with pytest.raises(error, match=text):
        copy(model, outputs, **kwargs)
    assert model.SerializeToString(deterministic=True) == before


def test_deterministic_and_prefix_collisions():
    a, b = builders.if_capture(), builders.if_capture()
    for m in (a, b):
        copy(m, ["z"])
        copy(m, ["z"])  # second copy: names collide with the first and get suffixes
    assert a.SerializeToString(deterministic=True) == b.SerializeToString(deterministic=True)
    assert "copy/z__1" in [o.name for o in a.graph.output]
    onnx.checker.check_model(a, full_check=True)


def test_value_info_copied_under_new_names():
    model = builders.tiny_cnn()
    model.graph.value_info.append(helper.make_tensor_value_info("pooled", TensorProto.FLOAT, [1, 4, 1, 1]))
    result = copy(model, ["logits"])
    vis = {vi.name for vi in model.graph.value_info}
    assert {"pooled", "copy/pooled", "copy/act"} <= vis  # act was typed as a graph output
    assert result.tensors["pooled"] == "copy/pooled"
    assert rewrites(model)[-1]["op"] == "copy"


def test_external_data_copied_as_references(tmp_path):
    from onnx.external_data_helper import convert_model_to_external_data

    src = builders.tiny_cnn()
    convert_model_to_external_data(src, all_tensors_to_one_file=True, location="w.bin",
                                   size_threshold=0)
    onnx.save(src, str(tmp_path / "m.onnx"))
    model = io.load(tmp_path / "m.onnx")
    result = copy(model, ["logits"])
    inits = {t.name: t for t in model.proto.graph.initializer}
    for orig, dup in result.initializers.items():
        assert inits[dup].data_location == TensorProto.EXTERNAL
        assert list(inits[dup].external_data) == list(inits[orig].external_data)
    (tmp_path / "out").mkdir()
    out = io.save(model, tmp_path / "out" / "twin.onnx")
    onnx.checker.check_model(str(out), full_check=True)
    s = session(str(out))
    x = random_feeds(model.proto)
    got = dict(zip([o.name for o in s.get_outputs()], s.run(None, x), strict=True))
    np.testing.assert_array_equal(got["copy/logits"], got["logits"])


def test_copy_of_output_also_consumed_inside():
    model = builders.tiny_cnn()
    result = copy(model, ["act", "logits"], weights=Weights.SHARED)
    assert [o.name for o in model.graph.output][-2:] == ["copy/act", "copy/logits"]
    (pool,) = [n for n in model.graph.node if n.name == "copy/pool"]
    assert list(pool.input) == ["copy/act"]
    onnx.checker.check_model(model, full_check=True)
    got = run(model, random_feeds(model))
    for orig, dup in result.outputs.items():
        np.testing.assert_array_equal(got[dup], got[orig])


def test_replace_inputs_reaches_captures_inside_bodies():
    model = builders.if_capture()
    copy(model, ["z"], replace_inputs={"a": "x"})
    (branch,) = [n for n in model.graph.node if n.name == "copy/branch"]
    then_g = next(a.g for a in branch.attribute if a.name == "then_branch")
    assert list(then_g.node[0].input) == ["x", "copy/W"]
    onnx.checker.check_model(model, full_check=True)
    x = np.array([0.5, -1.0, 2.0], np.float32)
    got = run(model, {"x": x})
    w = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}["copy/W"]
    y = x * w if x.sum() > 0 else x - w
    np.testing.assert_array_equal(got["copy/z"], y + x)


def _split_dropout() -> onnx.ModelProto:
    """x -> mm -> Split -> {a -> relu -> ra, b} -> add(ra, b) -> Dropout (mask unused: "") -> mul
    (x2) -> y: nodes reading outputs of two-output nodes, and a node with an unnamed output."""
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
             helper.make_node("Split", ["h"], ["a", "b"], name="split", axis=1, num_outputs=2),
             helper.make_node("Relu", ["a"], ["ra"], name="relu"),
             helper.make_node("Add", ["ra", "b"], ["s"], name="add"),
             helper.make_node("Dropout", ["s"], ["d", ""], name="drop"),
             helper.make_node("Mul", ["d", "x2"], ["y"], name="mul")]
    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        nodes, "split_topk",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4]),
         helper.make_tensor_value_info("x2", TensorProto.FLOAT, [2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])],
        [numpy_helper.from_array(rng.standard_normal((4, 4)).astype(np.float32), "W")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)


@pytest.mark.parametrize("weights", list(Weights), ids=str)
def test_copy_reads_multi_output_nodes_and_keeps_unnamed_outputs(weights, tmp_path):
    """The copy's inputs are renamed from the int dataflow graph (a chain without bodies): reads
    of a two-output node's outputs and an unused optional output still come out right, whether
    the model comes from load (its int graph handed over) or is a bare proto."""
    path = tmp_path / "m.onnx"
    onnx.save(_split_dropout(), path)
    for model in (io.load(path), _split_dropout()):
        with Session(model, loaded=True):  # load's int graph rides along (as in the CLI)
            copy(model, ["y"], weights=weights, prefix="twin/")
        proto = model.proto if isinstance(model, io.Model) else model
        by_name = {n.name: n for n in proto.graph.node}
        assert list(by_name["twin/add"].input) == ["twin/ra", "twin/b"]
        assert list(by_name["twin/split"].output) == ["twin/a", "twin/b"]
        assert list(by_name["twin/drop"].output) == ["twin/d", ""]
        assert list(by_name["twin/mul"].input) == ["twin/d", "x2"]
        assert list(by_name["twin/mm"].input) == ["x", "W" if weights is Weights.SHARED else "twin/W"]
        onnx.checker.check_model(proto, full_check=True)
        got = run(proto, random_feeds(proto))
        np.testing.assert_array_equal(got["twin/y"], got["y"])


def test_replace_inputs_of_a_graph_input_and_an_initializer():
    model = _split_dropout()
    copy(model, ["y"], prefix="twin/", replace_inputs={"x2": "ra", "W": "W"})
    by_name = {n.name: n for n in model.graph.node}
    assert list(by_name["twin/mul"].input) == ["twin/d", "ra"]  # B itself, not its copy
    assert list(by_name["twin/mm"].input) == ["x", "W"]
    assert "twin/W" not in {t.name for t in model.graph.initializer}
    onnx.checker.check_model(model, full_check=True)
