"""load's cheap validation and the types it hands to the cheap type pass.

The structural pass reads each node's fields once and checks texts, definitions and read order in
C-level scans; the tensor check records every initializer's (data type, dims) on the way, and the
int dataflow graph load hands over carries them, so the type pass reads no tensor from the proto.
These tests pin what must not move: the same one-line refusal for every damaged name, the same
producer map and int graph, and types equal to the pass reading the proto and to onnx's own
shape inference.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsurgeon.errors import InvalidModelError
from onnxsurgeon.index import GraphIndex
from onnxsurgeon.io import load
from onnxsurgeon.surgery._edgewalk import propagate_edges, type_by_edges

from . import builders


def _marked() -> onnx.ModelProto:
    """Every text a node carries holds a unique 'Q' marker, so one byte can be damaged."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    nodes = [
        helper.make_node("Relu", ["x"], ["outQ"], name="nameQ"),
        helper.make_node("CustQ", ["outQ"], ["c"], domain="domQ", name="custom"),
        helper.make_node("Identity", ["c"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "g", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18),
                                                   helper.make_opsetid("domQ", 1)])


@pytest.mark.parametrize("marker, tag", [(b"nameQ", 0x1A), (b"outQ", 0x12), (b"CustQ", 0x22),
                                         (b"domQ", 0x3A)])
def test_a_name_that_is_not_text_is_refused_with_one_line(tmp_path, marker, tag):
    """A node name, output, op or domain that is not UTF-8 (upb hands it back as bytes) is
    refused as corrupt, whichever field it is in."""
    data = _marked().SerializeToString()
    at = data.index(marker)  # the first one: in the node (field tag, length, text)
    assert data[at - 2] == tag
    at += marker.index(b"Q")
    path = tmp_path / "bad.onnx"
    path.write_bytes(data[:at] + b"\xff" + data[at + 1:])
    with pytest.raises(InvalidModelError) as err:
        load(path)
    assert str(err.value) == ("the main graph has a name that is not valid UTF-8 text; the file "
                              "is corrupt, re-export the model")


@pytest.mark.parametrize("names, message", [
    (["x", "x"], "main graph declares input 'x' twice; remove the duplicate graph input"),
    (["x", "b", "b"], "main graph declares input 'b' twice; remove the duplicate graph input"),
])
def test_the_first_repeated_input_is_named(tmp_path, names, message):
    infos = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1]) for n in names]
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", infos, [y])
    onnx.save(helper.make_model(graph), str(tmp_path / "m.onnx"))
    with pytest.raises(InvalidModelError) as err:
        load(tmp_path / "m.onnx")
    assert str(err.value) == message


def _mixed(blocks: int) -> onnx.ModelProto:
    """A chain of mixed ops, each block with weights of its own shape: MatMul by a distinct
    matrix, Add and Mul by broadcast row/column/scalar weights, Sub of two activations, unary
    ops; the input has a symbolic batch dim."""
    rng = np.random.default_rng(0)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 8])
    nodes, inits, prev, width = [], [], "x", 8
    for b in range(blocks):
        out = 8 + 2 * b
        w = numpy_helper.from_array(rng.standard_normal((width, out)).astype(np.float32), f"w{b}")
        row = numpy_helper.from_array(np.ones((out,), np.float32), f"row{b}")
        col = numpy_helper.from_array(np.ones((3, 1), np.float32), f"col{b}")
        one = numpy_helper.from_array(np.float32(0.5), f"one{b}")
        inits += [w, row, col, one]
        nodes += [
            helper.make_node("MatMul", [prev, f"w{b}"], [f"mm{b}"]),
            helper.make_node("Add", [f"mm{b}", f"row{b}"], [f"add{b}"]),
            helper.make_node("Mul", [f"add{b}", f"col{b}"], [f"mul{b}"]),
            helper.make_node("Relu", [f"mul{b}"], [f"relu{b}"]),
            helper.make_node("Mul", [f"relu{b}", f"one{b}"], [f"half{b}"]),
            helper.make_node("Sub", [f"relu{b}", f"half{b}"], [f"sub{b}"]),
            helper.make_node("Tanh", [f"sub{b}"], [f"act{b}"]),
        ]
        prev, width = f"act{b}", out
    y = helper.make_tensor_value_info(prev, TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "mixed", [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _loaded_index(tmp_path, proto: onnx.ModelProto) -> tuple[GraphIndex, GraphIndex]:
    """An index on load's int graph (with the initializer types) and one on the same graph
    without them (the pass then reads each initializer from the proto)."""
    path = tmp_path / "m.onnx"
    onnx.save(proto, str(path))
    model = load(path)
    assert model._fresh is not None and model._fresh[2] is not None
    _, producer, edges, _ = model._fresh
    plain = dataclasses.replace(edges, init_types=None)
    return (GraphIndex(model.proto, _producer=producer, _edges=edges),
            GraphIndex(model.proto, _producer=dict(producer), _edges=plain))


def test_initializer_types_load_hands_on_are_the_initializers(tmp_path):
    seeded, _ = _loaded_index(tmp_path, _mixed(3))
    edges = seeded.edges
    assert edges is not None and edges.init_types is not None
    inits = {t.name: (t.data_type, tuple(t.dims)) for t in seeded.graph.initializer}
    by_leaf = dict(edges.leaf_types())
    assert {edges.leaves[k]: t for k, t in by_leaf.items()} == inits
    assert len(by_leaf) == len(inits)
    # the index takes the initializer names from the same leaves instead of the proto
    rebuilt = GraphIndex(seeded.model)
    assert seeded.initializer_names() == list(inits) == rebuilt.initializer_names()
    assert list(seeded.initializers.items()) == list(rebuilt.initializers.items())


def test_an_initializer_listed_as_input_gets_no_handed_types(tmp_path):
    """Old-IR models list initializers as graph inputs: their leaf ids are the inputs', so load
    hands no initializer types on (the pass reads the proto, as before)."""
    seeded, plain = _loaded_index(tmp_path, builders.init_as_input())
    assert seeded.edges is not None and seeded.edges.init_types is None
    for node in seeded.graph.node:
        out = node.output[0]
        assert type_by_edges(seeded, out) == type_by_edges(plain, out), out


def test_the_type_pass_on_handed_types_equals_onnx_shape_inference(tmp_path):
    """Every node output of the mixed chain: the pass on load's handed types, the pass reading
    the proto, and onnx shape inference give the same type."""
    proto = _mixed(4)
    seeded, plain = _loaded_index(tmp_path, proto)
    inferred = {vi.name: vi.type for vi in
                onnx.shape_inference.infer_shapes(proto, strict_mode=True).graph.value_info}
    outs = [node.output[0] for node in proto.graph.node]
    for out in outs[:-1]:
        got = type_by_edges(seeded, out)
        assert got is not None and got.type == inferred[out], out
        assert got == type_by_edges(plain, out), out
    kept = list(range(len(outs)))
    assert propagate_edges(seeded, kept, {}, outs) == propagate_edges(plain, kept, {}, outs)


def test_a_typed_stop_on_an_initializer_keeps_its_given_type(tmp_path):
    """extract with a stop that is an initializer types it from the stop's value info, not from
    the handed types."""
    proto = _mixed(2)
    seeded, plain = _loaded_index(tmp_path, proto)
    typed = {"row0": helper.make_tensor_value_info("row0", TensorProto.FLOAT, [2, 1, 8])}
    kept = list(range(len(proto.graph.node)))
    want = ["add0", "act1"]
    got = propagate_edges(seeded, kept, typed, want)
    assert got is not None and got == propagate_edges(plain, kept, typed, want)
    dims = [d.dim_value for d in got["add0"].type.tensor_type.shape.dim]
    assert dims == [2, 3, 8]  # (batch, 3, 8) + the stop's (2, 1, 8), not the weight's (8,)


def _with_bad_tensors(*, dangling: bool, bad_init: bool, bad_constant: bool,
                      bad_function: bool) -> onnx.ModelProto:
    """x -> Add(W) -> Add(Constant c) -> f (a local function holding a Constant) -> y, each
    tensor damaged on request (raw_data 4 bytes short), and optionally a dangling read."""
    def tensor(name: str, bad: bool) -> TensorProto:
        t = numpy_helper.from_array(np.ones((4,), np.float32), name)
        if bad:
            t.raw_data = t.raw_data[:-4]
        return t
    fn = helper.make_function(
        "local", "f", ["a"], ["b"],
        [helper.make_node("Constant", [], ["k"], value=tensor("fk", bad_function)),
         helper.make_node("Add", ["a", "k"], ["b"])],
        opset_imports=[helper.make_opsetid("", 18)])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    nodes = [
        helper.make_node("Add", ["x", "ghost" if dangling else "W"], ["a"]),
        helper.make_node("Constant", [], ["c"], value=tensor("c_value", bad_constant)),
        helper.make_node("Add", ["a", "c"], ["b"]),
        helper.make_node("f", ["b"], ["y"], domain="local"),
    ]
    graph = helper.make_graph(nodes, "g", [x], [y], [tensor("W", bad_init)])
    return helper.make_model(graph, functions=[fn],
                             opset_imports=[helper.make_opsetid("", 18),
                                            helper.make_opsetid("local", 1)])


@pytest.mark.parametrize("damage, first", [
    ({"dangling": True}, "tensor 'ghost' read by node 'Add#0'"),
    ({"dangling": True, "bad_constant": True}, "tensor 'c_value' declares"),
    ({"dangling": True, "bad_init": True, "bad_constant": True}, "tensor 'W' declares"),
    ({"bad_init": True, "bad_function": True}, "tensor 'fk' declares"),
    ({"bad_constant": True}, "tensor 'c_value' declares"),
])
def test_tensor_errors_win_in_walk_order_over_structure(tmp_path, damage, first):
    """load checks the local functions' tensors and the main initializers before the structure
    and the rest after: still the first bad tensor in walk order is reported, and a structural
    error only when every tensor is sound."""
    flags = {"dangling": False, "bad_init": False, "bad_constant": False, "bad_function": False}
    path = tmp_path / "m.onnx"
    onnx.save(_with_bad_tensors(**(flags | damage)), str(path))
    with pytest.raises(InvalidModelError) as err:
        load(path)
    assert str(err.value).startswith(first), str(err.value)


def test_load_counts_the_external_tensors_of_every_part(tmp_path):
    """load checks the tensors in three runs (functions', main initializers, the rest): the
    external ones are counted over all three, as one walk over every tensor counts them."""
    from onnx.external_data_helper import convert_model_to_external_data

    from onnxsurgeon.external import is_external, iter_tensors

    proto = _with_bad_tensors(dangling=False, bad_init=False, bad_constant=False,
                              bad_function=False)
    # the main initializer and the Constants' values (main graph, function) to the data file
    convert_model_to_external_data(proto, all_tensors_to_one_file=True, location="w.bin",
                                   size_threshold=0, convert_attribute=True)
    path = tmp_path / "m.onnx"
    onnx.save(proto, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
              location="w.bin", size_threshold=0, convert_attribute=True)
    model = load(path)
    walked = sum(map(is_external, iter_tensors(model.proto)))
    assert walked == 3 and model._externals == walked
