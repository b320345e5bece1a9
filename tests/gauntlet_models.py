"""Realistic ONNX models for the CLI gauntlet, built locally (no downloads, seeded random weights).

Each builder writes ``<folder>/<name>.onnx`` (plus external data where relevant) and returns the
path. ``FAST`` builders use onnx.helper / onnxruntime only (well under a second each); ``SLOW``
builders export PyTorch / transformers modules with both exporters (seconds each).

Run ``python -m tests.gauntlet_models DIR`` to build them all into DIR.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F, F16, I64 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT64


def _w(rng: np.random.Generator, name: str, shape: tuple[int, ...], dtype=np.float32) -> onnx.TensorProto:
    return numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(dtype), name)


def _finish(graph: onnx.GraphProto, path: Path, *, opset: int = 17, ir: int = 8,
            extra_opsets: dict[str, int] | None = None, external: bool = False) -> Path:
    opsets = [helper.make_opsetid("", opset)]
    opsets += [helper.make_opsetid(d, v) for d, v in (extra_opsets or {}).items()]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="gauntlet")
    model.ir_version = ir
    onnx.checker.check_model(model, full_check=True)
    if external:
        onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                        location=path.name + ".data", size_threshold=0)
    else:
        onnx.save_model(model, str(path))
    return path


# ------------------------------------------------------------------------------ onnx.helper models
def _mlp_graph(rng: np.random.Generator, *, batch: int | str = "N", dtype: int = F, np_dtype=np.float32,
               name: str = "mlp") -> onnx.GraphProto:
    """x[N,16] -> MatMul/Add/Relu x3 (residual between 1 and 3) -> y[N,8], also out `h2`."""
    inits = [_w(rng, "W1", (16, 32), np_dtype), _w(rng, "B1", (32,), np_dtype),
             _w(rng, "W2", (32, 32), np_dtype), _w(rng, "B2", (32,), np_dtype),
             _w(rng, "W3", (32, 8), np_dtype)]
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["mm1"], name="fc1/MatMul"),
        helper.make_node("Add", ["mm1", "B1"], ["a1"], name="fc1/Add"),
        helper.make_node("Relu", ["a1"], ["h1"], name="fc1/Relu"),
        helper.make_node("MatMul", ["h1", "W2"], ["mm2"], name="fc2/MatMul"),
        helper.make_node("Add", ["mm2", "B2"], ["a2"], name="fc2/Add"),
        helper.make_node("Relu", ["a2"], ["r2"], name="fc2/Relu"),
        helper.make_node("Add", ["r2", "h1"], ["h2"], name="res/Add"),
        helper.make_node("MatMul", ["h2", "W3"], ["y"], name="head/MatMul"),
    ]
    return helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("x", dtype, [batch, 16])],
        [helper.make_tensor_value_info("y", dtype, [batch, 8]),
         helper.make_tensor_value_info("h2", dtype, [batch, 32])], inits)


def old_ir_opset11(folder: Path) -> Path:
    """Opset 11, IR 4: every initializer is also listed as a graph input (old exporters)."""
    rng = np.random.default_rng(11)
    g = _mlp_graph(rng, batch=2)
    g.input.extend(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in g.initializer)
    return _finish(g, folder / "old_ir_opset11.onnx", opset=11, ir=4)


def external_data(folder: Path) -> Path:
    """All weights in one external file next to the model."""
    rng = np.random.default_rng(12)
    return _finish(_mlp_graph(rng), folder / "external_data.onnx", external=True)


def symbolic_batch(folder: Path) -> Path:
    """Symbolic batch dim 'N' on the input and outputs, no value_info for intermediates."""
    rng = np.random.default_rng(13)
    return _finish(_mlp_graph(rng, batch="N"), folder / "symbolic_batch.onnx")


def fp16_weights(folder: Path) -> Path:
    """The whole MLP in float16 (weights, input and outputs)."""
    rng = np.random.default_rng(14)
    return _finish(_mlp_graph(rng, batch=2, dtype=F16, np_dtype=np.float16), folder / "fp16_weights.onnx")


def embedding_gather(folder: Path) -> Path:
    """ids[B,S] int64 -> Gather(emb) + Gather(pos) -> LayerNorm -> MatMul -> logits; also a
    Shape/Gather/Unsqueeze int64 chain (as exporters emit) feeding a Reshape."""
    rng = np.random.default_rng(15)
    inits = [_w(rng, "emb", (50, 16)), _w(rng, "pos", (8, 16)), _w(rng, "ln_w", (16,)),
             _w(rng, "ln_b", (16,)), _w(rng, "head", (16, 50)),
             numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
             numpy_helper.from_array(np.array(1, np.int64), "one"),
             numpy_helper.from_array(np.array([0], np.int64), "zero_ax")]
    nodes = [
        helper.make_node("Gather", ["emb", "ids"], ["tok"], name="embed/Gather"),
        helper.make_node("Shape", ["ids"], ["ids_shape"], name="Shape"),
        helper.make_node("Gather", ["ids_shape", "one"], ["seq"], name="seq/Gather", axis=0),
        helper.make_node("Range", ["zero_s", "seq", "one"], ["positions"], name="Range"),
        helper.make_node("Gather", ["pos", "positions"], ["pos_e"], name="pos/Gather"),
        helper.make_node("Add", ["tok", "pos_e"], ["e"], name="embed/Add"),
        helper.make_node("LayerNormalization", ["e", "ln_w", "ln_b"], ["ln"], name="ln", axis=-1),
        helper.make_node("MatMul", ["ln", "head"], ["logits"], name="head/MatMul"),
        helper.make_node("Unsqueeze", ["seq", "zero_ax"], ["seq1"], name="seq/Unsqueeze"),
        helper.make_node("Concat", ["minus1", "seq1", "sixteen"], ["flat_shape"], name="Concat", axis=0),
        helper.make_node("Reshape", ["ln", "flat_shape"], ["feat"], name="Reshape"),
    ]
    inits += [numpy_helper.from_array(np.array(0, np.int64), "zero_s"),
              numpy_helper.from_array(np.array([16], np.int64), "sixteen")]
    g = helper.make_graph(
        nodes, "embedding", [helper.make_tensor_value_info("ids", I64, ["B", 8])],
        [helper.make_tensor_value_info("logits", F, ["B", 8, 50]),
         helper.make_tensor_value_info("feat", F, ["B", 8, 16])], inits)
    return _finish(g, folder / "embedding_gather.onnx")


def custom_domain(folder: Path) -> Path:
    """com.microsoft FusedMatMul and Gelu next to standard ops."""
    rng = np.random.default_rng(16)
    inits = [_w(rng, "W1", (16, 32)), _w(rng, "W2", (32, 8)), _w(rng, "B", (32,))]
    nodes = [
        helper.make_node("FusedMatMul", ["x", "W1"], ["mm"], name="fused", domain="com.microsoft", alpha=0.5),
        helper.make_node("Add", ["mm", "B"], ["a"], name="bias"),
        helper.make_node("Gelu", ["a"], ["g"], name="gelu", domain="com.microsoft"),
        helper.make_node("MatMul", ["g", "W2"], ["y"], name="head"),
    ]
    g = helper.make_graph(nodes, "ms", [helper.make_tensor_value_info("x", F, [2, 16])],
                          [helper.make_tensor_value_info("y", F, [2, 8])], inits)
    return _finish(g, folder / "custom_domain.onnx", extra_opsets={"com.microsoft": 1})


def _small_bert_like(rng: np.random.Generator) -> onnx.ModelProto:
    """One attention + MLP block written as plain ops, which ORT fuses at EXTENDED level."""
    d = 16
    inits = [_w(rng, n, (d, d)) for n in ("Wq", "Wk", "Wv", "Wo")]
    inits += [_w(rng, "W1", (d, 4 * d)), _w(rng, "W2", (4 * d, d)), _w(rng, "b1", (4 * d,)),
              _w(rng, "g", (d,)), _w(rng, "b", (d,)),
              numpy_helper.from_array(np.array(d ** -0.5, np.float32), "scale"),
              numpy_helper.from_array(np.array(np.sqrt(0.5), np.float32), "rsqrt2"),
              numpy_helper.from_array(np.array(1.0, np.float32), "onef"),
              numpy_helper.from_array(np.array(0.5, np.float32), "half")]
    nodes = [
        helper.make_node("MatMul", ["x", "Wq"], ["q"], name="q"),
        helper.make_node("MatMul", ["x", "Wk"], ["k"], name="k"),
        helper.make_node("MatMul", ["x", "Wv"], ["v"], name="v"),
        helper.make_node("Transpose", ["k"], ["kt"], name="kt", perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["qk"], name="qk"),
        helper.make_node("Mul", ["qk", "scale"], ["qks"], name="qks"),
        helper.make_node("Softmax", ["qks"], ["p"], name="softmax", axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["ctx"], name="ctx"),
        helper.make_node("MatMul", ["ctx", "Wo"], ["o"], name="o"),
        helper.make_node("Add", ["o", "x"], ["r1"], name="res1"),
        helper.make_node("LayerNormalization", ["r1", "g", "b"], ["n1"], name="ln1", axis=-1),
        helper.make_node("MatMul", ["n1", "W1"], ["f1"], name="ff1"),
        helper.make_node("Add", ["f1", "b1"], ["f1b"], name="ff1b"),
        helper.make_node("Mul", ["f1b", "rsqrt2"], ["ge0"], name="ge0"),
        helper.make_node("Erf", ["ge0"], ["ge1"], name="erf"),
        helper.make_node("Add", ["ge1", "onef"], ["ge2"], name="ge2"),
        helper.make_node("Mul", ["f1b", "ge2"], ["ge3"], name="ge3"),
        helper.make_node("Mul", ["ge3", "half"], ["ge4"], name="ge4"),
        helper.make_node("MatMul", ["ge4", "W2"], ["f2"], name="ff2"),
        helper.make_node("Add", ["f2", "n1"], ["y"], name="res2"),
    ]
    g = helper.make_graph(nodes, "block", [helper.make_tensor_value_info("x", F, ["B", 8, d])],
                          [helper.make_tensor_value_info("y", F, ["B", 8, d])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="gauntlet")
    m.ir_version = 8
    return m


def ort_optimized(folder: Path) -> Path:
    """A transformer block saved by onnxruntime at ORT_ENABLE_EXTENDED (com.microsoft fused ops)."""
    import onnxruntime as ort

    src = folder / "_block_plain.onnx"
    onnx.save_model(_small_bert_like(np.random.default_rng(17)), str(src))
    out = folder / "ort_optimized.onnx"
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    opts.optimized_model_filepath = str(out)
    ort.InferenceSession(str(src), opts, providers=["CPUExecutionProvider"])
    return out


def plain_block(folder: Path) -> Path:
    """The transformer block before ORT optimization (plain ops, Erf-Gelu, symbolic batch)."""
    path = folder / "plain_block.onnx"
    onnx.save_model(_small_bert_like(np.random.default_rng(17)), str(path))
    return path


def folded_constants(folder: Path) -> Path:
    """onnx-simplifier style: Constant nodes, shape tensors folded, dims fully static, value_info
    for every tensor (as onnx.shape_inference leaves it)."""
    rng = np.random.default_rng(18)
    g = _mlp_graph(rng, batch=4)
    w = g.initializer[0]
    g.initializer.remove(w)
    g.node.insert(0, helper.make_node("Constant", [], ["W1"], name="W1_const", value=w))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="gauntlet")
    m.ir_version = 7
    m = onnx.shape_inference.infer_shapes(m)
    path = folder / "folded_constants.onnx"
    onnx.save_model(m, str(path))
    return path


def unnamed_nodes(folder: Path) -> Path:
    """The MLP with no node names (tf2onnx / hand-written graphs often leave them empty)."""
    g = _mlp_graph(np.random.default_rng(19))
    for node in g.node:
        node.name = ""
    return _finish(g, folder / "unnamed_nodes.onnx")


def sklearn_like(folder: Path) -> Path:
    """skl2onnx style: Scaler -> LinearClassifier (ai.onnx.ml) -> int64 label + probabilities ->
    ZipMap (a sequence-of-maps output), plus a float intermediate through standard ops."""
    rng = np.random.default_rng(20)
    nodes = [
        helper.make_node("Scaler", ["x"], ["scaled"], name="scaler", domain="ai.onnx.ml",
                         offset=rng.standard_normal(4).tolist(), scale=rng.uniform(0.5, 2, 4).tolist()),
        helper.make_node("Relu", ["scaled"], ["act"], name="relu"),
        helper.make_node("Mul", ["act", "gain"], ["feat"], name="gain"),
        helper.make_node("LinearClassifier", ["feat"], ["label", "probabilities"], name="clf",
                         domain="ai.onnx.ml", classlabels_ints=[0, 1, 2],
                         coefficients=rng.standard_normal(12).tolist(),
                         intercepts=rng.standard_normal(3).tolist(), multi_class=1,
                         post_transform="SOFTMAX"),
        helper.make_node("ZipMap", ["probabilities"], ["output_probability"], name="zipmap",
                         domain="ai.onnx.ml", classlabels_int64s=[0, 1, 2]),
    ]
    seq_map = helper.make_sequence_type_proto(helper.make_map_type_proto(I64, helper.make_tensor_type_proto(F, [])))
    g = helper.make_graph(
        nodes, "sklearn", [helper.make_tensor_value_info("x", F, ["N", 4])],
        [helper.make_tensor_value_info("label", I64, ["N"]),
         helper.make_value_info("output_probability", seq_map)],
        [numpy_helper.from_array(rng.uniform(0.5, 1.5, 4).astype(np.float32), "gain")])
    return _finish(g, folder / "sklearn_like.onnx", opset=15, extra_opsets={"ai.onnx.ml": 1})


def loop_rnn(folder: Path) -> Path:
    """A hand-rolled RNN as a Loop over time: the body captures the outer weights and an outer
    projected input, carries a state and emits per-step outputs (scan outputs)."""
    rng = np.random.default_rng(21)
    body = helper.make_graph(
        [helper.make_node("Gather", ["xp", "i"], ["xt"], name="b_gather", axis=1),
         helper.make_node("MatMul", ["h_in", "Wh"], ["hh"], name="b_mm"),
         helper.make_node("Add", ["hh", "xt"], ["pre"], name="b_add"),
         helper.make_node("Tanh", ["pre"], ["h_out"], name="b_tanh"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="b_cond"),
         helper.make_node("Identity", ["h_out"], ["step"], name="b_step")],
        "body",
        [helper.make_tensor_value_info("i", I64, []), helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_in", F, ["B", 16])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_out", F, ["B", 16]),
         helper.make_tensor_value_info("step", F, ["B", 16])])
    nodes = [
        helper.make_node("MatMul", ["x", "Wx"], ["xp"], name="proj"),
        helper.make_node("Relu", ["xp"], ["xp_relu"], name="proj_relu"),
        helper.make_node("ReduceMean", ["xp_relu"], ["h0"], name="h0", axes=[1], keepdims=0),
        helper.make_node("Loop", ["T", "true", "h0"], ["h_last", "steps"], name="loop", body=body),
        helper.make_node("MatMul", ["h_last", "Wo"], ["y"], name="head"),
    ]
    inits = [_w(rng, "Wx", (8, 16)), _w(rng, "Wh", (16, 16)), _w(rng, "Wo", (16, 4)),
             numpy_helper.from_array(np.array(5, np.int64), "T"),
             numpy_helper.from_array(np.array(True), "true")]
    g = helper.make_graph(nodes, "loop_rnn", [helper.make_tensor_value_info("x", F, ["B", 5, 8])],
                          [helper.make_tensor_value_info("y", F, ["B", 4]),
                           helper.make_tensor_value_info("steps", F, [5, "B", 16])], inits)
    return _finish(g, folder / "loop_rnn.onnx")


def quantized_dynamic(folder: Path) -> Path:
    """onnxruntime.quantization.quantize_dynamic of the transformer block: uint8 weights,
    DynamicQuantizeLinear / MatMulInteger (or com.microsoft DynamicQuantizeMatMul) nodes."""
    import logging

    from onnxruntime.quantization import QuantType, quantize_dynamic

    src = folder / "_block_for_quant.onnx"
    model = _small_bert_like(np.random.default_rng(22))
    onnx.save_model(model, str(src))
    out = folder / "quantized_dynamic.onnx"
    logging.getLogger().setLevel(logging.ERROR)
    quantize_dynamic(str(src), str(out), weight_type=QuantType.QUInt8)
    return out


def quantized_qdq(folder: Path) -> Path:
    """onnxruntime.quantization.quantize_static in QDQ format (QuantizeLinear/DequantizeLinear
    pairs around every op), calibrated on seeded random data."""
    import logging

    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    src = folder / "_block_for_qdq.onnx"
    onnx.save_model(_small_bert_like(np.random.default_rng(23)), str(src))

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            rng = np.random.default_rng(0)
            self.data = iter([{"x": rng.standard_normal((1, 8, 16)).astype(np.float32)} for _ in range(4)])

        def get_next(self):
            return next(self.data, None)

    out = folder / "quantized_qdq.onnx"
    logging.getLogger().setLevel(logging.ERROR)
    quantize_static(str(src), str(out), Reader(), quant_format=QuantFormat.QDQ)
    return out


def _repo_model(name: str) -> Callable[[Path], Path]:
    """A model committed under models/ (tf2onnx / torch exports made by models/make_*.py)."""
    def build(folder: Path) -> Path:
        src = Path(__file__).resolve().parent.parent / "models" / f"{name}.onnx"
        dst = folder / f"repo_{name}.onnx"
        dst.write_bytes(src.read_bytes())
        return dst
    return build


FAST: dict[str, Callable[[Path], Path]] = {
    "repo_keras_cnn": _repo_model("keras_cnn"),
    "old_ir_opset11": old_ir_opset11, "external_data": external_data, "fp16_weights": fp16_weights,
    "embedding_gather": embedding_gather, "ort_optimized": ort_optimized, "loop_rnn": loop_rnn,
    "sklearn_like": sklearn_like,
}
"""Quick to build and to run: the default test run."""

MORE: dict[str, Callable[[Path], Path]] = {
    "symbolic_batch": symbolic_batch, "unnamed_nodes": unnamed_nodes, "custom_domain": custom_domain,
    "plain_block": plain_block, "folded_constants": folded_constants,
    "repo_tf1_seed": _repo_model("tf1_seed"), "repo_torch_cnn": _repo_model("torch_cnn"),
    "repo_seed_cnn": _repo_model("seed_cnn"),
    "quantized_dynamic": quantized_dynamic, "quantized_qdq": quantized_qdq,
}
"""Quick to build, but they repeat what FAST covers: run with the slow tests."""


# ------------------------------------------------------------------------------ torch models
def _torch_modules() -> dict[str, Callable[[], tuple[object, tuple, dict]]]:
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            y = torch.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            return torch.relu(y + (x if self.down is None else self.down(x)))

    class ResNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
            self.layer1 = nn.Sequential(Block(8, 8, 1), Block(8, 8, 1))
            self.layer2 = nn.Sequential(Block(8, 16, 2), Block(16, 16, 1))
            self.layer3 = nn.Sequential(Block(16, 32, 2), Block(32, 32, 1))
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(32, 10)

        def forward(self, x):
            x = self.layer3(self.layer2(self.layer1(self.stem(x))))
            return self.fc(torch.flatten(self.pool(x), 1))

    class MobileNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            layers: list[nn.Module] = [nn.Conv2d(3, 8, 3, 2, 1), nn.BatchNorm2d(8), nn.ReLU6()]
            for cin, cout in ((8, 16), (16, 32)):
                layers += [nn.Conv2d(cin, cin, 3, 1, 1, groups=cin), nn.BatchNorm2d(cin), nn.ReLU6(),
                           nn.Conv2d(cin, cout, 1), nn.BatchNorm2d(cout), nn.Hardswish()]
            self.features = nn.Sequential(*layers)
            self.head = nn.Linear(32, 5)

        def forward(self, x):
            return self.head(self.features(x).mean(dim=(2, 3)))

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
            self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.head = nn.Linear(32, 4)

        def forward(self, x):
            return self.head(self.enc(x))

    class Recurrent(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = nn.LSTM(8, 16, batch_first=True)
            self.gru = nn.GRU(16, 12, batch_first=True)
            self.head = nn.Linear(12, 3)

        def forward(self, x):
            y, _ = self.lstm(x)
            y, _ = self.gru(y)
            return self.head(y[:, -1])

    class Cond(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(8, 8)
            self.b = nn.Linear(8, 8)
            self.out = nn.Linear(8, 2)

        def forward(self, x):
            h = torch.relu(self.a(x))
            h = torch.cond(h.sum() > 0, lambda t: self.b(t) * 2.0, lambda t: t - self.b(t), (h,))
            return self.out(h)

    def hf(kind: str):
        import transformers

        if kind == "gpt2":
            cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=100, n_positions=32)
            model = transformers.GPT2Model(cfg)
        else:
            cfg = transformers.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                          intermediate_size=128, vocab_size=100, max_position_embeddings=32)
            model = transformers.BertModel(cfg)
        model.config.return_dict = False
        model.config.use_cache = False

        class Wrap(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.m = model

            def forward(self, input_ids):
                # an explicit mask skips the packed-sequence check (aten::diff, no ONNX symbolic)
                return self.m(input_ids=input_ids, attention_mask=torch.ones_like(input_ids))[0]

        return Wrap()

    def seeded(factory):
        def make():
            torch.manual_seed(0)
            m = factory().eval()
            with torch.no_grad():  # non-trivial BatchNorm statistics
                for mod in m.modules():
                    if isinstance(mod, nn.BatchNorm2d):
                        mod.running_mean.uniform_(-0.5, 0.5)
                        mod.running_var.uniform_(0.5, 1.5)
            return m
        return make

    ids = torch.randint(0, 100, (1, 8), generator=torch.Generator().manual_seed(0))
    return {
        "resnet": (seeded(ResNet), (torch.randn(1, 3, 16, 16),), {}),
        "mobilenet": (seeded(MobileNet), (torch.randn(1, 3, 16, 16),), {}),
        "encoder": (seeded(Encoder), (torch.randn(1, 6, 32),), {}),
        "recurrent": (seeded(Recurrent), (torch.randn(1, 5, 8),), {}),
        "cond": (seeded(Cond), (torch.randn(2, 8),), {}),
        "gpt2": (seeded(lambda: hf("gpt2")), (ids,), {}),
        "bert": (seeded(lambda: hf("bert")), (ids,), {}),
    }


DYNAMIC_DYNAMO = ("resnet", "gpt2", "bert")
"""Exported by dynamo with symbolic batch (and sequence) dims; the others keep static shapes."""


def export_torch(folder: Path, name: str, exporter: str) -> Path:
    """Export module `name` with exporter 'dynamo' or 'ts' to <folder>/<name>_<exporter>.onnx."""
    import warnings

    import torch

    factory, args, _ = _torch_modules()[name]
    module = factory()
    path = folder / f"{name}_{exporter}.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # real models have a dynamic batch (and sequence) dim: symbolic dims everywhere
        seq = name in ("gpt2", "bert")
        if exporter == "dynamo":
            dynamic = None
            if name in DYNAMIC_DYNAMO:
                batch = torch.export.Dim("batch", min=1, max=64)
                dims = {0: batch, 1: torch.export.Dim("seq", min=2, max=30)} if seq else {0: batch}
                dynamic = (dims,)
            prog = torch.onnx.export(module, args, dynamo=True, verbose=False, dynamic_shapes=dynamic)
            prog.save(str(path))
        else:
            names = [f"input{i}" for i in range(len(args))]
            axes = {n: ({0: "batch", 1: "seq"} if seq else {0: "batch"}) for n in names}
            torch.onnx.export(module, args, str(path), dynamo=False, opset_version=17,
                              input_names=names, dynamic_axes=axes)
    return path


SLOW: dict[str, Callable[[Path], Path]] = {
    f"{n}_{e}": (lambda folder, n=n, e=e: export_torch(folder, n, e))
    for n in ("resnet", "mobilenet", "encoder", "recurrent", "cond", "gpt2", "bert")
    for e in ("dynamo", "ts")
    if (n, e) != ("cond", "ts")  # torch.cond cannot be traced by the TorchScript exporter
}


# ------------------------------------------------------------------------------ registry
FEATURES = frozenset({
    "module_scopes",     # an exporter module path names exactly one tensor (torch exports)
    "ambiguous_module",  # the preferred module path hands several tensors on (TorchScript 'lstm')
    "same_shape_pair",   # two computed tensors of one static shape and dtype, the later one free to reroute
    "named_consumers",   # ... and the rerouted tensor has a consumer with a node name
    "body_capture",      # an If/Loop/Scan body reads a tensor computed in the main graph
    "unknown_rank",      # a computed tensor whose rank neither onnx nor onnxruntime can infer
})
"""What a gauntlet check may need of a model. test_gauntlet.model_features computes each one
from the built model with the helpers the checks use, and test_declared_features_are_true
requires the declared tags to equal it exactly."""

_PAIR = ("same_shape_pair", "named_consumers")
_TORCH = ("module_scopes", *_PAIR)
_TAGS: dict[str, tuple[str, ...]] = {
    "repo_keras_cnn": _PAIR, "old_ir_opset11": _PAIR, "external_data": _PAIR, "fp16_weights": _PAIR,
    "embedding_gather": _PAIR, "ort_optimized": _PAIR, "loop_rnn": ("body_capture", "unknown_rank"),
    "sklearn_like": ("unknown_rank",),  # ai.onnx.ml outputs: onnxruntime reports no shape
    "symbolic_batch": _PAIR, "unnamed_nodes": ("same_shape_pair",), "custom_domain": _PAIR,
    "plain_block": _PAIR, "folded_constants": _PAIR, "repo_tf1_seed": (), "repo_torch_cnn": ("module_scopes",),
    "repo_seed_cnn": (), "quantized_dynamic": _PAIR, "quantized_qdq": _PAIR,
    "resnet_dynamo": _TORCH, "resnet_ts": _TORCH, "mobilenet_dynamo": _TORCH, "mobilenet_ts": _TORCH,
    "encoder_dynamo": _TORCH, "encoder_ts": (*_TORCH, "unknown_rank"),
    "recurrent_dynamo": ("module_scopes",),
    # TorchScript folds the LSTM's batch-first Transpose pair: the GRU reads the time-major
    # tensor, a Shape node the batch-first one; both leave module 'lstm' ('gru' is unambiguous)
    "recurrent_ts": ("module_scopes", "ambiguous_module"),
    "cond_dynamo": (*_TORCH, "body_capture"),
    "gpt2_dynamo": _TORCH, "gpt2_ts": _TORCH, "bert_dynamo": _TORCH, "bert_ts": _TORCH,
}


@dataclass(frozen=True)
class Entry:
    """One gauntlet model: its builder, whether it runs with the slow tests, its feature tags."""

    build: Callable[[Path], Path]
    slow: bool
    features: frozenset[str]


REGISTRY: dict[str, Entry] = {
    name: Entry(builder, name not in FAST, frozenset(_TAGS[name]))
    for name, builder in (FAST | MORE | SLOW).items()
}
"""name -> Entry, in test order (FAST, then MORE, then SLOW)."""

assert set(_TAGS) == set(REGISTRY), "every model declares its features (and only registered models)"
assert all(set(t) <= FEATURES for t in _TAGS.values()), "unknown feature tag"


def with_features(*needs: str) -> list[str]:
    """The registered model names whose declared features include all of ``needs``."""
    unknown = set(needs) - FEATURES
    if unknown:
        raise ValueError(f"unknown feature tags {sorted(unknown)}; known: {sorted(FEATURES)}")
    return [n for n, e in REGISTRY.items() if e.features >= set(needs)]


def build(name: str, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return REGISTRY[name].build(folder)


if __name__ == "__main__":  # pragma: no cover
    out = Path(sys.argv[1])
    for key in (sys.argv[2:] or list(REGISTRY)):
        try:
            print(key, build(key, out))
        except Exception as exc:  # noqa: BLE001
            print(key, "FAILED", type(exc).__name__, str(exc).splitlines()[0][:200] if str(exc) else "")
