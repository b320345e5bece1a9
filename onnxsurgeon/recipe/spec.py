"""The typed parameter schema of recipe steps: one :class:`Verb` per step kind, each a list of
:class:`Param` with a kind that says how the value is checked and normalized.

A value is checked without looking at any model (names are resolved later, when the step runs),
so a recipe is validated as a whole before the first model is loaded. Error messages name the
key and, for unknown keys and choices, the closest valid spelling.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from ..errors import UsageError


class Kind(str, Enum):
    """How a parameter's value is written in a recipe and normalized."""

    NAME = "name"            # one tensor or node name (a string)
    NAMES = "names"          # a list of names, non-empty when required (a string is one item)
    RENAMES = "renames"      # a mapping name -> name
    TEXT = "text"            # any string
    BOOL = "bool"
    CHOICE = "choice"        # one of Param.choices
    PARAMS = "params"        # a mapping key -> number, string or list of numbers (block params)
    FILE = "file"            # a path, relative to the recipe file
    FUNC = "func"            # FILE.py:NAME, the file relative to the recipe file
    PAIRS = "pairs"          # ordered (pattern, replacement) pairs: a mapping or a list of pairs
    COUNT = "count"          # a positive integer
    NATURAL = "natural"      # a non-negative integer (a seed, an input index)
    DIMS = "dims"            # a mapping symbolic-dim name -> positive integer


@dataclass(frozen=True)
class Param:
    """One key of a step.

    Attributes:
        key: the key in the recipe (the Python API keyword; ``from``/``to`` for reroute's
            positional source and target).
        kind: how the value is checked and normalized.
        required: the step needs this key.
        default: the value a canonical recipe records when the key is absent (None: omitted).
        choices: the valid values of a :attr:`Kind.CHOICE` key.
        help: one line for the README's table.
    """

    key: str
    kind: Kind
    required: bool = False
    default: Any = None
    choices: tuple[str, ...] = ()
    help: str = ""


@dataclass(frozen=True)
class StepContext:
    """What a step may need beyond its keys.

    Attributes:
        insert_function: ``onnxsurgeon.converters.insert_function`` for ``insert`` steps with
            ``func:`` (the core never imports converters; the CLI passes it in).
    """

    insert_function: Callable[..., Any] | None = None


StepRun = Callable[[Any, Mapping[str, Any], StepContext], dict[str, Any]]
"""Runs one step on a model (mutating it) and returns the verb's own ``--json`` result."""
StepMake = Callable[[Any, Mapping[str, Any], StepContext], tuple[dict[str, Any], Any]]
"""Runs a step that ends a recipe: (its ``--json`` result, what it made instead of changing the
model: ``split``'s :class:`~onnxsurgeon.surgery.SplitResult`)."""
StepCheck = Callable[[Any, Any, Any, Mapping[str, Any], Mapping[str, Any]], Any]
"""(model before, model after, rewrite record, step keys, verify options) -> VerifyReport."""


@dataclass(frozen=True)
class Verb:
    """A step kind: its keys, how it runs, and the checks across keys.

    Attributes:
        name: the verb as written in a recipe (``extract``, ``copy``, ...).
        params: the keys the step accepts.
        run: calls the library function with the step's normalized keys; None for ``verify``,
            which the pipeline runs itself (it needs the models between steps).
        one_of: groups of keys of which exactly one must be given.
        help: one line for the README's table.
        rewrites: whether the step changes the model (and leaves a rewrite record).
        check: proves one such step at a checkpoint (default: ``verify_rewrite`` of its record).
        make: for a step that must be the last (``split``): it leaves the model as it is and
            makes something else (the stages), which the caller writes.
    """

    name: str
    params: tuple[Param, ...]
    run: StepRun | None
    one_of: tuple[tuple[str, ...], ...] = ()
    help: str = ""
    rewrites: bool = True
    requires: Mapping[str, str] = field(default_factory=dict)
    """key -> the key it needs (e.g. ``framework`` goes with ``func``)."""
    check: StepCheck | None = None
    make: StepMake | None = None

    def param(self, key: str) -> Param | None:
        return next((p for p in self.params if p.key == key), None)


def did_you_mean(word: str, pool: Sequence[str]) -> str:
    """``"; did you mean 'x'?"`` for the closest spelling in ``pool``, else ``""``."""
    close = difflib.get_close_matches(word, list(pool), n=2, cutoff=0.5)
    if not close:
        return ""
    return "; did you mean " + " or ".join(f"'{c}'" for c in close) + "?"


def _name(value: Any, what: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise UsageError(f"{what} must be a name (a string), got {value!r}; quote it")
    text = str(value)
    if not text:
        raise UsageError(f"{what} is an empty name; give a tensor or node name")
    return text


def _number(value: Any, what: str) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise UsageError(f"{what} must be a finite number, got {value!r}")
    return value


def _whole(value: Any, what: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise UsageError(f"{what} must be a whole number >= {low}, got {value!r}")
    return value


def _relative(value: Any, what: str, base_dir: Path) -> str:
    from ..pattern.load import INLINE_PREFIX

    text = _name(value, what)
    if text.startswith(INLINE_PREFIX):  # a pattern inline, as a recipe from a log writes it
        return text
    return str(Path(text) if Path(text).is_absolute() else base_dir / text)


def coerce(param: Param, value: Any, what: str) -> Any:
    """Check ``value`` for ``param`` and return its normalized form (paths stay as written).

    Raises:
        UsageError: the value does not fit the kind; the message starts with ``what``.
    """
    kind = param.kind
    if kind in (Kind.NAME, Kind.TEXT):
        if kind is Kind.TEXT and isinstance(value, str):
            return value
        return _name(value, what)
    if kind in (Kind.FILE, Kind.FUNC):
        text = _name(value, what)
        if kind is Kind.FUNC and (":" not in text or not text.rpartition(":")[2]):
            raise UsageError(f"{what} must be FILE.py:NAME, got {text!r}")
        return text
    if kind is Kind.NAMES:
        items = [value] if isinstance(value, (str, int)) and not isinstance(value, bool) else value
        if not isinstance(items, list) or (param.required and not items):
            raise UsageError(f"{what} must be a non-empty list of names, got {value!r}")
        return [_name(v, f"{what}[{k}]") for k, v in enumerate(items)]
    if kind is Kind.RENAMES:
        if not isinstance(value, dict):
            raise UsageError(f"{what} must be a mapping OLD: NEW, got {value!r}")
        return {_name(k, f"{what} key"): _name(v, f"{what}[{k!r}]") for k, v in value.items()}
    if kind is Kind.BOOL:
        if not isinstance(value, bool):
            raise UsageError(f"{what} must be true or false, got {value!r}")
        return value
    if kind is Kind.CHOICE:
        choice = value if isinstance(value, str) else None
        if choice not in param.choices:
            raise UsageError(
                f"{what} must be one of {', '.join(param.choices)}, got {value!r}"
                + did_you_mean(str(value), param.choices)
            )
        return choice
    if kind is Kind.PARAMS:
        if not isinstance(value, dict):
            raise UsageError(f"{what} must be a mapping of block parameters, got {value!r}")
        out: dict[str, Any] = {}
        for k, v in value.items():
            item = f"{what}[{k!r}]"
            if isinstance(v, list):
                out[str(k)] = [_number(x, item) for x in v]
            elif isinstance(v, str):
                out[str(k)] = v
            else:
                out[str(k)] = _number(v, item)
        return out
    if kind in (Kind.COUNT, Kind.NATURAL):
        return _whole(value, what, 1 if kind is Kind.COUNT else 0)
    if kind is Kind.PAIRS:
        items = list(value.items()) if isinstance(value, dict) else value
        if not isinstance(items, list) or not all(
                isinstance(i, (list, tuple)) and len(i) == 2 for i in items):
            raise UsageError(f"{what} must be a mapping PATTERN: REPLACEMENT or a list of "
                             f"[PATTERN, REPLACEMENT] pairs, got {value!r}")
        return [[_name(a, f"{what} pattern"), str(b)] for a, b in items]
    if kind is Kind.DIMS:
        if not isinstance(value, dict):
            raise UsageError(f"{what} must be a mapping NAME: SIZE, got {value!r}")
        return {_name(k, f"{what} key"): _whole(v, f"{what}[{k!r}]", 1) for k, v in value.items()}
    raise AssertionError(kind)  # pragma: no cover - every kind is handled above


def resolve_path(param: Param, value: str, base_dir: Path) -> str:
    """A FILE or FUNC value with its file made relative to ``base_dir`` (the recipe's folder)."""
    if param.kind is Kind.FILE:
        return _relative(value, "path", base_dir)
    if param.kind is Kind.FUNC:
        file, _, name = value.rpartition(":")
        return f"{_relative(file, 'path', base_dir)}:{name}"
    return value
