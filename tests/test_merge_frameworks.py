"""merge with real converters (slow): a TensorFlow preprocessing function (converters.from_tf) put
in front of a PyTorch network (converters.from_torch), checked against running TensorFlow and
then PyTorch on its output; plus the exact merge invariant and the merged name maps."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from tests.framework_helpers import assert_close, images, run

tf = pytest.importorskip("tensorflow")
torch = pytest.importorskip("torch")

from onnxsurgeon.converters import from_tf, from_torch  # noqa: E402

from onnxsurgeon.index import GraphIndex  # noqa: E402
from onnxsurgeon.io import load, save  # noqa: E402
from onnxsurgeon.select import Selector  # noqa: E402
from onnxsurgeon.surgery import merge  # noqa: E402
from onnxsurgeon.verify import verify_merge  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.tf, pytest.mark.torch]

MEAN = np.float32([0.485, 0.456, 0.406])
STD = np.float32([0.229, 0.224, 0.225])


def _preprocess():
    @tf.function(input_signature=[tf.TensorSpec([1, 16, 16, 3], tf.float32, name="image")])
    def preprocess(image):
        x = (image / 255.0 - MEAN) / STD
        return tf.transpose(x, [0, 3, 1, 2])  # NHWC -> NCHW for the torch network

    return preprocess


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.act = torch.nn.ReLU()
        self.pool = torch.nn.AdaptiveAvgPool2d(1)
        self.fc = torch.nn.Linear(4, 5)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.act(self.conv(x))), 1))


def test_tf_preprocessor_merged_in_front_of_a_torch_network(tmp_path):
    pre = _preprocess()
    from_tf(pre, tmp_path / "pre.onnx")
    torch.manual_seed(0)
    net = Net().eval()
    from_torch(net, (torch.zeros(1, 3, 16, 16),), tmp_path / "net.onnx", input_names=["x"])
    first, second = load(tmp_path / "pre.onnx"), load(tmp_path / "net.onnx")
    [pre_out] = [o.name for o in first.proto.graph.output]
    [net_in] = [i.name for i in second.proto.graph.input]
    result = merge(first, second, connect={pre_out: net_in})
    out = save(first, tmp_path / "merged.onnx")
    merged = onnx.load(str(out))
    onnx.checker.check_model(merged, full_check=True)
    assert result.inputs == ["image"] and len(result.outputs) == 1

    image = (images((1, 16, 16, 3), seed=1) * 60 + 128).astype(np.float32)
    with torch.no_grad():  # the two frameworks in sequence (np.array: torch wants writable)
        want = net(torch.from_numpy(np.array(pre(image)))).numpy()
    got = run(merged, {"image": image})[result.outputs[0]]
    assert_close(got, want, rtol=1e-4, atol=1e-5)
    # and the merge itself is exact: equal to the two ONNX models run one after the other, on
    # pixel-range images (inputs in [-1, 1) would move the output by less than its tolerance, so
    # verification would rightly call it inconclusive)
    report = verify_merge(load(tmp_path / "pre.onnx"), load(tmp_path / "net.onnx"), load(out),
                          ranges={"image": (0.0, 255.0)})
    assert report.ok and report.verdict == "pass", report.to_text()
    # the torch name map and module paths still select tensors in the merged model
    sel = Selector(GraphIndex(merged))
    assert sel.resolve("fc") == result.outputs[0]
    conv = sel.resolve("conv")
    with torch.no_grad():
        conv_want = net.conv(torch.from_numpy(np.array(pre(image)))).numpy()
    assert_close(run(merged, {"image": image}, extra=[conv])[conv], conv_want, rtol=1e-4, atol=1e-5)
