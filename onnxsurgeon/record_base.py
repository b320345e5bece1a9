"""The base of the rewrite records of :mod:`onnxsurgeon.record`: a record's JSON form, read
strictly, its version, and the verb call that makes the rewrite again.

Reading is strict: a missing key, an unknown key or a value of the wrong type is a
:class:`~onnxsurgeon.errors.UsageError` naming it, never a silent default. Field names are the
JSON keys, except where ``field(metadata={"json": KEY})`` says otherwise (``from``).

Versions: each record type has a ``VERSION``. A record without a ``"version"`` key is version 1
(the format of every record so far); ``to_json`` writes the key only above 1, so version-1 logs
stay byte-identical. A record newer than this onnxsurgeon knows is refused with a message to
upgrade.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields
from typing import Any, ClassVar

from .errors import UsageError

REWRITES_KEY = "onnxsurgeon.rewrites"
"""The ``metadata_props`` key of a model's rewrite log (:func:`onnxsurgeon.record.rewrites`)."""

RECORD_TYPES: dict[str, type[RewriteRecord]] = {}
"""JSON ``op`` -> record type; filled by subclassing :class:`RewriteRecord`."""


def _json_key(f: Any) -> str:
    return str(f.metadata.get("json", f.name))


def _plain(value: Any) -> Any:
    """JSON form of a field value: tuples become lists (nested too), mappings plain dicts."""
    if isinstance(value, tuple):  # a plain dict item (fold's 30,000 ``fused``) without a call
        return [dict(v) if type(v) is dict else _plain(v) for v in value]
    if isinstance(value, Mapping):
        return dict(value)
    return value


@dataclass(frozen=True)
class VerbCall:
    """The surgery call that makes a recorded rewrite again, in the Python API's terms: the verb
    (a function of :mod:`onnxsurgeon.surgery`), its positional arguments after the model (by
    parameter name, in order) and its keyword options. ``verify`` replays it
    (:func:`onnxsurgeon.verify.log.replay`), a recipe writes it as a step
    (:func:`onnxsurgeon.recipe.fromlog.step_for_record`)."""

    verb: str
    args: dict[str, Any]
    options: dict[str, Any]


@dataclass(frozen=True)
class RewriteRecord:
    """Base of the per-verb records: JSON round trip, strict reading, versioning, replay."""

    op: ClassVar[str] = ""
    VERSION: ClassVar[int] = 1

    def replay_call(self) -> VerbCall:
        """The verb call that makes this rewrite again on the model the record was made on.

        Raises:
            UsageError: the record alone cannot make the rewrite again (says why).
        """
        raise UsageError(f"rewrite record op {self.op!r} cannot be replayed")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.op:
            RECORD_TYPES[cls.op] = cls

    def to_json(self) -> dict[str, Any]:
        """The JSON object stored in the model (lists for tuples, plain dicts)."""
        data: dict[str, Any] = {"op": self.op}
        if self.VERSION > 1:
            data["version"] = self.VERSION
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None and f.default is None:
                continue  # an optional key the record does not have stays absent
            data[_json_key(f)] = _plain(value)
        return data

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> RewriteRecord:
        """The typed record of a JSON object.

        Raises:
            UsageError: unknown op, newer version, missing or unknown key, wrong value type.
        """
        if not isinstance(data, Mapping):
            raise UsageError(f"a rewrite record must be a JSON object, got {type(data).__name__}")
        op = data.get("op")
        cls = RECORD_TYPES.get(str(op))
        if cls is None:
            raise UsageError(
                f"rewrite record op {op!r} is unknown; expected one of {sorted(RECORD_TYPES)}"
            )
        version = data.get("version", 1)
        if not isinstance(version, int) or version < 1:
            raise UsageError(f"rewrite record '{op}' has version {version!r}; expected 1 or more")
        if version > cls.VERSION:
            raise UsageError(
                f"rewrite record '{op}' is version {version}, newer than this onnxsurgeon reads "
                f"({cls.VERSION}); upgrade onnxsurgeon"
            )
        keys = {_json_key(f): f for f in fields(cls)}
        unknown = sorted(set(data) - set(keys) - {"op", "version"})
        if unknown:
            raise UsageError(f"rewrite record '{op}' has unknown key {unknown[0]!r}; "
                             f"its keys are {sorted(keys)}")
        values: dict[str, Any] = {}
        for key, f in keys.items():
            if key not in data:
                if f.default is not MISSING:
                    continue
                raise UsageError(f"rewrite record '{op}' lacks key '{key}'; give the record "
                                 "the verb wrote")
            values[f.name] = _read(op, key, str(f.type), data[key])
        return cls(**values)


def _read(op: object, key: str, kind: str, value: Any) -> Any:
    """``value`` checked against the field annotation ``kind`` (tuples from JSON lists)."""
    if kind.endswith(" | None"):
        if value is None:
            return None
        kind = kind[: -len(" | None")]
    ok: bool
    if kind.startswith("tuple[tuple[str, str]"):
        ok = isinstance(value, list) and all(
            isinstance(v, list) and len(v) == 2 and all(isinstance(x, str) for x in v)
            for v in value)
        value = tuple(tuple(v) for v in value) if ok else value
    elif kind.startswith("tuple[dict"):
        ok = isinstance(value, list) and all(isinstance(v, dict) for v in value)
        value = tuple(dict(v) for v in value) if ok else value
    elif kind.startswith("tuple"):
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        value = tuple(value) if ok else value
    elif kind.startswith("dict[str, str]"):
        ok = isinstance(value, dict) and all(isinstance(v, str) for v in value.values())
    elif kind.startswith("dict[str, int]"):
        ok = isinstance(value, dict) and all(type(v) is int for v in value.values())
    elif kind.startswith("dict"):
        ok = isinstance(value, dict)
    elif kind == "bool":
        ok = isinstance(value, bool)
    elif kind == "int":
        ok = type(value) is int
    else:
        ok = isinstance(value, str)
    if not ok:
        raise UsageError(f"rewrite record '{op}' key '{key}' is {json.dumps(value)[:80]}, "
                         f"not a {kind}; give the record the verb wrote")
    return dict(value) if isinstance(value, dict) else value
