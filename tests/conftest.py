"""Shared test helpers: onnxruntime runs with graph optimizations off (exact, op by op), written
without onnxsurgeon code so references do not share bugs with the code under test.

Test modules import them (``from tests.conftest import run, session``); one definition replaces
the session helpers every test file used to carry.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

ModelSource = onnx.ModelProto | str | os.PathLike[str]


def pytest_sessionstart(session: pytest.Session) -> None:
    """Byte-compile the code under test once, as ``pip install`` does for a user. An editable
    install has no ``.pyc`` files and, under ``PYTHONDONTWRITEBYTECODE``, the hundreds of
    ``python -m onnxsurgeon`` processes the tests start would each compile every module they
    import (~0.05 s a process). A read-only checkout just keeps compiling."""
    import compileall
    from importlib.util import find_spec

    for package in ("onnxsurgeon", "converters"):
        spec = find_spec(package)
        for folder in (spec.submodule_search_locations or []) if spec else []:
            compileall.compile_dir(folder, quiet=2)


@pytest.fixture()
def cnn(tmp_path: Path) -> Path:
    """``builders.tiny_cnn()`` saved as ``cnn.onnx`` in the test's folder (conv -> act ->
    {fc, pool}; graph output ``logits``)."""
    from tests import builders

    path = tmp_path / "cnn.onnx"
    path.write_bytes(builders.tiny_cnn().SerializeToString())
    return path


def session(model: ModelSource) -> ort.InferenceSession:
    """A CPU session of ``model`` (a proto, or a file path so external data resolves) with graph
    optimizations disabled and warnings silenced."""
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 3
    src = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    return ort.InferenceSession(src, opts, providers=["CPUExecutionProvider"])


def _exposed(model: onnx.ModelProto, extra: Sequence[str]) -> onnx.ModelProto:
    """A copy of ``model`` with the tensors ``extra`` as additional outputs (typed by shape
    inference where it can, untyped otherwise)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    for name in extra:
        if name not in have:
            m.graph.output.append(onnx.ValueInfoProto(name=name))
            have.add(name)
    try:
        inferred = onnx.shape_inference.infer_shapes(m)
    except Exception:  # noqa: BLE001 - untyped outputs run as well
        return m
    known = {vi.name: vi for vi in list(inferred.graph.value_info) + list(inferred.graph.input)}
    for o in m.graph.output:
        if not o.type.HasField("tensor_type") and o.name in known:
            o.CopyFrom(known[o.name])
    return m


def run(model: ModelSource, feeds: Mapping[str, np.ndarray], extra: Sequence[str] = (), *,
        only_model_inputs: bool = False) -> dict[str, np.ndarray]:
    """All graph outputs of ``model`` (plus the tensors ``extra``) on ``feeds``.

    A model given as a path keeps its external data: with ``extra`` a probe copy is written
    beside it (references stay valid) and removed once the session holds it.
    ``only_model_inputs`` drops feeds the model does not take.
    """
    probe: Path | None = None
    if extra and isinstance(model, onnx.ModelProto):
        model = _exposed(model, extra)
    elif extra:
        path = Path(model)
        proto = _exposed(onnx.load(str(path), load_external_data=False), extra)
        probe = path.with_name(path.stem + ".probe.onnx")
        onnx.save_model(proto, str(probe))
        model = probe
    try:
        sess = session(model)
    finally:
        if probe is not None:
            probe.unlink()
    names = [o.name for o in sess.get_outputs()]
    if only_model_inputs:
        wanted = {i.name for i in sess.get_inputs()}
        feeds = {k: v for k, v in feeds.items() if k in wanted}
    return dict(zip(names, sess.run(names, dict(feeds)), strict=True))


GPT2_DIMS = {"layers": 3, "embd": 32, "heads": 2, "vocab": 64, "batch": 1, "seq": 8}
"""The configuration of the ``gpt2`` fixture (its hand counts in tests/test_profile.py)."""


def gpt2_module():  # type: ignore[no-untyped-def]
    """A transformers GPT2Model of GPT2_DIMS (seed 0; non-zero biases: the dynamo exporter drops
    zero ones) wrapped to take ``input_ids`` alone (an explicit mask skips the packed-sequence
    check), in eval mode: what the ``gpt2`` fixture and the TorchScript export of
    tests/test_profile.py export."""
    import torch
    import transformers

    d = GPT2_DIMS
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=d["layers"], n_embd=d["embd"], n_head=d["heads"],
                                  vocab_size=d["vocab"], n_positions=16, use_cache=False,
                                  return_dict=False)
    inner = transformers.GPT2Model(cfg).eval()
    with torch.no_grad():
        for name, param in inner.named_parameters():
            if name.endswith("bias"):
                param.uniform_(-0.1, 0.1)

    class Wrap(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = inner

        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            return self.m(input_ids=input_ids, attention_mask=torch.ones_like(input_ids))[0]

    return Wrap().eval()


@pytest.fixture(scope="session")
def gpt2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """:func:`gpt2_module` exported by torch.onnx (dynamo) at input_ids [batch, seq]: built once
    per session (~25 s)."""
    import warnings

    import torch

    d = GPT2_DIMS
    module = gpt2_module()
    ids = torch.randint(0, d["vocab"], (d["batch"], d["seq"]),
                        generator=torch.Generator().manual_seed(0))
    path = tmp_path_factory.mktemp("gpt2") / "gpt2.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prog = torch.onnx.export(module, (ids,), dynamo=True, verbose=False)
    prog.save(str(path))
    return path


# ---- converted models of fold / dims (issue 30), built once per session
@pytest.fixture(scope="session")
def torch_shape_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A torch export (TorchScript exporter, its constant folding off) of a CNN at batch 1 whose
    ``reshape(y.shape[0], -1)`` is a Shape->Gather->Unsqueeze->Concat->Reshape chain and whose
    ``view(1, 4, 64)`` is a Reshape to a constant shape hard-coding the batch."""
    torch = pytest.importorskip("torch")

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
            self.fc = torch.nn.Linear(4 * 8 * 8, 5)

        def forward(self, x):  # type: ignore[no-untyped-def]
            y = torch.relu(self.conv(x))
            y = y.reshape(y.shape[0], -1)
            z = y.view(1, 4, 64).mean(1)
            return self.fc(y) + z.sum(-1, keepdim=True)

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("torch_shape") / "net.onnx"
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Net().eval(), (torch.randn(1, 3, 8, 8),), str(path), dynamo=False,
                          do_constant_folding=False, input_names=["x"], output_names=["y"],
                          opset_version=17)
    return path


@pytest.fixture(scope="session")
def keras_fixed_batch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Keras CNN with a hard-coded batch of 1 (``Input(batch_size=1)``: Flatten's Reshape
    reads the constant [1, 256]) converted by tf2onnx through ``converters.from_tf``."""
    keras = pytest.importorskip("keras")
    from onnxsurgeon.converters import from_tf

    keras.utils.set_random_seed(0)
    inp = keras.Input((8, 8, 3), batch_size=1, name="image")
    h = keras.layers.Conv2D(4, 3, padding="same", activation="relu")(inp)
    h = keras.layers.Flatten()(h)
    out = keras.layers.Dense(3)(h)
    path = tmp_path_factory.mktemp("keras_fixed") / "cnn.onnx"
    from_tf(keras.Model(inp, out), path, check=False)
    return path


@pytest.fixture(scope="session")
def keras_batch_two(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Keras model at a fixed batch of 2 (``Input(batch_size=2)``) converted by tf2onnx
    (``converters.from_tf``): ``tf.reshape(x, [6, 8])`` merges the batch with the tokens, a
    Dense, ``tf.reshape(., [2, 3, 8])`` splits it back, a tiled class row (folded by tf2onnx
    into a [2, 1, 8] constant) is concatenated on axis 1, and Flatten reads [2, 32]."""
    keras = pytest.importorskip("keras")
    tf = pytest.importorskip("tensorflow")
    from onnxsurgeon.converters import from_tf

    keras.utils.set_random_seed(0)
    cls = np.linspace(-1, 1, 8, dtype=np.float32).reshape(1, 1, 8)
    inp = keras.Input((3, 8), batch_size=2, name="x")
    h = keras.layers.Lambda(lambda t: tf.reshape(t, [6, 8]))(inp)
    h = keras.layers.Dense(8, activation="relu")(h)
    h = keras.layers.Lambda(lambda t: tf.reshape(t, [2, 3, 8]))(h)
    h = keras.layers.Lambda(
        lambda t: tf.concat([tf.tile(tf.constant(cls), [2, 1, 1]), t], axis=1))(h)
    path = tmp_path_factory.mktemp("keras_batch_two") / "model.onnx"
    from_tf(keras.Model(inp, keras.layers.Flatten()(h)), path, check=False)
    return path


@pytest.fixture(scope="session")
def torch_batch_two(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A torch export (TorchScript exporter, its constant folding off) at batch 2:
    ``x.reshape(6, 8)`` merges the batch, a Linear, ``.view(2, 3, 8)`` splits it, and a class
    token ``expand(2, -1, -1)`` is concatenated on axis 1."""
    torch = pytest.importorskip("torch")

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.cls = torch.nn.Parameter(torch.randn(1, 1, 8))
            self.fc = torch.nn.Linear(8, 8)

        def forward(self, x):  # type: ignore[no-untyped-def]
            h = self.fc(x.reshape(6, 8)).view(2, 3, 8)
            return torch.cat([self.cls.expand(2, -1, -1), h], 1)

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("torch_batch_two") / "net.onnx"
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Net().eval(), (torch.randn(2, 3, 8),), str(path), dynamo=False,
                          do_constant_folding=False, input_names=["x"], output_names=["y"],
                          opset_version=17)
    return path


@pytest.fixture(scope="session")
def keras_app(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """``get(app)``: a Keras application at 32x32 with random weights (seed 0) and BatchNorm
    statistics from one pass over random images, converted by tf2onnx at opset 17 (NHWC, softmax
    head); each converted once per session (ResNet50 serves verify's and precision's tests:
    ~15-30 s a conversion)."""
    keras = pytest.importorskip("keras")
    from onnxsurgeon.converters import from_tf

    made: dict[str, onnx.ModelProto] = {}

    def get(app: str) -> onnx.ModelProto:
        if app not in made:
            keras.utils.set_random_seed(0)
            net = getattr(keras.applications, app)(weights=None, input_shape=(32, 32, 3))
            images = np.random.default_rng(2).standard_normal((4, 32, 32, 3)).astype(np.float32)
            net(images, training=True)  # BatchNorm statistics
            path = tmp_path_factory.mktemp(app) / f"{app}.onnx"
            made[app] = onnx.load(from_tf(net, path, opset=17).path)
        return made[app]

    return get
