"""``insert``: splice a processing block (built-in or any one-input one-output model) at a tensor.

The steps live beside it: opset reconciliation in ``_opsets`` (shared with ``merge``), block
preparation and merging of functions and opset imports in ``_blocks``, the splice and the
retyping of what lies downstream in ``_splice``. This module decides and checks, then mutates.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field, replace
from typing import Any

import onnx

from ..edit import Edit
from ..errors import RewriteError, SurgeryError, UsageError
from ..index import GraphIndex
from ..io import Model, as_model
from ..names import NameAllocator
from ..processing import (
    ParamValue,
    make_typed_block,
    min_opset_for,
    normalize_params,
    opset_for_import,
)
from ..protos import default_opset
from ..record import InsertRecord, add_rewrite, site_entry
from ..select import Selector, Site, follow_renames, is_selector
from ..session import hand_on, indexed
from ..types import TypeOracle, is_complete, renamed_value_info
from ._blocks import (
    block_io,
    infer_output,
    merge_functions,
    merge_opsets,
    prepare_graph_block,
    rename_block,
)
from ._bodies import BodyModel, body_model, children_first, host_names, outer_types, put_back
from ._bodies import split as split_sites
from ._edges import check_types
from ._opsets import changed_ops, default_nodes, reconcile
from ._proto import quick_value_info
from ._shown import Shown
from ._splice import Plan, downstream_types, retype, splice, splice_many


@dataclass(frozen=True)
class InsertResult(Shown):
    """What ``insert`` did.

    Attributes:
        processed: name of the block's output tensor in the host.
        rerouted: main-graph nodes that now read ``processed`` (nodes whose nested bodies read it
            count), in node order.
        rerouted_outputs: graph outputs that now carry the processed values (their names as
            before the insert; they keep them unless ``keep_output_name`` was off).
        block_nodes: names of the block's nodes in the host, in order.
        renamed: tensors renamed by the insert, old name -> new name: the activation itself
            when it was a graph output that kept its name (the unprocessed values moved to a new
            tensor), else empty.
        at: the ONNX name of the activation the block reads (``at`` resolved).
        block: the built-in block's name, or ``"graph"`` for a user graph.
        params: the built-in block's parameters as checked (empty for a graph).
        as_output: the processed tensor became a new graph output (nothing rerouted).
        sites: with a selector matching several tensors, one result per site in node order
            (the fields above are the first site's); empty for one main-graph site.
        graph: "" for a site in the main graph, else the path of the If/Loop/Scan body holding
            it (``Loop_0/body``); ``rerouted`` then names nodes of that body and
            ``rerouted_outputs`` its outputs.
    """

    processed: str
    rerouted: list[str]
    rerouted_outputs: list[str]
    block_nodes: list[str]
    renamed: dict[str, str] = field(default_factory=dict)
    _: KW_ONLY
    at: str
    block: str
    params: dict[str, Any]
    as_output: bool
    sites: tuple[InsertResult, ...] = ()
    graph: str = ""

    def each(self) -> tuple[InsertResult, ...]:
        """Every site's result, in node order (this result itself for one site)."""
        return self.sites or (self,)

    def record(self) -> InsertRecord:
        """The rewrite record of this insert (the entry the verb adds to the model's log)."""
        return InsertRecord(
            at=self.at, processed=self.processed, block=self.block, params=dict(self.params),
            block_nodes=tuple(self.block_nodes), rerouted=tuple(self.rerouted),
            rerouted_outputs=tuple(self.rerouted_outputs), as_output=self.as_output,
            renamed=dict(self.renamed) or None,
            sites=tuple(site_entry(r.at, r.processed, r.block_nodes, r.rerouted,
                                   r.rerouted_outputs, r.renamed, r.graph)
                        for r in self.sites) or None,
            graph=self.graph or None,
        )


@dataclass
class _Site:
    """One site of an insert, planned and checked (nothing changed yet)."""

    at: str
    plan: Plan
    block_nodes: list[str]
    fresh_types: dict[str, onnx.ValueInfoProto] | None


def _sites(index: GraphIndex, at: str | Sequence[str]) -> list[Site]:
    """The activations ``at`` names: one per plain name, every match of a selector (inside
    If/Loop/Scan bodies too); in order, each once."""
    selector = Selector(index)
    texts = [at] if isinstance(at, str) else list(at)
    if not texts:
        raise UsageError("insert needs a tensor to insert at; give at=NAME or a selector")
    found = [s for text in texts for s in (
        selector.find(text) if is_selector(text) else [Site(selector.resolve(text), None, "",
                                                            text)])]
    seen: set[tuple[str, str | None]] = set()
    return [s for s in found if (s.graph, s.tensor) not in seen
            and not seen.add((s.graph, s.tensor))]  # type: ignore[func-returns-value]


def insert(
    model: Model | onnx.ModelProto,
    at: str | Sequence[str],
    /,
    *,
    op: str | None = None,
    params: Mapping[str, ParamValue] | None = None,
    graph: onnx.ModelProto | Model | None = None,
    as_output: bool = False,
    keep_output_name: bool = True,
) -> InsertResult:
    """Splice a processing block at tensor ``at``. Mutates model.

    ``at`` may be a selector (``glob:encoder.layer.?.output``, ``re:...``, ``op:LayerNormalization``)
    or a list of names and selectors: one block goes in at every tensor they match, in one
    rewrite with one record listing every site (``result.each()``). A match inside an
    If/Loop/Scan body gets its block in that body (``surgery/_bodies.py``): the body's readers,
    and those in bodies nested in it, read the block's output, a body output plays a graph
    output's part (it keeps its name), and ``result.graph`` / the record's site say which body.

    A function written in TensorFlow or PyTorch is spliced by
    ``onnxsurgeon.converters.insert_function(model, at, func, framework)``, which exports it to
    a block and calls this function (the core never imports the converters).

    The block is a built-in (``op``, see :mod:`onnxsurgeon.processing`) or any model with one
    input and one output (``graph``). Its names are made unique under ``"<at>/<block>/"``, its
    opset is reconciled with the host's (``surgery/_opsets.py``), its initializers, local
    functions and extra opset imports are merged. By default every reader of ``at`` — main-graph
    nodes, nodes inside If/Loop/Scan bodies and graph outputs — reads the processed tensor
    instead; with ``as_output`` nothing is rerouted and the processed tensor becomes a new graph
    output. Everything is checked before the model changes.

    Output names are a deployed model's API: when ``at`` is a graph output, the processed tensor
    takes its name and the unprocessed values move to a new tensor ``<at>/pre_<block>``
    (``result.renamed``; the converters' name map follows). ``keep_output_name=False`` gives the
    processed tensor a new name instead, and the graph output takes that name. A graph input
    that is also a graph output cannot keep its name (the input would change): it is renamed.

    Before:  conv -> act -> {fc, pool}                 (act not a graph output)
    After:   conv -> act -> l2_normalize -> act/l2_normalize -> {fc, pool}
    Before:  conv -> act -> {fc, pool, <output act>}
    After:   conv -> act/pre_l2_normalize -> l2_normalize -> act -> {fc, pool, <output act>}
    as_output: conv -> act -> {fc, pool, <output act>};  act -> l2_normalize -> <output>

    O(nodes + edges) of the host plus shape inference on the block.

    Raises:
        UsageError: not exactly one of ``op`` / ``graph``; bad block parameters; nothing reads
            ``at`` and ``as_output`` is off; ``as_output`` with a site inside a body.
        NotFoundError / AmbiguousNameError: ``at`` does not name one tensor (a selector:
            matches none).
        RewriteError: block with several inputs or outputs, dtype or shape mismatch, opsets that
            cannot be reconciled, clashing domain versions.
    """
    m = as_model(model)
    host = m.proto
    if (op is None) == (graph is None):
        raise UsageError("insert needs exactly one of op (a built-in block name) or graph (an ONNX model)")
    if params and op is None:
        raise UsageError("params only apply to a built-in block (op=...); a graph block takes none")
    index = indexed(m)  # load's int dataflow graph rides along when the model is unchanged
    found = _sites(index, at)
    record_params = normalize_params(op, params) if op is not None else {}
    options: dict[str, Any] = {"op": op, "params": record_params, "graph": graph,
                               "as_output": as_output, "keep_output_name": keep_output_name,
                               "several": len(found) > 1}
    main, bodies = split_sites(found)
    if not bodies:
        results = _insert_at(m, index, [s.tensor or "" for s in main], **options)
    else:
        results = _insert_in_bodies(m, index, found, main, bodies, options)
    first = results[0]
    several = len(results) > 1 or bool(first.graph)  # a body site: its path is in the record
    result = replace(first, sites=tuple(results)) if several else first
    add_rewrite(host, result.record())
    return result


def _insert_in_bodies(m: Model, index: GraphIndex, found: list[Site], main: list[Site],
                      bodies: dict[str, list[Site]], options: dict[str, Any]) -> list[InsertResult]:
    """Insert at sites inside If/Loop/Scan bodies (``surgery/_bodies.py``), each body as the
    main graph of a body model, children first, then at the main-graph sites. Every site is
    checked before the host changes when one body holds them all; else a failing later site
    restores the host as it was (one copy of the proto, taken only then)."""
    host = m.proto
    if options["as_output"]:
        where = next(iter(bodies))
        raise UsageError(f"as_output makes the processed tensor a graph output, but a site is "
                         f"inside the body '{where}', whose outputs are fixed by its node; "
                         "insert there without as_output")
    types = outer_types(host)
    taken = host_names(host)
    saved: onnx.ModelProto | None = None
    if len(bodies) + bool(main) > 1:
        saved = onnx.ModelProto()
        saved.CopyFrom(host)
    by_site: dict[tuple[str, str | None], InsertResult] = {}
    e = Edit(indexed(m), follow=False)  # bodies are not followed: the next verb indexes
    try:
        for path in children_first(host, bodies):
            body: BodyModel = body_model(host, path, types)
            inner = as_model(body.model)
            sub = [s.tensor or "" for s in bodies[path]]
            try:
                results = _insert_at(inner, indexed(inner), sub, taken=taken, **options)
            except SurgeryError as exc:  # the body's outputs play the graph outputs' part
                raise type(exc)(f"inside the body '{path}': {exc}") from None
            taken.update(host_names(body.model))  # every name the blocks brought in
            was, now = default_opset(host), default_opset(body.model)
            if was is not None and now is not None and now != was and changed_ops(
                    default_nodes(host, functions=True), was, now):
                raise RewriteError(
                    f"the block needs opset {now} but the model is at {was}, and ops of the "
                    f"model change meaning between them (site in body '{path}'); convert the "
                    f"model first (onnxsurgeon opset MODEL --to {now})")
            put_back(e, body)
            by_site.update(((path, r.at), replace(r, graph=path)) for r in results)
        e.hand_on(m)
        if main:
            results = _insert_at(m, indexed(m), [s.tensor or "" for s in main], **options)
            by_site.update(((r.graph, r.at), r) for r in results)
    except BaseException:
        if saved is not None:
            host.CopyFrom(saved)
            hand_on(m, None)
        raise
    return [by_site[(s.graph, s.tensor)] for s in found]


def _insert_at(m: Model, index: GraphIndex, ats: list[str], *, op: str | None,
               params: dict[str, Any], graph: onnx.ModelProto | Model | None, as_output: bool,
               keep_output_name: bool, several: bool,
               taken: set[str] | None = None) -> list[InsertResult]:
    """Insert at the main-graph tensors ``ats`` of ``m`` (checked, then spliced in one edit):
    one result per site, no record. ``taken``: names the fresh ones must avoid besides the
    model's (a body model's host)."""
    host = m.proto
    if len(ats) > 1:
        index.consumers  # noqa: B018 - every reader at once (O(edges)), not a scan per site
    oracle = TypeOracle(index, quick=lambda name: quick_value_info(index, name))
    names = NameAllocator.for_index(index)
    for name in taken or ():
        names.reserve(name)
    built: dict[Any, Any] = {}
    planned = [_plan(index, oracle, names, a, op=op, params=params, graph=graph,
                     as_output=as_output, keep_output_name=keep_output_name, several=several,
                     built=built)
               for a in ats]

    # ------------------------------------------------------------------ mutate (all checked)
    e = Edit(index)
    if len(planned) == 1:
        done = [splice(e, planned[0].plan)]
    else:
        done = splice_many(e, [site.plan for site in planned])
    fresh_types = {k: v for site in planned for k, v in (site.fresh_types or {}).items()}
    if fresh_types:
        retype(e, fresh_types)
    every_renamed = {site.at: site.plan.pre for site in planned if site.plan.pre is not None}
    follow_renames(host, every_renamed)
    e.hand_on(m)
    block_name = op if op is not None else "graph"
    return [InsertResult(site.plan.processed, rerouted, rerouted_outputs, site.block_nodes,
                         {site.at: site.plan.pre} if site.plan.pre is not None else {},
                         at=site.at, block=block_name, params=params, as_output=bool(as_output))
            for site, (rerouted, rerouted_outputs) in zip(planned, done, strict=True)]


def _plan(index: GraphIndex, oracle: TypeOracle, names: NameAllocator, at_name: str, *,
          op: str | None, params: dict[str, Any], graph: onnx.ModelProto | Model | None,
          as_output: bool, keep_output_name: bool, several: bool, built: dict[Any, Any]) -> _Site:
    """Build, check and place the block for one site (``several``: one of many sites, which
    the block may not retype: the changes would compound). Changes nothing but ``names``."""
    host = index.model
    at_vi = oracle.value_info(at_name)
    at_type = oracle.elem_type(at_name)
    at_shape = oracle.shape(at_name)
    uses = index.uses_of(at_name)
    as_graph_output = at_name in index.outputs
    if not as_output and not uses and not as_graph_output:
        raise UsageError(
            f"nothing reads tensor '{at_name}' and it is not a graph output; use as_output to "
            "expose the processed tensor as a new graph output"
        )

    key = (at_type, tuple(at_shape) if at_shape is not None else None,
           at_vi.type.SerializeToString() if at_vi is not None else b"")
    if key not in built:  # sites of one type share the block built and inferred for it
        built_vi = None
        if op is not None:
            label = op
            record_params = params
            h = default_opset(host)
            new_host_opset: int | None = None
            at_value_type = at_vi.type if at_vi is not None else None
            if h is None:  # an ai.onnx.ml-only host: it gets a default-domain import
                h = new_host_opset = opset_for_import(host, op)
            need = min_opset_for(op, at_value_type)
            if h < need and not changed_ops(default_nodes(host, functions=True), h, need):
                h = new_host_opset = need  # a pure version bump: no host op changes meaning
            block, built_vi = make_typed_block(op, record_params, elem_type=at_type, opset=h,
                                               shape=at_shape, value_type=at_value_type)
        else:
            assert graph is not None
            block, label = prepare_graph_block(graph)
            bx, _ = block_io(block, label)
            bx_type = bx.type.tensor_type.elem_type if bx.type.HasField("tensor_type") else 0
            bx_shape = None
            if bx.type.HasField("tensor_type") and bx.type.tensor_type.HasField("shape"):
                bx_shape = [d.dim_value if d.HasField("dim_value") else None
                            for d in bx.type.tensor_type.shape.dim]
            check_types(f"block '{label}' input '{bx.name}' vs tensor '{at_name}'",
                        bx.name, at_name, bx_type, at_type, bx_shape, at_shape)
            block, new_host_opset = reconcile(block, host, label)
        block_io(block, label)
        x_type = at_vi.type if at_vi is not None else None
        if built_vi is not None and x_type is not None and x_type == block.graph.input[0].type:
            processed_vi = built_vi  # inferred while building, for this very input type
        else:
            processed_vi = infer_output(block, x_type, label)
        opsets_to_add = merge_opsets(block, host, label)
        functions_to_add = merge_functions(block, host)
        built[key] = (block, label, new_host_opset, processed_vi, opsets_to_add, functions_to_add)
    made, label, new_host_opset, processed_vi, opsets_to_add, functions_to_add = built[key]
    block = onnx.ModelProto()
    block.CopyFrom(made)  # renamed into the host below: each site its own copy

    safe_label = label.replace("/", "_")
    pre: str | None = None
    if (keep_output_name and as_graph_output and not as_output and at_name in index.producer
            and at_name not in index.inputs):
        pre = names.fresh(f"{at_name}/pre_{safe_label}")
        processed = at_name
    else:
        processed = names.fresh(f"{at_name}/{safe_label}")
    block_nodes = rename_block(block, pre or at_name, f"{at_name}/{safe_label}/", processed, names)
    processed_vi = renamed_value_info(processed_vi, processed)
    if (as_output or as_graph_output) and not is_complete(processed_vi):
        # a graph output needs an element type and a rank (onnx.checker); a Loop-carried value
        # can leave both unknown to onnx and onnxruntime alike (gauntlet bug: exit 3 before)
        raise RewriteError(
            f"the rank of tensor '{at_name}' is unknown (no value_info; neither onnx nor "
            f"onnxruntime can infer it), so the processed tensor cannot become a graph output; "
            f"add value_info with its shape for '{at_name}'"
        )

    plan = Plan(block, at_name, processed, processed_vi, as_output, new_host_opset,
                 functions_to_add, opsets_to_add, pre)
    fresh_types: dict[str, onnx.ValueInfoProto] | None = None
    if not as_output and (at_vi is None or at_vi.type != processed_vi.type):
        if several and at_vi is not None:
            raise RewriteError(
                f"block '{label}' changes the type of '{at_name}', and a selector gives it "
                "several sites whose changes would compound; insert at each site in turn, or "
                "use as_output")
        fresh_types = downstream_types(host, plan, label)
    return _Site(at_name, plan, block_nodes, fresh_types)

