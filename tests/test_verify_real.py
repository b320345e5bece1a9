"""verify on real architectures (slow; issue 8's Done-when): a 1% change of one weight is a
``fail`` with default options, located at or after the changed weight's consumer, and every
model verified against itself passes. Keras applications with random weights and BatchNorm
statistics from one pass over random images (tf2onnx, opset 17, NHWC, softmax head), and a
transformers GPT-2 from a small config. No downloads."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from onnxsurgeon.closure import downstream_nodes
from onnxsurgeon.index import GraphIndex
from onnxsurgeon.verify import compare

pytestmark = pytest.mark.slow


def _weights(model: onnx.ModelProto, op: str) -> list[str]:
    """Initializers read by ``op`` nodes as their weight (slot 1), largest first."""
    inits = {t.name: t for t in model.graph.initializer}
    names = {n.input[1] for n in model.graph.node if n.op_type == op and len(n.input) > 1
             and n.input[1] in inits}
    return sorted(names, key=lambda n: (-int(np.prod(inits[n].dims)), n))


def _perturbed(model: onnx.ModelProto, name: str, *, scale: float, shift: float = 0.0):
    out = onnx.ModelProto()
    out.CopyFrom(model)
    t = next(t for t in out.graph.initializer if t.name == name)
    value = numpy_helper.to_array(t)
    t.CopyFrom(numpy_helper.from_array((value * scale + shift).astype(value.dtype), name))
    return out


def _assert_fails_after(model: onnx.ModelProto, changed: onnx.ModelProto, weight: str, **kw):
    report = compare(model, changed, **kw)
    assert report.verdict == "fail", report.to_text()
    div = report.divergence
    assert div is not None, report.to_text()
    index = GraphIndex(model)
    after = downstream_nodes(index, [weight])
    assert index.producer[div.tensor] in after, (div.tensor, weight)
    return report


@pytest.mark.tf
@pytest.mark.parametrize("app", ["ResNet50", "DenseNet121", "EfficientNetB0"])
def test_keras_application_weight_change_fails_and_itself_passes(app, keras_app):
    model = keras_app(app)
    assert compare(model, model).verdict == "pass"
    convs = _weights(model, "Conv")
    largest = convs[0]
    # the perturbation: the largest convolution weight * 1.01 + 1e-3 (ResNet50 at
    # 32x32: its softmax differs by under atol and varies across samples by only ~4x the
    # tolerance, so it is below the tolerance's resolution and settled at the logits)
    _assert_fails_after(model, _perturbed(model, largest, scale=1.01, shift=1e-3), largest)
    # a 1% change of one weight, alone: the first and the last convolution
    in_order = [n.input[1] for n in model.graph.node if n.op_type == "Conv" and n.input[1] in convs]
    for name in (in_order[0], in_order[-1]):
        _assert_fails_after(model, _perturbed(model, name, scale=1.01), name)


@pytest.mark.tf
def test_keras_resnet50_deep_comparison_names_the_changed_layer(keras_app):
    model = keras_app("ResNet50")
    weight = _weights(model, "Conv")[0]
    report = _assert_fails_after(model, _perturbed(model, weight, scale=1.01), weight, deep=True)
    assert report.deep is not None and report.deep.forced
    first = report.deep.first_difference
    assert first is not None
    consumer = next(i for i, n in enumerate(model.graph.node) if weight in n.input)
    assert first.position == consumer  # the convolution reading the changed weight
    assert report.divergence is not None and report.divergence.cause == "wrong node"
    assert len(report.deep.tensors) > 100 and report.deep.batches >= 1


@pytest.mark.torch
def test_gpt2_weight_change_fails_and_itself_passes(tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from onnxsurgeon.converters import from_torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=32,
                     use_cache=False, bos_token_id=0, eos_token_id=0)
    module = GPT2LMHeadModel(cfg).eval()
    ids = torch.randint(0, 100, (1, 8))
    model = onnx.load(from_torch(module, (ids,), tmp_path / "g.onnx", exporter="dynamo",
                                 input_names=["input_ids"]).path)
    report = compare(model, model)
    assert report.verdict == "pass" and report.inputs["input_ids"].startswith("integers[0,100)")
    inits = {t.name: t for t in model.graph.initializer}
    mats = sorted((n for n in inits if len(inits[n].dims) == 2 and inits[n].data_type == 1),
                  key=lambda n: (-int(np.prod(inits[n].dims)), n))
    for name in (mats[0], mats[-1]):
        _assert_fails_after(model, _perturbed(model, name, scale=1.01), name)


def _write(tmp_path, text: str):
    import textwrap

    src = tmp_path / "net.py"
    src.write_text(textwrap.dedent(text))
    return src


@pytest.mark.torch
def test_against_torch_locates_the_changed_module_through_the_name_map(tmp_path):
    pytest.importorskip("torch")
    from onnxsurgeon.converters import cli_convert_torch, torch_reference

    from onnxsurgeon.verify import verify_against

    src = _write(tmp_path, """
        import torch
        def build():
            torch.manual_seed(0)
            return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(),
                                       torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    """)
    out = tmp_path / "net.onnx"
    cli_convert_torch(f"{src}:build", out, inputs=["x:2x4"], exporter="dynamo")
    model = onnx.load(out)
    ref = torch_reference(f"{src}:build")
    assert verify_against(ref, model).verdict == "pass"
    # the second Linear's weight, changed by 1%
    gemm = [n for n in model.graph.node if n.op_type in ("Gemm", "MatMul")][1]
    weight = next(i for i in gemm.input if i in {t.name for t in model.graph.initializer})
    report = verify_against(ref, _perturbed(model, weight, scale=1.01))
    assert report.verdict == "fail"
    div = report.divergence
    assert div is not None and div.framework_name == "2", report.to_text()
    assert report.deep is not None and report.deep.tensors[0].ok  # module 0 still agrees


@pytest.mark.tf
def test_against_tf_locates_the_changed_layer_through_the_name_map(tmp_path):
    keras = pytest.importorskip("keras")
    from onnxsurgeon.converters import from_tf, tf_reference

    from onnxsurgeon.verify import verify_against

    keras.utils.set_random_seed(0)
    inp = keras.Input((6,), name="x")
    h = keras.layers.Dense(8, activation="relu", name="d1")(inp)
    h = keras.layers.Dense(8, activation="tanh", name="d2")(h)
    net = keras.Model(inp, keras.layers.Dense(3, name="d3")(h))
    path = tmp_path / "net.keras"
    net.save(path)
    model = onnx.load(from_tf(str(path), tmp_path / "net.onnx").path)
    ref = tf_reference(str(path))
    assert verify_against(ref, model).verdict == "pass"
    mats = [n for n in model.graph.node if n.op_type in ("MatMul", "Gemm")]
    weight = next(i for i in mats[1].input if i in {t.name for t in model.graph.initializer})
    report = verify_against(ref, _perturbed(model, weight, scale=1.01))
    assert report.verdict == "fail"
    assert report.divergence is not None and report.divergence.framework_name == "d2", \
        report.to_text()
