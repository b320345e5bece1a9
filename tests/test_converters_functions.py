"""Processing functions written in TensorFlow or PyTorch: exported blocks keep symbolic dims,
equal the framework function, and splice into models from any framework."""

from __future__ import annotations

import textwrap

import numpy as np
import onnx
import pytest
from onnx import TensorProto

from tests import builders
from tests.framework_helpers import assert_close, images, run

tf = pytest.importorskip("tensorflow")
torch = pytest.importorskip("torch")

from onnxsurgeon.converters import (  # noqa: E402
    activation_type,
    cli_insert_function,
    export_function,
    insert_function,
)

from onnxsurgeon.errors import NotFoundError, UsageError  # noqa: E402
from onnxsurgeon.record import rewrites  # noqa: E402


def _tf_fn(a):
    return tf.nn.l2_normalize(a, axis=1) * 2.0


def _torch_fn(a):
    return torch.nn.functional.normalize(a, dim=1) * 2.0


@pytest.mark.parametrize("framework,func", [("tf", _tf_fn), ("torch", _torch_fn)])
def test_export_function_keeps_symbolic_dims_and_equals_framework(framework, func):
    block = export_function(func, framework, elem_type=TensorProto.FLOAT,
                            shape=["batch", 4, "h", "w"], opset=17)
    assert [i.name for i in block.graph.input] == ["x"] and [o.name for o in block.graph.output] == ["y"]
    dims = block.graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in dims] == ["batch", 4, "h", "w"]
    for shape in [(1, 4, 2, 3), (5, 4, 7, 7)]:
        x = images(shape, seed=sum(shape))
        want = np.asarray(func(tf.constant(x)) if framework == "tf" else func(torch.from_numpy(x)))
        assert_close(run(block, {"x": x})["y"], want)


def test_torch_function_with_dynamo_at_opset_18():
    block = export_function(torch.nn.Softmax(dim=-1), "torch", elem_type=TensorProto.FLOAT,
                            shape=["n", 6], opset=18, exporter="dynamo")
    x = images((3, 6), seed=1)
    assert_close(run(block, {"x": x})["y"], torch.softmax(torch.from_numpy(x), -1).numpy())


def test_export_function_rejects_unknown_framework_and_non_callables():
    with pytest.raises(UsageError, match="framework 'jax'"):
        export_function(_tf_fn, "jax", elem_type=TensorProto.FLOAT, shape=[2], opset=17)
    with pytest.raises(UsageError, match="callable"):
        export_function(3, "tf", elem_type=TensorProto.FLOAT, shape=[2], opset=17)


@pytest.mark.parametrize("framework,func", [("tf", _tf_fn), ("torch", _torch_fn)])
def test_insert_function_into_an_onnx_helper_model(framework, func):
    """A function from either framework spliced into a model no framework made (tiny_cnn)."""
    model = builders.tiny_cnn()
    x = images((1, 3, 8, 8), seed=2)
    before = run(model, {"x": x}, extra=["act"])
    result = insert_function(model, "act", func, framework)
    onnx.checker.check_model(model)
    after = run(model, {"x": x})
    act = before["act"]
    v = np.asarray(func(tf.constant(act)) if framework == "tf" else func(torch.from_numpy(act)))
    # consumers of act now read v: the side branch is sigmoid(v), the logits use pool(v)
    assert_close(after["side_out"], 1 / (1 + np.exp(-v)))
    assert not np.allclose(after["side_out"], before["side_out"])
    assert result.processed in {o for n in model.graph.node for o in n.output}
    assert rewrites(model)[-1]["op"] == "insert"


def test_cli_insert_function_imports_the_users_file(tmp_path):
    src = tmp_path / "proc.py"
    src.write_text(textwrap.dedent("""
        import tensorflow as tf
        def half(a):
            return a * 0.5
    """))
    model = builders.tiny_cnn()
    x = images((1, 3, 8, 8), seed=3)
    before = run(model, {"x": x}, extra=["act"])
    cli_insert_function(model, "act", func=f"{src}:half", framework="tf")
    assert_close(run(model, {"x": x})["side_out"], 1 / (1 + np.exp(-0.5 * before["act"])))
    with pytest.raises(NotFoundError, match="defines no 'nope'"):
        cli_insert_function(model, "act", func=f"{src}:nope", framework="tf")


def test_activation_type_reads_dtype_and_shape():
    model = builders.tiny_cnn()
    assert activation_type(model, "act") == ("act", TensorProto.FLOAT, [1, 4, 8, 8])
    with pytest.raises(NotFoundError):
        activation_type(model, "no_such_tensor")


def test_cli_end_to_end_convert_torch_then_insert_func(tmp_path, capsys):
    """`onnxsurgeon convert torch` then `onnxsurgeon insert --func --framework torch`, checked
    against PyTorch with a forward hook."""
    from onnxsurgeon.converters import seed_models as sm

    from onnxsurgeon.cli import main

    net = tmp_path / "net.py"
    net.write_text("from onnxsurgeon.converters.seed_models import torch_cnn\n"
                   "def build():\n    return torch_cnn(seed=4)\n")
    proc = tmp_path / "proc.py"
    proc.write_text("import torch\ndef normalize(a):\n    return torch.nn.functional.normalize(a, dim=1)\n")
    converted, inserted = tmp_path / "c.onnx", tmp_path / "i.onnx"
    assert main(["convert", "torch", f"{net}:build", "-o", str(converted), "--input", "x:2x3x8x8",
                 "--exporter", "torchscript"]) == 0
    assert main(["insert", str(converted), "-o", str(inserted), "--at", "conv5",
                 "--func", f"{proc}:normalize", "--framework", "torch"]) == 0
    module = sm.torch_cnn(seed=4)
    module.conv5.register_forward_hook(
        lambda _m, _i, out: torch.nn.functional.normalize(out, dim=1))
    x = images((2, 3, 8, 8), seed=13)
    model = onnx.load(inserted)
    with torch.no_grad():
        assert_close(run(model, {"x": x})[model.graph.output[0].name], module(torch.from_numpy(x)).numpy())
    assert "conv5" in capsys.readouterr().out


def test_cli_convert_tf_frozen_pb_with_comma_shapes(tmp_path):
    from onnxsurgeon.converters import seed_models as sm

    from onnxsurgeon.cli import main

    sess = sm.tf1_seed_session(seed=0)
    try:
        gd = tf.compat.v1.graph_util.convert_variables_to_constants(
            sess, sess.graph.as_graph_def(), ["logits"])
        pb = tmp_path / "g.pb"
        pb.write_bytes(gd.SerializeToString())
        out = tmp_path / "g.onnx"
        assert main(["convert", "tf", str(pb), "-o", str(out), "--inputs", "input:0:3,8,8,3",
                     "--outputs", "logits:0"]) == 0
        model = onnx.load(out)
        assert [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim] == [3, 8, 8, 3]
        x = images((3, 8, 8, 3), seed=14)
        assert_close(run(model, {"input": x})["logits"], sess.run("logits:0", {"input:0": x}))
    finally:
        sess.close()


def test_framework_function_insert_lives_in_converters():
    """A framework function is spliced by converters.insert_function (issue 9: the core never
    imports converters, so surgery.insert takes no func=); the CLI dispatches to it."""
    from onnxsurgeon.surgery import insert

    model = builders.tiny_cnn()
    x = images((1, 3, 8, 8), seed=4)
    before = run(model, {"x": x}, extra=["act"])
    result = insert_function(model, "act", _torch_fn, "torch")
    want = _torch_fn(torch.from_numpy(before["act"])).numpy()
    assert_close(run(model, {"x": x})["side_out"], 1 / (1 + np.exp(-want)))
    assert result.processed in {o.name for o in model.graph.output}
    untouched = builders.tiny_cnn()
    with pytest.raises(UsageError, match="framework"):
        insert_function(untouched, "act", _torch_fn, "jax")
    with pytest.raises(TypeError, match="func"):
        insert(untouched, "act", func=_torch_fn, framework="torch")  # type: ignore[call-arg]
    assert untouched.SerializeToString() == builders.tiny_cnn().SerializeToString()


def test_cli_verify_against_torch_passes_and_catches_a_changed_weight(tmp_path):
    import subprocess
    import sys

    src = tmp_path / "net.py"
    src.write_text(textwrap.dedent("""
        import torch
        def build():
            torch.manual_seed(0)
            return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh())
    """))
    from onnxsurgeon.converters import cli_convert_torch

    out = tmp_path / "net.onnx"
    cli_convert_torch(f"{src}:build", out, inputs=["x:2,4"], exporter="torchscript")

    def verify(candidate):
        return subprocess.run(
            [sys.executable, "-m", "onnxsurgeon", "verify", "-", str(candidate),
             "--against-torch", f"{src}:build", "--json"], capture_output=True, text=True)

    ok = verify(out)
    assert ok.returncode == 0, ok.stderr
    model = onnx.load(str(out))
    init = model.graph.initializer[0]
    arr = onnx.numpy_helper.to_array(init) * 1.01
    init.CopyFrom(onnx.numpy_helper.from_array(arr.astype(np.float32), init.name))
    bad = tmp_path / "bad.onnx"
    onnx.save(model, str(bad))
    caught = verify(bad)
    assert caught.returncode == 1, caught.stdout + caught.stderr


def test_cli_verify_against_tf_keras_file(tmp_path):
    import subprocess
    import sys

    import keras
    from onnxsurgeon.converters import from_tf

    inp = keras.Input((6,), name="x")
    net = keras.Model(inp, keras.layers.Dense(3, activation="tanh", name="d")(inp))
    path = tmp_path / "net.keras"
    net.save(path)
    out = tmp_path / "net.onnx"
    from_tf(str(path), out)
    proc = subprocess.run(
        [sys.executable, "-m", "onnxsurgeon", "verify", "-", str(out), "--against-tf", str(path),
         "--json"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    import json
    assert json.loads(proc.stdout)["ok"] is True
