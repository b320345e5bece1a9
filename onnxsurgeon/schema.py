"""The documented shape of every ``--json`` output: one JSON Schema file per command.

``onnxsurgeon/schemas/<command>.json`` (shipped with the package) describes what
``onnxsurgeon <command> --json`` prints. Every such object carries ``"schema":
"onnxsurgeon.<command>/<version>"``; the version grows when a field changes meaning or type or
goes away (adding a field does not change it). :func:`stamp` adds the field, :func:`validate`
checks an object against its schema (needs the ``jsonschema`` package: the ``schema`` extra,
``pip install 'onnxsurgeon[schema]'``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"
BASE_URI = "https://onnxsurgeon.invalid/schemas/"
"""Base of every schema's ``$id``; ``{"$ref": "verify.json"}`` inside a schema means the verify
schema (resolved from the package folder, never fetched)."""

VERSIONS: dict[str, int] = {}
"""Schema version per command, read from each schema file's ``x-version``."""


def schema_path(command: str) -> Path:
    """The schema file of ``command`` (``convert``, ``inspect``, ``verify``, ...)."""
    return SCHEMA_DIR / f"{command}.json"


@cache
def load_schema(command: str) -> dict[str, Any]:
    """The JSON Schema of ``command``'s ``--json`` output.

    Raises:
        FileNotFoundError: ``command`` has no schema file.
    """
    data: dict[str, Any] = json.loads(schema_path(command).read_text())
    return data


def schema_id(command: str) -> str:
    """The value of the ``"schema"`` field for ``command``: ``onnxsurgeon.<command>/<version>``."""
    version = int(load_schema(command).get("x-version", 1))
    return f"onnxsurgeon.{command}/{version}"


def stamp(command: str, payload: Mapping[str, Any]) -> dict[str, Any]:
    """``payload`` with the ``"schema"`` and ``"command"`` fields first."""
    return {"schema": schema_id(command), "command": command, **payload}


def commands_with_schema() -> list[str]:
    """Every command that has a schema file, sorted."""
    return sorted(p.stem for p in SCHEMA_DIR.glob("*.json") if not p.stem.startswith("_"))


def validate(command: str, data: Any) -> None:
    """Check ``data`` against ``command``'s schema (``$ref`` between schema files resolved from
    the package folder).

    Raises:
        jsonschema.ValidationError: ``data`` does not fit the schema.
        ImportError: the ``jsonschema`` package is missing (``pip install 'onnxsurgeon[schema]'``).
    """
    try:
        import jsonschema
        from referencing import Registry, Resource
    except ImportError as exc:
        raise ImportError("onnxsurgeon.schema.validate needs jsonschema; pip install "
                          "'onnxsurgeon[schema]'", name=exc.name or "jsonschema") from exc

    resources = []
    for path in sorted(SCHEMA_DIR.glob("*.json")):
        body = json.loads(path.read_text())
        resources.append((BASE_URI + path.name, Resource.from_contents(body)))
    registry: Registry[Any] = Registry().with_resources(resources)
    schema = load_schema(command)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    cls(schema, registry=registry, format_checker=cls.FORMAT_CHECKER).validate(data)
