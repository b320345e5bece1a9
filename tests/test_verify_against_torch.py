"""``verify --against-torch`` on modules whose forward returns a dict, a list of dicts or an
OrderedDict (the shapes of torchvision's detection and segmentation outputs): the framework's
outputs are flattened in the exporter's order and compared pair by pair (issue 26)."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import onnx
import pytest

from tests.cli_helpers import cli

torch = pytest.importorskip("torch")

from onnxsurgeon.converters import cli_convert_torch  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.slow]

SOURCE = textwrap.dedent("""
    from collections import OrderedDict
    import torch

    class Head(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.fc = torch.nn.Linear(4, 3)

    class Detector(Head):        # keys not in sorted order: the order is the dict's
        def forward(self, x):
            y = self.fc(x)
            return {"scores": torch.sigmoid(y).sum(-1), "boxes": y}

    class Batch(Head):           # torchvision detection: a list of dicts
        def forward(self, x):
            y = self.fc(x)
            return [{"boxes": y, "labels": y.argmax(-1)},
                    {"boxes": y * 2.0, "labels": y.argmin(-1)}]

    class Segmenter(Head):       # torchvision segmentation: an OrderedDict
        def forward(self, x):
            y = self.fc(x)
            return OrderedDict([("out", torch.tanh(y)), ("aux", y - 1.0)])

    def detector(): return Detector()
    def batch(): return Batch()
    def segmenter(): return Segmenter()
""")


@pytest.mark.parametrize("factory,exporter,outputs", [
    ("detector", "dynamo", 2), ("batch", "torchscript", 4), ("segmenter", "torchscript", 2)])
def test_verify_against_torch_flattens_dict_outputs(tmp_path, factory, exporter, outputs):
    src = tmp_path / "nets.py"
    src.write_text(SOURCE)
    out = tmp_path / f"{factory}.onnx"
    cli_convert_torch(f"{src}:{factory}", out, inputs=["x:2,4"], exporter=exporter)
    assert len(onnx.load(str(out)).graph.output) == outputs

    proc = cli("verify", "-", out, "--against-torch", f"{src}:{factory}", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["ok"] is True
    assert len(report["pairs"]) == outputs

    # a changed weight moves every output: the comparison is real, not vacuous
    model = onnx.load(str(out))
    init = next(i for i in model.graph.initializer if onnx.numpy_helper.to_array(i).ndim == 2)
    arr = onnx.numpy_helper.to_array(init) + np.float32(0.5)
    init.CopyFrom(onnx.numpy_helper.from_array(arr.astype(np.float32), init.name))
    bad = tmp_path / "bad.onnx"
    onnx.save(model, str(bad))
    caught = cli("verify", "-", bad, "--against-torch", f"{src}:{factory}", "--json")
    assert caught.returncode == 1, caught.stdout + caught.stderr
