"""``fold`` inlines an If whose condition is constant (issue 30; onnx-graphsurgeon's
``fold_constants`` and onnxsim do): the branch it always takes replaces it, its names renamed
where the host has them, its outputs under the If's names, reads in nested bodies following;
a condition computed from constants folds first; one fed by a graph input stays an If."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsurgeon.surgery import fold
from onnxsurgeon.verify.folding import ort_evaluator

from .cli_helpers import cli_main
from .conftest import run
from .test_fold_partial import load_proto

F, B = TensorProto.FLOAT, TensorProto.BOOL


def _bool(name: str, value: bool) -> TensorProto:
    return numpy_helper.from_array(np.array(value), name)


def _f32(name: str, value: object) -> TensorProto:
    return numpy_helper.from_array(np.asarray(value, dtype=np.float32), name)


def if_model(cond: bool | None, *, computed: bool = False, fed: bool = False) -> onnx.ModelProto:
    """x[2,3] -> If(cond) -> (y, y2, y3, y4), then z = y * w, k = z - y2. The then-branch
    computes ``t = Relu(x) + k`` with its own initializer ``k`` and a node output ``z`` (names
    the host computes after the If too); it outputs ``t``, ``x`` through an Identity, ``n`` from
    a nested If on ``x``'s sum whose bodies read the branch's ``t``, and its initializer ``k``. The else-branch negates, takes abs, passes ``x`` and outputs a constant.
    ``computed``: cond = Greater(Size(x), 5) (6 > 5: True) folds first; ``fed``: cond is a graph
    input with a default (never constant)."""
    nested_then = helper.make_graph([helper.make_node("Sigmoid", ["t"], ["u"], name="sig")],
                                    "nested_then", [], [helper.make_tensor_value_info("u", F, None)])
    nested_else = helper.make_graph([helper.make_node("Tanh", ["t"], ["v"], name="tanh")],
                                    "nested_else", [], [helper.make_tensor_value_info("v", F, None)])
    then = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["z"], name="relu"),
         helper.make_node("Add", ["z", "k"], ["t"], name="add"),
         helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
         helper.make_node("Greater", ["s", "zero"], ["pos"], name="gt"),
         helper.make_node("If", ["pos"], ["n"], name="inner", then_branch=nested_then,
                          else_branch=nested_else),
         helper.make_node("Identity", ["x"], ["xi"], name="pass")],
        "then", [], [helper.make_tensor_value_info(n, F, None) for n in ("t", "xi", "n", "k")],
        [_f32("k", [1.0, 2.0, 3.0]), _f32("zero", 0.0)])
    other = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["e"], name="neg"),
         helper.make_node("Abs", ["x"], ["a"], name="abs"),
         helper.make_node("Identity", ["x"], ["xe"], name="pass_e")],
        "else", [], [helper.make_tensor_value_info(n, F, None) for n in ("e", "xe", "a", "c3")],
        [_f32("c3", [7.0, 8.0, 9.0])])
    nodes = [helper.make_node("If", ["cond"], ["y", "y2", "y3", "y4"], name="if",
                              then_branch=then, else_branch=other),
             helper.make_node("Mul", ["y", "w"], ["z"], name="mul"),
             helper.make_node("Sub", ["z", "y2"], ["k"], name="sub")]
    inits = [_f32("w", [3.0, 3.0, 3.0])]  # 2 * Relu(x) - x = |x| is even in x: 3 is not
    inputs = [helper.make_tensor_value_info("x", F, [2, 3])]
    if computed:
        nodes[:0] = [helper.make_node("Size", ["x"], ["size"], name="size"),
                     helper.make_node("Greater", ["size", "five"], ["cond"], name="decide")]
        inits.append(numpy_helper.from_array(np.array(5, np.int64), "five"))
    else:
        inits.append(_bool("cond", bool(cond)))
        if fed:
            inputs.append(helper.make_tensor_value_info("cond", B, []))
    graph = helper.make_graph(
        nodes, "host", inputs,
        [helper.make_tensor_value_info(n, F, [2, 3]) for n in ("k", "y3")]
        + [helper.make_tensor_value_info("y4", F, [3])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _same_outputs(before: onnx.ModelProto, after: onnx.ModelProto) -> None:
    for seed in (0, 1):
        x = np.random.default_rng(seed).standard_normal((2, 3)).astype(np.float32)
        want, got = run(before, {"x": x}), run(after, {"x": x})
        assert want.keys() == got.keys()
        for k in want:
            assert np.array_equal(want[k], got[k]), k


@pytest.mark.parametrize("cond, computed", [(True, False), (False, False), (None, True)],
                         ids=["true", "false", "computed"])
def test_a_constant_if_is_replaced_by_the_branch_it_takes(cond, computed):
    proto = if_model(cond, computed=computed)
    m = load_proto(proto)
    result = fold(m, evaluate=ort_evaluator)
    g = m.proto.graph
    assert [n.op_type for n in g.node if n.op_type == "If"] == (["If"] if cond is not False
                                                                 else [])  # the nested one
    assert "if" in result.removed
    onnx.checker.check_model(m.proto, full_check=True)
    _same_outputs(proto, m.proto)
    assert {"cond", "five"}.isdisjoint(t.name for t in g.initializer)  # read no more: gone
    produced = [o for n in g.node for o in n.output]
    assert len(produced) == len(set(produced))  # SSA: the branch's names did not clash
    if cond is not False:
        # the host's own z and k are untouched; the branch's got fresh names
        relu = next(n for n in g.node if n.op_type == "Relu")
        assert relu.output[0] not in ("z", "k", "") and "y" in produced
        assert next(n for n in g.node if n.name == "sub").output[0] == "k"
        moved = {t.name: numpy_helper.to_array(t).tolist() for t in g.initializer}
        assert [1.0, 2.0, 3.0] in moved.values() and "k" not in moved
        inner = next(n for n in g.node if n.op_type == "If")
        reads = {i for a in inner.attribute for n in a.g.node for i in n.input}
        add = next(n for n in g.node if n.op_type == "Add")
        assert add.output[0] == "y" and reads == {"y"}  # the nested body reads the renamed t


def test_an_if_fed_by_a_graph_input_stays():
    proto = if_model(True, fed=True)
    m = load_proto(proto)
    result = fold(m, evaluate=ort_evaluator)
    assert "if" not in result.removed
    assert [n.name for n in m.proto.graph.node if n.op_type == "If"] == ["if"]


def test_fold_inlines_through_the_cli_and_verify_proves_it(tmp_path, capsys):
    src, out = tmp_path / "if.onnx", tmp_path / "out.onnx"
    model = if_model(None, computed=True)
    del model.graph.output[-1]  # y4, a constant: verify would call the pair inconclusive
    onnx.save(model, src)
    code, stdout, err = cli_main(capsys, "fold", src, "-o", out, "--verify", "--json")
    assert code == 0, stdout + err
    doc = json.loads(stdout)
    assert "if" in doc["removed"] and doc["verify"]["verdict"] == "pass"
    code, stdout, err = cli_main(capsys, "verify", src, out, "--rewrite-log")
    assert code == 0, stdout + err
