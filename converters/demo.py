"""Framework part of ``onnxsurgeon demo``: the seed scenarios from TensorFlow and PyTorch.

Each step prints framework -> ONNX -> rewrite -> onnxruntime check, where the check compares the
rewritten ONNX model with the framework computing the same thing itself. A framework that does
not import is said (which one, why, the extra that installs it) and its steps run on its
committed converted model instead (``models/tf1_seed.onnx``, ``models/torch_cnn.onnx``, bundled
in the wheel), checked against numpy. Nothing is printed except through ``out``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from .common import ATOL, RTOL, compare_outputs, run_onnx

Out = Callable[[str], None]


def _missing(*modules: str) -> str | None:
    """Why the framework made of ``modules`` cannot run here (the first one that does not
    import, and why), or None when all import."""
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 - a broken install is "cannot run" too
            text = " ".join(str(exc).split())[:200]
            return (f"{module} is not installed" if isinstance(exc, ImportError) and
                    getattr(exc, "name", None) == module else
                    f"importing {module} failed ({type(exc).__name__}: {text})")
    return None


class _Check:
    def __init__(self, out: Out) -> None:
        self.out = out
        self.failed = 0

    def step(self, title: str, lines: list[str], actual: np.ndarray, expected: np.ndarray,
             against: str) -> None:
        max_abs, excess = compare_outputs([actual], [expected], rtol=RTOL, atol=ATOL)
        ok = excess <= 0
        self.failed += 0 if ok else 1
        self.out(f"\n== {title}")
        for line in lines:
            self.out(f"   {line}")
        self.out(f"   onnxruntime check vs {against}: {'ok' if ok else 'FAILED'} "
                 f"(max |diff| {max_abs:.2e}, rtol {RTOL:g}, atol {ATOL:g})")


def _with_outputs(model: onnx.ModelProto, names: list[str]) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for n in names:
        m.graph.output.append(onnx.helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None))
    return m


PROC_PY = '''"""Processing functions of the onnxsurgeon demo (--func proc.py:NAME)."""


def l2(a):
    import tensorflow as tf

    return tf.nn.l2_normalize(a, axis=-1)


def normalize(a):
    import torch

    return torch.nn.functional.normalize(a, dim=1)
'''


def _proc(folder: Path) -> Path:
    """The demo's processing functions as a file: the printed --func commands name it."""
    path = folder / "proc.py"
    if not path.is_file():
        path.write_text(PROC_PY)
    return path


def _tf_steps(check: _Check, folder: Path) -> None:
    from onnxsurgeon.demo import command
    from onnxsurgeon.surgery.insert import insert

    from . import seed_models as sm
    from .common import load_factory
    from .functions import insert_function
    from .tf import from_tf

    proc = _proc(folder)
    l2 = load_factory(f"{proc}:l2")
    sess = sm.tf1_seed_session(seed=0)
    ref_sess = sm.tf1_seed_session(func=l2, seed=0)
    try:
        path = folder / "tf1_seed.onnx"
        report = from_tf(sess, path, inputs=[sm.TF1_INPUT], outputs=[sm.TF1_OUTPUT], opset=17)
        conv = (f"TF1 graph (tf.compat.v1 Session) -> {path.name}: {report.exporter}, "
                f"max |diff| vs TF {report.max_abs_diff:.2e}")
        x = np.random.default_rng(0).standard_normal((2, 8, 8, 3)).astype(np.float32)
        want = ref_sess.run(sm.TF1_OUTPUT, {sm.TF1_INPUT: x})
        for title, how, rewrite in (
            ("Seed 2 from TensorFlow: built-in l2_normalize at the TF tensor name",
             command("insert", path, "-o", folder / "tf_l2.onnx", "--at", sm.TF1_ACT, "--op",
                     "l2_normalize:axis=-1"),
             lambda m: insert(m, sm.TF1_ACT, op="l2_normalize", params={"axis": -1})),
            ("Seed 2 from TensorFlow: the function written in TF (tf.nn.l2_normalize)",
             command("insert", path, "-o", folder / "tf_func.onnx", "--at", sm.TF1_ACT,
                     "--func", f"{proc}:l2", "--framework", "tf"),
             lambda m: insert_function(m, sm.TF1_ACT, f"{proc}:l2", "tf")),
        ):
            model = onnx.load(path)
            result = rewrite(model)
            got = run_onnx(model, {"input": x})["logits"]
            check.step(title, [conv, f"$ {how}", f"processed tensor {result.processed}"], got, want,
                       "TF graph with tf.nn.l2_normalize inline")
    finally:
        sess.close()
        ref_sess.close()


def _torch_steps(check: _Check, folder: Path) -> None:
    import torch

    from onnxsurgeon.demo import command
    from onnxsurgeon.surgery.copy import Weights, copy
    from onnxsurgeon.surgery.insert import insert

    from . import seed_models as sm
    from .common import load_factory
    from .functions import insert_function
    from .torch import from_torch

    proc = _proc(folder)

    module = sm.torch_cnn(seed=0)
    x = torch.from_numpy(np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype(np.float32))
    path = folder / "torch_cnn.onnx"
    report = from_torch(module, (x,), path, exporter="torchscript", input_names=["x"],
                        output_names=["logits"])
    conv = (f"PyTorch CNN -> {path.name}: {report.exporter}, module conv5 -> "
            f"{report.name_map.get('conv5')}, max |diff| vs torch {report.max_abs_diff:.2e}")

    normalize = load_factory(f"{proc}:normalize")
    model = onnx.load(path)
    result = insert_function(model, "conv5", f"{proc}:normalize", "torch")
    handle = module.conv5.register_forward_hook(lambda _m, _i, out: normalize(out))
    try:
        with torch.no_grad():
            want = module(x).numpy()
    finally:
        handle.remove()
    check.step("Seed 2 from PyTorch: F.normalize at module conv5 (function written in torch)",
               [conv, "$ " + command("insert", path, "-o", folder / "torch_func.onnx", "--at",
                                     "conv5", "--func", f"{proc}:normalize", "--framework", "torch"),
                f"processed tensor {result.processed}"],
               run_onnx(model, {"x": x.numpy()})["logits"], want, "torch with a forward hook on conv5")

    model = onnx.load(path)
    twin = copy(model, ["logits"], weights=Weights.INDEPENDENT).outputs["logits"]
    outs = run_onnx(model, {"x": x.numpy()})
    with torch.no_grad():
        plain = module(x).numpy()
    check.step("Seed 1 from PyTorch: copy the logits closure (independent weights)",
               [conv, "$ " + command("copy", path, "-o", folder / "torch_twin.onnx", "--outputs",
                                     "logits"), f"copy output {twin}"],
               outs[twin], plain, "the PyTorch model")

    model = onnx.load(path)
    result = insert(model, "conv5", op="reduce_mean", params={"axes": [2, 3], "keepdims": 0},
                    as_output=True)
    seen: dict[str, Any] = {}
    handle = module.conv5.register_forward_hook(lambda _m, _i, out: seen.setdefault("a", out))
    with torch.no_grad():
        module(x)
    handle.remove()
    check.step("Feature extraction from PyTorch: mean of conv5 as a new output",
               ["$ " + command("insert", path, "-o", folder / "torch_mean.onnx", "--at", "conv5",
                               "--op", "reduce_mean:axes=2|3,keepdims=0", "--as-output")],
               run_onnx(model, {"x": x.numpy()})[result.processed],
               seen["a"].mean(dim=(2, 3)).numpy(), "torch's own mean of conv5")


COMMITTED = ("tf1_seed.onnx", "torch_cnn.onnx")
"""The committed converted models the framework-free steps run on (TensorFlow's, PyTorch's)."""


def _committed_steps(check: _Check, models_dir: Path, folder: Path | None = None,
                     files: tuple[str, ...] = COMMITTED) -> None:
    """Without frameworks: the committed converted models ``files``, checked against numpy
    (the printed commands write into ``folder``, default a new temporary folder). A model
    that is not in ``models_dir`` is a failed step, said as such."""
    import tempfile

    from onnxsurgeon.demo import command
    from onnxsurgeon.index import GraphIndex
    from onnxsurgeon.select import Selector
    from onnxsurgeon.surgery.insert import insert

    folder = folder or Path(tempfile.mkdtemp(prefix="onnxsurgeon-demo-"))
    for file, at, feed, axes in (("tf1_seed.onnx", "network/layer_conv5/Relu:0", "input", [1, 2]),
                                 ("torch_cnn.onnx", "conv5", "x", [2, 3])):
        if file not in files:
            continue
        src = models_dir / file
        if not src.is_file():
            check.failed += 1
            check.out(f"\n== Feature extraction on committed {file}: FAILED, {src} does not "
                      "exist (the bundled models are missing: reinstall onnxsurgeon)")
            continue
        model = onnx.load(src)
        act = Selector(GraphIndex(model)).resolve(at)
        shape = (2, 8, 8, 3) if feed == "input" else (2, 3, 8, 8)
        x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
        activation = run_onnx(_with_outputs(model, [act]), {feed: x})[act]
        result = insert(model, at, op="reduce_mean", params={"axes": axes, "keepdims": 0},
                        as_output=True)
        check.step(f"Feature extraction on committed {file}: mean of {at}",
                   [f"{at} resolves to {act} (name map in metadata_props)",
                    "$ " + command("insert", src, "-o", folder / f"mean_{file}", "--at", at, "--op",
                                   "reduce_mean:axes=" + "|".join(map(str, axes)) + ",keepdims=0",
                                   "--as-output")],
                   run_onnx(model, {feed: x})[result.processed],
                   activation.mean(axis=tuple(axes)), "numpy mean of the activation")


def run(out: Out, folder: Path, models_dir: Path) -> int:
    """Run the framework seed steps (or the committed-model steps); returns failed checks."""
    check = _Check(out)
    instead: list[str] = []
    for name, extra, modules, steps, file in (
            ("TensorFlow", "tf", ("tensorflow", "tf2onnx"), _tf_steps, COMMITTED[0]),
            ("PyTorch", "torch", ("torch",), _torch_steps, COMMITTED[1])):
        why = _missing(*modules)
        if why is None:
            steps(check, folder)
            continue
        out(f"\n(the {name} steps are skipped: {why}; pip install 'onnxsurgeon[{extra}]' runs "
            f"them. Instead: the committed {file}, checked against numpy)")
        instead.append(file)
    if instead:
        _committed_steps(check, models_dir, folder, files=tuple(instead))
    return check.failed
