"""The int-graph fast paths of insert / reroute / copy (issue 14): when load hands its int
dataflow graph to the verb, the readers of a tensor, the cheap types, the name allocator and
reroute's count of unused nodes must equal what the name-based passes give."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from onnxsurgeon import GraphIndex
from onnxsurgeon.closure import closure
from onnxsurgeon.io import load
from onnxsurgeon.names import NameAllocator
from onnxsurgeon.session import Session
from onnxsurgeon.surgery import reroute
from onnxsurgeon.surgery._edgewalk import type_by_edges
from onnxsurgeon.surgery._proto import propagate_types, quick_value_info
from tests import builders

F = TensorProto.FLOAT


def split_and_dead() -> onnx.ModelProto:
    """A multi-output node (Split) whose outputs are read by different nodes, a tensor read
    twice by one node, an unnamed node, and a branch nothing depends on from the start.

    x -> Split -> {a, b};  a -> Relu -> ra;  b -> Mul(b, b) -> bb;  Add(ra, bb) -> y
    a -> Neg -> dead1 -> Exp -> dead2   (no output depends on them)
    """
    nodes = [
        helper.make_node("Split", ["x"], ["a", "b"], name="split", axis=1, num_outputs=2),
        helper.make_node("Relu", ["a"], ["ra"]),  # unnamed
        helper.make_node("Mul", ["b", "b"], ["bb"], name="sq"),
        helper.make_node("Neg", ["a"], ["dead1"], name="neg"),
        helper.make_node("Exp", ["dead1"], ["dead2"], name="exp"),
        helper.make_node("Add", ["ra", "bb"], ["y"], name="add"),
    ]
    graph = helper.make_graph(
        nodes, "split_and_dead",
        [helper.make_tensor_value_info("x", F, [2, 4])],
        [helper.make_tensor_value_info("y", F, [2, 2])],
        value_info=[helper.make_tensor_value_info("a", F, [2, 2]),
                    helper.make_tensor_value_info("b", F, [2, 2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    return model


MODELS = {
    "tiny_cnn": builders.tiny_cnn,
    "tied_weights": builders.tied_weights,
    "init_as_input": builders.init_as_input,
    "chain": lambda: builders.chain(6),
    "split_and_dead": split_and_dead,
}


def _loaded(tmp_path, build):
    path = tmp_path / "m.onnx"
    onnx.save(MODELS[build](), str(path))
    return path


def _fast_index(path):
    with Session(load(path), loaded=True) as session:  # as the CLI's load -> verb
        index = session.index()
    assert index.edges is not None  # the int graph rides along: the fast paths are taken
    return index


def _tensors(proto):
    g = proto.graph
    return ([vi.name for vi in g.input] + [t.name for t in g.initializer]
            + [o for n in g.node for o in n.output if o])


@pytest.mark.parametrize("build", list(MODELS))
def test_readers_names_and_types_on_ints_equal_the_name_based_ones(tmp_path, build):
    path = _loaded(tmp_path, build)
    fast = _fast_index(path)
    slow = GraphIndex(load(path).proto)
    assert slow.edges is None
    for name in _tensors(slow.model):
        assert fast.uses_of(name) == slow.consumers.get(name, []), name
    assert NameAllocator.for_index(fast)._taken == NameAllocator.for_model(slow.model)._taken
    assert fast.value_info.keys() == slow.value_info.keys()  # now built: its keys are used
    assert NameAllocator.for_index(fast)._taken == NameAllocator.for_model(slow.model)._taken
    produced = [o for n in slow.graph.node for o in n.output if o]
    # asked last to first and first to last: later questions reuse the types found before
    for order in (produced[::-1], produced):
        fast = _fast_index(path)
        for name in order:
            want = propagate_types(slow, closure(slow, [name]).nodes, {}, [name])
            got = type_by_edges(fast, name)
            assert got == (None if want is None else want[name]), name
            assert quick_value_info(fast, name) == quick_value_info(slow, name), name


REROUTES = [
    ("chain", "relu2", "add2", None),
    ("chain", "relu2", "relu0", None),
    ("chain", "y", "relu4", None),  # a graph output moves: the old tail becomes unused
    ("chain", "add3", "mm3", ["Relu_3"]),
    ("split_and_dead", "b", "a", None),  # one output of a multi-output node
    ("split_and_dead", "bb", "ra", None),
    ("split_and_dead", "ra", "dead2", None),  # revives the dead branch
    ("tiny_cnn", None, None, None),
]


@pytest.mark.parametrize(("build", "src", "tgt", "consumers"), REROUTES)
def test_reroute_counts_unused_nodes_on_ints_as_after_the_rewrite(tmp_path, build, src, tgt,
                                                                   consumers):
    path = _loaded(tmp_path, build)
    if src is None:  # the first computed tensor to the last one's producer input
        g = load(path).proto.graph
        src, tgt = g.node[1].output[0], g.node[0].output[0]
    slow = load(path).proto
    with Session(load(path), loaded=True) as session:  # load's int graph rides along
        fast = session.model
        a = reroute(fast, src, tgt, consumers=consumers)
    b = reroute(slow, src, tgt, consumers=consumers)
    assert a == b
    assert fast.proto.SerializeToString(deterministic=True) == slow.SerializeToString(
        deterministic=True)
    if build == "split_and_dead" and tgt != "dead2":
        assert a.unused_nodes >= 2  # the branch dead from the start is counted too


@pytest.mark.parametrize("build", [*MODELS, "if_capture", "loop_capture"])
def test_int_graph_built_from_the_proto_equals_the_one_load_validated(tmp_path, build):
    proto = MODELS[build]() if build in MODELS else getattr(builders, build)()
    path = tmp_path / "m.onnx"
    onnx.save(proto, str(path))
    handed = load(path)._fresh
    built = GraphIndex(load(path).proto).int_graph()
    recorded = handed[2] if handed is not None else None
    assert built == recorded  # both None where a node holds a body
    assert (built is None) == (build in ("if_capture", "loop_capture"))


def test_int_graph_refuses_a_proto_it_cannot_describe():
    proto = builders.chain(3)
    proto.graph.node[4].input[0] = "later"  # read before it is produced (and never is)
    assert GraphIndex(proto).int_graph() is None
    proto = builders.chain(3)
    proto.graph.node[5].output[0] = "x"  # redefines the graph input
    assert GraphIndex(proto).int_graph() is None


@pytest.mark.parametrize("build", list(MODELS))
def test_fast_paths_on_a_bare_proto_build_the_int_graph_and_agree(tmp_path, build):
    proto = MODELS[build]()
    index = GraphIndex(proto)
    slow = GraphIndex(proto)
    assert NameAllocator.for_index(index)._taken == NameAllocator.for_model(proto)._taken
    assert index.known_int_graph() is not None  # built once, then reused
    for name in _tensors(proto):
        assert index.uses_of(name) == slow.consumers.get(name, []), name


@pytest.mark.parametrize("build", list(MODELS))
def test_copy_closure_on_ints_equals_the_name_walk_in_order(tmp_path, build):
    from onnxsurgeon.surgery._edgewalk import closure_edges

    proto = MODELS[build]()
    index = GraphIndex(proto)
    names = _tensors(proto)
    produced = [o for n in proto.graph.node for o in n.output if o]
    for target in produced:
        for stops in ([], *([s] for s in names if s != target)):
            want = closure(index, [target], stop_at=stops)
            got = closure_edges(index, [target], stops)
            multi = any(len(n.output) > 1 and s in n.output for n in proto.graph.node
                        for s in stops)
            if multi:
                assert got is None  # a stop cut out of a multi-output node: names decide
                continue
            assert got == (list(want.nodes), list(want.initializers), list(want.stops)), (
                target, stops)
    if len(produced) > 1:  # several targets at once keep the name walk's first-read order
        got = closure_edges(index, produced[::-1], [])
        want = closure(index, produced[::-1])
        assert got == (list(want.nodes), list(want.initializers), [])
