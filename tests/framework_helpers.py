"""Helpers for the framework tests (test_converters_*.py, test_seeds.py): onnxruntime runs with
graph optimizations disabled, and reading any tensor of a model by exposing it as an output."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import onnx

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

RTOL = 1e-3
ATOL = 1e-5


from tests.conftest import run as run  # noqa: E402 - the shared onnxruntime helper


def assert_close(actual: np.ndarray, expected: np.ndarray, rtol: float = RTOL,
                 atol: float = ATOL) -> None:
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)


def metadata(model: onnx.ModelProto) -> dict[str, str]:
    return {p.key: p.value for p in model.metadata_props}


def images(shape: Sequence[int], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(tuple(shape)).astype(np.float32)
