"""``inspect --profile``: MACs and FLOPs equal hand counts (a small CNN written with onnx.helper,
a torch-exported GPT-2), parameters counted once, per-module totals, and the --dim contract."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnxsurgeon.profile import ProfileBy, profile
from tests.cli_helpers import cli_main
from tests.conftest import GPT2_DIMS, gpt2_module


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


def _positions_model() -> onnx.ModelProto:
    """What a TorchScript export of a GPT-2 embedding computes: position ids as
    ``Range(0, Shape(input_ids)[1], 1)`` (onnx's inference names their length ``unk__0``), a
    position table gathered by them and added to the token embeddings, then a 4 -> 8 MatMul."""
    rng = np.random.default_rng(0)

    def init(name: str, value: object) -> onnx.TensorProto:
        return onnx.numpy_helper.from_array(np.asarray(value), name)

    nodes = [
        helper.make_node("Shape", ["input_ids"], ["shape"], name="shape"),
        helper.make_node("Gather", ["shape", "one"], ["seq_len"], name="seq_len", axis=0),
        helper.make_node("Range", ["zero", "seq_len", "one"], ["pos"], name="range"),
        helper.make_node("Unsqueeze", ["pos", "axes0"], ["pos_ids"], name="pos_ids"),
        helper.make_node("Gather", ["wte", "input_ids"], ["tok"], name="wte"),
        helper.make_node("Gather", ["wpe", "pos_ids"], ["posv"], name="wpe"),
        helper.make_node("Add", ["tok", "posv"], ["h"], name="add"),
        helper.make_node("MatMul", ["h", "w"], ["y"], name="fc"),
    ]
    graph = helper.make_graph(
        nodes, "positions",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 8])],
        [init("zero", np.int64(0)), init("one", np.int64(1)),
         init("axes0", np.array([0], dtype="int64")),
         init("wte", rng.standard_normal((64, 4)).astype("float32")),
         init("wpe", rng.standard_normal((16, 4)).astype("float32")),
         init("w", rng.standard_normal((4, 8)).astype("float32"))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_size_inference_invents_is_derived_not_asked_for(tmp_path, capsys):
    """Before: 'dim unk__0 of tensor pos has no size: give it with --dim unk__0=SIZE', a name
    the user cannot set. Now: the Range's length is derived from --dim seq, counts exact."""
    path = tmp_path / "positions.onnx"
    onnx.save(_positions_model(), str(path))
    code, out, err = cli_main(capsys, "inspect", path, "--profile", "--dim", "batch=2", "seq=5",
                              "--json")
    assert code == 0, err
    doc = json.loads(out)["profile"]
    rows = {r["name"]: r for r in doc["rows"]}
    assert rows["fc"]["macs"] == 2 * 5 * 4 * 8
    assert rows["add"]["flops"] == 2 * 5 * 4
    assert rows["range"]["activation_bytes"] == 5 * 8 and doc["uncounted"] == {}
    code, _, err = cli_main(capsys, "inspect", path, "--profile", "--dim", "batch=2")
    assert code == 2 and "--dim seq=SIZE" in err and "unk__" not in err


@pytest.fixture(scope="module")
def gpt2_torchscript(tmp_path_factory: pytest.TempPathFactory):
    """The GPT-2 of the ``gpt2`` fixture's config exported by the TorchScript exporter with
    dynamic ``batch`` and ``seq`` axes (its position ids: ``Range`` over ``Shape``)."""
    import warnings

    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    d = GPT2_DIMS
    module = gpt2_module()
    path = tmp_path_factory.mktemp("gpt2_ts") / "gpt2_ts.onnx"
    ids = torch.zeros((d["batch"], d["seq"]), dtype=torch.int64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (ids,), str(path), dynamo=False, opset_version=17,
                          input_names=["input_ids"], output_names=["h"],
                          dynamic_axes={"input_ids": {0: "batch", 1: "seq"},
                                        "h": {0: "batch", 1: "seq"}})
    return path


@pytest.mark.slow
@pytest.mark.torch
def test_torchscript_gpt2_profiles_at_its_input_dims_with_the_hand_count(gpt2_torchscript,
                                                                        capsys):
    """Was: 'give it with --dim unk__0=SIZE'. The hand count of test_gpt2_profile... per layer,
    at seq 8 and at seq 4 (the position Range follows --dim seq)."""
    d = GPT2_DIMS
    b, e = d["batch"], d["embd"]
    for t in (d["seq"], 4):
        layer = b * t * e * 3 * e + 2 * b * t * t * e + b * t * e * e + 2 * b * t * e * 4 * e
        code, out, err = cli_main(capsys, "inspect", gpt2_torchscript, "--profile", "--by",
                                  "module", "--dim", f"batch={b}", f"seq={t}", "--json")
        assert code == 0, err
        doc = json.loads(out)["profile"]
        rows = {r["name"]: r for r in doc["rows"]}
        for i in range(d["layers"]):
            assert rows[f"m.h.{i}"]["macs"] == layer, (t, i)
        assert doc["total"]["macs"] == d["layers"] * layer
