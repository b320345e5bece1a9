"""``set``'s follow-up on what a model declares: a new attribute (Conv strides, Cast ``to``,
Transpose ``perm``) or a reshaped weight can change the shapes and types the main graph's
value_info and outputs declare; those are inferred anew (or the change is refused, naming the
node onnx's inference says it breaks). A model whose declarations still hold is left as it is.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import onnx

from ..edit import Edit
from ..errors import UsageError
from ..protos import weightless_copy


def _infers(model: onnx.ModelProto) -> onnx.ModelProto | None:
    """The strict onnx inference of ``model``, or None when it fails."""
    try:
        return onnx.shape_inference.infer_shapes(model, strict_mode=True)
    except onnx.shape_inference.InferenceError:
        return None


def redeclared(model: onnx.ModelProto, attrs: Sequence[tuple[int, onnx.AttributeProto]],
               weights: Sequence[tuple[int, onnx.TensorProto]]
               ) -> tuple[list[onnx.ValueInfoProto], list[onnx.ValueInfoProto]] | None:
    """None when the main graph's declarations still hold once node ``i`` takes each attribute
    of ``attrs`` and initializer ``pos`` each tensor of ``weights`` (or when onnx's inference
    fails on the model as it is: nothing to compare with); else (outputs, value_info) inferred
    anew: each output as inference types it (its old declaration where it cannot), the
    value_info entries inference still types. O(model without weights) per inference (one when
    the declarations hold, three at most).

    Raises:
        UsageError: inference fails on the new values (it names the node).
    """
    if not attrs and not weights:
        return None
    light = weightless_copy(model)
    e = Edit.of(light)
    for i, attribute in attrs:
        e.set_attribute(i, attribute)
    for pos, tensor in weights:
        e.set_initializer(pos, tensor)
    if _infers(light) is not None or _infers(weightless_copy(model)) is None:
        return None
    e.set_value_info([])
    e.set_outputs([onnx.ValueInfoProto(name=vi.name) for vi in light.graph.output])  # untyped
    try:
        inferred = onnx.shape_inference.infer_shapes(light, strict_mode=True)
    except onnx.shape_inference.InferenceError as exc:
        text = " ".join(str(exc).split())
        first = re.search(r"\(op_type:([^,)]*)(?:, node name: ([^)]*))?\): \[(?:Shape|Type)"
                          r"InferenceError\] ([^(]*)", text)
        where, why = "a node", text[:200]
        if first:
            op, node, why = first.groups()
            where = f"node '{node}' ({op})" if node else f"a {op} node (unnamed)"
        raise UsageError(f"{where} does not accept the new values: {why.strip()}; give a value "
                         "it accepts") from None
    typed = {vi.name: vi for vi in [*inferred.graph.value_info, *inferred.graph.output]
             if vi.type.WhichOneof("value") is not None}
    outputs = [typed.get(vi.name, vi) for vi in model.graph.output]
    value_info = [typed[vi.name] for vi in model.graph.value_info if vi.name in typed]
    return outputs, value_info
