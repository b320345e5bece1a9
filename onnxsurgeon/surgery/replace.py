"""``replace``: every match of a pattern P replaced by a renamed-in copy of a replacement R.

P and R are ONNX graphs (:func:`onnxsurgeon.pattern.load_pattern`); the matches are those of
:func:`onnxsurgeon.pattern.find_matches` (main graph and If/Loop/Scan bodies, never overlapping).
R's inputs and outputs bind to each site's by position; R's outputs take the names of the site's
outputs, so no reader moves. R's weights are added once and shared by every site. Its opset is
reconciled with the host's as ``insert`` does (``_opsets.reconcile``), its local functions and
other domains merged (``_blocks``). Every site is checked (dtypes, and the shapes R infers for
the site's input types) before anything changes; then one :class:`~onnxsurgeon.edit.Edit`
rebuilds each touched graph's node list once.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import chain, compress, repeat
from operator import attrgetter, itemgetter, methodcaller
from pathlib import Path
from typing import Any

import onnx

from ..edit import Edit
from ..errors import RewriteError, UsageError
from ..io import Model, as_model
from ..names import NameAllocator
from ..pattern import Match, Pattern, find_matches, load_pattern, pattern_bytes
from ..pattern.declared import declared_rank
from ..record import ReplaceRecord, add_rewrite
from ..select import drop_missing, name_map
from ..session import indexed
from ..types import dtype_name
from ._blocks import merge_functions, merge_opsets
from ._edges import check_types
from ._opsets import reconcile
from ._replicas import Template, build_copies
from ._sitetypes import (  # noqa: F401  (site_type_lookup, _SiteTypes: re-exported)
    _body_types,
    _BodyTypes,
    _dtype_rank,
    _elem,
    _Key,
    _shape,
    _SiteTypes,
    _type_of,
    site_type_lookup,
)

_OUTPUT = attrgetter("output")
_TYPE = attrgetter("type")
_ELEM = attrgetter("tensor_type.elem_type")  # read only: sets no field; 0 unless set
_TYPE_KEY = methodcaller("SerializeToString", deterministic=True)
PatternSource = str | Path | bytes | onnx.ModelProto | onnx.GraphProto | Pattern


@dataclass(frozen=True)
class ReplaceResult:
    """What ``replace`` did.

    Attributes:
        sites: every match replaced, in the order found (main graph first).
        replaced: per site, the names of the nodes R's copy has in the model.
        pattern: the pattern, inline (:data:`onnxsurgeon.pattern.INLINE_PREFIX`).
        replacement: the replacement as used (host opsets when it had none), inline.
        any_constant: the pattern constants that matched any value of their shape class.
        tolerance: (rtol, atol) the proof compares under, None: exactly.
        removed_constants: Constant nodes only a match read, removed with it (labels).
    """

    sites: list[Match]
    replaced: list[list[str]]
    pattern: str
    replacement: str
    any_constant: tuple[str, ...] = ()
    tolerance: tuple[float, float] | None = None
    removed_constants: list[str] = field(default_factory=list)

    def site_json(self) -> list[dict[str, Any]]:
        """The sites as ``--json`` and the record list them."""
        listed = []
        for site, new in zip(self.sites, self.replaced, strict=True):
            data = site.to_json()
            data["replaced"] = list(new)
            listed.append(data)
        return listed

    def record(self) -> ReplaceRecord:
        """The rewrite record of this replace (the sites, P and R inline: it replays)."""
        tol = None if self.tolerance is None else {"rtol": self.tolerance[0],
                                                    "atol": self.tolerance[1]}
        return ReplaceRecord(pattern=self.pattern, replacement=self.replacement,
                             sites=tuple(self.site_json()),
                             any_constant=tuple(self.any_constant) or None, tolerance=tol)


def _as_pattern(source: PatternSource, any_constant: Iterable[str], what: str) -> Pattern:
    if isinstance(source, Pattern):
        return source
    return load_pattern(source, any_constant=any_constant, what=what)


def _with_opsets(r: Pattern, host: onnx.ModelProto) -> onnx.ModelProto:
    """R as a standalone model: its own opsets, or (a bare graph) the host's."""
    model = onnx.ModelProto()
    model.CopyFrom(r.model)
    if not r.has_opsets or not model.opset_import:
        e = Edit.of(model)
        e.add_opsets(host.opset_import)
        e.set_ir_version(max(host.ir_version, 7))
    return model


def _infer(block: onnx.ModelProto, types: Sequence[onnx.TypeProto | None],
           label: str) -> list[onnx.TypeProto | None]:
    """R's output types when its inputs have ``types`` (strict inference: R that cannot take
    them is refused)."""
    probe = onnx.ModelProto()
    probe.CopyFrom(block)
    inits = {t.name for t in probe.graph.initializer}
    real = [vi for vi in probe.graph.input if vi.name not in inits]
    for vi, t in zip(real, types, strict=True):
        if t is not None:
            vi.type.CopyFrom(t)
    for vi in (*probe.graph.output, *probe.graph.value_info):  # ``float y``: any rank, inferred
        if vi.type.HasField("tensor_type") and declared_rank(vi.type) is None:
            vi.type.tensor_type.ClearField("shape")
    try:
        inferred = onnx.shape_inference.infer_shapes(probe, check_type=True, strict_mode=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError) as exc:
        first = (str(exc).strip().splitlines() or ["inference failed"])[0][:200]
        raise RewriteError(f"{label} cannot take this site's inputs ({first}); make it fit "
                           "their shapes and dtypes") from None
    return [vi.type if vi.type.WhichOneof("value") else None for vi in inferred.graph.output]


def _check_sites(sites: Sequence[Match], r: onnx.ModelProto, p: Pattern,
                 types: _SiteTypes | _BodyTypes,
                 label: str) -> None:
    """Refuse the first site (in order) R cannot take: its inputs, or other dtypes or shapes
    out. The sites' signatures (their bound tensors' types) column by column, each tensor's
    type looked up once; R inferred once per distinct signature. O(sites x pattern I/O)."""
    cols = [[site.inputs[pin] for site in sites] for pin in p.inputs]
    cols += [[site.outputs[pout] for site in sites] for pout in p.outputs]
    types.fill(chain.from_iterable(cols))
    memo = types.memo
    keys = [list(map(memo.__getitem__, col)) for col in cols]
    signatures = list(zip(*keys, strict=True))  # a pattern has an output: keys is not empty
    first = dict(zip(reversed(signatures), range(len(signatures) - 1, -1, -1), strict=True))
    cache: dict[tuple[_Key, ...], list[onnx.TypeProto | None]] = {}
    n_in = len(p.inputs)
    for key, k in sorted(first.items(), key=itemgetter(1)):
        bound = [col[k] for col in cols]
        _check_signature(sites[k], r, key, bound[:n_in], bound[n_in:], cache, label)


def _check_signature(site: Match, r: onnx.ModelProto, key: tuple[_Key, ...], ins: list[str],
                     outs: list[str], cache: dict[tuple[_Key, ...], list[onnx.TypeProto | None]],
                     label: str) -> None:
    """:func:`_check_site` of a signature ``key`` not seen before."""
    in_types = list(map(_type_of, key[:len(ins)]))
    out_types = list(map(_type_of, key[len(ins):]))
    inits = {t.name for t in r.graph.initializer}
    r_inputs = [vi for vi in r.graph.input if vi.name not in inits]
    for vi, name, t in zip(r_inputs, ins, in_types, strict=True):
        want = vi.type if vi.type.WhichOneof("value") else None
        # R's declared shape limits the rank as P's does: only where a dim has a fixed size
        want_shape = _shape(want) if want is not None and declared_rank(want) is not None \
            else None
        check_types(f"site {site.labels[-1]}: replacement input '{vi.name}'", vi.name, name,
                    _elem(want), _elem(t), want_shape, _shape(t))
    inferred = _infer(r, in_types, f"site {site.labels[-1]}: replacement '{label}'")
    for k, (name, got, have_t) in enumerate(zip(outs, inferred, out_types, strict=True)):
        have = _elem(have_t)
        if have and _elem(got) and have != _elem(got):
            raise RewriteError(
                f"site {site.labels[-1]}: replacement output {k} is {dtype_name(_elem(got))} but "
                f"the pattern's output '{name}' is {dtype_name(have)}; make R keep the dtype")
        check_types(f"site {site.labels[-1]}: replacement output {k}", f"output {k}", name,
                    _elem(got), have, _shape(got), _shape(have_t))
    cache[key] = inferred


def _check_replacement(r_model: onnx.ModelProto, label: str) -> None:
    """Refuse an R onnx.checker refuses. Its graph inputs and outputs may be untyped, as P's
    may (``g (x) => (y) { y = Relu(x) }``), or of unknown rank (a tensor type without a
    shape): they bind to the sites' tensors and take their types, so the check reads them as
    tensors of any shape."""
    probe = onnx.ModelProto()
    probe.CopyFrom(r_model)
    for vi in (*probe.graph.input, *probe.graph.output):
        if not vi.type.WhichOneof("value"):
            vi.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
        if vi.type.HasField("tensor_type") and not vi.type.tensor_type.HasField("shape"):
            vi.type.tensor_type.shape.SetInParent()  # any rank; the plain checker reads none
    try:
        onnx.checker.check_model(probe)
    except onnx.checker.ValidationError as exc:
        first = (str(exc).strip().splitlines() or ["invalid"])[0][:160]
        raise RewriteError(f"replacement '{label}' is not a valid ONNX model ({first}); "
                           "repair it") from None


def _tolerance(value: tuple[float, float] | str | None) -> tuple[float, float] | None:
    if value is None:
        return None
    try:
        parts = [float(v) for v in (value.split(",") if isinstance(value, str) else value)]
    except (TypeError, ValueError):
        parts = []
    if len(parts) != 2 or not all(0 <= v < float("inf") for v in parts):  # NaN fails too
        raise UsageError(f"tolerance must be RTOL,ATOL (two finite numbers >= 0), got {value!r}")
    return parts[0], parts[1]


def replace(
    model: Model | onnx.ModelProto,
    /,
    *,
    pattern: PatternSource,
    replacement: PatternSource,
    any_constant: Iterable[str] = (),
    tolerance: tuple[float, float] | str | None = None,
) -> ReplaceResult:
    """Replace every match of ``pattern`` by a copy of ``replacement``. Mutates model.

    Matching follows :mod:`onnxsurgeon.pattern` (``any_constant``: pattern constants that
    match any constant of their dtype and rank). R's inputs and outputs bind to P's by
    position; R's outputs take the site's output names. ``tolerance`` (rtol, atol) is how the
    proof (``verify``) compares R with P at each site when R computes the same function
    differently (a fused op); None: exactly; also written ``"RTOL,ATOL"``.

    Before:  x -> Add(x, b) -> s -> Relu -> y -> {fc, <output y>}       (P: Relu(Add(p, q)))
    After:   x -> R(x, b) -> y -> {fc, <output y>}                       (every match)

    O(nodes) of the matching plus O(sites x |R|) and one rebuild per touched graph.

    Raises:
        NotFoundError / InvalidModelError: a pattern file that is missing or not ONNX.
        UsageError: P and R have different numbers of inputs or outputs, bad tolerance.
        RewriteError: no match; a site R cannot take (dtype, shape); opsets that do not
            reconcile; a multi-output site whose outputs are read before its last node.
    """
    m = as_model(model)
    host = m.proto
    constants = tuple(any_constant)
    p = _as_pattern(pattern, constants, "pattern")
    r = _as_pattern(replacement, (), "replacement")
    if len(p.inputs) != len(r.inputs) or len(p.outputs) != len(r.outputs):
        raise UsageError(
            f"pattern '{p.label}' has {len(p.inputs)} inputs and {len(p.outputs)} outputs but "
            f"replacement '{r.label}' has {len(r.inputs)} and {len(r.outputs)}; they bind by "
            "position, so give them the same numbers")
    tolerance = _tolerance(tolerance)
    index = indexed(m)  # load's int dataflow graph rides along when the model is unchanged
    types = _SiteTypes(index, len(index.graph.node))
    lookup = site_type_lookup(index, types)
    found = find_matches(index, p, types=lookup)
    if not found.matches:
        found = find_matches(index, p, explain=True, types=lookup)  # the first near miss for the message
        first = found.misses[0] if found.misses else "no node of the anchor's op type"
        raise RewriteError(f"pattern '{p.label}' matches nothing ({found.candidates} candidates; "
                           f"first: {first}); run 'onnxsurgeon match --explain' for every miss")
    r_model = _with_opsets(r, host)
    _check_replacement(r_model, r.label)
    stored = pattern_bytes(Pattern(r_model, r.inputs, r.outputs, r.constants, r.nodes,
                                   r.producer, label=r.label))
    block, new_opset = reconcile(r_model, host, r.label)
    opsets = merge_opsets(block, host, r.label)
    functions = merge_functions(block, host)
    main_sites = [site for site in found.matches if not site.graph]
    _check_sites(main_sites, block, p, types, r.label)
    body_sites: dict[str, list[Match]] = {}
    for site in found.matches:
        if site.graph:
            body_sites.setdefault(site.graph, []).append(site)
    if body_sites:  # a body's types are its own: checked body by body
        body_types = _body_types(host, types, found.graphs)
        for path, sites in body_sites.items():
            _check_sites(sites, block, p, body_types(path), r.label)
    for site in found.matches:
        at = site.nodes[-1]  # ascending
        if at - site.nodes[0] + 1 == len(site.nodes):
            continue  # no node between the site's own
        g = found.graphs[site.graph]
        outs = set(site.outputs.values())
        inside = set(site.nodes)
        for j in range(min(site.nodes), at):
            read = [n for n in g.node[j].input if n in outs]
            if j not in inside and read:  # (toposort keeps this order: it is topological)
                raise RewriteError(
                    f"site {list(site.labels)}: node '{g.node[j].name or g.node[j].op_type}' "
                    f"reads its output '{read[0]}' between its nodes, and the replacement goes "
                    f"where its last node is; split the pattern at '{read[0]}' (one pattern "
                    "computing it, one reading it)")
    names = NameAllocator.for_index(index)
    template = Template(block)
    inits = list(block.graph.initializer)
    stem = Path(r.label).stem or "replacement"
    weights = {t.name: names.fresh(f"{stem}/{t.name}") for t in inits}
    template.prepare(weights)
    copies = build_copies(template, found.matches, p, weights, names, stem)
    removed_constants: list[str] = []
    dead_names: set[str] = set()
    # the names the sites' removed tensors leave behind matter only to value_info entries and
    # the name map: read the removed nodes' outputs only when there are some
    named = bool(host.graph.value_info) or bool(name_map(host))
    edges = index.known_int_graph()
    by_ids = named and edges is not None  # the main graph's removed outputs from the ints
    for site in found.matches:
        if not site.dead_constants and not named:
            continue
        g = found.graphs[site.graph]
        removed_constants.extend(g.node[j].name or f"Constant#{j}" for j in site.dead_constants)
        if named and not (by_ids and not site.graph):
            dead_names.update(chain.from_iterable(map(_OUTPUT, map(
                g.node.__getitem__, (*site.nodes, *site.dead_constants)))))
            dead_names.difference_update(site.outputs.values())
    if by_ids and "" in copies.plans:
        gone = [0] * len(host.graph.node)  # node id -> removed, then its outputs by name
        deque(map(gone.__setitem__, copies.plans[""][0], repeat(1)), 0)
        dead_names.update(compress(index.producer, map(gone.__getitem__,
                                                        index.producer.values())))
        dead_names.difference_update(chain.from_iterable(
            site.outputs.values() for site in main_sites))
    dead_names.discard("")

    listed = index.listed_value_info  # the value_info entries as loaded: asked before editing

    # ------------------------------------------------------------------ mutate (all checked)
    e = Edit(index)
    if inits:
        e.add_initializers(inits, made=True, names=[weights[t.name] for t in inits])
    for path, (removed, inserted) in copies.plans.items():
        if path:
            e.splice_nodes(removed, inserted, graph=found.graphs[path])
        else:
            e.splice_nodes(removed, inserted, written=copies.written,
                           stand_ins=copies.stand_ins)
    if dead_names:
        e.drop_value_info(dead_names, listed=listed)
    if new_opset is not None:
        e.set_default_opset(new_opset)
    if opsets:
        e.add_opsets(opsets)
    if functions:
        e.add_functions(functions)
    drop_missing(host, lambda name: name not in dead_names)
    e.hand_on(m)
    result = ReplaceResult(found.matches, copies.replaced, pattern_bytes(p), stored, constants,
                           tolerance, removed_constants)
    add_rewrite(host, result.record())
    return result
