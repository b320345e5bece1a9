"""Helpers for the insert and reroute tests: run in onnxruntime (optimizations off), expose a
tensor as an output, turn an activation into a graph input. Written without onnxsurgeon code so
the references do not share bugs with the verbs under test."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import onnx

from tests.conftest import run as run  # noqa: E402 - the shared onnxruntime helper


def typed(model: onnx.ModelProto, name: str) -> onnx.ValueInfoProto:
    """A ValueInfo for ``name`` from the model's declarations or onnx shape inference."""
    inferred = onnx.shape_inference.infer_shapes(model)
    g = inferred.graph
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        if vi.name == name:
            return vi
    for t in g.initializer:
        if t.name == name:
            return onnx.helper.make_tensor_value_info(name, t.data_type, list(t.dims))
    raise KeyError(name)


def expose(model: onnx.ModelProto, *names: str) -> onnx.ModelProto:
    """A copy of ``model`` with ``names`` added as graph outputs (when not outputs already)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    have = {o.name for o in out.graph.output}
    for name in names:
        if name not in have:
            out.graph.output.append(typed(model, name))
    return out


def as_input(model: onnx.ModelProto, name: str) -> onnx.ModelProto:
    """A copy of ``model`` where activation ``name`` is a graph input: its producer writes
    ``name + '__orig'`` instead, and every reader (nested bodies included) reads the input."""
    vi = typed(model, name)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    if any(i.name == name for i in out.graph.input):
        return out
    for node in out.graph.node:
        for k, o in enumerate(node.output):
            if o == name:
                node.output[k] = name + "__orig"
    out.graph.input.append(vi)
    return out


def feed_consumers(model: onnx.ModelProto, source: str, nodes: Iterable[str],
                   feed: str) -> onnx.ModelProto:
    """A copy where the main-graph nodes ``nodes`` read the new graph input ``feed`` (typed like
    ``source``) wherever they read ``source`` explicitly."""
    vi = typed(model, source)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    chosen = set(nodes)
    for node in out.graph.node:
        if node.name in chosen:
            for k, i in enumerate(node.input):
                if i == source:
                    node.input[k] = feed
    new = onnx.ValueInfoProto()
    new.CopyFrom(vi)
    new.name = feed
    out.graph.input.append(new)
    return out


def serialized(model: onnx.ModelProto) -> bytes:
    return model.SerializeToString(deterministic=True)


def clone(model: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    return out


def rand(shape: tuple[int, ...], seed: int, dtype: type = np.float32) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)
