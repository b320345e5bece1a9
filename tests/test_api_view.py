"""The Python API a newcomer reaches for: resolve() on a Model, a read-only view of the graph
(model.nodes(), model.tensors(), model.find()) and a TypeError, not a silent character walk, for a
bare string where a list of names is expected."""

from __future__ import annotations

from pathlib import Path

import pytest

import onnxsurgeon as osg
from onnxsurgeon.surgery import copy, extract, merge, reroute
from tests import builders

ROOT = Path(__file__).resolve().parent.parent
TORCH_CNN = ROOT / "models" / "torch_cnn.onnx"


def test_resolve_takes_a_model_a_proto_or_an_index():
    model = osg.load(TORCH_CNN)
    assert osg.resolve(model, "conv5") == "conv2d"
    assert osg.resolve(model.proto, "fc") == "logits"
    assert osg.resolve(osg.GraphIndex(model.proto), "conv5") == "conv2d"
    with pytest.raises(osg.NotFoundError, match="did you mean 'conv5'"):
        osg.resolve(model, "conv6")
    with pytest.raises(TypeError, match=r"load a file first with onnxsurgeon.load\(path\)"):
        osg.resolve(str(TORCH_CNN), "conv5")


def test_model_offers_a_read_only_view():
    model = osg.load(TORCH_CNN)
    before = model.proto.SerializeToString()
    assert [n.name for n in model.nodes()] == ["node_conv2d", "node_relu", "node_mean",
                                               "node_linear"]
    assert [(n.op, n.module) for n in model.nodes(grep="gemm")] == [("Gemm", "fc")]
    tensors = {t.name: t for t in model.tensors()}
    assert tensors["conv2d"].framework_names == ["conv5"]
    assert tensors["conv2d"].shape == ["batch", 4, 8, 8] and tensors["conv2d"].dtype == "float"
    assert tensors["x"].kind == "input" and tensors["fc.weight"].kind == "initializer"
    assert {t.name for t in model.tensors(around="relu", hops=1)} == {"conv2d", "relu", "val_2",
                                                                      "mean"}
    found = model.find("conv5")
    assert (found.name, found.producer, found.consumers) == ("conv2d", "node_conv2d", ["node_relu"])
    with pytest.raises(osg.NotFoundError):
        model.find("nope")
    assert model.proto.SerializeToString() == before  # a view: nothing changed


@pytest.mark.parametrize("call, what, given", [
    (lambda m: copy(m, "logits"), "copy(outputs=...)", "logits"),
    (lambda m: extract(m, "logits"), "extract(outputs=...)", "logits"),
    (lambda m: extract(m, ["logits"], inputs="act"), "extract(inputs=...)", "act"),
    (lambda m: reroute(m, "act", "conv5_out", consumers="pool"), "reroute(consumers=...)", "pool"),
    (lambda m: merge(m, builders.tiny_cnn(), connect={"logits": "x"}, outputs="logits"),
     "merge(outputs=...)", "logits"),
    (lambda m: osg.closure(osg.GraphIndex(m), "logits"), "closure(targets)", "logits"),
])
def test_a_bare_string_where_a_list_is_expected_is_a_type_error(call, what, given):
    model = builders.tiny_cnn()
    before = model.SerializeToString()
    with pytest.raises(TypeError) as err:
        call(model)
    assert str(err.value) == (f"{what} takes a list of names, got the string '{given}'; "
                              f"write ['{given}']")
    assert model.SerializeToString() == before
