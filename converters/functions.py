"""Processing functions written in TensorFlow or PyTorch, exported as ONNX blocks and spliced
into a model from any framework with :func:`onnxsurgeon.surgery.insert.insert`.

Also the plain keyword functions the CLI calls (``convert tf``, ``convert torch``,
``insert --func``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import Any

import onnx

from onnxsurgeon.errors import NotFoundError, RewriteError, SurgeryError, UsageError
from onnxsurgeon.index import GraphIndex
from onnxsurgeon.io import Model, as_model
from onnxsurgeon.protos import default_opset
from onnxsurgeon.select import Selector, is_selector
from onnxsurgeon.types import TypeOracle

from .common import (
    ConversionError,
    ConversionReport,
    load_factory,
    parse_shape_spec,
    split_spec_list,
)

FRAMEWORKS = ("tf", "torch")
FRAMEWORK_NAMES = {"tf": "TensorFlow", "torch": "PyTorch"}
_SHAPE_ERROR = re.compile(r"\b(rank|[Dd]imensions?|shapes?)\b")
"""Words of TensorFlow's shape-inference errors (a function written for another rank)."""


def export_function(
    func: Any,
    framework: str = "tf",
    *,
    elem_type: int,
    shape: Sequence[int | str | None],
    opset: int,
    exporter: str | None = None,
    check: bool = True,
) -> onnx.ModelProto:
    """Export a one-tensor-in, one-tensor-out framework function as an ONNX block.

    Args:
        func: a TF callable / ``tf.function`` (``framework="tf"``) or a PyTorch callable /
            ``nn.Module`` (``framework="torch"``), or ``"FILE.py:NAME"`` (imports and runs that file).
        framework: ``"tf"`` or ``"torch"``.
        elem_type: ONNX element type of the input (``onnx.TensorProto.FLOAT``...).
        shape: input dims; strings and None are symbolic and stay dynamic in the block.
        opset: default-domain opset of the block (use the target model's).
        exporter: torch only: ``"dynamo"`` or ``"torchscript"`` (default by opset).
        check: compare the block with the framework function on example data.

    Returns:
        An ``onnx.ModelProto`` with one input ``x`` and one output ``y``.
    """
    if isinstance(func, str):
        func = load_factory(func)
    if not callable(func):
        raise UsageError(f"the processing function must be callable, got {type(func).__name__}")
    if framework not in ("tf", "torch"):
        raise UsageError(f"framework '{framework}' is unknown; use one of {list(FRAMEWORKS)}")
    try:
        if framework == "tf":
            from .tf import export_tf_function

            block = export_tf_function(func, elem_type=elem_type, shape=shape, opset=opset,
                                       check=check)
        else:
            from .torch import export_torch_function

            block = export_torch_function(func, elem_type=elem_type, shape=shape, opset=opset,
                                          exporter=exporter, check=check)
    except SurgeryError:
        raise
    except Exception as exc:  # noqa: BLE001 - user code under a framework raises anything
        other = "torch" if framework == "tf" else "tf"
        name = getattr(func, "__name__", type(func).__name__)
        text = " ".join(str(exc).split())[:200]
        if isinstance(exc, ValueError) and _SHAPE_ERROR.search(text):
            # TF's shape inference refused the function on this input: the function's to fix
            dims = ", ".join(str(d) for d in shape)
            raise UsageError(
                f"function '{name}' fails in {FRAMEWORK_NAMES[framework]} on the activation "
                f"({onnx.helper.tensor_dtype_to_np_dtype(elem_type).name} [{dims}], rank "
                f"{len(shape)}): {type(exc).__name__}: {text}; write it for a tensor of that "
                "rank and shape"
            ) from exc
        raise ConversionError(
            f"the {framework} export of function '{name}' failed ({type(exc).__name__}: {text}); "
            f"check that it is written in {'TensorFlow' if framework == 'tf' else 'PyTorch'} "
            f"and takes one tensor (framework='{other}' if it is {other} code)"
        ) from exc
    block.graph.name = _block_name(func, framework)
    return block


def _block_name(func: Any, framework: str) -> str:
    """The function's own name (``l2``, ``normalize``) names the block; ``<lambda>`` does not."""
    name = getattr(func, "__name__", None) or type(func).__name__
    if not name.isidentifier() or name in ("function", "Function"):
        return f"{framework}_func"
    return name


def activation_type(model: Model | onnx.ModelProto, at: str) -> tuple[str, int, list[int | str | None]]:
    """(ONNX tensor name, elem_type, shape with symbolic dims named) of the tensor ``at``; a
    selector matching several tensors gives the first, when every match has its type."""
    m = as_model(model)
    index = GraphIndex(m.proto)
    selector = Selector(index)
    oracle = TypeOracle(index)
    names = selector.find_tensors(at) if is_selector(at) else [selector.resolve(at)]
    name = names[0]
    kinds = {(oracle.elem_type(n), tuple(oracle.shape(n) or ())) for n in names}
    if len(kinds) > 1:
        raise RewriteError(
            f"selector '{at}' matches {len(names)} tensors of different dtypes or shapes, and "
            "the function is exported once for one of them; narrow the selector to tensors of "
            "one type")
    elem = oracle.elem_type(name)
    shape = oracle.shape(name)
    if elem == 0 or shape is None:
        raise RewriteError(
            f"dtype/shape of tensor '{name}' is unknown, so the function cannot be exported for it; "
            "add value_info for it (e.g. onnx.shape_inference) and retry"
        )
    dims: list[int | str | None] = [
        d if d is not None else f"unk_{i}" for i, d in enumerate(shape)
    ]
    return name, elem, dims


def insert_function(
    model: Model | onnx.ModelProto,
    at: str,
    func: Any,
    framework: str = "tf",
    /,
    *,
    as_output: bool = False,
    keep_output_name: bool = True,
    exporter: str | None = None,
    opset: int | None = None,
    check: bool = True,
) -> Any:
    """Insert a framework-written function at tensor ``at``. Mutates model.

    Reads the activation's dtype and shape, exports ``func`` for them (symbolic dims kept) and
    splices it in with ``insert(model, at, graph=block, as_output=as_output)``.

    Before:  p -> at -> {consumers}
    After:   p -> at -> func -> v -> {consumers}     (as_output: at -> func -> v -> <output>)

    Args:
        model: the model (``Model`` or ``ModelProto``).
        at: a tensor name as the user knows it (ONNX, TF ``:0`` name, torch module path...).
        func: callable or ``"FILE.py:NAME"`` (this imports and runs the user's file).
        framework: ``"tf"`` or ``"torch"``.
        as_output: expose the result as a new graph output instead of rerouting consumers.
        keep_output_name: a graph output at ``at`` keeps its name (see ``insert``).
        exporter: torch exporter (``"dynamo"``/``"torchscript"``), default by opset.
        opset: block opset (the model's default-domain opset when None).
        check: compare the exported block with the framework on example data first.

    Returns:
        The ``InsertResult`` of :func:`onnxsurgeon.surgery.insert.insert`.
    """
    from onnxsurgeon.surgery.insert import insert

    m = as_model(model)
    target = opset or default_opset(m.proto)
    if target is None:
        raise UsageError("the model imports no default-domain opset; add an ai.onnx opset import "
                         "or pass opset=")
    _, elem, shape = activation_type(m, at)
    block = export_function(func, framework, elem_type=elem, shape=shape,
                            opset=target, exporter=exporter, check=check)
    return insert(model, at, graph=block, as_output=as_output, keep_output_name=keep_output_name)


# ---------------------------------------------------------------------------------- CLI entry
def cli_convert_tf(
    source: str,
    output: str | os.PathLike[str],
    *,
    inputs: Sequence[str] | str | None = None,
    outputs: Sequence[str] | str | None = None,
    opset: int | None = None,
    check: bool = True,
    keep_mismatch: bool = False,
) -> ConversionReport:
    """``onnxsurgeon convert tf SOURCE -o OUT [--inputs ...] [--outputs ...] [--opset N]
    [--keep-mismatch]``.

    ``source`` is a ``.keras`` file, SavedModel folder or frozen ``.pb``; ``inputs`` entries are
    ``NAME[:PORT][:SHAPE[:DTYPE]]`` (``input:0:1,8,8,3`` or ``input:0:1x8x8x3``), ``outputs`` TF
    tensor names. Either may be one comma-separated string or a list, also one cut at every
    comma (pieces are rejoined with :func:`split_spec_list`).
    """
    from .tf import from_tf

    # rejoin shapes a comma-splitting caller cut apart ("input:0:1", "8", "8", "3")
    ins = split_spec_list(inputs if isinstance(inputs, str) else ",".join(inputs or []))
    outs = split_spec_list(outputs if isinstance(outputs, str) else ",".join(outputs or []))
    return from_tf(source, output, inputs=ins or None, outputs=outs or None, opset=opset,
                   check=check, keep_mismatch=keep_mismatch)


def cli_convert_torch(
    factory: str,
    output: str | os.PathLike[str],
    *,
    inputs: Sequence[str],
    exporter: str = "dynamo",
    opset: int | None = None,
    check: bool = True,
    dynamic: Sequence[str] = (),
    output_names: Sequence[str] | None = None,
    keep_mismatch: bool = False,
) -> ConversionReport:
    """``onnxsurgeon convert torch FILE.py:FACTORY -o OUT --input NAME:SHAPE[:DTYPE] ...
    [--dynamic NAME:AXIS=SYMBOL ...] [--output-names A,B,...] [--keep-mismatch]``.

    Imports and runs ``FILE.py`` (the user's own code) and calls ``FACTORY()`` for the module.
    Symbolic dims in a shape (``x:batch,3,224,224``) become dynamic axes (example size 2);
    ``dynamic`` entries (``x:0=batch``, ``boxes:0=batch``; several axes ``x:0=batch,2=h``) make
    the axes of inputs (exported at the example size) or named outputs dynamic.
    """
    import torch

    from .common import example_array
    from .torch import from_torch

    if not inputs:
        raise UsageError("convert torch needs --input NAME:SHAPE[:DTYPE] for every input")
    make = load_factory(factory)
    module = make() if callable(make) and not isinstance(make, torch.nn.Module) else make
    if not isinstance(module, torch.nn.Module):
        raise UsageError(f"'{factory}' returned a {type(module).__name__}, not a torch.nn.Module")
    names, tensors = [], []
    axes: dict[str, dict[int, str]] = {}
    for i, spec in enumerate(inputs):
        name, dims, dtype = parse_shape_spec(spec)
        if dims is None:
            raise UsageError(f"input '{name}' needs a shape: {name}:1x3x224x224[:float32]")
        names.append(name)
        tensors.append(torch.from_numpy(example_array(dims, dtype or "float32", seed=i)))
        sym = {j: str(d) for j, d in enumerate(dims) if isinstance(d, str) or d < 0}
        if sym:
            axes[name] = sym
    ranks = {n: t.dim() for n, t in zip(names, tensors, strict=True)}
    for name, more in parse_dynamic(dynamic, ranks, output_names or ()).items():
        axes.setdefault(name, {}).update(more)
    return from_torch(module, tuple(tensors), output, exporter=exporter, opset=opset,
                      input_names=names, output_names=list(output_names or []) or None,
                      dynamic_axes=axes or None, check=check, keep_mismatch=keep_mismatch)


def parse_dynamic(specs: Sequence[str], ranks: dict[str, int],
                  outputs: Sequence[str]) -> dict[str, dict[int, str]]:
    """``NAME:AXIS=SYMBOL`` entries (``x:0=batch``; ``x:0=batch,2=h`` for several axes of one
    tensor) -> ``{name: {axis: symbol}}``, for the inputs in ``ranks`` (axis below the rank) and
    the names in ``outputs``. An ``AXIS=SYMBOL`` entry without a name continues the entry before
    it (the CLI's comma lists hand ``x:0=batch,2=h`` over as two entries)."""
    found: dict[str, dict[int, str]] = {}
    name = ""
    for spec in specs:
        for piece in (p.strip() for p in spec.split(",")):
            if not piece:
                continue
            head, sep, axis_sym = piece.rpartition(":")
            if sep:
                name = head
            elif not name:
                raise UsageError(f"dynamic axis '{spec}' names no tensor; write NAME:AXIS=SYMBOL, "
                                 "e.g. x:0=batch")
            axis, eq, sym = axis_sym.partition("=")
            if not eq or not axis.strip().isdigit() or not sym.strip().isidentifier():
                raise UsageError(f"dynamic axis '{piece}' is not NAME:AXIS=SYMBOL; write e.g. "
                                 f"{name or 'x'}:0=batch")
            if name not in ranks and name not in outputs:
                known = list(ranks) + list(outputs)
                raise NotFoundError(f"dynamic axis '{piece}' names '{name}', which is no input "
                                    f"or named output; use one of {known}")
            if name in ranks and int(axis) >= ranks[name]:
                raise UsageError(f"dynamic axis '{piece}': input '{name}' has {ranks[name]} "
                                 f"axes (0-{ranks[name] - 1}); give an axis below {ranks[name]}")
            found.setdefault(name, {})[int(axis)] = sym.strip()
    return found


def cli_insert_function(
    model: Model | onnx.ModelProto,
    at: str,
    *,
    func: str,
    framework: str,
    as_output: bool = False,
    exporter: str | None = None,
) -> Any:
    """``onnxsurgeon insert MODEL --at T --func FILE.py:NAME --framework tf|torch``. Mutates model.

    Imports and runs ``FILE.py`` (the user's own code).
    """
    return insert_function(model, at, func, framework, as_output=as_output, exporter=exporter)

