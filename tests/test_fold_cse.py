"""``fold``'s common-subexpression elimination (issue 30, rule ``duplicate``): on hand-built
graphs with a dynamic dim (nothing folds them away) two Shapes of one tensor merge, Unsqueezes
of equal constants with other names merge and the Concats after them in the same pass; a graph
output's producer, random ops and other attributes stay; outputs exactly equal under
onnxruntime; ``fold --verify --json`` lists the merges. On a BERT exported by torch with a
dynamic batch and sequence, fold + cleanup reaches at most onnxslim's node count with equal
outputs at two batch sizes and two sequence lengths."""

from __future__ import annotations

import json
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsurgeon import Model, load, surgery
from onnxsurgeon.schema import validate

from .cli_helpers import cli_main

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _c(name: str, value: list[int] | int) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(value, np.int64), name)


def _shapes() -> onnx.ModelProto:
    """x[n, 4]: two Shape(x) -> Gather(0) (indices 'i0', 'i0b', both 0) -> Unsqueeze (axes
    'a0', 'a0b', both [0]) -> Concat(., [-1]) ('m1', 'm1b') -> Reshape(x, .) -> Add -> y; a
    Neg making graph output o1, another Neg making o2 (both stay: outputs), a third read by Relu
    -> r (merges into the first); Softmax over axis 0 and 1 (stay); LeakyRelu 0.1 twice (merge)
    and 0.2 (stays)."""
    vi = helper.make_tensor_value_info
    nodes = [
        helper.make_node("Shape", ["x"], ["s1"], name="shape1"),
        helper.make_node("Shape", ["x"], ["s2"], name="shape2"),
        helper.make_node("Gather", ["s1", "i0"], ["g1"], name="gather1", axis=0),
        helper.make_node("Gather", ["s2", "i0b"], ["g2"], name="gather2", axis=0),
        helper.make_node("Unsqueeze", ["g1", "a0"], ["u1"], name="unsq1"),
        helper.make_node("Unsqueeze", ["g2", "a0b"], ["u2"], name="unsq2"),
        helper.make_node("Concat", ["u1", "m1"], ["c1"], name="concat1", axis=0),
        helper.make_node("Concat", ["u2", "m1b"], ["c2"], name="concat2", axis=0),
        helper.make_node("Reshape", ["x", "c1"], ["y1"], name="reshape1"),
        helper.make_node("Reshape", ["x", "c2"], ["y2"], name="reshape2"),
        helper.make_node("Add", ["y1", "y2"], ["y"], name="add"),
        helper.make_node("Neg", ["x"], ["o1"], name="neg1"),
        helper.make_node("Neg", ["x"], ["o2"], name="neg2"),
        helper.make_node("Neg", ["x"], ["n3"], name="neg3"),
        helper.make_node("Relu", ["n3"], ["r"], name="relu"),
        helper.make_node("Softmax", ["x"], ["sm0"], name="soft0", axis=0),
        helper.make_node("Softmax", ["x"], ["sm1"], name="soft1", axis=1),
        helper.make_node("Add", ["sm0", "sm1"], ["sm"], name="smadd"),
        helper.make_node("LeakyRelu", ["x"], ["l1"], name="leaky1", alpha=0.1),
        helper.make_node("LeakyRelu", ["x"], ["l2"], name="leaky2", alpha=0.1),
        helper.make_node("LeakyRelu", ["x"], ["l3"], name="leaky3", alpha=0.2),
        helper.make_node("Sum", ["l1", "l2", "l3"], ["l"], name="sum"),
    ]
    inits = [_c("i0", 0), _c("i0b", 0), _c("a0", [0]), _c("a0b", [0]), _c("m1", [-1]),
             _c("m1b", [-1])]
    outs = [vi(n, F, ["n", 4]) for n in ("y", "o1", "o2", "r", "sm", "l")]
    g = helper.make_graph(nodes, "g", [vi("x", F, ["n", 4])], outs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _run(m: onnx.ModelProto, x: np.ndarray) -> dict[str, np.ndarray]:
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, {"x": x}), strict=True))


def test_shapes_unsqueezes_and_the_concats_after_them_merge_in_one_pass():
    m = _shapes()
    xs = [np.random.default_rng(k).standard_normal((k + 2, 4)).astype(np.float32)
          for k in range(2)]
    before = [_run(m, x) for x in xs]
    r = surgery.fold(m)
    merged = {f["nodes"][0]: f["into"] for f in r.fused if f["rule"] == "duplicate"}
    assert merged == {"shape2": "shape1", "gather2": "gather1", "unsq2": "unsq1",
                      "concat2": "concat1", "reshape2": "reshape1", "neg3": "neg1",
                      "leaky2": "leaky1"}
    names = [n.name for n in m.graph.node]
    assert {"neg1", "neg2", "soft0", "soft1", "leaky3"} <= set(names)
    assert not set(merged) & set(names) and set(merged) <= set(r.removed)
    by = {n.name: n for n in m.graph.node}
    assert list(by["add"].input) == ["y1", "y1"] and list(by["relu"].input) == ["o1"]
    assert list(by["sum"].input) == ["l1", "l1", "l3"]
    assert list(by["gather1"].input) == ["s1", "i0"]
    left = {t.name for t in m.graph.initializer}
    assert left == {"i0", "a0", "m1"}  # the equal constants nothing reads any more dropped
    assert not {"s2", "g2", "u2", "c2", "y2", "n3", "l2"} & {v.name for v in m.graph.value_info}
    onnx.checker.check_model(m, full_check=True)
    for x, want in zip(xs, before, strict=True):
        got = _run(m, x)
        assert got.keys() == want.keys()
        for k in want:
            assert np.array_equal(got[k], want[k]), k


def test_random_ops_bodies_and_other_domains_stay():
    vi = helper.make_tensor_value_info
    branch = helper.make_graph([helper.make_node("Neg", ["x"], ["b"])], "br", [],
                               [vi("b", F, None)])
    nodes = [
        helper.make_node("RandomUniformLike", ["x"], ["r1"], name="rand1", seed=1.0),
        helper.make_node("RandomUniformLike", ["x"], ["r2"], name="rand2", seed=1.0),
        helper.make_node("Add", ["r1", "r2"], ["r"], name="radd"),
        helper.make_node("If", ["c"], ["i1"], name="if1", then_branch=branch,
                         else_branch=branch),
        helper.make_node("If", ["c"], ["i2"], name="if2", then_branch=branch,
                         else_branch=branch),
        helper.make_node("Add", ["i1", "i2"], ["i"], name="iadd"),
    ]
    g = helper.make_graph(nodes, "g", [vi("x", F, ["n", 4]), vi("c", TensorProto.BOOL, [])],
                          [vi("r", F, None), vi("i", F, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    r = surgery.fold(m)
    assert not [f for f in r.fused if f["rule"] == "duplicate"]
    assert [n.name for n in m.graph.node] == ["rand1", "rand2", "radd", "if1", "if2", "iadd"]


def test_nothing_to_merge_leaves_the_model_as_fold_without_it_left_it():
    vi = helper.make_tensor_value_info
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("Neg", ["x"], ["b"], name="neg"),
             helper.make_node("Add", ["a", "b"], ["y"], name="add")]
    g = helper.make_graph(nodes, "g", [vi("x", F, ["n", 4])], [vi("y", F, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    before = m.SerializeToString()
    r = surgery.fold(m)
    assert r.fused == () and r.removed == ()
    assert [n.name for n in m.graph.node] == ["relu", "neg", "add"]
    del m.metadata_props[:]  # the rewrite record
    assert m.SerializeToString() == before


def test_fold_cli_lists_the_merges_and_verifies_them(tmp_path, capsys):
    src, out, plain = tmp_path / "m.onnx", tmp_path / "o.onnx", tmp_path / "p.onnx"
    onnx.save(_shapes(), src)
    code, stdout, err = cli_main(capsys, "fold", src, "-o", out, "--verify", "--json")
    assert code == 0, err
    data = json.loads(stdout)
    validate("fold", data)
    assert data["verify"]["ok"] is True
    dups = [f for f in data["fused"] if f["rule"] == "duplicate"]
    assert {"nodes": ["concat2"], "into": "concat1", "rule": "duplicate"} in dups
    assert len(dups) == 7
    assert len(load(out).proto.graph.node) == 22 - 7
    code, stdout, err = cli_main(capsys, "fold", src, "-o", plain, "--no-fuse", "--json")
    assert code == 0, err
    assert json.loads(stdout)["fused"] == [] and len(load(plain).proto.graph.node) == 22


@pytest.fixture(scope="module")
def bert_dynamic(tmp_path_factory) -> onnx.ModelProto:
    """A 2-layer BERT exported by torch's TorchScript exporter with a dynamic batch and
    sequence length (as benchmarks/bench_hygiene.py builds ``bert_dynamic``)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=2,
                                  intermediate_size=128, vocab_size=100,
                                  max_position_embeddings=32, attn_implementation="eager")
    model = transformers.BertModel(cfg).eval()

    class Wrap(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, ids):
            return self.m(input_ids=ids).last_hidden_state

    path = tmp_path_factory.mktemp("bert") / "bert_dynamic.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Wrap(model), (torch.zeros(2, 16, dtype=torch.long),), str(path),
                          dynamo=False, do_constant_folding=False, input_names=["ids"],
                          output_names=["hidden"], opset_version=17,
                          dynamic_axes={"ids": {0: "batch", 1: "seq"},
                                        "hidden": {0: "batch", 1: "seq"}})
    return onnx.load(path)


def test_dynamic_bert_fold_and_cleanup_reach_onnxslims_count_with_equal_outputs(bert_dynamic):
    m = onnx.ModelProto()
    m.CopyFrom(bert_dynamic)
    r = surgery.fold(m)
    surgery.cleanup(m)
    dups = [f for f in r.fused if f["rule"] == "duplicate"]
    assert len(dups) >= 15  # Shape twice per layer, Unsqueeze(g, [0]) and what follows
    assert len(m.graph.node) <= 82  # onnxslim's count (onnxsim 98)
    assert not any(n.op_type == "Add" and n.input[0].endswith(".bias")
                   for n in m.graph.node)  # the zero biases of a dynamic x: x + 0 passed on
    onnx.checker.check_model(m, full_check=True)
    a = ort.InferenceSession(bert_dynamic.SerializeToString(),
                             providers=["CPUExecutionProvider"])
    b = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for batch, seq in ((1, 5), (3, 16), (1, 16), (3, 5)):
        ids = rng.integers(0, 100, (batch, seq))
        want, got = a.run(None, {"ids": ids})[0], b.run(None, {"ids": ids})[0]
        assert got.shape == (batch, seq, 64) and np.array_equal(got, want)


def _chain(tmp_path, blocks: int = 50) -> Model:
    """x -> blocks x (MatMul W -> Add B -> Relu), one weight for all (the bench chain)."""
    vi = helper.make_tensor_value_info
    nodes, prev = [], "x"
    for i in range(blocks):
        nodes += [helper.make_node("MatMul", [prev, "W"], [f"m{i}"], name=f"mm{i}"),
                  helper.make_node("Add", [f"m{i}", "B"], [f"a{i}"], name=f"add{i}"),
                  helper.make_node("Relu", [f"a{i}"], [f"r{i}"], name=f"relu{i}")]
        prev = f"r{i}"
    inits = [numpy_helper.from_array(np.eye(4, dtype=np.float32), "W"),
             numpy_helper.from_array(np.ones(4, np.float32), "B")]
    g = helper.make_graph(nodes, "g", [vi("x", F, [1, 4])], [vi(prev, F, [1, 4])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
              tmp_path / "chain.onnx")
    return load(tmp_path / "chain.onnx")


def test_the_int_graph_prunes_a_chain_and_keeps_what_the_full_pass_finds(tmp_path):
    from onnxsurgeon.session import indexed
    from onnxsurgeon.surgery._cse import _Constants, _maybe, plan_duplicates

    chain = _chain(tmp_path)
    index = indexed(chain)
    assert index.known_int_graph() is not None
    assert not _maybe(index, {"x"}, _Constants(index.graph, index, {"x"}))
    assert plan_duplicates(index, {"x"}) == ({}, [])
    onnx.save(_shapes(), tmp_path / "s.onnx")
    m = load(tmp_path / "s.onnx")
    index = indexed(m)
    assert index.known_int_graph() is not None
    assert _maybe(index, {"x"}, _Constants(index.graph, index, {"x"}))
    dups, _ = plan_duplicates(index, {"x"})
    plain, _ = plan_duplicates(indexed(_shapes()), {"x"})  # no int graph: the plain pass
    assert dups == plain and len(dups) == 7


def test_nodes_reading_only_equal_constants_merge(tmp_path):
    vi = helper.make_tensor_value_info
    nodes = [helper.make_node("Neg", ["c1"], ["n1"], name="neg1"),
             helper.make_node("Neg", ["c2"], ["n2"], name="neg2"),
             helper.make_node("Add", ["n1", "x"], ["a"], name="add1"),
             helper.make_node("Add", ["n2", "a"], ["y"], name="add2")]
    value = np.arange(4, dtype=np.float32)
    inits = [numpy_helper.from_array(value, "c1"), numpy_helper.from_array(value, "c2")]
    g = helper.make_graph(nodes, "g", [vi("x", F, [4])], [vi("y", F, [4])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
              tmp_path / "c.onnx")
    m = load(tmp_path / "c.onnx")
    r = surgery.fold(m, max_bytes=0)  # nothing folds: the Negs stay computed
    assert [f for f in r.fused if f["rule"] == "duplicate"] == [
        {"rule": "duplicate", "nodes": ["neg2"], "into": "neg1"}]
    assert [n.name for n in m.proto.graph.node] == ["neg1", "add1", "add2"]
    assert [t.name for t in m.proto.graph.initializer] == ["c1"]
    x = np.ones(4, np.float32)
    sess = ort.InferenceSession(m.proto.SerializeToString(), providers=["CPUExecutionProvider"])
    assert np.array_equal(sess.run(None, {"x": x})[0], x - 2 * value)


def test_a_duplicate_whose_output_a_body_reads_stays():
    m = _shapes()
    vi = helper.make_tensor_value_info
    branch = helper.make_graph([helper.make_node("Identity", ["n3"], ["b"])], "br", [],
                               [vi("b", F, ["n", 4])])
    g = m.graph
    g.input.append(vi("c", TensorProto.BOOL, []))
    g.node.append(helper.make_node("If", ["c"], ["i"], name="if", then_branch=branch,
                                   else_branch=branch))
    g.output.append(vi("i", F, ["n", 4]))
    r = surgery.fold(m, fuse=True)
    merged = {f["nodes"][0] for f in r.fused if f["rule"] == "duplicate"}
    assert "neg3" not in merged and {"shape2", "concat2", "leaky2"} <= merged


def test_a_reshape_to_the_shape_its_dynamic_input_has_is_a_no_op():
    vi = helper.make_tensor_value_info
    nodes = [helper.make_node("Reshape", ["x", "s04"], ["a"], name="copy0"),
             helper.make_node("Reshape", ["a", "sm14"], ["b"], name="infer"),
             helper.make_node("Reshape", ["b", "s0m1"], ["c"], name="dynamic_other"),
             helper.make_node("Relu", ["c"], ["d"], name="relu"),
             helper.make_node("Reshape", ["v", "sm1"], ["f"], name="flat"),
             helper.make_node("Neg", ["f"], ["e"], name="neg")]
    inits = [_c("s04", [0, 4]), _c("sm14", [-1, 4]), _c("s0m1", [0, -1]), _c("sm1", [-1])]
    g = helper.make_graph(nodes, "g", [vi("x", F, ["n", 4]), vi("v", F, ["k"])],
                          [vi("d", F, ["n", 4]), vi("e", F, ["k"])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    r = surgery.fold(m)
    assert sorted(f["nodes"][0] for f in r.fused if f["rule"] == "reshape") == [
        "copy0", "flat", "infer"]
    assert [n.name for n in m.graph.node] == ["dynamic_other", "relu", "neg"]
    assert m.graph.node[0].input[0] == "x"
    x, v = np.ones((3, 4), np.float32), np.arange(5, dtype=np.float32)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    d, e = sess.run(None, {"x": x, "v": v})
    assert np.array_equal(d, x) and np.array_equal(e, -v)
    m.graph.node.insert(2, helper.make_node("Reshape", ["c", "s04"], ["c2"], name="allowzero",
                                            allowzero=1))  # a 0 is a size then
    m.graph.node[3].input[0] = "c2"
    m.graph.initializer.append(_c("s04", [0, 4]))
    assert [f["nodes"] for f in surgery.fold(m).fused] == []


def test_a_concat_of_every_dim_of_a_shape_is_that_shape():
    vi = helper.make_tensor_value_info
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("Shape", ["x"], ["s_b"], name="shape_b"),
             helper.make_node("Gather", ["s", "i0"], ["g0"], name="g0", axis=0),
             helper.make_node("Gather", ["s_b", "im1"], ["g1"], name="g1", axis=0),
             helper.make_node("Unsqueeze", ["g0", "a0"], ["u0"], name="u0"),
             helper.make_node("Unsqueeze", ["g1", "a0"], ["u1"], name="u1"),
             helper.make_node("Concat", ["u0", "u1"], ["whole"], name="whole", axis=0),
             helper.make_node("Concat", ["u1", "u0"], ["swapped"], name="swapped", axis=0),
             helper.make_node("Concat", ["u0", "u1", "m1"], ["more"], name="more", axis=0),
             helper.make_node("Expand", ["one", "whole"], ["y"], name="expand"),
             helper.make_node("Reshape", ["x", "swapped"], ["t"], name="reshape"),
             helper.make_node("Reshape", ["x", "more"], ["r"], name="reshape3")]
    inits = [_c("i0", 0), _c("im1", -1), _c("a0", [0]), _c("m1", [1]),
             numpy_helper.from_array(np.ones(1, np.float32), "one")]
    g = helper.make_graph(nodes, "g", [vi("x", F, ["n", "k"])],
                          [vi("y", F, ["n", "k"]), vi("t", F, ["k", "n"]),
                           vi("r", F, ["n", "k", 1])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    before = _run(m, x)
    r = surgery.fold(m)
    assert [f["nodes"] for f in r.fused if f["rule"] == "shape_concat"] == [["whole"]]
    by = {n.name: n for n in m.graph.node}
    assert "whole" not in by and by["expand"].input[:] == ["one", "s"]
    assert {"swapped", "more"} <= set(by)  # another order, another rank: they stay
    got = _run(m, x)
    assert all(np.array_equal(got[k], before[k]) for k in before)


def test_the_dims_a_slice_with_computed_ends_keeps_fold_once_its_axes_are_constants():
    # torch's position ids: Slice(buffer[1, 32], 0, n, axes) with the axes computed from a
    # Constant; shape inference loses both dims, the second round knows dim 0 is 1
    vi = helper.make_tensor_value_info
    nodes = [helper.make_node("Constant", [], ["one"], name="const_one", value=_c("v", 1)),
             helper.make_node("Unsqueeze", ["one", "a0"], ["axes"], name="axes"),
             helper.make_node("Shape", ["x"], ["sx"], name="shape_x"),
             helper.make_node("Gather", ["sx", "i0"], ["n"], name="gather_n", axis=0),
             helper.make_node("Unsqueeze", ["n", "a0"], ["ends"], name="ends"),
             helper.make_node("Slice", ["buf", "z1", "ends", "axes"], ["pos"], name="slice"),
             helper.make_node("Shape", ["pos"], ["sp"], name="shape_pos"),
             helper.make_node("Gather", ["sp", "i0"], ["rows"], name="gather_rows", axis=0),
             helper.make_node("Cast", ["rows"], ["rf"], name="cast", to=F),
             helper.make_node("Mul", ["x", "rf"], ["y"], name="mul"),
             helper.make_node("Cast", ["pos"], ["p"], name="cast_pos", to=F)]
    inits = [_c("a0", [0]), _c("i0", 0), _c("z1", [0]),
             numpy_helper.from_array(np.arange(32, dtype=np.int64)[None, :] + 2, "buf")]
    g = helper.make_graph(nodes, "g", [vi("x", F, ["n"])], [vi("y", F, ["n"]),
                                                              vi("p", F, [1, "n"])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    xs = [np.arange(k, dtype=np.float32) + 1 for k in (3, 7)]
    before = [_run(m, x) for x in xs]
    r = surgery.fold(m)
    names = {n.name for n in m.graph.node}
    assert not {"shape_pos", "gather_rows", "cast"} & names and "slice" in names
    assert {"shape_pos", "gather_rows"} <= set(r.removed)
    for x, want in zip(xs, before, strict=True):
        got = _run(m, x)
        assert all(np.array_equal(got[k], want[k]) for k in want)
