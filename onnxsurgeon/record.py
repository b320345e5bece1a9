"""The typed record each rewrite leaves in ``metadata_props`` (surgery writes it, verify reads it).

Key ``onnxsurgeon.rewrites`` holds a JSON list, one object per rewrite, oldest first. Each object
is the JSON form of one frozen :class:`RewriteRecord` subclass per verb (:class:`ExtractRecord`,
:class:`CopyRecord`, :class:`InsertRecord`, :class:`RerouteRecord`): ``{"op": ..., <fields>}``.
Reading is strict and versioned (:mod:`onnxsurgeon.record_base`, the base of every record:
its JSON round trip, strict reading and ``VERSION``; its names are re-exported here).

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
import re
import sys
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import onnx

from .errors import UsageError
from .metadata import get_metadata, set_metadata
from .record_base import RECORD_TYPES as RECORD_TYPES
from .record_base import REWRITES_KEY as REWRITES_KEY
from .record_base import RewriteRecord as RewriteRecord
from .record_base import VerbCall as VerbCall


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


SITE_KEYS = ("at", "processed", "block_nodes", "rerouted", "rerouted_outputs")
"""The keys of one site of a version-2 :class:`InsertRecord` (+ ``renamed`` when not empty)."""


def site_entry(at: str, processed: str, block_nodes: Any, rerouted: Any, rerouted_outputs: Any,
               renamed: Mapping[str, str], graph: str = "") -> dict[str, Any]:
    """One site of a multi-site insert record (JSON-ready); ``graph``: the path of the body
    holding it ("" for the main graph: no key)."""
    entry: dict[str, Any] = {"at": at, "processed": processed, "block_nodes": list(block_nodes),
                             "rerouted": list(rerouted), "rerouted_outputs": list(rerouted_outputs)}
    if renamed:
        entry["renamed"] = dict(renamed)
    if graph:
        entry["graph"] = graph
    return entry


@dataclass(frozen=True)
class InsertRecord(RewriteRecord):
    """insert: the activation, the processed tensor, the block (a built-in name and its
    parameters, or ``"graph"``), its nodes, and what was rerouted.

    Version 2 (a selector matching several tensors, or a site inside an If/Loop/Scan body) adds
    ``sites``: every site, in node order, each ``{at, processed, block_nodes, rerouted,
    rerouted_outputs[, renamed][, graph]}`` (``graph``: the body's path, for a body site); the
    flat fields repeat the first site. A one-site main-graph record stays version 1, byte for
    byte."""

    op: ClassVar[str] = "insert"
    VERSION: ClassVar[int] = 2
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
    sites: tuple[dict[str, Any], ...] | None = None
    graph: str | None = None
    """The path of the If/Loop/Scan body holding the (first) site; absent for the main graph."""

    def __post_init__(self) -> None:
        for k, site in enumerate(self.sites or ()):
            keys = set(site) - {"renamed", "graph"}
            ok = keys == set(SITE_KEYS) and all(isinstance(site[key], str)
                                                for key in ("at", "processed")) and all(
                isinstance(site[key], (list, tuple)) and all(isinstance(v, str) for v in site[key])
                for key in SITE_KEYS[2:]) and isinstance(site.get("renamed", {}), dict) and (
                isinstance(site.get("graph", ""), str))
            if not ok:
                raise UsageError(f"rewrite record 'insert' site {k} is {json.dumps(site)[:80]}; "
                                 f"a site has the keys {list(SITE_KEYS)} (+ renamed, graph); give the "
                                 "record the verb wrote")

    def to_json(self) -> dict[str, Any]:
        data = super().to_json()
        if self.sites is None:
            data.pop("version", None)  # one site: the version-1 shape
        return data

    def each(self) -> list[InsertRecord]:
        """One single-site record per site (this record itself when it has one site)."""
        if not self.sites:
            return [self]
        return [InsertRecord(at=s["at"], processed=s["processed"], block=self.block,
                             params=dict(self.params), block_nodes=tuple(s["block_nodes"]),
                             rerouted=tuple(s["rerouted"]),
                             rerouted_outputs=tuple(s["rerouted_outputs"]),
                             as_output=self.as_output, renamed=dict(s["renamed"]) if
                             s.get("renamed") else None, graph=s.get("graph") or None)
                for s in self.sites]

    def all_renamed(self) -> dict[str, str]:
        """Every site's ``renamed``, merged."""
        return {k: v for site in self.each() for k, v in (site.renamed or {}).items()}

    def replay_call(self) -> VerbCall:
        if self.sites:  # every site, named exactly (an re: selector of the ONNX names)
            call = self.each()[0].replay_call()
            names = "|".join(re.escape(s["at"]) for s in self.sites)
            outs = [s for s in self.each() if s.at in s.rerouted_outputs]
            every = dict(call.options)
            if outs:
                every["keep_output_name"] = bool(outs[0].renamed)
            return VerbCall("insert", {"at": f"re:(?:{names})"}, every)
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
    graph: str | None = None
    """The path of the If/Loop/Scan body the reroute happened in (absent: the main graph)."""

    def replay_call(self) -> VerbCall:
        options: dict[str, Any] = {}
        if not self.rerouted_outputs and self.rerouted:  # only some readers moved
            options["consumers"] = list(self.rerouted)
        if self.pruned_nodes is not None:
            options["prune"] = True
        # a body's tensor is found again by its address '<body path>/<name>', exactly
        source = f"{self.graph}/{self.source}" if self.graph else self.source
        return VerbCall("reroute", {"source": source, "target": self.target}, options)


@dataclass(frozen=True)
class RenameRecord(RewriteRecord):
    """rename: old -> new names of tensors (main graph or nested bodies; or of main-graph nodes,
    with ``nodes``)."""

    op: ClassVar[str] = "rename"
    renamed: dict[str, str]
    nodes: bool
    bodies: dict[str, dict[str, str]] | None = None
    """With ``nodes``: body path -> old -> new names of nodes inside that If/Loop/Scan body
    (absent when none)."""

    def replay_call(self) -> VerbCall:
        mapping = dict(self.renamed)
        for path, ren in (self.bodies or {}).items():  # a body's node by its address, exactly
            mapping.update((f"{path}/{old}", new) for old, new in ren.items())
        return VerbCall("rename", {"mapping": mapping}, {"nodes": self.nodes})


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
    bodies: dict[str, dict[str, list[str]]] | None = None
    """Nodes removed inside If/Loop/Scan bodies: body path -> ``{removed, rerouted,
    rerouted_outputs, pruned}`` of that body (absent when none)."""

    def replay_call(self) -> VerbCall:
        by_node = {node: path for path, node in (self.modules or {}).items()}
        options: dict[str, Any] = {"input": self.input}
        if self.prune:
            options["prune"] = True
        nodes = [by_node.get(n, n) for n in self.removed]
        for path, body in (self.bodies or {}).items():  # exactly: '<body path>/<label>'
            nodes.extend(f"{path}/{n}" for n in body.get("removed", ()))
        return VerbCall("bypass", {"nodes": nodes}, options)


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
class ReplaceRecord(RewriteRecord):
    """replace: the pattern and the replacement inline (``onnx-base64:`` + a serialized model,
    so the record replays without their files), every site (``nodes`` matched, ``inputs`` and
    ``outputs`` bound, ``replaced``: the new nodes' names, ``graph`` for a body), the pattern
    constants that matched any value, and the tolerance (``rtol``, ``atol``) of the proof."""

    op: ClassVar[str] = "replace"
    pattern: str
    replacement: str
    sites: tuple[dict[str, Any], ...]
    any_constant: tuple[str, ...] | None = None
    tolerance: dict[str, Any] | None = None

    def replay_call(self) -> VerbCall:
        options: dict[str, Any] = {"pattern": self.pattern, "replacement": self.replacement}
        if self.any_constant:
            options["any_constant"] = list(self.any_constant)
        if self.tolerance:
            options["tolerance"] = f"{self.tolerance['rtol']},{self.tolerance['atol']}"
        return VerbCall("replace", {}, options)


@dataclass(frozen=True)
class CleanupRecord(RewriteRecord):
    """cleanup: what was removed, by kind (main-graph node labels, ``<body>/<label>`` for nodes
    of nested bodies, initializer and value_info names, ``domain.name`` of local functions,
    opset domains)."""

    op: ClassVar[str] = "cleanup"
    nodes: tuple[str, ...]
    body_nodes: tuple[str, ...]
    initializers: tuple[str, ...]
    value_info: tuple[str, ...]
    functions: tuple[str, ...]
    opsets: tuple[str, ...]

    def replay_call(self) -> VerbCall:
        return VerbCall("cleanup", {}, {})


@dataclass(frozen=True)
class ToposortRecord(RewriteRecord):
    """toposort: how many nodes moved in each graph the verb reordered (``main``, a body's
    ``<holder label>/<body name>``, ``function <domain.name>``)."""

    op: ClassVar[str] = "toposort"
    moved: dict[str, int]

    def replay_call(self) -> VerbCall:
        return VerbCall("toposort", {}, {})


@dataclass(frozen=True)
class OutputsRecord(RewriteRecord):
    """outputs: the tensors made graph outputs, the graph outputs dropped, and what only the
    dropped ones needed (nodes, initializers) that went with them."""

    op: ClassVar[str] = "outputs"
    added: tuple[str, ...]
    removed: tuple[str, ...]
    pruned_nodes: tuple[str, ...]
    pruned_initializers: tuple[str, ...]

    def replay_call(self) -> VerbCall:
        return VerbCall("outputs", {}, {"add": list(self.added), "remove": list(self.removed)})


@dataclass(frozen=True)
class SetRecord(RewriteRecord):
    """set_values (the CLI's `set`): attributes given new values (``NODE.KEY`` -> the value as text), initializers given
    new values (name -> the ``.npy`` file read, and name -> the sha256 of the new raw bytes),
    and whether shapes could change (``reshape``)."""

    op: ClassVar[str] = "set_values"
    attrs: dict[str, str]
    weights: dict[str, str]
    digests: dict[str, str]
    reshape: bool

    def replay_call(self) -> VerbCall:
        return VerbCall("set_values", {}, {"attrs": dict(self.attrs),
                                           "weights": dict(self.weights),
                                           "reshape": self.reshape})


@dataclass(frozen=True)
class PrecisionRecord(RewriteRecord):
    """precision: the target type ("fp16"/"bf16"), whether graph inputs and outputs stayed
    float32, the ``block`` arguments as given, every node kept in float32 -> why (the
    ``--auto-block`` decisions among them), and the budget (``rtol``, ``atol``) verify judges
    the outputs under (absent: the precision policy's default)."""

    op: ClassVar[str] = "precision"
    to: str
    keep_io_types: bool
    blocked: tuple[str, ...]
    kept: dict[str, str]
    budget: dict[str, Any] | None = None

    def replay_call(self) -> VerbCall:
        auto = {k: v for k, v in self.kept.items() if v.startswith("auto-block")}
        options: dict[str, Any] = {"to": self.to, "keep_io_types": self.keep_io_types,
                                   "block": list(self.blocked)}
        if auto:
            options["keep"] = auto
        if self.budget:
            options["budget"] = f"{self.budget['rtol']!r},{self.budget['atol']!r}"
        return VerbCall("precision", {}, options)


@dataclass(frozen=True)
class FoldRecord(RewriteRecord):
    """fold: the main-graph tensors that became initializers, the nodes removed, the foldable
    tensors left computed (over ``max_bytes``), the tensors folded inside bodies; with
    ``fuse``, the simplifications made (``{"rule", "nodes", "into"}`` each, see
    :mod:`onnxsurgeon.surgery.fuse`; ``"graph"`` too for one inside a body or local
    function)."""

    op: ClassVar[str] = "fold"
    folded: tuple[str, ...]
    removed: tuple[str, ...]
    kept: tuple[str, ...]
    body_folded: tuple[str, ...]
    max_bytes: int
    fused: tuple[dict[str, Any], ...] = ()
    fuse: bool = False  # absent in records written before fold fused: they did not

    def replay_call(self) -> VerbCall:
        return VerbCall("fold", {}, {"max_bytes": self.max_bytes, "fuse": self.fuse})


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


@dataclass(frozen=True)
class SplitRecord(RewriteRecord):
    """split (op ``split_stage``, the verb that replays it): this model is stage ``stage`` of
    ``stages`` of the model the log continues, cut
    right after the producers of ``at`` (every cut of the split) balancing ``by`` at ``dims``;
    the stage reads ``inputs`` from earlier stages (the graph inputs it reads besides), writes
    ``outputs`` and costs ``cost`` (of ``by``)."""

    op: ClassVar[str] = "split_stage"
    stage: int
    stages: int
    at: tuple[str, ...]
    by: str
    dims: dict[str, int]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    cost: int

    def replay_call(self) -> VerbCall:
        options: dict[str, Any] = {"at": list(self.at), "stage": self.stage, "by": self.by}
        if self.dims:
            options["dims"] = dict(self.dims)
        return VerbCall("split_stage", {}, options)


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


def replace_last_rewrite(model: onnx.ModelProto, record: RewriteRecord) -> None:
    """Make ``record`` the last entry of the model's log in place of the one there (a verb
    built on another verb logs its own record only). Mutates model."""
    log = rewrites(model)[:-1] + [record.to_json()]
    set_metadata(model, {REWRITES_KEY: json.dumps(log, sort_keys=True, separators=(",", ":"))})


def in_ipython() -> bool:
    """True inside a running IPython session (a notebook's kernel, the IPython shell), not
    merely once IPython is imported (TensorFlow imports it). O(1)."""
    get = getattr(sys.modules.get("IPython"), "get_ipython", None)
    return get is not None and get() is not None


RECENT: deque[tuple[str, onnx.ModelProto, onnx.ModelProto | None]] = deque(maxlen=8)
"""In an IPython session only (:func:`in_ipython`): the last rewrites logged (record JSON, the model written to, a
weightless copy of that model as it was before the rewrite, or None when no verb's edit took
one), so that a verb's result shown in a notebook draws the diff of its rewrite
(``onnxsurgeon.notebook``); a bounded queue, empty outside IPython."""

_BEFORE: dict[int, tuple[onnx.ModelProto, onnx.ModelProto]] = {}
"""In an IPython session only: ``id(model)`` -> (model, its copy before the verb now editing it
began); :func:`add_rewrite` moves the copy into :data:`RECENT`. Edits that log nothing (a probe
on a private copy) leave theirs here: at most :data:`_PENDING` are kept."""
_PENDING = 2


def remember_before(model: onnx.ModelProto, before: onnx.ModelProto) -> None:
    """Keep ``before`` (a weightless copy of ``model`` as it is now) for the rewrite a verb is
    about to make on ``model``. Called by ``edit.Edit`` inside IPython only."""
    _BEFORE.pop(id(model), None)
    _BEFORE[id(model)] = (model, before)
    while len(_BEFORE) > _PENDING:
        del _BEFORE[next(iter(_BEFORE))]


def add_rewrite(model: onnx.ModelProto, record: RewriteRecord | Mapping[str, Any]) -> None:
    """Append ``record`` to the model's rewrite log. Mutates model. Deterministic JSON.

    Raises:
        UsageError: ``record`` is a JSON object that does not read as a record.
    """
    log = rewrites(model)
    entry = as_record(record).to_json()
    log.append(entry)
    if in_ipython():
        held = _BEFORE.pop(id(model), None)
        before = held[1] if held is not None and held[0] is model else None
        RECENT.append((json.dumps(entry, sort_keys=True), model, before))
    set_metadata(model, {REWRITES_KEY: json.dumps(log, sort_keys=True, separators=(",", ":"))})
