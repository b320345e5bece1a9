"""Type and shape facts about tensors, from value_info or from onnx shape inference.

Shape inference runs on a weight-free copy of the model (large initializers are replaced by
external-data stubs, so no weight bytes are copied or read) and only when a tensor's type is not
already known.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import onnx
from onnx import TensorProto

from .index import GraphIndex

_STUB_MIN_BYTES = 4096


def _weightless_copy(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` whose large inline tensors carry no bytes (stubbed as external)."""
    light = onnx.ModelProto()
    _copy_without_weights(model, light)
    return light


def _copy_without_weights(model: onnx.ModelProto, light: onnx.ModelProto) -> None:
    graph = model.graph
    inits = list(graph.initializer)
    # temporarily detach raw bytes of big initializers to copy the rest cheaply
    held: list[tuple[TensorProto, bytes]] = []
    for t in inits:
        if t.HasField("raw_data") and len(t.raw_data) >= _STUB_MIN_BYTES:
            held.append((t, t.raw_data))
            t.ClearField("raw_data")
    try:
        light.CopyFrom(model)
    finally:
        for t, raw in held:
            t.raw_data = raw
    by_name = {t.name: t for t in light.graph.initializer}
    for t, _ in held:
        _stub(by_name[t.name])


def _stub(t: TensorProto) -> None:
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    del t.external_data[:]
    entry = t.external_data.add()
    entry.key, entry.value = "location", "__onnxsurgeon_stub__"


def infer_value_infos(model: onnx.ModelProto) -> dict[str, onnx.ValueInfoProto]:
    """Name -> ValueInfo for every main-graph tensor onnx shape inference can type.

    Never raises for models shape inference cannot handle (custom ops ...): returns what is known.
    """
    light = _weightless_copy(model)
    try:
        inferred = onnx.shape_inference.infer_shapes(light, check_type=False, strict_mode=False)
    except Exception:  # noqa: BLE001 - inference is best effort by design
        inferred = light
    infos: dict[str, onnx.ValueInfoProto] = {}
    g = inferred.graph
    for vi in list(g.value_info) + list(g.input) + list(g.output):
        if vi.type.WhichOneof("value") is not None:
            infos[vi.name] = vi
    return infos


def _typed(vi: onnx.ValueInfoProto | None) -> bool:
    """True when ``vi`` gives an element type and a rank (or is a non-tensor type)."""
    if vi is None or vi.type.WhichOneof("value") is None:
        return False
    if not vi.type.HasField("tensor_type"):
        return True
    return vi.type.tensor_type.elem_type != 0 and vi.type.tensor_type.HasField("shape")


class TypeOracle:
    """Answers "what type is tensor X" from the index first, shape inference second (run once),
    onnxruntime's type inference third (run once, for tensors of contrib ops onnx cannot type)."""

    def __init__(
        self, index: GraphIndex, *,
        quick: Callable[[str], onnx.ValueInfoProto | None] | None = None,
    ) -> None:
        """``quick``: a cheap pass asked before shape inference (e.g. forward propagation over
        the tensor's closure for simple ops); its answer is used only when it gives a dtype and
        a rank, otherwise inference runs as without it."""
        self.index = index
        self._quick = quick
        self._quick_found: dict[str, onnx.ValueInfoProto | None] = {}
        self._inferred: dict[str, onnx.ValueInfoProto] | None = None
        self._ort: dict[str, onnx.ValueInfoProto] | None = None

    def _known(self, name: str) -> onnx.ValueInfoProto | None:
        index = self.index
        pos = index.initializers.get(name)
        if pos is not None and pos >= 0:
            t = index.graph.initializer[pos]
            return onnx.helper.make_tensor_value_info(name, t.data_type, list(t.dims))
        vi = index.value_info.get(name)
        if vi is not None and vi.type.WhichOneof("value") is not None:
            tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
            if tt is None or tt.elem_type != 0:
                return vi
        return None

    def value_info(self, name: str) -> onnx.ValueInfoProto | None:
        """A ValueInfo named ``name`` with the best known type, or None when unknown."""
        vi = self._known(name)
        if vi is not None:
            return vi
        if self._quick is not None and self._inferred is None:
            if name not in self._quick_found:
                self._quick_found[name] = self._quick(name)
            vi = self._quick_found[name]
            if _typed(vi):
                return vi
        if self._inferred is None:
            self._inferred = infer_value_infos(self.index.model)
        vi = self._inferred.get(name)
        if _typed(vi) or name not in self.index.producer:
            return vi
        if self._ort is None:  # contrib ops (com.microsoft ...): ask onnxruntime, once
            from .ortinfer import ort_value_infos

            model, inferred = self.index.model, self._inferred
            self._ort = ort_value_infos(model, [o for node in model.graph.node for o in node.output
                                                if o and not _typed(inferred.get(o))])
        return self._ort.get(name, vi)

    def value_infos(self, names: Iterable[str]) -> dict[str, onnx.ValueInfoProto | None]:
        return {n: self.value_info(n) for n in names}

    def elem_type(self, name: str) -> int:
        vi = self.value_info(name)
        if vi is None or not vi.type.HasField("tensor_type"):
            return 0
        return int(vi.type.tensor_type.elem_type)

    def shape(self, name: str) -> list[int | str | None] | None:
        return shape_of(self.value_info(name))


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


def renamed_value_info(vi: onnx.ValueInfoProto | None, name: str) -> onnx.ValueInfoProto:
    """A copy of ``vi`` under ``name`` (an untyped ValueInfo when ``vi`` is None)."""
    out = onnx.ValueInfoProto()
    if vi is not None:
        out.CopyFrom(vi)
    out.name = name
    return out


def dtype_name(elem_type: int) -> str:
    if elem_type == 0:
        return "unknown"
    try:
        return TensorProto.DataType.Name(elem_type).lower()
    except ValueError:
        return f"dtype#{elem_type}"
