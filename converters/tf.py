"""TensorFlow -> ONNX with tf2onnx, keeping the names TensorFlow users know.

Every source is first reduced to a frozen GraphDef by :mod:`.tf_sources` (Keras, ``tf.function``,
SavedModel, ``.pb``, ``tf.compat.v1`` Graph or Session), so the ONNX model has only the model's
real inputs.

Names: tf2onnx keeps TF op names but lays convolutions out as NCHW, so an ONNX tensor called
``network/layer_conv5/Relu:0`` may hold the transposed value. After conversion every TF tensor is
evaluated and matched by value: a TF name then denotes the tensor with TensorFlow's value (NHWC) —
the ONNX tensor of that name is renamed when it differs, the matching tensor takes the TF name when
it has an internal one, and the name map (``metadata_props['onnxsurgeon.name_map']``) records the
rest, including Keras layer names (``conv5`` -> the layer's output tensor). Every entry holds the
TF value. A TF tensor whose value no ONNX tensor holds (``Conv2D:0`` when tf2onnx fused the bias
add into the ``Conv``) is in no name map; ``metadata_props['onnxsurgeon.fused_names']`` lists it
with the ONNX node that absorbed it and the TF tensor to use instead (``BiasAdd:0``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from onnxsurgeon.errors import UsageError

from .check import check_notes
from .common import (
    ATOL,
    RTOL,
    ConversionError,
    ConversionMismatchError,
    ConversionReport,
    align_names,
    check_or_raise,
    common_prefix_len,
    compare_outputs,
    example_array,
    finish,
    kept_mismatch,
    run_all_tensors,
    run_onnx,
)
from .tf_check import check_tf, held
from .tf_sources import Frozen, frozen_from_concrete, normalize, override_shapes, tensor_name

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

_SKIP_OPS = frozenset({"Const", "Placeholder", "NoOp", "VarHandleOp", "ReadVariableOp",
                       "VariableV2", "Assert", "PlaceholderWithDefault"})


def _examples(fr: Frozen, given: Mapping[str, np.ndarray] | None,
              batch: int = 1) -> list[np.ndarray]:
    """The example inputs: ``given`` where it names an input, else seeded data with unknown
    dims 8 (the first: ``batch``)."""
    arrays = []
    for i, (n, (shape, dtype)) in enumerate(zip(fr.inputs, fr.specs, strict=True)):
        friendly = fr.rename.get(n, n)
        if given and (n in given or friendly in given):
            arrays.append(np.asarray(given[n] if n in given else given[friendly]))
        else:
            dims = [d if d is not None else (batch if j == 0 else 8) for j, d in enumerate(shape)]
            arrays.append(example_array(dims, dtype.as_numpy_dtype, seed=i))
    return arrays


def _tf_values(gd: Any, inputs: Sequence[str], arrays: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
    """Every numeric op output of ``gd`` evaluated on ``arrays`` (graph order)."""
    graph = tf.Graph()
    with graph.as_default():
        tf.import_graph_def(gd, name="")
    fetch = [t for op in graph.get_operations() if op.type not in _SKIP_OPS for t in op.outputs
             if t.dtype.is_floating or t.dtype.is_integer]
    feed = dict(zip(inputs, arrays, strict=True))
    values: dict[str, np.ndarray] = {}
    with tf.compat.v1.Session(graph=graph) as sess:
        try:
            got = sess.run(fetch, feed)
            values = {t.name: np.asarray(v) for t, v in zip(fetch, got, strict=True)}
        except Exception:  # noqa: BLE001 - some tensors (loop frames) are not fetchable
            for t in fetch:
                try:
                    values[t.name] = np.asarray(sess.run(t, feed))
                except Exception:  # noqa: BLE001
                    continue
    return values


def _constant_ops(gd: Any) -> set[str]:
    """Names of ops whose value does not depend on any input (Const and ops on constants only)."""
    const: set[str] = set()
    changed = True
    while changed:
        changed = False
        for node in gd.node:
            if node.name in const:
                continue
            data = [i.split(":")[0] for i in node.input if not i.startswith("^")]
            if node.op == "Const" or (data and node.op not in ("Placeholder",)
                                      and all(d in const for d in data)):
                const.add(node.name)
                changed = True
    return const


def _constant_map(gd: Any, model: onnx.ModelProto, const: set[str]) -> dict[str, str]:
    """TF variable/constant name -> ONNX initializer holding exactly the same values."""
    from onnx import numpy_helper

    by_shape: dict[tuple[int, ...], list[onnx.TensorProto]] = {}
    for t in model.graph.initializer:
        by_shape.setdefault(tuple(t.dims), []).append(t)
    found: dict[str, str] = {}
    arrays: dict[str, np.ndarray] = {}
    for node in gd.node:
        if node.op != "Const" or node.name not in const:
            continue
        value = tf.make_ndarray(node.attr["value"].tensor)
        if value.size < 2:
            continue
        for t in by_shape.get(tuple(value.shape), ()):
            if t.name not in arrays:
                arrays[t.name] = numpy_helper.to_array(t)
            if t.name != node.name + ":0" and np.array_equal(arrays[t.name], value):
                found[node.name + ":0"] = t.name
                break
    return found


def _consumers(gd: Any) -> dict[str, list[str]]:
    """TF tensor name -> names of the first outputs of ops reading it."""
    cons: dict[str, list[str]] = {}
    for node in gd.node:
        for inp in node.input:
            if inp.startswith("^"):
                continue
            cons.setdefault(tensor_name(inp), []).append(node.name + ":0")
    return cons


def _tf2onnx(fr: Frozen, opset: int | None, optimize_layout: bool) -> onnx.ModelProto:
    import tf2onnx
    import tf2onnx.utils
    from tf2onnx import optimizer, tf_loader
    from tf2onnx.convert import _convert_common

    # tf2onnx numbers its generated names with a process-wide counter; restart it so the same
    # conversion gives the same names (and bytes) whatever ran before in this process
    tf2onnx.utils.INTERNAL_NAME = 1
    opts = dict(optimizer._get_optimizers())
    if not optimize_layout:
        opts.pop("optimize_transpose", None)
    with tf.device("/cpu:0"):
        with tf.Graph().as_default():
            gd = tf_loader.tf_optimize(fr.inputs, fr.outputs, fr.graph_def)
        try:
            model, _ = _convert_common(
                gd, name="onnxsurgeon", continue_on_error=False, opset=opset,
                input_names=fr.inputs, output_names=fr.outputs, optimizers=opts,
                tensors_to_rename=dict(fr.rename), shape_override=fr.shape_override or None,
            )
        except Exception as exc:  # noqa: BLE001 - tf2onnx raises anything
            raise ConversionError(
                f"tf2onnx {tf2onnx.__version__} could not convert the graph: "
                f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}; "
                "try another opset or simplify the unsupported op"
            ) from exc
    return model


def _keras_layer_map(model: Any, arrays: Sequence[np.ndarray], onnx_values: Mapping[str, np.ndarray],
                     order: Mapping[str, int]) -> dict[str, str]:
    """Keras layer name -> ONNX tensor holding the layer's output (by value)."""
    import keras

    from .common import ValueIndex

    layers = [layer for layer in model.layers if not isinstance(layer, keras.layers.InputLayer)]
    outs, names = [], []
    for layer in layers:
        try:
            out = layer.output
        except (AttributeError, ValueError):
            continue
        if isinstance(out, (list, tuple, dict)):
            continue
        outs.append(out)
        names.append(layer.name)
    if not outs:
        return {}
    try:
        probe = keras.Model(model.inputs, outs)
        got = probe(list(arrays), training=False)
    except Exception:  # noqa: BLE001 - subclassed models have no symbolic layer outputs
        return {}
    got = got if isinstance(got, (list, tuple)) else [got]
    vindex = ValueIndex(onnx_values)
    result: dict[str, str] = {}
    for name, value in zip(names, got, strict=True):
        value = np.asarray(value)
        if name in onnx_values and vindex.same(name, value):
            continue
        cands = vindex.matches(value)
        if not cands:
            continue
        scope = f"/{name}"

        def key(c: str, scope: str = scope) -> tuple[int, int]:
            return (0 if (scope + "/" in c or scope + "_" in c) else 1, -order.get(c, -1))

        result[name] = min(cands, key=key)
    return result


def _tf_name_map(fr: Frozen, model: onnx.ModelProto, feeds: Mapping[str, np.ndarray],
                 arrays: Sequence[np.ndarray]) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """Align TF names with TF values and build the name map and the fused names (see the module
    docstring). Mutates model (renames tensors). O(tensors) framework and onnxruntime
    evaluations."""
    const = _constant_ops(fr.graph_def)
    tf_vals = {k: v for k, v in _tf_values(fr.graph_def, fr.inputs, arrays).items()
               if k.rsplit(":", 1)[0] not in const}
    for n in fr.outputs:   # graph outputs were renamed by tf2onnx
        tf_vals.pop(n, None)
    onnx_vals = {**run_all_tensors(model, feeds), **feeds}
    order = {o: i for i, node in enumerate(model.graph.node) for o in node.output}

    def prefer(fw: str, cand: str) -> tuple[int, int]:
        return (-common_prefix_len(fw, cand), order.get(cand, 0))

    name_map = align_names(model, tf_vals, onnx_vals, prefer=prefer)
    for tf_name, onnx_name in fr.rename.items():
        if tf_name != onnx_name:
            name_map[tf_name] = onnx_name
    final_vals = {**run_all_tensors(model, feeds), **feeds}   # by the names after renaming
    fused = _fused_tf_names(fr, model, name_map, tf_vals, final_vals)
    for k, v in _constant_map(fr.graph_def, model, const).items():
        name_map.setdefault(k, v)
    if fr.keras_model is not None:
        order = {o: i for i, node in enumerate(model.graph.node) for o in node.output}
        for k, v in _keras_layer_map(fr.keras_model, arrays, final_vals, order).items():
            name_map.setdefault(k, v)
    return name_map, fused


def _fused_tf_names(fr: Frozen, model: onnx.ModelProto, name_map: Mapping[str, str],
                    tf_vals: Mapping[str, np.ndarray], onnx_vals: Mapping[str, np.ndarray],
                    ) -> dict[str, dict[str, str]]:
    """TF tensors whose value no ONNX tensor holds (tf2onnx fused ``Conv2D`` + ``BiasAdd`` into one
    ``Conv``, ``MatMul`` + ``BiasAdd`` into ``Gemm``) -> ``{"op", "node", "use"}``: the ONNX node
    that absorbed the op (named after a TF op downstream, or the producer of the tensor found) and
    what to use instead: the nearest tensor down the op's single-consumer chain whose TF value
    exists in the ONNX model, by its TF name when that name resolves to the same value, else by
    the ONNX name holding it (``"layout": "NCHW"`` when only transposed; a conv fused with its
    batch norm and fed straight to the next conv exists only so). Never a tensor further down
    when the nearer one's value exists, and no ``use`` when none within 8 ops exists. Tensors whose
    value cannot identify them (constants, size < 2) get no entry: absence cannot be proven.
    ``onnx_vals`` are keyed by the model's current names. O(tensors x 8)."""
    from .common import ValueIndex

    vindex = ValueIndex(onnx_vals)
    nodes = {node.name: node for node in model.graph.node}
    producer = {o: node for node in model.graph.node for o in node.output}
    onnx_tensors = set(producer) | {i.name for i in model.graph.input}
    cons = _consumers(fr.graph_def)
    outputs = set(fr.outputs)

    def resolved(n: str) -> str | None:
        return name_map.get(n) or (n if n in onnx_tensors else None)

    fused: dict[str, dict[str, str]] = {}
    for node in fr.graph_def.node:
        if node.op in _SKIP_OPS:
            continue
        t = node.name + ":0"
        if resolved(t) or t not in tf_vals or not vindex.absent(tf_vals[t]):
            continue
        into: onnx.NodeProto | None = None
        use = layout = ""
        nxt = t
        for step in range(9):
            if step:
                users = cons.get(nxt, [])
                if len(users) != 1:
                    break
                nxt = users[0]
                into = into or nodes.get(nxt.rsplit(":", 1)[0])
            target = resolved(nxt)
            value = tf_vals.get(nxt)
            if target and (nxt in outputs or (value is not None and vindex.same(target, value))):
                use = nxt
                into = into or producer.get(target)
                break
            found = held(vindex, value) if value is not None else None
            if found is not None:   # the value exists under another name or only transposed
                use, layout = found
                into = into or producer.get(use)
                break
        entry = {"use": use} if use else {}
        if layout:
            entry["layout"] = layout
        if into is not None:
            entry.update(op=into.op_type, node=into.name)
        fused[t] = entry
    return fused


def convert_frozen(fr: Frozen, path: str | os.PathLike[str], *, opset: int | None, check: bool,
                   rtol: float, atol: float, example_inputs: Mapping[str, np.ndarray] | None,
                   optimize_layout: bool, keep_mismatch: bool = False) -> ConversionReport:
    import tf2onnx

    model = _tf2onnx(fr, opset, optimize_layout)
    arrays = _examples(fr, example_inputs)
    feeds = {fr.rename.get(n, n): a for n, a in zip(fr.inputs, arrays, strict=True)}
    onnx_names = [i.name for i in model.graph.input]
    if sorted(onnx_names) != sorted(feeds):
        raise ConversionError(
            f"the ONNX model has inputs {onnx_names} but the TF source has {sorted(feeds)}; "
            "captured state was not frozen, report this model"
        )
    max_abs = excess = float("nan")
    verdict, why = None, None
    notes: list[str] = []
    if check:
        try:
            outcome = check_tf(fr, model, arrays, lambda f, b: _examples(f, None, b), rtol=rtol,
                               atol=atol, convert=lambda f: _tf2onnx(f, opset, optimize_layout))
        except ConversionMismatchError as err:
            if not keep_mismatch:
                raise
            max_abs, excess, verdict, kept = kept_mismatch(err, rtol=rtol, atol=atol)
            notes.append(kept)
        else:
            max_abs, excess, verdict = outcome.max_abs, outcome.excess, outcome.verdict
            why = outcome.why if verdict == "inconclusive" else None
            notes.extend(check_notes(outcome, path, "--against-tf SOURCE"))
    fused: dict[str, dict[str, str]] = {}
    try:
        name_map, fused = _tf_name_map(fr, model, feeds, arrays)
    except Exception as exc:  # noqa: BLE001 - the map is best effort; the model stays valid
        name_map = {k: v for k, v in fr.rename.items() if k != v}
        notes.append(f"name map limited to inputs/outputs: {type(exc).__name__}: {exc}"[:300])
    return finish(
        model, path, framework="tensorflow", framework_version=tf.__version__,
        exporter=f"tf2onnx {tf2onnx.__version__}", name_map=dict(sorted(name_map.items())),
        max_abs=max_abs, excess=excess, checked=check, rtol=rtol, atol=atol, notes=notes,
        fused=fused, verdict=verdict, why=why,
    )


def from_tf(
    source: Any,
    path: str | os.PathLike[str],
    *,
    inputs: Sequence[str] | None = None,
    outputs: Sequence[str] | None = None,
    opset: int | None = None,
    check: bool = True,
    rtol: float = RTOL,
    atol: float = ATOL,
    example_inputs: Mapping[str, np.ndarray] | None = None,
    optimize_layout: bool = False,
    keep_mismatch: bool = False,
) -> ConversionReport:
    """Convert a TensorFlow model to ONNX at ``path``, with a name map and a numeric check.

    Args:
        source: Keras 3 model or ``.keras`` file, ``tf.function`` / concrete function, SavedModel
            folder, frozen ``.pb`` GraphDef, ``tf.compat.v1.Graph`` or ``tf.compat.v1.Session``.
        path: the ``.onnx`` file to write.
        inputs: ``NAME[:SHAPE[:DTYPE]]`` per input; required (names) for GraphDefs, graphs and
            sessions and for a ``tf.function`` without signature; otherwise overrides shapes.
        outputs: output tensor names; required for GraphDefs, graphs and sessions.
        opset: ONNX opset (tf2onnx's default when None).
        check: run onnxruntime against TensorFlow on example inputs and raise
            :class:`ConversionMismatchError` when outputs differ beyond ``rtol``/``atol``.
        example_inputs: input name -> array for the check (seeded random data otherwise).
        optimize_layout: let tf2onnx's transpose optimizer remove layout transposes (a leaner
            graph, but TF names of activations kept only in NCHW layout are then missing from
            the name map).
        keep_mismatch: with ``check``, write the model even when it is beyond the tolerance;
            the check's numbers are recorded in ``metadata_props['onnxsurgeon.conversion_check']``
            (``"ok": false``) and in the report's ``notes``.

    Returns:
        A :class:`ConversionReport`.
    """
    fr = normalize(source, inputs, outputs)
    override_shapes(fr, inputs)
    return convert_frozen(fr, path, opset=opset, check=check, rtol=rtol, atol=atol,
                          example_inputs=example_inputs, optimize_layout=optimize_layout,
                          keep_mismatch=keep_mismatch)


def export_tf_function(func: Any, *, elem_type: int, shape: Sequence[int | str | None],
                       opset: int, check: bool = True) -> onnx.ModelProto:
    """A TF callable on one tensor as an ONNX model with input ``x`` and output ``y``.

    Symbolic dims of ``shape`` stay symbolic (same dim_param names in the block's input).
    """
    from onnx import helper

    np_dtype = helper.tensor_dtype_to_np_dtype(elem_type)
    spec = tf.TensorSpec([d if isinstance(d, int) and d >= 0 else None for d in shape],
                         tf.as_dtype(np_dtype), name="x")
    f = func if hasattr(func, "get_concrete_function") else tf.function(func, autograph=False)
    cf = f.get_concrete_function(spec)
    fr = frozen_from_concrete(cf, call=f, out_names=["y"])
    if len(fr.outputs) != 1:
        raise UsageError(f"the TF function returns {len(fr.outputs)} tensors; return exactly one")
    fr.rename[fr.inputs[0]] = "x"
    model = _tf2onnx(fr, opset, optimize_layout=True)
    _set_dim_params(model.graph.input[0], shape)
    if check:
        x = example_array(shape, np_dtype, seed=0, sym_size=3)
        want = fr.run_reference([x])
        got = run_onnx(model, {"x": x})["y"]
        max_abs, excess = compare_outputs([got], want, rtol=RTOL, atol=ATOL)
        check_or_raise("TF function -> ONNX block", max_abs, excess, rtol=RTOL, atol=ATOL)
    return model


def _set_dim_params(vi: onnx.ValueInfoProto, shape: Sequence[int | str | None]) -> None:
    dims = vi.type.tensor_type.shape.dim
    if len(dims) != len(shape):
        return
    for d, want in zip(dims, shape, strict=True):
        if isinstance(want, str):
            d.ClearField("dim_value")
            d.dim_param = want


__all__ = ["ConversionMismatchError", "export_tf_function", "from_tf"]
