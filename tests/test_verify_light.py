"""verify's light loading: heavy inline weights stay in the model file (issue 29)."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsurgeon.external import is_external, read_tensor
from onnxsurgeon.io import load
from onnxsurgeon.verify import compare
from onnxsurgeon.verify import light as light_mod
from onnxsurgeon.verify.light import load_light

WIDTH = 48  # 48x48 float32 = 9216 bytes: heavy (>= 4096)


def _chain(scale_layer: int | None = None) -> onnx.ModelProto:
    """x -> (MatMul W_k -> Relu) x 4 -> y, a small bias inline; W_scale_layer perturbed."""
    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    for k in range(4):
        w = rng.standard_normal((WIDTH, WIDTH)).astype(np.float32) / 7
        if k == scale_layer:
            w = w * 1.01 + 1e-3
        inits.append(numpy_helper.from_array(w, f"W{k}"))
        nodes.append(helper.make_node("MatMul", [prev, f"W{k}"], [f"mm{k}"], name=f"mm{k}"))
        nodes.append(helper.make_node("Relu", [f"mm{k}"], [f"r{k}"], name=f"relu{k}"))
        prev = f"r{k}"
    inits.append(numpy_helper.from_array(np.full((WIDTH,), 0.5, np.float32), "b"))
    nodes.append(helper.make_node("Add", [prev, "b"], ["y"], name="bias"))
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                            [1, WIDTH])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, WIDTH])],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.fixture
def light_everything(monkeypatch):
    monkeypatch.setattr(light_mod, "LIGHT_MIN_BYTES", 1)


def test_light_load_leaves_heavy_weights_in_the_file(tmp_path, light_everything):
    path = tmp_path / "m.onnx"
    onnx.save(_chain(), str(path))
    full = onnx.load(str(path))
    model = load_light(path)
    assert model.proto.ByteSize() < full.ByteSize() // 4
    inits = {t.name: t for t in model.proto.graph.initializer}
    for t in full.graph.initializer:
        light = inits[t.name]
        heavy = len(t.raw_data) >= light_mod.HEAVY_RAW_BYTES
        assert is_external(light) == heavy
        if heavy:
            assert {e.key: e.value for e in light.external_data}["location"] == "m.onnx"
        assert np.array_equal(read_tensor(light, model.base_dir), numpy_helper.to_array(t))
    assert [n.name for n in model.proto.graph.node] == [n.name for n in full.graph.node]


def test_compare_of_light_models_reports_what_full_loads_report(tmp_path, light_everything,
                                                                 monkeypatch):
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    onnx.save(_chain(), str(a))
    onnx.save(_chain(scale_layer=2), str(b))
    light = compare(a, b)
    full = compare(load(a), load(b))
    assert not light.ok and light.divergence is not None
    assert light.divergence.node == "mm2"
    assert light.divergence.differing_weights == ("W2",)
    assert light.to_json() == full.to_json()
    assert compare(a, a).ok


def test_a_hard_linked_model_file_is_loaded_whole(tmp_path, light_everything):
    path = tmp_path / "m.onnx"
    onnx.save(_chain(), str(path))
    os.link(path, tmp_path / "twin.onnx")  # external data may not name a hard-linked file
    model = load_light(path)
    assert not any(is_external(t) for t in model.proto.graph.initializer)
