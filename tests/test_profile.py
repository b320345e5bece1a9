"""``inspect --profile``: MACs and FLOPs equal hand counts (a small CNN written with onnx.helper,
a torch-exported GPT-2), parameters counted once, per-module totals, and the --dim contract."""

from __future__ import annotations

import json

import onnx
import pytest
from onnx import TensorProto, helper

from onnxsurgeon.profile import ProfileBy, profile
from tests.cli_helpers import cli_main
from tests.conftest import GPT2_DIMS


def _cnn(batch: int | str = 1) -> onnx.ModelProto:
    """x[N,4,8,8] -> Conv 3x3 stride 2 pad 1 groups 2 (8 out) + bias -> Relu -> GlobalAveragePool
    -> Flatten -> Gemm (8 -> 10, + C); the conv's weight is also read by a second node."""
    rng = __import__("numpy").random.default_rng(0)

    def init(name: str, *shape: int) -> onnx.TensorProto:
        return onnx.numpy_helper.from_array(rng.standard_normal(shape).astype("float32"), name)

    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", kernel_shape=[3, 3],
                         strides=[2, 2], pads=[1, 1, 1, 1], group=2),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("GlobalAveragePool", ["r"], ["p"], name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], name="flat"),
        helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["y"], name="fc"),
        helper.make_node("ReduceSum", ["w"], ["wsum"], name="wsum", keepdims=0),
    ]
    graph = helper.make_graph(
        nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 10]),
         helper.make_tensor_value_info("wsum", TensorProto.FLOAT, [])],
        [init("w", 8, 2, 3, 3), init("b", 8), init("fc_w", 8, 10), init("fc_b", 10)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("batch", [1, 3])
def test_cnn_profile_equals_the_hand_count(batch):
    n = batch
    conv_out = n * 8 * 4 * 4                 # 8x8 input, 3x3, stride 2, pad 1 -> 4x4, 8 channels
    conv_macs = conv_out * (4 // 2) * 3 * 3  # each output reads Cin/groups = 2 channels x 3x3
    gemm_macs = n * 10 * 8                   # M=N, N=10, K=8
    model = _cnn("N")
    prof = profile(model, by=ProfileBy.NODE, dims={"N": batch})
    rows = {r.name: r for r in prof.rows}
    assert rows["conv"].macs == conv_macs == n * 2304
    assert rows["conv"].flops == 2 * conv_macs + conv_out          # + the bias per output
    assert rows["relu"].flops == conv_out
    assert rows["pool"].flops == conv_out                           # one per input element
    assert rows["fc"].macs == gemm_macs and rows["fc"].flops == 2 * gemm_macs + n * 10
    assert rows["wsum"].flops == 8 * 2 * 3 * 3
    assert rows["conv"].params == 8 * 2 * 3 * 3 + 8 and rows["conv"].param_bytes == 4 * 152
    assert rows["conv"].activation_bytes == 4 * conv_out
    assert prof.total.macs == conv_macs + gemm_macs
    # w is read by conv and wsum: counted once in the total
    assert prof.total.params == 144 + 8 + 80 + 10
    assert prof.uncounted == {}
    by_op = {r.name: r for r in profile(model, by=ProfileBy.OP, dims={"N": batch}).rows}
    assert by_op["Conv"].macs == conv_macs and by_op["Flatten"].flops == 0


def test_profile_cli_json_validates_and_dim_is_required(tmp_path, capsys):
    import jsonschema

    from onnxsurgeon.schema import load_schema

    path = tmp_path / "cnn.onnx"
    onnx.save(_cnn("N"), str(path))
    code, out, err = cli_main(capsys, "inspect", path, "--profile", "--dim", "N=2", "--json")
    assert code == 0, err
    doc = json.loads(out)
    jsonschema.validate(doc, load_schema("inspect"))
    assert doc["profile"]["total"]["macs"] == 2 * (2304 + 80)
    assert doc["profile"]["dims"] == {"N": 2}
    code, out, err = cli_main(capsys, "inspect", path, "--profile")
    assert code == 2 and out == ""
    assert err.strip().count("\n") == 0 and "'N'" in err and "--dim N=SIZE" in err
    code, _, err = cli_main(capsys, "inspect", path, "--by", "op")
    assert code == 2 and "--profile" in err
    code, out, _ = cli_main(capsys, "inspect", path, "--profile", "--dim", "N=1", "--by", "op")
    assert code == 0 and out.splitlines()[0].startswith("op") and "total" in out


@pytest.mark.slow
@pytest.mark.torch
def test_gpt2_profile_matches_its_matmul_hand_count_per_module(gpt2):
    d = GPT2_DIMS
    b, t, e = d["batch"], d["seq"], d["embd"]
    c_attn = b * t * e * (3 * e)      # q, k, v projection
    scores = b * t * t * e            # q @ k^T over all heads: H x T x T x E/H
    mixed = b * t * t * e             # softmax(scores) @ v
    c_proj = b * t * e * e
    mlp = 2 * b * t * e * (4 * e)     # c_fc and c_proj
    layer = c_attn + scores + mixed + c_proj + mlp
    assert layer == 102_400
    prof = profile(onnx.load(str(gpt2)), by=ProfileBy.MODULE)
    rows = {r.name: r for r in prof.rows}
    for i in range(d["layers"]):
        assert rows[f"m.h.{i}"].macs == layer
        assert rows[f"m.h.{i}.attn"].macs == c_attn + scores + mixed + c_proj
        assert rows[f"m.h.{i}.attn.c_attn"].macs == c_attn
        assert rows[f"m.h.{i}.mlp"].macs == mlp
        assert rows[f"m.h.{i}.mlp.c_fc"].params == e * 4 * e + 4 * e       # weight + bias
        assert rows[f"m.h.{i}.mlp.c_proj"].param_bytes == 4 * (4 * e * e + e)
    assert prof.total.macs == d["layers"] * layer
    ops = {r.name: r for r in profile(onnx.load(str(gpt2)), by=ProfileBy.OP).rows}
    assert ops["Softmax"].flops == 5 * d["layers"] * b * d["heads"] * t * t


def test_tf_scopes_group_by_node_name_prefix_with_their_hand_count():
    from tests.cli_helpers import ROOT

    model = onnx.load(str(ROOT / "models" / "seed_cnn.onnx"))   # TF names: network/<layer>/<op>
    rows = {r.name: r for r in profile(model, by=ProfileBy.MODULE, dims={"batch": 2}).rows}
    conv = 2 * 6 * 8 * 8 * (3 * 3 * 3)     # 'same' 3x3 conv, 3 -> 6 channels on 8x8, batch 2
    fc = 2 * 10 * (6 * 8 * 8)              # 384 features -> 10
    dense = 2 * 2 * 6                      # pooled 6 -> 2
    assert rows["network/layer_conv5"].macs == conv
    assert rows["network/fc1"].macs == fc and rows["network/fc1"].params == 384 * 10 + 10
    assert rows["network/aux"].macs == dense
    assert rows["network"].macs == conv + fc + dense
    assert rows["network/flatten"].flops == 0
