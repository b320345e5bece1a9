"""Types of tensors onnx shape inference cannot tell, from onnxruntime's own type inference.

onnx knows no schema for contrib ops (``com.microsoft`` FusedMatMul, Attention,
SkipLayerNormalization ... in every ORT-optimized model), so nothing downstream of them gets a
type. onnxruntime does: a session over a weight-free copy of the graph (initializers become graph
inputs, so no weight bytes are read or copied) reports the type and shape of any tensor exposed
as an output. No node is ever run. Best effort: returns what onnxruntime could type.

This is a last resort behind value_info and onnx shape inference (see
:class:`onnxsurgeon.types.TypeOracle`); it costs one session creation per model.
"""

from __future__ import annotations

from collections.abc import Iterable

import onnx
from onnx import TensorProto, helper

from .protos import heavy

_ORT_TYPES = {"float": TensorProto.FLOAT}


def _elem_type(ort_type: str) -> int:
    """'tensor(float16)' -> TensorProto.FLOAT16; 0 when not a tensor type onnx knows."""
    if not ort_type.startswith("tensor(") or not ort_type.endswith(")"):
        return 0
    name = ort_type[len("tensor("):-1]
    if name in _ORT_TYPES:
        return _ORT_TYPES[name]
    try:
        return int(TensorProto.DataType.Value(name.upper()))
    except ValueError:
        return 0


def _skeleton(model: onnx.ModelProto, outputs: list[str]) -> onnx.ModelProto:
    """The graph of ``model`` with every heavy initializer (:func:`~onnxsurgeon.protos.heavy`)
    turned into a typed graph input and ``outputs`` as its (untyped) outputs. Weight bytes are not copied."""
    graph = model.graph
    light = onnx.ModelProto()
    light.ir_version = max(model.ir_version, 4)  # initializers need not be inputs from IR 4
    light.opset_import.extend(model.opset_import)
    light.functions.extend(model.functions)
    g = light.graph
    g.name = graph.name
    g.node.extend(graph.node)
    g.value_info.extend(graph.value_info)
    listed = {vi.name for vi in graph.input}
    g.input.extend(graph.input)
    for t in graph.initializer:
        if not heavy(t):
            g.initializer.append(t)  # shape constants: keep, so Reshape & co. infer full shapes
        elif t.name not in listed:
            g.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    for t in graph.sparse_initializer:
        if t.values.name not in listed:
            g.input.append(helper.make_tensor_value_info(t.values.name, t.values.data_type,
                                                         list(t.dims)))
    g.output.extend(onnx.ValueInfoProto(name=n) for n in outputs)
    return light


def ort_value_infos(model: onnx.ModelProto, names: Iterable[str]) -> dict[str, onnx.ValueInfoProto]:
    """Name -> ValueInfo (type and shape as onnxruntime infers them) for the main-graph node
    outputs among ``names``. Never raises: an empty dict when onnxruntime cannot load the graph."""
    produced = {o for node in model.graph.node for o in node.output if o}
    wanted = [n for n in dict.fromkeys(names) if n in produced]
    if not wanted:
        return {}
    try:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        opts.log_severity_level = 4
        sess = ort.InferenceSession(_skeleton(model, wanted).SerializeToString(), opts,
                                    providers=["CPUExecutionProvider"])
        outs = sess.get_outputs()
    except Exception:  # noqa: BLE001 - best effort by design
        return {}
    found: dict[str, onnx.ValueInfoProto] = {}
    for o in outs:
        elem = _elem_type(o.type)
        if not elem:
            continue
        # onnxruntime reports an unknown rank as [] (as for a scalar): only a non-empty shape is
        # information; a scalar stays untyped-rank rather than becoming a wrong rank-0 claim
        shape = None if not o.shape else [
            d if isinstance(d, int) and d >= 0 else (d if isinstance(d, str) and d else None)
            for d in o.shape
        ]
        found[o.name] = helper.make_tensor_value_info(o.name, elem, shape)
    return found


_KERNELS: dict[tuple[object, ...], str | None] = {}
"""(domain, op, opset, input types, output count, attributes) -> why onnxruntime's CPU provider
cannot run it (None: it can); one probe per key per process."""


def missing_kernel(node: onnx.NodeProto, input_types: list[int],
                   opsets: list[onnx.OperatorSetIdProto]) -> str | None:
    """Why onnxruntime's CPU provider has no kernel for ``node`` fed ``input_types`` (one ONNX
    elem type per input slot, 0 for an absent optional input), or None when it has one.

    A one-node model with typed, shapeless inputs is loaded (never run); only a "no
    implementation" refusal counts (any other error is not about the kernel). Cached per process
    by op, opset, input types and attributes. O(1) after the first probe of a key.
    """
    attrs = tuple(a.SerializeToString() for a in node.attribute)
    opset = tuple((o.domain, o.version) for o in opsets)
    key = (node.domain, node.op_type, opset, tuple(input_types), len(node.output), attrs)
    if key in _KERNELS:
        return _KERNELS[key]
    probe = helper.make_node(node.op_type, [f"i{k}" if t else "" for k, t in enumerate(input_types)],
                             [f"o{k}" for k in range(len(node.output))], domain=node.domain)
    probe.attribute.extend(node.attribute)
    graph = helper.make_graph(
        [probe], "probe",
        [helper.make_tensor_value_info(f"i{k}", t, None) for k, t in enumerate(input_types) if t],
        [onnx.ValueInfoProto(name=f"o{k}") for k in range(len(node.output))])
    model = helper.make_model(graph, opset_imports=list(opsets))
    model.ir_version = max(model.ir_version, 8)
    reason: str | None = None
    try:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        opts.log_severity_level = 4
        ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - only a missing kernel is an answer
        text = str(exc)
        if "NOT_IMPLEMENTED" in text or "Could not find an implementation" in text:
            reason = "onnxruntime's CPU provider has no kernel for it"
    _KERNELS[key] = reason
    return reason
