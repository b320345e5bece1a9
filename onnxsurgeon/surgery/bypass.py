"""``bypass``: remove a node and let every reader of its output read one of its inputs.

The node's output must have the dtype of the bypassed input (input ``0`` unless told) and a shape
the readers cannot tell apart: equal where both are known, or — when the input's shape only
broadcasts to the output's — every reader is a broadcasting elementwise op whose result keeps its
shape. Its other outputs (Dropout's mask) must be unused. Several nodes (a Dropout -> Identity ->
Cast chain) are removed in one call, checked all together before anything changes.

A torch module path (``stages.3.blocks.1.mlp.act``) that names several nodes names the module:
all of its nodes go, and the readers of what it hands on read what it takes in. It must take one
tensor (weights and constants aside) and hand on one, or it is refused.

A module's bypass removes every node of the module that reached a graph output before and
reaches none after (constants it shares with other modules stay), and the initializers only
removed nodes read. ``prune=True`` goes further, with ``reroute --prune``'s rule: every node no
graph output depends on after the bypass goes, with every initializer no remaining node reads.
Graph inputs always stay.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import KW_ONLY, dataclass, field

import onnx

from ..edit import Edit
from ..errors import AmbiguousNameError, RewriteError, SurgeryError, UsageError
from ..index import GraphIndex, Use
from ..io import Model, as_model
from ..record import BypassRecord, add_rewrite
from ..select import Selector, drop_missing, is_selector, node_module
from ..selectors import NODE
from ..session import hand_on
from ..types import TypeOracle, dtype_name
from ._bodies import address_site, body_model, children_first, outer_types, put_back
from ._edges import check_types
from ._proto import _BROADCAST
from ._shown import Shown
from .rename import _rename_tensors


@dataclass(frozen=True)
class BypassResult(Shown):
    """What ``bypass`` did.

    Attributes:
        removed: labels of the removed nodes (their names, ``OpType#i`` when unnamed), in the
            order given.
        rerouted: main-graph nodes that now read a bypassed input instead of a removed node's
            output (nodes whose nested bodies read it count), in node order.
        rerouted_outputs: graph outputs that now carry the bypassed input under its own name
            (only when that input is a graph input, an initializer or already an output; else the
            graph output keeps its name and the input's tensor is renamed to it).
        pruned: labels of the other nodes removed, in node order: a bypassed module's other
            nodes, and with ``prune`` every node the bypass left dead.
        pruned_initializers: initializers removed (only removed nodes read them; with ``prune``,
            no remaining node does).
        modules: bypassed module path -> the label (in ``removed``) of the node that made what
            the module handed on.
        input: the input slot of the removed nodes their readers now read.
        sources: for a bypassed module, the label of that node -> the tensor its readers read
            instead (the module's input, not the node's input ``input``).
        prune: whether every node left dead was removed too.
        bodies: for a selector matching nodes inside If/Loop/Scan bodies, body path ->
            ``{"removed", "rerouted", "rerouted_outputs", "pruned"}`` of that body (node
            labels of the body, its outputs); the fields above are the main graph's.
    """

    removed: list[str]
    rerouted: list[str]
    rerouted_outputs: list[str]
    pruned: list[str] = field(default_factory=list)
    pruned_initializers: list[str] = field(default_factory=list)
    modules: dict[str, str] = field(default_factory=dict)
    _: KW_ONLY
    input: int
    sources: dict[str, str] = field(default_factory=dict)
    prune: bool = False
    bodies: dict[str, dict[str, list[str]]] = field(default_factory=dict)

    def record(self) -> BypassRecord:
        """The rewrite record of this bypass; its optional keys are written only when they have
        something to say (a plain bypass's record is what it always was)."""
        return BypassRecord(
            removed=tuple(self.removed), input=self.input, rerouted=tuple(self.rerouted),
            rerouted_outputs=tuple(self.rerouted_outputs), pruned=tuple(self.pruned) or None,
            pruned_initializers=tuple(self.pruned_initializers) or None,
            modules=dict(self.modules) or None, sources=dict(self.sources) or None,
            prune=True if self.prune else None,
            bodies={k: {f: list(v) for f, v in d.items()} for k, d in self.bodies.items()}
            or None)


@dataclass(frozen=True)
class _Module:
    """A module path given as a node: its nodes (with the unscoped glue only they read), the
    node making its one output, that output and its one input."""

    path: str
    members: frozenset[int]
    node: int
    out: str
    src: str


def _find_node(index: GraphIndex, name: str) -> int:
    """The main-graph node named ``name``, or else the producer of the tensor ``name`` names
    (any selector: ONNX, TF ':0', torch module path)."""
    i = index.node_names.get(name)
    if i is None:  # an unnamed node's label (``OpType#i``) too
        return Selector(index).resolve_node(name)
    if name in _repeated_names(index):
        raise UsageError(f"several nodes are named '{name}'; rename them apart first (rename --nodes)")
    return i


def _repeated_names(index: GraphIndex) -> set[str]:
    """Node names several main-graph nodes carry; one pass, kept in the index's memo (a
    selector may name thousands of nodes)."""
    found = index.memo.get("bypass.repeated_names")
    if found is None:
        seen: set[str] = set()
        found = set()
        for node in index.graph.node:
            if node.name in seen:
                found.add(node.name)
            seen.add(node.name)
        index.memo["bypass.repeated_names"] = found
    return set(found)


def _expand(index: GraphIndex, sel: Selector, names: list[str]) -> tuple[list[str],
                                                                         dict[str, list[str]]]:
    """``names`` with each selector (``glob:``, ``re:``, ``op:``) replaced by the labels of the
    main-graph nodes it matches, in node order (a node matched twice is bypassed once), and
    body path -> the labels it matches inside that If/Loop/Scan body; a body node's address
    (``<body path>/<label>``, as the record gives it: :func:`_bodies.address_site`) goes to
    its body."""
    out: list[str] = []
    bodies: dict[str, list[str]] = {}
    for name in names:
        if not is_selector(name):
            site = address_site(sel, name, NODE)
            if site is None:
                out.append(name)
            else:
                bodies.setdefault(site.graph, []).append(site.node or "")
            continue
        for site in sel.find(name, NODE):
            (bodies.setdefault(site.graph, []) if site.graph else out).append(site.node or "")
    if not bodies and out == names:
        return names, {}
    return list(dict.fromkeys(out)), {k: list(dict.fromkeys(v)) for k, v in bodies.items()}


def _find_module(index: GraphIndex, sel: Selector, name: str) -> _Module | None:
    """The module ``name`` names when it is no node and no tensor but the module path of several
    nodes; None otherwise. O(nodes + edges).

    Raises:
        RewriteError: the module takes more than one tensor or hands on more than one.
    """
    if name in index.node_names or index.is_tensor(name) or "#" in name:
        return None
    scoped = sel._module_nodes().get(name)
    if not scoped or len(scoped) < 2:
        return None
    members = set(scoped)
    graph = index.graph
    todo = list(members)
    while todo:  # the unscoped glue only the module reads (the dynamo exporter drops scopes)
        for t in graph.node[todo.pop()].input:
            i = index.producer.get(t)
            if i is None or i in members or node_module(graph.node[i]) is not None:
                continue
            outs = [o for o in graph.node[i].output if o]
            if all(o not in index.outputs and all(u.node in members for u in index.consumers[o])
                   for o in outs):
                members.add(i)
                todo.append(i)
    try:
        out = sel.resolve(name)
    except AmbiguousNameError:
        outs = sel.module_outputs(name)
        if len(outs) < 2:
            raise  # a module called several times: the message names the calls
        raise RewriteError(
            f"module '{name}' hands {len(outs)} tensors to the rest of the graph {outs[:8]}; "
            "bypass only modules with one output, or name nodes") from None
    node = index.producer.get(out)
    if node is None or node not in members:
        raise RewriteError(f"module '{name}' hands on '{out}', which none of its nodes makes; "
                           "bypass its nodes by name")
    made = graph.node[node].output
    if made[0] != out or any(o and index.consumers.get(o) for o in made[1:]):
        raise RewriteError(f"module '{name}' hands on '{out}', one of several outputs of node "
                           f"'{index.node_label(node)}'; bypass its nodes by name")
    const, shape = sel._non_data()
    taken: list[str] = []
    handed: list[str] = []
    for t, uses in index.consumers.items():
        made_inside = index.producer.get(t) in members
        if not made_inside and any(u.node in members for u in uses):
            if t not in const and t not in shape and t not in index.initializers:
                taken.append(t)
        elif made_inside and t != out and t not in const and t not in shape and (
                t in index.outputs or any(u.node not in members for u in uses)):
            handed.append(t)
    handed += [o for o in index.outputs if o != out and index.producer.get(o) in members
               and o not in handed and o not in const and o not in shape]
    if handed:
        raise RewriteError(
            f"module '{name}' hands {len(handed) + 1} tensors to the rest of the graph "
            f"{sorted([out, *handed])[:8]}; bypass only modules with one output, or name nodes"
        )
    if len(taken) != 1:
        raise RewriteError(
            f"module '{name}' takes {len(taken)} tensors {sorted(taken)[:8]}; bypass only modules "
            "with one input (weights and constants aside), or name nodes"
        )
    return _Module(name, frozenset(members), node, out, taken[0])


def _live(index: GraphIndex, outputs: Collection[str], gone: Collection[int],
          subst: dict[str, str], reads: list[list[str]]) -> set[int]:
    """Nodes that reach one of ``outputs`` when the nodes ``gone`` are removed and the other
    nodes read ``subst[t]`` for every tensor ``t`` it maps. Iterative; O(nodes + edges)."""
    live: set[int] = set()
    todo = [t for t in outputs]
    seen: set[str] = set()
    while todo:
        t = todo.pop()
        if t in seen:
            continue
        seen.add(t)
        i = index.producer.get(t)
        if i is None or i in gone or i in live:
            continue
        live.add(i)
        todo.extend(subst.get(r, r) for r in reads[i])
    return live


def _node_reads(index: GraphIndex) -> list[list[str]]:
    """Per main-graph node, every tensor it reads (its inputs and its bodies' captures)."""
    reads: list[list[str]] = [[] for _ in index.graph.node]
    for t, uses in index.consumers.items():
        for u in uses:
            reads[u.node].append(t)
    return reads


def _static(shape: Sequence[int | str | None] | None) -> tuple[int, ...] | None:
    if shape is None or not all(isinstance(d, int) for d in shape):
        return None
    return tuple(int(d) for d in shape)  # type: ignore[arg-type]


def _broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    if len(a) < len(b):
        a, b = b, a
    b = (1,) * (len(a) - len(b)) + b
    out = []
    for x, y in zip(a, b, strict=True):
        if x != y and 1 not in (x, y):
            return None
        out.append(max(x, y) if 1 in (x, y) else x)
    return tuple(out)


def _broadcast_hides(index: GraphIndex, oracle: TypeOracle, out: str, src_shape: tuple[int, ...],
                     out_shape: tuple[int, ...], uses: list[Use]) -> str | None:
    """None when every reader of ``out`` is a broadcasting elementwise op whose result shape is
    the same whether it reads ``out`` or the bypassed input; else why not."""
    if _broadcast(src_shape, out_shape) != out_shape:
        return f"{list(src_shape)} does not broadcast to {list(out_shape)}"
    if out in index.outputs:
        return f"'{out}' is a graph output, whose shape would change"
    for use in uses:
        node = index.graph.node[use.node]
        if use.inner is not None or node.op_type not in _BROADCAST or node.domain not in ("", "ai.onnx"):
            return f"reader '{index.node_label(use.node)}' ({node.op_type}) does not broadcast"
        shapes: list[tuple[int, ...]] = []
        for name in node.input:
            s = _static(oracle.shape(name)) if name != out else out_shape
            if s is None:
                return f"reader '{index.node_label(use.node)}' has an input of unknown shape"
            shapes.append(s)
        with_src = [src_shape if n == out else s for n, s in zip(node.input, shapes, strict=True)]
        full, bypassed = shapes[0], with_src[0]
        for s in shapes[1:]:
            full = _broadcast(full, s) or ()
        for s in with_src[1:]:
            bypassed = _broadcast(bypassed, s) or ()
        if full != bypassed:
            return f"reader '{index.node_label(use.node)}' would give shape {list(bypassed)}"
    return None


def bypass(
    model: Model | onnx.ModelProto,
    nodes: str | Sequence[str],
    /,
    *,
    input: int = 0,  # noqa: A002 - the CLI flag is --input
    prune: bool = False,
) -> BypassResult:
    """Remove ``nodes`` (node names, or torch module paths); readers of each one's output read its
    input ``input``. Mutates model.

    A selector (``op:Dropout``, ``glob:*dropout*``, ``re:...``) names every node it matches,
    inside If/Loop/Scan bodies too: all of them go in one rewrite, with one record listing
    each (a body's under ``bodies``, by its path; there a body output plays a graph output's
    part, and the body's outer-scope reads are left as they are).

    Every reader moves: main-graph nodes, nodes inside If/Loop/Scan bodies and graph outputs. A
    graph output keeps its name when the bypassed input is made by a node (that tensor is renamed
    to the output's name); otherwise the output is rerouted to the input's name. For a chain, the
    nodes may be given in any order; each reads what the removed ones before it passed on.

    A module path that names several nodes bypasses the module: what it hands on is read from
    what it takes in (one tensor each, weights and constants aside), and all of its nodes go,
    with the initializers only they read. ``prune`` also removes every node no graph output
    depends on after the bypass and every initializer no remaining node reads (graph inputs
    stay), as ``reroute(prune=True)`` does.

    Before:  conv -> a -> Dropout -> d -> Identity -> i -> {fc, <output i>}
    After (nodes=[Dropout, Identity]):  conv -> i -> {fc, <output i>}
    Before:  fc1 -> h -> act{Mul, Mul, Mul, Add, Mul, Tanh, Add, Mul} -> g -> fc2
    After (nodes="mlp.act"):  fc1 -> h -> fc2

    O(nodes + edges).

    Raises:
        NotFoundError: a node name does not exist, or a selector matches nothing (did-you-mean).
        UsageError: no node, a node named twice, ``input`` out of range or empty, ``input`` other
            than 0 with a module.
        RewriteError: dtypes differ, shapes differ in a way the readers would see, another output
            of the node is used, the output would clash with an existing graph output, or a
            module takes or hands on more than one tensor.
    """
    m = as_model(model)
    proto = m.proto
    names = [nodes] if isinstance(nodes, str) else list(nodes)
    if not names:
        raise UsageError("bypass needs at least one node name")
    if len(set(names)) != len(names):
        raise UsageError(f"a node is named twice in {names}; name each node once")
    if input < 0:
        raise UsageError(f"input must be >= 0, got {input}")
    index = GraphIndex(proto)
    sel = Selector(index)
    names, bodies = _expand(index, sel, names)
    if not bodies:
        result = _bypass(m, index, sel, names, input, prune)
    else:
        result = _bypass_bodies(m, names, bodies, input, prune)
    add_rewrite(proto, result.record())
    return result


def _bypass_bodies(m: Model, names: list[str], bodies: dict[str, list[str]], input: int,  # noqa: A002
                   prune: bool) -> BypassResult:
    """Bypass the nodes a selector found inside If/Loop/Scan bodies, each body as the main
    graph of a body model (``surgery/_bodies.py``), children first, then ``names`` in the
    main graph. One body: checked before the host changes; else a failing later part restores
    the host as it was (one copy of the proto, taken only then)."""
    host = m.proto
    types = outer_types(host)
    saved: onnx.ModelProto | None = None
    if len(bodies) + bool(names) > 1:
        saved = onnx.ModelProto()
        saved.CopyFrom(host)
    done: dict[str, dict[str, list[str]]] = {}
    e = Edit(GraphIndex(host), follow=False)  # bodies are not followed: the next verb indexes
    try:
        for path in children_first(host, bodies):
            body = body_model(host, path, types)
            inner = as_model(body.model)
            index = GraphIndex(body.model)
            try:
                r = _bypass(inner, index, Selector(index), bodies[path], input, prune)
            except SurgeryError as exc:  # the body's outputs play the graph outputs' part
                raise type(exc)(f"inside the body '{path}': {exc}") from None
            outer = {vi.name for vi in body.model.graph.input[body.inputs:]}
            passed = [vi.name for vi in body.model.graph.output if vi.name in outer]
            if passed and r.rerouted_outputs:
                raise RewriteError(
                    f"cannot bypass {r.removed} inside the body '{path}': its output would "
                    f"become '{passed[0]}', a value from outside the body, which onnxruntime "
                    "refuses; keep the node (or narrow the selector)")
            put_back(e, body)
            done[path] = {"removed": r.removed, "rerouted": r.rerouted,
                          "rerouted_outputs": r.rerouted_outputs, "pruned": r.pruned}
        e.hand_on(m)
        if names:
            index = GraphIndex(host)
            main = _bypass(m, index, Selector(index), names, input, prune)
        else:
            main = BypassResult([], [], [], input=input, prune=bool(prune))
    except BaseException:
        if saved is not None:
            host.CopyFrom(saved)
            hand_on(m, None)
        raise
    return BypassResult(main.removed, main.rerouted, main.rerouted_outputs, main.pruned,
                        main.pruned_initializers, main.modules, input=input,
                        sources=main.sources, prune=bool(prune),
                        bodies={p: done[p] for p in bodies})


def _bypass(m: Model, index: GraphIndex, sel: Selector, names: list[str], input: int,  # noqa: A002
            prune: bool) -> BypassResult:
    """Bypass the main-graph nodes ``names`` of ``m`` (checked, then one edit); no record."""
    proto = m.proto
    oracle = TypeOracle(index)
    found = [_find_module(index, sel, n) for n in names]
    modules = {n: f for n, f in zip(names, found, strict=True) if f is not None}
    if modules and input != 0:
        raise UsageError(f"module '{next(iter(modules))}' has one input; drop --input {input}")
    positions = [f.node if f is not None else _find_node(index, n)
                 for n, f in zip(names, found, strict=True)]
    if len(set(positions)) != len(positions):
        raise UsageError(f"{names} name one node twice; name each node once")
    members: set[int] = set()
    for f in modules.values():
        inside = [n for n, i in zip(names, positions, strict=True)
                  if n != f.path and (i in f.members or i in members)]
        if inside:
            raise UsageError(f"'{inside[0]}' is inside module '{f.path}' or overlaps it; name "
                             "the module or its nodes, not both")
        members |= f.members
    labels = [index.node_label(i) for i in positions]
    removed = set(positions)
    module_at = {f.node: f for f in modules.values()}
    subst: dict[str, str] = {}  # removed output -> tensor its readers read instead
    for name, i in sorted(zip(labels, positions, strict=True), key=lambda p: p[1]):
        node = index.graph.node[i]
        unit = module_at.get(i)
        if unit is None and (input >= len(node.input) or not node.input[input]):
            raise UsageError(
                f"node '{name}' ({node.op_type}) has no input {input} (it has "
                f"{len(node.input)}: {list(node.input)}); pick another --input"
            )
        if not node.output or not node.output[0]:
            raise RewriteError(f"node '{name}' has no output to bypass")
        src, out = (node.input[input], node.output[0]) if unit is None else (unit.src, unit.out)
        for extra in node.output:
            if extra and extra != out and (extra in index.outputs or any(
                    u.node not in removed and u.node not in members
                    for u in index.consumers.get(extra, ()))):
                raise RewriteError(
                    f"node '{name}' output '{extra}' is used; only nodes whose other outputs are "
                    "unused can be bypassed"
                )
        what = (f"cannot bypass node '{name}' ({node.op_type})" if unit is None
                else f"cannot bypass module '{unit.path}'")
        src_type, out_type = oracle.elem_type(src), oracle.elem_type(out)
        if not src_type or not out_type:
            unknown = src if not src_type else out
            raise RewriteError(
                f"{what}: the dtype of '{unknown}' is unknown; add value_info for it or run shape "
                "inference on the model"
            )
        if src_type != out_type:
            which = f"input {input}" if unit is None else "its input"
            raise RewriteError(
                f"{what}: its output '{out}' is {dtype_name(out_type)} but {which} '{src}' "
                f"is {dtype_name(src_type)}; bypass only nodes that keep the dtype"
            )
        src_shape, out_shape = oracle.shape(src), oracle.shape(out)
        try:
            check_types(what, src, out, src_type, out_type, src_shape, out_shape)
        except RewriteError:
            a, b = _static(src_shape), _static(out_shape)
            uses = [u for u in index.consumers.get(out, ())
                    if u.node not in removed and u.node not in members]
            why = "shapes not fully known" if a is None or b is None else \
                _broadcast_hides(index, oracle, out, a, b, uses)
            if why is not None:
                raise RewriteError(
                    f"{what}: input '{src}' has shape {src_shape} but output '{out}' has "
                    f"{out_shape} ({why}); bypass only shape-preserving nodes"
                ) from None
        subst[out] = subst.get(src, src)
    # every removed output's final source (a chain collapses onto its first input)
    final = {out: _final(subst, out) for out in subst}
    renames: dict[str, str] = {}  # source tensor -> graph output name it takes over
    out_positions: list[tuple[int, str]] = []
    for k, vi in enumerate(proto.graph.output):
        if vi.name not in final:
            continue
        src = final[vi.name]
        named_by_node = src in index.producer and index.producer[src] not in removed
        if named_by_node and src not in index.outputs and src not in renames:
            renames[src] = vi.name
        else:
            if src in index.outputs or src in renames:
                raise RewriteError(
                    f"graph output '{vi.name}' would become '{src}', which is already a graph "
                    f"output; keep node '{labels[0]}' or remove one output first"
                )
            out_positions.append((k, src))
    moves = [(u, final[out]) for out in final for u in index.consumers.get(out, ())
            if u.node not in removed]
    pruned, pruned_inits = _pruned(index, removed, final, None if prune else members)
    paths = {f.path: index.node_label(f.node) for f in modules.values()}
    pruned_labels = [index.node_label(i) for i in sorted(pruned)]

    # ------------------------------------------------------------------ mutate (all checked)
    e = Edit(index, follow=False)  # the next verb indexes the model again
    touched: set[str] = set()
    for use, src in moves:
        touched.update(e.rewire([use], src))
    rerouted = [index.node_label(i) for i in range(len(index.graph.node))
                if index.node_label(i) in touched]
    rerouted_outputs: list[str] = []
    for k, src in out_positions:
        rerouted_outputs.append(proto.graph.output[k].name)
        e.set_output(k, name=src)
    dead = set(final) | {o for i in pruned for o in index.graph.node[i].output if o}
    keep = [vi for vi in proto.graph.value_info if vi.name not in dead]
    if len(keep) != len(proto.graph.value_info):
        e.set_value_info(keep, copy=False)
    # name-map entries of removed outputs go (before a source takes over an output's name, when
    # _rename_tensors moves the source's entries to that name)
    drop_missing(proto, lambda name: name not in dead)
    if renames:  # positions are unchanged so far: the removed nodes are deleted last
        _rename_tensors(e, renames)
    e.remove_nodes(removed | pruned)
    if pruned_inits:
        gone = {index.initializers[t] for t in pruned_inits}
        e.keep_initializers([k for k in range(len(proto.graph.initializer)) if k not in gone])
    e.hand_on(m)
    return BypassResult(labels, rerouted, rerouted_outputs, pruned_labels, pruned_inits, paths,
                        input=input, sources={paths[f.path]: f.src for f in modules.values()},
                        prune=bool(prune))


def _pruned(index: GraphIndex, removed: set[int], final: dict[str, str],
            members: set[int] | None) -> tuple[set[int], list[str]]:
    """What goes besides the ``removed`` nodes, in model terms (nothing is changed here).

    ``members`` None (``prune``): every node no graph output depends on after the bypass, and
    every initializer no remaining node reads (``reroute --prune``'s rule). Else the nodes of
    bypassed modules that reached a graph output before and reach none after, and the
    initializers only removed nodes read. Graph inputs (IR < 4 initializers listed as inputs too),
    graph outputs and sparse initializers stay. O(nodes + edges).
    """
    if members is not None and not members:
        return set(), []
    reads = _node_reads(index)
    outputs = list(index.outputs)
    after = _live(index, [final.get(o, o) for o in outputs], removed, final, reads)
    if members is None:
        pruned = {i for i in range(len(index.graph.node)) if i not in after and i not in removed}
        sources = list(index.initializers)
    else:
        before = _live(index, outputs, (), {}, reads)
        pruned = {i for i in before & members if i not in after and i not in removed}
        sources = [t for i in sorted((pruned | removed) & members) for t in reads[i]]
    gone = pruned | removed
    read = set(final.values()) | set(index.inputs) | set(index.outputs)
    inits = {t for t in sources if index.initializers.get(t, -1) >= 0 and t not in read
             and all(u.node in gone for u in index.consumers.get(t, ()))}
    return pruned, sorted(inits, key=lambda t: index.initializers[t])


def _final(subst: dict[str, str], name: str) -> str:
    seen = 0
    while name in subst and seen <= len(subst):
        name = subst[name]
        seen += 1
    return name
