"""bypass: a Dropout -> Identity -> Cast chain removed (structure, numbers equal to the original
with those nodes replaced by Identity, graph outputs keep their names), reads in nested bodies,
refusals that leave the model byte-identical, --verify and the CLI."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsurgeon.errors import NotFoundError, RewriteError, UsageError
from onnxsurgeon.record import rewrites
from onnxsurgeon.surgery import bypass
from onnxsurgeon.verify import verify_log
from tests import builders as B
from tests.cli_helpers import assert_refused, cli
from tests.rewire_helpers import clone, rand, run, serialized

F = TensorProto.FLOAT
X = {"x": rand((2, 4), 0)}


def chain_model(*, output_at_end: bool = True) -> onnx.ModelProto:
    """x[2,4] -> MatMul(W) -> h -> Dropout -> d -> Identity -> i -> Cast(float) -> c -> Relu -> y;
    an If reads ``i`` in its then-branch; ``c`` is also a graph output when ``output_at_end``."""
    then_g = helper.make_graph([helper.make_node("Neg", ["i"], ["t"], name="then_neg")], "then",
                               [], [helper.make_tensor_value_info("t", F, [2, 4])])
    else_g = helper.make_graph([helper.make_node("Abs", ["x"], ["e"], name="else_abs")], "else",
                               [], [helper.make_tensor_value_info("e", F, [2, 4])])
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
        helper.make_node("Dropout", ["h"], ["d", "mask"], name="drop"),
        helper.make_node("Identity", ["d"], ["i"], name="ident"),
        helper.make_node("Cast", ["i"], ["c"], name="cast", to=F),
        helper.make_node("Relu", ["c"], ["y"], name="relu"),
        helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["cond"], name="gt"),
        helper.make_node("If", ["cond"], ["z"], name="branch", then_branch=then_g, else_branch=else_g),
    ]
    outputs = [helper.make_tensor_value_info("y", F, [2, 4]), helper.make_tensor_value_info("z", F, [2, 4])]
    if output_at_end:
        outputs.append(helper.make_tensor_value_info("c", F, [2, 4]))
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", F, [2, 4])], outputs,
                          [numpy_helper.from_array(rand((4, 4), 1), "W"),
                           numpy_helper.from_array(np.float32(0), "zero")],
                          value_info=[helper.make_tensor_value_info("d", F, [2, 4])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def _names(model: onnx.ModelProto) -> list[str]:
    return [n.name for n in model.graph.node]


def test_bypass_a_dropout_identity_cast_chain():
    orig = chain_model()
    model = clone(orig)
    r = bypass(model, ["drop", "ident", "cast"])
    assert r.removed == ["drop", "ident", "cast"]
    assert r.rerouted == ["relu", "branch"] and r.rerouted_outputs == []
    assert _names(model) == ["mm", "relu", "sum", "gt", "branch"]
    # the graph output c keeps its name: MatMul now writes it and every reader reads it
    assert list(model.graph.node[0].output) == ["c"] and list(model.graph.node[1].input) == ["c"]
    then_g = next(a.g for a in model.graph.node[4].attribute if a.name == "then_branch")
    assert list(then_g.node[0].input) == ["c"]
    assert [o.name for o in model.graph.output] == ["y", "z", "c"]
    assert "d" not in {vi.name for vi in model.graph.value_info}
    onnx.checker.check_model(model, full_check=True)
    for x in (X["x"], -np.abs(X["x"])):  # both If branches
        before, after = run(orig, {"x": x}), run(model, {"x": x})
        for name in ("y", "z", "c"):
            assert np.array_equal(before[name], after[name]), name
    assert rewrites(model)[-1] == {"op": "bypass", "removed": ["drop", "ident", "cast"],
                                   "input": 0, "rerouted": ["relu", "branch"],
                                   "rerouted_outputs": []}
    assert verify_log(orig, model).ok


def test_bypass_one_node_in_the_middle():
    orig = chain_model(output_at_end=False)
    model = clone(orig)
    r = bypass(model, "ident")
    assert r.rerouted == ["cast", "branch"]
    assert list(model.graph.node[2].input) == ["d"]
    assert verify_log(orig, model).ok


def test_a_tensor_name_selects_its_producer():
    orig = chain_model(output_at_end=False)
    model = clone(orig)
    assert bypass(model, "i:0").removed == ["ident"]  # TF-style name of ident's output
    assert "ident" not in _names(model)
    assert verify_log(orig, model).ok


def test_unnamed_nodes_are_labelled_and_verified():
    orig = chain_model(output_at_end=False)
    orig.graph.node[2].name = ""  # the Identity
    model = clone(orig)
    assert bypass(model, "i").removed == ["Identity#2"]
    assert verify_log(orig, model).ok


def test_output_fed_by_a_graph_input_is_rerouted_to_it():
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"], name="id")], "g",
                          [helper.make_tensor_value_info("x", F, [3])],
                          [helper.make_tensor_value_info("y", F, [3])])
    orig = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model = clone(orig)
    r = bypass(model, "id")
    assert r.rerouted_outputs == ["y"] and [o.name for o in model.graph.output] == ["x"]
    assert not model.graph.node
    assert verify_log(orig, model).ok


def test_bypass_input_k_of_an_add_with_zeros_broadcast():
    """Add(h[2,4], zeros[4]) -> a -> Mul(a, s[2,4]): bypass to input 0 (same shape)."""
    nodes = [helper.make_node("Add", ["x", "zeros"], ["a"], name="add0"),
             helper.make_node("Mul", ["a", "s"], ["y"], name="mul")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [2, 4])],
                          [helper.make_tensor_value_info("y", F, [2, 4])],
                          [numpy_helper.from_array(np.zeros(4, np.float32), "zeros"),
                           numpy_helper.from_array(rand((2, 4), 3), "s")])
    orig = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model = clone(orig)
    bypass(model, "add0")
    assert np.array_equal(run(model, X)["y"], run(orig, X)["y"])
    # input 1 ([4]) only broadcasts to [2,4]; Mul with s[2,4] keeps the shape, so it is allowed
    model2 = clone(orig)
    bypass(model2, "add0", input=1)
    assert list(model2.graph.node[0].input) == ["zeros", "s"]
    assert run(model2, X)["y"].shape == (2, 4)


@pytest.mark.parametrize("nodes, kwargs, exc, needle", [
    (["cst"], {}, RewriteError, "is int64 but input 0 'h' is float"),
    (["drop2"], {}, RewriteError, "output 'mask2' is used"),
    (["flat"], {}, RewriteError, "bypass only shape-preserving nodes"),
    (["dropp"], {}, NotFoundError, "did you mean 'drop2'"),
    (["drop2"], {"input": 3}, UsageError, "has no input 3"),
], ids=["dtype", "mask-used", "shape", "did-you-mean", "no-input"])
def test_refusals_leave_the_model_unchanged(nodes, kwargs, exc, needle):
    nodes_ = [
        helper.make_node("Relu", ["x"], ["h"], name="relu"),
        helper.make_node("Cast", ["h"], ["hi"], name="cst", to=TensorProto.INT64),
        helper.make_node("Dropout", ["h"], ["d2", "mask2"], name="drop2"),
        helper.make_node("Flatten", ["h"], ["f"], name="flat", axis=0),
    ]
    g = helper.make_graph(nodes_, "g", [helper.make_tensor_value_info("x", F, [2, 4])],
                          [helper.make_tensor_value_info("hi", TensorProto.INT64, [2, 4]),
                           helper.make_tensor_value_info("mask2", TensorProto.BOOL, [2, 4]),
                           helper.make_tensor_value_info("d2", F, [2, 4]),
                           helper.make_tensor_value_info("f", F, [1, 8])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    before = serialized(model)
    with pytest.raises(exc, match=needle):
        bypass(model, nodes, **kwargs)
    assert serialized(model) == before


def test_verify_catches_a_bypass_that_lies():
    orig = chain_model()
    model = clone(orig)
    bypass(model, ["drop", "ident", "cast"])
    model.graph.node[1].op_type = "Sigmoid"  # relu -> sigmoid: not what the record says
    assert not verify_log(orig, model).ok


def test_bypass_of_a_value_changing_node_is_allowed_and_proven():
    """Relu keeps dtype and shape, so it *can* be bypassed: the outputs move (verify proves the
    model equals the original with Relu replaced by Identity)."""
    orig = B.tiny_cnn()
    model = clone(orig)
    r = bypass(model, "relu5")
    assert r.rerouted == ["pool", "side"] and [o.name for o in model.graph.output][1] == "act"
    assert verify_log(orig, model).ok
    assert not np.array_equal(run(model, {"x": rand((1, 3, 8, 8), 0)})["logits"],
                              run(orig, {"x": rand((1, 3, 8, 8), 0)})["logits"])


# ------------------------------------------------------------------------------------ CLI
def test_bypass_cli_json_verify(tmp_path):
    src = tmp_path / "chain.onnx"
    src.write_bytes(chain_model().SerializeToString())
    out = tmp_path / "out.onnx"
    proc = cli("bypass", src, "-o", out, "--node", "drop,ident", "--node", "cast", "--json", "--verify")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert {k: data[k] for k in ("removed", "rerouted", "rerouted_outputs")} == {
        "removed": ["drop", "ident", "cast"], "rerouted": ["relu", "branch"], "rerouted_outputs": []}
    assert data["schema"] == "onnxsurgeon.bypass/1" and data["verify"]["ok"] is True
    assert _names(onnx.load(str(out))) == ["mm", "relu", "sum", "gt", "branch"]


@pytest.mark.parametrize("args, needle", [
    (["--node", "dropp"], "did you mean 'drop'"),
    (["--node", "mm", "--input", "1"], "shape"),
    (["--node", "drop", "--input", "2"], "no input 2"),
], ids=["typo", "shape", "input"])
def test_bypass_cli_bad_input(tmp_path, args, needle):
    src = tmp_path / "chain.onnx"
    src.write_bytes(chain_model().SerializeToString())
    out = tmp_path / "out.onnx"
    assert_refused(["bypass", src, "-o", out, *args], needle, inputs=[src], out=out)
