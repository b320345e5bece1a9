"""Helpers for the framework tests (test_converters_*.py, test_seeds.py): onnxruntime runs with
graph optimizations disabled, and reading any tensor of a model by exposing it as an output."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import numpy as np
import onnx
import onnxruntime as ort

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

RTOL = 1e-3
ATOL = 1e-5


def run(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray],
        extra: Sequence[str] = ()) -> dict[str, np.ndarray]:
    """All graph outputs (plus the tensors ``extra``) of ``model`` on ``feeds``."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    for name in extra:
        if name not in have:
            m.graph.output.append(onnx.ValueInfoProto(name=name))
            have.add(name)
    if extra:
        m = onnx.shape_inference.infer_shapes(m)
        known = {vi.name: vi for vi in list(m.graph.value_info) + list(m.graph.input)}
        for o in m.graph.output:
            if not o.type.HasField("tensor_type") and o.name in known:
                o.CopyFrom(known[o.name])
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, dict(feeds)), strict=True))


def assert_close(actual: np.ndarray, expected: np.ndarray, rtol: float = RTOL,
                 atol: float = ATOL) -> None:
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)


def metadata(model: onnx.ModelProto) -> dict[str, str]:
    return {p.key: p.value for p in model.metadata_props}


def images(shape: Sequence[int], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(tuple(shape)).astype(np.float32)
