"""``fold`` (issue 30): constant subgraphs become initializers, computed by onnxruntime in one
session per graph; random ops, values over --max-bytes, graph inputs with defaults stay; bodies
fold too; an external-data model's folded constants go to the output's data file; --verify
proves the outputs agree; the record replays."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsurgeon import load
from onnxsurgeon.record import FoldRecord, records
from onnxsurgeon.surgery import fold
from onnxsurgeon.verify.folding import ort_evaluator
from onnxsurgeon.verify.log import replay

from .cli_helpers import cli_main
from .conftest import run


def _init(name: str, value: object, dtype: object = np.int64) -> TensorProto:
    return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)


def shape_chain(big: int = 4) -> onnx.ModelProto:
    """x[2,8] -> Shape -> Gather -> Unsqueeze -> Concat -> Reshape (a torch-export chain), a
    weight computed from constants (Mul), a constant of 2*big x 1024 floats (Tile) read by a
    computed node, a random op on a constant (kept), and an input with a default value (never a
    constant)."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Constant", [], ["i0"], name="c0", value=_init("v", 0)),
        helper.make_node("Gather", ["s", "i0"], ["b"], name="gather"),
        helper.make_node("Unsqueeze", ["b", "ax"], ["bu"], name="unsq"),
        helper.make_node("Concat", ["bu", "m1"], ["shp"], name="concat", axis=0),
        helper.make_node("Mul", ["W", "two"], ["W2"], name="mulw"),
        helper.make_node("Add", ["x", "W2"], ["xa"], name="add"),
        helper.make_node("Reshape", ["xa", "shp"], ["y"], name="reshape"),
        helper.make_node("Tile", ["W", "reps"], ["Wbig"], name="tile"),
        helper.make_node("Mul", ["Wbig", "q"], ["wq"], name="mulq"),
        helper.make_node("ReduceSum", ["wq"], ["wsum"], name="rsum", keepdims=0),
        helper.make_node("Add", ["x", "wsum"], ["z"], name="addz"),
        helper.make_node("RandomUniformLike", ["W"], ["r"], name="rand"),
        helper.make_node("Mul", ["r", "zero"], ["r0"], name="r0"),
        helper.make_node("Add", ["x", "r0"], ["zr"], name="addr"),
        helper.make_node("Mul", ["x", "dflt"], ["d"], name="muld"),
    ]
    inits = [_init("ax", [0]), _init("m1", [-1]), _init("W", np.ones((2, 8)), np.float32),
             _init("two", 2.0, np.float32), _init("zero", 0.0, np.float32),
             _init("reps", [big, 128]), _init("dflt", 3.0, np.float32)]
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", f, [2, 8]),
                     helper.make_tensor_value_info("dflt", f, []),
                     helper.make_tensor_value_info("q", f, [1])],
        [helper.make_tensor_value_info(n, f, None) for n in ("y", "z", "zr", "d")], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_fold_replaces_constant_subgraphs_and_keeps_random_big_and_fed_values(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(shape_chain(), path)
    m = load(path)
    result = fold(m, max_bytes=16 * 1024, evaluate=ort_evaluator)
    ops = [n.op_type for n in m.proto.graph.node]
    # the shape chain and the weight arithmetic are gone; Reshape reads a constant [2, -1]
    assert {"Shape", "Gather", "Unsqueeze", "Concat", "Constant"}.isdisjoint(ops)
    assert ops.count("Mul") == 3  # r*zero (random), x*dflt (dflt is fed), Wbig*q stay
    inits = {t.name: numpy_helper.to_array(t) for t in m.proto.graph.initializer}
    assert inits["shp"].tolist() == [2, -1] and np.all(inits["W2"] == 2)
    # Tile makes 8x1024 floats = 32 KiB, over the limit: it stays computed
    assert "tile" in {n.name for n in m.proto.graph.node} and "Wbig" in result.kept
    assert "RandomUniformLike" in ops and "ax" not in inits and "dflt" in inits
    assert result.record() == records(m.proto)[-1]
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    feeds = {"x": x, "q": np.array([0.5], np.float32)}
    before, after = run(shape_chain(), feeds), run(m.proto, feeds)
    for name in ("y", "z", "d"):
        assert np.array_equal(before[name], after[name]), name
    # the record replays (with the default evaluator: onnx's reference evaluator)
    again = load(path)
    replay(again, FoldRecord.from_json(result.record().to_json()))
    assert [n.name for n in again.proto.graph.node] == [n.name for n in m.proto.graph.node]


def test_fold_under_the_default_limit_folds_the_tile_too(tmp_path):
    m = load_model(tmp_path, shape_chain())
    result = fold(m, evaluate=ort_evaluator)
    assert not result.kept and "Tile" not in [n.op_type for n in m.proto.graph.node]


def load_model(tmp_path: Path, proto: onnx.ModelProto, name: str = "m.onnx"):
    path = tmp_path / name
    onnx.save(proto, path)
    return load(path)


def _loop_model() -> onnx.ModelProto:
    """A Loop whose body computes a constant (Add of two body Constants) it adds to the carry."""
    body_nodes = [
        helper.make_node("Constant", [], ["k1"], value=_init("k1v", [1.0], np.float32)),
        helper.make_node("Constant", [], ["k2"], value=_init("k2v", [2.0], np.float32)),
        helper.make_node("Add", ["k1", "k2"], ["k3"], name="body_add"),
        helper.make_node("Add", ["carry", "k3"], ["carry_out"], name="body_acc"),
        helper.make_node("Identity", ["cond"], ["cond_out"]),
    ]
    f = TensorProto.FLOAT
    body = helper.make_graph(body_nodes, "body", [
        helper.make_tensor_value_info("i", TensorProto.INT64, []),
        helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
        helper.make_tensor_value_info("carry", f, [1])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("carry_out", f, [1])])
    nodes = [helper.make_node("Loop", ["n", "", "x"], ["y"], name="loop", body=body)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", f, [1])],
                              [helper.make_tensor_value_info("y", f, [1])], [_init("n", 3)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_fold_folds_inside_a_loop_body_and_verify_proves_it(tmp_path, capsys):
    src = tmp_path / "loop.onnx"
    onnx.save(_loop_model(), src)
    out = tmp_path / "out.onnx"
    code, stdout, err = cli_main(capsys, "fold", src, "-o", out, "--verify", "--json")
    assert code == 0, stdout + err
    doc = json.loads(stdout)
    assert doc["body_folded"] == ["k3"] and doc["verify"]["verdict"] == "pass"
    body = onnx.load(out).graph.node[0].attribute[0].g
    assert [n.name for n in body.node] == ["body_acc", ""]
    assert numpy_helper.to_array(body.initializer[0]).tolist() == [3.0]
    x = np.array([0.5], np.float32)
    assert run(onnx.load(out), {"x": x})["y"].tolist() == [9.5]


def test_fold_of_an_external_data_model_writes_folded_values_to_the_output_data_file(tmp_path,
                                                                                     capsys):
    w = np.arange(64 * 64, dtype=np.float32).reshape(64, 64) / 4096
    f = TensorProto.FLOAT
    nodes = [helper.make_node("Transpose", ["W"], ["Wt"], name="tr"),
             helper.make_node("MatMul", ["x", "Wt"], ["y"], name="mm")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", f, [1, 64])],
                              [helper.make_tensor_value_info("y", f, [1, 64])],
                              [numpy_helper.from_array(w, "W")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    src = tmp_path / "in" / "ext.onnx"
    src.parent.mkdir()
    onnx.save(proto, src, save_as_external_data=True, location="ext.data", size_threshold=0)
    data = src.parent / "ext.data"
    before = data.read_bytes()
    out = tmp_path / "out" / "folded.onnx"
    out.parent.mkdir()
    code, stdout, err = cli_main(capsys, "fold", src, "-o", out, "--verify")
    assert code == 0, stdout + err
    assert data.read_bytes() == before  # the input's files never change
    saved = onnx.load(out, load_external_data=False)
    [t] = saved.graph.initializer
    assert t.name == "Wt" and t.data_location == TensorProto.EXTERNAL
    assert [n.op_type for n in saved.graph.node] == ["MatMul"]
    x = np.ones((1, 64), np.float32)
    assert np.array_equal(run(onnx.load(out), {"x": x})["y"], x @ w.T)


def test_fold_refuses_a_bad_limit_in_one_line(tmp_path, capsys):
    src = tmp_path / "m.onnx"
    onnx.save(shape_chain(), src)
    out = tmp_path / "o.onnx"
    before = src.read_bytes()
    code, _, err = cli_main(capsys, "fold", src, "-o", out, "--max-bytes", "-3")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "size in bytes" in err, err
    assert not out.exists() and src.read_bytes() == before


@pytest.mark.slow
@pytest.mark.torch
def test_fold_folds_a_torch_export_shape_chain(torch_shape_export, tmp_path, capsys):
    out = tmp_path / "folded.onnx"
    code, stdout, err = cli_main(capsys, "fold", torch_shape_export, "-o", out, "--verify",
                                 "--json")
    assert code == 0, stdout + err
    ops = [n.op_type for n in onnx.load(out).graph.node]
    assert {"Shape", "Gather", "Unsqueeze", "Concat", "Constant"}.isdisjoint(ops), ops
    assert json.loads(stdout)["verify"]["verdict"] == "pass"


def test_the_readme_folding_block_runs(tmp_path, capsys):
    import re
    import shlex

    from .cli_helpers import ROOT

    readme = (ROOT / "README.md").read_text()
    part = readme.split("### Folding, dims and opsets", 1)[1]
    block = re.findall(r"```bash\n(.*?)```", part, flags=re.S)[0].replace("/tmp/", f"{tmp_path}/")
    lines = [ln for ln in block.splitlines() if ln.strip()]
    assert all(ln.startswith("onnxsurgeon ") for ln in lines), lines
    outputs = []
    for line in lines:  # in-process: the same parser and commands as the shell would run
        code, stdout, err = cli_main(capsys, *shlex.split(line)[1:])
        assert code == 0, line + stdout + err
        outputs.append(stdout)
    for name in ("folded", "batch4", "opset18"):
        assert (tmp_path / f"{name}.onnx").is_file(), name
    assert json.loads(outputs[-1])["to"] == 18


def test_fold_drops_adds_of_zeros_and_muls_by_ones_that_do_not_broadcast(tmp_path):
    f = TensorProto.FLOAT
    nodes = [helper.make_node("Add", ["x", "zeros"], ["a"], name="add0"),
             helper.make_node("Mul", ["ones", "a"], ["b"], name="mul1"),
             helper.make_node("Add", ["b", "zeros3"], ["c"], name="broadcasts"),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", f, [2, 8])],
        [helper.make_tensor_value_info("y", f, [3, 2, 8])],
        [_init("zeros", np.zeros(8), np.float32), _init("ones", np.ones((2, 1)), np.float32),
         _init("zeros3", np.zeros((3, 1, 1)), np.float32)])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    m = load_model(tmp_path, proto)
    result = fold(m, evaluate=ort_evaluator)
    assert [n.name for n in m.proto.graph.node] == ["broadcasts", "relu"]
    assert list(m.proto.graph.node[0].input) == ["x", "zeros3"]
    assert {t.name for t in m.proto.graph.initializer} == {"zeros3"}
    assert set(result.removed) == {"add0", "mul1"}
    x = np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32)
    assert np.array_equal(run(proto, {"x": x})["y"], run(m.proto, {"x": x})["y"])


@pytest.mark.parametrize(("reads", "nothing"), [(["x", "W"], True), (["W", "W"], False),
                                                (["W", ""], False)])
def test_nothing_folds_only_where_no_node_reads_constants_alone(tmp_path, reads, nothing):
    from onnxsurgeon.session import indexed
    from onnxsurgeon.surgery.fold import _nothing_folds

    vi = helper.make_tensor_value_info
    op = "Add" if "" not in reads else "Clip"
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node(op, reads, ["c"]),
             helper.make_node("Add", ["r", "c"], ["y"])]
    w = numpy_helper.from_array(np.ones(4, np.float32), "W")
    g = helper.make_graph(nodes, "g", [vi("x", TensorProto.FLOAT, [4])],
                          [vi("y", TensorProto.FLOAT, [4])], [w])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    m = load(path)
    index = indexed(m)
    assert index.known_int_graph() is not None
    ops = [n.op_type for n in m.proto.graph.node]
    assert _nothing_folds(index, ops, {"x"}) is nothing
    assert (fold(m).folded == ()) is nothing
