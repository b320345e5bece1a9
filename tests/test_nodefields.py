"""One description of a node's edge fields, one pass reading them (onnxsurgeon/nodefields.py,
issue 25): load's validation, the index's int graph and an upkeep reading inserted nodes (a few
at a time, or many through ``Written``) give the same int graph, or all give none, on the same
nodes. The C scan's side is in tests/test_scan.py (it reads the fields it is handed)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsurgeon import scan
from onnxsurgeon.errors import InvalidModelError
from onnxsurgeon.index import GraphIndex, NodeEdges, _build_edges
from onnxsurgeon.nodefields import EDGE_FIELD_NAMES, EDGE_FIELD_NUMBERS
from onnxsurgeon.upkeep import Upkeep
from onnxsurgeon.validate import validate_producers

from . import builders

F = TensorProto.FLOAT
PAD = 70
"""Nodes put before the case's own in the inserted part: past ``upkeep._FEW``, so the upkeep
reads them a whole field at a time (``Written.of`` then ``_read_many``)."""


def _graph(nodes: list[onnx.NodeProto], pad: int) -> onnx.ModelProto:
    """x -> head -> r0 -> ``pad`` Relu nodes -> r{pad} -> ``nodes`` (reading it as "r")."""
    body = [helper.make_node("Identity", ["x"], ["r0"], name="head")]
    body += [helper.make_node("Relu", [f"r{k}"], [f"r{k + 1}"], name=f"pad{k}")
             for k in range(pad)]
    for node in nodes:
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        copy.input[:] = [f"r{pad}" if n == "r" else n for n in copy.input]
        body.append(copy)
    graph = helper.make_graph(body, "g", [helper.make_tensor_value_info("x", F, [2])],
                              [helper.make_tensor_value_info("y", F, None)],
                              [numpy_helper.from_array(np.ones(2, np.float32), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


CASES: dict[str, list[onnx.NodeProto]] = {
    "plain": [helper.make_node("Add", ["r", "w"], ["y"], name="add")],
    "a node's only output is ''": [helper.make_node("Relu", ["r"], [""], name="nothing"),
                                   helper.make_node("Relu", ["r"], ["y"])],
    "an omitted optional input": [helper.make_node("Clip", ["r", "", "w"], ["y"])],
    "a multi-output node omits one": [helper.make_node("Dropout", ["r"], ["y", ""])],
    "two outputs": [helper.make_node("Split", ["r"], ["y", "z"], num_outputs=2)],
    "a custom domain": [helper.make_node("Thing", ["r"], ["y"], domain="com.example")],
    "the ai.onnx domain": [helper.make_node("Relu", ["r"], ["y"], domain="ai.onnx")],
    "attributes, no body": [helper.make_node("LeakyRelu", ["r"], ["y"], alpha=0.5)],
    "an output named like an input": [helper.make_node("Relu", ["r"], ["x"]),
                                      helper.make_node("Relu", ["r"], ["y"])],
    "an output named like a weight": [helper.make_node("Relu", ["r"], ["w"]),
                                      helper.make_node("Relu", ["r"], ["y"])],
    "one output twice": [helper.make_node("Relu", ["r"], ["y"]),
                         helper.make_node("Relu", ["r"], ["y"])],
    "a read of a later node": [helper.make_node("Relu", ["z"], ["y"]),
                               helper.make_node("Relu", ["r"], ["z"])],
    "a read of nothing": [helper.make_node("Relu", ["nowhere"], ["y"])],
    "a body": [helper.make_node(
        "If", ["c"], ["y"],
        then_branch=helper.make_graph([helper.make_node("Identity", ["r"], ["t"])], "then", [],
                                      [helper.make_tensor_value_info("t", F, None)]),
        else_branch=helper.make_graph([helper.make_node("Identity", ["w"], ["e"])], "else", [],
                                      [helper.make_tensor_value_info("e", F, None)])),
        helper.make_node("Constant", [], ["c"], value=helper.make_tensor("v", TensorProto.BOOL,
                                                                         [], [True]))],
}


def _validated(model: onnx.ModelProto, *, in_c: bool) -> NodeEdges | None:
    """The int graph load's validation hands on (None: none, or the model is refused)."""
    proto = onnx.ModelProto()
    proto.CopyFrom(model)
    data = model.SerializeToString() if in_c else None
    try:
        return validate_producers(proto, sort=False, data=data).edges
    except InvalidModelError:
        return None


def _kept(model: onnx.ModelProto, pos: int) -> NodeEdges | None:
    """The int graph an upkeep gives after the nodes from ``pos`` on were inserted into the
    model that lacked them (None: it gave up)."""
    proto = onnx.ModelProto()
    proto.CopyFrom(model)
    nodes = list(proto.graph.node)
    del proto.graph.node[pos:]
    index = GraphIndex(proto)
    assert index.int_graph() is not None
    upkeep = Upkeep(index)
    proto.graph.node.extend(nodes[pos:])
    upkeep.inserted(pos, len(nodes) - pos)
    state = upkeep.result()
    return None if state is None else state[1]


@pytest.mark.parametrize("pad", [0, PAD])
@pytest.mark.parametrize("case", list(CASES))
def test_validation_index_and_upkeep_read_the_same_edges(case, pad):
    """Same nodes, same int graph from every reader of the edge fields, or none from all."""
    model = _graph(CASES[case], pad)
    built = _build_edges(model.graph)
    if case != "one output twice":  # the index refuses that model outright
        assert GraphIndex(model).int_graph() == built
    assert _validated(model, in_c=False) == built
    if scan.available():
        assert _validated(model, in_c=True) == built
    assert _kept(model, 1) == built


def test_the_cases_cover_both_answers():
    """Guard for the test above: some cases have an int graph and some have none."""
    answers = {case: _build_edges(_graph(nodes, 0).graph) is not None
               for case, nodes in CASES.items()}
    assert answers["plain"] and answers["a multi-output node omits one"]
    assert not answers["a node's only output is ''"] and not answers["a body"]


@pytest.mark.parametrize("name", ["tiny_cnn", "tied_weights", "init_as_input", "if_capture",
                                  "local_function"])
def test_builder_models_read_the_same_edges_everywhere(name):
    model = getattr(builders, name)()
    built = GraphIndex(model).int_graph()
    assert _validated(model, in_c=False) == built
    assert (built is None) == (name == "if_capture")


def test_the_field_numbers_are_the_wire_format_of_the_fields():
    """EDGE_FIELD_NUMBERS are the tags protobuf writes for those fields (what _scan.c reads)."""
    for name, number in zip(EDGE_FIELD_NAMES, EDGE_FIELD_NUMBERS, strict=True):
        node = onnx.NodeProto()
        if name == "attribute":
            node.attribute.append(helper.make_attribute("a", 1))
        elif name in ("input", "output"):
            getattr(node, name).append("t")
        else:
            setattr(node, name, "t")
        assert node.SerializeToString()[0] == number << 3 | 2, name
