"""precision, issue 31's list item by item: float initializers, Constants, value_info, the
attributes that carry a dtype (Cast ``to``, ConstantOfShape ``value``, EyeLike/RandomX
``dtype``), bodies (If, Scan), Casts only at the float32 boundaries, Resize scales (given and
computed) exact. One hand-built graph per item; each converted to fp16 with kept io types,
checked by structure and, where the values are deterministic, against the float32 model in
onnxruntime."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper

from onnxsurgeon.surgery import precision

from .conftest import run

F16 = T.FLOAT16
X = helper.make_tensor_value_info("x", T.FLOAT, [1, 1, 10, 10])
Y = helper.make_tensor_value_info("y", T.FLOAT, ["n", "c", "h", "w"])


def _model(nodes, inits=(), value_info=(), out=Y, inputs=(X,)) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", list(inputs), [out], list(inits), value_info=list(value_info))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _by(model: onnx.ModelProto) -> dict[str, onnx.NodeProto]:
    return {n.name: n for n in model.graph.node if n.name}


def _attr(node: onnx.NodeProto, name: str) -> onnx.AttributeProto:
    return next(a for a in node.attribute if a.name == name)


def _added_casts(model: onnx.ModelProto) -> list[tuple[str, str]]:
    return [(n.input[0], n.output[0]) for n in model.graph.node
            if n.op_type == "Cast" and n.name.endswith("/Cast")]


def _initializer(m: onnx.ModelProto) -> None:
    assert {t.name: t.data_type for t in m.graph.initializer} == {"w": F16}


def _constants(m: onnx.ModelProto) -> None:
    by = _by(m)
    assert _attr(by["k"], "value").t.data_type == F16
    assert _attr(by["kf"], "value").t.data_type == F16  # value_float(s) become a float16 value
    assert _attr(by["kfs"], "value").t.data_type == F16


def _value_info(m: onnx.ModelProto) -> None:
    assert [(v.name, v.type.tensor_type.elem_type) for v in m.graph.value_info] == [("a", F16)]


def _cast_to(m: onnx.ModelProto) -> None:
    assert _attr(_by(m)["cast"], "to").i == F16


def _constant_of_shape(m: onnx.ModelProto) -> None:
    by = _by(m)
    assert _attr(by["cos"], "value").t.data_type == F16
    assert _attr(by["cos0"], "value").t.data_type == F16  # the default 0.0 made explicit


KEPT = {"eye_like": ["eye"], "random": ["rn"], "boundaries": ["sm"]}
"""Nodes each case keeps float32: onnxruntime's CPU has no float16 EyeLike or RandomNormal
(converting them made a model it cannot load), the blocked Softmax."""


def _eye_like(m: onnx.ModelProto) -> None:
    by = _by(m)
    assert _attr(by["eye"], "dtype").i == T.FLOAT  # kept: no float16 kernel
    assert by["mm"].input == ["x/fp16", "i/fp16"]  # the identity enters float16 by a Cast


def _random(m: onnx.ModelProto) -> None:
    by = _by(m)
    assert "dtype" not in {a.name for a in by["rn"].attribute}  # kept: no float16 kernel
    assert _attr(by["rul"], "dtype").i == F16
    assert _attr(by["bern"], "dtype").i == F16


def _body(m: onnx.ModelProto) -> None:
    then = _attr(_by(m)["if"], "then_branch").g
    assert _attr(then.node[0], "value").t.data_type == F16
    assert then.output[0].type.tensor_type.elem_type == F16


def _scan_body(m: onnx.ModelProto) -> None:
    body = _attr(_by(m)["scan"], "body").g
    assert [v.type.tensor_type.elem_type for v in [*body.input, *body.output]] == [F16] * 4
    assert _attr(body.node[0], "value").t.data_type == F16
    assert {t.name: t.data_type for t in m.graph.initializer} == {"s0": F16}


def _boundaries(m: onnx.ModelProto) -> None:
    # x -> Cast -> relu (fp16) -> Cast -> sm (kept fp32) -> Cast -> neg (fp16) -> Cast -> y
    assert _added_casts(m) == [("x", "x/fp16"), ("a", "a/fp32"), ("b", "b/fp16"),
                               ("y/fp16", "y")]


def _scales_given(m: onnx.ModelProto) -> None:
    assert {t.name: t.data_type for t in m.graph.initializer} == {"scales": T.FLOAT}
    assert _by(m)["resize"].input[2] == "scales"
    assert _added_casts(m) == [("x", "x/fp16"), ("y/fp16", "y")]


def _scales_computed(m: onnx.ModelProto) -> None:
    by = _by(m)
    assert _attr(by["ten"], "value").t.data_type == T.FLOAT  # the scale chain stays float32
    assert by["div"].input == ["s10", "ten"] and by["resize"].input[2] == "scales"
    assert _added_casts(m) == [("x", "x/fp16"), ("y/fp16", "y")]


def _shape_of_x() -> onnx.NodeProto:
    return helper.make_node("Shape", ["x"], ["s"], name="shape")


CASES: dict[str, tuple[Callable[[], onnx.ModelProto], Callable[[onnx.ModelProto], None], bool]] = {
    "initializer": (lambda: _model([helper.make_node("Mul", ["x", "w"], ["y"], name="mul")],
                                   [helper.make_tensor("w", T.FLOAT, [1], [3.0])]),
                    _initializer, True),
    "constants": (lambda: _model([
        helper.make_node("Constant", [], ["c"], name="k",
                         value=helper.make_tensor("v", T.FLOAT, [1], [0.5])),
        helper.make_node("Constant", [], ["cf"], name="kf", value_float=2.0),
        helper.make_node("Constant", [], ["cfs"], name="kfs", value_floats=[1.0, 2.0] * 5),
        helper.make_node("Add", ["x", "c"], ["a"], name="add"),
        helper.make_node("Mul", ["a", "cf"], ["b"], name="mul"),
        helper.make_node("Sub", ["b", "cfs"], ["y"], name="sub")]), _constants, True),
    "value_info": (lambda: _model([helper.make_node("Relu", ["x"], ["a"], name="relu"),
                                   helper.make_node("Neg", ["a"], ["y"], name="neg")],
                                  value_info=[helper.make_tensor_value_info("a", T.FLOAT,
                                                                            [1, 1, 10, 10])]),
                   _value_info, True),
    "cast_to": (lambda: _model([_shape_of_x(),
                                helper.make_node("Cast", ["s"], ["sf"], to=T.FLOAT, name="cast"),
                                helper.make_node("ReduceSum", ["sf"], ["r"], name="sum"),
                                helper.make_node("Add", ["x", "r"], ["y"], name="add")]),
                _cast_to, True),
    "constant_of_shape": (lambda: _model([
        _shape_of_x(),
        helper.make_node("ConstantOfShape", ["s"], ["z"], name="cos",
                         value=helper.make_tensor("v", T.FLOAT, [1], [1.5])),
        helper.make_node("ConstantOfShape", ["s"], ["z0"], name="cos0"),
        helper.make_node("Add", ["x", "z"], ["a"], name="add"),
        helper.make_node("Add", ["a", "z0"], ["y"], name="add0")]), _constant_of_shape, True),
    "eye_like": (lambda: _model(
        [helper.make_node("EyeLike", ["e"], ["i"], dtype=T.FLOAT, name="eye"),
         helper.make_node("MatMul", ["x", "i"], ["y"], name="mm")],
        [helper.make_tensor("e", T.INT64, [10, 10], [0] * 100)]), _eye_like, True),
    "random": (lambda: _model([
        helper.make_node("RandomNormal", [], ["n"], shape=[1, 1, 10, 10], seed=1.0, name="rn"),
        helper.make_node("RandomUniformLike", ["x"], ["u"], dtype=T.FLOAT, seed=2.0, name="rul"),
        helper.make_node("Add", ["x", "n"], ["a"], name="add"),
        helper.make_node("Sigmoid", ["x"], ["p"], name="sig"),
        helper.make_node("Bernoulli", ["p"], ["d"], dtype=T.FLOAT, seed=3.0, name="bern"),
        helper.make_node("Add", ["a", "u"], ["b"], name="add2"),
        helper.make_node("Add", ["b", "d"], ["y"], name="add3")]), _random, False),
    "body": (lambda: _model(
        [helper.make_node("Relu", ["x"], ["a"], name="relu"),
         helper.make_node("If", ["cond"], ["y"], name="if", then_branch=helper.make_graph(
             [helper.make_node("Constant", [], ["k"], value_float=2.0),
              helper.make_node("Mul", ["a", "k"], ["t"])], "then", [],
             [helper.make_tensor_value_info("t", T.FLOAT, None)]),
             else_branch=helper.make_graph([helper.make_node("Neg", ["a"], ["e"])], "else", [],
                                           [helper.make_tensor_value_info("e", T.FLOAT, None)]))],
        inputs=(X, helper.make_tensor_value_info("cond", T.BOOL, []))), _body, True),
    "scan_body": (lambda: _model(
        [helper.make_node("Scan", ["s0", "x"], ["sf", "y"], num_scan_inputs=1, name="scan",
                          body=helper.make_graph(
                              [helper.make_node("Constant", [], ["k"], value_float=0.5),
                               helper.make_node("Add", ["s", "xt"], ["s2"]),
                               helper.make_node("Mul", ["s2", "k"], ["yt"])], "body",
                              [helper.make_tensor_value_info("s", T.FLOAT, [1, 10, 10]),
                               helper.make_tensor_value_info("xt", T.FLOAT, [1, 10, 10])],
                              [helper.make_tensor_value_info("s2", T.FLOAT, [1, 10, 10]),
                               helper.make_tensor_value_info("yt", T.FLOAT, [1, 10, 10])]))],
        [helper.make_tensor("s0", T.FLOAT, [1, 10, 10], [0.25] * 100)]), _scan_body, True),
    "boundaries": (lambda: _model([helper.make_node("Relu", ["x"], ["a"], name="relu"),
                                   helper.make_node("Softmax", ["a"], ["b"], name="sm"),
                                   helper.make_node("Neg", ["b"], ["y"], name="neg")]),
                   _boundaries, True),
    "scales_given": (lambda: _model(
        [helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest", name="resize")],
        [helper.make_tensor("scales", T.FLOAT, [4], [1, 1, 0.3, 0.3])]), _scales_given, True),
    "scales_computed": (lambda: _model([  # scales = [1,1,3,3] / 10 = 0.3 (float16: 0.29998)
        helper.make_node("Constant", [], ["ten"], name="ten",
                         value=helper.make_tensor("v", T.FLOAT, [], [10.0])),
        helper.make_node("Div", ["s10", "ten"], ["scales"], name="div"),
        helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest", name="resize")],
        [helper.make_tensor("s10", T.FLOAT, [4], [10, 10, 3, 3])]), _scales_computed, True),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_item_of_issue_31_is_converted_right(case):
    build, check, deterministic = CASES[case]
    model = build()
    result = precision(model, to="fp16", keep_io_types=True,
                       block=["Softmax"] if case == "boundaries" else ())
    onnx.checker.check_model(model, full_check=True)
    check(model)
    assert list(result.kept) == KEPT.get(case, [])
    assert all(("kernel" in why) != (case == "boundaries") for why in result.kept.values())
    assert model.graph.input[0].type.tensor_type.elem_type == T.FLOAT
    assert model.graph.output[0].type.tensor_type.elem_type == T.FLOAT
    feeds = {"x": np.random.default_rng(0).uniform(-2, 2, (1, 1, 10, 10)).astype(np.float32)}
    if case == "body":
        feeds["cond"] = np.array(True)
    new = run(model, feeds)["y"]
    assert new.dtype == np.float32
    if deterministic:
        ref = run(build(), feeds)["y"]
        assert new.shape == ref.shape  # a rounded scale would resize 10 pixels to 2, not 3
        np.testing.assert_allclose(new, ref, rtol=1e-2, atol=1e-2)
