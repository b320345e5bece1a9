"""onnxsurgeon: a framework-neutral graph rewriter for ONNX.

Extract the dependency closure of tensors, copy it with independent or shared weights, splice
processing blocks in at an activation, reroute edges — and prove each rewrite with onnxruntime.
The core never imports TensorFlow or PyTorch; framework front-ends live in
``onnxsurgeon.converters``.
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

# The public names are imported on first use (PEP 562), so that importing a submodule does not
# load onnx and numpy first: the command line sets its start-up environment before they load
# (see ``onnxsurgeon.__main__``).
_HOMES = {
    "closure": ("Closure", "closure", "downstream_nodes"),
    "errors": ("AmbiguousNameError", "InvalidModelError", "NotFoundError", "RewriteError",
               "SurgeryError", "UnsafeModelError", "UsageError"),
    "index": ("GraphIndex",),
    "io": ("Model", "load", "save"),
    "names": ("NameAllocator",),
    "select": ("Selector", "resolve"),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}

__all__ = [
    "AmbiguousNameError", "Closure", "GraphIndex", "InvalidModelError", "Model", "NameAllocator",
    "NotFoundError", "RewriteError", "Selector", "SurgeryError", "UnsafeModelError", "UsageError",
    "closure", "downstream_nodes", "load", "resolve", "save",
]


def __getattr__(name: str) -> Any:
    from importlib import import_module
    from importlib.util import find_spec

    module = _HOME_OF.get(name)
    if module is None:  # a submodule the eager imports used to load (``onnxsurgeon.io``)
        if name.startswith("_") or find_spec(f"{__name__}.{name}") is None:
            raise AttributeError(f"module 'onnxsurgeon' has no attribute {name!r}")
        return import_module(f".{name}", __name__)
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


class _Package(types.ModuleType):
    """Keeps a public name that is also a submodule's name (``closure``) bound to the public
    object: importing the submodule would otherwise rebind the package attribute to it, as the
    eager ``from .closure import closure`` used to undo."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _HOME_OF and isinstance(value, types.ModuleType):
            return  # the submodule stays in sys.modules; the attribute resolves via __getattr__
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
