"""verify never passes vacuously (issue 8): informativeness per pair, deepening, verdicts, input
ranges. Every model is built with onnx.helper and run in onnxruntime; each vacuous case below
said "ok" before this change."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsurgeon.errors import UsageError
from onnxsurgeon.io import save
from onnxsurgeon.surgery import insert
from onnxsurgeon.verify import compare, verify_log

from . import builders
from .cli_helpers import cli
from .test_verify import clone

F = TensorProto.FLOAT
WIDTH = 64


def _model(nodes, inputs, outputs, inits) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "m", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def sub_relu(low: float, *, swapped: bool = False) -> onnx.ModelProto:
    """x[1,64] -> Sub(x, b) -> s -> Relu -> y, b uniform in [low, 3]."""
    b = np.random.default_rng(7).uniform(low, 3.0, (1, WIDTH)).astype(np.float32)
    operands = ["b", "x"] if swapped else ["x", "b"]
    return _model([helper.make_node("Sub", operands, ["s"], name="sub"),
                   helper.make_node("Relu", ["s"], ["y"], name="relu")],
                  [helper.make_tensor_value_info("x", F, [1, WIDTH])],
                  [helper.make_tensor_value_info("y", F, [1, WIDTH])],
                  [numpy_helper.from_array(b, "b")])


def wrong_axis_l2(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with l2_normalize inserted at the Sub output along the batch axis (wrong)."""
    out = clone(model)
    insert(out, "s", op="l2_normalize", params={"axis": 0})
    return out


def constant_head(scale: float = 1.0, *, reorder: bool = False) -> onnx.ModelProto:
    """y = MatMul(c, W) + Mul(x, 0): the outputs do not depend on the input x."""
    rng = np.random.default_rng(3)
    c = rng.uniform(-1, 1, (1, 8)).astype(np.float32)
    w = (rng.uniform(-1, 1, (8, 8)) * scale).astype(np.float32)
    add = ["xz", "mm"] if reorder else ["mm", "xz"]
    return _model([helper.make_node("MatMul", ["c", "W"], ["mm"], name="matmul"),
                   helper.make_node("Mul", ["x", "zero"], ["xz"], name="mul"),
                   helper.make_node("Add", add, ["y"], name="add")],
                  [helper.make_tensor_value_info("x", F, [1, 8])],
                  [helper.make_tensor_value_info("y", F, [1, 8])],
                  [numpy_helper.from_array(c, "c"), numpy_helper.from_array(w, "W"),
                   numpy_helper.from_array(np.zeros((1,), np.float32), "zero")])


def softmax_head(gain: float) -> onnx.ModelProto:
    """x[1,16] -> MatMul W*gain -> logits -> Softmax -> probs; a large gain saturates it."""
    w = (np.random.default_rng(11).standard_normal((16, 10)) * gain).astype(np.float32)
    return _model([helper.make_node("MatMul", ["x", "W"], ["logits"], name="fc"),
                   helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=-1)],
                  [helper.make_tensor_value_info("x", F, [1, 16])],
                  [helper.make_tensor_value_info("probs", F, [1, 10])],
                  [numpy_helper.from_array(w, "W")])


def scaled(model: onnx.ModelProto, name: str, factor: float) -> onnx.ModelProto:
    out = clone(model)
    t = next(t for t in out.graph.initializer if t.name == name)
    t.CopyFrom(numpy_helper.from_array((numpy_helper.to_array(t) * np.float32(factor))
                                       .astype(np.float32), name))
    return out


# ------------------------------------------------------------------- the examples
def test_relu_that_zeroes_everything_is_never_a_pass():
    ref = sub_relu(1.0)  # b >= 1 > x: Relu zeroes every element of every sample
    report = compare(ref, wrong_axis_l2(ref))
    assert report.verdict == "inconclusive" and not report.ok
    (pair,) = report.pairs
    assert not pair.informative and "saturated" in (pair.why or "")
    assert "--inputs" in (report.reason or "") and "--range" in (report.reason or "")
    # the shared Sub output agrees and is informative, but the Relu reads another tensor now
    assert report.deep is not None and [t.tensor for t in report.deep.tensors] == ["s", "y"]
    # swapped Sub operands: the deeper tensor differs
    swapped = compare(ref, sub_relu(1.0, swapped=True))
    assert swapped.verdict == "fail"
    assert swapped.divergence is not None and swapped.divergence.node == "sub"


@pytest.mark.parametrize("low", [0.5, 1.0])
def test_sub_relu_examples_give_fail_or_inconclusive(low):
    ref = sub_relu(low)
    for cand in (wrong_axis_l2(ref), sub_relu(low, swapped=True)):
        assert compare(ref, cand).verdict in ("fail", "inconclusive")
        assert compare(ref, cand, deep=True).verdict in ("fail", "inconclusive")


def test_identical_models_pass_through_the_same_graph_from_informative_tensors():
    ref = sub_relu(1.0)
    report = compare(ref, clone(ref))
    assert report.verdict == "pass" and report.ok
    (pair,) = report.pairs
    assert not pair.informative and "'s'" in (pair.evidence or "")
    data = report.to_json()
    assert data["verdict"] == "pass" and data["pairs"][0]["informative"] is False
    assert data["pairs"][0]["why"].startswith("saturated")


def test_outputs_independent_of_the_input_fail_when_a_weight_changes():
    ref = constant_head()
    report = compare(ref, scaled(ref, "W", 1.01))
    assert report.verdict == "fail"
    (pair,) = report.pairs
    assert "constant across 2 samples" in (pair.why or "") or not pair.agree
    assert report.divergence is not None and report.divergence.node == "matmul"
    assert report.divergence.differing_weights == ("W",)
    assert report.divergence.cause == "wrong node"


def test_outputs_independent_of_the_input_are_inconclusive_without_shared_evidence():
    ref = constant_head()
    other = constant_head(reorder=True)  # the same constant, computed by another graph
    report = compare(ref, other)
    assert report.verdict == "inconclusive"
    assert "constant across 2 samples on both sides" in (report.pairs[0].why or "")
    # the same model: the same graph from the same inputs and weights proves it
    assert compare(ref, clone(ref)).verdict == "pass"


def test_saturated_softmax_deepens_to_its_logits():
    ref = softmax_head(gain=400.0)
    cand = scaled(ref, "W", 1.01)
    report = compare(ref, cand)
    (pair,) = report.pairs
    assert not pair.informative and "saturated" in (pair.why or "")
    assert report.verdict == "fail"
    assert "'logits'" in (pair.evidence or "")
    assert report.divergence is not None and report.divergence.tensor == "logits"
    assert compare(ref, clone(ref)).verdict == "pass"


def test_unsaturated_softmax_is_informative_and_compared_directly():
    ref = softmax_head(gain=0.3)
    report = compare(ref, scaled(ref, "W", 1.01))
    assert report.pairs[0].informative and report.verdict == "fail" and report.deep is None


def wide_softmax(gain: float) -> onnx.ModelProto:
    """x[1,16] -> MatMul W*gain -> logits[1,1000] -> Softmax: with a small gain every probability
    sits near 1e-3 and varies across samples by only a few times atol."""
    w = (np.random.default_rng(5).standard_normal((16, 1000)) * gain).astype(np.float32)
    return _model([helper.make_node("MatMul", ["x", "W"], ["logits"], name="fc"),
                   helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=-1)],
                  [helper.make_tensor_value_info("x", F, [1, 16])],
                  [helper.make_tensor_value_info("probs", F, [1, 1000])],
                  [numpy_helper.from_array(w, "W")])


def test_output_varying_by_about_the_tolerance_deepens_to_its_logits():
    # Keras ResNet50 at 32x32 in miniature: the change (5% of W) stays under atol at the
    # softmax, whose variation across samples is itself about atol; it said "ok" before
    ref = wide_softmax(gain=0.005)
    cand = scaled(ref, "W", 1.05)
    report = compare(ref, cand)
    (pair,) = report.pairs
    assert pair.agree and pair.max_abs_diff is not None and pair.max_abs_diff < 1e-5
    assert not pair.informative and "below the tolerance's resolution" in (pair.why or "")
    assert report.verdict == "fail" and "'logits'" in (pair.evidence or "")
    assert report.divergence is not None and report.divergence.tensor == "logits"
    same = compare(ref, clone(ref))
    assert same.verdict == "pass" and "'logits'" in (same.pairs[0].evidence or "")
    # a tolerance fine enough for its variation makes the output itself informative
    tight = compare(ref, cand, atol=1e-7)
    assert tight.pairs[0].informative and tight.verdict == "fail" and tight.deep is None
    # and a softmax that varies by many tolerances is compared directly, as before
    wide = compare(wide_softmax(gain=0.5), clone(wide_softmax(gain=0.5)))
    assert wide.pairs[0].informative and wide.verdict == "pass" and wide.deep is None


def test_non_finite_everywhere_is_not_informative():
    model = _model([helper.make_node("Div", ["x", "zero"], ["q"]),
                    helper.make_node("Mul", ["q", "zero"], ["y"])],
                   [helper.make_tensor_value_info("x", F, [1, 4])],
                   [helper.make_tensor_value_info("y", F, [1, 4])],
                   [numpy_helper.from_array(np.zeros((1,), np.float32), "zero")])
    report = compare(model, model, pairs={"y": "y"})
    assert not report.pairs[0].informative and "non-finite" in (report.pairs[0].why or "")


def test_constancy_needs_two_samples_and_says_so():
    ref = constant_head()
    one = compare(ref, constant_head(reorder=True), samples=1)
    assert one.pairs[0].informative  # one sample cannot tell a constant
    assert any("one sample" in n for n in one.notes)


# ---------------------------------------------------------------------- rewrite checks
def test_rewrite_verification_judges_informativeness_and_settles_by_structure():
    ref = sub_relu(1.0)
    new = clone(ref)
    insert(new, "s", op="l2_normalize", params={"axis": 1})
    report = verify_log(ref, new)
    assert report.verdict == "pass", report.to_text()
    down = next(p for p in report.pairs if p.check == "downstream")
    assert not down.informative and down.evidence  # settled: same graph fed the same values
    assert "recomputed with s := " in down.reference_text
    block = next(p for p in report.pairs if p.check == "block")
    assert block.reference == "l2_normalize(s)" and "evaluated alone" in block.reference_text


# ------------------------------------------------------------------------------ inputs
def test_default_inputs_are_uniform_and_reported():
    report = compare(builders.tiny_cnn(), builders.tiny_cnn())
    assert report.samples == 2
    assert report.inputs == {"x": "uniform[-1,1) float32 1x3x8x8"}
    assert "input x: uniform[-1,1) float32 1x3x8x8" in report.to_text()


def test_ranges_per_input_and_for_every_float(tmp_path):
    model = builders.tiny_cnn()
    report = compare(model, model, ranges={"*": (0.0, 1.0)}, save_inputs=tmp_path / "in.npz")
    assert report.inputs["x"].startswith("uniform[0,1) float32")
    with np.load(tmp_path / "in.npz") as data:
        assert sorted(data.files) == ["sample0/x", "sample1/x"]
        xs = [data["sample0/x"], data["sample1/x"]]
    assert all(x.min() >= 0 and x.max() < 1 for x in xs)
    replay = compare(model, model, inputs=tmp_path / "in.npz")
    assert replay.samples == 2 and replay.ok
    with pytest.raises(UsageError, match="no input 'nope'"):
        compare(model, model, ranges={"nope": (0.0, 1.0)})


def test_integer_ranges_for_token_ids():
    table = numpy_helper.from_array(np.arange(50 * 4, dtype=np.float32).reshape(50, 4), "E")
    model = _model([helper.make_node("Gather", ["E", "ids"], ["y"], axis=0)],
                   [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 6])],
                   [helper.make_tensor_value_info("y", F, [1, 6, 4])], [table])
    report = compare(model, model, ranges={"ids": (10, 20)}, samples=4)
    assert report.inputs["ids"] == "integers[10,20) int64 1x6" and report.ok
    assert compare(model, model).inputs["ids"].startswith("integers[0,50) int64 1x6")


def test_meaningless_comparisons_are_refused(tmp_path):
    a = builders.tiny_cnn()
    b = clone(a)
    b.graph.input[0].name = "image"
    for n in b.graph.node:
        n.input[:] = ["image" if i == "x" else i for i in n.input]
    with pytest.raises(UsageError, match="different inputs"):
        compare(a, b)
    with pytest.raises(UsageError, match="no input has a dimension named 'batch'"):
        compare(a, a, dims={"batch": 2})
    np.savez(tmp_path / "wide.npz", x=np.zeros((1, 3, 8, 8), np.float64))
    report = compare(a, a, inputs=tmp_path / "wide.npz")
    assert any("'x' converted float64 -> float32" in n for n in report.notes)


# --------------------------------------------------------------------------------- CLI
def test_cli_inconclusive_exits_1_with_one_line_and_can_be_allowed(tmp_path):
    ref, cand = tmp_path / "ref.onnx", tmp_path / "cand.onnx"
    model = sub_relu(1.0)
    save(model, ref)
    save(wrong_axis_l2(model), cand)
    proc = cli("verify", ref, cand)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("onnxsurgeon: inconclusive:")
    assert "INCONCLUSIVE" in proc.stdout and "input x: uniform[-1,1)" in proc.stdout
    allowed = cli("verify", ref, cand, "--allow-inconclusive", "--json")
    assert allowed.returncode == 0 and "warning" in allowed.stderr
    data = json.loads(allowed.stdout)
    assert data["verdict"] == "inconclusive" and data["ok"] is False
    assert data["inputs"] == {"x": "uniform[-1,1) float32 1x64"}
    assert data["pairs"][0]["informative"] is False
    # a range that reaches above b makes the Relu output informative, and the bug shows
    wide = cli("verify", ref, cand, "--range=0,4", "--json")
    assert wide.returncode == 1 and json.loads(wide.stdout)["verdict"] == "fail"


def test_cli_identical_and_changed_models(tmp_path):
    path = tmp_path / "m.onnx"
    save(softmax_head(400.0), path)
    changed = tmp_path / "c.onnx"
    save(scaled(softmax_head(400.0), "W", 1.01), changed)
    same = cli("verify", path, path)
    assert same.returncode == 0 and same.stdout.strip().splitlines()[-1].startswith("ok:")
    diff = cli("verify", path, changed, "--json")
    assert diff.returncode == 1 and json.loads(diff.stdout)["verdict"] == "fail"


def test_cli_input_flags_are_checked(tmp_path):
    path = tmp_path / "m.onnx"
    save(builders.tiny_cnn(), path)
    for flags, needle in ((["--dim", "batch=2"], "dimension named 'batch'"),
                          (["--range", "y=0,1"], "no input 'y'"),
                          (["--range", "1,0"], "LO < HI"),
                          (["--plot", tmp_path / "p.png"], "add --deep")):
        proc = cli("verify", path, path, *flags)
        assert proc.returncode == 2 and needle in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
    saved = tmp_path / "inputs.npz"
    proc = cli("verify", path, path, "--range", "x=0,1", "--save-inputs", saved, "--samples", "3")
    assert proc.returncode == 0 and saved.exists()
    replay = cli("verify", path, path, "--inputs", saved, "--json")
    assert replay.returncode == 0 and json.loads(replay.stdout)["samples"] == 3


# ------------------------------------------------------------ what was compared to what
def test_cli_rows_name_both_sides_exactly(tmp_path):
    path = tmp_path / "m.onnx"
    save(builders.tiny_cnn(), path)
    proc = cli("copy", path, "-o", tmp_path / "c.onnx", "--outputs", "logits", "--weights",
               "shared", "--prefix", "s/", "--replace-input", "act=conv5_out", "--verify")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    row = next(line for line in proc.stdout.splitlines() if line.startswith("copy "))
    assert "logits recomputed with act := conv5_out" in row and "s/logits" in row
    proc = cli("insert", path, "-o", tmp_path / "i.onnx", "--at", "act", "--op",
               "l2_normalize:axis=1", "--verify", "--rename-output")  # act/l2_normalize: a name of its own
    assert proc.returncode == 0, proc.stdout + proc.stderr
    block = next(line for line in proc.stdout.splitlines() if line.startswith("block "))
    assert "l2_normalize(act) evaluated alone" in block
    down = [line for line in proc.stdout.splitlines() if line.startswith("downstream ")]
    assert down and all("recomputed with act := act/l2_normalize" in line for line in down)


def test_insert_that_changes_the_shape_verifies_its_cut_model(tmp_path):
    # value_info on every tensor, as exporters write it: the cut model must not hold the fed
    # values (global_avg_pool: [1,4,1,1]) to the original's shape ([1,4,8,8])
    model = onnx.shape_inference.infer_shapes(builders.tiny_cnn())
    assert any(vi.name == "conv5_out" for vi in model.graph.value_info)
    path, out = tmp_path / "m.onnx", tmp_path / "d3.onnx"
    save(model, path)
    proc = cli("insert", path, "-o", out, "--at", "conv5_out", "--op", "global_avg_pool",
               "--verify")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert out.exists() and "[W:onnxruntime" not in proc.stderr and proc.stderr == ""


def test_verify_that_does_not_pass_writes_nothing(tmp_path, monkeypatch, capsys):
    from onnxsurgeon import cli as cli_mod
    from onnxsurgeon import verify as verify_mod

    path, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    save(sub_relu(1.0), path)
    real = verify_mod.verify_log

    def inconclusive(*args, **kwargs):  # the real report, its pairs judged not informative
        from dataclasses import replace

        from onnxsurgeon.verify.report import make_report

        report = real(*args, **kwargs)
        pairs = [replace(p, verdict="inconclusive", ok=False, informative=False,
                         why="constant", evidence=None) for p in report.pairs]
        return make_report(pairs, samples=report.samples, kind=report.kind)

    monkeypatch.setattr(verify_mod, "verify_log", inconclusive)
    code = cli_mod.main(["insert", str(path), "-o", str(out), "--at", "s", "--op", "identity",
                         "--verify"])
    err = capsys.readouterr().err
    assert code == 1 and not out.exists() and "nothing written" in err
    code = cli_mod.main(["insert", str(path), "-o", str(out), "--at", "s", "--op", "identity",
                         "--verify", "--allow-inconclusive"])
    assert code == 0 and out.exists() and "warning" in capsys.readouterr().err


def test_extract_at_a_stop_tensor_settles_a_saturated_output_by_structure():
    from onnxsurgeon.surgery import extract

    ref = sub_relu(1.0)
    new = clone(ref)
    extract(new, ["y"], inputs=["s"])
    report = verify_log(ref, new)
    assert report.verdict == "pass", report.to_text()
    (pair,) = report.pairs
    assert not pair.informative and pair.evidence
    # a wrong extracted graph (Relu -> Abs) cannot hide behind the saturated output
    bad = clone(new)
    next(n for n in bad.graph.node if n.op_type == "Relu").op_type = "Abs"
    assert verify_log(ref, bad).verdict == "fail"


LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


@pytest.mark.parametrize("name", ["squeezenet"])
def test_onnx_light_models_whose_outputs_barely_depend_on_the_input(name):
    """onnx's backend 'light' models: every weight a ConstantOfShape of one value, so the
    softmax output hardly moves; a 1% change of one weight agrees at the output and is found
    deeper."""
    path = LIGHT / f"light_{name}.onnx"
    if not path.exists():
        pytest.skip("onnx ships no light models here")
    model = onnx.load(path)
    assert compare(model, model).verdict == "pass"
    changed = clone(model)
    nodes = [n for n in changed.graph.node if n.op_type == "ConstantOfShape"]
    target = nodes[len(nodes) // 2]
    value = numpy_helper.to_array(target.attribute[0].t)
    target.attribute[0].t.CopyFrom(numpy_helper.from_array((value * 1.01).astype(value.dtype)))
    report = compare(model, changed)
    assert report.verdict == "fail"
    assert report.pairs[0].agree  # the output alone says nothing
    assert report.divergence is not None and report.divergence.tensor == target.output[0]


def mul_sub_relu() -> onnx.ModelProto:
    """x[1,64] -> Mul(x, w) -> h -> Sub(h, b) -> s -> Relu -> y with b in [5, 6]: y is zero
    everywhere, so only h and s can show a change of w."""
    rng = np.random.default_rng(11)
    w = rng.uniform(0.5, 1.5, (1, WIDTH)).astype(np.float32)
    b = rng.uniform(5.0, 6.0, (1, WIDTH)).astype(np.float32)
    return _model([helper.make_node("Mul", ["x", "w"], ["h"], name="mul"),
                   helper.make_node("Sub", ["h", "b"], ["s"], name="sub"),
                   helper.make_node("Relu", ["s"], ["y"], name="relu")],
                  [helper.make_tensor_value_info("x", F, [1, WIDTH])],
                  [helper.make_tensor_value_info("y", F, [1, WIDTH])],
                  [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])


def test_deepening_follows_the_rewrite_logs_renames():
    """Every intermediate tensor of the candidate was renamed (recorded by `rename`): deepening
    pairs them through the rewrite log, so a changed weight fails and the renamed twin passes."""
    from onnxsurgeon.surgery import rename

    reference = mul_sub_relu()
    renamed = clone(reference)
    rename(renamed, {"h": "h_renamed", "s": "s_renamed"})
    assert {n.output[0] for n in renamed.graph.node} == {"h_renamed", "s_renamed", "y"}
    perturbed = clone(renamed)
    w = next(t for t in perturbed.graph.initializer if t.name == "w")
    w.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(w) * np.float32(1.01), "w"))

    report = compare(reference, perturbed)
    assert report.verdict == "fail", report.to_text()
    assert "'h'" in report.pairs[0].evidence
    report = compare(reference, renamed)
    assert report.verdict == "pass", report.to_text()

    # Without the log (the same renames done by hand) nothing informative is shared.
    unlogged = clone(perturbed)
    del unlogged.metadata_props[:]
    assert compare(reference, unlogged).verdict == "inconclusive"


def _red_pixels(path: Path) -> int:
    """Pixels drawn in matplotlib's tab:red (the plot's 'differs' marks)."""
    import matplotlib.image

    rgb = matplotlib.image.imread(str(path))[..., :3]
    return int((np.abs(rgb - np.array([0.839, 0.153, 0.157])).max(axis=-1) < 0.08).sum())


def test_cli_deep_plot_draws_the_differing_tensors(tmp_path):
    """`verify --deep --plot` writes a PNG where differing tensors are red marks; a model
    compared with itself has none."""
    ref, cand = tmp_path / "ref.onnx", tmp_path / "cand.onnx"
    model = mul_sub_relu()
    save(model, ref)
    save(scaled(model, "w", 1.01), cand)
    changed, same = tmp_path / "changed.png", tmp_path / "same.png"
    proc = cli("verify", ref, cand, "--deep", "--plot", changed)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert changed.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    proc = cli("verify", ref, ref, "--deep", "--plot", same)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _red_pixels(changed) > 20 and _red_pixels(same) == 0
    assert not list(tmp_path.glob(".*.tmp.png"))


def test_a_constant_folded_into_an_initializer_on_one_side_only_is_walked_not_a_crash(tmp_path):
    """A model without inputs whose Constant fold made an initializer: the deep walk from the
    constant output met an initializer on one side and a Constant node on the other, looked the
    missing one up and raised KeyError (verify exited 3). The two are not the same graph, so
    the walk stops there; the output itself still agrees (inconclusive by design, constant)."""
    text = """<ir_version: 8, opset_import: ["": 17]>
g () => (float[3] y) {{
  {c}
  y = Add(c, c)
}}"""
    ref = onnx.parser.parse_model(text.format(c="c = Constant<value = float[3] {1, 2, 3}>()"))
    cand = onnx.parser.parse_model(text.format(c=""))
    cand.graph.initializer.append(numpy_helper.from_array(np.array([1, 2, 3], np.float32), "c"))
    report = compare(ref, cand)
    assert report.pairs[0].agree and report.verdict == "inconclusive"
    paths = [tmp_path / "r.onnx", tmp_path / "c.onnx"]
    onnx.save_model(ref, str(paths[0]))
    onnx.save_model(cand, str(paths[1]))
    proc = cli("verify", *paths)
    assert proc.returncode == 1 and "internal error" not in proc.stderr, proc.stderr
    assert "INCONCLUSIVE: 1/1 pairs agree" in proc.stdout


@pytest.mark.parametrize("second, verdict", [("b", "pass"), ("c", "fail")])
def test_string_outputs_are_compared_equal_or_not(second, verdict):
    """A string output (onnxsim's string Constant scenario) next to a float one: the tolerance
    path took np.isfinite of the strings (TypeError, exit 3). Strings agree when equal."""
    text = """<ir_version: 8, opset_import: ["": 17]>
g (float[3] x) => (float[3] y, string[2] s) {{
  s = Constant<value = string[2] {{"a", "{}"}}>()
  y = Add(x, x)
}}"""
    report = compare(onnx.parser.parse_model(text.format("b")),
                     onnx.parser.parse_model(text.format(second)))
    assert report.verdict == verdict
    (s,) = [p for p in report.pairs if p.reference == "s"]
    assert s.agree is (second == "b")


def _samples(rng, n: int, dtype, kind: int) -> np.ndarray:
    """One random sample of ``n`` elements: plain, with NaN/Inf, or all one value."""
    x = (rng.standard_normal(n) * 10.0 ** rng.integers(-6, 3)).astype(dtype)
    if np.dtype(dtype).kind == "f":
        if kind == 1:
            x[rng.integers(0, n)] = np.nan
            x[rng.integers(0, n)] = np.inf * rng.choice([-1, 1])
        elif kind == 2:
            x[:] = x[0]
    return x


def test_first_difference_test_matches_the_accumulators_verdict():
    """locate's per-tensor test (accumulate.differs, without statistics) says what one
    sample's PairAccumulator says: whether it differs and its max abs diff, for floats
    with NaN/Inf, integers, empty arrays, shape and dtype mismatches, exact or not."""
    from onnxsurgeon.verify.accumulate import PairAccumulator, differs

    rng = np.random.default_rng(3)
    cases = [(np.zeros((0, 3), np.float32), np.zeros((0, 3), np.float32)),
             (np.ones(4, np.float32), np.ones(5, np.float32)),
             (np.ones(4, np.float32), np.ones(4, np.float64))]
    for trial in range(400):
        dtype = [np.float32, np.float64, np.float16, np.int64][trial % 4]
        a = _samples(rng, int(rng.integers(1, 100)), dtype, trial % 3)
        b = a.copy()
        if trial % 5:
            b = (b + rng.standard_normal(a.size) * 10.0 ** rng.integers(-7, 0)).astype(dtype)
        cases.append((a, b))
    seen = set()
    for a, b in cases:
        for exact in (False, True):
            for rtol, atol in ((None, None), (0.0, 0.0), (1e-2, 1e-3)):
                acc = PairAccumulator("r", "c", dtype=a.dtype.name, rtol=rtol, atol=atol,
                                      exact=exact)
                want = (not acc.add(a, b), acc.result().max_abs_diff)
                got = differs(a, b, dtype=a.dtype.name, rtol=rtol, atol=atol, exact=exact)
                assert repr(got) == repr(want), (a, b, exact, rtol, atol)
                seen.add(want[0])
    assert seen == {True, False}


def test_a_side_that_resolves_its_tolerance_varies():
    """SideStats takes a side whose spread reaches RESOLUTION tolerances as varying without
    testing it: the full test (some sample more than a tolerance from the first) agrees."""
    from onnxsurgeon.verify.informative import SideStats

    rng = np.random.default_rng(5)
    resolved = 0
    for trial in range(300):
        rtol, atol = (1e-5, 1e-4) if trial % 2 else (0.0, 0.0)
        n = int(rng.integers(1, 60))
        first = _samples(rng, n, np.float32, trial % 3)
        xs = [first] + [(first + rng.standard_normal(n) * 10.0 ** rng.integers(-7, 0)
                         * (rng.random(n) < 0.2)).astype(np.float32)
                        for _ in range(int(rng.integers(1, 4)))]
        stats = SideStats()
        for x in xs:
            stats.add(x, rtol=rtol, atol=atol)
        y = first.astype(np.float64)
        with np.errstate(invalid="ignore"):
            varies = any(not bool(((np.abs(x.astype(np.float64) - y) <= atol + rtol * np.abs(y))
                                   | (np.isnan(x) & np.isnan(y)) | (x == y)).all())
                         for x in xs[1:])
        assert stats.varies == varies
        resolved += stats.resolves
    assert resolved > 50


def test_distance_from_the_first_sample_is_judged_as_in_float64():
    """Whether a sample varies from the first (SideStats): the float32 estimate leaves every
    element near its tolerance, NaN and Inf to the float64 test, so the answer is the float64
    test's, element by element and for whole arrays."""
    from onnxsurgeon.verify.informative import _beyond_tolerance

    def exact(x, y, rtol, atol):
        x, y = x.astype(np.float64), y.astype(np.float64)
        with np.errstate(invalid="ignore"):
            same = ((np.abs(x - y) <= atol + rtol * np.abs(y)) | (np.isnan(x) & np.isnan(y))
                    | (x == y))
        return not bool(same.all())

    rng = np.random.default_rng(11)
    answers = set()
    for rtol, atol in ((1e-5, 1e-4), (0.0, 1e-4), (1e-3, 1e-30), (0.0, 0.0), (2.0, 1e-4)):
        y = (rng.standard_normal(4000) * 10.0 ** rng.integers(-8, 8, 4000)).astype(np.float32)
        tol = atol + rtol * np.abs(y.astype(np.float64))
        k = rng.choice([0.0, 0.5, 0.9999, 0.99999994, 1.0, 1.0000001, 1.0001, 3.0], y.size)
        x = (y.astype(np.float64) + rng.choice([-1, 1], y.size) * k * tol).astype(np.float32)
        x[:8] = [np.nan, np.inf, -np.inf, np.nan, 3e38, -3e38, 0.0, -0.0]
        y[:8] = [np.nan, np.inf, np.inf, 1.0, -3e38, 3e38, -0.0, 0.0]
        for i in range(y.size):
            got = _beyond_tolerance(x[i:i + 1], y[i:i + 1], rtol, atol)
            assert got == exact(x[i:i + 1], y[i:i + 1], rtol, atol), (x[i], y[i], rtol, atol)
            answers.add(got)
        for start in range(0, y.size, 500):
            part = slice(start, start + 500)
            assert _beyond_tolerance(x[part], y[part], rtol, atol) == exact(x[part], y[part],
                                                                            rtol, atol)
    assert answers == {True, False}


def test_identical_sides_have_a_cosine_of_exactly_one():
    """Bit-identical sides (an exact check, as rename --verify runs) have a cosine of 1
    exactly: it was square / sqrt(square)**2 of a BLAS dot product, 0.9999999999999998 for
    these five values, and its last bits hung on how many threads BLAS split the dot over
    (the report differed between machines). A squared norm that overflows leaves it
    undefined."""
    from onnxsurgeon.verify.accumulate import PairAccumulator

    values = np.array([0.36159505490948474, 1.3040000451301372, 0.9470809631292422,
                       -0.7037352358069926, -1.2654214710460525])
    for dtype in (np.float64, np.float32):
        acc = PairAccumulator("r", "c", dtype=np.dtype(dtype).name, exact=True)
        assert acc.add(values.astype(dtype), values.astype(dtype))
        assert acc.result().cosine == 1.0
    huge = PairAccumulator("r", "c", dtype="float64", exact=True)
    assert huge.add(np.array([1e200, -1e200]), np.array([1e200, -1e200]))
    assert huge.result().cosine is None
