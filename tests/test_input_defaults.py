"""Graph inputs with a default value (issue 26): from IR 4 an input may also be an initializer;
onnxruntime feeds it when given, else uses the initializer. Such an input is an input
everywhere (inspect, the tensor listing, merge --connect, extract --inputs, verify feeds);
before IR 4 an initializer listed as an input is a weight, as it always was."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsurgeon.index import GraphIndex, real_inputs
from onnxsurgeon.inspect import inspect_model
from onnxsurgeon.listing import Listing
from onnxsurgeon.surgery import merge
from onnxsurgeon.verify import compare, input_specs, verify_merge
from tests import builders as B
from tests.cli_helpers import cli
from tests.conftest import run

F = TensorProto.FLOAT
X_DEFAULT = np.float32([1, -2])


def with_default(*, extra: bool = False) -> onnx.ModelProto:
    """x[2] (graph input with default [1, -2]) -> Relu -> r -> Add(b) -> z; with ``extra`` also
    a second defaulted input ``w`` added to z (never connected)."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Add", ["r", "b"], ["z" if not extra else "s"], name="add")]
    inputs = [helper.make_tensor_value_info("x", F, [2])]
    inits = [numpy_helper.from_array(X_DEFAULT, "x"),
             numpy_helper.from_array(np.float32([0.5, 0.5]), "b")]
    if extra:
        nodes.append(helper.make_node("Add", ["s", "w"], ["z"], name="add_w"))
        inputs.append(helper.make_tensor_value_info("w", F, [2]))
        inits.append(numpy_helper.from_array(np.float32([10, 20]), "w"))
    graph = helper.make_graph(nodes, "second", inputs, [helper.make_tensor_value_info("z", F, [2])],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def negate() -> onnx.ModelProto:
    """a[2] -> Neg -> y."""
    graph = helper.make_graph([helper.make_node("Neg", ["a"], ["y"], name="neg")], "first",
                              [helper.make_tensor_value_info("a", F, [2])],
                              [helper.make_tensor_value_info("y", F, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_onnxruntime_treats_it_as_an_overridable_input():
    """The premise, with the real runtime: no feed -> the default; a feed overrides it."""
    model = with_default()
    np.testing.assert_array_equal(run(model, {})["z"], np.float32([1.5, 0.5]))
    np.testing.assert_array_equal(run(model, {"x": np.float32([3, 3])})["z"], np.float32([3.5, 3.5]))


def test_it_is_an_input_of_inspect_and_the_listing():
    model = with_default()
    info = inspect_model(model)
    assert [t.name for t in info.inputs] == ["x"] and info.inputs_with_default == ["x"]
    assert "x  float[2]  (has a default: its initializer)" in info.to_text()
    rows = {r.name: r.kind for r in Listing(model).tensors()}
    assert rows == {"x": "input", "b": "initializer", "r": "activation", "z": "output"}
    assert GraphIndex(model).input_names() == ["x"] and GraphIndex(model).has_default("x")


def test_before_ir_4_an_initializer_listed_as_input_stays_a_weight():
    model = B.init_as_input()  # IR 3: W is an initializer and a graph input
    assert [vi.name for vi in real_inputs(model)] == ["x"]
    assert [t.name for t in inspect_model(model).inputs] == ["x"]
    assert [s.name for s in input_specs(GraphIndex(model))] == ["x"]
    assert {r.name: r.kind for r in Listing(model).tensors()}["W"] == "initializer"


def test_inspect_cli_lists_it(tmp_path):
    path = tmp_path / "d.onnx"
    onnx.save(with_default(), str(path))
    proc = cli("inspect", path, "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert [t["name"] for t in data["inputs"]] == ["x"] and data["inputs_with_default"] == ["x"]


def test_merge_connects_it_and_drops_its_default():
    """`merge FIRST SECOND --connect y=x`: x reads FIRST's y (its default is gone); numbers equal
    running FIRST, then SECOND fed x=y."""
    first, second = negate(), with_default()
    result = merge(first, second, connect={"y": "x"})
    assert result.inputs == ["a"]
    assert [vi.name for vi in first.graph.input] == ["a"]
    assert "x" not in {t.name for t in first.graph.initializer} | {n.output[0] for n in first.graph.node}
    onnx.checker.check_model(first, full_check=True)
    a = np.float32([2, -5])
    want = run(with_default(), {"x": -a})["z"]
    np.testing.assert_array_equal(run(first, {"a": a})["z"], want)
    assert verify_merge(negate(), with_default(), first).ok


def test_merge_keeps_an_unconnected_input_with_its_default():
    first, second = negate(), with_default(extra=True)
    result = merge(first, second, connect={"y": "x"})
    assert result.inputs == ["a", "w"]
    assert {t.name for t in first.graph.initializer} >= {"w"}
    onnx.checker.check_model(first, full_check=True)
    a = np.float32([2, -5])
    got = run(first, {"a": a})["z"]           # w at its default
    np.testing.assert_array_equal(got, run(with_default(extra=True), {"x": -a})["z"])
    fed = run(first, {"a": a, "w": np.float32([0, 0])})["z"]
    np.testing.assert_array_equal(fed, got - np.float32([10, 20]))
    assert verify_merge(negate(), with_default(extra=True), first).ok


def test_merge_cli_end_to_end(tmp_path):
    one, two, out = tmp_path / "first.onnx", tmp_path / "second.onnx", tmp_path / "m.onnx"
    onnx.save(negate(), str(one))
    onnx.save(with_default(), str(two))
    proc = cli("merge", one, two, "-o", out, "--connect", "y=x", "--verify", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["inputs"] == ["a"]
    a = np.float32([-1, 4])
    np.testing.assert_array_equal(run(onnx.load(str(out)), {"a": a})["z"],
                                  run(with_default(), {"x": -a})["z"])


def test_extract_inputs_cuts_at_it(tmp_path):
    src, out = tmp_path / "d.onnx", tmp_path / "e.onnx"
    onnx.save(with_default(), str(src))
    proc = cli("extract", src, "-o", out, "--outputs", "z", "--inputs", "x", "--verify")
    assert proc.returncode == 0, proc.stderr
    model = onnx.load(str(out))
    assert [vi.name for vi in model.graph.input] == ["x"]
    x = np.float32([-3, 3])
    np.testing.assert_array_equal(run(model, {"x": x})["z"], run(with_default(), {"x": x})["z"])


def test_verify_feeds_it_when_given_and_else_keeps_the_default(tmp_path):
    """An .npz holding x is fed (it changes z); one without x is fine (the default); a range
    naming x draws it; the report says which."""
    model = with_default()
    changed = with_default()
    changed.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.float32([5, 5]), "x"))
    data = tmp_path / "x.npz"
    np.savez(data, x=np.float32([3, -3]))
    # fed: both models get x=[3,-3], so different defaults do not matter
    report = compare(model, changed, inputs=str(data))
    assert report.ok and report.pairs[0].informative
    # not fed: each uses its own default, and they differ
    assert not compare(model, changed).ok
    # a --range naming it draws it for both: they agree again
    drawn = compare(model, changed, ranges={"x": (0.0, 1.0)})
    assert drawn.ok


@pytest.mark.parametrize("isolate", [False, True], ids=["in-process", "isolated"])
def test_verify_cli_feeds_it_from_npz(tmp_path, isolate):
    a, b, data = tmp_path / "a.onnx", tmp_path / "b.onnx", tmp_path / "x.npz"
    onnx.save(with_default(), str(a))
    changed = with_default()
    changed.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.float32([5, 5]), "x"))
    onnx.save(changed, str(b))
    np.savez(data, x=np.float32([3, -3]))
    flags = ["--isolate"] if isolate else []
    proc = cli("verify", a, b, "--inputs", data, *flags)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert cli("verify", a, b, *flags).returncode == 1   # the defaults differ


def test_copy_shares_it_like_every_input(tmp_path):
    """The copy reads x itself (not a frozen copy of its default): fed or not, copy/z == z."""
    src, out = tmp_path / "d.onnx", tmp_path / "c.onnx"
    onnx.save(with_default(), str(src))
    proc = cli("copy", src, "-o", out, "--outputs", "z", "--verify")
    assert proc.returncode == 0, proc.stderr
    model = onnx.load(str(out))
    assert "copy/x" not in {t.name for t in model.graph.initializer}
    assert [vi.name for vi in model.graph.input] == ["x"]
    for feeds in ({}, {"x": np.float32([7, -7])}):
        got = run(model, feeds)
        np.testing.assert_array_equal(got["copy/z"], got["z"])
    assert cli("copy", src, "-o", out, "--outputs", "x").returncode == 2  # an input: shared
