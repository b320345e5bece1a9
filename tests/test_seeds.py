"""The five seed scenarios end to end, each checked against the framework itself (TensorFlow or
PyTorch computing the rewritten model directly), never against onnxsurgeon.

1. TF1 graph + ``insert l2_normalize`` at ``network/layer_conv5/Relu:0`` == TF graph with
   ``tf.nn.l2_normalize`` inline (same weights).
2. The same with the function written in TensorFlow (``export_function`` / ``insert_function``).
3. Copy of the logits closure of a Keras and a PyTorch model: equal, independent, original intact;
   shared weights add no initializer.
4. PyTorch CNN + ``F.normalize`` at module ``conv5`` == the module with a forward hook on conv5.
5. ``as_output`` reduce_mean over the spatial axes == the framework's own mean of the activation.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from tests.framework_helpers import assert_close, images, run

tf = pytest.importorskip("tensorflow")
torch = pytest.importorskip("torch")
pytest.importorskip("tf2onnx")

from onnxsurgeon.converters import from_tf, from_torch, insert_function  # noqa: E402
from onnxsurgeon.converters import seed_models as sm  # noqa: E402

from onnxsurgeon.surgery.copy import Weights, copy  # noqa: E402
from onnxsurgeon.surgery.insert import insert  # noqa: E402

ACT = sm.TF1_ACT


def _l2(a):
    return tf.nn.l2_normalize(a, axis=-1)


@pytest.fixture(scope="module")
def tf1(tmp_path_factory):
    """(converted ONNX model, TF session of the plain graph)."""
    sess = sm.tf1_seed_session(seed=0)
    path = tmp_path_factory.mktemp("seeds") / "tf1.onnx"
    from_tf(sess, path, inputs=[sm.TF1_INPUT], outputs=[sm.TF1_OUTPUT], opset=17)
    yield path, sess
    sess.close()


@pytest.fixture(scope="module")
def tf1_inline_reference():
    """The seed's approach 1: the same graph and weights with tf.nn.l2_normalize inline."""
    sess = sm.tf1_seed_session(func=_l2, seed=0)
    yield lambda x: sess.run(sm.TF1_OUTPUT, {sm.TF1_INPUT: x})
    sess.close()


def _check_tf1_rewrite(model, plain_sess, reference, x):
    got = run(model, {"input": x})["logits"]
    assert_close(got, reference(x))
    plain = plain_sess.run(sm.TF1_OUTPUT, {sm.TF1_INPUT: x})
    assert not np.allclose(got, plain, rtol=1e-2, atol=1e-3)   # the rewrite changed something


def test_seed1_insert_builtin_l2_normalize_equals_tf_inline(tf1, tf1_inline_reference):
    path, sess = tf1
    model = onnx.load(path)
    result = insert(model, ACT, op="l2_normalize", params={"axis": -1})
    assert result.rerouted
    _check_tf1_rewrite(model, sess, tf1_inline_reference, images((3, 8, 8, 3), seed=1))


def test_seed2_insert_tf_written_function_equals_tf_inline(tf1, tf1_inline_reference):
    path, sess = tf1
    model = onnx.load(path)
    insert_function(model, ACT, _l2, "tf")
    _check_tf1_rewrite(model, sess, tf1_inline_reference, images((2, 8, 8, 3), seed=2))


def test_seed1_on_the_committed_model(tf1_inline_reference):
    from pathlib import Path

    model = onnx.load(Path(__file__).resolve().parent.parent / "models" / "tf1_seed.onnx")
    insert(model, ACT, op="l2_normalize", params={"axis": -1})
    x = images((2, 8, 8, 3), seed=3)
    assert_close(run(model, {"input": x})["logits"], tf1_inline_reference(x))


# ----------------------------------------------------------------------------- scenario 3
def _keras_model_and_reference(tmp_path):
    km = sm.keras_cnn(seed=0)
    report = from_tf(km, tmp_path / "k.onnx")
    return onnx.load(report.path), "image", (2, 8, 8, 3), lambda x: np.asarray(km(x, training=False))


def _torch_model_and_reference(tmp_path):
    tm = sm.torch_cnn(seed=0)
    x = torch.from_numpy(images((2, 3, 8, 8), seed=4))
    report = from_torch(tm, (x,), tmp_path / "t.onnx", exporter="torchscript",
                        input_names=["x"], output_names=["logits"])

    def ref(a):
        with torch.no_grad():
            return tm(torch.from_numpy(a)).numpy()

    return onnx.load(report.path), "x", (2, 3, 8, 8), ref


MAKERS = {"keras": _keras_model_and_reference, "torch": _torch_model_and_reference}


@pytest.mark.parametrize("framework", sorted(MAKERS))
def test_seed3_copy_logits_closure_independent(framework, tmp_path):
    model, inp, shape, framework_logits = MAKERS[framework](tmp_path)
    x = images(shape, seed=5)
    original = run(model, {inp: x})["logits"]
    assert_close(original, framework_logits(x))
    n_init = len(model.graph.initializer)
    result = copy(model, ["logits"], weights=Weights.INDEPENDENT)
    twin = result.outputs["logits"]
    assert len(model.graph.initializer) == n_init + len(result.initializers) > n_init
    out = run(model, {inp: x})
    np.testing.assert_array_equal(out[twin], out["logits"])
    np.testing.assert_array_equal(out["logits"], original)
    # perturb one weight of the copy (the largest one): only the copy moves
    inits = {t.name: t for t in model.graph.initializer}
    orig_name = max(result.initializers, key=lambda n: numpy_helper.to_array(inits[n]).size)
    tensor = inits[result.initializers[orig_name]]
    values = numpy_helper.to_array(tensor).copy()
    values.flat[0] += 1.0
    tensor.CopyFrom(numpy_helper.from_array(values, tensor.name))
    moved = run(model, {inp: x})
    np.testing.assert_array_equal(moved["logits"], original)
    assert not np.allclose(moved[twin], original)


@pytest.mark.parametrize("framework", sorted(MAKERS))
def test_seed3_copy_with_shared_weights_adds_no_initializer(framework, tmp_path):
    model, inp, shape, _ = MAKERS[framework](tmp_path)
    x = images(shape, seed=6)
    original = run(model, {inp: x})["logits"]
    n_init = len(model.graph.initializer)
    result = copy(model, ["logits"], weights=Weights.SHARED)
    assert len(model.graph.initializer) == n_init and not result.initializers
    out = run(model, {inp: x})
    np.testing.assert_array_equal(out[result.outputs["logits"]], original)
    np.testing.assert_array_equal(out["logits"], original)


# ----------------------------------------------------------------------------- scenario 4
def _normalize(a):
    return torch.nn.functional.normalize(a, dim=1)


@pytest.mark.parametrize("exporter", [
    pytest.param("dynamo", marks=pytest.mark.slow), "torchscript"])
def test_seed4_torch_function_at_module_conv5_equals_forward_hook(exporter, tmp_path):
    module = sm.torch_cnn(seed=0)
    x = torch.from_numpy(images((2, 3, 8, 8), seed=7))
    report = from_torch(module, (x,), tmp_path / "c.onnx", exporter=exporter,
                        input_names=["x"], output_names=["logits"], dynamic_axes={"x": {0: "batch"}})
    model = onnx.load(report.path)
    insert_function(model, "conv5", _normalize, "torch")
    handle = module.conv5.register_forward_hook(lambda _m, _i, out: _normalize(out))
    try:
        for batch in (2, 5):
            xb = torch.from_numpy(images((batch, 3, 8, 8), seed=batch))
            with torch.no_grad():
                want = module(xb).numpy()
            assert_close(run(model, {"x": xb.numpy()})["logits"], want)
    finally:
        handle.remove()
    with torch.no_grad():
        plain = module(x).numpy()
    assert not np.allclose(run(model, {"x": x.numpy()})["logits"], plain, rtol=1e-2, atol=1e-3)


# ----------------------------------------------------------------------------- scenario 5
def test_seed5_feature_extraction_tf_mean_of_activation(tf1):
    path, sess = tf1
    model = onnx.load(path)
    x = images((3, 8, 8, 3), seed=8)
    before = run(model, {"input": x})["logits"]
    result = insert(model, ACT, op="reduce_mean", params={"axes": [1, 2], "keepdims": 0},
                    as_output=True)
    with sess.graph.as_default():
        mean = tf.reduce_mean(sess.graph.get_tensor_by_name(ACT), axis=[1, 2])
    out = run(model, {"input": x})
    assert out[result.processed].shape == (3, sm.CHANNELS)
    assert_close(out[result.processed], sess.run(mean, {sm.TF1_INPUT: x}))
    np.testing.assert_array_equal(out["logits"], before)


def test_seed5_feature_extraction_torch_mean_of_conv5(tmp_path):
    module = sm.torch_cnn(seed=2)
    x = torch.from_numpy(images((4, 3, 8, 8), seed=9))
    report = from_torch(module, (x,), tmp_path / "f.onnx", exporter="torchscript",
                        input_names=["x"], output_names=["logits"])
    model = onnx.load(report.path)
    before = run(model, {"x": x.numpy()})["logits"]
    result = insert(model, "conv5", op="reduce_mean", params={"axes": [2, 3], "keepdims": 0},
                    as_output=True)
    seen = {}
    handle = module.conv5.register_forward_hook(lambda _m, _i, out: seen.setdefault("a", out))
    with torch.no_grad():
        module(x)
    handle.remove()
    out = run(model, {"x": x.numpy()})
    assert_close(out[result.processed], seen["a"].mean(dim=(2, 3)).numpy())
    np.testing.assert_array_equal(out["logits"], before)


# ----------------------------------------------------------------------------- the demo
def test_demo_committed_model_steps_check_against_numpy(tmp_path):
    """The no-framework fallback of the demo runs on the committed files and passes."""
    from pathlib import Path

    from onnxsurgeon.converters import demo

    lines: list[str] = []
    check = demo._Check(lines.append)
    demo._committed_steps(check, Path(__file__).resolve().parent.parent / "models")
    assert check.failed == 0
    assert sum("check vs numpy" in line and ": ok" in line for line in lines) == 2


@pytest.mark.slow
def test_demo_framework_steps_pass(tmp_path):
    from pathlib import Path

    from onnxsurgeon.converters import demo

    lines: list[str] = []
    failed = demo.run(lines.append, tmp_path, Path(__file__).resolve().parent.parent / "models")
    assert failed == 0
    assert sum(": ok (" in line for line in lines) == 5
    from tests.test_cli import _pasted, paste

    commands = _pasted("\n".join(lines))
    assert len(commands) == 5 and sum("--func" in c for c in commands) == 2
    for command in commands:  # every printed command runs as printed
        done = paste(command)
        assert done.returncode == 0, command + "\n" + done.stderr
        assert Path(command.split(" -o ")[1].split()[0]).is_file()
