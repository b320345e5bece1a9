"""Protobuf helpers shared by the surgery verbs: fast pruning of repeated fields, type facts for
new graph inputs and outputs, and a light shape inference over a subset of nodes.

Measured with upb on a 90k-node chain: deleting a run of elements with a slice costs ~3.5 us per
run whatever its length, rebuilding a repeated field (``del f[:]`` + ``extend``) ~0.8 us per kept
element. :func:`keep_only` picks the cheaper of the two.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Any

import onnx
from onnx import TensorProto

from ..index import GraphIndex

_STUB_MIN_BYTES = 4096
_RUN_COST = 4.0
"""Relative cost of one slice deletion versus re-adding one kept element (measured, upb)."""


def keep_only(field: Any, keep: Sequence[int]) -> None:
    """Keep the elements of repeated message ``field`` at the ascending positions ``keep``.

    Mutates ``field``. O(len(field)); deletes the dropped runs in place when they are few,
    rebuilds the field otherwise.
    """
    n = len(field)
    if len(keep) == n:
        return
    runs: list[tuple[int, int]] = []
    prev = -1
    for i in keep:
        if i > prev + 1:
            runs.append((prev + 1, i))
        prev = i
    if prev + 1 < n:
        runs.append((prev + 1, n))
    if len(runs) * _RUN_COST <= len(keep) + 64:
        for start, stop in reversed(runs):
            del field[start:stop]
        return
    kept = [field[i] for i in keep]
    del field[:]
    field.extend(kept)


def replace_all(field: Any, items: Iterable[Any]) -> None:
    """Replace the elements of repeated message ``field`` by copies of ``items``. Mutates."""
    copies = []
    for item in items:
        c = type(item)()
        c.CopyFrom(item)
        copies.append(c)
    del field[:]
    field.extend(copies)


def shape_of(vi: onnx.ValueInfoProto | None) -> list[int | str | None] | None:
    """Dims of a tensor ValueInfo (int, symbol or None each); None when the rank is unknown."""
    if vi is None or not vi.type.HasField("tensor_type"):
        return None
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return None
    return [
        int(d.dim_value) if d.HasField("dim_value") else (d.dim_param if d.HasField("dim_param") else None)
        for d in tt.shape.dim
    ]


def is_complete(vi: onnx.ValueInfoProto | None) -> bool:
    """True when ``vi`` can type a main-graph input or output for the checker (element type and
    rank known, or a non-tensor type)."""
    if vi is None:
        return False
    kind = vi.type.WhichOneof("value")
    if kind is None:
        return False
    if kind != "tensor_type":
        return True
    tt = vi.type.tensor_type
    return tt.elem_type != 0 and tt.HasField("shape")


def boundary_value_info(vi: onnx.ValueInfoProto, name: str) -> onnx.ValueInfoProto:
    """A copy of ``vi`` named ``name`` whose unknown dims get symbolic names (``name_d0``...)."""
    out = onnx.ValueInfoProto()
    out.CopyFrom(vi)
    out.name = name
    if out.type.HasField("tensor_type") and out.type.tensor_type.HasField("shape"):
        for k, d in enumerate(out.type.tensor_type.shape.dim):
            if not d.HasField("dim_value") and not d.HasField("dim_param"):
                d.dim_param = f"{name}_d{k}"
    return out


def known_value_info(index: GraphIndex, name: str) -> onnx.ValueInfoProto | None:
    """The type of ``name`` known without inference (initializer, graph input/output, value_info)."""
    pos = index.initializers.get(name)
    if pos is not None and pos >= 0:
        t = index.graph.initializer[pos]
        return onnx.helper.make_tensor_value_info(name, t.data_type, list(t.dims))
    vi = index.value_info.get(name)
    if vi is not None and is_complete(vi):
        return vi
    return None


def _light_initializer(t: TensorProto) -> TensorProto:
    """``t`` without its bytes when large (an external-data stub): enough for shape inference."""
    light = TensorProto()
    if t.HasField("raw_data") and len(t.raw_data) >= _STUB_MIN_BYTES:
        light.name = t.name
        light.data_type = t.data_type
        light.dims.extend(t.dims)
        light.data_location = TensorProto.EXTERNAL
        entry = light.external_data.add()
        entry.key, entry.value = "location", "__onnxsurgeon_stub__"
    else:
        light.CopyFrom(t)
    return light


def infer_subset(
    index: GraphIndex,
    nodes: Sequence[int],
    read: Collection[str],
    typed: dict[str, onnx.ValueInfoProto],
    wanted: Iterable[str],
) -> dict[str, onnx.ValueInfoProto]:
    """Infer the types of ``wanted`` tensors with onnx shape inference over only ``nodes``.

    ``read`` holds every tensor those nodes read or produce (captures included); ``typed`` gives
    the types of boundary tensors (graph inputs of the light model). Large
    initializers are stubbed, so no weight bytes are copied. Best effort: returns what inference
    could type. O(size of ``nodes``) plus onnx's own inference.
    """
    model = index.model
    graph = index.graph
    light = onnx.ModelProto()
    light.ir_version = model.ir_version
    light.opset_import.extend(model.opset_import)
    light.functions.extend(model.functions)
    g = light.graph
    g.name = graph.name
    node_field = graph.node
    g.node.extend(node_field[i] for i in nodes)
    for name, vi in typed.items():
        if name in read:
            g.input.append(boundary_value_info(vi, name))
    inputs_done = {vi.name for vi in g.input}
    for vi in graph.input:
        if vi.name in read and vi.name not in inputs_done:
            g.input.append(vi)
    for t in graph.initializer:
        if t.name in read and t.name not in typed:
            g.initializer.append(_light_initializer(t))
    g.value_info.extend(vi for vi in graph.value_info if vi.name in read)
    try:
        inferred = onnx.shape_inference.infer_shapes(light, check_type=False, strict_mode=False)
    except Exception:  # noqa: BLE001 - inference is best effort by design
        return {}
    want = set(wanted)
    found: dict[str, onnx.ValueInfoProto] = {}
    for vi in inferred.graph.value_info:
        if vi.name in want and vi.type.WhichOneof("value") is not None:
            found[vi.name] = vi
    return found
