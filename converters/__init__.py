"""Framework front-ends (TensorFlow, PyTorch): the only code that imports them.

Importing this package is cheap; TensorFlow and PyTorch are imported on first use of a function
that needs them.

Conversion (each writes the ONNX file, records ``metadata_props`` — source framework and version,
exporter, the JSON name map under ``onnxsurgeon.name_map`` and the check result — and returns a
:class:`ConversionReport`; outputs beyond ``rtol``/``atol`` raise :class:`ConversionMismatchError`
unless ``check=False`` (no check) or ``keep_mismatch=True`` (the model is kept, the mismatch
recorded under ``onnxsurgeon.conversion_check`` with ``"ok": false``)):

- ``from_tf(source, path, *, inputs=None, outputs=None, opset=None, check=True, rtol=1e-3,
  atol=1e-5, example_inputs=None, optimize_layout=False, keep_mismatch=False)``: Keras 3 model / ``.keras`` file,
  ``tf.function`` / concrete function, SavedModel folder, frozen ``.pb``, ``tf.compat.v1``
  Graph or Session. TF tensor names (``network/layer_conv5/Relu:0``) and Keras layer names
  (``conv5``) resolve as selectors afterwards.
- ``from_torch(module, example_inputs, path, *, exporter="dynamo"|"torchscript",
  dynamic_axes=None, opset=None, input_names=None, output_names=None, check=True,
  keep_mismatch=False)``: module paths
  (``conv5``, ``layer4.1``, ``transformer.h.0.mlp``) resolve as selectors afterwards.

Processing functions written in a framework:

- ``export_function(func, framework="tf"|"torch", *, elem_type, shape, opset)`` -> one-input
  (``x``), one-output (``y``) ONNX block; symbolic dims stay dynamic.
- ``insert_function(model, at, func, framework, /, *, as_output=False, exporter=None)``: reads the
  activation's dtype/shape, exports ``func`` and calls ``surgery.insert(model, at, graph=block)``.

CLI entry points (plain keyword functions; the CLI calls exactly one of them):

- ``cli_convert_tf(source, output, *, inputs=None, outputs=None, opset=None, check=True,
  keep_mismatch=False)``
- ``cli_convert_torch(factory, output, *, inputs, exporter="dynamo", opset=None, check=True,
  dynamic=(), output_names=None, keep_mismatch=False)`` (``dynamic``: ``NAME:AXIS=SYMBOL``)
- ``cli_insert_function(model, at, *, func, framework, as_output=False, exporter=None)``

``demo.run(out, folder, models_dir)``: the seed scenarios from the frameworks for
``onnxsurgeon demo`` (committed converted models when the frameworks are missing).

``load_factory("FILE.py:NAME")`` (alias ``load_callable``; used by ``convert torch`` and ``--func``) imports and RUNS the
named Python file with the user's permissions: only give it files you trust.
"""

from __future__ import annotations

from typing import Any

from .common import (
    ConversionError,
    ConversionMismatchError,
    ConversionReport,
    load_factory,
)
from .functions import (
    FRAMEWORKS,
    activation_type,
    cli_convert_tf,
    cli_convert_torch,
    cli_insert_function,
    export_function,
    insert_function,
)
from .reference import tf_reference, torch_reference

load_callable = load_factory
"""Alias of :func:`load_factory` (``--func FILE.py:NAME``)."""


def from_tf(*args: Any, **kwargs: Any) -> ConversionReport:
    """See :func:`onnxsurgeon.converters.tf.from_tf` (imports TensorFlow on first use)."""
    from .tf import from_tf as impl

    return impl(*args, **kwargs)


def from_torch(*args: Any, **kwargs: Any) -> ConversionReport:
    """See :func:`onnxsurgeon.converters.torch.from_torch` (imports PyTorch on first use)."""
    from .torch import from_torch as impl

    return impl(*args, **kwargs)


__all__ = [
    "FRAMEWORKS", "ConversionError", "ConversionMismatchError", "ConversionReport",
    "activation_type", "tf_reference", "torch_reference", "cli_convert_tf", "cli_convert_torch", "cli_insert_function",
    "export_function", "from_tf", "from_torch", "insert_function", "load_callable",
    "load_factory",
]
