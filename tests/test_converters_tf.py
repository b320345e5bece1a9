"""TensorFlow -> ONNX: every source kind, the value-checked name map, the numeric check."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from tests.framework_helpers import assert_close, images, metadata, run

tf = pytest.importorskip("tensorflow")
pytest.importorskip("tf2onnx")
keras = pytest.importorskip("keras")

from onnxsurgeon.converters import (  # noqa: E402
    ConversionMismatchError,
    from_tf,
)
from onnxsurgeon.converters import seed_models as sm  # noqa: E402
from onnxsurgeon.converters.common import NAME_MAP_KEY, compare_outputs  # noqa: E402

from onnxsurgeon.errors import NotFoundError, UsageError  # noqa: E402
from onnxsurgeon.index import GraphIndex  # noqa: E402
from onnxsurgeon.select import Selector  # noqa: E402

pytestmark = pytest.mark.tf


@pytest.fixture(scope="module")
def seed_session():
    sess = sm.tf1_seed_session(seed=0)
    yield sess
    sess.close()


@pytest.fixture(scope="module")
def seed_onnx(seed_session, tmp_path_factory):
    path = tmp_path_factory.mktemp("tf1") / "seed.onnx"
    report = from_tf(seed_session, path, inputs=[sm.TF1_INPUT], outputs=[sm.TF1_OUTPUT], opset=17)
    return report, onnx.load(path)


def _tf_run(sess, fetches, x):
    return sess.run(fetches, {sm.TF1_INPUT: x})


def test_tf1_session_converts_with_only_real_inputs_and_records_metadata(seed_onnx, seed_session):
    report, model = seed_onnx
    assert [i.name for i in model.graph.input] == ["input"]
    assert [o.name for o in model.graph.output] == ["logits"]
    assert report.checked and report.max_abs_diff < 1e-4 and report.max_excess <= 0
    meta = metadata(model)
    assert meta["onnxsurgeon.source.framework"] == "tensorflow"
    assert meta["onnxsurgeon.source.framework_version"] == tf.__version__
    assert meta["onnxsurgeon.source.exporter"].startswith("tf2onnx ")
    assert json.loads(meta[NAME_MAP_KEY]) == dict(report.name_map)
    assert json.loads(meta["onnxsurgeon.conversion_check"])["checked"] is True
    x = images((3, 8, 8, 3), seed=5)     # another batch size than the check used
    assert_close(run(model, {"input": x})["logits"], _tf_run(seed_session, sm.TF1_OUTPUT, x))


def test_tf_names_denote_tensorflow_values_nhwc_and_fused(seed_onnx, seed_session):
    """'network/layer_conv5/Relu:0' resolves to the NHWC activation TF computes (tf2onnx's own
    tensor of that name is NCHW), the fused Conv2D:0 to the fused result, variables to weights."""
    _, model = seed_onnx
    sel = Selector(GraphIndex(model))
    names = ["network/layer_conv5/Relu:0", "network/layer_conv5/Relu", "network/layer_conv5/BiasAdd:0",
             "network/flatten/Reshape:0"]
    resolved = [sel.resolve(n) for n in names]
    x = images((2, 8, 8, 3), seed=1)
    got = run(model, {"input": x}, extra=resolved)
    want = _tf_run(seed_session, [names[0], names[0], names[2], names[3]], x)
    for r, w in zip(resolved, want, strict=True):
        assert got[r].shape == w.shape
        assert_close(got[r], w)
    with pytest.raises(NotFoundError) as fused:   # tf2onnx added the bias inside the Conv
        sel.resolve("network/layer_conv5/Conv2D:0")
    assert str(fused.value) == (
        "'network/layer_conv5/Conv2D:0' was fused into Conv 'network/layer_conv5/BiasAdd' by the "
        "converter; its value does not exist in the ONNX model; use 'network/layer_conv5/BiasAdd:0'")
    kernel = sel.resolve("network/fc1/kernel:0")
    init = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    np.testing.assert_array_equal(init[kernel], sm._rng_weights(0)["fc_kernel"])
    with pytest.raises(NotFoundError, match="layer_conv5"):
        sel.resolve("network/layer_conv6/Relu:0")


def _onnx_values(model, feeds, names):
    """Each of ``names`` in ``model`` on ``feeds``: initializers by value, the rest by running."""
    init = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    ran = run(model, feeds, extra=[n for n in names if n not in init and n not in feeds])
    return {n: init[n] if n in init else feeds[n] if n in feeds else ran[n] for n in names}


def _assert_map_true_by_value(model, feeds, framework_value):
    """Every name-map entry holds the framework's value on ``feeds``; every fused name's value is
    held by no tensor of the model (checked against every node output and input)."""
    from onnxsurgeon.converters.common import ValueIndex, run_all_tensors

    from onnxsurgeon.select import fused_names, name_map

    mapping = name_map(model)
    assert mapping
    got = _onnx_values(model, feeds, sorted(set(mapping.values())))
    for fw, tensor in mapping.items():
        want = framework_value(fw)
        assert got[tensor].shape == want.shape, (fw, tensor)
        assert_close(got[tensor], want)
    everything = ValueIndex({**run_all_tensors(model, feeds), **feeds})
    for fw in fused_names(model):
        assert everything.absent(framework_value(fw)), fw
    return mapping, fused_names(model)


def test_committed_tf1_seed_name_map_is_true_by_value(seed_session):
    """On another input than the conversion used: each TF name of the committed model's map
    holds what TF computes for it; 'Conv2D:0' (bias added inside the ONNX Conv) is in no map
    but listed as fused, and its value is nowhere in the model."""
    from pathlib import Path

    model = onnx.load(Path(__file__).resolve().parent.parent / "models" / "tf1_seed.onnx")
    x = images((3, 8, 8, 3), seed=21)
    variables = {v.name: v for v in seed_session.graph.get_collection("variables")}

    def value(name):   # a variable's name means its value, not its resource handle
        return np.asarray(_tf_run(seed_session, variables.get(name, name), x))

    mapping, fused = _assert_map_true_by_value(model, {"input": x}, value)
    assert "network/fc1/kernel:0" in mapping
    assert fused == {"network/layer_conv5/Conv2D:0": {
        "node": "network/layer_conv5/BiasAdd", "op": "Conv", "use": "network/layer_conv5/BiasAdd:0"}}


def test_committed_keras_name_map_is_true_by_value():
    """Keras layer names and the TF tensor names of the frozen Keras graph, by value."""
    from pathlib import Path

    from onnxsurgeon.converters.tf_sources import normalize

    model = onnx.load(Path(__file__).resolve().parent.parent / "models" / "keras_cnn.onnx")
    km = sm.keras_cnn(seed=0)
    fr = normalize(km, None, None)
    graph = tf.Graph()
    with graph.as_default():
        tf.import_graph_def(fr.graph_def, name="")
    x = images((2, 8, 8, 3), seed=22)
    names = [layer.name for layer in km.layers if not isinstance(layer, keras.layers.InputLayer)]
    layers = dict(zip(names, _keras_layer_values(km, x, names), strict=True))
    with tf.compat.v1.Session(graph=graph) as sess:
        def value(name):
            if name in layers:
                return layers[name]
            return np.asarray(sess.run(name, {fr.inputs[0]: x}))

        mapping, fused = _assert_map_true_by_value(model, {"image": x}, value)
    assert {"conv5", "conv6", "relu6", "gap"} <= set(mapping)
    assert set(fused) == {"keras_cnn_1/conv5_1/convolution:0", "keras_cnn_1/conv6_1/convolution:0"}


def test_frozen_pb_file_and_frozen_graph(seed_session, tmp_path):
    gd = tf.compat.v1.graph_util.convert_variables_to_constants(
        seed_session, seed_session.graph.as_graph_def(), ["logits"])
    pb = tmp_path / "frozen.pb"
    pb.write_bytes(gd.SerializeToString())
    x = images((2, 8, 8, 3), seed=2)
    want = _tf_run(seed_session, sm.TF1_OUTPUT, x)
    r1 = from_tf(pb, tmp_path / "pb.onnx", inputs=["input:0"], outputs=["logits:0"])
    graph = tf.Graph()
    with graph.as_default():
        tf.import_graph_def(gd, name="")
    r2 = from_tf(graph, tmp_path / "graph.onnx", inputs=["input"], outputs=["logits"])
    for r in (r1, r2):
        m = onnx.load(r.path)
        assert_close(run(m, {"input": x})["logits"], want)
        sel = Selector(GraphIndex(m))
        assert sel.resolve("network/layer_conv5/Relu:0") in {o for n in m.graph.node for o in n.output}


def test_tf1_graph_with_variables_needs_its_session(seed_session, tmp_path):
    with pytest.raises(UsageError, match="Session"):
        from_tf(seed_session.graph, tmp_path / "x.onnx", inputs=["input:0"], outputs=["logits:0"])
    with pytest.raises(UsageError, match="inputs"):
        from_tf(seed_session, tmp_path / "x.onnx", outputs=["logits:0"])
    with pytest.raises(NotFoundError, match="nope"):
        from_tf(seed_session, tmp_path / "x.onnx", inputs=["input:0"], outputs=["nope:0"])
    assert not (tmp_path / "x.onnx").exists()


@pytest.fixture(scope="module")
def keras_model():
    return sm.keras_cnn(seed=0)


def _keras_layer_values(model, x, names):
    probe = keras.Model(model.inputs, [model.get_layer(n).output for n in names])
    return [np.asarray(v) for v in probe([x], training=False)]


@pytest.mark.parametrize("kind", ["object", "file"])
def test_keras_model_and_keras_file_layer_names_resolve(keras_model, kind, tmp_path):
    source = keras_model
    if kind == "file":
        source = tmp_path / "m.keras"
        keras_model.save(source)
    report = from_tf(source, tmp_path / "k.onnx")
    model = onnx.load(report.path)
    assert [i.name for i in model.graph.input] == ["image"]
    x = images((4, 8, 8, 3), seed=3)
    assert_close(run(model, {"image": x})["logits"], np.asarray(keras_model(x, training=False)))
    layers = ["conv5", "conv6", "relu6", "gap"]
    sel = Selector(GraphIndex(model))
    resolved = [sel.resolve(n) for n in layers]
    got = run(model, {"image": x}, extra=resolved)
    for name, r, want in zip(layers, resolved, _keras_layer_values(keras_model, x, layers), strict=True):
        assert got[r].shape == want.shape, name
        assert_close(got[r], want)


def test_tf_function_with_captured_variables_is_frozen(tmp_path):
    rng = np.random.default_rng(0)
    w = tf.Variable(rng.standard_normal((3, 4)).astype(np.float32), name="w")
    shift = tf.Variable(rng.standard_normal(4).astype(np.float32), name="shift", trainable=False)

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="features")])
    def f(x):
        return tf.nn.tanh(tf.matmul(x, w) + shift)

    x = images((5, 3), seed=4)
    for source in (f, f.get_concrete_function()):
        report = from_tf(source, tmp_path / "f.onnx")
        model = onnx.load(report.path)
        assert [i.name for i in model.graph.input] == ["features"]
        assert not any(i.name in ("w", "shift") for i in model.graph.input)
        assert_close(run(model, {"features": x})[report.outputs[0]], f(x).numpy())


def test_tf_function_without_signature_takes_input_specs(tmp_path):
    f = tf.function(lambda x: tf.reduce_max(x, axis=-1) * 2.0)
    with pytest.raises(UsageError, match="input_signature"):
        from_tf(f, tmp_path / "f.onnx")
    report = from_tf(f, tmp_path / "f.onnx", inputs=["x:[2,6]:float32"])
    model = onnx.load(report.path)
    x = images((2, 6), seed=6)
    assert_close(run(model, {"x": x})[report.outputs[0]], f(x).numpy())


def test_saved_model_directory(tmp_path):
    class Scale(tf.Module):
        def __init__(self):
            super().__init__()
            self.k = tf.Variable(np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3))

        @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32, name="x")])
        def __call__(self, x):
            return {"y": tf.nn.relu(tf.matmul(x, self.k))}

    module = Scale()
    tf.saved_model.save(module, str(tmp_path / "sm"), signatures=module.__call__)
    report = from_tf(tmp_path / "sm", tmp_path / "sm.onnx")
    model = onnx.load(report.path)
    assert [i.name for i in model.graph.input] == ["x"]
    assert report.outputs == ("y",)
    x = images((3, 2), seed=7)
    assert_close(run(model, {"x": x})["y"], module(x)["y"].numpy())


def test_check_raises_beyond_tolerance_and_can_be_skipped(tmp_path):
    """A 2048-term float32 reduction rounds differently in TF and onnxruntime: with zero
    tolerance the check must refuse it; check=False writes it and reports no numbers."""
    rng = np.random.default_rng(0)
    inp = keras.Input((2048,), name="v")
    out = keras.layers.Dense(64, name="d", kernel_initializer=keras.initializers.RandomNormal(seed=1))(inp)
    model = keras.Model(inp, out)
    example = {"v": rng.standard_normal((8, 2048)).astype(np.float32) * 100}
    with pytest.raises(ConversionMismatchError, match="differs from the framework"):
        from_tf(model, tmp_path / "d.onnx", rtol=0.0, atol=0.0, example_inputs=example)
    assert not (tmp_path / "d.onnx").exists()
    report = from_tf(model, tmp_path / "d.onnx", rtol=0.0, atol=0.0, example_inputs=example,
                     check=False)
    assert not report.checked and np.isnan(report.max_abs_diff)
    assert (tmp_path / "d.onnx").exists()


def test_compare_outputs_measures_excess():
    """The conversion check is verify's engine: an element fails when it exceeds both atol and
    rtol*|reference| (so the excess of equal values is minus the smallest such tolerance)."""
    a = np.array([1.0, 2.0, 3.0], np.float32)
    assert compare_outputs([a], [a], rtol=1e-3, atol=1e-5) == (0.0, pytest.approx(-1e-3))
    max_abs, excess = compare_outputs([a + np.float32(0.01)], [a], rtol=1e-3, atol=1e-5)
    assert max_abs == pytest.approx(0.01, rel=1e-3) and excess > 0
    with pytest.raises(ConversionMismatchError, match="shape"):
        compare_outputs([a], [a[:2]], rtol=1e-3, atol=1e-5)


def test_conversion_check_is_verify_engine_and_policy():
    """Same verdict as verify's PairAccumulator under the framework policy (the one
    ``verify --against-tf`` uses), element by element; integers stay exact at any tolerance."""
    from onnxsurgeon.converters.common import ATOL, RTOL

    from onnxsurgeon.verify import compare_arrays
    from onnxsurgeon.verify.accumulate import FRAMEWORK, default_tolerance

    assert (RTOL, ATOL) == default_tolerance("float32", FRAMEWORK) == (1e-3, 1e-5)
    ref = np.array([0.01, 1.0, 100.0], np.float32)
    for d in (1.5e-5, 9e-6, 1.2e-3, 0.09, 0.11):
        for i in range(3):
            got = ref.copy()
            got[i] += np.float32(d)
            _, excess = compare_outputs([got], [ref], rtol=RTOL, atol=ATOL)
            verdict = compare_arrays(ref, got, rtol=RTOL, atol=ATOL).agree
            assert (excess <= 0) == verdict, (d, i, excess)
    big = np.array([2000, 3000], np.int64)
    assert compare_outputs([big + 1], [big], rtol=RTOL, atol=ATOL)[1] > 0
    assert compare_outputs([big], [big], rtol=RTOL, atol=ATOL)[1] <= 0


def test_conversion_is_deterministic(seed_session, tmp_path):
    paths = []
    for i in range(2):
        p = tmp_path / f"d{i}.onnx"
        from_tf(seed_session, p, inputs=[sm.TF1_INPUT], outputs=[sm.TF1_OUTPUT], opset=17)
        paths.append(p.read_bytes())
    assert paths[0] == paths[1]


def test_committed_tf1_seed_model_matches_the_generator(seed_onnx):
    from pathlib import Path

    committed = Path(__file__).resolve().parent.parent / "models" / "tf1_seed.onnx"
    model = onnx.load(committed)
    x = images((2, 8, 8, 3), seed=8)
    assert_close(run(model, {"input": x})["logits"], run(seed_onnx[1], {"input": x})["logits"])


def test_committed_keras_model_matches_keras():
    from pathlib import Path

    model = onnx.load(Path(__file__).resolve().parent.parent / "models" / "keras_cnn.onnx")
    km = sm.keras_cnn(seed=0)
    x = images((2, 8, 8, 3), seed=11)
    assert [i.name for i in model.graph.input] == ["image"]
    assert_close(run(model, {"image": x})["logits"], np.asarray(km(x, training=False)))


def test_cli_convert_tf_splits_spec_strings(seed_session, tmp_path):
    from onnxsurgeon.converters import cli_convert_tf

    gd = tf.compat.v1.graph_util.convert_variables_to_constants(
        seed_session, seed_session.graph.as_graph_def(), ["logits"])
    pb = tmp_path / "frozen.pb"
    pb.write_bytes(gd.SerializeToString())
    report = cli_convert_tf(str(pb), tmp_path / "c.onnx", inputs="input:0:4,8,8,3",
                            outputs="logits:0", opset=16)
    model = onnx.load(report.path)
    assert report.opset == 16
    assert [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim] == [4, 8, 8, 3]
    x = images((4, 8, 8, 3), seed=12)
    assert_close(run(model, {"input": x})["logits"], _tf_run(seed_session, sm.TF1_OUTPUT, x))
    with pytest.raises(UsageError, match="neither"):
        cli_convert_tf(str(tmp_path / "c.onnx"), tmp_path / "d.onnx")


def test_subclassed_keras_model_takes_input_specs(tmp_path):
    class Net(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(
                3, kernel_initializer=keras.initializers.RandomNormal(seed=2),
                bias_initializer=keras.initializers.RandomNormal(seed=3))

        def call(self, x):
            return keras.ops.tanh(self.dense(x))

    net = Net()
    with pytest.raises(UsageError, match="no symbolic inputs"):
        from_tf(net, tmp_path / "n.onnx")
    report = from_tf(net, tmp_path / "n.onnx", inputs=["feats:batch,5"])
    model = onnx.load(report.path)
    assert [i.name for i in model.graph.input] == ["feats"]
    x = images((4, 5), seed=15)
    assert_close(run(model, {"feats": x})[report.outputs[0]], np.asarray(net(x)))
