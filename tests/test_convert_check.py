"""The conversion check and the fused-name suggestions on models built the way users build them
(issue 26): Keras applications with random weights saved as ``.keras``, a SavedModel whose integer
``FloorMod`` tf2onnx converts wrongly at batch 1 only, torch modules whose outputs are empty or
constant on the example input. Everything runs through ``python -m onnxsurgeon convert``."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.cli_helpers import cli
from tests.framework_helpers import images, run

pytestmark = pytest.mark.slow

PROJECT = "MobileNetV3Small_1/expanded_conv_project_1/convolution:0"


@pytest.fixture(scope="session")
def mobilenet_v3(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict]:
    """A stock ``MobileNetV3Small(weights=None)`` at 64x64 saved as ``.keras`` and converted by
    the CLI with ``--json``: (.keras, .onnx, the JSON document)."""
    keras = pytest.importorskip("keras")
    folder = tmp_path_factory.mktemp("mnv3")
    keras.utils.set_random_seed(0)
    model = keras.applications.MobileNetV3Small(weights=None, input_shape=(64, 64, 3))
    src = folder / "mnv3.keras"
    model.save(src)
    out = folder / "mnv3.onnx"
    proc = cli("convert", "tf", src, "-o", out, "--json")
    assert proc.returncode == 0, proc.stderr
    return src, out, json.loads(proc.stdout)


@pytest.mark.tf
def test_a_fused_conv_suggests_its_own_batch_norm_output_not_the_next_block(mobilenet_v3):
    """The project conv of the first block is fused with its batch norm and fed straight to the
    next block's expand conv: its value exists only in NCHW. The suggestion holds the 16-channel
    batch-norm output (was: the next block's 72-channel expand conv)."""
    import keras

    src, out, doc = mobilenet_v3
    entry = doc["fused"][PROJECT]
    assert entry["layout"] == "NCHW" and "expanded_conv_1_expand" not in entry["use"], entry
    model = keras.saving.load_model(src)
    x = images((1, 64, 64, 3), seed=3) * 50.0
    probe = keras.Model(model.inputs, model.get_layer("expanded_conv_project_bn").output)
    want = np.transpose(np.asarray(probe(x, training=False)), (0, 3, 1, 2))
    onnx_model = onnx.load(out)
    got = run(onnx_model, {onnx_model.graph.input[0].name: x}, extra=[entry["use"]])[entry["use"]]
    assert got.shape == want.shape and got.shape[1] == 16
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)
    for name, e in doc["fused"].items():   # no suggestion from a later block's expand conv
        if e.get("use") and "expanded_conv_project" in name:
            assert "expanded_conv_1_expand" not in e["use"], (name, e)
    proc = cli("extract", out, "-o", out.with_name("cut.onnx"), "--outputs", PROJECT)
    assert proc.returncode == 2
    assert proc.stderr.endswith(f"use '{entry['use']}' (its value in NCHW layout)\n"), proc.stderr
    proc = cli("inspect", out)
    assert (f"  {PROJECT}: fused into Conv '{entry['node']}'; use '{entry['use']}' (its value in "
            "NCHW layout)\n") in proc.stdout, proc.stdout


@pytest.mark.tf
def test_a_constant_softmax_makes_the_check_inconclusive_not_a_zero_diff_pass(mobilenet_v3):
    """Random weights give a softmax constant on every input tried: no vacuous 'within'."""
    from onnxsurgeon.schema import validate

    _, out, doc = mobilenet_v3
    validate("convert", doc)   # verdict, why and a fused entry's layout are in the schema
    check = doc["check"]
    assert check["verdict"] == "inconclusive" and "constant" in check["why"], check
    assert check["ok"] is False   # as verify's: true only for pass
    meta = {p.key: p.value for p in onnx.load(out).metadata_props}
    assert json.loads(meta["onnxsurgeon.conversion_check"])["verdict"] == "inconclusive"
    assert any("verify with real inputs" in n for n in doc["notes"]), doc["notes"]


FLOORMOD = textwrap.dedent("""
    import sys

    import numpy as np
    import tensorflow as tf

    W1 = np.random.default_rng(1).standard_normal((3, 3, 3, 5)).astype("float32")
    W2 = np.random.default_rng(2).standard_normal((3, 3, 5, 4)).astype("float32")

    class M(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 8, 8, 3], tf.float32, name="x")])
        def serve(self, x):
            h = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, W1, 1, "SAME"), [.1, .2, .3, .4, .5]))
            # negative only at batch 1: tf2onnx's integer FloorMod truncates (Div), TF floors
            k = tf.math.floormod(tf.shape(x)[0] - 2, 3)
            h = h * (1.0 + tf.cast(k, tf.float32))
            return {"y": tf.nn.bias_add(tf.nn.conv2d(h, W2, 1, "SAME"), [.1, .2, .3, .4])}

    m = M()
    tf.saved_model.save(m, sys.argv[1], signatures={"serving_default": m.serve})
""")


@pytest.mark.tf
def test_a_batch_1_mismatch_names_the_tf_op_the_onnx_node_and_the_static_shape(tmp_path):
    """The scalar FloorMod between two fused convolutions is named, not the conv after it."""
    import subprocess
    import sys

    from onnxsurgeon.converters import ConversionMismatchError, from_tf

    script = tmp_path / "make.py"
    script.write_text(FLOORMOD)
    saved = tmp_path / "fm"
    subprocess.run([sys.executable, script, saved], check=True, capture_output=True, timeout=300)
    out = tmp_path / "fm.onnx"
    proc = cli("convert", "tf", saved, "-o", out)
    assert proc.returncode == 2 and not out.exists(), proc.stdout + proc.stderr
    line = proc.stderr
    assert line.count("\n") == 1 and "Traceback" not in line, line
    for part in ("at batch 1 (batch 2 agrees; tolerance",
                 "first differing TF tensor 'PartitionedCall/FloorMod:0' (FloorMod) -> ONNX node "
                 "'PartitionedCall/FloorMod' (Sub)",
                 "converting with --inputs x:1x8x8x3 gives a model that agrees at batch 1"):
        assert part in line, line
    with pytest.raises(ConversionMismatchError) as err:   # the facts ride on the error
        from_tf(saved, out)
    info = err.value.mismatch
    assert info["batches"] == {"1": False, "2": True}
    assert (info["framework_name"], info["framework_op"]) == ("PartitionedCall/FloorMod:0",
                                                              "FloorMod")
    assert (info["onnx_node"], info["onnx_op"]) == ("PartitionedCall/FloorMod", "Sub")
    assert info["static_inputs"] == ["x:1x8x8x3"] and info["output"] == "y"
    proc = cli("convert", "tf", saved, "-o", out, "--inputs", "x:1x8x8x3")   # the advice holds
    assert proc.returncode == 0, proc.stderr


TORCH_MODELS = textwrap.dedent("""
    import torch

    class Const(torch.nn.Module):
        def forward(self, x):
            return torch.zeros_like(x) + 1.0

    class Above(torch.nn.Module):      # a detector's 'scores above a threshold'
        def forward(self, x):
            return x[x > 100.0] * 2.0

    def const():
        return Const()

    def above():
        return Above()
""")


@pytest.mark.torch
def test_torch_outputs_constant_on_every_input_are_inconclusive(tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "models.py").write_text(TORCH_MODELS)
    out = tmp_path / "const.onnx"
    proc = cli("convert", "torch", f"{tmp_path / 'models.py'}:const", "--input", "x:1x64",
               "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert "within" not in proc.stdout and "check   inconclusive" in proc.stdout, proc.stdout
    assert "constant across 2 samples" in proc.stdout


@pytest.mark.torch
def test_torch_outputs_empty_on_the_example_are_checked_on_inputs_that_fill_them(tmp_path):
    """Empty on N(0, 1) inputs (nothing above 100): the check moves on to image-like inputs,
    where the output has elements, and says so."""
    torch = pytest.importorskip("torch")
    import importlib.util

    from onnxsurgeon.converters import from_torch

    (tmp_path / "models.py").write_text(TORCH_MODELS)
    spec = importlib.util.spec_from_file_location("issue26_models", tmp_path / "models.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    report = from_torch(mod.above(), torch.randn(1, 64), tmp_path / "above.onnx",
                        exporter="torchscript")
    assert report.verdict == "pass"
    assert any("decided on inputs uniform in [0, 255)" in n and "empty on both sides" in n
               for n in report.notes), report.notes



@pytest.mark.tf
def test_a_graph_tensorflow_runs_at_batch_1_only_is_checked_at_batch_1(tmp_path):
    """Batch 2 is tried because the signature says None, but TF cannot run it: left out (the
    check neither crashes nor blames the converter)."""
    tf = pytest.importorskip("tensorflow")
    from onnxsurgeon.converters import from_tf

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")],
                 autograph=False)
    def batch_one(x):
        return tf.unstack(x, num=1)[0] * 2.0   # written for batch 1 only

    report = from_tf(batch_one, tmp_path / "b1.onnx")
    assert report.verdict == "pass", report
