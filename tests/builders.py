"""Small models written with onnx.helper for the tests. Every builder is deterministic and
returns a checker-valid ``ModelProto`` with random (seeded) weights.

Shared by all test modules: add new builders at the end, do not change existing ones.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
F = TensorProto.FLOAT


def _w(name: str, shape: tuple[int, ...], seed: int) -> onnx.TensorProto:
    rng = np.random.default_rng(seed)
    return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)


def _model(graph: onnx.GraphProto, *, functions=(), opset: int = OPSET, ir: int = 8) -> onnx.ModelProto:
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", opset)]
        + ([helper.make_opsetid("local", 1)] if functions else []),
        functions=list(functions),
        producer_name="onnxsurgeon-tests",
    )
    model.ir_version = ir
    onnx.checker.check_model(model, full_check=True)
    return model


def tiny_cnn() -> onnx.ModelProto:
    """x[1,3,8,8] -> conv5 (Conv) -> act (Relu) -> {pool -> fc -> logits, <output act>}.

    The activation ``act`` is both a graph output and consumed inside (by GlobalAveragePool and by
    a second branch ``act -> side (Sigmoid) -> side_out``).
    """
    nodes = [
        helper.make_node("Conv", ["x", "conv5.weight", "conv5.bias"], ["conv5_out"], name="conv5",
                         pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv5_out"], ["act"], name="relu5"),
        helper.make_node("GlobalAveragePool", ["act"], ["pooled"], name="pool"),
        helper.make_node("Flatten", ["pooled"], ["flat"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat", "fc.weight", "fc.bias"], ["logits"], name="fc", transB=1),
        helper.make_node("Sigmoid", ["act"], ["side_out"], name="side"),
    ]
    graph = helper.make_graph(
        nodes, "tiny_cnn",
        [helper.make_tensor_value_info("x", F, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("logits", F, [1, 5]),
         helper.make_tensor_value_info("act", F, [1, 4, 8, 8]),
         helper.make_tensor_value_info("side_out", F, [1, 4, 8, 8])],
        [_w("conv5.weight", (4, 3, 3, 3), 1), _w("conv5.bias", (4,), 2),
         _w("fc.weight", (5, 4), 3), _w("fc.bias", (5,), 4)],
    )
    return _model(graph)


def tied_weights() -> onnx.ModelProto:
    """x[2,4] -> MatMul(W) -> h -> Relu -> MatMul(W) -> y : one initializer W used twice."""
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["h"], name="mm1"),
        helper.make_node("Relu", ["h"], ["hr"], name="relu"),
        helper.make_node("MatMul", ["hr", "W"], ["y"], name="mm2"),
    ]
    graph = helper.make_graph(
        nodes, "tied",
        [helper.make_tensor_value_info("x", F, [2, 4])],
        [helper.make_tensor_value_info("y", F, [2, 4])],
        [_w("W", (4, 4), 5)],
    )
    return _model(graph)


def if_capture() -> onnx.ModelProto:
    """An If whose branches read the outer tensors ``a`` and ``W`` without declaring them.

    x[3] -> a = Relu(x); cond = ReduceSum(x) > 0
    If(cond): then: t = Mul(a, W)  else: e = Sub(a, W)   -> y;   z = Add(y, a)
    """
    then_g = helper.make_graph(
        [helper.make_node("Mul", ["a", "W"], ["t"], name="then_mul")], "then",
        [], [helper.make_tensor_value_info("t", F, [3])],
    )
    else_g = helper.make_graph(
        [helper.make_node("Sub", ["a", "W"], ["e"], name="else_sub")], "else",
        [], [helper.make_tensor_value_info("e", F, [3])],
    )
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="relu"),
        helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["cond"], name="gt"),
        helper.make_node("If", ["cond"], ["y"], name="branch", then_branch=then_g, else_branch=else_g),
        helper.make_node("Add", ["y", "a"], ["z"], name="add"),
    ]
    graph = helper.make_graph(
        nodes, "if_capture",
        [helper.make_tensor_value_info("x", F, [3])],
        [helper.make_tensor_value_info("z", F, [3])],
        [_w("W", (3,), 6), numpy_helper.from_array(np.array(0.0, np.float32), "zero")],
    )
    return _model(graph)


def loop_capture() -> onnx.ModelProto:
    """A Loop (3 trips) whose body reads the outer tensors ``b`` and ``W``.

    x[2] -> b = Neg(x); Loop(M=3, cond=true, acc=x): acc' = Add(Mul(acc, W), b) -> y; z = Relu(y)
    """
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_cond"),
            helper.make_node("Mul", ["acc", "W"], ["m"], name="body_mul"),
            helper.make_node("Add", ["m", "b"], ["acc_out"], name="body_add"),
        ],
        "body",
        [helper.make_tensor_value_info("iter", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc", F, [2])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", F, [2])],
    )
    nodes = [
        helper.make_node("Neg", ["x"], ["b"], name="neg"),
        helper.make_node("Loop", ["trips", "true", "x"], ["y"], name="loop", body=body),
        helper.make_node("Relu", ["y"], ["z"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes, "loop_capture",
        [helper.make_tensor_value_info("x", F, [2])],
        [helper.make_tensor_value_info("z", F, [2])],
        [_w("W", (2,), 7),
         numpy_helper.from_array(np.array(3, np.int64), "trips"),
         numpy_helper.from_array(np.array(True), "true")],
    )
    return _model(graph)


def local_function() -> onnx.ModelProto:
    """A local function ``local.Affine(x, w, b) = x * w + b`` called twice in a chain.

    x[4] -> Affine(x, w1, b1) -> h -> Tanh -> Affine(., w2, b2) -> y
    """
    fn = helper.make_function(
        "local", "Affine", ["X", "Wt", "B"], ["Y"],
        [helper.make_node("Mul", ["X", "Wt"], ["XW"]), helper.make_node("Add", ["XW", "B"], ["Y"])],
        opset_imports=[helper.make_opsetid("", OPSET)],
    )
    nodes = [
        helper.make_node("Affine", ["x", "w1", "b1"], ["h"], name="affine1", domain="local"),
        helper.make_node("Tanh", ["h"], ["ht"], name="tanh"),
        helper.make_node("Affine", ["ht", "w2", "b2"], ["y"], name="affine2", domain="local"),
    ]
    graph = helper.make_graph(
        nodes, "local_function",
        [helper.make_tensor_value_info("x", F, [4])],
        [helper.make_tensor_value_info("y", F, [4])],
        [_w("w1", (4,), 8), _w("b1", (4,), 9), _w("w2", (4,), 10), _w("b2", (4,), 11)],
    )
    return _model(graph, functions=[fn])


def init_as_input() -> onnx.ModelProto:
    """Old-IR style (IR 3): initializer ``W`` is also listed as a graph input.

    x[2,3] -> MatMul(W) -> h -> Relu -> y
    """
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
        helper.make_node("Relu", ["h"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes, "init_as_input",
        [helper.make_tensor_value_info("x", F, [2, 3]), helper.make_tensor_value_info("W", F, [3, 3])],
        [helper.make_tensor_value_info("y", F, [2, 3])],
        [_w("W", (3, 3), 12)],
    )
    return _model(graph, opset=9, ir=3)


def chain(n: int, width: int = 4) -> onnx.ModelProto:
    """A chain of ``n`` blocks MatMul -> Add -> Relu (3n nodes) on x[1,width]; output ``y``."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((width, width)) * 0.5).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal((width,)).astype(np.float32), "B")
    nodes = []
    prev = "x"
    for i in range(n):
        nodes.append(helper.make_node("MatMul", [prev, "W"], [f"mm{i}"], name=f"MatMul_{i}"))
        nodes.append(helper.make_node("Add", [f"mm{i}", "B"], [f"add{i}"], name=f"Add_{i}"))
        out = "y" if i == n - 1 else f"relu{i}"
        nodes.append(helper.make_node("Relu", [f"add{i}"], [out], name=f"Relu_{i}"))
        prev = out
    graph = helper.make_graph(
        nodes, "chain",
        [helper.make_tensor_value_info("x", F, [1, width])],
        [helper.make_tensor_value_info("y", F, [1, width])],
        [w, b],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    return model


def shape_clash(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` (with a [1, 4] input ``x``) plus an output adding x to a [3] constant:
    structurally fine (the plain checker passes) but strict shape inference (the full check)
    refuses it. Mutates and returns model."""
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.ones(3, np.float32), "three"))
    model.graph.node.append(onnx.helper.make_node("Add", ["x", "three"], ["clash"], name="clash"))
    model.graph.output.append(
        onnx.helper.make_tensor_value_info("clash", onnx.TensorProto.FLOAT, [1, 4]))
    return model


def if_defines_its_output() -> onnx.ModelProto:
    """An If whose branches each define a tensor named like the If's own output (``Out``): a
    body does not see its node's outputs, so onnx.checker and onnxruntime accept it.

    x[3] -> s = ReduceSum(x); c = s > 0
    If(c): then: t = Relu(x); Out = Mul(t, W)   else: t = Neg(x); Out = Sub(t, W)   -> Out
    y = Add(Out, x)      outputs y, Out
    """
    def branch(name: str, first: str, second: str) -> onnx.GraphProto:
        return helper.make_graph(
            [helper.make_node(first, ["x"], ["t"], name=f"{name}_first"),
             helper.make_node(second, ["t", "W"], ["Out"], name=f"{name}_second")],
            name, [], [helper.make_tensor_value_info("Out", F, [3])])

    nodes = [
        helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["c"], name="gt"),
        helper.make_node("If", ["c"], ["Out"], name="branch",
                         then_branch=branch("then", "Relu", "Mul"),
                         else_branch=branch("else", "Neg", "Sub")),
        helper.make_node("Add", ["Out", "x"], ["y"], name="add"),
    ]
    graph = helper.make_graph(
        nodes, "if_defines_its_output",
        [helper.make_tensor_value_info("x", F, [3])],
        [helper.make_tensor_value_info("y", F, [3]), helper.make_tensor_value_info("Out", F, [3])],
        [_w("W", (3,), 21), numpy_helper.from_array(np.array(0.0, np.float32), "zero")],
    )
    return _model(graph)
