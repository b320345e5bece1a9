"""Patterns written as framework functions: ``match`` / ``replace`` with ``--pattern FILE.py:NAME
--framework tf|torch``, converted as ``insert --func`` converts a function
(:func:`~onnxsurgeon.converters.functions.export_function`), the input described by
``--pattern-input NAME:SHAPE[:DTYPE]``. The core then reads the converted graph like any other
pattern (:func:`onnxsurgeon.pattern.load_pattern`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx

from onnxsurgeon.errors import UsageError

from .functions import export_function


def parse_pattern_input(spec: str) -> tuple[str, list[int | str | None], int]:
    """``NAME:SHAPE[:DTYPE]`` (``x:1x8x8x3``, ``x:Nx16:float16``) -> (name, dims, ONNX element
    type); a dim that is not a number stays symbolic; DTYPE defaults to float32.

    Raises:
        UsageError: no shape, or an unknown dtype.
    """
    parts = spec.split(":")
    if len(parts) not in (2, 3) or not parts[0] or not parts[1]:
        raise UsageError(f"--pattern-input '{spec}' is not NAME:SHAPE[:DTYPE]; write e.g. "
                         "x:1x8x8x3 or x:Nx16:float16")
    dims: list[int | str | None] = [int(d) if d.isdigit() else d for d in parts[1].split("x")]
    try:
        elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(parts[2] if len(parts) == 3
                                                             else "float32"))
    except (TypeError, KeyError):
        raise UsageError(f"--pattern-input '{spec}': dtype '{parts[2]}' is unknown; use a numpy "
                         "name (float32, float16, int64, ...)") from None
    return parts[0], dims, int(elem)


def export_pattern(func: str, framework: str, inputs: Sequence[str], *, opset: int,
                   exporter: str | None = None) -> onnx.ModelProto:
    """``func`` (``FILE.py:NAME``: imports and runs that file) converted to a pattern graph for
    the input ``inputs`` describes (one ``NAME:SHAPE[:DTYPE]``: framework patterns take one
    tensor; write patterns of several inputs in the ONNX text syntax), at ``opset``.

    Raises:
        UsageError: not exactly one input, a bad input spec, a function that fails.
        ConversionError: the framework's export failed.
    """
    if len(inputs) != 1:
        raise UsageError(f"a {framework} pattern takes one input, given {len(inputs)} "
                         "--pattern-input; write a pattern of several inputs in the ONNX text "
                         "syntax")
    _, dims, elem = parse_pattern_input(inputs[0])
    return export_function(func, framework, elem_type=elem, shape=dims, opset=opset,
                           exporter=exporter, check=False)
