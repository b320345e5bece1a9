"""Type and shape facts about tensors: the one home of "is this type known" for every verb,
verify and the converters.

A type is *complete* (:func:`is_complete`) when it gives an element type and a rank, or is a
non-tensor type: that is what a new graph input or output needs. :func:`known_value_info` is the
complete type known without inference; :class:`TypeOracle` adds onnx shape inference (on a
weight-free copy, so no weight bytes are copied or read) and onnxruntime's type inference, each
run once and only when a tensor's type is not already known.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import onnx
from onnx import TensorProto

from .index import GraphIndex
from .protos import weightless_copy


def infer_value_infos(
    model: onnx.ModelProto, *, data_prop: bool = False
) -> dict[str, onnx.ValueInfoProto]:
    """Name -> ValueInfo for every main-graph tensor onnx shape inference can type.

    ``data_prop``: propagate small constant values (``Shape`` -> ``Reshape`` targets), as the
    profile needs for concrete shapes. Never raises for models shape inference cannot handle
    (custom ops ...): returns what is known.
    """
    light = weightless_copy(model)
    try:
        inferred = onnx.shape_inference.infer_shapes(light, check_type=False, strict_mode=False,
                                                     data_prop=data_prop)
    except Exception:  # noqa: BLE001 - inference is best effort by design
        inferred = light
    infos: dict[str, onnx.ValueInfoProto] = {}
    g = inferred.graph
    for vi in list(g.value_info) + list(g.input) + list(g.output):
        if vi.type.WhichOneof("value") is not None:
            infos[vi.name] = vi
    return infos


def is_complete(vi: onnx.ValueInfoProto | None) -> bool:
    """True when ``vi`` gives an element type and a rank, or is a non-tensor type (enough to type
    a main-graph input or output for the checker). The one completeness rule."""
    if vi is None:
        return False
    kind = vi.type.WhichOneof("value")
    if kind is None:
        return False
    if kind != "tensor_type":
        return True
    tt = vi.type.tensor_type
    return tt.elem_type != 0 and tt.HasField("shape")


def initializer_value_info(index: GraphIndex, name: str) -> onnx.ValueInfoProto | None:
    """The type of dense initializer ``name`` (dtype and dims), or None when it is not one."""
    pos = index.initializers.get(name)
    if pos is None or pos < 0:
        return None
    t = index.graph.initializer[pos]
    return onnx.helper.make_tensor_value_info(name, t.data_type, list(t.dims))


def known_value_info(
    index: GraphIndex, name: str, value_info: dict[str, onnx.ValueInfoProto] | None = None
) -> onnx.ValueInfoProto | None:
    """The complete type of ``name`` known without inference: an initializer's, else the first
    complete declaration among the graph input, the graph output and the value_info entry.

    ``value_info`` gives the value_info entries the caller already collected (extract's hot
    path, which never builds ``index.value_info``); by default the index's are used.
    """
    vi = initializer_value_info(index, name)
    if vi is not None:
        return vi
    graph = index.graph
    pos = index.inputs.get(name)
    if pos is not None and is_complete(graph.input[pos]):
        return graph.input[pos]
    pos = index.outputs.get(name)
    if pos is not None and is_complete(graph.output[pos]):
        return graph.output[pos]
    declared = (value_info if value_info is not None else index.value_info).get(name)
    return declared if is_complete(declared) else None


def _has_type(vi: onnx.ValueInfoProto | None) -> bool:
    """A declaration that says at least the element type (its rank may be unknown)."""
    if vi is None or vi.type.WhichOneof("value") is None:
        return False
    return not vi.type.HasField("tensor_type") or vi.type.tensor_type.elem_type != 0


class TypeOracle:
    """Answers "what type is tensor X": the complete type known without inference first, then
    onnx shape inference (run once), then onnxruntime's type inference (run once, for tensors of
    contrib ops onnx cannot type); the best partial type (a declared element type without a
    rank) when none is complete."""

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

    def value_info(self, name: str) -> onnx.ValueInfoProto | None:
        """A ValueInfo named ``name`` with the best known type, or None when unknown."""
        vi = known_value_info(self.index, name)
        if vi is not None:
            return vi
        if self._quick is not None and self._inferred is None:
            if name not in self._quick_found:
                self._quick_found[name] = self._quick(name)
            vi = self._quick_found[name]
            if is_complete(vi):
                return vi
        declared = self.index.value_info.get(name)
        if self._inferred is None:
            self._inferred = infer_value_infos(self.index.model)
        inferred = self._inferred.get(name)
        if is_complete(inferred):
            return inferred
        best = declared if _has_type(declared) else inferred
        if name not in self.index.producer:
            return best
        if self._ort is None:  # contrib ops (com.microsoft ...): ask onnxruntime, once
            from .ortinfer import ort_value_infos

            model, known = self.index.model, self._inferred
            self._ort = ort_value_infos(model, [o for node in model.graph.node for o in node.output
                                                if o and not is_complete(known.get(o))])
        return self._ort.get(name, best)

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
    """``TensorProto.FLOAT`` -> ``"float"``; ``"unknown"`` for 0."""
    if elem_type == 0:
        return "unknown"
    try:
        return TensorProto.DataType.Name(elem_type).lower()
    except ValueError:
        return f"dtype#{elem_type}"
