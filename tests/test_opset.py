"""``opset`` (issue 30): onnx's version converter up and down on a weight-free copy; every
refusal names the op and the opsets in one line (exit 2); the result checked and --verify-able;
the record replays."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsurgeon import load
from onnxsurgeon.record import OpsetRecord
from onnxsurgeon.surgery import opset
from onnxsurgeon.verify.log import replay

from .cli_helpers import assert_refused, cli_main


def reduce_model(version: int = 12, *, gelu: bool = False) -> onnx.ModelProto:
    """x[2,8] -> MatMul(W 8x8, 4 KiB+: a heavy weight) -> ReduceSum(axes=[1]) -> y."""
    f = TensorProto.FLOAT
    axes = {"axes": [1]} if version < 13 else {}
    ins = ["m"] if version < 13 else ["m", "ax"]
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"], name="mm"),
             helper.make_node("ReduceSum", ins, ["y"], name="rs", keepdims=1, **axes)]
    if gelu:
        nodes.append(helper.make_node("Gelu", ["y"], ["g"], name="gelu"))
    w = np.arange(64 * 32, dtype=np.float32).reshape(64, 32) / 2048
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", f, [2, 64])],
                              [helper.make_tensor_value_info("g" if gelu else "y", f, [2, 1])],
                              [numpy_helper.from_array(w, "W"),
                               numpy_helper.from_array(np.array([1], np.int64), "ax")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", version)],
                             ir_version=8)


@pytest.mark.parametrize("start, to", [(12, 18), (18, 13)])
def test_opset_converts_up_and_down_and_verify_proves_it(tmp_path, capsys, start, to):
    src = tmp_path / "m.onnx"
    onnx.save(reduce_model(start), src)
    out = tmp_path / "o.onnx"
    code, stdout, err = cli_main(capsys, "opset", src, "-o", out, "--to", to, "--verify",
                                 "--json")
    assert code == 0, stdout + err
    doc = json.loads(stdout)
    assert (doc["from"], doc["to"], doc["verify"]["verdict"]) == (start, to, "pass")
    m = onnx.load(out)
    assert [o.version for o in m.opset_import if o.domain == ""] == [to]
    rs = m.graph.node[-1]
    assert (len(rs.input) == 2) == (to >= 13)  # axes moved between attribute and input
    onnx.checker.check_model(m, full_check=True)
    w = {t.name: t for t in m.graph.initializer}["W"]  # the weight kept its bytes
    assert numpy_helper.to_array(w).shape == (64, 32) and len(w.raw_data) == 64 * 32 * 4


def test_opset_refusals_name_the_op_and_the_opsets(tmp_path):
    src = tmp_path / "m.onnx"
    onnx.save(reduce_model(20, gelu=True), src)
    out = tmp_path / "o.onnx"
    assert_refused(["opset", src, "-o", out, "--to", "17"],
                   "cannot convert opset 20 -> 17: op Gelu", inputs=[src], out=out)


@pytest.mark.parametrize("to, needle", [(12, "at opset 12 already"), (999, "out of range")])
def test_opset_bad_targets_are_one_line(tmp_path, capsys, to, needle):
    src = tmp_path / "m.onnx"
    onnx.save(reduce_model(12), src)
    out = tmp_path / "o.onnx"
    code, _, err = cli_main(capsys, "opset", src, "-o", out, "--to", to)
    assert code == 2 and len(err.strip().splitlines()) == 1 and needle in err, err
    assert not out.exists()


def test_the_opset_record_replays(tmp_path):
    src = tmp_path / "m.onnx"
    onnx.save(reduce_model(12), src)
    m = load(src)
    result = opset(m, to=18)
    again = load(src)
    replay(again, OpsetRecord.from_json(result.record().to_json()))
    assert again.proto.graph == m.proto.graph
