"""``convert torch``'s flags for exported detectors and for conversions that fail their check
(issue 27): --dynamic NAME:AXIS=SYMBOL, --output-names, --keep-mismatch (the mismatch recorded in
metadata_props), run through ``python -m onnxsurgeon`` on real torch exports."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import onnx
import pytest

from onnxsurgeon.schema import validate
from tests.cli_helpers import assert_refused, cli
from tests.framework_helpers import assert_close, images, metadata, run

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.torch]

DETECTOR = textwrap.dedent("""
    import torch

    class Detector(torch.nn.Module):
        # three outputs, as a detection head returns them (boxes, scores, labels)
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
            self.head = torch.nn.Linear(4, 6)

        def forward(self, x):
            f = torch.relu(self.conv(x)).mean(dim=(2, 3))
            y = self.head(f)
            return y[:, :4], torch.sigmoid(y[:, 4:]), f.argmax(dim=1)

    def build():
        torch.manual_seed(0)
        return Detector()
""")

NOISY = textwrap.dedent("""
    import torch

    class Noisy(torch.nn.Module):
        # noise left on at inference: onnxruntime's random numbers are not torch's
        def forward(self, x):
            return x + torch.rand_like(x)

    def build():
        return Noisy()
""")


@pytest.fixture
def detector(tmp_path):
    path = tmp_path / "det.py"
    path.write_text(DETECTOR)
    return path


def _dims(vi: onnx.ValueInfoProto) -> list[int | str]:
    return [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]


@pytest.mark.slow
@pytest.mark.parametrize("exporter", ["dynamo", "torchscript"])
def test_dynamic_axes_and_output_names_of_a_detector(detector, tmp_path, exporter):
    out = tmp_path / "det.onnx"
    proc = cli("convert", "torch", f"{detector}:build", "-o", out, "--input", "x:1x3x16x16",
               "--exporter", exporter, "--dynamic", "x:0=batch", "boxes:0=batch",
               "--output-names", "boxes,scores,labels", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    validate("convert", data)
    # argmax labels and small sigmoid scores cannot show a difference on random inputs: the check
    # may be inconclusive (never a vacuous pass), but nothing it compared may differ
    assert data["outputs"] == ["boxes", "scores", "labels"]
    assert data["check"]["verdict"] in ("pass", "inconclusive") and data["check"]["max_excess"] <= 0
    model = onnx.load(out)
    assert [o.name for o in model.graph.output] == ["boxes", "scores", "labels"]
    assert _dims(model.graph.input[0]) == ["batch", 3, 16, 16]
    assert _dims(model.graph.output[0])[0] == "batch"
    import importlib.util

    spec = importlib.util.spec_from_file_location("_det_f", detector)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    module = mod.build().eval()
    for batch in (1, 3):          # the exported example is batch 1: 3 proves the axis is dynamic
        x = images((batch, 3, 16, 16), seed=batch)
        got = run(model, {"x": x})
        with torch.no_grad():
            want = [t.numpy() for t in module(torch.from_numpy(x))]
        assert got["boxes"].shape == (batch, 4) and got["labels"].shape == (batch,)
        assert_close(got["boxes"], want[0])
        assert_close(got["scores"], want[1])
        np.testing.assert_array_equal(got["labels"], want[2])


def test_dynamic_and_output_names_mistakes_are_one_line(detector, tmp_path):
    out = tmp_path / "d.onnx"
    base = ["convert", "torch", f"{detector}:build", "-o", out, "--input", "x:1x3x16x16",
            "--exporter", "torchscript"]
    assert_refused([*base, "--output-names", "boxes,scores"],
                   "--output-names gives 2 names but the module returns 3 tensors",
                   inputs=[detector], out=out)
    assert_refused([*base, "--dynamic", "y:0=batch"],
                   "names 'y', which is no input or named output; use one of ['x']",
                   inputs=[detector], out=out)
    assert_refused([*base, "--dynamic", "x:4=batch"], "input 'x' has 4 axes (0-3)",
                   inputs=[detector], out=out)
    assert_refused([*base, "--dynamic", "x:0"], "is not NAME:AXIS=SYMBOL; write e.g. x:0=batch",
                   inputs=[detector], out=out)


def test_a_failed_check_names_the_flag_and_keep_mismatch_records_it(tmp_path):
    src = tmp_path / "noisy.py"
    src.write_text(NOISY)
    out = tmp_path / "n.onnx"
    args = ["convert", "torch", f"{src}:build", "-o", out, "--input", "x:4x8",
            "--exporter", "torchscript"]
    assert_refused(args, "differs from the framework by up to", inputs=[src], out=out)
    refused = cli(*args)
    assert "pass --keep-mismatch to keep it" in refused.stderr, refused.stderr
    assert "check=False" not in refused.stderr

    kept = cli(*args, "--keep-mismatch", "--json")
    assert kept.returncode == 0, kept.stderr
    data = json.loads(kept.stdout)
    validate("convert", data)
    assert data["check"]["ok"] is False and data["check"]["max_excess"] > 0
    assert "--keep-mismatch" in kept.stderr and "warning" in kept.stderr
    facts = json.loads(metadata(onnx.load(out))["onnxsurgeon.conversion_check"])
    assert facts["checked"] is True and facts["ok"] is False
    assert facts["max_excess"] > 0 and facts["max_abs_diff"] == pytest.approx(
        data["check"]["max_abs_diff"])
    text = cli(*args, "--keep-mismatch", "-o", tmp_path / "t.onnx")
    assert text.returncode == 0 and "BEYOND rtol" in text.stdout, text.stdout


def test_a_passing_conversion_records_ok(tmp_path, detector):
    out = tmp_path / "ok.onnx"
    from onnxsurgeon.converters import cli_convert_torch

    report = cli_convert_torch(f"{detector}:build", out, inputs=["x:2x3x8x8"],
                               exporter="torchscript", keep_mismatch=True)
    facts = json.loads(metadata(onnx.load(out))["onnxsurgeon.conversion_check"])
    assert facts["ok"] is True and facts["max_excess"] <= 0 and report.notes == ()


TF_NOISY = textwrap.dedent("""
    import sys

    import tensorflow as tf

    class Noisy(tf.Module):
        # noise left on at inference: onnxruntime's random numbers are not TensorFlow's
        @tf.function(input_signature=[tf.TensorSpec([None, 8], tf.float32, name="x")])
        def __call__(self, x):
            return {"y": x + tf.random.uniform(tf.shape(x))}

    module = Noisy()
    tf.saved_model.save(module, sys.argv[1], signatures=module.__call__)
""")


@pytest.mark.slow
@pytest.mark.tf
def test_convert_tf_keep_mismatch_records_it(tmp_path):
    pytest.importorskip("tf2onnx")
    import subprocess
    import sys

    script = tmp_path / "make.py"
    script.write_text(TF_NOISY)
    saved = tmp_path / "sm"
    subprocess.run([sys.executable, str(script), str(saved)], check=True, capture_output=True,
                   timeout=300)
    out = tmp_path / "n.onnx"
    refused = cli("convert", "tf", saved, "-o", out)
    assert refused.returncode == 2 and "pass --keep-mismatch to keep it" in refused.stderr, (
        refused.stderr)
    assert not out.exists()
    kept = cli("convert", "tf", saved, "-o", out, "--keep-mismatch", "--json")
    assert kept.returncode == 0, kept.stderr
    data = json.loads(kept.stdout)
    validate("convert", data)
    assert data["framework"] == "tensorflow" and data["check"]["ok"] is False
    facts = json.loads(metadata(onnx.load(out))["onnxsurgeon.conversion_check"])
    assert facts["ok"] is False and facts["max_excess"] > 0
