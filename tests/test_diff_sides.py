"""The diff's byte-level lookups (diff/sides.py) and its prefix/suffix classification equal a
full index and a full name-by-name comparison built the plain way, on models made to trip them:
names longer than 127 bytes (two-byte lengths), a tensor read twice by one node, unnamed nodes,
a string attribute holding a tensor's encoded bytes, names used inside an If branch, a weight
read by every node, reordered nodes."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from onnxsurgeon.diff import diff_models
from onnxsurgeon.diff.sides import Side, encoded
from onnxsurgeon.surgery import Weights, copy, extract, insert, reroute
from tests import builders as B

F = TensorProto.FLOAT
LONG = "block/" + "very_long_scope_name/" * 9 + "out"  # > 127 bytes: a two-byte length


def clone(model: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    return out


def tricky() -> onnx.ModelProto:
    vi = helper.make_tensor_value_info
    branch = helper.make_graph(  # reads 'u' from the outer scope and makes its own 'w'
        [helper.make_node("Neg", ["u"], ["w"], name="inner")], "branch", [], [vi("w", F, [2])])
    nodes = [
        helper.make_node("Identity", ["x"], [LONG], name="first"),
        helper.make_node("Add", [LONG, LONG], ["t"], name="twice"),
        helper.make_node("Relu", ["t"], ["u"]),  # unnamed
        helper.make_node("Identity", ["t"], ["v"], name="decoy",
                         note=encoded(1, "u") + encoded(2, "v2") + encoded(3, "first")),
        helper.make_node("If", ["c"], ["z"], name="cond", then_branch=branch, else_branch=branch),
        helper.make_node("Mul", ["u", "v"], ["v2"], name="mul"),
        helper.make_node("Add", ["v2", "W"], ["y"], name="last"),
    ]
    graph = helper.make_graph(nodes, "tricky", [vi("x", F, [2]), vi("c", TensorProto.BOOL, [])],
                              [vi("y", F, [2]), vi("z", F, [2])],
                              [helper.make_tensor("W", F, [2], [1.0, 2.0])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def every_name(graph: onnx.GraphProto) -> set[str]:
    names = {n.name for n in graph.node} | {t.name for t in graph.initializer}
    for node in graph.node:
        names.update(node.input)
        names.update(node.output)
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                names |= every_name(attr.g)
    return names | {"nothing", "v2x", LONG[:-1]}


@pytest.mark.parametrize("make", [tricky, B.tiny_cnn, B.if_capture, B.loop_capture,
                                  B.local_function, B.tied_weights, B.init_as_input,
                                  lambda: B.chain(20)], ids=lambda f: getattr(f, "__name__", "chain"))
def test_lookups_equal_a_full_index(make):
    model = make()
    side = Side(model)
    nodes = model.graph.node
    producer = {o: j for j, n in enumerate(nodes) for o in n.output if o}
    readers: dict[str, list[int]] = {}
    for j, n in enumerate(nodes):
        for t in n.input:
            readers.setdefault(t, []).append(j)
    for name in sorted(every_name(model.graph)):
        assert side.producer(name) == producer.get(name), name
        assert side.readers(name) == readers.get(name, []), name
        first = next((j for j, n in enumerate(nodes) if n.name == name), None) if name else None
        assert side.named(name) == first, name
    assert side.reads == ([t for n in nodes for t in n.input],
                          [j for j, n in enumerate(nodes) for _ in n.input])
    assert side.producers == producer


def _key(node: onnx.NodeProto, j: int) -> str:
    return node.name or f"<{node.op_type} {node.output[0] if len(node.output) else j}>"


def full_classes(before: onnx.ModelProto, after: onnx.ModelProto) -> dict[str, set[str]]:
    """Every node matched by key across the whole lists, protos compared one by one."""
    old = {_key(n, i): n for i, n in enumerate(before.graph.node)}
    new = {_key(n, j): n for j, n in enumerate(after.graph.node)}
    out: dict[str, set[str]] = {"added": set(), "removed": set(), "rerouted": set()}
    for key, n in new.items():
        o = old.get(key)
        if o is None:
            out["added"].add(key)
        elif o != n:
            same = (o.op_type, list(o.output), list(o.attribute)) == (
                n.op_type, list(n.output), list(n.attribute))
            out["rerouted" if same else "added"].add(key)
            if not same:
                out["removed"].add(key)
    out["removed"] |= old.keys() - new.keys()
    return out


def _reordered(model: onnx.ModelProto) -> None:
    nodes = list(model.graph.node)
    pool = next(k for k, n in enumerate(nodes) if n.name == "pool")
    side = next(k for k, n in enumerate(nodes) if n.name == "side")
    nodes[pool], nodes[side] = nodes[side], nodes[pool]
    del model.graph.node[:]
    model.graph.node.extend(nodes)


def _swap_ends(model: onnx.ModelProto) -> None:
    model.graph.node[0].name = "renamed_first"
    model.graph.node[-1].input[0] = "relu3"


REWRITES = {
    "insert-mid": (lambda: B.chain(30), lambda m: insert(m, "relu14", op="scale",
                                                          params={"factor": 2.0})),
    "insert-first": (lambda: B.chain(5), lambda m: insert(m, "x", op="identity")),
    "insert-output": (lambda: B.chain(5), lambda m: insert(m, "y", op="identity")),
    "copy": (B.tiny_cnn, lambda m: copy(m, ["logits"], weights=Weights.INDEPENDENT,
                                        prefix="twin/")),
    "extract": (lambda: B.chain(30), lambda m: extract(m, ["relu20"], inputs=["relu5"])),
    "reroute": (B.tiny_cnn, lambda m: reroute(m, "act", "conv5_out", consumers=["side"])),
    "reorder": (B.tiny_cnn, _reordered),
    "both-ends": (lambda: B.chain(6), _swap_ends),
    "tricky-attr": (tricky, lambda m: m.graph.node[5].attribute.append(
        helper.make_attribute("note", "x"))),
}


@pytest.mark.parametrize("name", sorted(REWRITES))
def test_classes_equal_a_full_comparison(name):
    make, rewrite = REWRITES[name]
    before = make()
    after = clone(before)
    rewrite(after)
    expected = full_classes(before, after)
    drawn = diff_models(before, after, context=0)
    got = drawn.changes()
    assert {k: got[k] for k in expected} == expected
    assert drawn.totals["unchanged"] + drawn.totals["added"] + drawn.totals["rerouted"] == len(
        after.graph.node)
    assert drawn.totals["removed"] == len(expected["removed"])
    if name == "reorder":
        assert expected == {"added": set(), "removed": set(), "rerouted": set()}


@pytest.mark.parametrize("blocks", [200, 2000])
def test_a_small_change_builds_no_whole_graph_map(blocks):
    """One insert in a long chain: after the one serialization of each node list, the drawing
    only scans the bytes for the tensors it draws -- the same few dozen scans whatever the
    chain's length, and no Python pass over every node."""
    from onnxsurgeon.diff import changes

    before = B.chain(blocks)
    after = clone(before)
    insert(after, f"relu{blocks // 2}", op="scale", params={"factor": 2.0})
    builder = changes._Builder(before, after)
    drawn = changes._build(builder, builder.seeds(), 2)
    assert drawn.changes()["rerouted"] == {f"MatMul_{blocks // 2 + 1}"}
    for side in (builder.A, builder.B):
        assert {"reads", "producers", "all_readers"}.isdisjoint(vars(side))
        assert 0 < side.scans < 30
    assert len(builder.pos_a) == 2 and len(builder.pos_b) == 1  # the block and its reader


def test_edges_of_a_long_untyped_chain_are_typed_from_the_drawn_nodes_alone():
    """Past INFER_MAX_NODES nodes without value info (the benchmark chain's shape) inference
    sees the drawn nodes only (a page costs what it draws, issue 26): the block the insert typed
    types everything drawn after it; the untyped chain before it stays untyped."""
    blocks = 7000  # 21,000 nodes
    before = B.chain(blocks)
    after = clone(before)
    mid = blocks // 2
    insert(after, f"relu{mid}", op="l2_normalize", params={"axis": 1})
    del before.graph.value_info[:]
    assert [vi.name for vi in after.graph.value_info] == [f"relu{mid}/l2_normalize"]
    d = diff_models(before, after)
    assert len(after.graph.node) > 20_000 and d.edges
    types = {e.tensor: (e.dtype, e.shape) for e in d.edges}
    assert types[f"relu{mid}/l2_normalize"] == ("float32", "[1,4]")
    assert types[f"mm{mid + 1}"] == types[f"relu{mid + 1}"] == ("float32", "[1,4]")
    assert types[f"add{mid}"] == ("", "")  # typing it would take the 3,500 blocks before it
