"""The typed record each rewrite leaves in ``metadata_props`` (surgery writes it, verify reads it).

Key ``onnxsurgeon.rewrites`` holds a JSON list, one object per rewrite, oldest first. Each object
is the JSON form of one frozen :class:`RewriteRecord` subclass per verb (:class:`ExtractRecord`,
:class:`CopyRecord`, :class:`InsertRecord`, :class:`RerouteRecord`): ``{"op": ..., <fields>}``.
Reading is strict: a missing key, an unknown key or a value of the wrong type is a
:class:`~onnxsurgeon.errors.UsageError` naming it, never a silent default.

Versions: each record type has a ``VERSION``. A record without a ``"version"`` key is version 1
(the format of every record so far); ``to_json`` writes the key only above 1, so version-1 logs
stay byte-identical. A record newer than this onnxsurgeon knows is refused with a message to
upgrade.

A new verb adds its record type here::

    @dataclass(frozen=True)
    class RenameRecord(RewriteRecord):
        op: ClassVar[str] = "rename"      # the JSON "op"; registers the type for from_json
        renames: dict[str, str]           # fields: str, bool, tuple[str, ...], dict[...]

its result type (``RenameResult`` in ``surgery/rename.py``, :class:`Recorded`) derives it in
``record()``, the verb writes ``add_rewrite(model, result.record())``, registers a check for it in
:mod:`onnxsurgeon.verify.rewrite`, and says how to make the rewrite again in ``replay_call``
(the one record -> verb mapping: verify's replay and ``onnxsurgeon recipe MODEL`` both use it). Field names
are the JSON keys, except where ``field(metadata={"json": KEY})`` says otherwise (``from``).
Changing a field's meaning means bumping ``VERSION`` and reading older versions explicitly.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar, Protocol

import onnx

from .errors import UsageError
from .metadata import get_metadata, set_metadata

REWRITES_KEY = "onnxsurgeon.rewrites"

RECORD_TYPES: dict[str, type[RewriteRecord]] = {}
"""JSON ``op`` -> record type; filled by subclassing :class:`RewriteRecord`."""


def _json_key(f: Any) -> str:
    return str(f.metadata.get("json", f.name))


def _plain(value: Any) -> Any:
    """JSON form of a field value: tuples become lists (nested too), mappings plain dicts."""
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
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


@dataclass(frozen=True)
class ExtractRecord(RewriteRecord):
    """extract: the outputs computed and the stop tensors that became inputs."""

    op: ClassVar[str] = "extract"
    outputs: tuple[str, ...]
    inputs: tuple[str, ...]

    def replay_call(self) -> VerbCall:
        return VerbCall("extract", {"outputs": list(self.outputs)}, {"inputs": list(self.inputs)})


@dataclass(frozen=True)
class CopyRecord(RewriteRecord):
    """copy: each output -> its copy; the weights mode; the input replacements (original tensor
    -> tensor the copy reads). Every copied name is ``prefix`` + the original, so
    ``initializers`` / ``nodes`` list only the names the allocator had to change, and
    ``copied`` counts what was copied (see :func:`onnxsurgeon.surgery.copy.copied_names`).
    Records without ``prefix`` (written before the prefix rule) carry the full maps."""

    op: ClassVar[str] = "copy"
    outputs: dict[str, str]
    initializers: dict[str, str]
    nodes: dict[str, str]
    weights: str
    replace_inputs: dict[str, str]
    prefix: str | None = None
    copied: dict[str, int] | None = None

    def copy_prefix(self) -> str:
        """The prefix the copy was made with (older records: read off an output's copy).

        Raises:
            UsageError: an older record whose outputs do not show it.
        """
        if self.prefix is not None:
            return self.prefix
        for orig, new in self.outputs.items():
            at = new.rfind(orig)
            if at >= 0:
                return new[:at]
        raise UsageError("the copy record names no output whose copy contains its name")

    def replay_call(self) -> VerbCall:
        return VerbCall("copy", {"outputs": list(self.outputs)},
                        {"weights": self.weights, "prefix": self.copy_prefix(),
                         "replace_inputs": dict(self.replace_inputs)})


@dataclass(frozen=True)
class InsertRecord(RewriteRecord):
    """insert: the activation, the processed tensor, the block (a built-in name and its
    parameters, or ``"graph"``), its nodes, and what was rerouted."""

    op: ClassVar[str] = "insert"
    at: str
    processed: str
    block: str
    params: dict[str, Any]
    block_nodes: tuple[str, ...]
    rerouted: tuple[str, ...]
    rerouted_outputs: tuple[str, ...]
    as_output: bool
    renamed: dict[str, str] | None = None
    """When ``at`` was a graph output that kept its name: ``{at: <new name of the unprocessed
    tensor>}`` (absent otherwise, so older records read the same)."""

    def replay_call(self) -> VerbCall:
        if self.block == "graph":
            raise UsageError("the inserted block was a user graph or function, which the rewrite "
                             "log does not store")
        options: dict[str, Any] = {"op": self.block, "as_output": self.as_output}
        if self.params:
            options["params"] = dict(self.params)
        if self.at in self.rerouted_outputs:  # a graph output: did it keep its name?
            options["keep_output_name"] = bool(self.renamed)
        return VerbCall("insert", {"at": self.at}, options)


@dataclass(frozen=True)
class RerouteRecord(RewriteRecord):
    """reroute: consumers (node labels) and graph outputs of ``source`` now read ``target``."""

    op: ClassVar[str] = "reroute"
    source: str = field(metadata={"json": "from"})
    target: str = field(metadata={"json": "to"})
    rerouted: tuple[str, ...]
    rerouted_outputs: tuple[str, ...]
    pruned_nodes: tuple[str, ...] | None = None
    """With ``prune``: the nodes removed because no graph output depended on them any more."""
    pruned_initializers: tuple[str, ...] | None = None
    """With ``prune``: the initializers only those nodes read."""

    def replay_call(self) -> VerbCall:
        options: dict[str, Any] = {}
        if not self.rerouted_outputs and self.rerouted:  # only some readers moved
            options["consumers"] = list(self.rerouted)
        if self.pruned_nodes is not None:
            options["prune"] = True
        return VerbCall("reroute", {"source": self.source, "target": self.target}, options)


@dataclass(frozen=True)
class RenameRecord(RewriteRecord):
    """rename: old -> new names of tensors (main graph or nested bodies; or of main-graph nodes,
    with ``nodes``)."""

    op: ClassVar[str] = "rename"
    renamed: dict[str, str]
    nodes: bool

    def replay_call(self) -> VerbCall:
        return VerbCall("rename", {"mapping": dict(self.renamed)}, {"nodes": self.nodes})


@dataclass(frozen=True)
class BypassRecord(RewriteRecord):
    """bypass: the removed nodes, the input slot their readers now read, what was rerouted.

    The optional keys are written only when they have something to say, so a plain bypass's
    record is what it always was: ``modules`` maps a bypassed module path to the node in
    ``removed`` that made what it handed on, ``sources`` such a node to the tensor its readers
    read instead (the module's input, not the node's input ``input``), ``pruned`` and
    ``pruned_initializers`` list what went besides (a module's other nodes; with ``prune`` every
    node no graph output depends on after the bypass) and ``prune`` is True when asked.
    """

    op: ClassVar[str] = "bypass"
    removed: tuple[str, ...]
    input: int
    rerouted: tuple[str, ...]
    rerouted_outputs: tuple[str, ...]
    pruned: tuple[str, ...] | None = None
    pruned_initializers: tuple[str, ...] | None = None
    modules: dict[str, str] | None = None
    sources: dict[str, str] | None = None
    prune: bool | None = None

    def replay_call(self) -> VerbCall:
        by_node = {node: path for path, node in (self.modules or {}).items()}
        options: dict[str, Any] = {"input": self.input}
        if self.prune:
            options["prune"] = True
        return VerbCall("bypass", {"nodes": [by_node.get(n, n) for n in self.removed]}, options)


@dataclass(frozen=True)
class MergeRecord(RewriteRecord):
    """merge: ``connect`` pairs (first-model tensor, second-model input it feeds), the second
    model's renamed names, the prefix used, the merged graph outputs."""

    op: ClassVar[str] = "merge"
    connect: tuple[tuple[str, str], ...]
    renamed: dict[str, str]
    prefix: str
    outputs: tuple[str, ...]

    def replay_call(self) -> VerbCall:
        raise UsageError("the second model of a merge is not stored in the rewrite log")


@dataclass(frozen=True)
class FoldRecord(RewriteRecord):
    """fold: the main-graph tensors that became initializers, the nodes removed, the foldable
    tensors left computed (over ``max_bytes``), the tensors folded inside bodies."""

    op: ClassVar[str] = "fold"
    folded: tuple[str, ...]
    removed: tuple[str, ...]
    kept: tuple[str, ...]
    body_folded: tuple[str, ...]
    max_bytes: int

    def replay_call(self) -> VerbCall:
        return VerbCall("fold", {}, {"max_bytes": self.max_bytes})


@dataclass(frozen=True)
class DimsRecord(RewriteRecord):
    """dims: each graph input's new shape (dims joined by ``x``; a symbol by its name), the
    ``--batch`` asked (``""`` when none), and the nodes whose shape constant now follows the
    input (node label -> how)."""

    op: ClassVar[str] = "dims"
    shapes: dict[str, str]
    batch: str
    rewritten: dict[str, str]

    def replay_call(self) -> VerbCall:
        options: dict[str, Any] = {"inputs": dict(self.shapes)}
        if self.batch:
            options["batch"] = self.batch
        return VerbCall("dims", {}, options)


@dataclass(frozen=True)
class OpsetRecord(RewriteRecord):
    """opset: the default-domain opset before and after onnx's version converter."""

    op: ClassVar[str] = "opset"
    source: int = field(metadata={"json": "from"})
    target: int = field(metadata={"json": "to"})

    def replay_call(self) -> VerbCall:
        return VerbCall("opset", {}, {"to": self.target})


class Recorded(Protocol):
    """A verb's result (``onnxsurgeon.surgery.<Verb>Result``): it carries every resolved name,
    and its record, its ``--json`` payload (:mod:`onnxsurgeon.cli_output`) and its recipe step
    (:func:`onnxsurgeon.recipe.fromlog.step_for_result`) are derived from it."""

    def record(self) -> RewriteRecord:
        """The rewrite record the verb added to the model's log."""
        ...


def rewrites(model: onnx.ModelProto) -> list[dict[str, Any]]:
    """The rewrite log of ``model`` as stored (JSON objects; empty when none or unreadable)."""
    text = get_metadata(model, REWRITES_KEY)
    if text is None:
        return []
    try:
        data = json.loads(text)
    except ValueError:
        return []
    return [r for r in data if isinstance(r, dict)] if isinstance(data, list) else []


def records(model: onnx.ModelProto) -> list[RewriteRecord]:
    """The rewrite log of ``model`` as typed records, oldest first.

    Raises:
        UsageError: a record that does not read (see :meth:`RewriteRecord.from_json`).
    """
    return [RewriteRecord.from_json(r) for r in rewrites(model)]


def as_record(record: RewriteRecord | Mapping[str, Any]) -> RewriteRecord:
    """``record`` typed (a JSON object is read strictly)."""
    return record if isinstance(record, RewriteRecord) else RewriteRecord.from_json(record)


def add_rewrite(model: onnx.ModelProto, record: RewriteRecord | Mapping[str, Any]) -> None:
    """Append ``record`` to the model's rewrite log. Mutates model. Deterministic JSON.

    Raises:
        UsageError: ``record`` is a JSON object that does not read as a record.
    """
    log = rewrites(model)
    log.append(as_record(record).to_json())
    set_metadata(model, {REWRITES_KEY: json.dumps(log, sort_keys=True, separators=(",", ":"))})
