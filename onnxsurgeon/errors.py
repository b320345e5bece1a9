"""Error types. Every user-facing failure is a :class:`SurgeryError` whose message names the
object at fault and the fix; the CLI prints it as one line and exits 2."""

from __future__ import annotations

from collections.abc import Iterable

CONTROL_ESCAPES = {c: f"\\x{c:02x}" for c in (*range(32), 127)}
"""``str.translate`` table showing control characters as ``\\xNN``: every message and warning
stays one line whatever names an untrusted model carries."""


class SurgeryError(Exception):
    r"""Base class of every error onnxsurgeon raises on purpose (bad input, refused rewrite).

    The message is always one line: control characters coming from names inside an untrusted
    model (newlines, escapes) are shown as ``\xNN``.
    """

    def __init__(self, *args: object) -> None:
        if len(args) == 1 and isinstance(args[0], str):
            args = (args[0].translate(CONTROL_ESCAPES),)
        super().__init__(*args)


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


def name_list(value: Iterable[str], what: str) -> list[str]:
    """``value`` as a list of names. A bare string is refused: iterating it would give its
    characters (``copy(m, "head")`` would copy tensors 'h', 'e', ...).

    Raises:
        TypeError: ``value`` is a string (or bytes).
    """
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{what} takes a list of names, got the string {value!r}; write "
                        f"[{value!r}]")
    return list(value)


def close_matches(word: str, possibilities: list[str], *, n: int, cutoff: float) -> list[str]:
    """The names of ``possibilities`` closest to ``word`` for a "did you mean" message
    (``difflib.get_close_matches``; difflib is imported only then: its import costs every
    command milliseconds)."""
    import difflib

    return difflib.get_close_matches(word, possibilities, n=n, cutoff=cutoff)
