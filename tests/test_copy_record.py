"""The copy record stays small (a prefix rule plus the names that broke it) and still tells
``verify --rewrite-log`` everything: which node copies which, and where a copy first differs."""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxsurgeon.index import GraphIndex
from onnxsurgeon.record import rewrites
from onnxsurgeon.surgery import Weights, copy
from onnxsurgeon.surgery.copy import copied_names
from onnxsurgeon.verify import verify_log


def chain_distinct(blocks: int, width: int = 4) -> onnx.ModelProto:
    """MatMul -> Add -> Relu blocks, each with its own weight and bias (2 initializers a block)."""
    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    for i in range(blocks):
        out = "y" if i == blocks - 1 else f"relu{i}"
        inits += [numpy_helper.from_array(rng.standard_normal((width, width)).astype(np.float32), f"W{i}"),
                  numpy_helper.from_array(rng.standard_normal(width).astype(np.float32), f"B{i}")]
        nodes += [helper.make_node("MatMul", [prev, f"W{i}"], [f"mm{i}"], name=f"MatMul_{i}"),
                  helper.make_node("Add", [f"mm{i}", f"B{i}"], [f"add{i}"], name=f"Add_{i}"),
                  helper.make_node("Relu", [f"add{i}"], [out], name=f"Relu_{i}")]
        prev = out
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _record_size(blocks: int) -> tuple[int, dict]:
    model = chain_distinct(blocks)
    copy(model, ["y"], weights=Weights.INDEPENDENT, prefix="twin/")
    record = rewrites(model)[-1]
    return len(json.dumps(record)), record


def test_record_size_does_not_grow_with_the_copied_names():
    small, rec_small = _record_size(5)
    large, rec_large = _record_size(400)
    assert rec_large["copied"] == {"nodes": 1200, "initializers": 800}
    assert rec_large["nodes"] == {} and rec_large["initializers"] == {}
    assert large - small <= 6  # only the digits of the counts differ


def test_recomputed_maps_equal_the_copy_result_and_verify_passes():
    original = chain_distinct(6)
    model = onnx.ModelProto()
    model.CopyFrom(original)
    result = copy(model, ["y"], weights=Weights.INDEPENDENT, prefix="twin/")
    nodes, inits = copied_names(GraphIndex(model), rewrites(model)[-1])
    assert nodes == result.nodes and inits == result.initializers
    report = verify_log(original, model)
    assert report.ok, report.to_text()


def test_a_name_collision_is_recorded_and_located_by_verify():
    original = chain_distinct(4)
    original.graph.value_info.append(  # takes the name the copy of MatMul_2 would get
        helper.make_tensor_value_info("twin/MatMul_2", TensorProto.FLOAT, [1, 4]))
    model = onnx.ModelProto()
    model.CopyFrom(original)
    result = copy(model, ["y"], prefix="twin/")
    record = rewrites(model)[-1]
    assert record["nodes"] == {"MatMul_2": "twin/MatMul_2__1"} == {
        k: v for k, v in result.nodes.items() if v != "twin/" + k}
    assert copied_names(GraphIndex(model), record)[0] == result.nodes
    assert verify_log(original, model).ok
    twin = next(t for t in model.graph.initializer if t.name == "twin/W2")  # perturb block 2
    twin.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(twin) * np.float32(1.01), "twin/W2"))
    report = verify_log(original, model)
    assert not report.ok
    assert report.divergence is not None and report.divergence.node == "twin/MatMul_2__1"


def test_records_with_full_maps_still_verify():
    """A record written before the prefix rule (full maps, no prefix) is read as it is."""
    original = chain_distinct(3)
    model = onnx.ModelProto()
    model.CopyFrom(original)
    result = copy(model, ["y"], prefix="twin/")
    for prop in model.metadata_props:
        if prop.key == "onnxsurgeon.rewrites":
            old = json.loads(prop.value)
            old[-1] = {"op": "copy", "outputs": result.outputs, "initializers": result.initializers,
                       "nodes": result.nodes, "weights": "independent", "replace_inputs": {}}
            prop.value = json.dumps(old)
    assert copied_names(GraphIndex(model), rewrites(model)[-1])[0] == result.nodes
    assert verify_log(original, model).ok
