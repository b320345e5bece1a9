"""Framework tensors the converter fused away (issue 10): in no name map, listed by inspect, and
refused by every selector with the name to use instead. Runs on the committed converted models
(no framework needed); test_converters_tf/torch check the maps by value."""

from __future__ import annotations

import onnx
import pytest

import onnxsurgeon as osg
from onnxsurgeon.errors import NotFoundError
from onnxsurgeon.select import FUSED_KEY, fused_names, name_map
from tests.cli_helpers import ROOT, cli


def test_a_fused_name_is_refused_by_the_cli_and_listed_by_inspect(tmp_path):
    src = ROOT / "models" / "keras_cnn.onnx"
    out = tmp_path / "o.onnx"
    proc = cli(*["extract", str(src), "-o", str(out), "--outputs", "keras_cnn_1/conv6_1/convolution"])
    assert proc.returncode == 2 and not out.exists()
    assert proc.stderr == (
        "onnxsurgeon: error: 'keras_cnn_1/conv6_1/convolution:0' was fused into Conv "
        "'keras_cnn_1/conv6_1/BiasAdd' by the converter; its value does not exist in the ONNX "
        "model; use 'keras_cnn_1/conv6_1/BiasAdd:0'\n")
    proc = cli(*["inspect", str(src)])
    assert proc.returncode == 0
    assert ("fused away    2 framework names have no ONNX tensor (the converter fused their op "
            "into another)\n  keras_cnn_1/conv5_1/convolution:0: fused into Conv "
            "'keras_cnn_1/conv5_1/BiasAdd'; use 'keras_cnn_1/conv5_1/BiasAdd:0'\n") in proc.stdout
    proc = cli(*["extract", str(src), "-o", str(out), "--outputs", "keras_cnn_1/conv6_1/BiasAdd:0"])
    assert proc.returncode == 0, proc.stderr


def test_fused_names_are_in_no_name_map_and_the_api_says_why():
    model = osg.load(ROOT / "models" / "tf1_seed.onnx")
    assert set(fused_names(model.proto)) == {"network/layer_conv5/Conv2D:0"}
    assert not set(fused_names(model.proto)) & set(name_map(model.proto))
    for name in ("network/layer_conv5/Conv2D:0", "network/layer_conv5/Conv2D"):
        with pytest.raises(NotFoundError, match=r"^'network/layer_conv5/Conv2D:0' was fused into "
                           r"Conv 'network/layer_conv5/BiasAdd' by the converter"):
            osg.resolve(model, name)


def test_the_message_drops_what_a_rewrite_removed(tmp_path):
    """After an extract that removes the Conv, the message names neither the node nor a
    replacement that no longer exists."""
    src = ROOT / "models" / "tf1_seed.onnx"
    cut = tmp_path / "cut.onnx"
    proc = cli("extract", src, "-o", cut, "--inputs", "network/layer_conv5/Relu:0",
               "--outputs", "logits")
    assert proc.returncode == 0, proc.stderr
    assert FUSED_KEY in {p.key for p in onnx.load(cut).metadata_props}
    with pytest.raises(NotFoundError) as err:
        osg.resolve(osg.load(cut), "network/layer_conv5/Conv2D:0")
    assert str(err.value) == (
        "'network/layer_conv5/Conv2D:0' was fused into another op by the converter; its value "
        "does not exist in the ONNX model; pick a tensor that exists (onnxsurgeon inspect MODEL "
        "--tensors)")


FUSED = "network/layer_conv5/Conv2D:0"
SAYS = (f"onnxsurgeon: error: '{FUSED}' was fused into Conv 'network/layer_conv5/BiasAdd' by "
        "the converter; its value does not exist in the ONNX model; use "
        "'network/layer_conv5/BiasAdd:0'\n")


@pytest.mark.parametrize("args", [
    ["inspect", "{m}", "--around", FUSED],
    ["insert", "{m}", "-o", "{o}", "--at", FUSED, "--op", "identity"],
    ["reroute", "{m}", "-o", "{o}", "--from", "network/layer_conv5/Relu:0", "--to", FUSED],
    ["bypass", "{m}", "-o", "{o}", "--node", FUSED],
    ["rename", "{m}", "-o", "{o}", "--nodes", "--map", f"{FUSED}=conv"],
    ["verify", "{m}", "{m}", "--pair", f"{FUSED}={FUSED}"],
], ids=lambda a: " ".join(a[:1] + [x for x in a if x.startswith("--")][:1]))
def test_every_verb_says_a_fused_name_was_fused(args, tmp_path, capsys):
    from onnxsurgeon import cli as cli_main

    src = ROOT / "models" / "tf1_seed.onnx"
    out = tmp_path / "o.onnx"
    code = cli_main.main([a.format(m=src, o=out) for a in args])
    assert code == 2 and capsys.readouterr().err == SAYS and not out.exists()


def test_merge_carries_the_second_models_fused_names():
    """A preprocessor in front of the TF model: SECOND's fused names still say so."""
    from onnx import TensorProto, helper

    from onnxsurgeon.surgery import merge

    pre = helper.make_model(helper.make_graph(
        [helper.make_node("Identity", ["img"], ["pre_out"], name="pre")], "pre",
        [helper.make_tensor_value_info("img", TensorProto.FLOAT, ["N", 8, 8, 3])],
        [helper.make_tensor_value_info("pre_out", TensorProto.FLOAT, ["N", 8, 8, 3])]),
        opset_imports=[helper.make_opsetid("", 17)])
    first = osg.Model(pre)
    merge(first, osg.load(ROOT / "models" / "tf1_seed.onnx"), connect={"pre_out": "input"})
    assert set(fused_names(first.proto)) == {"network/layer_conv5/Conv2D:0"}
    with pytest.raises(NotFoundError) as err:
        osg.resolve(first, "network/layer_conv5/Conv2D:0")
    assert str(err.value) == SAYS[len("onnxsurgeon: error: "):-1]
