"""Packages whose public names are imported on first use (PEP 562).

A package that re-exports a function from a submodule of the same name (``surgery.extract``,
``onnxsurgeon.closure``) would see the attribute rebound to the module when the submodule is
imported; :func:`lazy_package` keeps it the function."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


class _Package(types.ModuleType):
    """A package module whose public attributes never become their submodules (its
    ``_lazy_homes``, set by :func:`lazy_package`, is not annotated here: a class annotation
    would read as one of the package's own, which the API reference could not resolve)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self.__dict__.get("_lazy_homes", ()) and isinstance(value, types.ModuleType):
            return  # the submodule stays in sys.modules; the attribute resolves via __getattr__
        super().__setattr__(name, value)


def lazy_package(
    package: str, home_of: Mapping[str, str],
    fallback: Callable[[str], Any] | None = None,
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` (public name -> the submodule that
    defines it, in ``home_of``), and the package's module made to keep those names; a name
    not in ``home_of`` goes to ``fallback`` (else AttributeError)."""
    module = sys.modules[package]

    def __getattr__(name: str) -> Any:
        home = home_of.get(name)
        if home is None:
            if fallback is not None:
                return fallback(name)
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(f".{home}", package), name)
        setattr(module, name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(module), *home_of})

    module._lazy_homes = home_of  # type: ignore[attr-defined]
    module.__class__ = _Package
    return __getattr__, __dir__
