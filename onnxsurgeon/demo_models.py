"""The small models the demo runs on, written with onnx.helper (deterministic, seeded weights),
and where the bundled copies of the committed models live.

``models/make_models.py`` writes them to models/. The wheel ships models/ as package data
(``onnxsurgeon/models``) and examples/ (``onnxsurgeon/examples``), so the demo and the README's
commands work outside a checkout; :func:`bundled_dir` finds either layout.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


def seed_cnn() -> onnx.ModelProto:
    """The seed's network with TensorFlow-style names.

    input:0[1,8,8,3] -> network/layer_conv5 (Conv + Relu, NHWC via Transpose) -> flatten ->
    network/fc1 (MatMul + BiasAdd) -> logits; the activation also feeds a side branch
    (mean over space -> network/aux).
    """
    rng = np.random.default_rng(2024)

    def w(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)

    act = "network/layer_conv5/Relu:0"
    nodes = [
        helper.make_node("Transpose", ["input:0"], ["network/to_nchw:0"], name="network/to_nchw",
                         perm=[0, 3, 1, 2]),
        helper.make_node("Conv", ["network/to_nchw:0", "network/layer_conv5/kernel",
                                  "network/layer_conv5/bias"],
                         ["network/layer_conv5/Conv2D:0"], name="network/layer_conv5/Conv2D",
                         pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["network/layer_conv5/Conv2D:0"], [act],
                         name="network/layer_conv5/Relu"),
        helper.make_node("Flatten", [act], ["network/flatten/Reshape:0"],
                         name="network/flatten/Reshape", axis=1),
        helper.make_node("MatMul", ["network/flatten/Reshape:0", "network/fc1/kernel"],
                         ["network/fc1/MatMul:0"], name="network/fc1/MatMul"),
        helper.make_node("Add", ["network/fc1/MatMul:0", "network/fc1/bias"], ["logits:0"],
                         name="network/fc1/BiasAdd"),
        helper.make_node("GlobalAveragePool", [act], ["network/aux/pool:0"], name="network/aux/pool"),
        helper.make_node("Flatten", ["network/aux/pool:0"], ["network/aux/flat:0"],
                         name="network/aux/flat", axis=1),
        helper.make_node("Gemm", ["network/aux/flat:0", "network/aux/kernel", "network/aux/bias"],
                         ["aux:0"], name="network/aux/dense"),
    ]
    graph = helper.make_graph(
        nodes, "seed_network",
        [helper.make_tensor_value_info("input:0", TensorProto.FLOAT, ["batch", 8, 8, 3])],
        [helper.make_tensor_value_info("logits:0", TensorProto.FLOAT, ["batch", 10]),
         helper.make_tensor_value_info("aux:0", TensorProto.FLOAT, ["batch", 2])],
        [w("network/layer_conv5/kernel", 6, 3, 3, 3), w("network/layer_conv5/bias", 6),
         w("network/fc1/kernel", 6 * 8 * 8, 10), w("network/fc1/bias", 10),
         w("network/aux/kernel", 6, 2), w("network/aux/bias", 2)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="onnxsurgeon-demo", producer_version="1")
    model.ir_version = 8
    model.doc_string = "The network of the graph_editor question, as ONNX."
    onnx.checker.check_model(model, full_check=True)
    return model


DEMO_MODELS = {"seed_cnn.onnx": seed_cnn}


BUNDLED = ("models", "examples")
"""The folders of the repository the wheel carries (package data under ``onnxsurgeon/``)."""


def bundled_dir(kind: str = "models") -> Path:
    """The folder holding the bundled ``models`` (or ``examples``): ``onnxsurgeon/<kind>`` in an
    installed wheel, ``<kind>/`` beside the package in a checkout (an editable install). The
    wheel's folder when neither exists (the caller reports the missing file)."""
    if kind not in BUNDLED:
        raise ValueError(f"kind must be one of {BUNDLED}, got {kind!r}")
    here = Path(__file__).resolve().parent
    for folder in (here / kind, here.parent / kind):
        if folder.is_dir() and any(folder.iterdir()):
            return folder
    return here / kind


def bundled_files() -> dict[str, list[Path]]:
    """``{"models": [...], "examples": [...]}``: the bundled files (models, the scripts that
    regenerate them, example factories, functions, recipes and the tour notebook), sorted; caches left out."""
    return {kind: sorted(p for p in bundled_dir(kind).glob("*")
                         if p.is_file() and p.suffix in (".onnx", ".py", ".yaml", ".ipynb"))
            for kind in BUNDLED}
