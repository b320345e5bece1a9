"""merge: SECOND behind FIRST. Structure (connected inputs read FIRST's tensors, colliding names
prefixed in every scope, outputs), numbers exactly equal to running FIRST then SECOND
(onnxruntime, optimizations off, references computed without onnxsurgeon), opsets, local
functions, external data from two folders, refusals that change nothing, and the CLI."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsurgeon.errors import NotFoundError, RewriteError, UsageError
from onnxsurgeon.io import load, save
from onnxsurgeon.names import all_names
from onnxsurgeon.record import rewrites
from onnxsurgeon.surgery import merge
from onnxsurgeon.verify import verify_log, verify_merge
from tests import builders as B
from tests.cli_helpers import assert_refused, cli
from tests.rewire_helpers import clone, rand, run, serialized

F = TensorProto.FLOAT


def mlp(opset: int = 17, *, extra_input: bool = False, name: str = "mlp") -> onnx.ModelProto:
    """x[2,4] -> MatMul(W) -> h -> Relu -> y  (+ Add(y, x2) -> y when ``extra_input``)."""
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
             helper.make_node("Relu", ["h"], ["y" if not extra_input else "r"], name="relu")]
    inputs = [helper.make_tensor_value_info("x", F, [2, 4])]
    if extra_input:
        nodes.append(helper.make_node("Add", ["r", "x2"], ["y"], name="add"))
        inputs.append(helper.make_tensor_value_info("x2", F, [2, 4]))
    g = helper.make_graph(nodes, name, inputs, [helper.make_tensor_value_info("y", F, [2, 4])],
                          [numpy_helper.from_array(rand((4, 4), opset), "W")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


def test_merge_same_names_prefixes_second_and_equals_first_then_second():
    first, second = mlp(), mlp(extra_input=True, name="head")
    model = clone(first)
    r = merge(model, second, connect={"y": "x"})
    assert r.prefix == "head/"
    assert r.renamed == {"x": "y", "W": "head/W", "h": "head/h", "y": "head/y"}
    assert r.inputs == ["x", "x2"] and r.outputs == ["head/y"]
    names = [n.name for n in model.graph.node]
    assert names == ["mm", "relu", "head/mm", "head/relu", "add"]
    assert list(model.graph.node[2].input) == ["y", "head/W"]
    onnx.checker.check_model(model, full_check=True)
    x, x2 = rand((2, 4), 1), rand((2, 4), 2)
    mid = run(first, {"x": x})["y"]
    want = run(second, {"x": mid, "x2": x2})["y"]
    assert np.array_equal(run(model, {"x": x, "x2": x2})["head/y"], want)
    assert rewrites(model)[-1]["op"] == "merge"
    assert verify_merge(first, second, model).ok


def test_first_outputs_not_consumed_stay_and_outputs_can_be_chosen():
    first = B.tiny_cnn()  # outputs logits, act, side_out
    g = helper.make_graph([helper.make_node("Sigmoid", ["v"], ["p"], name="sig")], "sm",
                          [helper.make_tensor_value_info("v", F, [1, 5])],
                          [helper.make_tensor_value_info("p", F, [1, 5])])
    second = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model = clone(first)
    r = merge(model, second, connect={"logits": "v"})
    assert r.outputs == ["p", "act", "side_out"] and r.renamed == {"v": "logits"}
    assert verify_merge(first, second, model).ok
    model2 = clone(first)
    r2 = merge(model2, second, connect={"logits": "v"}, outputs=["logits", "p"])
    assert r2.outputs == ["logits", "p"]
    onnx.checker.check_model(model2, full_check=True)
    assert verify_merge(first, second, model2).ok


def test_merge_of_two_if_models_renames_inside_the_bodies():
    """Both sides are the same If model: every name collides, nested ones included."""
    first, second = B.if_capture(), B.if_capture()
    model = clone(first)
    r = merge(model, second, connect={"z": "x"}, prefix="b/")
    branch = next(n for n in model.graph.node if n.name == "b/branch")
    then_g = next(a.g for a in branch.attribute if a.name == "then_branch")
    assert list(then_g.node[0].input) == ["b/a", "b/W"] and then_g.output[0].name == "b/t"
    assert r.outputs == ["b/z"]
    # every name of the second half is prefixed, except its input, which became first's z
    assert {n for n in all_names(model) if n} == \
        {n for n in all_names(first) if n} | {"b/" + n for n in all_names(second) if n and n != "x"}
    onnx.checker.check_model(model, full_check=True)
    for x in (np.float32([1, -2, 3]), np.float32([-1, -2, 0.5])):
        want = run(second, {"x": run(first, {"x": x})["z"]})["z"]
        assert np.array_equal(run(model, {"x": x})["b/z"], want)
    assert verify_merge(first, second, model).ok


def test_local_functions_and_opset_imports_are_merged():
    first = B.local_function()  # local.Affine
    second = B.local_function()
    fn = second.functions[0]
    fn.node[1].op_type = "Sub"  # same name, different definition -> renamed in the merge
    second.opset_import.append(helper.make_opsetid("ai.onnx.ml", 3))
    model = clone(first)
    merge(model, second, connect={"y": "x"})
    assert sorted(f.name for f in model.functions) == ["Affine", "Affine__1"]
    assert [n.op_type for n in model.graph.node if n.domain == "local"] == \
        ["Affine", "Affine", "Affine__1", "Affine__1"]
    assert {(o.domain, o.version) for o in model.opset_import} >= {("local", 1), ("ai.onnx.ml", 3)}
    onnx.checker.check_model(model, full_check=True)
    x = rand((4,), 3)
    want = run(second, {"x": run(first, {"x": x})["y"]})["y"]
    assert np.array_equal(run(model, {"x": x})[model.graph.output[0].name], want)


def test_opsets_are_reconciled_like_insert():
    first, second = mlp(13), mlp(17, name="net")
    model = clone(first)
    merge(model, second, connect={"y": "x"})
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 13)]
    onnx.checker.check_model(model, full_check=True)
    assert verify_merge(first, second, model).ok


def test_external_data_of_both_models_is_streamed(tmp_path):
    """Both models keep weights in a data file of the same name in their own folders."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "out").mkdir()
    first, second = mlp(), mlp(name="net")
    for m, folder in ((first, "a"), (second, "b")):
        m.graph.initializer[0].CopyFrom(numpy_helper.from_array(rand((4, 4), 5 if folder == "a" else 6), "W"))
        onnx.save(m, str(tmp_path / folder / "m.onnx"), save_as_external_data=True,
                  location="weights.bin", size_threshold=0)
    f, s = load(tmp_path / "a" / "m.onnx"), load(tmp_path / "b" / "m.onnx")
    merge(f, s, connect={"y": "x"})
    out = save(f, tmp_path / "out" / "merged.onnx")
    refs = onnx.load(str(out), load_external_data=False)
    assert {e.value for t in refs.graph.initializer for e in t.external_data
            if e.key == "location"} == {"merged.onnx.data"}
    merged = onnx.load(str(out))  # onnx itself reads the new data file
    x = rand((2, 4), 7)
    a = onnx.load(str(tmp_path / "a" / "m.onnx"))
    b = onnx.load(str(tmp_path / "b" / "m.onnx"))
    want = run(b, {"x": run(a, {"x": x})["y"]})["y"]
    assert np.array_equal(run(merged, {"x": x})["net/y"], want)
    assert verify_merge(load(tmp_path / "a" / "m.onnx"), load(tmp_path / "b" / "m.onnx"),
                        load(out)).ok


@pytest.mark.parametrize("connect, kwargs, exc, needle", [
    ({"yy": "x"}, {}, NotFoundError, "did you mean 'y'"),
    ({"y": "xx"}, {}, NotFoundError, "did you mean 'x'"),
    ({"h": "x", "y": "x"}, {}, UsageError, "connected twice"),
    ({}, {}, UsageError, "at least one connection"),
    ({"y": "x"}, {"outputs": ["nope"]}, NotFoundError, "in neither model"),
], ids=["first-name", "second-name", "twice", "none", "bad-output"])
def test_refusals_change_nothing(connect, kwargs, exc, needle):
    first, second = mlp(), mlp(name="net")
    before, before2 = serialized(first), serialized(second)
    with pytest.raises(exc, match=needle):
        merge(first, second, connect=connect, **kwargs)
    assert serialized(first) == before and serialized(second) == before2


def test_dtype_mismatch_is_refused():
    first = mlp()
    g = helper.make_graph([helper.make_node("Not", ["b"], ["nb"], name="not")], "g",
                          [helper.make_tensor_value_info("b", TensorProto.BOOL, [2, 4])],
                          [helper.make_tensor_value_info("nb", TensorProto.BOOL, [2, 4])])
    second = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    before = serialized(first)
    with pytest.raises(RewriteError, match="add a Cast"):
        merge(first, second, connect={"y": "b"})
    assert serialized(first) == before


def test_rewrite_log_says_how_to_verify_a_merge():
    first, second = mlp(), mlp(name="net")
    model = clone(first)
    merge(model, second, connect={"y": "x"})
    with pytest.raises(UsageError, match="verify_merge"):
        verify_log(first, model)


# ------------------------------------------------------------------------------------ CLI
def test_merge_cli_json_verify_and_determinism(tmp_path):
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    a.write_bytes(mlp().SerializeToString())
    b.write_bytes(mlp(extra_input=True, name="head").SerializeToString())
    out, again = tmp_path / "m.onnx", tmp_path / "m2.onnx"
    proc = cli("merge", a, b, "-o", out, "--connect", "y=x", "--json", "--verify")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["inputs"] == ["x", "x2"] and data["outputs"] == ["head/y"]
    assert data["renamed"]["W"] == "head/W" and data["prefix"] == "head/"
    assert proc.stderr == "" and data["schema"] == "onnxsurgeon.merge/1"
    assert data["verify"]["ok"] is True  # the report is embedded with --json
    assert any(p["check"] == "merge:second" for p in data["verify"]["pairs"])
    assert cli("merge", a, b, "-o", again, "--connect", "y=x").returncode == 0
    assert again.read_bytes() == out.read_bytes()


@pytest.mark.parametrize("args, needle", [
    (["--connect", "yy=x"], "did you mean 'y'"),
    (["--connect", "y=x2x"], "did you mean 'x2'"),
    (["--connect", "y=x", "--prefix", ""], "prefix is empty"),
], ids=["first", "second", "prefix"])
def test_merge_cli_bad_input(tmp_path, args, needle):
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    a.write_bytes(mlp().SerializeToString())
    b.write_bytes(mlp(extra_input=True, name="head").SerializeToString())
    out = tmp_path / "m.onnx"
    assert_refused(["merge", a, b, "-o", out, *args], needle, inputs=[a, b], out=out)


_BIG_MERGE = """
import json, resource, sys
from onnxsurgeon.io import load, save
from onnxsurgeon.surgery import merge
first, second, out = sys.argv[1:4]
f = load(first)
merge(f, load(second), connect={"y0": "x"})
save(f, out)
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
for line in open("/proc/self/status"):
    if line.startswith("VmHWM:"):
        rss = int(line.split()[1]) * 1024
print(json.dumps({"rss": rss}))
"""


def _big(folder, n: int, marker: float, *, reads_x: bool) -> None:
    """Two external float32 tensors of ``n`` elements in ``folder/w.bin`` (sparse, a marker at the
    start of each); ``y0 = Identity(W0)`` and ``y1 = W1 (+ x)``."""
    folder.mkdir()
    with open(folder / "w.bin", "wb") as f:
        f.truncate(2 * n * 4)
        for k in range(2):
            f.seek(k * n * 4)
            f.write(np.float32([marker + k]).tobytes())
    inits = []
    for k in range(2):
        t = TensorProto(name=f"W{k}", data_type=F, dims=[n], data_location=TensorProto.EXTERNAL)
        for key, value in (("location", "w.bin"), ("offset", str(k * n * 4)), ("length", str(n * 4))):
            e = t.external_data.add()
            e.key, e.value = key, value
        inits.append(t)
    nodes = [helper.make_node("Identity", ["W0"], ["y0"], name="id0")]
    nodes.append(helper.make_node("Add", ["x", "W1"], ["y1"], name="add") if reads_x
                 else helper.make_node("Identity", ["W1"], ["y1"], name="id1"))
    inputs = [helper.make_tensor_value_info("x", F, [n])] if reads_x else []
    graph = helper.make_graph(nodes, "big", inputs,
                              [helper.make_tensor_value_info(f"y{k}", F, [n]) for k in range(2)],
                              inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
              folder / "m.onnx")


@pytest.mark.slow
def test_merge_past_2gb_streams_both_data_files(tmp_path):
    """Two 1.2 GB models (data files of the same name in two folders) merge into a 2.4 GB model
    with peak RSS far below its size; every tensor's bytes come from its own model's file."""
    import subprocess
    import sys

    n = 150 * 1024 * 1024  # 600 MiB per tensor
    _big(tmp_path / "a", n, 1.5, reads_x=False)
    _big(tmp_path / "b", n, 10.5, reads_x=True)
    out = tmp_path / "merged.onnx"
    res = subprocess.run([sys.executable, "-c", _BIG_MERGE, str(tmp_path / "a" / "m.onnx"),
                          str(tmp_path / "b" / "m.onnx"), str(out)],
                         capture_output=True, text=True, check=True)
    total = 4 * n * 4
    assert total > 2**31
    assert json.loads(res.stdout)["rss"] < total / 8
    merged = load(out)
    markers = {}
    with open(tmp_path / "merged.onnx.data", "rb") as f:
        for t in merged.proto.graph.initializer:
            f.seek(int(next(e.value for e in t.external_data if e.key == "offset")))
            markers[t.name] = float(np.frombuffer(f.read(4), np.float32)[0])
    assert markers == {"W0": 1.5, "W1": 2.5, "big/W0": 10.5, "big/W1": 11.5}
    assert [o.name for o in merged.proto.graph.output] == ["big/y0", "big/y1", "y1"]
    onnx.checker.check_model(str(out))


def test_an_ai_onnx_ml_only_first_model_gets_the_default_domain_import():
    scaler = helper.make_node("Scaler", ["x"], ["y"], name="scale", domain="ai.onnx.ml",
                              offset=[0.5, -1.0, 2.0, 0.0], scale=[2.0, 0.5, 1.5, 1.0])
    g = helper.make_graph([scaler], "ml", [helper.make_tensor_value_info("x", F, [2, 4])],
                          [helper.make_tensor_value_info("y", F, [2, 4])])
    first = helper.make_model(g, opset_imports=[helper.make_opsetid("ai.onnx.ml", 3)])
    second = mlp(name="net")
    model = clone(first)
    merge(model, second, connect={"y": "x"})
    assert {o.domain: o.version for o in model.opset_import} == {"ai.onnx.ml": 3, "": 17}
    onnx.checker.check_model(model, full_check=True)
    assert verify_merge(first, second, model).ok
