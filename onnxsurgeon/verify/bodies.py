"""Proofs of rewrites at sites inside If/Loop/Scan bodies (issue 28).

onnxruntime hands out no tensor of a body, so a body site cannot be compared where it is: the
check builds a *reference* from the original by a second, plainer route and compares every
graph output (by position) exactly. For ``insert`` the reference is the original with each
site's block spliced in by hand: a built-in block rebuilt from the record's parameters (never
read from the rewritten model), a user graph's nodes copied from the rewritten model by the
names the record gives; every read of the site in its scope (nested bodies included, unless
they redefine the name) and the body's outputs of that name read the block's output. A wrong
block, a reader left behind or one moved too many all change an output.
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx

from ..index import iter_graphs, subgraphs
from ..io import Model
from ..names import NameAllocator
from ..protos import default_opset, rename_scoped
from ..record import InsertRecord, RerouteRecord
from ..surgery._bodies import children_first, locate, outer_types
from .invariant import Check, Context, dtype_of, run_all
from .locate import Side

_FALLBACK_OPSET = 17


def _block_nodes(new: onnx.ModelProto, site: InsertRecord
                 ) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """The site's block as the rewritten model holds it: its nodes (by the record's names, in
    the body or graph holding them) and the initializers of that graph they read."""
    wanted = set(site.block_nodes)
    for g in iter_graphs(new.graph):
        nodes = [n for n in g.node if n.name in wanted]
        if nodes:
            read = {x for n in nodes for x in n.input}
            return nodes, [t for t in g.initializer if t.name in read]
    return [], []


def _splice_reference(graph: onnx.GraphProto, at: str, nodes: Sequence[onnx.NodeProto],
                      inits: Sequence[onnx.TensorProto], out: str) -> None:
    """In ``graph``: every read of ``at`` (its nodes, the bodies in them that do not redefine
    it) and its outputs named ``at`` read ``out``; ``nodes`` (computing ``out`` from ``at``) go
    right after the producer of ``at``."""
    for node in graph.node:
        for k, name in enumerate(node.input):
            if name == at:
                node.input[k] = out
        bodies = list(subgraphs(node))
        if bodies:
            rename_scoped(bodies, {at: out}, define=str)
    for vi in graph.output:
        if vi.name == at:
            vi.name = out
    pos = next((i + 1 for i, n in enumerate(graph.node) if at in n.output), 0)
    for k, node in enumerate(nodes):
        graph.node.insert(pos + k, node)
    graph.initializer.extend(inits)


def insert_reference(ctx: Context, record: InsertRecord) -> Model:
    """The original with every site's block spliced in by hand (see the module docstring)."""
    from .rewrite import _fresh_block

    proto = onnx.ModelProto()
    proto.CopyFrom(ctx.orig.model.proto)
    new = ctx.new.model.proto
    types = outer_types(proto)  # every graph's declared, then inferred, types
    names = NameAllocator.for_model(proto)
    opset = default_opset(new) or _FALLBACK_OPSET
    sites = record.each()
    by_path: dict[str, list[InsertRecord]] = {}
    for site in sites:
        by_path.setdefault(site.graph or "", []).append(site)
    order = [*children_first(proto, [p for p in by_path if p]), *([""] if "" in by_path else [])]
    for path in order:
        graph = locate(proto, path) if path else proto.graph
        for site in by_path[path]:
            at = site.at
            vi = types.get(at)
            elem = vi.type.tensor_type.elem_type if vi is not None and vi.type.HasField(
                "tensor_type") else 0
            shape = None
            if vi is not None and vi.type.HasField("tensor_type") and \
                    vi.type.tensor_type.HasField("shape"):
                shape = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                         for d in vi.type.tensor_type.shape.dim]
            out = names.fresh(f"{at}__reference")
            fresh = _fresh_block(site, elem, opset, shape, vi.type if vi is not None else None)
            if fresh is not None:
                bg = fresh.graph
                b_in, b_out = bg.input[0].name, bg.output[0].name
                local = {b_in: at, b_out: out}
                for t in bg.initializer:
                    local[t.name] = names.fresh(f"{out}/{t.name}")
                for n in bg.node:
                    for o in n.output:
                        local.setdefault(o, names.fresh(f"{out}/{o}"))
                nodes = [onnx.NodeProto() for _ in bg.node]
                for dst, src in zip(nodes, bg.node, strict=True):
                    dst.CopyFrom(src)
                    dst.name = names.fresh(f"{out}/{src.op_type}")
                    dst.input[:] = [local.get(x, x) for x in src.input]
                    dst.output[:] = [local.get(x, x) for x in src.output]
                inits = [onnx.TensorProto() for _ in bg.initializer]
                for dst_t, src_t in zip(inits, bg.initializer, strict=True):
                    dst_t.CopyFrom(src_t)
                    dst_t.name = local[src_t.name]
                for opi in fresh.opset_import:
                    if opi.domain and opi.domain not in {o.domain for o in proto.opset_import}:
                        proto.opset_import.append(opi)
            else:
                nodes, inits = _block_nodes(new, site)
                nodes = [_copy(n) for n in nodes]
                fed = (site.renamed or {}).get(at, at)
                for n in nodes:
                    n.input[:] = [at if x == fed else x for x in n.input]
                    n.output[:] = [out if x == site.processed else x for x in n.output]
            _splice_reference(graph, at, nodes, inits, out)
    return Model(proto, base_dir=ctx.orig.model.base_dir)


def _copy(node: onnx.NodeProto) -> onnx.NodeProto:
    c = onnx.NodeProto()
    c.CopyFrom(node)
    return c


def check_insert_bodies(ctx: Context, record: InsertRecord, check: Check) -> None:
    """An insert with sites inside bodies: every graph output of the rewritten model equals
    the hand-spliced reference's (by position, exactly)."""
    new, feeds = ctx.new, ctx.feeds
    ref = ctx.stage(insert_reference(ctx, record), "reference")
    pairs = list(zip(ref.output_names, new.output_names, strict=False))
    if len(ref.output_names) != len(new.output_names):
        check.missing("downstream", ref.output_names[0] if ref.output_names else "-",
                      f"the rewritten model has {len(new.output_names)} outputs, the reference "
                      f"{len(ref.output_names)}")
        return
    ref_vals = run_all(ref, feeds, [r for r, _ in pairs])
    new_vals = run_all(new, feeds, [c for _, c in pairs])
    inside = sorted({s.graph for s in record.each() if s.graph})
    note = (f"{sum(1 for s in record.each() if s.graph)} sites inside {', '.join(inside)}: "
            "checked through every graph output against the original with each block spliced "
            "in by hand")
    if note not in check.notes:
        check.notes.append(note)

    def sides(k: int) -> tuple[Side, Side]:
        return Side(ref, feeds[k]), Side(new, feeds[k])

    for r, c in pairs:
        check.compare("downstream", r, c, ref_vals, new_vals, dtype=dtype_of(ref, r),
                      exact=True, sides=sides, label=f"{c} against the hand-spliced reference")



def check_reroute_body(ctx: Context, record: RerouteRecord, check: Check) -> None:
    """A reroute inside a body: every graph output equals the original's with, in that body,
    the recorded readers (their nested bodies too) and outputs reading the target by hand."""
    from .verbs import _body_position

    proto = onnx.ModelProto()
    proto.CopyFrom(ctx.orig.model.proto)
    graph = locate(proto, record.graph or "")
    source, target = record.source, record.target
    for label in record.rerouted:
        k = _body_position(graph, label)
        if k is None:
            check.missing("reroute", label, f"the body '{record.graph}' of the original has no "
                          f"node '{label}'")
            return
        node = graph.node[k]
        node.input[:] = [target if x == source else x for x in node.input]
        bodies = list(subgraphs(node))
        if bodies:
            rename_scoped(bodies, {source: target}, define=str)
    for vi in graph.output:
        if vi.name == source and source in record.rerouted_outputs:
            vi.name = target
    new, feeds = ctx.new, ctx.feeds
    ref = ctx.stage(Model(proto, base_dir=ctx.orig.model.base_dir), "reference")
    pairs = list(zip(ref.output_names, new.output_names, strict=False))
    ref_vals = run_all(ref, feeds, [r for r, _ in pairs])
    new_vals = run_all(new, feeds, [c for _, c in pairs])
    check.notes.append(f"rerouted inside the body '{record.graph}': checked through every graph "
                       "output against the original rerouted there by hand")

    def sides(k: int) -> tuple[Side, Side]:
        return Side(ref, feeds[k]), Side(new, feeds[k])

    for r, c in pairs:
        check.compare("downstream", r, c, ref_vals, new_vals, dtype=dtype_of(ref, r),
                      exact=True, sides=sides, label=f"{c} against the reference")
