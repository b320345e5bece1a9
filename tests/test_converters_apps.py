"""Real architectures (slow): Keras applications (weights=None) and transformers GPT-2 / BERT
from small configs with random weights. No downloads."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from tests.framework_helpers import assert_close, images, run

pytestmark = pytest.mark.slow

# app -> a late layer whose output must resolve by its Keras name to the same values
KERAS_APPS = {
    "ResNet50": "conv5_block3_out",
    "MobileNetV2": "out_relu",
    "DenseNet121": "relu",
    "EfficientNetB0": "top_activation",
}


@pytest.mark.tf
@pytest.mark.parametrize("app", sorted(KERAS_APPS))
def test_keras_application_converts_with_only_its_image_input(app, tmp_path):
    keras = pytest.importorskip("keras")
    from onnxsurgeon.converters import from_tf

    from onnxsurgeon.index import GraphIndex
    from onnxsurgeon.select import Selector

    keras.utils.set_random_seed(0)
    model = getattr(keras.applications, app)(weights=None, input_shape=(64, 64, 3),
                                              classifier_activation=None)
    report = from_tf(model, tmp_path / f"{app}.onnx")
    onnx_model = onnx.load(report.path)
    assert len(onnx_model.graph.input) == 1          # captured variables were frozen
    (inp,) = onnx_model.graph.input
    assert [d.dim_value for d in inp.type.tensor_type.shape.dim][1:] == [64, 64, 3]
    assert report.checked and report.max_excess <= 0
    x = images((2, 64, 64, 3), seed=1) * 50.0
    layer = KERAS_APPS[app]
    resolved = Selector(GraphIndex(onnx_model)).resolve(layer)
    got = run(onnx_model, {inp.name: x}, extra=[resolved])
    probe = keras.Model(model.inputs, [model.output, model.get_layer(layer).output])
    logits, act = (np.asarray(v) for v in probe([x], training=False))
    assert_close(got[report.outputs[0]], logits, rtol=1e-3, atol=1e-4)
    assert got[resolved].shape == act.shape
    assert_close(got[resolved], act, rtol=1e-3, atol=1e-4)


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=32,
                     use_cache=False, bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(cfg), ["transformer.h.0.mlp", "transformer.h.1.ln_2", "transformer.ln_f"]


def _bert():
    from transformers import BertConfig, BertModel

    cfg = BertConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=2,
                     intermediate_size=64, vocab_size=100, max_position_embeddings=32)
    return BertModel(cfg), ["encoder.layer.0.output", "encoder.layer.1.intermediate", "pooler"]


@pytest.mark.torch
@pytest.mark.parametrize("make", [_gpt2, _bert], ids=["gpt2", "bert"])
def test_transformers_module_paths_resolve_after_dynamo_export(make, tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from onnxsurgeon.converters import from_torch

    from onnxsurgeon.index import GraphIndex
    from onnxsurgeon.select import Selector

    torch.manual_seed(0)
    module, paths = make()
    module.eval()
    ids = torch.randint(0, 100, (1, 8))
    report = from_torch(module, (ids,), tmp_path / "t.onnx", exporter="dynamo",
                        input_names=["input_ids"])
    assert report.checked and report.max_excess <= 0
    model = onnx.load(report.path)
    sel = Selector(GraphIndex(model))
    resolved = {p: sel.resolve(p) for p in paths}
    seen = {}
    handles = [module.get_submodule(p).register_forward_hook(
        lambda _m, _i, out, p=p: seen.__setitem__(p, out.detach().numpy().copy())) for p in paths]
    ids2 = torch.randint(0, 100, (1, 8), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        module(ids2)
    for h in handles:
        h.remove()
    got = run(model, {"input_ids": ids2.numpy()}, extra=list(resolved.values()))
    for p in paths:
        assert_close(got[resolved[p]], seen[p], rtol=1e-3, atol=1e-4)
