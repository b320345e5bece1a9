"""onnxsurgeon: a framework-neutral graph rewriter for ONNX.

Extract the dependency closure of tensors, copy it with independent or shared weights, splice
processing blocks in at an activation, reroute edges — and prove each rewrite with onnxruntime.
The core never imports TensorFlow or PyTorch; framework front-ends live in
``onnxsurgeon.converters``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .lazy import lazy_package

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


def _version() -> str:
    """The installed distribution's version (pyproject.toml's, the one source); a source tree
    on ``sys.path`` without an install reads its pyproject.toml."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("onnxsurgeon")
    except PackageNotFoundError:
        from pathlib import Path

        import tomllib

        pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
        return str(tomllib.loads(pyproject.read_text())["project"]["version"])


def _submodule(name: str) -> Any:
    """A submodule the eager imports used to load (``onnxsurgeon.io``); ``__version__``, read
    from the package metadata on first use."""
    from importlib import import_module
    from importlib.util import find_spec

    if name == "__version__":
        globals()["__version__"] = found = _version()
        return found
    if name.startswith("_") or find_spec(f"{__name__}.{name}") is None:
        raise AttributeError(f"module 'onnxsurgeon' has no attribute {name!r}")
    return import_module(f".{name}", __name__)


__getattr__, __dir__ = lazy_package(__name__, _HOME_OF, _submodule)
