"""``fold``'s simplifications inside If/Loop/Scan bodies (any depth) and local functions
(issue 30): the same rules as in the main graph, each ``fused`` entry naming its graph; the
outputs agree in onnxruntime (graph optimizations off) on every branch; a body's new weight
name never repeats a host name; a function input's unknown type skips its site; a failure
while a later body is planned leaves the model byte-unchanged; ``fold --json --verify`` and
``verify --rewrite-log`` through the CLI."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsurgeon import load, surgery
from onnxsurgeon.errors import InvalidModelError
from onnxsurgeon.record import FoldRecord, records
from onnxsurgeon.schema import validate
from onnxsurgeon.selectors import body_graphs

from .cli_helpers import cli_main

F, B = TensorProto.FLOAT, TensorProto.BOOL
RNG = np.random.default_rng(3)
vi = helper.make_tensor_value_info
mk = helper.make_node


def _w(name: str, *shape: int, low: float | None = None) -> onnx.TensorProto:
    value = (RNG.uniform(low, 2.0, shape) if low is not None else RNG.standard_normal(shape))
    return numpy_helper.from_array(value.astype(np.float32), name)


def _model(nodes, inputs, outputs, inits, functions=(), opsets=(("", 17),)) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets],
                          functions=list(functions))
    onnx.checker.check_model(m, full_check=True)
    return m


def _run(m: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    s = ort.InferenceSession(m.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds), strict=True))


def _conv_bn_nodes(x: str, out: str, p: str) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """Conv(x, {p}W, {p}Bc) -> BatchNormalization -> Relu -> out, the weights as the body's
    initializers (x is [1, 3, 6, 6])."""
    nodes = [mk("Conv", [x, f"{p}W", f"{p}Bc"], [f"{p}c"], name=f"{p}conv", pads=[1, 1, 1, 1]),
             mk("BatchNormalization", [f"{p}c", f"{p}s", f"{p}b", f"{p}mean", f"{p}var"],
                [f"{p}n"], name=f"{p}bn", epsilon=1e-3),
             mk("Relu", [f"{p}n"], [out], name=f"{p}relu")]
    inits = [_w(f"{p}W", 4, 3, 3, 3), _w(f"{p}Bc", 4), _w(f"{p}s", 4), _w(f"{p}b", 4),
             _w(f"{p}mean", 4), _w(f"{p}var", 4, low=0.5)]
    return nodes, inits


def _if_model() -> onnx.ModelProto:
    """An If: then = Identity -> MatMul(host weight W) + Add(body bias) -> Flatten...; else =
    Conv + BatchNormalization on an image input, flattened to the then-branch's shape."""
    then = helper.make_graph(
        [mk("Identity", ["x"], ["xi"], name="id"),
         mk("MatMul", ["xi", "W"], ["m"], name="mm"),
         mk("Add", ["m", "Bt"], ["t_out"], name="add")],
        "then", [], [vi("t_out", F, [3, 48])], [_w("Bt", 48)])
    conv, inits = _conv_bn_nodes("img", "r", "e_")
    els = helper.make_graph(
        [*conv, mk("Reshape", ["r", "shape"], ["e_out"], name="flat")],
        "else", [], [vi("e_out", F, [3, 48])], inits)
    shape = numpy_helper.from_array(np.array([3, 48], np.int64), "shape")
    return _model([mk("If", ["c"], ["y"], name="if", then_branch=then, else_branch=els)],
                  [vi("x", F, [3, 4]), vi("img", F, [1, 3, 6, 6]), vi("c", B, [])],
                  [vi("y", F, [3, 48])], [_w("W", 4, 48), shape])


def _feeds(m: onnx.ModelProto, **fixed: np.ndarray) -> dict[str, np.ndarray]:
    out = {}
    for i in m.graph.input:
        if i.name in fixed:
            out[i.name] = fixed[i.name]
            continue
        dims = [d.dim_value for d in i.type.tensor_type.shape.dim]
        out[i.name] = RNG.standard_normal(dims).astype(np.float32)
    return out


def _agree(before: onnx.ModelProto, after: onnx.ModelProto, feeds_list) -> None:
    for feeds in feeds_list:
        want, got = _run(before, feeds), _run(after, feeds)
        assert want.keys() == got.keys()
        for name, value in want.items():
            np.testing.assert_allclose(got[name], value, rtol=1e-4, atol=1e-5)


def _ops(graph: onnx.GraphProto) -> list[str]:
    return [n.op_type for n in graph.node]


def _bodies(m: onnx.ModelProto) -> dict[str, onnx.GraphProto]:
    return dict(body_graphs(m.graph))


def test_an_if_whose_branches_hold_matmul_add_and_conv_bn_gets_both_fused():
    m = _if_model()
    original = onnx.ModelProto()
    original.CopyFrom(m)
    r = surgery.fold(m)
    got = sorted((f["graph"], f["rule"], tuple(f["nodes"]), f["into"]) for f in r.fused)
    assert got == [("if/else_branch", "conv_batchnorm", ("e_conv", "e_bn"), "e_conv"),
                   ("if/then_branch", "identity", ("id",), ""),
                   ("if/then_branch", "matmul_add_gemm", ("mm", "add"), "mm")]
    bodies = _bodies(m)
    assert _ops(bodies["if/then_branch"]) == ["Gemm"]
    assert list(bodies["if/then_branch"].node[0].input) == ["x", "W", "Bt"]  # reads host's W
    els = bodies["if/else_branch"]
    assert _ops(els) == ["Conv", "Relu", "Reshape"]
    assert list(els.node[0].input) == ["img", "e_W_bn", "e_Bc_bn_bias"]
    assert {t.name for t in els.initializer} == {"e_W_bn", "e_Bc_bn_bias"}  # the old ones dead
    assert {t.name for t in m.graph.initializer} == {"W", "shape"}  # host weights untouched
    onnx.checker.check_model(m, full_check=True)
    base = _feeds(original, c=np.array(True))
    _agree(original, m, [base, {**base, "c": np.array(False)}])
    assert surgery.fold(m).fused == ()  # idempotent


def test_a_loop_body_fuses_its_matmul_add_and_runs_the_same():
    body = helper.make_graph(
        [mk("MatMul", ["h", "Wl"], ["m"], name="mm"),
         mk("Add", ["m", "Bl"], ["a"], name="add"),
         mk("Tanh", ["a"], ["h_next"], name="tanh"),
         mk("Identity", ["cond"], ["cond_out"], name="keep")],
        "body", [vi("i", TensorProto.INT64, []), vi("cond", B, []), vi("h", F, [2, 4])],
        [vi("cond_out", B, []), vi("h_next", F, [2, 4])], [_w("Bl", 4)])
    trips = numpy_helper.from_array(np.array(3, np.int64), "trips")
    yes = numpy_helper.from_array(np.array(True), "yes")
    m = _model([mk("Loop", ["trips", "yes", "h0"], ["h"], name="loop", body=body)],
               [vi("h0", F, [2, 4])], [vi("h", F, [2, 4])], [_w("Wl", 4, 4), trips, yes])
    original = onnx.ModelProto()
    original.CopyFrom(m)
    r = surgery.fold(m)
    assert [(f["graph"], f["rule"]) for f in r.fused] == [("loop/body", "matmul_add_gemm")]
    # the Identity making the body's output keeps it: it stays
    assert _ops(_bodies(m)["loop/body"]) == ["Gemm", "Tanh", "Identity"]
    onnx.checker.check_model(m, full_check=True)
    _agree(original, m, [_feeds(original)])


def test_a_scan_body_fuses_its_matmul_add_and_runs_the_same():
    # each step: state[1, 4] -> MatMul(Ws) + Add(bias) + the scanned row -> next state
    body = helper.make_graph(
        [mk("MatMul", ["s", "Ws"], ["m"], name="mm"),
         mk("Add", ["m", "Bs"], ["a"], name="add"),
         mk("Add", ["a", "row"], ["s_next"], name="plus"),
         mk("Identity", ["s_next"], ["out_row"], name="emit")],
        "body", [vi("s", F, [1, 4]), vi("row", F, [4])],
        [vi("s_next", F, [1, 4]), vi("out_row", F, [1, 4])], [_w("Bs", 4)])
    m = _model([mk("Scan", ["s0", "rows"], ["s_last", "outs"], name="scan", body=body,
                   num_scan_inputs=1)],
               [vi("s0", F, [1, 4]), vi("rows", F, [5, 4])],
               [vi("s_last", F, [1, 4]), vi("outs", F, [5, 1, 4])], [_w("Ws", 4, 4)])
    original = onnx.ModelProto()
    original.CopyFrom(m)
    r = surgery.fold(m)
    assert [(f["graph"], f["rule"], f["nodes"]) for f in r.fused] == [
        ("scan/body", "matmul_add_gemm", ["mm", "add"])]
    assert _ops(_bodies(m)["scan/body"]) == ["Gemm", "Add", "Identity"]
    onnx.checker.check_model(m, full_check=True)
    _agree(original, m, [_feeds(original)])


def _nested() -> onnx.ModelProto:
    """If(c1) then: If(c2) then: MatMul(x, W) + Add(b) (W in the main graph, b in the outer
    branch, read two levels down); every other branch a Neg."""
    inner_then = helper.make_graph(
        [mk("MatMul", ["x", "W"], ["m"], name="mm"), mk("Add", ["m", "b"], ["it"], name="add")],
        "inner_then", [], [vi("it", F, [3, 4])])
    inner_else = helper.make_graph([mk("Neg", ["x"], ["ie"], name="neg_in")], "inner_else", [],
                                   [vi("ie", F, [3, 4])])
    outer_then = helper.make_graph(
        [mk("If", ["c2"], ["ot"], name="inner", then_branch=inner_then, else_branch=inner_else)],
        "outer_then", [], [vi("ot", F, [3, 4])], [_w("b", 4)])
    outer_else = helper.make_graph([mk("Neg", ["x"], ["oe"], name="neg_out")], "outer_else", [],
                                   [vi("oe", F, [3, 4])])
    return _model([mk("If", ["c1"], ["y"], name="outer", then_branch=outer_then,
                      else_branch=outer_else)],
                  [vi("x", F, [3, 4]), vi("c1", B, []), vi("c2", B, [])], [vi("y", F, [3, 4])],
                  [_w("W", 4, 4)])


def test_a_body_nested_two_deep_is_fused_with_its_path():
    m = _nested()
    original = onnx.ModelProto()
    original.CopyFrom(m)
    r = surgery.fold(m)
    path = "outer/then_branch/inner/then_branch"
    assert [dict(f) for f in r.fused] == [{"rule": "matmul_add_gemm", "nodes": ["mm", "add"],
                                           "into": "mm", "graph": path}]
    inner = _bodies(m)[path]
    assert _ops(inner) == ["Gemm"] and list(inner.node[0].input) == ["x", "W", "b"]
    onnx.checker.check_model(m, full_check=True)
    base = _feeds(original, c1=np.array(True), c2=np.array(True))
    _agree(original, m, [base, {**base, "c2": np.array(False)}, {**base, "c1": np.array(False)}])


def test_a_body_conv_on_host_weights_fuses_and_the_host_weights_only_it_read_go():
    conv, inits = _conv_bn_nodes("img", "r", "h_")
    then = helper.make_graph(conv, "then", [], [vi("r", F, [1, 4, 6, 6])])
    els = helper.make_graph([mk("Relu", ["h_pad"], ["e"], name="relu_e")], "else", [],
                            [vi("e", F, [1, 4, 6, 6])])
    pad = numpy_helper.from_array(np.zeros((1, 4, 6, 6), np.float32), "h_pad")
    m = _model([mk("If", ["c"], ["y"], name="if", then_branch=then, else_branch=els),
                mk("Identity", ["h_b"], ["bias"], name="also")],  # the BN bias read elsewhere
               [vi("img", F, [1, 3, 6, 6]), vi("c", B, [])],
               [vi("y", F, [1, 4, 6, 6]), vi("bias", F, [4])], [*inits, pad])
    original = onnx.ModelProto()
    original.CopyFrom(m)
    r = surgery.fold(m)
    assert [(f["graph"], f["rule"]) for f in r.fused] == [("if/then_branch", "conv_batchnorm")]
    then = _bodies(m)["if/then_branch"]
    assert list(then.node[0].input) == ["img", "h_W_bn", "h_Bc_bn_bias"]
    assert {t.name for t in then.initializer} == {"h_W_bn", "h_Bc_bn_bias"}
    # the weights only the body read are gone; one read by the main graph stays
    assert {t.name for t in m.graph.initializer} == {"h_b", "h_pad"}
    onnx.checker.check_model(m, full_check=True)
    base = _feeds(original, c=np.array(True))
    _agree(original, m, [base, {**base, "c": np.array(False)}])


def _constant(name: str, value: np.ndarray) -> onnx.NodeProto:
    return mk("Constant", [], [name], value=numpy_helper.from_array(value, name))


def _function_model() -> onnx.ModelProto:
    """A local function: x -> Cast -> Reshape([3, 4]) -> MatMul(W) + Add(B) (typed inside:
    fused) and x -> MatMul(W) + Add(B) (x an untyped function input: stays), the weights
    Constant nodes, the MatMuls and Adds unnamed; a BatchNormalization whose epsilon is a
    function attribute (never read as 0)."""
    w = RNG.standard_normal((4, 4)).astype(np.float32)
    b = RNG.standard_normal(4).astype(np.float32)
    eps = helper.make_attribute_ref("epsilon", TensorProto.FLOAT) if hasattr(
        helper, "make_attribute_ref") else None
    bn = mk("BatchNormalization", ["q", "s", "bb", "mean", "var"], ["z"], name="bn")
    if eps is not None:
        bn.attribute.append(eps)
    nodes = [
        _constant("W", w), _constant("B", b),
        _constant("shape", np.array([3, 4], np.int64)),
        mk("Cast", ["x"], ["xc"], name="cast", to=F),
        mk("Reshape", ["xc", "shape"], ["xr"], name="reshape"),
        mk("MatMul", ["xr", "W"], ["m1"]), mk("Add", ["m1", "B"], ["a1"]),
        mk("MatMul", ["x", "W"], ["m2"]), mk("Add", ["m2", "B"], ["a2"]),
        mk("Add", ["a1", "a2"], ["p"], name="sum"),
        mk("Conv", ["img", "Wc"], ["q"], name="conv"),
        bn,
        _constant("Wc", RNG.standard_normal((2, 3, 1, 1)).astype(np.float32)),
        *(_constant(n, RNG.uniform(0.5, 2.0, 2).astype(np.float32))
          for n in ("s", "bb", "mean", "var")),
    ]
    nodes = nodes[:10] + nodes[12:] + nodes[10:12]  # the Conv's constants before it
    fn = helper.make_function("local", "mlp", ["x", "img"], ["p", "z"], nodes,
                              [helper.make_opsetid("", 17)], attributes=["epsilon"])
    call = mk("mlp", ["x", "img"], ["y", "z"], name="call", domain="local",
              epsilon=1e-3)
    return _model([call], [vi("x", F, [3, 4]), vi("img", F, [1, 3, 2, 2])],
                  [vi("y", F, [3, 4]), vi("z", F, [1, 2, 2, 2])], [], functions=[fn],
                  opsets=(("", 17), ("local", 1)))


def test_a_local_function_fuses_where_its_types_are_known_and_names_nodes_as_it_does():
    m = _function_model()
    original = onnx.ModelProto()
    original.CopyFrom(m)
    r = surgery.fold(m)
    # positions as in the function (its Constant nodes counted): MatMul#5 + Add#6 -> Gemm
    assert [dict(f) for f in r.fused] == [{"rule": "matmul_add_gemm",
                                           "nodes": ["MatMul#5", "Add#6"], "into": "MatMul#5",
                                           "graph": "function local.mlp"}]
    fn = m.functions[0]
    # each Constant just before its first reader; the BatchNormalization reading a function
    # attribute stays, as does the MatMul + Add on the untyped input
    assert _ops(fn) == ["Cast", "Constant", "Reshape", "Constant", "Constant", "Gemm",
                        "MatMul", "Add", "Add", "Constant", "Conv", "Constant", "Constant",
                        "Constant", "Constant", "BatchNormalization"]
    assert fn.node[-1].domain == "" and fn.node[-1].attribute[0].ref_attr_name == "epsilon"
    gemm = fn.node[5]
    assert gemm.name == "" and list(gemm.input) == ["xr", "W", "B"] and gemm.output == ["a1"]
    onnx.checker.check_model(m, full_check=True)
    _agree(original, m, [_feeds(original)])


def test_a_body_inside_a_local_function_is_fused_with_its_path():
    w = RNG.standard_normal((4, 4)).astype(np.float32)
    then = helper.make_graph(
        [mk("MatMul", ["xr", "W"], ["m"], name="mm"), mk("Add", ["m", "B"], ["t"], name="add")],
        "then", [], [vi("t", F, [3, 4])])
    els = helper.make_graph([mk("Neg", ["xr"], ["e"], name="neg")], "else", [],
                            [vi("e", F, [3, 4])])
    nodes = [_constant("W", w), _constant("B", RNG.standard_normal(4).astype(np.float32)),
             _constant("shape", np.array([3, 4], np.int64)),
             mk("Cast", ["x"], ["xc"], name="cast", to=F),
             mk("Reshape", ["xc", "shape"], ["xr"], name="reshape"),
             mk("If", ["c"], ["y"], name="branch", then_branch=then, else_branch=els)]
    fn = helper.make_function("local", "pick", ["x", "c"], ["y"], nodes,
                              [helper.make_opsetid("", 17)])
    m = _model([mk("pick", ["x", "c"], ["y"], name="call", domain="local")],
               [vi("x", F, [3, 4]), vi("c", B, [])], [vi("y", F, [3, 4])], [], functions=[fn],
               opsets=(("", 17), ("local", 1)))
    original = onnx.ModelProto()
    original.CopyFrom(m)
    r = surgery.fold(m)
    assert [(f["graph"], f["rule"]) for f in r.fused] == [
        ("function local.pick/branch/then_branch", "matmul_add_gemm")]
    body = _bodies_of_function(m.functions[0])["branch/then_branch"]
    assert _ops(body) == ["Gemm"] and list(body.node[0].input) == ["xr", "W", "B"]
    onnx.checker.check_model(m, full_check=True)
    base = _feeds(original, c=np.array(True))
    _agree(original, m, [base, {**base, "c": np.array(False)}])


def _bodies_of_function(fn: onnx.FunctionProto) -> dict[str, onnx.GraphProto]:
    g = helper.make_graph(list(fn.node), "f", [], [])
    return dict(body_graphs(g))


def test_a_body_weight_name_the_host_holds_is_not_reused():
    # the body's Conv weight e_W would become e_W_bn, a name the main graph already uses
    m = _if_model()
    m.graph.initializer.append(_w("e_W_bn", 1))
    m.graph.node.append(mk("Add", ["y", "e_W_bn"], ["y2"], name="bump"))
    m.graph.output[0].CopyFrom(vi("y2", F, [3, 48]))
    onnx.checker.check_model(m, full_check=True)
    original = onnx.ModelProto()
    original.CopyFrom(m)
    r = surgery.fold(m)
    assert "conv_batchnorm" in {f["rule"] for f in r.fused}
    els = _bodies(m)["if/else_branch"]
    made = els.node[0].input[1]
    assert made != "e_W_bn" and made.startswith("e_W_bn")
    assert {t.name for t in m.graph.initializer} >= {"e_W_bn"}
    onnx.checker.check_model(m, full_check=True)
    base = _feeds(original, c=np.array(False))
    _agree(original, m, [base, {**base, "c": np.array(True)}])


def test_a_failure_while_a_later_body_is_planned_leaves_the_model_unchanged():
    # two branches with Conv + BatchNormalization: the else branch (planned first) fuses, the
    # then branch's BatchNormalization mean holds 3 floats for 4 channels: reading it raises
    conv, inits = _conv_bn_nodes("img", "r", "e_")
    els = helper.make_graph(conv, "else", [], [vi("r", F, [1, 4, 6, 6])], inits)
    conv, inits = _conv_bn_nodes("img", "r2", "t_")
    bad = next(t for t in inits if t.name == "t_mean")
    bad.raw_data = np.zeros(3, np.float32).tobytes()
    then = helper.make_graph(conv, "then", [], [vi("r2", F, [1, 4, 6, 6])], inits)
    g = helper.make_graph([mk("If", ["c"], ["y"], name="if", then_branch=then,
                              else_branch=els)], "g",
                          [vi("img", F, [1, 3, 6, 6]), vi("c", B, [])],
                          [vi("y", F, [1, 4, 6, 6])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    assert [p for p, _ in body_graphs(m.graph)] == ["if/else_branch", "if/then_branch"]
    before = m.SerializeToString()
    with pytest.raises(InvalidModelError, match="t_mean"):
        surgery.fold(m)
    assert m.SerializeToString() == before


def test_a_failure_in_a_local_function_after_a_body_was_planned_leaves_the_model_unchanged():
    conv, inits = _conv_bn_nodes("img", "r", "e_")
    els = helper.make_graph(conv, "else", [], [vi("r", F, [1, 4, 6, 6])], inits)
    then = helper.make_graph([mk("Neg", ["img4"], ["t"], name="neg")], "then", [],
                             [vi("t", F, [1, 4, 6, 6])])
    mean = numpy_helper.from_array(np.zeros(2, np.float32), "mean")
    mean.dims[:] = [4]  # 2 floats for 4 channels: reading it raises
    nodes = [_constant("Wc", RNG.standard_normal((4, 3, 1, 1)).astype(np.float32)),
             *(_constant(n, RNG.uniform(0.5, 2.0, 4).astype(np.float32))
               for n in ("s", "bb", "var")),
             mk("Constant", [], ["mean"], value=mean),
             mk("Conv", ["x", "Wc"], ["q"], name="conv"),
             mk("BatchNormalization", ["q", "s", "bb", "mean", "var"], ["z"], name="bn")]
    fn = helper.make_function("local", "head", ["x"], ["z"], nodes,
                              [helper.make_opsetid("", 17)])
    g = helper.make_graph(
        [mk("If", ["c"], ["y"], name="if", then_branch=then, else_branch=els),
         mk("head", ["img"], ["z"], name="call", domain="local")], "g",
        [vi("img", F, [1, 3, 6, 6]), vi("img4", F, [1, 4, 6, 6]), vi("c", B, [])],
        [vi("y", F, [1, 4, 6, 6]), vi("z", F, [1, 4, 6, 6])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("local", 1)], functions=[fn])
    before = m.SerializeToString()
    with pytest.raises(InvalidModelError, match="mean"):
        surgery.fold(m)
    assert m.SerializeToString() == before


@pytest.mark.parametrize("make, want", [
    (_if_model, [("if/else_branch", "conv_batchnorm"), ("if/then_branch", "identity"),
                 ("if/then_branch", "matmul_add_gemm")]),
    (_nested, [("outer/then_branch/inner/then_branch", "matmul_add_gemm")]),
    (_function_model, [("function local.mlp", "matmul_add_gemm")]),
], ids=["if", "nested", "function"])
def test_fold_cli_lists_body_fusions_with_their_graph_verifies_and_replays(
        tmp_path, capsys, make, want):
    src, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    onnx.save(make(), src)
    code, stdout, err = cli_main(capsys, "fold", src, "-o", out, "--verify", "--json")
    assert code == 0, err
    data = json.loads(stdout)
    validate("fold", data)
    assert data["verify"]["ok"] is True
    assert sorted((f["graph"], f["rule"]) for f in data["fused"]) == want
    record = records(load(out).proto)[-1]
    assert isinstance(record, FoldRecord)
    assert sorted((f["graph"], f["rule"]) for f in record.fused) == want
    code, stdout, err = cli_main(capsys, "verify", src, out, "--rewrite-log", "--json")
    assert code == 0 and json.loads(stdout)["ok"] is True, err
