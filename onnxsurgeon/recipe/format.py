"""Reading recipes: YAML or JSON with one schema (:data:`~onnxsurgeon.recipe.steps.STEPS`).

```yaml
onnxsurgeon: 1                 # format version, required
description: optional text
steps:
  - extract: {outputs: ["logits:0"]}
  - insert: {at: "network/layer_conv5/Relu:0", op: l2_normalize, params: {axis: 1}}
  - verify: {}
```

Each step is a mapping with one key, the verb, whose value maps the verb's keys to values.
Parsing checks the whole recipe before any model is touched; errors name the step (number and
verb) and the key, with a did-you-mean for misspelt verbs, keys and choices. The canonical form
(:meth:`Recipe.canonical`) has every default filled in and keys sorted, so two recipes that mean
the same have the same text and sha256.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import NotFoundError, UsageError
from .spec import Kind, did_you_mean, resolve_path
from .steps import ALIASES, STEPS

FORMAT_VERSION = 1
_TOP_KEYS = ("onnxsurgeon", "description", "steps")
_PRINTED_KEYS = ("schema", "command", "model")
"""The stamp ``recipe --json`` adds (onnxsurgeon/schemas/recipe.json); skipped when reading."""


class RecipeError(UsageError):
    """The recipe itself is bad (syntax, schema, a value that fits no model)."""


@dataclass(frozen=True)
class Step:
    """One step: its 1-based number, verb and normalized keys (paths as written)."""

    number: int
    verb: str
    params: Mapping[str, Any]

    @property
    def label(self) -> str:
        return f"step {self.number} ({self.verb})"

    def resolved(self, base_dir: Path) -> dict[str, Any]:
        """The keys with FILE and FUNC paths made relative to ``base_dir``."""
        spec = STEPS[self.verb]
        out = dict(self.params)
        for key, value in self.params.items():
            param = spec.param(key)
            if param is not None and param.kind in (Kind.FILE, Kind.FUNC):
                out[key] = resolve_path(param, value, base_dir)
        return out


@dataclass(frozen=True)
class Recipe:
    """A parsed, checked recipe.

    Attributes:
        steps: the steps in order.
        base_dir: the folder paths inside the recipe are relative to.
        source: the recipe file, if any (for messages).
        description: the optional description.
    """

    steps: tuple[Step, ...]
    base_dir: Path
    source: str = "recipe"
    description: str | None = None

    def to_data(self) -> dict[str, Any]:
        """The canonical recipe as plain data (every default filled in)."""
        data: dict[str, Any] = {"onnxsurgeon": FORMAT_VERSION}
        if self.description is not None:
            data["description"] = self.description
        data["steps"] = [{s.verb: dict(s.params)} for s in self.steps]
        return data

    def canonical(self) -> str:
        """Canonical JSON: sorted keys, no spaces, defaults filled in. Deterministic."""
        return json.dumps(self.to_data(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    def sha256(self) -> str:
        return hashlib.sha256(self.canonical().encode()).hexdigest()


def _fail(where: str, message: str) -> RecipeError:
    return RecipeError(f"{where}: {message}")


def parse_step(number: int, item: Any, where: str) -> Step:
    """Check one step (``{verb: {key: value}}``) and return it normalized.

    Raises:
        RecipeError: unknown verb or key, bad value, missing or conflicting keys.
    """
    at = f"{where}: step {number}"
    if not isinstance(item, dict) or len(item) != 1:
        keys = list(item) if isinstance(item, dict) else None
        hint = (f" (it has keys {', '.join(map(repr, keys))}; indent the verb's keys under it)"
                if keys else "")
        raise RecipeError(f"{at} must be a mapping with one verb, e.g. '- extract: {{outputs: "
                          f"[logits]}}'{hint}")
    (verb, body), = item.items()
    spec = STEPS.get(str(verb))
    if spec is None:
        raise RecipeError(f"{at}: unknown verb {verb!r}; verbs: {', '.join(STEPS)}"
                          + did_you_mean(str(verb), list(STEPS)))
    at = f"{where}: step {number} ({verb})"
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise RecipeError(f"{at}: the verb's value must be a mapping of keys, got {body!r}")
    aliases = ALIASES.get(spec.name, {})
    given: dict[str, Any] = {}
    for raw_key, value in body.items():
        key = aliases.get(str(raw_key), str(raw_key))
        param = spec.param(key)
        if param is None:
            valid = [p.key for p in spec.params]
            raise RecipeError(
                f"{at}: unknown key {raw_key!r}; {verb} takes "
                f"{', '.join(valid) or 'no keys'}" + did_you_mean(str(raw_key), valid))
        if key in given:
            raise RecipeError(f"{at}: key {key!r} is given twice; give it once")
        if value is None:
            raise RecipeError(f"{at}: key {key!r} has no value; give one or drop the key")
        from .spec import coerce

        try:
            given[key] = coerce(param, value, f"key '{key}'")
        except UsageError as exc:
            raise RecipeError(f"{at}: {exc}") from None
    for param in spec.params:
        if param.required and param.key not in given:
            raise RecipeError(f"{at}: missing key '{param.key}' ({param.help})")
    for group in spec.one_of:
        present = [k for k in group if k in given]
        if len(present) != 1:
            what = "two of" if present else "one of"
            raise RecipeError(f"{at}: give exactly one of the keys {', '.join(group)} "
                              f"(got {what if present else 'none of'} them"
                              f"{': ' + ', '.join(present) if present else ''})")
    for key, needs in spec.requires.items():
        if key in given and needs not in given:
            raise RecipeError(f"{at}: key '{key}' needs key '{needs}'")
    if spec.name == "insert" and "op" in given:
        from ..processing import normalize_params

        try:
            given["params"] = normalize_params(given["op"], given.get("params"))
        except UsageError as exc:
            key = "params" if "parameter" in str(exc) else "op"
            raise RecipeError(f"{at}: key '{key}': {exc}") from None
    for param in spec.params:
        if param.key not in given and param.default is not None:
            given[param.key] = json.loads(json.dumps(param.default))
    return Step(number, spec.name, given)


def parse_recipe(data: Any, *, base_dir: str | Path = ".", source: str = "recipe") -> Recipe:
    """Check recipe ``data`` (parsed YAML/JSON) against the schema.

    Raises:
        RecipeError: one line naming the step, verb and key at fault, with the fix.
    """
    if not isinstance(data, dict):
        raise _fail(source, "a recipe is a mapping with keys 'onnxsurgeon: 1' and 'steps: [...]'")
    printed = data.get("command") == "recipe"   # what 'recipe --json' prints is a recipe too
    for key in data:
        if printed and key in _PRINTED_KEYS:
            continue
        if key not in _TOP_KEYS:
            raise _fail(source, f"unknown top-level key {key!r}; a recipe has "
                        f"{', '.join(_TOP_KEYS)}" + did_you_mean(str(key), _TOP_KEYS))
    version = data.get("onnxsurgeon")
    if version is None:
        raise _fail(source, f"missing 'onnxsurgeon: {FORMAT_VERSION}' (the format version)")
    if version != FORMAT_VERSION or isinstance(version, bool):
        raise _fail(source, f"format version {version!r} is not supported; this onnxsurgeon "
                    f"reads 'onnxsurgeon: {FORMAT_VERSION}'")
    description = data.get("description")
    if description is not None and not isinstance(description, str):
        raise _fail(source, "'description' must be text")
    items = data.get("steps")
    if not isinstance(items, list) or not items:
        raise _fail(source, "'steps' must be a non-empty list of steps")
    steps = tuple(parse_step(k + 1, item, source) for k, item in enumerate(items))
    pending = False
    for step in steps:
        if STEPS[step.verb].make is not None and step is not steps[-1]:
            raise _fail(source, f"{step.label[0].lower()}{step.label[1:]}: a {step.verb} step "
                        "writes a folder of models, so it must be the last step; move it last "
                        "(or use split_stage to keep one stage and go on)")
        if STEPS[step.verb].rewrites:
            pending = True
        elif step.verb == "verify":
            if not pending:
                raise _fail(source, f"{step.label[0].lower()}{step.label[1:]}: no rewrite step "
                            "since the previous checkpoint to verify; move or drop it")
            pending = False
    return Recipe(steps, Path(base_dir), source, description)


def read_recipe_text(text: str, source: str) -> Any:
    """Parse recipe text: JSON when it starts with '{', else YAML (JSON is YAML too)."""
    if text.lstrip().startswith("{"):
        try:
            return json.loads(text)
        except ValueError as exc:
            raise _fail(source, f"not valid JSON ({exc}); fix the syntax") from None
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "syntax error"
        raise _fail(source, f"not valid YAML{where} ({problem}); fix the syntax") from None


def load_recipe(path: str | Path) -> Recipe:
    """Read and check a recipe file (YAML or JSON). Paths inside it are relative to its folder.

    Raises:
        NotFoundError: no such file. RecipeError: the recipe is bad.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise NotFoundError(f"recipe file '{p}' does not exist; check the path") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RecipeError(f"cannot read recipe '{p}': {exc}; give a UTF-8 YAML or JSON file") from None
    return parse_recipe(read_recipe_text(text, str(p)), base_dir=p.resolve().parent, source=str(p))
