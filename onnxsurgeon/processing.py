"""Built-in processing blocks: small one-input, one-output ONNX models spliced in by ``insert``.

Every block reads ``x`` and writes ``y``; its constants are initializers of the block. Blocks are
built for the host model's default-domain opset (from the first opset where the block's ops
exist with the semantics it needs, ``BlockSpec.min_opset``, up to the newest opset the installed
onnx knows) and for the activation's element type, so they need no version conversion.
``identity`` also takes sequence- and optional-typed values (opset 14 / 16 on, where Identity
accepts them).

Blocks and parameters (``parse_op`` syntax ``name:key=value,key=value``, lists as ``1|2``):

- ``l2_normalize:axis=-1,epsilon=1e-12`` — TensorFlow semantics (``tf.nn.l2_normalize``):
  ``y = x / sqrt(max(sum(x * x, axis, keepdims), epsilon))``. For vectors whose norm is above
  ``sqrt(epsilon)`` (1e-6) this equals ``torch.nn.functional.normalize`` too, which clamps the norm
  instead of its square. ``epsilon`` is cast to the activation dtype; where it would underflow to 0
  (float16) the smallest normal number of that dtype is used instead, so zero vectors give zeros.
- ``global_avg_pool`` — GlobalAveragePool; the activation needs rank >= 3 ([N, C, spatial...]).
- ``reduce_mean:axes=1|2,keepdims=1`` — ReduceMean (axes default: all axes); axes is an attribute
  before opset 18 and an input from 18 on.
- ``softmax:axis=-1`` — Softmax along one axis. Before opset 13 ONNX Softmax flattens to 2-D, which
  is the per-axis softmax only for the last axis; other axes are built as
  ``exp(x - max) / sum(exp(x - max))``.
- ``scale:factor=F`` — ``y = x * F``.
- ``clip:min=A,max=B`` — Clip; either bound may be left out.
- ``identity`` — Identity.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .errors import RewriteError, UsageError
from .types import dtype_name

MIN_OPSET = 8
"""Oldest default-domain opset every block can be built for (Max with broadcasting needs 8);
blocks whose ops are older say so in ``BlockSpec.min_opset``."""
SEQUENCE_IDENTITY_OPSET = 14
"""Identity takes sequence types from this opset on."""
OPTIONAL_IDENTITY_OPSET = 16
"""Identity takes optional types from this opset on."""

ParamValue = str | int | float | Sequence[int]

_FLOAT_TYPES = frozenset({TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16,
                          TensorProto.BFLOAT16})
_NUMERIC_TYPES = _FLOAT_TYPES | frozenset({
    TensorProto.INT8, TensorProto.INT16, TensorProto.INT32, TensorProto.INT64, TensorProto.UINT8,
    TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64,
})


@dataclass(frozen=True)
class Param:
    """One block parameter: its kind ("int", "float", "ints"), default, and whether required."""

    kind: str
    default: Any = None
    required: bool = False


@dataclass(frozen=True)
class BlockSpec:
    """A built-in block: its parameters, the element types it accepts, a one-line summary, and
    the oldest opset its ops exist at with the semantics it needs."""

    summary: str
    params: dict[str, Param] = field(default_factory=dict)
    dtypes: frozenset[int] = _FLOAT_TYPES
    min_opset: int = MIN_OPSET


BUILTIN_BLOCKS: dict[str, BlockSpec] = {
    "l2_normalize": BlockSpec(
        "x / sqrt(max(sum(x^2, axis), epsilon)) (tf.nn.l2_normalize)",
        {"axis": Param("int", -1), "epsilon": Param("float", 1e-12)},
    ),
    "global_avg_pool": BlockSpec("GlobalAveragePool over the spatial axes (rank >= 3)",
                                 min_opset=1),
    "reduce_mean": BlockSpec(
        "ReduceMean over axes (default all)",
        {"axes": Param("ints", None), "keepdims": Param("int", 1)},
        _NUMERIC_TYPES, min_opset=1,
    ),
    # the per-axis form before opset 13 subtracts with broadcasting (Sub-7)
    "softmax": BlockSpec("Softmax along axis", {"axis": Param("int", -1)}, min_opset=7),
    "scale": BlockSpec("x * factor", {"factor": Param("float", required=True)}, _NUMERIC_TYPES,
                       min_opset=7),  # Mul broadcasts a scalar from 7 on
    "clip": BlockSpec("Clip to [min, max]", {"min": Param("float"), "max": Param("float")},
                      _NUMERIC_TYPES, min_opset=6),  # Clip-6: min/max attributes
    "identity": BlockSpec("Identity", {}, frozenset(), min_opset=1),
}
"""Name -> specification of every built-in processing block."""


# ----------------------------------------------------------------------------------- parsing
def blocks_help() -> str:
    """Every built-in block with its parameters (kind, default), for ``--op`` in ``--help``."""
    kinds = {"int": "N", "float": "F", "ints": "N|N..."}
    parts = []
    for name, spec in BUILTIN_BLOCKS.items():
        params = []
        for key, p in spec.params.items():
            default = "required" if p.required else (
                "default all" if p.default is None and p.kind == "ints" else
                "optional" if p.default is None else f"default {p.default:g}")
            params.append(f"{key}={kinds[p.kind]} ({default})")
        parts.append(name + (":" + ",".join(params) if params else ""))
    return "; ".join(parts)


def _valid_blocks() -> str:
    return ", ".join(sorted(BUILTIN_BLOCKS))


def _spec(name: str) -> BlockSpec:
    spec = BUILTIN_BLOCKS.get(name)
    if spec is None:
        raise UsageError(f"unknown processing block '{name}'; valid blocks: {_valid_blocks()}")
    return spec


def _coerce(block: str, key: str, param: Param, value: ParamValue) -> Any:
    """``value`` (a CLI string or a Python value) as the parameter's kind."""
    what = f"parameter '{key}' of block '{block}'"
    try:
        if param.kind == "ints":
            if isinstance(value, str):
                parts = [p for p in value.replace(",", "|").split("|") if p.strip()]
                return [int(p) for p in parts]
            if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
                return [int(value)]
            if isinstance(value, (bool, float)):
                raise ValueError
            out = []
            for v in value:
                if isinstance(v, bool) or int(v) != v:
                    raise ValueError
                out.append(int(v))
            return out
        if isinstance(value, bool) or not isinstance(value, (str, int, float, np.number)):
            raise ValueError
        if param.kind == "int":
            number = float(value)
            if number != int(number):
                raise ValueError
            return int(number)
        number = float(value)
        if not np.isfinite(number):
            raise ValueError
        return number
    except (TypeError, ValueError):
        kind = {"int": "an integer", "float": "a finite number",
                "ints": "integers separated by '|' (e.g. 1|2)"}[param.kind]
        raise UsageError(f"{what} must be {kind}, got {value!r}") from None


def normalize_params(name: str, params: Mapping[str, ParamValue] | None) -> dict[str, Any]:
    """Check ``params`` against block ``name`` and convert each value to its kind.

    Defaults are not filled in: the result holds exactly the parameters given.

    Raises:
        UsageError: unknown block, unknown parameter, missing required parameter, bad value.
    """
    spec = _spec(name)
    given = dict(params or {})
    out: dict[str, Any] = {}
    for key in sorted(given):
        param = spec.params.get(key)
        if param is None:
            valid = ", ".join(sorted(spec.params)) or "none"
            raise UsageError(
                f"block '{name}' has no parameter '{key}'; its parameters: {valid}"
            )
        out[key] = _coerce(name, key, param, given[key])
    for key, param in spec.params.items():
        if param.required and key not in out:
            raise UsageError(f"block '{name}' needs parameter '{key}' (e.g. {name}:{key}=0.5)")
    if name == "reduce_mean" and "keepdims" in out and out["keepdims"] not in (0, 1):
        raise UsageError(f"parameter 'keepdims' of block 'reduce_mean' must be 0 or 1, got {out['keepdims']}")
    if name == "l2_normalize" and "epsilon" in out and out["epsilon"] <= 0:
        raise UsageError("parameter 'epsilon' of block 'l2_normalize' must be > 0")
    if name == "clip" and "min" in out and "max" in out and out["min"] > out["max"]:
        raise UsageError(
            f"block 'clip' has min={out['min']} > max={out['max']}; swap them"
        )
    return out


def _parse_hint(name: str, text: str) -> str:
    """How to write ``text`` right: list values take '|' (axes=2|3), parameters ','."""
    lists = [k for k, p in BUILTIN_BLOCKS[name].params.items() if p.kind == "ints"]
    if lists:
        fixed = text.replace("[", "").replace("]", "")
        head, _, rest = fixed.partition(":")
        items: list[str] = []
        for item in rest.split(","):
            if items and "=" not in item and item.strip().lstrip("-").isdigit():
                items[-1] += "|" + item.strip()
            else:
                items.append(item.strip())
        return (f"list values are separated by '|' and parameters by ',': write "
                f"{head}:{','.join(items)}")
    keys = ",".join(f"{k}=..." for k in BUILTIN_BLOCKS[name].params) or "key=value"
    return f"write {name}:{keys}"


def parse_op(text: str) -> tuple[str, dict[str, Any]]:
    """Parse ``"name[:key=value[,key=value...]]"``; list values are written ``1|2``.

    >>> parse_op("reduce_mean:axes=1|2,keepdims=0")
    ('reduce_mean', {'axes': [1, 2], 'keepdims': 0})

    Raises:
        UsageError: unknown block or parameter, malformed text, bad value.
    """
    name, _, rest = text.strip().partition(":")
    name = name.strip()
    _spec(name)
    raw: dict[str, str] = {}
    for item in rest.split(",") if rest.strip() else []:
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not key or not value.strip():
            raise UsageError(f"cannot parse '{item}' in '{text}'; {_parse_hint(name, text)}")
        if key in raw:
            raise UsageError(f"parameter '{key}' is given twice in '{text}'; give it once")
        raw[key] = value.strip()
    return name, normalize_params(name, raw)


# ----------------------------------------------------------------------------------- building
class _Builder:
    """Accumulates the nodes and constants of one block."""

    def __init__(self, block: str, elem_type: int, opset: int) -> None:
        self.block = block
        self.elem_type = elem_type
        self.opset = opset
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[TensorProto] = []

    def const(self, name: str, value: Any, elem_type: int | None = None) -> str:
        et = self.elem_type if elem_type is None else elem_type
        dtype = helper.tensor_dtype_to_np_dtype(et)
        if et == TensorProto.BFLOAT16:
            tensor = helper.make_tensor(name, et, np.shape(value), np.ravel(np.asarray(value, np.float32)))
        else:
            tensor = numpy_helper.from_array(np.asarray(value, dtype=dtype), name)
        self.inits.append(tensor)
        return name

    def node(self, op: str, inputs: list[str], output: str, **attrs: Any) -> str:
        self.nodes.append(helper.make_node(op, inputs, [output], name=op, **attrs))
        return output

    def reduce(self, op: str, x: str, out: str, axes: list[int] | None, keepdims: int,
               *, axes_input_since: int = 18) -> str:
        """A Reduce* node with axes as an attribute or (from ``axes_input_since``) an input."""
        if axes is None:
            return self.node(op, [x], out, keepdims=keepdims)
        if self.opset >= axes_input_since:
            ax = self.const(f"{op}_axes", np.asarray(axes, np.int64), TensorProto.INT64)
            return self.node(op, [x, ax], out, keepdims=keepdims)
        return self.node(op, [x], out, axes=list(axes), keepdims=keepdims)


def _check_axis(block: str, key: str, axis: int, rank: int | None) -> None:
    if rank is not None and not -rank <= axis < rank:
        raise RewriteError(
            f"block '{block}' {key}={axis} is out of range for a rank-{rank} activation; "
            f"use an axis in [{-rank}, {rank - 1}]"
        )


def _eps(value: float, elem_type: int) -> float:
    if elem_type in (TensorProto.FLOAT16,):
        info = np.finfo(np.float16)
        if np.float16(value) == 0:
            return float(info.tiny)
    return value


def _l2(b: _Builder, p: dict[str, Any], rank: int | None) -> None:
    axis = p.get("axis", -1)
    _check_axis("l2_normalize", "axis", axis, rank)
    eps = b.const("epsilon", _eps(p.get("epsilon", 1e-12), b.elem_type))
    ss = b.reduce("ReduceSumSquare", "x", "sum_sq", [axis], 1)
    clamped = b.node("Max", [ss, eps], "sum_sq_clamped")
    norm = b.node("Sqrt", [clamped], "norm")
    b.node("Div", ["x", norm], "y")


def _gap(b: _Builder, p: dict[str, Any], rank: int | None) -> None:
    if rank is not None and rank < 3:
        raise RewriteError(
            f"block 'global_avg_pool' needs an activation of rank >= 3 ([N, C, spatial...]), "
            f"this one has rank {rank}; use reduce_mean:axes=... instead"
        )
    b.node("GlobalAveragePool", ["x"], "y")


def _reduce_mean(b: _Builder, p: dict[str, Any], rank: int | None) -> None:
    axes = p.get("axes")
    if axes is not None:
        for a in axes:
            _check_axis("reduce_mean", "axes", a, rank)
        if rank is not None and len({a % rank for a in axes}) != len(axes):
            raise RewriteError(f"block 'reduce_mean' axes {axes} repeat an axis; list each axis once")
        if not axes:
            axes = None
    b.reduce("ReduceMean", "x", "y", axes, p.get("keepdims", 1))


def _softmax(b: _Builder, p: dict[str, Any], rank: int | None) -> None:
    axis = p.get("axis", -1)
    _check_axis("softmax", "axis", axis, rank)
    last = axis == -1 or (rank is not None and axis == rank - 1)
    if b.opset >= 13 or last:
        b.node("Softmax", ["x"], "y", axis=axis)
        return
    # opset < 13 Softmax flattens to 2-D at `axis`: build the per-axis form explicitly.
    m = b.reduce("ReduceMax", "x", "max", [axis], 1)
    shifted = b.node("Sub", ["x", m], "shifted")
    e = b.node("Exp", [shifted], "exp")
    s = b.reduce("ReduceSum", e, "sum", [axis], 1, axes_input_since=13)
    b.node("Div", [e, s], "y")


def _scale(b: _Builder, p: dict[str, Any], rank: int | None) -> None:
    factor = p["factor"]
    if b.elem_type not in _FLOAT_TYPES and factor != int(factor):
        raise RewriteError(
            f"block 'scale' factor={factor} is not an integer but the activation is "
            f"{dtype_name(b.elem_type)}; give an integer factor"
        )
    b.node("Mul", ["x", b.const("factor", factor)], "y")


def _clip(b: _Builder, p: dict[str, Any], rank: int | None) -> None:
    lo, hi = p.get("min"), p.get("max")
    ints = b.elem_type not in _FLOAT_TYPES
    for key, v in (("min", lo), ("max", hi)):
        if ints and v is not None and v != int(v):
            raise RewriteError(
                f"block 'clip' {key}={v} is not an integer but the activation is "
                f"{dtype_name(b.elem_type)}; give integer bounds"
            )
    if b.opset < 11:
        if ints:
            raise RewriteError(
                f"block 'clip' on {dtype_name(b.elem_type)} needs opset >= 12; the model has "
                f"opset {b.opset}"
            )
        attrs = {k: float(v) for k, v in (("min", lo), ("max", hi)) if v is not None}
        b.node("Clip", ["x"], "y", **attrs)
        return
    if ints and b.opset < 12:
        raise RewriteError(
            f"block 'clip' on {dtype_name(b.elem_type)} needs opset >= 12 (Clip-11 takes floats "
            f"only); the model has opset {b.opset}; use a float activation or raise the opset"
        )
    inputs = ["x", b.const("min", lo) if lo is not None else "",
              b.const("max", hi) if hi is not None else ""]
    while inputs[-1] == "":
        inputs.pop()
    b.node("Clip", inputs, "y")


def _identity(b: _Builder, p: dict[str, Any], rank: int | None) -> None:
    b.node("Identity", ["x"], "y")


_BUILDERS: dict[str, Callable[[_Builder, dict[str, Any], int | None], None]] = {
    "l2_normalize": _l2, "global_avg_pool": _gap, "reduce_mean": _reduce_mean,
    "softmax": _softmax, "scale": _scale, "clip": _clip, "identity": _identity,
}


def min_opset_for(name: str, value_type: onnx.TypeProto | None = None) -> int:
    """The oldest default-domain opset block ``name`` can be built for, for a value of type
    ``value_type`` (sequences and optionals need a newer Identity)."""
    kind = value_type.WhichOneof("value") if value_type is not None else None
    need = _spec(name).min_opset
    if kind == "sequence_type":
        need = max(need, SEQUENCE_IDENTITY_OPSET)
    elif kind == "optional_type":
        need = max(need, OPTIONAL_IDENTITY_OPSET)
    return need


def opset_for_import(model: onnx.ModelProto, name: str) -> int:
    """The default-domain opset to import into a model that imports none (it imports only
    ``ai.onnx.ml`` or custom domains, so no node of it changes): the oldest ai.onnx opset released
    with the model's ai.onnx.ml version (onnx's version table), at least block ``name``'s
    minimum; 17 when the model names no ai.onnx.ml version this onnx knows."""
    ml = next((int(o.version) for o in model.opset_import if o.domain == "ai.onnx.ml"), None)
    paired = [row[2] for row in helper.VERSION_TABLE if ml is not None and row[3] == ml]
    base = min(paired) if paired else 17
    return max(base, _spec(name).min_opset)


def _ir_version(opsets: list[onnx.OperatorSetIdProto]) -> int:
    """The IR version for a block: the opsets' minimum, and at least 4 (initializers need not be
    inputs). Opsets no onnx release shipped (2..4) get the IR of the release before them."""
    try:
        ir = helper.find_min_ir_version_for(opsets)
    except ValueError:
        ir = 3
    return max(ir, 4)


def _non_tensor_block(name: str, value_type: onnx.TypeProto, kind: str,
                      opset: int) -> onnx.ModelProto:
    """``identity`` on a sequence- or optional-typed value (the only block that takes them)."""
    shown = {"sequence_type": "a sequence", "optional_type": "an optional",
             "map_type": "a map", "sparse_tensor_type": "a sparse tensor"}.get(kind, kind)
    if name != "identity":
        raise RewriteError(
            f"block '{name}' takes tensors but the activation is {shown}; use identity or a "
            "--graph block whose input has that type"
        )
    need = {"sequence_type": SEQUENCE_IDENTITY_OPSET,
            "optional_type": OPTIONAL_IDENTITY_OPSET}.get(kind)
    if need is None:
        raise RewriteError(f"block 'identity' cannot take {shown}; use a --graph block")
    if opset < need:
        raise RewriteError(
            f"block 'identity' on {shown} needs opset >= {need} (Identity takes {shown} from "
            f"there on); the model has opset {opset}"
        )
    x = helper.make_value_info("x", value_type)
    y = helper.make_value_info("y", value_type)
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"], name="Identity")],
                              name, [x], [y])
    opsets = [helper.make_opsetid("", opset)]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="onnxsurgeon")
    model.ir_version = _ir_version(opsets)
    return model


def make_block(
    name: str,
    params: Mapping[str, ParamValue] | None = None,
    *,
    elem_type: int,
    opset: int,
    shape: Sequence[int | str | None] | None = None,
    value_type: onnx.TypeProto | None = None,
) -> onnx.ModelProto:
    """Build built-in block ``name`` as a standalone model ``x -> y``: :func:`make_typed_block`
    without the inferred output."""
    return make_typed_block(name, params, elem_type=elem_type, opset=opset, shape=shape,
                            value_type=value_type)[0]


def make_typed_block(
    name: str,
    params: Mapping[str, ParamValue] | None = None,
    *,
    elem_type: int,
    opset: int,
    shape: Sequence[int | str | None] | None = None,
    value_type: onnx.TypeProto | None = None,
) -> tuple[onnx.ModelProto, onnx.ValueInfoProto | None]:
    """Build built-in block ``name`` as a standalone model ``x -> y``, with the output ``y`` as
    strict shape inference types it for the declared input (None when nothing was inferred:
    no ``shape``, a non-tensor activation, or an output of unknown rank). A caller that needs
    the block's output type for this very input uses it instead of inferring again.

    Args:
        name: a key of :data:`BUILTIN_BLOCKS`.
        params: block parameters (Python values or the strings of ``parse_op``).
        elem_type: the activation's ``TensorProto`` element type (input and output dtype).
        opset: the default-domain opset to build for (the host model's).
        shape: the activation's shape when known (ints, symbolic names, None for unknown dims);
            axes are checked against its rank and it becomes the input's declared shape.
            Without it the input and output carry only their dtype: fine for splicing, but the
            checker wants shapes on a main graph's inputs, so pass it for a standalone model.
        value_type: the activation's full type when it is not a tensor (a sequence or an
            optional, e.g. a Loop's scan output): only ``identity`` takes those; ``elem_type``
            is then ignored.

    Returns:
        A ``ModelProto`` (checked with ``onnx.checker`` full check when ``shape`` is given) and
        the inferred ValueInfo of its output (a copy), or None.

    Raises:
        UsageError: unknown block or parameter, bad value.
        RewriteError: dtype, rank or opset the block cannot be built for.
    """
    p = normalize_params(name, params)
    spec = BUILTIN_BLOCKS[name]
    newest = onnx.defs.onnx_opset_version()
    if not spec.min_opset <= opset <= newest:
        raise RewriteError(
            f"block '{name}' cannot be built for opset {opset}; supported opsets are "
            f"{spec.min_opset}..{newest}; convert the model with onnx.version_converter first"
        )
    kind = value_type.WhichOneof("value") if value_type is not None else None
    if kind is not None and kind != "tensor_type":
        return _non_tensor_block(name, value_type, kind, opset), None  # type: ignore[arg-type]
    if elem_type == TensorProto.UNDEFINED:
        raise RewriteError(
            f"block '{name}' needs the activation's dtype, which is unknown; add value_info for "
            "the tensor or run shape inference on the model"
        )
    if spec.dtypes and elem_type not in spec.dtypes:
        allowed = ", ".join(sorted(dtype_name(t) for t in spec.dtypes))
        raise RewriteError(
            f"block '{name}' does not accept {dtype_name(elem_type)} activations; it takes {allowed}"
        )
    if opset < 13 and elem_type == TensorProto.BFLOAT16 and name != "identity":
        raise RewriteError(
            f"block '{name}' on bfloat16 needs opset >= 13; the model has opset {opset}"
        )
    rank = None if shape is None else len(shape)
    b = _Builder(name, elem_type, opset)
    _BUILDERS[name](b, p, rank)
    dims = None if shape is None else [d if isinstance(d, (int, str)) else "" for d in shape]
    x = helper.make_tensor_value_info("x", elem_type, dims)
    if dims is not None:
        for d, raw in zip(x.type.tensor_type.shape.dim, shape or (), strict=True):
            if raw is None:
                d.Clear()
    graph = helper.make_graph(
        b.nodes, name, [x], [helper.make_tensor_value_info("y", elem_type, None)], b.inits,
    )
    opsets = [helper.make_opsetid("", opset)]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="onnxsurgeon")
    model.ir_version = _ir_version(opsets)
    if shape is None:
        return model, None
    typed: onnx.ValueInfoProto | None = None
    try:
        inferred = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
        y = inferred.graph.output[0]
        if y.type.tensor_type.HasField("shape"):
            model.graph.output[0].CopyFrom(y)
            typed = onnx.ValueInfoProto()
            typed.CopyFrom(y)
        else:  # unknown output rank: the checker still wants a shape field
            model.graph.output[0].type.tensor_type.shape.SetInParent()
        onnx.checker.check_model(model, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RewriteError(
            f"block '{name}' cannot be built for {dtype_name(elem_type)} at opset {opset} "
            f"({first[:160]}); use another dtype or opset"
        ) from None
    return model, typed
