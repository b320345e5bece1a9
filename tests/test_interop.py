"""interop: onnx-graphsurgeon Graph and onnx-ir Model in and out, with verbs in between; numbers
checked with onnxruntime, external data kept as references, neither library imported by the core."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto

from onnxsurgeon.interop import from_graphsurgeon, from_onnx_ir, to_graphsurgeon, to_onnx_ir
from onnxsurgeon.io import load, save
from onnxsurgeon.surgery import extract, insert, rename
from onnxsurgeon.verify import verify_log
from tests import builders as B
from tests.rewire_helpers import rand, run

gs = pytest.importorskip("onnx_graphsurgeon")
ir = pytest.importorskip("onnx_ir")

X = {"x": rand((1, 3, 8, 8), 0)}


def test_core_imports_neither_library():
    code = ("import sys, onnxsurgeon, onnxsurgeon.interop, onnxsurgeon.surgery, onnxsurgeon.cli; "
            "assert not {'onnx_graphsurgeon', 'onnx_ir'} & set(sys.modules), sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_graph_built_with_graphsurgeon_takes_an_insert():
    x = gs.Variable("x", dtype=np.float32, shape=(2, 4))
    w = gs.Constant("W", rand((4, 4), 1))
    graph = gs.Graph(inputs=[x], opset=17)
    h = gs.Variable("h", dtype=np.float32, shape=(2, 4))
    y = gs.Variable("y", dtype=np.float32, shape=(2, 4))
    graph.layer(op="MatMul", inputs=[x, w], outputs=[h], name="mm")
    graph.layer(op="Relu", inputs=[h], outputs=[y], name="relu")
    graph.outputs = [y]
    model = from_graphsurgeon(graph)
    original = onnx.ModelProto()
    original.CopyFrom(model.proto)
    r = insert(model, "h", op="l2_normalize", params={"axis": 1})
    xs = rand((2, 4), 2)
    hv = xs @ rand((4, 4), 1)
    want = np.maximum(hv / np.sqrt(np.maximum((hv * hv).sum(1, keepdims=True), 1e-12)), 0)
    np.testing.assert_allclose(run(model.proto, {"x": xs})["y"], want, rtol=1e-5, atol=1e-6)
    assert verify_log(original, model).ok
    # ... and back to graphsurgeon, where the block's nodes are ordinary nodes
    back = to_graphsurgeon(model)
    assert [n.op for n in back.nodes] == ["MatMul", "ReduceSumSquare", "Max", "Sqrt", "Div", "Relu"]
    assert any(t.name == r.processed for t in back.tensors().values())


def test_graphsurgeon_round_trip_around_a_verb():
    graph = to_graphsurgeon(B.tiny_cnn())
    side = next(n for n in graph.nodes if n.name == "side")  # drop a branch the graphsurgeon way
    graph.outputs = [t for t in graph.outputs if t.name != "side_out"]
    graph.nodes.remove(side)
    graph.cleanup().toposort()
    model = from_graphsurgeon(graph)
    rename(model, {"act": "features"})
    out = run(model.proto, X)
    ref = run(B.tiny_cnn(), X)
    assert set(out) == {"logits", "features"}
    assert np.array_equal(out["logits"], ref["logits"]) and np.array_equal(out["features"], ref["act"])


def test_onnx_ir_round_trip_around_a_verb():
    ir_model = to_onnx_ir(B.if_capture())
    assert isinstance(ir_model, ir.Model)
    assert [n.op_type for n in ir_model.graph] == ["Relu", "ReduceSum", "Greater", "If", "Add"]
    model = from_onnx_ir(ir_model)
    extract(model, ["y"])
    back = to_onnx_ir(model)
    assert [o.name for o in back.graph.outputs] == ["y"]
    for x in (np.float32([1, -2, 3]), np.float32([-1, -2, 0.5])):
        want = run(B.if_capture(), {"x": x})["z"] - np.maximum(x, 0)
        np.testing.assert_allclose(run(model.proto, {"x": x})["y"], want, rtol=1e-6)


def test_external_data_stays_external_through_onnx_ir(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    onnx.save(B.tiny_cnn(), str(src / "cnn.onnx"), save_as_external_data=True,
              location="weights.bin", size_threshold=0)
    ir_model = to_onnx_ir(load(src / "cnn.onnx"))
    weight = ir_model.graph.initializers["conv5.weight"].const_value
    assert isinstance(weight, ir.ExternalTensor)
    model = from_onnx_ir(ir_model)
    assert model.base_dir == src
    assert all(t.data_location == TensorProto.EXTERNAL for t in model.proto.graph.initializer)
    insert(model, "act", op="identity")
    out = save(model, tmp_path / "out.onnx")
    np.testing.assert_array_equal(run(onnx.load(str(out)), X)["logits"],
                                  run(B.tiny_cnn(), X)["logits"])


def test_graphsurgeon_external_data_needs_its_folder(tmp_path):
    onnx.save(B.tiny_cnn(), str(tmp_path / "cnn.onnx"), save_as_external_data=True,
              location="w.bin", size_threshold=0)
    graph = to_graphsurgeon(load(tmp_path / "cnn.onnx"))
    from onnxsurgeon.errors import UsageError

    with pytest.raises(UsageError, match="pass base_dir"):
        from_graphsurgeon(graph)
    model = from_graphsurgeon(graph, base_dir=tmp_path)
    out = save(model, tmp_path / "again.onnx")
    np.testing.assert_array_equal(run(onnx.load(str(out)), X)["logits"],
                                  run(B.tiny_cnn(), X)["logits"])


def test_graphsurgeon_round_trip_keeps_metadata_props():
    """The name map and the rewrite log survive to_graphsurgeon -> from_graphsurgeon (issue 26):
    a framework name still resolves and the recorded rename still verifies."""
    from onnxsurgeon.select import resolve, set_name_map

    original = B.tiny_cnn()
    set_name_map(original, {"features:0": "act"})
    original.metadata_props.add(key="custom", value="kept")
    model = onnx.ModelProto()
    model.CopyFrom(original)
    rename(model, {"features:0": "features"})
    before = [(p.key, p.value) for p in model.metadata_props]
    assert len(before) == 3  # the name map, 'custom' and the rewrite log
    back = from_graphsurgeon(to_graphsurgeon(model))
    assert [(p.key, p.value) for p in back.proto.metadata_props] == before
    assert resolve(back.proto, "features:0") == "features"
    assert verify_log(original, back).ok
