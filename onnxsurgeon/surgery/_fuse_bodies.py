"""``fold``'s simplifications (:mod:`onnxsurgeon.surgery.fuse`) inside If/Loop/Scan bodies, at
any depth, and inside local functions (issue 30).

Each body becomes the main graph of a body model (:func:`._bodies.body_model`: its outer reads
as typed inputs), children first: a body's own bodies are simplified inside its body model and
put back there before the body itself is planned. The outer constants a body reads (the
initializers of the main graph and of the bodies around it, never a graph input) are given to
its body model as initializers, so that a MatMul reading a host weight becomes a Gemm; they are
taken out again before the body goes back. A local function becomes a model the same way:
its nodes, its ``Constant`` values as initializers, its inputs and outputs untyped (a rule that
needs a type the function cannot know skips the site, never guesses it). A node whose rule
reads its attributes (a no-op's, a BatchNormalization) and that takes one from a function
attribute (``ref_attr_name``) is left alone, and so are bodies in a function holding one. Its
unnamed nodes are named by their label in the function while planned, so that the ``fused``
entries name them as the function does; each ``Constant`` still read goes back just before its
first reader.

Everything is planned on copies first; the host changes only at the end, in one
:class:`~onnxsurgeon.edit.Edit` (the top-level bodies through :meth:`Edit.set_body`, the
functions through :meth:`Edit.set_function_nodes`): a raising call leaves the model unchanged.
New weight names (Conv + BatchNormalization) come from one allocator that knows every name of
the host, so a body never defines a name its outer scopes hold. Each ``fused`` entry carries
``"graph"``: the body path (``<holder label>/<attribute>``, nested with ``/``, as
:mod:`._bodies` writes it), ``function <domain.name>`` for a local function (and
``function <domain.name>/<body path>`` for a body inside one).

O(size of the bodies and functions) plus one shape inference of the host (the outer types)
and one per body model that has a candidate; recursive over the nesting depth only (bounded by
:data:`onnxsurgeon.index.MAX_NESTING`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

import onnx

from ..edit import Edit
from ..index import GraphIndex, has_subgraphs, iter_graphs, node_label, subgraphs
from ..io import Model
from ..names import NameAllocator, all_names
from ..protos import default_opset
from ..session import indexed
from ._bodies import BodyModel, body_model, outer_types, put_back
from .fold import _read_now
from .fuse import NOOP_RULES, apply_fusions, apply_noops, plan_fusions, plan_noops

_ATTRIBUTES, _OP_TYPE = attrgetter("attribute"), attrgetter("op_type")
_CANDIDATES = frozenset({*NOOP_RULES, "MatMul", "BatchNormalization"})
"""Ops a rule starts from: a graph holding none is not planned."""
_HAZARDS = frozenset({*NOOP_RULES, "BatchNormalization"})
"""Ops whose rule reads their attributes (a function attribute's reference reads as 0)."""
_REF = "onnxsurgeon.ref_attr"
"""Domain a function node reading a function attribute wears while planned (no rule takes a
node outside the default domain)."""


class _Types(Mapping[str, onnx.ValueInfoProto]):
    """:func:`._bodies.outer_types` of a host, its shape inference run only when a name has
    no declared type (the declared one wins there too)."""

    def __init__(self, host: onnx.ModelProto) -> None:
        self.host = host
        self.declared: dict[str, onnx.ValueInfoProto] = {}
        for g in iter_graphs(host.graph):
            for vi in (*g.input, *g.output, *g.value_info):
                if vi.type.WhichOneof("value") is not None:
                    self.declared.setdefault(vi.name, vi)
            for t in g.initializer:
                if t.name not in self.declared:
                    self.declared[t.name] = onnx.helper.make_tensor_value_info(
                        t.name, t.data_type, list(t.dims))
        self._all: dict[str, onnx.ValueInfoProto] | None = None

    def _inferred(self) -> dict[str, onnx.ValueInfoProto]:
        if self._all is None:
            self._all = outer_types(self.host)
        return self._all

    def __getitem__(self, name: str) -> onnx.ValueInfoProto:
        found = self.declared.get(name)
        return found if found is not None else self._inferred()[name]

    def __contains__(self, name: object) -> bool:
        return name in self.declared or name in self._inferred()

    def __iter__(self) -> Iterator[str]:
        return iter(self._inferred())

    def __len__(self) -> int:
        return len(self._inferred())


@dataclass
class _Scope:
    """What every body and function planned in one call shares."""

    host: onnx.ModelProto
    base_dir: object
    types: _Types | None = None
    fused: list[dict[str, Any]] = field(default_factory=list)
    moved: set[str] = field(default_factory=set)  # outer constants given to a body model
    _names: NameAllocator | None = None

    def names(self) -> NameAllocator:
        """The allocator of new weight names: every name of the host (built when first
        asked: only a BatchNormalization site needs it), then each name handed out."""
        if self._names is None:
            self._names = NameAllocator(all_names(self.host))
        return self._names


def fuse_bodies(m: Model, fused: list[dict[str, Any]]) -> None:
    """Simplify every If/Loop/Scan body and local function of ``m`` as the main graph is (see
    the module docstring), appending each entry (with its ``"graph"``) to ``fused``; main-graph
    initializers only the bodies read and no longer do are dropped. Mutates model (one edit,
    after everything is planned). O(size of bodies and functions)."""
    host = m.proto
    holders = _holders(host.graph)
    if not _has_candidates(host, holders):
        return
    scope = _Scope(host, m.base_dir)
    inputs = {vi.name for vi in host.graph.input}
    consts = {t.name: t for t in host.graph.initializer if t.name not in inputs}
    bodies = _plan_bodies(host, "", consts, scope, holders) if holders else []
    functions = [(fn, nodes) for fn in host.functions
                 if (nodes := _plan_function(host, fn, scope)) is not None]
    if not bodies and not functions:
        return
    # ------------------------------------------------------------------ mutate (all planned)
    e = Edit(indexed(m), follow=False)  # bodies are not followed: the next verb indexes
    for body in bodies:
        put_back(e, body)
    for fn, nodes in functions:
        e.set_function_nodes(fn, nodes)
    if not scope.moved.isdisjoint(consts):  # a host weight only a fused body read before
        _drop_dead(e, host.graph, inputs, only=scope.moved)
    e.hand_on(m)
    fused.extend(scope.fused)


def _holders(graph: onnx.GraphProto | onnx.FunctionProto) -> list[int]:
    """Positions of the nodes holding a body. One C-level field read per node."""
    nodes = graph.node
    return [i for i, attrs in enumerate(map(_ATTRIBUTES, nodes))
            if attrs and has_subgraphs(nodes[i])]


def _has_candidates(model: onnx.ModelProto, holders: list[int]) -> bool:
    """Some body or local function holds a node a rule starts from."""
    for fn in model.functions:
        if not _CANDIDATES.isdisjoint(map(_OP_TYPE, fn.node)):
            return True
        if any(_holds_candidates(fn.node[i]) for i in _holders(fn)):
            return True
    return any(_holds_candidates(model.graph.node[i]) for i in holders)


def _holds_candidates(node: onnx.NodeProto) -> bool:
    return any(n.op_type in _CANDIDATES for sub in subgraphs(node) for g in iter_graphs(sub)
               for n in g.node)


def _direct_bodies(graph: onnx.GraphProto, holders: list[int]
                   ) -> list[tuple[str, onnx.GraphProto]]:
    """(path, body) of the bodies held by ``graph``'s nodes at ``holders`` (paths as
    :func:`~onnxsurgeon.selectors.body_graphs` writes them), in node order, that hold a node a
    rule starts from (at any depth); a path two holders share (two nodes of one name) is left
    out: it does not say which body it means."""
    found: list[tuple[str, onnx.GraphProto]] = []
    for i in holders:
        node = graph.node[i]
        for attr in node.attribute:
            where = f"{node_label(node, i)}/{attr.name}"
            if attr.type == onnx.AttributeProto.GRAPH:
                found.append((where, attr.g))
            elif attr.type == onnx.AttributeProto.GRAPHS:
                found.extend((f"{where}[{k}]", g) for k, g in enumerate(attr.graphs))
    count = Counter(p for p, _ in found)
    return [(p, body) for p, body in found if count[p] == 1 and any(
        n.op_type in _CANDIDATES for g in iter_graphs(body) for n in g.node)]


def _plan_bodies(host: onnx.ModelProto, prefix: str, consts: Mapping[str, onnx.TensorProto],
                 scope: _Scope, holders: list[int]) -> list[BodyModel]:
    """The body models of ``host``'s direct bodies (held by its nodes at ``holders``) that
    changed, each simplified (its own bodies first, put back into it), ``host`` untouched.
    ``consts``: the constants its nodes see (name -> initializer of an enclosing graph)."""
    if scope.types is None:
        scope.types = _Types(host)  # names are unique model-wide: one map serves all
    changed: list[BodyModel] = []
    for path, graph in _direct_bodies(host.graph, holders):
        body = body_model(host, path, scope.types, graph=graph)
        g = body.model.graph
        own = {vi.name for vi in g.input[:body.inputs]}
        inner = dict(consts)
        inner.update((t.name, t) for t in g.initializer if t.name not in own)
        done = False
        if inside := _holders(g):
            nested = _plan_bodies(body.model, f"{prefix}{path}/", inner, scope, inside)
            if nested:
                e = Edit(GraphIndex(body.model), follow=False)
                for child in nested:
                    put_back(e, child)
                _drop_dead(e, g, {vi.name for vi in g.input}, only=scope.moved)
                e.finish()
                done = True
        if any(n.op_type in _CANDIDATES for n in g.node):
            outer = [vi.name for vi in g.input[body.inputs:body.inputs + body.outer]]
            direct = {x for n in g.node for x in n.input}
            moved = [name for name in outer if name in consts and name in direct]
            scope.moved.update(moved)
            if moved:  # the outer constants it reads, as initializers of its body model
                Edit(GraphIndex(body.model), follow=False).add_initializers(
                    [consts[name] for name in moved])
            inputs = {vi.name for vi in g.input} - set(moved)
            done |= _simplify(body.model, inputs, f"{prefix}{path}", scope)
            if moved:
                gone = set(moved)
                Edit(GraphIndex(body.model), follow=False).keep_initializers(
                    [k for k, t in enumerate(g.initializer) if t.name not in gone])
        if done:
            changed.append(body)
    return changed


def _simplify(model: onnx.ModelProto, inputs: set[str], graph: str, scope: _Scope) -> bool:
    """The no-ops, then the fusions of ``model``'s main graph (a private copy), its entries
    tagged ``graph``; whether anything changed. Two edits at most."""
    opset = default_opset(model) or 1
    index = GraphIndex(model)
    noops, entries = plan_noops(index, inputs=inputs, base_dir=scope.base_dir, opset=opset)
    if noops:
        e = Edit(index, follow=False)
        apply_noops(e, index, noops)
        _drop_dead(e, model.graph, inputs)
        e.finish()
        scope.fused.extend({**f, "graph": graph} for f in entries)
        index = GraphIndex(model)
    bns = "BatchNormalization" in map(_OP_TYPE, model.graph.node)
    plan = plan_fusions(index, inputs=inputs, base_dir=scope.base_dir, opset=opset,
                        names=scope.names() if bns else None)
    if plan.fused:
        e = Edit(index, follow=False)
        apply_fusions(e, plan)
        _drop_dead(e, model.graph, inputs)
        e.finish()
        scope.fused.extend({**f, "graph": graph} for f in plan.fused)
    return bool(noops or plan.fused)


def _drop_dead(e: Edit, graph: onnx.GraphProto, inputs: set[str], *,
               only: set[str] | None = None) -> None:
    """Drop the initializers of ``graph`` nothing reads (of ``only``, when given)."""
    read = _read_now(graph)
    keep = [k for k, t in enumerate(graph.initializer) if t.name in read or t.name in inputs
            or (only is not None and t.name not in only)]
    if len(keep) < len(graph.initializer):
        e.keep_initializers(keep)


# ------------------------------------------------------------------ local functions
def _constant_value(node: onnx.NodeProto) -> onnx.TensorProto | None:
    """The tensor a default-domain ``Constant`` node holds in its ``value`` attribute (not a
    function attribute's reference, not external), else None."""
    if node.op_type != "Constant" or node.domain not in ("", "ai.onnx") or len(node.output) != 1:
        return None
    if len(node.attribute) != 1:
        return None
    a = node.attribute[0]
    if a.name != "value" or a.ref_attr_name or a.type != onnx.AttributeProto.TENSOR:
        return None
    if a.t.data_location == onnx.TensorProto.EXTERNAL:
        return None
    t = onnx.TensorProto()
    t.CopyFrom(a.t)
    t.name = node.output[0]
    return t


def _reads_attribute(node: onnx.NodeProto) -> bool:
    """A node of ``node``'s bodies whose rule reads its attributes reads a function attribute
    (``ref_attr_name``): the bodies are then left as they are."""
    return any(a.ref_attr_name for sub in subgraphs(node) for g in iter_graphs(sub)
               for n in g.node if n.op_type in _HAZARDS for a in n.attribute)


def _plan_function(host: onnx.ModelProto, fn: onnx.FunctionProto, scope: _Scope
                   ) -> list[onnx.NodeProto] | None:
    """The nodes of local function ``fn`` simplified (see the module docstring), or None when
    nothing changed. ``host`` untouched."""
    if _CANDIDATES.isdisjoint(map(_OP_TYPE, fn.node)) and not any(
            _holds_candidates(fn.node[i]) for i in _holders(fn)):
        return None
    name = f"{fn.domain}.{fn.name}" if fn.domain else fn.name
    graph = f"function {name}"
    model = onnx.ModelProto()
    model.ir_version = host.ir_version
    model.opset_import.extend(fn.opset_import)
    model.functions.extend(host.functions)
    g = model.graph
    g.name = fn.name
    g.input.extend(onnx.ValueInfoProto(name=x) for x in fn.input)
    g.output.extend(onnx.ValueInfoProto(name=y) for y in fn.output)
    g.value_info.extend(fn.value_info)
    real = {n.name for n in fn.node if n.name}
    temp: set[str] = set()
    constants: list[str] = []
    marked: dict[str, str] = {}  # temporary domain -> the node's own
    for j, node in enumerate(fn.node):
        value = _constant_value(node)
        if value is not None:
            g.initializer.append(value)
            constants.append(value.name)
            continue
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        if not copy.name:
            copy.name = node_label(node, j)
            temp.add(copy.name)
        if copy.domain in ("", "ai.onnx") and copy.op_type in _HAZARDS and any(
                a.ref_attr_name for a in copy.attribute):
            marked[f"{_REF}.{copy.domain}"] = copy.domain
            copy.domain = f"{_REF}.{copy.domain}"
        g.node.append(copy)
    # an import of each temporary domain: onnx's inference refuses a domain without one
    model.opset_import.extend(onnx.helper.make_opsetid(d, 1) for d in marked)
    inputs = set(fn.input)
    done = False
    inside = _holders(g)
    if inside and not any(_reads_attribute(g.node[i]) for i in inside):
        consts = {t.name: t for t in g.initializer}
        nested = _plan_bodies(model, f"{graph}/", consts, _Scope(
            model, scope.base_dir, None, scope.fused, set(), scope.names()), inside)
        if nested:
            e = Edit(GraphIndex(model), follow=False)
            for child in nested:
                put_back(e, child)
            e.finish()
            done = True
    if any(n.op_type in _CANDIDATES for n in g.node):
        done |= _simplify(model, inputs, graph, scope)
    if not done:
        return None
    return _function_nodes(model, fn, constants, temp - real, marked)


def _function_nodes(model: onnx.ModelProto, fn: onnx.FunctionProto, constants: list[str],
                    temp: set[str], marked: Mapping[str, str]) -> list[onnx.NodeProto]:
    """The function's nodes from its simplified model: each initializer still read back as a
    ``Constant`` node (the function's own where it had one) just before its first reader, the
    temporary names and domains taken off."""
    g = model.graph
    values = {t.name: t for t in g.initializer}
    original = {node.output[0]: node for node in fn.node if node.output
                and node.output[0] in values and node.output[0] in constants}
    read = _read_now(g)
    pending = dict.fromkeys(n for n in values if n in read or n in fn.output)
    nodes: list[onnx.NodeProto] = []

    def emit_constant(name: str) -> None:
        made = original.get(name)
        if made is None:
            made = onnx.helper.make_node("Constant", [], [name], value=values[name])
        nodes.append(made)
        del pending[name]

    for node in g.node:
        reads = set(node.input)
        for sub in subgraphs(node):
            for inner in iter_graphs(sub):
                for n in inner.node:
                    reads.update(n.input)
        for name in [n for n in pending if n in reads]:
            emit_constant(name)
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        if copy.name in temp:
            copy.name = ""
        if copy.domain in marked:
            copy.domain = marked[copy.domain]
        nodes.append(copy)
    for name in list(pending):  # read by a function output only
        emit_constant(name)
    return nodes
