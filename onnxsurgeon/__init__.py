"""onnxsurgeon: a framework-neutral graph rewriter for ONNX.

Extract the dependency closure of tensors, copy it with independent or shared weights, splice
processing blocks in at an activation, reroute edges — and prove each rewrite with onnxruntime.
The core never imports TensorFlow or PyTorch; framework front-ends live in
``onnxsurgeon.converters``.
"""

from __future__ import annotations

from .closure import Closure, closure, downstream_nodes
from .errors import (
    AmbiguousNameError,
    InvalidModelError,
    NotFoundError,
    RewriteError,
    SurgeryError,
    UnsafeModelError,
    UsageError,
)
from .index import GraphIndex
from .io import Model, load, save
from .names import NameAllocator
from .select import Selector, resolve

__version__ = "0.1.0"

__all__ = [
    "AmbiguousNameError", "Closure", "GraphIndex", "InvalidModelError", "Model", "NameAllocator",
    "NotFoundError", "RewriteError", "Selector", "SurgeryError", "UnsafeModelError", "UsageError",
    "closure", "downstream_nodes", "load", "resolve", "save",
]
