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

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import chain
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import Any

import onnx

from ..edit import Edit
from ..errors import RewriteError, UsageError
from ..index import GraphIndex, has_subgraphs
from ..io import Model, as_model
from ..names import NameAllocator
from ..pattern import Match, Pattern, find_matches, load_pattern, pattern_bytes
from ..record import ReplaceRecord, add_rewrite
from ..select import drop_missing, name_map
from ..session import indexed
from ..types import TypeOracle, dtype_name, infer_value_infos, is_complete
from ._blocks import merge_functions, merge_opsets
from ._edges import check_types
from ._opsets import reconcile

_OUTPUT = attrgetter("output")
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
        return [{**site.to_json(), "replaced": list(new)}
                for site, new in zip(self.sites, self.replaced, strict=True)]

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


class _SiteTypes:
    """Types of the model's tensors for the per-site checks, each looked up once: declared
    (value_info, initializers) first, then onnx shape inference (run once; its complete types
    are what the oracle would answer), the type oracle only for the rest."""

    def __init__(self, index: GraphIndex) -> None:
        self.index = index
        self.oracle: TypeOracle | None = None
        self.inferred: dict[str, onnx.ValueInfoProto] | None = None
        self.memo: dict[str, tuple[bytes, onnx.TypeProto | None]] = {}

    def of(self, name: str) -> tuple[bytes, onnx.TypeProto | None]:
        found = self.memo.get(name)
        if found is not None:
            return found
        index = self.index
        vi = index.value_info.get(name)
        t: onnx.TypeProto | None = None
        if vi is not None and vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            t = vi.type
        elif index.initializers.get(name, -1) >= 0:
            init = index.graph.initializer[index.initializers[name]]
            t = onnx.helper.make_tensor_type_proto(init.data_type, list(init.dims))
        else:
            info = None
            if name not in index.inputs and name not in index.outputs:
                if self.inferred is None:  # inference once, as the oracle runs it
                    self.inferred = infer_value_infos(index.model)
                info = self.inferred.get(name)
            if not is_complete(info):
                if self.oracle is None:
                    self.oracle = TypeOracle(index)
                info = self.oracle.value_info(name)
            t = info.type if info is not None and info.type.WhichOneof("value") else None
        found = (t.SerializeToString(deterministic=True) if t is not None else b"-", t)
        self.memo[name] = found
        return found


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
    try:
        inferred = onnx.shape_inference.infer_shapes(probe, check_type=True, strict_mode=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError) as exc:
        first = (str(exc).strip().splitlines() or ["inference failed"])[0][:200]
        raise RewriteError(f"replacement '{label}' cannot take this site's inputs ({first}); "
                           "make it fit their shapes and dtypes") from None
    return [vi.type if vi.type.WhichOneof("value") else None for vi in inferred.graph.output]


def _shape(t: onnx.TypeProto | None) -> list[int | str | None] | None:
    if t is None or not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
            for d in t.tensor_type.shape.dim]


def _elem(t: onnx.TypeProto | None) -> int:
    return int(t.tensor_type.elem_type) if t is not None and t.HasField("tensor_type") else 0


def _check_site(site: Match, r: onnx.ModelProto, p: Pattern, types: _SiteTypes | None,
                cache: dict[tuple[bytes, ...], list[onnx.TypeProto | None]], label: str) -> None:
    """Refuse the site when R cannot take its inputs or gives other dtypes or shapes (once per
    distinct signature of the site's types)."""
    if types is None:
        return
    ins = [site.inputs[n] for n in p.inputs]
    outs = [site.outputs[n] for n in p.outputs]
    found_in = [types.of(n) for n in ins]
    found_out = [types.of(n) for n in outs]
    key = tuple(k for k, _ in (*found_in, *found_out))
    if key in cache:
        return
    in_types = [t for _, t in found_in]
    inits = {t.name for t in r.graph.initializer}
    r_inputs = [vi for vi in r.graph.input if vi.name not in inits]
    for vi, name, t in zip(r_inputs, ins, in_types, strict=True):
        want = vi.type if vi.type.WhichOneof("value") else None
        check_types(f"site {site.labels[-1]}: replacement input '{vi.name}'", vi.name, name,
                    _elem(want), _elem(t), _shape(want), _shape(t))
    inferred = _infer(r, in_types, label)
    for k, (name, got, (_, have_t)) in enumerate(zip(outs, inferred, found_out, strict=True)):
        have = _elem(have_t)
        if have and _elem(got) and have != _elem(got):
            raise RewriteError(
                f"site {site.labels[-1]}: replacement output {k} is {dtype_name(_elem(got))} but "
                f"the pattern's output '{name}' is {dtype_name(have)}; make R keep the dtype")
        check_types(f"site {site.labels[-1]}: replacement output {k}", f"output {k}", name,
                    _elem(got), have, _shape(got), _shape(have_t))
    cache[key] = inferred


class _Template:
    """R prepared once: its nodes' reads and writes by name, which names it defines, which of
    its outputs it hands on from an input or a weight (an Identity owns those)."""

    def __init__(self, r: onnx.ModelProto) -> None:
        g = r.graph
        inits = {t.name for t in g.initializer}
        self.r = r
        self.inputs = [vi.name for vi in g.input if vi.name not in inits]
        self.outputs = [vi.name for vi in g.output]
        self.made = [o for node in g.node for o in node.output if o]
        self.nested = any(node.attribute and has_subgraphs(node) for node in g.node)
        self.nodes = list(g.node)
        labels = [n.name or n.op_type for n in self.nodes]
        seen: dict[str, int] = {}
        self.labels: list[str] = []
        """The node labels as :meth:`NameAllocator.fresh` gives them when no name is taken
        (a repeated base gets ``__1``, ``__2``...)."""
        for label in labels:
            k = seen.get(label, 0)
            seen[label] = k + 1
            self.labels.append(label if k == 0 else f"{label}__{k}")
        self.label_bases = labels
        self.made_set = set(self.made)
        self.specs = [(list(n.input), list(n.output), n.op_type, n.domain, list(n.attribute))
                      for n in self.nodes]
        """Per node: its inputs, outputs, op type, domain and attributes, read once."""
        self.plan: list[tuple[Callable[[list[str]], Sequence[str]],
                              Callable[[list[str]], Sequence[str]], str, str,
                              list[onnx.AttributeProto]]] | None = None
        self.inner: list[str] = []
        self.literals: list[str] = []

    def prepare(self, weights: dict[str, str]) -> None:
        """:attr:`plan`: each node's inputs and outputs as positions in a site's list of names
        (R's inputs, its outputs, its inner tensors fresh, the weights' shared names), when no
        output is handed straight on and R holds no body; else None (:func:`_copy_for` maps
        names one by one)."""
        inputs, made = set(self.inputs), self.made_set
        if self.nested or any(o not in made or o in inputs for o in self.outputs) or len(
                self.made) != len(made) or len(set(self.outputs)) != len(self.outputs):
            return
        slots = {name: k for k, name in enumerate([*self.inputs, *self.outputs])}
        fixed = {*slots, *weights}
        self.inner = [n for n in self.made if n not in fixed]
        for n in self.inner:
            slots[n] = len(slots)
        literal: dict[str, int] = {}
        for ins, outs, *_ in self.specs:
            for x in (*ins, *outs):
                if x not in slots and x not in literal:
                    literal[x] = len(slots) + len(literal)
        self.literals = [weights.get(x, x) for x in literal]
        slots.update(literal)

        def getter(names: list[str]) -> Callable[[list[str]], Sequence[str]]:
            at = [slots[x] for x in names]
            if len(at) > 1:
                return itemgetter(*at)
            if at:
                k = at[0]

                def one(vals: list[str]) -> Sequence[str]:
                    return (vals[k],)

                return one
            return lambda vals: ()

        self.plan = [(getter(ins), getter(outs), op, domain, attrs)
                     for ins, outs, op, domain, attrs in self.specs]


def _quick_copy(tpl: _Template, site: Match, p: Pattern, names: NameAllocator,
                prefix: str) -> list[onnx.NodeProto]:
    """:func:`_copy_for` by :attr:`_Template.plan` (C-level slot lookups). O(|R|)."""
    assert tpl.plan is not None
    inner = tpl.inner
    wanted = [prefix + n for n in inner] + [prefix + n for n in tpl.labels]
    if names.claim(wanted):  # no name taken: every base is its own answer
        fresh, labels = wanted[:len(inner)], wanted[len(inner):]
    else:
        fresh = names.fresh_many([prefix + n for n in inner])
        labels = names.fresh_many([prefix + n for n in tpl.label_bases])
    vals = [*map(site.inputs.__getitem__, p.inputs), *map(site.outputs.__getitem__, p.outputs),
            *fresh, *tpl.literals]
    nodes = []
    for (ins, outs, op, domain, attrs), label in zip(tpl.plan, labels, strict=True):
        node = onnx.NodeProto(input=ins(vals), output=outs(vals), name=label, op_type=op)
        if domain:
            node.domain = domain
        if attrs:
            node.attribute.extend(attrs)
        nodes.append(node)
    return nodes


def _copy_for(tpl: _Template, site: Match, p: Pattern, weights: dict[str, str],
              names: NameAllocator, prefix: str) -> list[onnx.NodeProto]:
    """R's nodes renamed into the site: inputs -> the site's inputs, outputs -> the site's
    outputs, weights -> the shared names, the rest fresh under ``prefix``. O(|R|)."""
    fixed = dict(zip(tpl.inputs, (site.inputs[n] for n in p.inputs), strict=True))
    targets = [site.outputs[n] for n in p.outputs]
    made = tpl.made_set
    passthrough: list[tuple[str, str]] = []
    for name, target in zip(tpl.outputs, targets, strict=True):
        if name in made and name not in fixed:
            fixed[name] = target
        else:  # R hands an input or a weight straight on: an Identity owns the output
            passthrough.append((name, target))
    fixed.update(weights)
    if tpl.nested:
        block = onnx.ModelProto()
        block.CopyFrom(tpl.r)
        g = block.graph
        e = Edit.of(block)
        e.rename_scoped([g], {}, depth=0, define=lambda name: fixed[name] if name in fixed
                        else names.fresh(prefix + name))
        e.name_every_node([g], lambda node: names.fresh(prefix + (node.name or node.op_type)))
        nodes = list(g.node)
    else:
        inner = [n for n in tpl.made if n not in fixed]
        wanted = [prefix + n for n in inner] + [prefix + n for n in tpl.labels]
        if names.claim(wanted):  # no name taken: every base is its own answer
            fresh, labels = wanted[:len(inner)], wanted[len(inner):]
        else:
            fresh = names.fresh_many([prefix + n for n in inner])
            labels = names.fresh_many([prefix + n for n in tpl.label_bases])
        fixed.update(zip(inner, fresh, strict=True))
        get = fixed.get
        nodes = []
        for (ins, outs, op, domain, attrs), label in zip(tpl.specs, labels, strict=True):
            node = onnx.NodeProto(input=[get(x, x) for x in ins],
                                  output=[get(x, x) for x in outs], name=label, op_type=op)
            if domain:
                node.domain = domain
            if attrs:
                node.attribute.extend(attrs)
            nodes.append(node)
    for name, target in passthrough:
        src = fixed.get(name, name)
        nodes.append(onnx.helper.make_node("Identity", [src], [target],
                                           name=names.fresh(prefix + "Identity")))
    return nodes





def _tolerance(value: tuple[float, float] | str | None) -> tuple[float, float] | None:
    if value is None:
        return None
    try:
        parts = [float(v) for v in (value.split(",") if isinstance(value, str) else value)]
    except (TypeError, ValueError):
        parts = []
    if len(parts) != 2 or min(parts) < 0:
        raise UsageError(f"tolerance must be RTOL,ATOL (two numbers >= 0), got {value!r}")
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
    found = find_matches(index, p)
    if not found.matches:
        found = find_matches(index, p, explain=True)  # the first near miss for the message
        first = found.misses[0] if found.misses else "no node of the anchor's op type"
        raise RewriteError(f"pattern '{p.label}' matches nothing ({found.candidates} candidates; "
                           f"first: {first}); run 'onnxsurgeon match --explain' for every miss")
    r_model = _with_opsets(r, host)
    try:
        onnx.checker.check_model(r_model)
    except onnx.checker.ValidationError as exc:
        first = (str(exc).strip().splitlines() or ["invalid"])[0][:160]
        raise RewriteError(f"replacement '{r.label}' is not a valid ONNX model ({first}); "
                           "repair it") from None
    stored = pattern_bytes(Pattern(r_model, r.inputs, r.outputs, r.constants, r.nodes,
                                   r.producer, label=r.label))
    block, new_opset = reconcile(r_model, host, r.label)
    opsets = merge_opsets(block, host, r.label)
    functions = merge_functions(block, host)
    types = _SiteTypes(index)
    cache: dict[tuple[bytes, ...], list[onnx.TypeProto | None]] = {}
    for site in found.matches:
        _check_site(site, block, p, types if not site.graph else None, cache, r.label)
    plans: dict[str, tuple[set[int], dict[int, list[onnx.NodeProto]]]] = {}
    for site in found.matches:
        g = found.graphs[site.graph]
        at = max(site.nodes)
        outs = set(site.outputs.values())
        inside = set(site.nodes)
        for j in range(min(site.nodes), at):
            if j not in inside and any(n in outs for n in g.node[j].input):
                raise RewriteError(
                    f"site {list(site.labels)}: node '{g.node[j].name or g.node[j].op_type}' "
                    "reads one of its outputs before its last node; sort the graph or split "
                    "the pattern")
    names = NameAllocator.for_index(index)
    template = _Template(block)
    inits = list(block.graph.initializer)
    stem = Path(r.label).stem or "replacement"
    weights = {t.name: names.fresh(f"{stem}/{t.name}") for t in inits}
    template.prepare(weights)
    replaced: list[list[str]] = []
    removed_constants: list[str] = []
    dead_names: set[str] = set()
    # the names the sites' removed tensors leave behind matter only to value_info entries and
    # the name map: read the removed nodes' outputs only when there are some
    named = bool(host.graph.value_info) or bool(name_map(host))
    for site in found.matches:
        g = found.graphs[site.graph]
        removed, inserted = plans.setdefault(site.graph, (set(), {}))
        anchor = site.labels[site.nodes.index(max(site.nodes))]
        nodes = (_quick_copy(template, site, p, names, f"{anchor}/{stem}/")
                 if template.plan is not None
                 else _copy_for(template, site, p, weights, names, f"{anchor}/{stem}/"))
        removed.update(site.nodes)
        removed.update(site.dead_constants)
        inserted[max(site.nodes)] = nodes
        replaced.append([n.name for n in nodes])
        removed_constants.extend(g.node[j].name or f"Constant#{j}" for j in site.dead_constants)
        if named:
            dead_names.update(chain.from_iterable(map(_OUTPUT, map(
                g.node.__getitem__, (*site.nodes, *site.dead_constants)))))
            dead_names.difference_update(site.outputs.values())
    dead_names.discard("")

    # ------------------------------------------------------------------ mutate (all checked)
    e = Edit(index, follow=False)  # ids move in every touched graph: the next verb indexes
    if inits:
        e.add_initializers(inits, made=True, names=[weights[t.name] for t in inits])
    for path, (removed, inserted) in plans.items():
        e.replace_nodes(removed, inserted, graph=None if not path else found.graphs[path])
    if dead_names:
        e.drop_value_info(dead_names)
    if new_opset is not None:
        e.set_default_opset(new_opset)
    if opsets:
        e.add_opsets(opsets)
    if functions:
        e.add_functions(functions)
    drop_missing(host, lambda name: name not in dead_names)
    e.hand_on(m)
    result = ReplaceResult(found.matches, replaced, pattern_bytes(p), stored, constants,
                           tolerance, removed_constants)
    add_rewrite(host, result.record())
    return result
