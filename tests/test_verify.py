"""The verification engine: running, inputs, comparison rules, and locating where models part.

Every model here is built with onnx.helper (or tests/builders.py) and run in onnxruntime with
graph optimizations off. Each broken candidate is a real model, edited the way a buggy rewrite
would edit it; each must be caught (report not ok) and located at the tensor the bug touched.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsurgeon.errors import UsageError
from onnxsurgeon.index import GraphIndex
from onnxsurgeon.io import Model, load, save
from onnxsurgeon.verify import (
    compare,
    compare_arrays,
    default_tolerance,
    format_report,
    input_specs,
    random_samples,
    run_model,
    verify_against,
)

from . import builders

F = TensorProto.FLOAT
WIDTH = 8
LAYERS = 6


def mlp(width: int = WIDTH, layers: int = LAYERS) -> onnx.ModelProto:
    """x[1,width] -> layers x (MatMul W_i -> Add b_i -> Relu) -> h; y = Sub(h, side); side =
    Tanh(relu_1). Distinct weights per layer so one weight can be changed alone."""
    rng = np.random.default_rng(42)
    nodes, inits = [], []
    prev = "x"
    for i in range(layers):
        inits.append(numpy_helper.from_array(
            (rng.standard_normal((width, width)) * 0.6).astype(np.float32), f"W{i}"))
        inits.append(numpy_helper.from_array(rng.standard_normal(width).astype(np.float32), f"b{i}"))
        nodes.append(helper.make_node("MatMul", [prev, f"W{i}"], [f"mm{i}"], name=f"MatMul_{i}"))
        nodes.append(helper.make_node("Add", [f"mm{i}", f"b{i}"], [f"add{i}"], name=f"Add_{i}"))
        nodes.append(helper.make_node("Relu", [f"add{i}"], [f"relu{i}"], name=f"Relu_{i}"))
        prev = f"relu{i}"
    nodes.append(helper.make_node("Tanh", ["relu1"], ["side"], name="side_tanh"))
    nodes.append(helper.make_node("Sub", [prev, "side"], ["y"], name="final_sub"))
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", F, [1, width])],
        [helper.make_tensor_value_info("y", F, [1, width])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def clone(model: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    return out


def node(model: onnx.ModelProto, name: str) -> onnx.NodeProto:
    return next(n for n in model.graph.node if n.name == name)


# ---------------------------------------------------------------------------------- basics
def test_identical_models_pass_with_contract_json():
    model = builders.tiny_cnn()
    report = compare(model, clone(model))
    assert report.ok
    data = report.to_json()
    json.dumps(data, allow_nan=False)  # strictly valid JSON
    assert data["ok"] is True
    assert [p["reference"] for p in data["pairs"]] == ["logits", "act", "side_out"]
    for pair in data["pairs"]:
        assert {"reference", "candidate", "max_abs_diff", "max_rel_diff", "ok", "mismatches",
                "mismatch_percent", "worst_index", "cosine"} <= set(pair)
        assert pair["max_abs_diff"] == 0.0 and pair["ok"] is True
    assert report.divergence is None
    assert "ok: 3/3" in report.to_text()


def test_comparing_nothing_fails():
    a = builders.tiny_cnn()
    b = clone(a)
    for out in b.graph.output:
        out.name = out.name  # same structure ...
    b.graph.node[-1].output[0] = "other"
    b.graph.node[-2].output[0] = "other_logits"
    del b.graph.output[:]
    b.graph.output.extend([helper.make_tensor_value_info("other", F, [1, 4, 8, 8]),
                           helper.make_tensor_value_info("other_logits", F, [1, 5])])
    report = compare(a, b)
    assert not report.ok
    assert report.pairs == ()
    assert "nothing was compared" in (report.reason or "")
    assert report.to_json()["ok"] is False


def test_explicit_pairs_compare_renamed_outputs():
    a = builders.tiny_cnn()
    b = clone(a)
    node(b, "fc").output[0] = "scores"
    b.graph.output[0].name = "scores"
    assert compare(a, b, pairs={"logits": "scores"}).ok
    assert compare(a, b, pairs=[("act", "act")]).ok


def test_unknown_pair_name_is_a_usage_error():
    a = builders.tiny_cnn()
    with pytest.raises(Exception, match="not found|did you mean"):
        compare(a, a, pairs={"nope": "logits"})


# ----------------------------------------------------------------------- comparison rules
def test_tolerances_by_dtype():
    assert default_tolerance("float32") == (1e-4, 1e-5)
    assert default_tolerance("float16") == (1e-3, 2.5e-3)
    assert default_tolerance("bfloat16") == (1e-2, 2e-2)
    assert default_tolerance("int64") == (0.0, 0.0)
    assert default_tolerance("bool") == (0.0, 0.0)


def test_element_fails_only_when_it_exceeds_both_tolerances():
    ref = np.array([1000.0, 0.0, 1.0], np.float32)
    # 1000 -> 1000.05: abs 5e-2 > atol but rel 5e-5 < rtol: passes
    # 0 -> 5e-6: rel inf > rtol but abs 5e-6 < atol: passes
    cand = np.array([1000.05, 5e-6, 1.0], np.float32)
    assert compare_arrays(ref, cand).ok
    bad = np.array([1000.0, 0.0, 1.001], np.float32)  # abs 1e-3 and rel 1e-3 exceed both
    report = compare_arrays(ref, bad)
    assert not report.ok and report.mismatches == 1 and report.worst_index == (2,)
    assert report.max_abs_diff == pytest.approx(1e-3, rel=1e-2)
    assert report.max_rel_diff == pytest.approx(1e-3, rel=1e-2)


def test_exact_mode_is_bit_identity():
    ref = np.array([0.0, 1.0], np.float32)
    assert compare_arrays(ref, ref.copy(), exact=True).ok
    assert not compare_arrays(ref, np.array([-0.0, 1.0], np.float32), exact=True).ok
    close = np.nextafter(ref, np.float32(2))
    assert compare_arrays(ref, close).ok
    assert not compare_arrays(ref, close, exact=True).ok


def test_integers_and_bools_are_exact():
    assert not compare_arrays(np.array([1, 2], np.int64), np.array([1, 3], np.int64)).ok
    assert compare_arrays(np.array([True, False]), np.array([True, False])).ok
    assert not compare_arrays(np.array([True, False]), np.array([True, True])).ok
    big = np.array([2**60], np.int64)
    assert not compare_arrays(big, big + 1).ok  # beyond float64's integer precision


def test_nan_and_inf_positions_must_match():
    ref = np.array([np.nan, 1.0, np.inf, -np.inf], np.float32)
    assert compare_arrays(ref, ref.copy()).ok
    report = compare_arrays(ref, np.array([0.0, 1.0, np.inf, -np.inf], np.float32))
    assert not report.ok and "NaN" in (report.reason or "") and report.worst_index == (0,)
    assert not compare_arrays(ref, np.array([np.nan, 1.0, -np.inf, -np.inf], np.float32)).ok
    assert not compare_arrays(ref, np.array([np.nan, np.nan, np.inf, -np.inf], np.float32)).ok
    json.dumps(report.to_json(), allow_nan=False)


def test_shape_and_dtype_mismatch_fail():
    ref = np.zeros((2, 3), np.float32)
    assert "shape" in (compare_arrays(ref, np.zeros((3, 2), np.float32)).reason or "")
    assert "dtype" in (compare_arrays(ref, np.zeros((2, 3), np.float64)).reason or "")


def _sqrt_model(relu_first: bool) -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu")] if relu_first else []
    nodes.append(helper.make_node("Sqrt", ["r" if relu_first else "x"], ["y"], name="sqrt"))
    graph = helper.make_graph(nodes, "sqrt", [helper.make_tensor_value_info("x", F, [16])],
                              [helper.make_tensor_value_info("y", F, [16])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_nan_in_both_models_passes_nan_in_one_fails():
    nan_model = _sqrt_model(False)  # sqrt of negative inputs -> NaN
    assert compare(nan_model, clone(nan_model)).ok
    x = run_model(nan_model, random_samples(input_specs(GraphIndex(nan_model)))[0])["y"]
    assert np.isnan(x).any(), "the test needs NaN values"
    report = compare(nan_model, _sqrt_model(True))
    assert not report.ok
    assert "NaN" in (report.pairs[0].reason or "")


# ----------------------------------------------------------------------------------- inputs
def _gather_model(table_rows: int) -> onnx.ModelProto:
    """ids:int32[1,5] -> Cast(int64) -> Unsqueeze -> Gather(table[rows,4]) -> y."""
    table = numpy_helper.from_array(
        np.arange(table_rows * 4, dtype=np.float32).reshape(table_rows, 4), "table")
    axes = numpy_helper.from_array(np.array([0], np.int64), "axes")
    nodes = [
        helper.make_node("Cast", ["ids"], ["ids64"], name="cast", to=TensorProto.INT64),
        helper.make_node("Unsqueeze", ["ids64", "axes"], ["ids3"], name="unsq"),
        helper.make_node("Gather", ["table", "ids3"], ["y"], name="embed", axis=0),
    ]
    graph = helper.make_graph(
        nodes, "gather", [helper.make_tensor_value_info("ids", TensorProto.INT32, ["batch", 5])],
        [helper.make_tensor_value_info("y", F, None)], [table, axes])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_integer_inputs_stay_inside_the_gather_table():
    model = _gather_model(3)
    specs = input_specs(GraphIndex(model))
    assert specs[0].high == 3
    samples = random_samples(specs, samples=4, dims={"batch": 7})
    for s in samples:
        assert s["ids"].dtype == np.int32 and s["ids"].shape == (7, 5)
        assert s["ids"].min() >= 0 and s["ids"].max() < 3
    assert len({s["ids"].tobytes() for s in samples}) > 1
    # out-of-range ids make onnxruntime fail: the bound is what lets this run
    report = compare(model, clone(model), samples=4)
    assert report.ok and report.samples == 4


def test_random_inputs_respect_dtype_shape_and_seed():
    bool_in = helper.make_tensor_value_info("flag", TensorProto.BOOL, [3])
    half_in = helper.make_tensor_value_info("h", TensorProto.FLOAT16, ["n", 2])
    graph = helper.make_graph(
        [helper.make_node("Not", ["flag"], ["nf"]), helper.make_node("Neg", ["h"], ["nh"])],
        "types", [bool_in, half_in],
        [helper.make_tensor_value_info("nf", TensorProto.BOOL, [3]),
         helper.make_tensor_value_info("nh", TensorProto.FLOAT16, ["n", 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    specs = input_specs(GraphIndex(model))
    a = random_samples(specs, seed=3, samples=2, dims={"n": 4})
    b = random_samples(specs, seed=3, samples=2, dims={"n": 4})
    assert a[0]["h"].dtype == np.float16 and a[0]["h"].shape == (4, 2)
    assert a[0]["flag"].dtype == np.bool_
    assert np.array_equal(a[0]["h"], b[0]["h"])
    # default: independent samples, floats uniform in [-1, 1)
    assert not np.array_equal(a[1]["h"], a[0]["h"]) and not np.array_equal(a[1]["h"], -a[0]["h"])
    assert all(s["h"].min() >= -1 and s["h"].max() < 1 for s in a)
    # mirror pairs (models holding an If): the odd sample mirrors the even one within its range
    m = random_samples(specs, seed=3, samples=2, dims={"n": 4}, mirror=True)
    assert np.array_equal(m[1]["h"], -m[0]["h"]) and np.array_equal(m[1]["flag"], ~m[0]["flag"])
    assert not np.array_equal(random_samples(specs, seed=4)[0]["h"], a[0]["h"])
    assert compare(model, model, dims={"n": 4}, samples=2).ok


def test_if_models_take_both_branches_with_samples():
    model = builders.if_capture()
    report = compare(model, clone(model))  # default samples: 2 when an If is present
    assert report.ok and report.samples == 2
    assert not any("took only" in n for n in report.notes)
    one = compare(model, clone(model), samples=1)
    assert any("took only" in n for n in one.notes)
    # a bug in the branch the first sample does not take is found only with both samples
    first = random_samples(input_specs(GraphIndex(model)))[0]["x"]
    untaken = "else_branch" if first.sum() > 0 else "then_branch"
    broken = clone(model)
    attr = next(a for a in broken.graph.node[3].attribute if a.name == untaken)
    attr.g.node[0].op_type = "Add" if attr.g.node[0].op_type != "Add" else "Sub"
    assert compare(model, broken, samples=1).ok
    report = compare(model, broken)
    assert not report.ok
    assert report.divergence is not None and report.divergence.tensor == "y"
    assert report.divergence.node == "branch"


def test_user_inputs_from_npz_file_and_folder(tmp_path):
    model = builders.tiny_cnn()
    x = np.random.default_rng(5).standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.savez(tmp_path / "one.npz", x=x)
    folder = tmp_path / "set"
    folder.mkdir()
    for i in range(3):
        np.savez(folder / f"s{i}.npz", x=(x * (i + 1)).astype(np.float64))  # cast same-kind
    assert compare(model, model, inputs=tmp_path / "one.npz").samples == 1
    seen = []
    report = compare(model, model, inputs=folder, progress=lambda i, n: seen.append((i, n)))
    assert report.ok and report.samples == 3 and seen[-1] == (3, 3)
    np.savez(tmp_path / "bad.npz", y=x)
    with pytest.raises(UsageError, match="not inputs of the model"):
        compare(model, model, inputs=tmp_path / "bad.npz")
    np.savez(tmp_path / "shape.npz", x=x[:, :2])
    with pytest.raises(UsageError, match="shape"):
        compare(model, model, inputs=tmp_path / "shape.npz")


# ---------------------------------------------------------------- running and external data
def test_intermediates_in_bounded_batches_equal_one_big_batch():
    model = mlp()
    feed = random_samples(input_specs(GraphIndex(model)))[0]
    names = [o for n in model.graph.node for o in n.output]
    small = run_model(model, feed, outputs=names, batch=2)
    big = run_model(model, feed, outputs=names, batch=len(names))
    assert set(small) == set(names)
    for n in names:
        assert np.array_equal(small[n], big[n])


def test_bfloat16_tensors_compare_through_an_exact_cast():
    nodes = [helper.make_node("Cast", ["x"], ["b"], to=TensorProto.BFLOAT16),
             helper.make_node("Cast", ["b"], ["y"], to=F)]
    graph = helper.make_graph(nodes, "bf", [helper.make_tensor_value_info("x", F, [4])],
                              [helper.make_tensor_value_info("b", TensorProto.BFLOAT16, [4]),
                               helper.make_tensor_value_info("y", F, [4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    report = compare(model, clone(model))
    assert report.ok
    assert report.pairs[0].dtype == "bfloat16" and report.pairs[0].rtol == 1e-2


def _external_model(tmp_path, model: onnx.ModelProto, name: str):
    path = tmp_path / name
    save(Model(model), path, external=True)
    assert (tmp_path / f"{name}.data").exists()
    loaded = load(path)
    assert any(t.data_location == TensorProto.EXTERNAL for t in loaded.proto.graph.initializer)
    return path


def test_external_data_models_verify_from_paths(tmp_path):
    ref = _external_model(tmp_path, mlp(width=64), "ref.onnx")
    broken = mlp(width=64)
    w = numpy_helper.to_array(broken.graph.initializer[4]) * np.float32(1 + 1e-3)
    broken.graph.initializer[4].CopyFrom(numpy_helper.from_array(w.astype(np.float32), "W2"))
    cand = _external_model(tmp_path, broken, "cand.onnx")
    assert compare(ref, ref).ok
    assert compare(load(ref), load(ref)).ok
    report = compare(ref, cand, rtol=1e-6, atol=1e-7)
    assert not report.ok
    assert report.divergence is not None and report.divergence.tensor == "mm2"
    assert report.divergence.differing_weights == ("W2",)


# ------------------------------------------------------------------ caught and located
def _scaled_weight(model):
    w = numpy_helper.to_array(model.graph.initializer[6])  # W3
    model.graph.initializer[6].CopyFrom(
        numpy_helper.from_array((w * np.float32(1 + 1e-3)).astype(np.float32), "W3"))


def _rerouted_consumer(model):
    node(model, "Add_4").input[0] = "add3"  # should read mm4: same shape [1, 8]


def _swapped_sub(model):
    sub = node(model, "final_sub")
    sub.input[0], sub.input[1] = sub.input[1], sub.input[0]


def _removed_relu(model):
    relu = node(model, "Relu_2")
    model.graph.node.remove(relu)
    node(model, "MatMul_3").input[0] = "add2"  # short-circuit relu2


BUGS = {
    "weight_scaled": (_scaled_weight, "mm3", "MatMul_3"),
    "consumer_rerouted": (_rerouted_consumer, "add4", "Add_4"),
    "sub_swapped": (_swapped_sub, "y", "final_sub"),
    "node_removed": (_removed_relu, "mm3", "MatMul_3"),
}


@pytest.mark.parametrize("bug", sorted(BUGS))
@pytest.mark.parametrize("batch", [2, 3, 32])
def test_each_bug_is_caught_and_located(bug, batch):
    edit, tensor, node_name = BUGS[bug]
    reference = mlp()
    candidate = clone(reference)
    edit(candidate)
    onnx.checker.check_model(candidate)
    report = compare(reference, candidate, batch=batch)
    assert not report.ok, bug
    div = report.divergence
    assert div is not None
    assert (div.tensor, div.node) == (tensor, node_name)
    assert div.sessions >= 2
    text = format_report(report)
    assert f"tensor '{tensor}'" in text and "FAILED" in text
    if bug == "weight_scaled":
        assert div.differing_weights == ("W3",)
    if bug in ("consumer_rerouted", "sub_swapped", "node_removed"):
        assert div.reference_inputs != div.candidate_inputs


def test_location_reports_the_framework_name():
    reference = mlp()
    entry = reference.metadata_props.add()
    entry.key, entry.value = "onnxsurgeon.name_map", json.dumps({"net/layer3/MatMul:0": "mm3"})
    candidate = clone(reference)
    _scaled_weight(candidate)
    div = compare(reference, candidate).divergence
    assert div is not None and div.framework_name == "net/layer3/MatMul:0"
    assert "net/layer3/MatMul:0" in div.to_text()


def test_broken_candidate_that_cannot_run_fails_the_report():
    reference = _gather_model(10)
    candidate = clone(reference)
    candidate.graph.initializer[0].CopyFrom(numpy_helper.from_array(
        np.zeros((10, 3), np.float32), "table"))
    report = compare(reference, candidate)
    assert not report.ok


# ------------------------------------------------------------- the cross-framework hook
def test_verify_against_a_reference_callable():
    model = mlp()
    weights = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}

    def numpy_mlp(feeds, *, bug=False):
        h = feeds["x"].astype(np.float64)
        relu1 = None
        for i in range(LAYERS):
            h = np.maximum(h @ weights[f"W{i}"] + weights[f"b{i}"], 0)
            if i == 1:
                relu1 = h
        out = h - np.tanh(relu1)
        return {"y": (out * (1.01 if bug else 1)).astype(np.float32)}

    good = verify_against(numpy_mlp, model, samples=3)
    assert good.ok and good.kind == "against" and good.samples == 3
    assert good.pairs[0].rtol == 1e-3
    bad = verify_against(lambda f: numpy_mlp(f, bug=True), model)
    assert not bad.ok
    positional = verify_against(lambda f: [numpy_mlp(f)["y"]], model)
    assert positional.ok


# ------------------------------------------------------------ real exported models
REAL_MODELS = ["torch_cnn", "keras_cnn", "tf1_seed", "seed_cnn"]


def _real(name: str) -> onnx.ModelProto:
    from pathlib import Path

    return onnx.load(str(Path(__file__).resolve().parent.parent / "models" / f"{name}.onnx"))


@pytest.mark.parametrize("name", REAL_MODELS)
def test_real_exported_models_scaled_weight_is_located(name):
    reference = _real(name)
    conv = next(n for n in reference.graph.node if n.op_type == "Conv")
    candidate = clone(reference)
    w = next(t for t in candidate.graph.initializer if t.name == conv.input[1])
    w.CopyFrom(numpy_helper.from_array(
        (numpy_helper.to_array(w) * np.float32(1 + 1e-3)).astype(np.float32), w.name))
    assert compare(reference, clone(reference)).ok
    report = compare(reference, candidate)
    assert not report.ok
    div = report.divergence
    assert div is not None and (div.tensor, div.node) == (conv.output[0], conv.name)
    assert div.differing_weights == (conv.input[1],)
    if name == "torch_cnn":
        assert div.framework_name == "conv5"


@pytest.mark.parametrize("name", REAL_MODELS)
def test_real_exported_models_removed_relu_is_located(name):
    reference = _real(name)
    relu = next(n for n in reference.graph.node if n.op_type == "Relu")
    first_reader = next(n for n in reference.graph.node if relu.output[0] in n.input)
    candidate = clone(reference)
    for n in candidate.graph.node:
        for k, inp in enumerate(n.input):
            if inp == relu.output[0]:
                n.input[k] = relu.input[0]
    candidate.graph.node.remove(next(n for n in candidate.graph.node if n.name == relu.name))
    report = compare(reference, candidate)
    assert not report.ok
    div = report.divergence
    assert div is not None and div.node == first_reader.name


def test_external_model_and_its_variants_read_the_weights_in_place(tmp_path):
    """Sessions run from the proto's bytes with onnxruntime reading the external data from the
    model's folder (issue 29): neither the outputs nor a variant copies the weights."""
    from onnxsurgeon.verify.run import Staged, Workspace

    path = _external_model(tmp_path, mlp(width=64), "m.onnx")
    feed = random_samples(input_specs(GraphIndex(mlp(width=64))))[0]
    with Workspace() as ws:
        staged = Staged(load(path), ws, "m")
        assert staged.source_path == path.resolve()
        base = staged.run(feed)
        assert list(ws.dir.iterdir()) == []  # no weight copy to compute the outputs
        inner = staged.run(feed, ["mm0", "y"])
        assert list(ws.dir.iterdir()) == []
        assert np.array_equal(inner["y"], base["y"])
    changed = load(path)
    changed.proto.graph.node[0].name = "renamed"
    with Workspace() as ws:
        assert Staged(changed, ws, "m").source_path is None
    assert not ws.dir.exists()


# ------------------------------------------------ gauntlet regression (moved from test_gauntlet.py)


def test_regression_sequence_of_maps_outputs_are_compared():
    """Bug 5: every ZipMap output (scikit-learn classifiers) failed verification."""
    from onnxsurgeon.verify import compare_arrays

    a = [{0: 0.25, 1: 0.75}, {0: 0.5, 1: 0.5}]
    assert compare_arrays(a, [dict(d) for d in a], exact=True).ok
    assert not compare_arrays(a, [{0: 0.25, 1: 0.75}, {0: 0.5, 1: 0.6}], exact=True).ok
    assert not compare_arrays(a, a[:1]).ok
    assert not compare_arrays(a, [{0: 0.25, 2: 0.75}, {0: 0.5, 1: 0.5}]).ok


def _add_model(opset: int, elem: int) -> onnx.ModelProto:
    vi = [helper.make_tensor_value_info(n, elem, [2]) for n in "xyz"]
    graph = helper.make_graph([helper.make_node("Add", ["x", "y"], ["z"])], "g", vi[:2], vi[2:])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 3 if opset < 8 else 8
    return model


def test_a_missing_kernel_at_an_old_opset_advises_the_opset_command(tmp_path, capsys):
    """onnx's pytorch-operator test models are at opset 6 (Add(6), Gemm(6)): onnxruntime has no
    kernel for them, and every --verify names the conversion that fixes it; the converted model
    verifies. A missing kernel at a current version (Add(14) on bfloat16) is not about the opset."""
    from .cli_helpers import cli_main

    old, out = tmp_path / "add6.onnx", tmp_path / "add13.onnx"
    save(_add_model(6, TensorProto.FLOAT), old)
    for argv in (["verify", old, old], ["rename", old, "-o", tmp_path / "r.onnx", "--map",
                                        "z=w", "--verify"]):
        code, _, err = cli_main(capsys, *argv)
        assert code == 2 and err.count("\n") == 1, err
        assert "no kernel for Add at opset 6" in err
        assert "onnxsurgeon opset MODEL -o OUT --to 13" in err
    assert cli_main(capsys, "opset", old, "-o", out, "--to", "13")[0] == 0
    assert cli_main(capsys, "verify", out, out)[0] == 0
    from onnxsurgeon.verify.run import ModelRunError, new_session

    with pytest.raises(ModelRunError, match=r"Add\(14\).*check the model") as refused:
        new_session(_add_model(14, TensorProto.BFLOAT16).SerializeToString())
    assert "opset MODEL" not in str(refused.value)


def test_staged_types_follow_what_a_session_says():
    """A staged model's types are answered once per tensor, and again after a session says
    more: mm0 of a batch-N model is inferred ['N', 8], then, once a session computing it has
    run, onnxruntime's type (its own dim names unknown) is the answer, as it was before the
    answers were kept."""
    from onnxsurgeon.verify.run import Staged, Workspace

    model = mlp()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "N"
    with Workspace() as ws:
        staged = Staged(Model(model), ws, "m")
        oracle = staged.oracle
        assert oracle.declared_elem("mm0") == 0 and oracle.elem_type("mm0") == TensorProto.FLOAT
        assert oracle.shape("mm0") == ["N", WIDTH]
        x = np.zeros((3, WIDTH), np.float32)
        assert staged.run({"x": x}, ["mm0"])["mm0"].shape == (3, WIDTH)
        assert oracle.declared_elem("mm0") == TensorProto.FLOAT
        assert oracle.shape("mm0") == [None, WIDTH]
