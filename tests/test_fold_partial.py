"""``fold`` of a partly dynamic shape (issue 30): a Gather or Slice of ``Shape(x)`` that selects
only static dims of ``x`` folds though ``x`` has a dynamic batch (torch exports read
``x.shape[1]`` back so; onnx-graphsurgeon and onnxsim fold these); what selects the dynamic dim
stays computed; a Shape nothing reads any more goes; onnxruntime proves it at two batch sizes."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsurgeon import load
from onnxsurgeon.surgery import fold
from onnxsurgeon.verify.folding import ort_evaluator

from .cli_helpers import cli_main
from .conftest import run

F = TensorProto.FLOAT


def _i64(name: str, value: object) -> TensorProto:
    return numpy_helper.from_array(np.asarray(value, dtype=np.int64), name)


def partly_dynamic() -> onnx.ModelProto:
    """x[N,3,4,5]: ``c = Gather(Shape(x), Constant 1)`` (3), ``hw = Slice(Shape(x), 2, 4)``
    ([4, 5]), both static -> a Reshape to [-1, 3, 20]; ``n = Gather(Shape(x), 0)`` is the dynamic
    batch (kept) and feeds an output through Expand; a second Shape read by an Identity output
    stays (read by a node that does not fold)."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Constant", [], ["one"], name="one", value=_i64("v1", 1)),
        helper.make_node("Gather", ["s", "one"], ["c"], name="gather_c", axis=0),
        helper.make_node("Slice", ["s", "two", "four"], ["hw"], name="slice_hw"),
        helper.make_node("ReduceProd", ["hw"], ["hw1"], name="prod", keepdims=1),
        helper.make_node("Unsqueeze", ["c", "ax0"], ["cu"], name="unsq"),
        helper.make_node("Concat", ["m1", "cu", "hw1"], ["shp"], name="concat", axis=0),
        helper.make_node("Reshape", ["x", "shp"], ["y"], name="reshape"),
        helper.make_node("Gather", ["s", "zero"], ["n"], name="gather_n", axis=0),
        helper.make_node("Unsqueeze", ["n", "ax0"], ["nu"], name="unsq_n"),
        helper.make_node("Concat", ["nu", "one1"], ["eshp"], name="concat_n", axis=0),
        helper.make_node("Expand", ["b", "eshp"], ["z"], name="expand"),
        helper.make_node("Shape", ["x"], ["s2"], name="shape2"),
        helper.make_node("Identity", ["s2"], ["dims"], name="ident"),
    ]
    inits = [_i64("two", [2]), _i64("four", [4]), _i64("ax0", [0]), _i64("m1", [-1]),
             _i64("zero", 0), _i64("one1", [1]), numpy_helper.from_array(
                 np.array([[0.5]], np.float32), "b")]
    graph = helper.make_graph(
        nodes, "partly", [helper.make_tensor_value_info("x", F, ["N", 3, 4, 5])],
        [helper.make_tensor_value_info("y", F, ["N", 3, 20]),
         helper.make_tensor_value_info("z", F, ["N", 1]),
         helper.make_tensor_value_info("dims", TensorProto.INT64, [4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_static_parts_of_a_dynamic_shape_fold_and_the_dynamic_part_stays():
    proto = partly_dynamic()
    m = load_proto(proto)
    result = fold(m, evaluate=ort_evaluator)
    nodes = {n.name: n for n in m.proto.graph.node}
    # the static channel and spatial dims folded, with what only they fed
    assert {"gather_c", "slice_hw", "prod", "unsq", "concat", "one"}.isdisjoint(nodes)
    assert "shp" in result.folded
    shp = {t.name: numpy_helper.to_array(t) for t in m.proto.graph.initializer}["shp"]
    assert shp.tolist() == [-1, 3, 20]
    # the batch is dynamic: its Gather and what reads it stay, and so does their Shape
    assert {"gather_n", "unsq_n", "concat_n", "expand", "shape"} <= set(nodes)
    # a Shape read by a node that does not fold stays (the second Shape of x merged into the
    # first: fold's common-subexpression elimination)
    assert "ident" in nodes and nodes["ident"].input[:] == ["s"] and "shape2" not in nodes
    assert ("duplicate", ["shape2"], "shape") in [(f["rule"], f["nodes"], f["into"])
                                                  for f in result.fused]
    for batch in (1, 3):
        x = np.random.default_rng(batch).standard_normal((batch, 3, 4, 5)).astype(np.float32)
        want, got = run(proto, {"x": x}), run(m.proto, {"x": x})
        assert all(np.array_equal(want[k], got[k]) for k in want)


def test_a_gather_of_the_dynamic_dim_alone_folds_nothing():
    g = helper.make_graph(
        [helper.make_node("Shape", ["x"], ["s"], name="shape"),
         helper.make_node("Gather", ["s", "i"], ["n"], name="gather")],
        "dyn", [helper.make_tensor_value_info("x", F, ["N", 3])],
        [helper.make_tensor_value_info("n", TensorProto.INT64, [])], [_i64("i", -2)])
    m = load_proto(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    before = m.proto.graph.SerializeToString()
    result = fold(m, evaluate=ort_evaluator, fuse=False)
    assert result.folded == () and result.removed == ()
    assert m.proto.graph.SerializeToString() == before  # the record is all that is added


def load_proto(proto: onnx.ModelProto):  # type: ignore[no-untyped-def]
    """The model as load returns it (validated, indexed), from a proto."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "m.onnx"
        onnx.save(proto, path)
        return load(path)


@pytest.fixture(scope="module")
def torch_dynamic_batch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A torch export (TorchScript, its own constant folding off) with a dynamic batch whose
    forward reads ``y.shape[1:]`` back: Shape -> Gather chains of static and dynamic dims."""
    torch = pytest.importorskip("torch")

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

        def forward(self, x):  # type: ignore[no-untyped-def]
            y = torch.relu(self.conv(x))
            flat = y.reshape(y.shape[0], y.shape[1] * y.shape[2] * y.shape[3])
            return flat.view(-1, y.shape[1], y.shape[2] * y.shape[3]).mean(-1)

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("torch_dyn") / "net.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Net().eval(), (torch.randn(2, 3, 8, 8),), str(path), dynamo=False,
                          do_constant_folding=False, input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}}, opset_version=17)
    return path


@pytest.mark.torch
def test_fold_of_a_dynamic_batch_torch_export_folds_its_static_dims(torch_dynamic_batch,
                                                                     tmp_path, capsys):
    src = torch_dynamic_batch
    before = onnx.load(src)
    gathers = sum(n.op_type == "Gather" for n in before.graph.node)
    assert gathers >= 4, "the export should read the shape back dim by dim"
    out = tmp_path / "folded.onnx"
    code, stdout, err = cli_main(capsys, "fold", src, "-o", out, "--verify", "--json")
    assert code == 0, stdout + err
    assert json.loads(stdout)["verify"]["verdict"] == "pass"
    after = onnx.load(out)
    left = [n for n in after.graph.node if n.op_type == "Gather"]
    assert len(left) == 1, [n.name for n in left]  # only the batch (dim 0) is still read
    assert after.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    for batch in (1, 5):  # dynamic still: the folded model runs at any batch, as the original
        x = np.random.default_rng(batch).standard_normal((batch, 3, 8, 8)).astype(np.float32)
        want, got = run(before, {"x": x}), run(after, {"x": x})
        assert np.array_equal(want["y"], got["y"])


def test_adds_of_zeros_over_a_dynamic_batch_go_and_broadcasting_ones_stay():
    """x[N,S,4] + zeros[4] (a zero bias, as a torch export with a dynamic batch has) passes x
    through: it goes; zeros[2,1,4] (broadcasts the symbolic batch to 2) and zeros[3] against a dim 1
    (broadcasts it to 3) stay."""
    nodes = [helper.make_node("Add", ["bias0", "x"], ["a"], name="bias_add"),
             helper.make_node("Add", ["a", "zeros_2x4"], ["b"], name="widens_batch"),
             helper.make_node("Add", ["u", "zeros_3"], ["c"], name="widens_one")]
    graph = helper.make_graph(
        nodes, "zeros", [helper.make_tensor_value_info("x", F, ["N", "S", 4]),
                         helper.make_tensor_value_info("u", F, ["N", 1])],
        [helper.make_tensor_value_info("b", F, None), helper.make_tensor_value_info("c", F, None)],
        [numpy_helper.from_array(np.zeros(4, np.float32), "bias0"),
         numpy_helper.from_array(np.zeros((2, 1, 4), np.float32), "zeros_2x4"),
         numpy_helper.from_array(np.zeros(3, np.float32), "zeros_3")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    m = load_proto(proto)
    result = fold(m, evaluate=ort_evaluator)
    assert result.removed == ("bias_add",)
    assert [n.name for n in m.proto.graph.node] == ["widens_batch", "widens_one"]
    assert list(m.proto.graph.node[0].input) == ["x", "zeros_2x4"]
    rng = np.random.default_rng(0)
    for n, s in ((1, 5), (2, 3)):
        feeds = {"x": rng.standard_normal((n, s, 4)).astype(np.float32),
                 "u": rng.standard_normal((n, 1)).astype(np.float32)}
        want, got = run(proto, feeds), run(m.proto, feeds)
        assert all(np.array_equal(want[k], got[k]) for k in want)
