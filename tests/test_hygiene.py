"""The hygiene verbs cleanup, toposort, outputs and set (issue 30): structure on hand-built graphs
(dead branches, unused initializers / value_info / functions / opsets, unsorted nodes in the main
graph, a body and a local function, nested bodies, a 200k reversed chain), each invariant proved
by ``--verify`` in-process, bad input in one line (exit 2), the records replayed
(``verify --rewrite-log``), a torch export cleaned up."""

from __future__ import annotations

import json
import re

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from onnxsurgeon import load, surgery
from onnxsurgeon.errors import InvalidModelError, NotFoundError, UsageError
from onnxsurgeon.record import records
from onnxsurgeon.schema import validate

from .cli_helpers import cli_main

F = TensorProto.FLOAT


def _vi(name: str, shape=(2,)) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, F, list(shape))


def _init(name: str, values) -> onnx.TensorProto:
    return helper.make_tensor(name, F, [len(values)], values)


def _dirty() -> onnx.ModelProto:
    """x -> a(Add W) -> y -> If(c; then: Mul(y, V) + a dead Neg; else: Identity y) -> z <output>;
    dead: b(Mul x U) -> d; an unused local function, an unused domain, a ghost value_info."""
    then_g = helper.make_graph(
        [helper.make_node("Mul", ["y", "V"], ["t"], name="tm"),
         helper.make_node("Neg", ["y"], ["t_dead"], name="tdead")],
        "then", [], [_vi("t")], [_init("V", [2.0, 3.0]), _init("V_unused", [1.0, 1.0])],
        value_info=[_vi("t_dead")])
    else_g = helper.make_graph([helper.make_node("Identity", ["y"], ["e"], name="ei")],
                               "else", [], [_vi("e")])
    fn = helper.make_function("my.fns", "Twice", ["a"], ["b"],
                              [helper.make_node("Add", ["a", "a"], ["b"])],
                              [helper.make_opsetid("", 17)])
    g = helper.make_graph(
        [helper.make_node("Add", ["x", "W"], ["y"], name="a"),
         helper.make_node("Mul", ["x", "U"], ["d"], name="b"),
         helper.make_node("If", ["c"], ["z"], name="if", then_branch=then_g, else_branch=else_g)],
        "g", [_vi("x"), helper.make_tensor_value_info("c", TensorProto.BOOL, [])], [_vi("z")],
        [_init("W", [1.0, 2.0]), _init("U", [3.0, 4.0])],
        value_info=[_vi("d"), _vi("ghost"), _vi("y")])
    return helper.make_model(g, functions=[fn], opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("my.fns", 1),
        helper.make_opsetid("com.unused", 1)])


def test_cleanup_drops_dead_parts_in_bodies_too_keeps_outer_reads():
    m = _dirty()
    r = surgery.cleanup(m)
    assert r.nodes == ("b",) and r.body_nodes == ("then/tdead",)
    assert set(r.initializers) == {"U", "V_unused"} and set(r.value_info) == {"d", "ghost",
                                                                             "t_dead"}
    assert r.functions == ("my.fns.Twice",) and set(r.opsets) == {"my.fns", "com.unused"}
    assert [n.name for n in m.graph.node] == ["a", "if"]  # y is read inside the body: a stays
    assert [t.name for t in m.graph.initializer] == ["W"]
    assert [o.domain for o in m.opset_import] == [""] and not m.functions
    then_g = next(a.g for a in m.graph.node[1].attribute if a.name == "then_branch")
    assert [n.name for n in then_g.node] == ["tm"] and [t.name for t in then_g.initializer] == ["V"]
    onnx.checker.check_model(m, full_check=True)
    again = surgery.cleanup(m)  # idempotent: nothing left to remove
    assert not any(again.counts().values())


def test_cleanup_nested_bodies_keep_what_an_inner_body_reads_from_the_main_graph(tmp_path,
                                                                                  capsys):
    """Main -> If -> If: the innermost branch reads main-graph tensor y (its producer stays) and
    holds a dead node (it goes); a main-graph node only a dead inner node read goes too."""
    inner_then = helper.make_graph(
        [helper.make_node("Mul", ["y", "y"], ["it"], name="imul"),
         helper.make_node("Neg", ["w"], ["idead"], name="idead")],
        "inner_then", [], [_vi("it")])
    inner_else = helper.make_graph([helper.make_node("Identity", ["y"], ["ie"], name="iid")],
                                   "inner_else", [], [_vi("ie")])
    outer_then = helper.make_graph(
        [helper.make_node("If", ["c"], ["ot"], name="inner_if", then_branch=inner_then,
                          else_branch=inner_else)], "outer_then", [], [_vi("ot")])
    outer_else = helper.make_graph([helper.make_node("Identity", ["y"], ["oe"], name="oid")],
                                   "outer_else", [], [_vi("oe")])
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="r"),
         helper.make_node("Neg", ["x"], ["w"], name="only_for_dead"),
         helper.make_node("If", ["c"], ["z"], name="outer_if", then_branch=outer_then,
                          else_branch=outer_else)],
        "g", [_vi("x"), helper.make_tensor_value_info("c", TensorProto.BOOL, [])], [_vi("z")])
    src = tmp_path / "nested.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), src)
    out = tmp_path / "clean.onnx"
    code, stdout, err = cli_main(capsys, "cleanup", src, "-o", out, "--verify", "--json")
    assert code == 0, err
    data = json.loads(stdout)
    assert data["verify"]["ok"] is True
    assert data["removed"]["nodes"] == ["only_for_dead"]
    assert data["removed"]["body_nodes"] == ["inner_then/idead"]
    kept = load(out).proto.graph
    assert [n.name for n in kept.node] == ["r", "outer_if"]


def test_outputs_add_remove_and_prune_only_what_only_they_needed():
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["h"], name="A"),
         helper.make_node("Neg", ["h"], ["y"], name="B"),
         helper.make_node("Mul", ["h", "K"], ["z"], name="C"),
         helper.make_node("Mul", ["x", "K"], ["dead"], name="D")],
        "g", [_vi("x")], [_vi("y"), _vi("z")], [_init("K", [2.0, 2.0]), _init("J", [1.0, 1.0])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    r = surgery.outputs(m, add=["h"], remove=["z"])
    assert r.added == ("h",) and r.removed == ("z",) and r.pruned_nodes == ("C",)
    assert r.pruned_initializers == ()  # K is still read by D (dead before: cleanup's job)
    assert [o.name for o in m.graph.output] == ["y", "h"]
    assert m.graph.output[1].type.tensor_type.elem_type == F
    assert [n.name for n in m.graph.node] == ["A", "B", "D"]
    with pytest.raises(UsageError, match="not a graph output"):
        surgery.outputs(m, remove=["D"])  # node D makes 'dead', not an output
    with pytest.raises(UsageError, match="already"):
        surgery.outputs(m, add=["y"])
    with pytest.raises(NotFoundError, match="did you mean"):
        surgery.outputs(m, add=["hh"])
    r = surgery.cleanup(m)  # on the int graph: D was dead before; K and J go with it
    assert r.nodes == ("D",) and set(r.initializers) == {"K", "J"}
    assert not any(surgery.cleanup(m).counts().values())  # every node live: the fast path
    assert [n.name for n in m.graph.node] == ["A", "B"] and not m.graph.initializer


def test_outputs_refuses_an_untyped_tensor():
    g = helper.make_graph([helper.make_node("Custom", ["x"], ["h"], name="A", domain="x.y"),
                           helper.make_node("Relu", ["x"], ["y"], name="B")],
                          "g", [_vi("x")], [_vi("y")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("x.y", 1)])
    with pytest.raises(UsageError, match="no known type"):
        surgery.outputs(m, add=["h"])
    assert [o.name for o in m.graph.output] == ["y"]  # unchanged


def test_outputs_refuses_a_tensor_of_unknown_rank_in_one_line(tmp_path, capsys):
    """Squeeze without axes of a tensor of symbolic dims: its dtype is known, its rank not, and
    onnx.checker wants a graph output's shape. A torch export's attention holds such a tensor;
    outputs --add used to write it shapeless and exit 3 (the save's checker)."""
    src, out = tmp_path / "m.onnx", tmp_path / "out.onnx"
    onnx.save_model(onnx.parser.parse_model("""<ir_version: 8, opset_import: ["": 17]>
g (float[N, M] x) => (float[N, M] y) {
  s = Squeeze(x)
  r = Relu(s)
  y = Neg(x)
}"""), str(src))
    code, _, err = cli_main(capsys, "outputs", src, "-o", out, "--add", "s")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "tensor 's' has no known rank" in err and not out.exists()
    m = onnx.parser.parse_model("""<ir_version: 8, opset_import: ["": 17]>
g (float[N, M] x) => (float[N, M] y) {
  s = Relu(x)
  y = Neg(s)
}""")
    surgery.outputs(m, add=["s"])  # a known rank goes through
    onnx.checker.check_model(m, full_check=True)
    assert [o.name for o in m.graph.output] == ["y", "s"]


def _reversed_chain(n: int) -> onnx.ModelProto:
    g = helper.make_graph([], "chain", [_vi("t0")], [_vi(f"t{n}")])
    template = helper.make_node("Neg", ["a"], ["b"])
    for i in range(n - 1, -1, -1):  # the last node first
        node = g.node.add()
        node.CopyFrom(template)
        node.input[0], node.output[0], node.name = f"t{i}", f"t{i + 1}", f"n{i}"
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_toposort_200k_reversed_chain_is_iterative_and_stable():
    m = _reversed_chain(200_000)
    r = surgery.toposort(m)
    assert r.moved == {"main": 200_000}  # even: no node keeps its place
    nodes = m.graph.node
    assert nodes[0].name == "n0" and nodes[100_000].name == "n100000"
    assert nodes[-1].name == "n199999"
    small = _dirty()  # stable: a model in order keeps its bytes but for the record
    before = small.SerializeToString()
    assert surgery.toposort(small).moved == {}
    small.ClearField("metadata_props")
    assert small.SerializeToString() == before


def test_load_sorts_a_reversed_chain_stably(tmp_path):
    # load's own sort: Kahn on ints, the messages swapped in place (its cost against the protobuf
    # floor is measured by benchmarks/bench_hygiene_c.py --reversed, not here)
    n = 20_000
    rev = tmp_path / "rev.onnx"
    onnx.save(_reversed_chain(n), rev)
    loaded = load(rev)
    assert loaded.warnings and f"{n} nodes were out of topological order" in loaded.warnings[0]
    assert [x.name for x in loaded.proto.graph.node[::5_000]] == [
        "n0", "n5000", "n10000", "n15000"]  # the stable order


@pytest.mark.parametrize("nodes, needle", [
    ([("Neg", "b", "c", "late"), ("Add", "a ghost", "b", "add"), ("Relu", "x", "a", "r")],
     "tensor 'ghost' read by node 'add' in the main graph is never produced (dangling)"),
    ([("Neg", "b", "c", "late"), ("Add", "a c", "b", "add"), ("Relu", "x", "a", "r")],
     "has a cycle: 'add' -> 'late' -> 'add'"),
], ids=["dangling", "cycle"])
def test_the_sort_at_load_still_names_a_dangling_read_and_a_cycle(nodes, needle):
    from onnxsurgeon.validate import validate as check

    g = helper.make_graph([helper.make_node(op, i.split(), [o], name=nm) for op, i, o, nm in nodes],
                          "g", [_vi("x")], [_vi("c")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(InvalidModelError, match=re.escape(needle)):
        check(m)


def test_load_sorts_a_main_graph_holding_bodies_in_place():
    # the If (reading 'h', made by a later node) and its body move with their messages; the
    # body's read of the outer 'h' and the tensor check of the holders use the new positions
    then_g = helper.make_graph([helper.make_node("Mul", ["h", "V"], ["t"], name="tm")],
                               "then", [], [_vi("t")], [_init("V", [2.0, 3.0])])
    else_g = helper.make_graph([helper.make_node("Identity", ["h"], ["e"], name="ei")],
                               "else", [], [_vi("e")])
    g = helper.make_graph(
        [helper.make_node("If", ["c"], ["z"], name="if", then_branch=then_g, else_branch=else_g),
         helper.make_node("Neg", ["x"], ["h"], name="neg")],
        "g", [_vi("x"), helper.make_tensor_value_info("c", TensorProto.BOOL, [])], [_vi("z")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        p = f"{d}/m.onnx"
        onnx.save(m, p)
        loaded = load(p)
    assert [n.name for n in loaded.proto.graph.node] == ["neg", "if"]
    assert loaded.proto.graph.node[1].attribute[0].g.node[0].name in ("tm", "ei")
    onnx.checker.check_model(loaded.proto, full_check=True)
    r = surgery.toposort(loaded)
    assert r.moved == {}


def _unsorted_function_model() -> onnx.ModelProto:
    fn = helper.make_function("my.fns", "F", ["a"], ["c"],
                              [helper.make_node("Neg", ["b"], ["c"]),
                               helper.make_node("Relu", ["a"], ["b"])],
                              [helper.make_opsetid("", 17)])
    body = helper.make_graph([helper.make_node("Neg", ["q"], ["r"], name="bn"),
                              helper.make_node("Relu", ["y"], ["q"], name="br")],
                             "body", [], [_vi("r")])
    other = helper.make_graph([helper.make_node("Identity", ["y"], ["s"])], "other", [], [_vi("s")])
    g = helper.make_graph(
        [helper.make_node("F", ["x"], ["y"], name="call", domain="my.fns"),
         helper.make_node("If", ["c"], ["z"], name="if", then_branch=body, else_branch=other)],
        "g", [_vi("x"), helper.make_tensor_value_info("c", TensorProto.BOOL, [])], [_vi("z")])
    return helper.make_model(g, functions=[fn], opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("my.fns", 1)])


def test_toposort_sorts_bodies_and_functions_load_names_it_as_the_fix(tmp_path, capsys):
    m = _unsorted_function_model()
    src = tmp_path / "m.onnx"
    onnx.save(m, src)
    with pytest.raises(InvalidModelError, match="onnxsurgeon toposort MODEL -o OUT"):
        load(src)
    twin = onnx.ModelProto()
    twin.CopyFrom(m)
    r = surgery.toposort(twin)
    assert r.moved == {"function my.fns.F": 2, "if/body": 2}
    assert [n.op_type for n in twin.functions[0].node] == ["Relu", "Neg"]
    out = tmp_path / "o.onnx"
    before = src.read_bytes()
    code, stdout, err = cli_main(capsys, "toposort", src, "-o", out, "--verify", "--json")
    assert code == 0, err
    data = json.loads(stdout)
    validate("toposort", data)
    assert data["verify"]["ok"] is True and data["moved"] == {"function my.fns.F": 2}
    assert src.read_bytes() == before
    assert [n.op_type for n in load(out).proto.functions[0].node] == ["Relu", "Neg"]


@pytest.fixture(scope="module")
def dirty_file(tmp_path_factory):
    d = tmp_path_factory.mktemp("hygiene")
    m = _dirty()
    p = d / "dirty.onnx"
    onnx.save(m, p)
    np.save(d / "w.npy", np.array([5.0, 7.0], np.float32))
    np.save(d / "bad.npy", np.array([5.0, 7.0, 1.0], np.float32))
    return d, p


@pytest.mark.parametrize("argv, kind", [
    (["cleanup"], "cleanup"),
    (["toposort"], "toposort"),
    (["outputs", "--add", "y", "--remove", "z"], "outputs"),
    (["set", "--attr", "if.then_branch=1", "--weight", "W=w.npy"], None),
    (["set", "--weight", "W=w.npy"], "set_values"),
])
def test_each_verb_is_proved_by_verify_and_replays(dirty_file, tmp_path, capsys, argv, kind,
                                                   monkeypatch):
    d, src = dirty_file
    monkeypatch.chdir(d)
    out = tmp_path / "o.onnx"
    code, stdout, err = cli_main(capsys, argv[0], src, "-o", out, *argv[1:], "--verify",
                                 "--json")
    if kind is None:  # a graph attribute cannot be set from text: one line, exit 2
        assert code == 2 and "cannot be set from text" in err and len(err.strip().splitlines()) == 1
        assert not out.exists()
        return
    assert code == 0, err
    data = json.loads(stdout)
    validate(argv[0], data)
    assert data["verify"]["ok"] is True and data["verify"]["kind"] == f"rewrite:{kind}"
    assert records(load(out).proto)[-1].op == kind
    code, stdout, err = cli_main(capsys, "verify", src, out, "--rewrite-log", "--json")
    assert code == 0, err
    assert json.loads(stdout)["ok"] is True


def test_set_attribute_and_weight_checked_against_schema(dirty_file, tmp_path):
    d, _ = dirty_file
    g = helper.make_graph([helper.make_node("LeakyRelu", ["x"], ["y"], name="act.1"),
                           helper.make_node("Add", ["y", "W"], ["z"], name="add")],
                          "g", [_vi("x")], [_vi("z")], [_init("W", [1.0, 2.0])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    r = surgery.set_values(m, attrs={"act.1.alpha": "0.25"}, weights={"W": d / "w.npy"})
    assert r.attrs == {"act.1.alpha": "0.25"} and m.graph.node[0].attribute[0].f == 0.25
    assert list(onnx.numpy_helper.to_array(m.graph.initializer[0])) == [5.0, 7.0]
    for kwargs, needle in [({"attrs": {"act.1.alpah": "1"}}, "did you mean 'alpha'"),
                           ({"attrs": {"act.1.alpha": "x"}}, "not a float"),
                           ({"attrs": {"act.2.alpha": "1"}}, "did you mean 'act.1'"),
                           ({"weights": {"W": d / "bad.npy"}}, "--reshape"),
                           ({"weights": {"y": d / "w.npy"}}, "not an initializer")]:
        before = m.SerializeToString()
        with pytest.raises((UsageError, NotFoundError), match=needle):
            surgery.set_values(m, **kwargs)
        assert m.SerializeToString() == before  # a refusal changes nothing
    before = m.SerializeToString()  # [3] does not broadcast against the Add's [2]: refused
    with pytest.raises(UsageError, match="node 'add' .Add. does not accept the new values"):
        surgery.set_values(m, weights={"W": d / "bad.npy"}, reshape=True)
    assert m.SerializeToString() == before
    np.save(tmp_path / "one.npy", np.array([4.0], np.float32))  # [1] broadcasts: taken
    surgery.set_values(m, weights={"W": tmp_path / "one.npy"}, reshape=True)
    assert list(m.graph.initializer[0].dims) == [1]


def test_external_data_cleanup_and_set_write_only_what_stays(tmp_path, capsys):
    big = np.arange(4096, dtype=np.float32)
    g = helper.make_graph(
        [helper.make_node("Add", ["x", "W"], ["y"], name="a"),
         helper.make_node("Mul", ["x", "U"], ["dead"], name="b")],
        "g", [_vi("x", (4096,))], [_vi("y", (4096,))],
        [onnx.numpy_helper.from_array(big, "W"), onnx.numpy_helper.from_array(big * 2, "U")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    src = tmp_path / "ext.onnx"
    onnx.save(m, src, save_as_external_data=True, location="ext.data", size_threshold=0)
    data_before = (tmp_path / "ext.data").read_bytes()
    out = tmp_path / "c.onnx"
    code, _, err = cli_main(capsys, "cleanup", src, "-o", out, "--verify")
    assert code == 0, err
    assert (tmp_path / "c.onnx.data").stat().st_size == big.nbytes  # U's bytes not copied
    np.save(tmp_path / "w.npy", big + 1)
    out2 = tmp_path / "s.onnx"
    code, _, err = cli_main(capsys, "set", src, "-o", out2, "--weight",
                            f"W={tmp_path / 'w.npy'}", "--verify")
    assert code == 0, err
    written = load(out2).proto.graph.initializer[0]
    assert written.data_location == TensorProto.EXTERNAL  # the new values in the output's file
    from onnxsurgeon.external import read_tensor
    assert np.array_equal(read_tensor(written, tmp_path), big + 1)
    assert (tmp_path / "ext.data").read_bytes() == data_before  # the input's file untouched


def test_bad_input_is_one_line_exit_2(dirty_file, tmp_path, capsys):
    _, src = dirty_file
    out = tmp_path / "o.onnx"
    for argv, needle in [(["outputs"], "nothing to change"),
                         (["outputs", "--add", "yy"], "did you mean"),
                         (["set", "--attr", "a.alpha=1"], "has no attribute 'alpha'"),
                         (["set", "--attr", "noattr=1"], "NODE.KEY"),
                         (["set", "--weight", "W=missing.npy"], "does not exist")]:
        code, _, err = cli_main(capsys, argv[0], src, "-o", out, *argv[1:])
        assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
        assert "Traceback" not in err and not out.exists()


@pytest.mark.slow
@pytest.mark.torch
def test_cleanup_of_a_torch_export_keeps_outputs_identical(tmp_path, capsys):
    torch = pytest.importorskip("torch")

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 3)
            self.aux = torch.nn.Linear(4, 2)

        def forward(self, x):
            return self.fc(x).relu(), self.aux(x)

    exported = tmp_path / "t.onnx"
    torch.onnx.export(Tiny(), (torch.randn(1, 4),), str(exported), dynamo=False,
                      input_names=["x"], output_names=["y", "aux"], opset_version=17)
    m = onnx.load(exported)
    del m.graph.output[1]  # the user drops a head by hand: its nodes and weights stay behind
    src = tmp_path / "dropped.onnx"
    onnx.save(m, src)
    out = tmp_path / "c.onnx"
    code, stdout, err = cli_main(capsys, "cleanup", src, "-o", out, "--verify", "--json")
    assert code == 0, err
    data = json.loads(stdout)
    assert data["verify"]["ok"] is True and data["counts"]["nodes"] == 1
    assert set(data["removed"]["initializers"]) == {"aux.weight", "aux.bias"}
    assert [o.name for o in load(out).proto.graph.output] == ["y"]


def test_set_names_an_unnamed_node_by_its_label_as_inspect_lists_it(tmp_path, capsys):
    """inspect --nodes lists an unnamed node as ``LeakyRelu#1``; set --attr took only node
    names (and bypass its own reading of the label), so 'LeakyRelu#1.alpha=0.5' was refused as
    not found. The label now resolves wherever a node is named."""
    src, out = tmp_path / "m.onnx", tmp_path / "out.onnx"
    onnx.save_model(onnx.parser.parse_model("""<ir_version: 8, opset_import: ["": 17]>
g (float[4] x) => (float[4] y) {
  c = Constant<value = float[4] {1, 2, 3, 4}>()
  y = LeakyRelu<alpha = 0.1>(x)
  z = Add(x, c)
}"""), str(src))
    code, listing, _ = cli_main(capsys, "inspect", src, "--nodes")
    assert code == 0 and "LeakyRelu#1" in listing
    code, _, err = cli_main(capsys, "set", src, "-o", out, "--attr", "LeakyRelu#1.alpha=0.5")
    assert code == 0, err
    node = onnx.load(str(out)).graph.node[1]
    assert node.op_type == "LeakyRelu" and not node.name
    assert [(a.name, a.f) for a in node.attribute] == [("alpha", 0.5)]
    x = np.array([-2, -1, 1, 2], np.float32)
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(sess.run(["y"], {"x": x})[0], np.where(x > 0, x, 0.5 * x))
    code, _, err = cli_main(capsys, "set", src, "-o", out, "--attr", "Add#1.alpha=0.5")
    assert code == 2 and "node 'Add#1' not found" in err  # the label of another op: not found


@pytest.mark.parametrize("value", ["2,2", "1,1", "3,3"])
def test_set_an_attribute_that_changes_declared_shapes_redeclares_them(tmp_path, capsys, value):
    """onnx-graphsurgeon's example of modifying a node's attributes: Conv strides 1 -> 2 makes
    the declared output [1, 1, 4, 4] stale; the save's checker failed (exit 3). The main graph's
    outputs and value_info are inferred anew when the new values change them."""
    model = onnx.parser.parse_model("""<ir_version: 8, opset_import: ["": 17]>
g (float[1, 1, 4, 4] x) => (float[1, 1, 4, 4] y) <float[1, 1, 1, 1] w = {2}> {
  c = Conv<strides = [1, 1]>(x, w)
  y = Relu(c)
}""")
    model.graph.node[0].name = "conv"
    model.graph.value_info.append(helper.make_tensor_value_info("c", TensorProto.FLOAT, [1, 1, 4, 4]))
    src, out = tmp_path / "m.onnx", tmp_path / "out.onnx"
    onnx.save_model(model, str(src))
    code, _, err = cli_main(capsys, "set", src, "-o", out, "--attr", f"conv.strides={value}")
    assert code == 0, err
    got = onnx.load(str(out))
    onnx.checker.check_model(got, full_check=True)
    step = int(value.split(",")[0])
    want = [1, 1, -(-4 // step), -(-4 // step)]
    assert [d.dim_value for d in got.graph.output[0].type.tensor_type.shape.dim] == want
    assert [d.dim_value for d in got.graph.value_info[0].type.tensor_type.shape.dim] == want
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4) - 8
    y = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(y, np.maximum(2 * x[:, :, ::step, ::step], 0))
    if value == "1,1":  # nothing changes: the declarations are the model's own
        assert got.graph.output[0] == model.graph.output[0]


def test_set_a_value_inference_refuses_is_one_line_exit_2(tmp_path, capsys):
    model = onnx.parser.parse_model("""<ir_version: 8, opset_import: ["": 17]>
g (float[2, 3] x) => (float[3, 2] y) {
  y = Transpose<perm = [1, 0]>(x)
}""")
    model.graph.node[0].name = "tr"
    src, out = tmp_path / "m.onnx", tmp_path / "out.onnx"
    onnx.save_model(model, str(src))
    code, _, err = cli_main(capsys, "set", src, "-o", out, "--attr", "tr.perm=0,5")
    assert code == 2 and len(err.strip().splitlines()) == 1 and not out.exists(), err
    assert "node 'tr' (Transpose) does not accept the new values: Invalid attribute perm" in err
