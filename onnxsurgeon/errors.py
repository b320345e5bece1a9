"""Error types. Every user-facing failure is a :class:`SurgeryError` whose message names the
object at fault and the fix; the CLI prints it as one line and exits 2."""

from __future__ import annotations


class SurgeryError(Exception):
    """Base class of every error onnxsurgeon raises on purpose (bad input, refused rewrite)."""


class InvalidModelError(SurgeryError):
    """The file is not a usable ONNX model (not protobuf, truncated, cyclic, dangling, ...)."""


class UnsafeModelError(InvalidModelError):
    """The model asks for something unsafe (external data outside its folder, links, ...)."""


class NotFoundError(SurgeryError):
    """A tensor, node or file named by the user does not exist."""


class AmbiguousNameError(SurgeryError):
    """A user-given name matches several tensors."""


class RewriteError(SurgeryError):
    """A rewrite was refused (cycle, dtype mismatch, bad processing block, ...)."""


class UsageError(SurgeryError):
    """Arguments do not fit together (bad option value, output path equals input, ...)."""
