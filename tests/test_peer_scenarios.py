"""Peers' own test scenarios, re-created for onnxsurgeon's CLI and judged by onnxruntime.

onnx-graphsurgeon (tests/ir/test_graph.py: fold_constants with partitioning, cleanup of local
functions), Polygraphy (``surgeon sanitize --fold-constants``) and onnxsim fold what evaluates and
leave the rest computed; the same models here go through ``onnxsurgeon fold`` / ``cleanup``
(written anew in the ONNX text syntax), checked structurally and numerically. No call may exit 3.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import parser

from tests.cli_helpers import cli


def save(folder: Path, name: str, text: str, *, check: bool = True) -> Path:
    """``text`` (ONNX text syntax) parsed, checked by onnx (unless not ``check``) and saved."""
    proto = parser.parse_model(text)
    if check:
        onnx.checker.check_model(proto, full_check=True)
    path = folder / f"{name}.onnx"
    onnx.save_model(proto, str(path))
    return path


def run_model(path: Path, feeds: dict[str, np.ndarray]) -> np.ndarray:
    """The first output of ``path`` on ``feeds`` (onnxruntime, graph optimizations off)."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def ops(path: Path) -> list[str]:
    return [n.op_type for n in onnx.load(str(path)).graph.node]


def test_fold_leaves_computed_a_constant_node_that_fails_to_evaluate(tmp_path):
    """A constant Gather out of bounds fails in onnxruntime and in the reference evaluator:
    fold keeps it (and what reads it) computed and folds the rest, as onnx-graphsurgeon's
    partitioned fold_constants does; it used to exit 3 (an IndexError)."""
    src = save(tmp_path, "m", """<ir_version: 8, opset_import: ["": 17]>
g (float[4] x) => (float[4] y, float[4] z) {
  c = Constant<value = float[4] {1, 2, 3, 4}>()
  k = Constant<value = int64[1] {7}>()
  bad = Gather(c, k)
  e = Neg(bad)
  d = Add(c, c)
  y = Add(x, d)
  z = Add(x, e)
}""")
    out = tmp_path / "out.onnx"
    proc = cli("fold", src, "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # no traceback, no onnxruntime log of the failing kernel
    assert ops(out) == ["Gather", "Neg", "Add", "Add"]  # d folded; bad and e stay computed
    model = onnx.load(str(out))
    assert {t.name for t in model.graph.initializer} == {"c", "k", "d"}
    onnx.checker.check_model(model, full_check=True)
    x = np.arange(4, dtype=np.float32)
    del model.graph.output[1]  # z fails at run time, in the input model too
    del model.graph.node[:2], model.graph.node[1]
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    y = sess.run(["y"], {"x": x})[0]
    np.testing.assert_array_equal(y, x + 2 * np.array([1, 2, 3, 4], dtype=np.float32))


def test_fold_leaves_computed_a_node_with_an_attribute_its_opset_lacks(tmp_path):
    """Split-13 given opset 18's ``num_outputs`` (a model onnx.checker refuses): fold keeps the
    Split computed and warns that the output fails the checker as the input does; it used to
    exit 3."""
    src = save(tmp_path, "m", """<ir_version: 8, opset_import: ["": 17]>
g (float[2] x) => (float[2] y, float[3] z) {
  c = Constant<value = float[4] {1, 2, 3, 4}>()
  a, b = Split<num_outputs = 2>(c)
  w = Constant<value = float[3] {1, 2, 3}>()
  v = Mul(w, w)
  y = Add(x, a)
  z = Identity(v)
}""", check=False)
    out = tmp_path / "out.onnx"
    proc = cli("fold", src, "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert "internal error" not in proc.stderr
    assert ops(out) == ["Split", "Add", "Identity"]
    values = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(str(out)).graph.initializer}
    np.testing.assert_array_equal(values["v"], np.array([1, 4, 9], dtype=np.float32))


def test_cleanup_drops_dead_nodes_inside_local_functions(tmp_path):
    """onnx-graphsurgeon's cleanup (recurse_functions) and onnx-ir's RemoveUnusedNodesPass drop a
    local function's nodes that none of its outputs needs, bodies included; a function only such
    a node called goes with it. The function's interface stays."""
    src = save(tmp_path, "m", """<ir_version: 8, opset_import: ["": 17, "local": 1]>
g (bool c, float[3] x) => (float[3] y) {
  y = local.f(c, x)
}
<domain: "local", opset_import: ["": 17, "local": 1]>
f (c, a) => (b) {
  dead = Mul(a, a)
  gone = local.h(a)
  t = Add(a, a)
  b = If(c) <then_branch = th () => (float[3] o) { u = Neg(t) o = Sub(t, a) },
             else_branch = el () => (float[3] o) { o = Mul(t, a) }>
}
<domain: "local", opset_import: ["": 17]>
h (p) => (q) {
  q = Relu(p)
}""")
    out = tmp_path / "out.onnx"
    proc = cli("cleanup", src, "-o", out, "--json")
    assert proc.returncode == 0, proc.stderr
    model = onnx.load(str(out))
    onnx.checker.check_model(model, full_check=True)
    assert [f.name for f in model.functions] == ["f"]
    fn = model.functions[0]
    assert [n.op_type for n in fn.node] == ["Add", "If"]
    assert list(fn.input) == ["c", "a"] and list(fn.output) == ["b"]
    assert [n.op_type for n in fn.node[1].attribute[0].g.node] == ["Sub"]
    assert '"function local.f/Mul#0"' in proc.stdout
    x = np.array([0.5, -1.0, 2.0], np.float32)
    for c in (True, False):
        feeds = {"c": np.array(c), "x": x}
        np.testing.assert_array_equal(run_model(out, feeds), run_model(src, feeds))
    again = tmp_path / "again.onnx"
    assert cli("cleanup", out, "-o", again).returncode == 0
    assert onnx.load(str(again)).functions[0] == fn  # idempotent
