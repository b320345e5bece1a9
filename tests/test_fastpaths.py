"""The fast paths of load -> extract: the validated producer map handed from load to the first
index must never be stale, and cheap type propagation must agree with onnx shape inference."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from onnxsurgeon import GraphIndex, load, save
from onnxsurgeon.io import indexed
from onnxsurgeon.surgery import extract
from onnxsurgeon.surgery._proto import propagate_types
from tests import builders


@pytest.fixture
def chain_file(tmp_path):
    path = tmp_path / "chain.onnx"
    onnx.save(builders.chain(50), str(path))
    return path


def test_handed_over_index_equals_a_fresh_one(chain_file):
    model = load(chain_file)
    assert model._fresh is not None  # the fast path is taken for this node-dominated model
    index = indexed(model)
    assert index.producer == GraphIndex(model.proto).producer
    assert model._fresh is None  # used at most once


def test_mutation_after_load_never_yields_a_stale_index(chain_file):
    model = load(chain_file)
    graph = model.proto.graph
    graph.node[3].output[0] = "renamed"  # MatMul_1 -> 'renamed', read by Add_1
    graph.node[4].input[0] = "renamed"
    index = indexed(model)
    assert "mm1" not in index.producer and index.producer["renamed"] == 3
    model2 = load(chain_file)
    model2.proto.graph.node[3].output[0] = "renamed"
    model2.proto.graph.node[4].input[0] = "renamed"
    extract(model2, ["relu1"])
    assert [n.name for n in model2.proto.graph.node] == [f"{op}_{i}" for i in range(2)
                                                        for op in ("MatMul", "Add", "Relu")]
    assert "renamed" in {o for n in model2.proto.graph.node for o in n.output}


def test_extract_after_load_equals_extract_on_plain_proto(chain_file, tmp_path):
    a = load(chain_file)
    extract(a, ["relu24"])
    b = onnx.load(str(chain_file))
    extract(b, ["relu24"])
    assert a.proto.SerializeToString(deterministic=True) == b.SerializeToString(deterministic=True)
    save(a, tmp_path / "out.onnx")
    onnx.checker.check_model(str(tmp_path / "out.onnx"), full_check=True)


def _broadcast_model() -> onnx.ModelProto:
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),       # [N,3,4] x [4,5] -> [N,3,5]
        helper.make_node("Add", ["m", "b"], ["a"]),          # + [5]
        helper.make_node("Mul", ["a", "s"], ["p"]),          # * [1,3,1]
        helper.make_node("Sigmoid", ["p"], ["y"]),
        helper.make_node("MatMul", ["v", "y"], ["z"]),       # [3] x [N,3,5] -> [N,5]
    ]
    graph = helper.make_graph(nodes, "bc", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4]),
        helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, 5]),
        helper.make_tensor_value_info("b", TensorProto.FLOAT, [5]),
        helper.make_tensor_value_info("s", TensorProto.FLOAT, [1, 3, 1]),
        helper.make_tensor_value_info("v", TensorProto.FLOAT, [3]),
    ], [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("make", [lambda: builders.chain(5), _broadcast_model])
def test_propagated_types_equal_onnx_inference(make):
    model = make()
    index = GraphIndex(model)
    names = [o for n in model.graph.node for o in n.output]
    quick = propagate_types(index, range(len(model.graph.node)), {}, names)
    assert quick is not None
    inferred = {vi.name: vi for vi in onnx.shape_inference.infer_shapes(model).graph.value_info}
    inferred.update({vi.name: vi for vi in model.graph.output if vi.name in inferred})
    for name in names:
        if name in inferred:
            assert quick[name].type == inferred[name].type, name


def test_propagation_gives_up_outside_its_op_set():
    model = builders.tiny_cnn()  # Conv is not in the cheap set: onnx inference decides
    index = GraphIndex(model)
    first = model.graph.node[0]
    assert propagate_types(index, [0], {}, [first.output[0]]) is None


# ------------------------------------------ int dataflow graph recorded by load (NodeEdges)
def _name_walk(index, targets, stops):
    import sys

    return sys.modules["onnxsurgeon.surgery.extract"]._walk(index, targets, set(stops))


def _tensor_names(model):
    names = [o for n in model.graph.node for o in n.output if o]
    return names + [t.name for t in model.graph.initializer] + [i.name for i in model.graph.input]


@pytest.mark.parametrize("build", ["tiny_cnn", "tied_weights", "init_as_input", "chain"])
def test_int_walk_and_propagation_equal_the_name_based_ones(tmp_path, build):
    from onnxsurgeon.surgery._edgewalk import propagate_edges, walk_edges

    proto = getattr(builders, build)(*((5,) if build == "chain" else ()))
    path = tmp_path / "m.onnx"
    onnx.save(proto, str(path))
    model = load(path)
    index = GraphIndex(model.proto, _producer=GraphIndex(model.proto).producer,
                       _edges=model._fresh[2] if model._fresh else None)
    assert index.edges is not None  # recorded: no subgraphs, every read in order
    produced = {o for n in model.proto.graph.node for o in n.output}
    names = _tensor_names(model.proto)
    for target in names:
        for stops in ([], *([s] for s in names[:6] if s != target)):
            got = walk_edges(index, [target], set(stops))
            try:
                want = _name_walk(index, [target], stops)
            except Exception:  # noqa: BLE001 - never happens on these valid models
                pytest.fail("name walk failed")
            assert got is not None and got[0] == want[0], (target, stops)
            # the int walk's names: the name walk's minus names produced inside the closure
            assert got[1] == {n for n in want[1] if n not in produced or n == target
                              or n in stops}, (target, stops)
        if target in produced:
            kept = want[0] if not stops else _name_walk(index, [target], [])[0]
            a = propagate_edges(index, kept, {}, [target])
            b = propagate_types(index, kept, {}, [target])
            assert (a is None) == (b is None) and (a is None or a == b), target


def test_edges_absent_when_a_node_holds_a_subgraph_or_after_mutation(tmp_path, chain_file):
    path = tmp_path / "if.onnx"
    onnx.save(builders.if_capture(), str(path))
    model = load(path)
    assert model._fresh is None or model._fresh[2] is None
    model = load(chain_file)
    model.proto.graph.node[4].input[1] = "W"  # Add_1 now reads W: the recorded edges are stale
    index = indexed(model)
    assert index.edges is None  # the byte comparison refused the hand-over
    result = extract(model, ["add1"])  # MatMul_0, Add_0, Relu_0, MatMul_1, Add_1
    assert result.kept_nodes == 5 and [t.name for t in model.proto.graph.initializer] == ["W", "B"]
