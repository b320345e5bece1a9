"""TensorFlow sources reduced to one frozen form: a constant GraphDef, its real inputs and outputs,
and a way to run the original (the reference of the conversion check).

Sources: a Keras 3 model or ``.keras`` file (loaded with ``safe_mode=True``), a ``tf.function`` or
concrete function with an input signature, a SavedModel directory (its ``serving_default``
signature), a TF1 frozen GraphDef (``.pb``), a ``tf.compat.v1.Graph`` without variables, or a
``tf.compat.v1.Session`` (its variables are frozen). Every source is frozen to a constant GraphDef
first, so the ONNX model has only the model's real inputs (no captured variables).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from onnxsurgeon.errors import NotFoundError, UsageError

from .common import ConversionError, parse_shape_spec

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402


@dataclass
class Frozen:
    """A source reduced to a constant GraphDef plus a way to run the original."""

    graph_def: Any
    inputs: list[str]                      # TF tensor names, e.g. "image:0"
    outputs: list[str]
    specs: list[tuple[list[int | None], Any]]   # shape, tf dtype per input
    run_reference: Callable[[list[np.ndarray]], list[np.ndarray]]
    rename: dict[str, str] = field(default_factory=dict)   # TF input/output -> ONNX io name
    keras_model: Any = None
    shape_override: dict[str, list[int | None]] = field(default_factory=dict)


def tensor_name(name: str) -> str:
    """``op`` -> ``op:0``; a name with a port stays as it is."""
    return name if ":" in name else name + ":0"


def frozen_from_concrete(cf: Any, *, call: Callable[..., Any] | None = None,
                          out_names: Sequence[str] | None = None) -> Frozen:
    """A concrete function frozen (variables -> constants); ``call`` runs the original (defaults to
    ``cf``), ``out_names`` name its flat outputs (structured names otherwise)."""
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    frozen = convert_variables_to_constants_v2(cf)
    gd = frozen.graph.as_graph_def()
    ins = [t for t in frozen.inputs if t.dtype != tf.resource]
    outs = [t for t in frozen.outputs if t.dtype != tf.resource]
    struct = cf.structured_input_signature
    flat_specs = tf.nest.flatten(struct)
    if len(flat_specs) != len(ins):
        raise ConversionError(
            f"concrete function '{cf.name}' has {len(ins)} tensor inputs but a signature of "
            f"{len(flat_specs)}; give a function whose inputs are tensors"
        )
    target = call or cf

    def run(arrays: list[np.ndarray]) -> list[np.ndarray]:
        args, kwargs = tf.nest.pack_sequence_as(struct, [tf.constant(a) for a in arrays])
        result = target(*args, **kwargs)
        return [np.asarray(r) for r in tf.nest.flatten(result)]

    rename: dict[str, str] = {}
    for t, spec in zip(ins, flat_specs, strict=True):
        base = t.name.rsplit(":", 1)[0]
        if getattr(spec, "name", None):
            rename[t.name] = spec.name
        else:
            rename[t.name] = base
    flat_out_names = list(out_names) if out_names else _structured_output_names(cf)
    if flat_out_names and len(flat_out_names) == len(outs):
        for t, n in zip(outs, flat_out_names, strict=True):
            rename[t.name] = n
    return Frozen(
        graph_def=gd, inputs=[t.name for t in ins], outputs=[t.name for t in outs],
        specs=[(t.shape.as_list() if t.shape.rank is not None else [], t.dtype) for t in ins],
        run_reference=run, rename=rename,
    )


def _structured_output_names(cf: Any) -> list[str]:
    so = cf.structured_outputs
    if isinstance(so, Mapping):
        return [str(k) for k in sorted(so)]
    flat = tf.nest.flatten(so)
    if len(flat) == 1:
        return ["output"]
    return [f"output_{i}" for i in range(len(flat))]


def _keras_input_name(t: Any) -> str:
    """The InputLayer's name (``image``, ``input_layer``) rather than ``keras_tensor_N``."""
    history = getattr(t, "_keras_history", None)
    op = getattr(history, "operation", None) or (history[0] if history else None)
    name = getattr(op, "name", None)
    return str(name) if name else str(t.name)


def _from_keras(model: Any, inputs: Any = None) -> Frozen:
    import keras

    try:
        symbolic = list(model.inputs or [])
    except (AttributeError, ValueError):   # subclassed / unbuilt models
        symbolic = []
    if symbolic:
        specs = [tf.TensorSpec(t.shape, t.dtype, name=_keras_input_name(t)) for t in symbolic]
    elif inputs:
        specs = []
        for spec in inputs:
            name, dims, dtype = parse_tf_spec(spec)
            if dims is None:
                raise UsageError(f"input '{name}' needs a shape, e.g. {name.rsplit(':', 1)[0]}:1x8x8x3")
            specs.append(tf.TensorSpec([d if isinstance(d, int) and d >= 0 else None for d in dims],
                                       tf.as_dtype(dtype or "float32"), name=name.rsplit(":", 1)[0]))
    else:
        raise UsageError(
            f"Keras model '{model.name}' has no symbolic inputs; pass inputs=['x:1x8x8x3'] or "
            "build it with keras.Input"
        )
    single = len(specs) == 1

    def fn(*xs: Any) -> Any:
        return model(xs[0] if single else list(xs), training=False)

    func = tf.function(fn, input_signature=specs, autograph=False)
    cf = func.get_concrete_function()
    out_names = list(getattr(model, "output_names", None) or [])
    fr = frozen_from_concrete(cf, call=fn, out_names=out_names)
    fr.keras_model = model
    del keras
    return fr


def _graph_specs(graph: Any, names: Sequence[str]) -> list[tuple[list[int | None], Any]]:
    specs = []
    for n in names:
        try:
            t = graph.get_tensor_by_name(n)
        except (KeyError, ValueError):
            raise NotFoundError(f"input tensor '{n}' not found in the TF graph; check --inputs") from None
        specs.append((t.shape.as_list() if t.shape.rank is not None else [], t.dtype))
    return specs


def _from_graph_def(gd: Any, inputs: Sequence[str], outputs: Sequence[str],
                    session: Any = None) -> Frozen:
    graph = tf.Graph()
    with graph.as_default():
        tf.import_graph_def(gd, name="")
    for n in outputs:
        try:
            graph.get_tensor_by_name(n)
        except (KeyError, ValueError):
            raise NotFoundError(f"output tensor '{n}' not found in the TF graph; check --outputs") from None
    specs = _graph_specs(graph, inputs)

    def run(arrays: list[np.ndarray]) -> list[np.ndarray]:
        sess = session
        own = sess is None
        if own:
            sess = tf.compat.v1.Session(graph=graph)
        try:
            return list(sess.run(list(outputs), dict(zip(inputs, arrays, strict=True))))
        finally:
            if own:
                sess.close()

    rename = {n: n.rsplit(":", 1)[0] for n in list(inputs) + list(outputs)}
    return Frozen(graph_def=gd, inputs=list(inputs), outputs=list(outputs), specs=specs,
                   run_reference=run, rename=rename)


def parse_tf_spec(spec: str) -> tuple[str, list[int | str] | None, str | None]:
    """``NAME[:PORT][:SHAPE[:DTYPE]]`` -> (tensor name with port, dims, dtype).

    A bare integer right after the name is the TF output port (``input:0``); shapes have commas or
    brackets (``input:0:1,8,8,3``, ``input:[1,8,8,3]:float32``; a 1-D shape is written ``5,``).
    """
    name, sep, rest = spec.partition(":")
    head, sep2, tail = rest.partition(":")
    if sep and head.isdigit():
        name, rest = f"{name}:{head}", tail if sep2 else ""
    else:
        name = tensor_name(name)
    if not rest:
        return name, None, None
    _, dims, dtype = parse_shape_spec("n:" + rest.replace("[", "").replace("]", ""))
    return name, dims, dtype


def _io_names(items: Any, what: str) -> list[str]:
    if not items:
        raise UsageError(f"a TF1 graph needs named {what} tensors; pass {what}=['name:0', ...]")
    return [parse_tf_spec(i)[0] for i in items]


def normalize(source: Any, inputs: Any, outputs: Any) -> Frozen:
    """Any supported TF source (see the module docstring) as a :class:`Frozen`; ``inputs`` and
    ``outputs`` are ``NAME[:SHAPE[:DTYPE]]`` specs where the source needs them."""
    import keras

    if isinstance(source, (str, os.PathLike)):
        p = Path(source)
        if not p.exists():
            raise NotFoundError(f"TF source '{p}' does not exist; check the path")
        if p.is_file() and p.suffix == ".keras":
            return _from_keras(keras.saving.load_model(p, safe_mode=True), inputs)
        if p.is_dir() and (p / "saved_model.pb").exists():
            loaded = tf.saved_model.load(str(p))
            sigs = getattr(loaded, "signatures", {})
            if "serving_default" not in sigs:
                raise UsageError(f"SavedModel '{p}' has no 'serving_default' signature; re-save it with one")
            fr = frozen_from_concrete(sigs["serving_default"])
            fr.keras_model = None
            return fr
        if p.is_file() and p.suffix == ".pb":
            gd = tf.compat.v1.GraphDef()
            try:
                gd.ParseFromString(p.read_bytes())
            except Exception:  # noqa: BLE001 - protobuf raises several types
                raise UsageError(f"'{p}' is not a frozen TF GraphDef; give a .pb GraphDef") from None
            return _from_graph_def(gd, _io_names(inputs, "inputs"), _io_names(outputs, "outputs"))
        raise UsageError(
            f"'{p}' is neither a .keras file, a SavedModel folder nor a frozen .pb GraphDef"
        )
    if isinstance(source, keras.Model):
        return _from_keras(source, inputs)
    if isinstance(source, tf.compat.v1.Session):
        ins, outs = _io_names(inputs, "inputs"), _io_names(outputs, "outputs")
        _graph_specs(source.graph, ins)
        for n in outs:
            try:
                source.graph.get_tensor_by_name(n)
            except (KeyError, ValueError):
                raise NotFoundError(f"output tensor '{n}' not found in the TF graph; check --outputs") from None
        gd = tf.compat.v1.graph_util.convert_variables_to_constants(
            source, source.graph.as_graph_def(), sorted({o.rsplit(":", 1)[0] for o in outs}))
        return _from_graph_def(gd, ins, outs, session=source)
    if isinstance(source, tf.Graph):
        gd = source.as_graph_def()
        if any(n.op in ("VariableV2", "VarHandleOp", "Variable") for n in gd.node):
            raise UsageError(
                "the tf.compat.v1 graph holds variables; pass the Session that initialized them "
                "(its values get frozen) or a frozen GraphDef"
            )
        return _from_graph_def(gd, _io_names(inputs, "inputs"), _io_names(outputs, "outputs"))
    if hasattr(source, "get_concrete_function"):
        if getattr(source, "input_signature", None) is not None:
            cf = source.get_concrete_function()
        elif inputs:
            specs = []
            for spec in inputs:
                name, dims, dtype = parse_tf_spec(spec)
                name = name.rsplit(":", 1)[0]
                if dims is None:
                    raise UsageError(f"input '{name}' needs a shape, e.g. {name}:1x8x8x3")
                specs.append(tf.TensorSpec([d if isinstance(d, int) and d >= 0 else None for d in dims],
                                           tf.as_dtype(dtype or "float32"), name=name))
            cf = source.get_concrete_function(*specs)
        else:
            raise UsageError("the tf.function has no input_signature; pass inputs=['x:1x8x8x3', ...]")
        return frozen_from_concrete(cf, call=source)
    if hasattr(source, "structured_input_signature") and hasattr(source, "graph"):
        return frozen_from_concrete(source)
    raise UsageError(
        f"cannot convert a {type(source).__name__} from TensorFlow; give a Keras model, .keras file, "
        "tf.function, concrete function, SavedModel folder, .pb GraphDef, Graph or Session"
    )


def override_shapes(fr: Frozen, inputs: Any) -> None:
    """Apply the shapes given in ``inputs`` specs to ``fr``'s inputs. Mutates fr."""
    if not inputs:
        return
    by_name = {}
    for spec in inputs:
        name, dims, _ = parse_tf_spec(spec)
        if dims is not None:
            by_name[name] = dims
            by_name[name.rsplit(":", 1)[0]] = dims
    for i, n in enumerate(fr.inputs):
        dims = by_name.get(n, by_name.get(fr.rename.get(n, "")))
        if dims is not None:
            shape = [d if isinstance(d, int) and d >= 0 else None for d in dims]
            fr.specs[i] = (shape, fr.specs[i][1])
            fr.shape_override[n] = shape
