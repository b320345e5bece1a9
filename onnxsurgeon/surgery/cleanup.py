"""``cleanup``: drop what no graph output needs.

Dead nodes (none of their outputs leads to a graph output), initializers and value_info nothing
uses, local functions nothing calls and opset imports nothing uses (the default domain always
stays), in the main graph and in the If/Loop/Scan bodies of the nodes that stay (a body's node
that none of the body's outputs needs goes; a body's read of an outer tensor keeps that
tensor's producer alive). Graph inputs stay: they are the model's interface. In a local function
that stays, a node none of the function's outputs needs goes too (as onnx-graphsurgeon's and
onnx-ir's cleanups do); its inputs, outputs and attributes stay (its interface).

The plan is a liveness sweep against node order (load leaves every graph topologically sorted):
one backward pass per graph, on the int dataflow graph when the main graph has one, so a 90k-node
chain costs a pass over its ints.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from operator import attrgetter

import onnx

from ..edit import Edit
from ..index import GraphIndex, node_label, subgraphs
from ..io import Model, as_model
from ..record import CleanupRecord, add_rewrite
from ..select import drop_missing
from ..session import indexed

__all__ = ["CleanupResult", "Liveness", "cleanup", "liveness"]

_NAME = attrgetter("name")
_DEFAULT_DOMAINS = frozenset({"", "ai.onnx"})


@dataclass
class _BodyPlan:
    """What stays of one nested body (positions ascending) and what goes (labels)."""

    graph: onnx.GraphProto
    kept: list[int]
    initializers: list[int]
    sparse: list[int]
    value_info: list[int]
    free: set[str]
    """Names the kept nodes read from enclosing scopes."""
    dropped_nodes: list[str] = field(default_factory=list)
    dropped_initializers: list[str] = field(default_factory=list)
    dropped_value_info: list[str] = field(default_factory=list)
    bodies: list[_BodyPlan] = field(default_factory=list)


def _plan_body(graph: onnx.GraphProto) -> _BodyPlan:
    """The liveness of a nested body against its outputs: one backward sweep over its (sorted)
    nodes; the bodies of kept nodes are planned first, their outer reads keep producers here
    alive. O(nodes + edges) of the body; nesting depth is bounded by load (MAX_NESTING)."""
    nodes = graph.node
    needed: set[str] = set(map(_NAME, graph.output))
    kept_rev: list[int] = []
    bodies: list[_BodyPlan] = []
    defined: set[str] = set(map(_NAME, graph.input))
    for i in range(len(nodes) - 1, -1, -1):
        node = nodes[i]
        outs = node.output
        if not any(o in needed for o in outs if o):
            continue
        kept_rev.append(i)
        defined.update(outs)
        needed.update(node.input)
        for sub in subgraphs(node):
            plan = _plan_body(sub)
            bodies.append(plan)
            needed.update(plan.free)
    kept = kept_rev[::-1]
    kept_set = set(kept)
    prefix = f"{graph.name}/" if graph.name else ""
    dropped = [prefix + node_label(nodes[i], i) for i in range(len(nodes)) if i not in kept_set]
    inits = [k for k, t in enumerate(graph.initializer) if t.name in needed]
    sparse = [k for k, s in enumerate(graph.sparse_initializer) if s.values.name in needed]
    init_names = {graph.initializer[k].name for k in inits} | {
        graph.sparse_initializer[k].values.name for k in sparse}
    defined |= init_names
    vis = [k for k, vi in enumerate(graph.value_info) if vi.name in defined]
    free = needed - defined - set(map(_NAME, graph.initializer)) - {""}
    plan = _BodyPlan(graph, kept, inits, sparse, vis, free, dropped)
    kept_inits = set(inits)
    plan.dropped_initializers = [t.name for k, t in enumerate(graph.initializer)
                                 if k not in kept_inits]
    kept_sparse = set(sparse)
    plan.dropped_initializers += [s.values.name for k, s in enumerate(graph.sparse_initializer)
                                  if k not in kept_sparse]
    kept_vis = set(vis)
    plan.dropped_value_info = [vi.name for k, vi in enumerate(graph.value_info)
                               if k not in kept_vis]
    plan.bodies = bodies[::-1]
    return plan


@dataclass
class _FunctionPlan:
    """What stays of one local function's nodes (positions ascending) and what goes (labels)."""

    kept: list[int]
    dropped: list[str]
    bodies: list[_BodyPlan]


def _plan_function(fn: onnx.FunctionProto) -> _FunctionPlan:
    """The liveness of a local function's nodes against its outputs: backward sweeps until
    nothing more is needed (one when its nodes are sorted); the bodies of kept nodes planned as
    in the main graph. O(sweeps x (nodes + edges)) of the function."""
    nodes = fn.node
    needed: set[str] = set(fn.output)
    live = bytearray(len(nodes))
    plans: dict[int, list[_BodyPlan]] = {}
    more = True
    while more:
        more = False
        for i in range(len(nodes) - 1, -1, -1):
            node = nodes[i]
            if live[i] or not any(o in needed for o in node.output if o):
                continue
            live[i] = 1
            more = True
            needed.update(node.input)
            plans[i] = [_plan_body(sub) for sub in subgraphs(node)]
            for plan in plans[i]:
                needed.update(plan.free)
    prefix = f"function {fn.domain}.{fn.name}/" if fn.domain else f"function {fn.name}/"
    return _FunctionPlan([i for i in range(len(nodes)) if live[i]],
                         [prefix + node_label(nodes[i], i) for i in range(len(nodes)) if not live[i]],
                         [p for i in sorted(plans) for p in plans[i]])


@dataclass
class Liveness:
    """Which main-graph nodes some of ``outputs`` needs, and what they read.

    Attributes:
        live: one flag per main-graph node (1: needed).
        reads: names of graph inputs and initializers needed (the outputs themselves included).
        bodies: the plans of the kept nodes' bodies (node index -> plans).
    """

    live: bytearray
    reads: set[str]
    bodies: dict[int, list[_BodyPlan]]


def liveness(index: GraphIndex, outputs: Iterable[str], *, bodies: bool = True) -> Liveness:
    """The main-graph nodes needed for ``outputs`` (a pure query). On the int dataflow graph
    when there is one (no node holds a body): a backward pass over ints; else by names, each
    kept holder's bodies planned (``bodies``) so that only what their kept nodes read from
    outside keeps producers alive. O(nodes + edges)."""
    nodes = index.graph.node
    n = len(nodes)
    live = bytearray(n)
    wanted = list(outputs)
    producer = index.producer
    reads: set[str] = set(wanted)
    plans: dict[int, list[_BodyPlan]] = {}
    edges = index.int_graph()
    if edges is not None:
        preds, starts, leaves = edges.preds, edges.starts, edges.leaves
        read = set(preds)
        # no node is dead when every node is read or makes an output: the last dead node
        # (in order) would be read by no one (C-level set operations, no pass in Python)
        sinks = set(range(n)).difference(read).difference(
            producer.get(out, -1) for out in wanted)
        if not sinks:
            reads.update(leaves[p] for p in read if p < -1)
            return Liveness(bytearray(b"\x01") * n, reads, plans)
        for out in wanted:
            j = producer.get(out)
            if j is not None:
                live[j] = 1
        leaf_hits: set[int] = set()
        for i in range(n - 1, -1, -1):
            if live[i]:
                for p in preds[starts[i]:starts[i + 1]]:
                    if p >= 0:
                        live[p] = 1
                    elif p < -1:
                        leaf_hits.add(p)
        reads.update(leaves[p] for p in leaf_hits)
        return Liveness(live, reads, plans)
    needed = set(wanted)
    captures = index.captures
    holders = set(index.body_holders)
    for i in range(n - 1, -1, -1):
        node = nodes[i]
        if not any(o in needed for o in node.output if o):
            continue
        live[i] = 1
        needed.update(node.input)
        if i in holders:
            if bodies:
                found = [_plan_body(sub) for sub in subgraphs(node)]
                plans[i] = found
                for plan in found:
                    needed.update(plan.free)
            else:
                needed.update(name for name, _ in captures.get(i, ()))
    reads = needed
    return Liveness(live, reads, plans)


@dataclass(frozen=True)
class CleanupResult:
    """What ``cleanup`` removed, by kind (names as the model had them).

    Attributes:
        nodes: main-graph nodes (labels, see :func:`~onnxsurgeon.index.node_label`).
        body_nodes: nodes of nested bodies (``<body name>/<label>``) and of local functions
            (``function <domain.name>/<label>``).
        initializers: initializers (main graph and bodies, sparse ones included).
        value_info: value_info entries of tensors that no longer exist (or never did).
        functions: local functions (``domain.name``).
        opsets: opset imports (domains).
    """

    nodes: tuple[str, ...]
    body_nodes: tuple[str, ...]
    initializers: tuple[str, ...]
    value_info: tuple[str, ...]
    functions: tuple[str, ...]
    opsets: tuple[str, ...]

    def record(self) -> CleanupRecord:
        """The rewrite record of this cleanup."""
        return CleanupRecord(nodes=self.nodes, body_nodes=self.body_nodes,
                             initializers=self.initializers, value_info=self.value_info,
                             functions=self.functions, opsets=self.opsets)

    def counts(self) -> dict[str, int]:
        """How many of each kind went."""
        return {"nodes": len(self.nodes), "body_nodes": len(self.body_nodes),
                "initializers": len(self.initializers), "value_info": len(self.value_info),
                "functions": len(self.functions), "opsets": len(self.opsets)}


def _all_body_plans(plans: Iterable[_BodyPlan]) -> list[_BodyPlan]:
    found: list[_BodyPlan] = []
    stack = list(plans)
    while stack:
        plan = stack.pop()
        found.append(plan)
        stack.extend(plan.bodies)
    return found


def _fn_key(node: onnx.NodeProto) -> tuple[str, str, str]:
    return node.domain, node.op_type, getattr(node, "overload", "")


def _walk_nodes(nodes: Iterable[onnx.NodeProto]) -> Iterable[onnx.NodeProto]:
    """Every node of ``nodes`` and of the bodies they hold. Iterative."""
    stack = [iter(nodes)]
    while stack:
        for node in stack[-1]:
            yield node
            if node.attribute:
                stack.extend(iter(sub.node) for sub in subgraphs(node))
                break
        else:
            stack.pop()


def _used_functions(model: onnx.ModelProto, called: set[tuple[str, str, str]],
                    fn_nodes: Sequence[Sequence[onnx.NodeProto]] | None = None) -> list[int]:
    """Positions of the local functions called, transitively from ``called``; ``fn_nodes``:
    each function's nodes that stay (bodies' included; default: all of them)."""
    by_key = {(fn.domain, fn.name, getattr(fn, "overload", "")): k
              for k, fn in enumerate(model.functions)}
    used: set[int] = set()
    stack = [by_key[c] for c in called if c in by_key]
    while stack:
        k = stack.pop()
        if k in used:
            continue
        used.add(k)
        for node in (_walk_nodes(model.functions[k].node) if fn_nodes is None else fn_nodes[k]):
            j = by_key.get(_fn_key(node))
            if j is not None and j not in used:
                stack.append(j)
    return sorted(used)


def plan_model_level(model: onnx.ModelProto, kept_nodes: Iterable[onnx.NodeProto],
                     fn_nodes: Sequence[Sequence[onnx.NodeProto]] | None = None
                     ) -> tuple[list[int], list[int]]:
    """The local functions and opset imports still used by ``kept_nodes`` (every node of the
    main graph and bodies that stays): (function positions, opset positions), ascending.
    ``fn_nodes``: each local function's nodes that stay (bodies' included; default: all).
    Reads node domains only when the model has local functions or imports a domain besides the
    default."""
    functions = model.functions
    opsets = model.opset_import
    if not functions and all(o.domain in _DEFAULT_DOMAINS for o in opsets):
        return list(range(len(functions))), list(range(len(opsets)))
    called: set[tuple[str, str, str]] = set()
    domains: set[str] = set()
    for node in kept_nodes:
        key = _fn_key(node)
        called.add(key)
        domains.add(key[0])
    fn_kept = _used_functions(model, called, fn_nodes) if functions else []
    for k in fn_kept:
        fn = functions[k]
        domains.add(fn.domain)
        domains.update(node.domain for node in (_walk_nodes(fn.node) if fn_nodes is None
                                                 else fn_nodes[k]))
    op_kept = [k for k, o in enumerate(opsets)
               if o.domain in _DEFAULT_DOMAINS or o.domain in domains]
    return fn_kept, op_kept


def _kept_nodes(index: GraphIndex, live: bytearray, plans: Iterable[_BodyPlan]
                ) -> Iterable[onnx.NodeProto]:
    nodes = index.graph.node
    for i, flag in enumerate(live):
        if flag:
            yield nodes[i]
    for plan in plans:
        for k in plan.kept:
            yield plan.graph.node[k]


def cleanup(model: Model | onnx.ModelProto, /) -> CleanupResult:
    """Remove what no graph output needs. Mutates model.

    Dead nodes, unused initializers, value_info of tensors that are gone (or never existed),
    uncalled local functions and unused opset imports go, in nested bodies too (see the module
    docstring); graph inputs and the default opset stay.

    Before:  x -> A -> y <output>;  x -> B -> z (read by nothing);  W (read by B only)
    After:   x -> A -> y <output>

    O(nodes + edges) (ints on the main graph when it holds no body) + O(initializers +
    value_info); a model with nothing to remove is left byte-identical but for the record.
    """
    m = as_model(model)
    proto = m.proto
    index = indexed(m)
    graph = proto.graph
    live = liveness(index, index.outputs)
    nodes = graph.node
    n = len(nodes)
    all_live = not live.live.count(0)
    kept = list(range(n)) if all_live else [i for i in range(n) if live.live[i]]
    body_plans = _all_body_plans(p for ps in live.bodies.values() for p in ps)
    reads = live.reads
    inputs = index.inputs
    inits = [k for k, name in enumerate(index.initializer_names())
             if name in reads or name in inputs]
    sparse = [k for k, s in enumerate(graph.sparse_initializer)
              if s.values.name in reads or s.values.name in inputs]
    fn_plans = [_plan_function(fn) for fn in proto.functions]
    fn_bodies = [_all_body_plans(p.bodies) for p in fn_plans]
    fn_nodes = [[fn.node[i] for i in p.kept] + [b.graph.node[k] for b in bodies for k in b.kept]
                for fn, p, bodies in zip(proto.functions, fn_plans, fn_bodies, strict=True)]
    fn_kept, op_kept = plan_model_level(proto, _kept_nodes(index, live.live, body_plans),
                                        fn_nodes if fn_plans else None)
    for k in fn_kept:  # the nodes and bodies of the functions that stay are cleaned too
        body_plans += fn_bodies[k]

    dropped_nodes = [] if all_live else [index.node_label(i) for i in range(n)
                                         if not live.live[i]]
    kept_init = set(inits)
    names = index.initializer_names()
    dropped_inits = [names[k] for k in range(len(names)) if k not in kept_init]
    kept_sparse = set(sparse)
    dropped_inits += [s.values.name for k, s in enumerate(graph.sparse_initializer)
                      if k not in kept_sparse]
    gone: set[str] = set(dropped_inits)
    for i in () if all_live else range(n):
        if not live.live[i]:
            gone.update(nodes[i].output)
    producer = index.producer
    vis: list[int] = []
    dropped_vi: list[str] = []
    for k, vi in enumerate(graph.value_info):
        name = vi.name
        if name not in gone and (name in producer or name in inputs or name in index.initializers):
            vis.append(k)
        else:
            dropped_vi.append(name)
    fn_set = set(fn_kept)
    dropped_fns = [f"{fn.domain}.{fn.name}" if fn.domain else fn.name
                   for k, fn in enumerate(proto.functions) if k not in fn_set]
    op_set = set(op_kept)
    dropped_ops = [o.domain for k, o in enumerate(proto.opset_import) if k not in op_set]
    result = CleanupResult(
        nodes=tuple(dropped_nodes),
        body_nodes=tuple([x for k in fn_kept for x in fn_plans[k].dropped]
                         + [x for p in body_plans for x in p.dropped_nodes]),
        initializers=tuple(dropped_inits + [x for p in body_plans for x in p.dropped_initializers]),
        value_info=tuple(dropped_vi + [x for p in body_plans for x in p.dropped_value_info]),
        functions=tuple(dropped_fns), opsets=tuple(dropped_ops))

    # ------------------------------------------------------------------ mutate (all planned)
    e = Edit(index)
    if gone:
        drop_missing(proto, lambda name: name not in gone)
    e.keep_initializers(inits, sparse=sparse)
    if len(vis) != len(graph.value_info):
        e.keep_value_info(vis)
    for plan in body_plans:  # the holders stay where they are until keep_nodes below
        e.keep_graph_leaves(plan.graph, initializers=plan.initializers, sparse=plan.sparse,
                            value_info=plan.value_info)
        e.keep_graph_nodes(plan.graph, plan.kept)
    for k in fn_kept:
        e.keep_graph_nodes(proto.functions[k], fn_plans[k].kept)
    if len(kept) != n:
        e.keep_nodes(kept)
    if len(fn_kept) != len(proto.functions):
        e.keep_functions(fn_kept)
    if len(op_kept) != len(proto.opset_import):
        e.keep_opsets(op_kept)
    e.hand_on(m)
    add_rewrite(proto, result.record())
    return result

