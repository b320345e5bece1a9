"""Splicing a prepared block into its host for ``insert``: the plan (everything decided and
checked), retyping what lies downstream when the block changes the activation's type, and the
mutation itself."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import onnx

from ..closure import downstream_nodes
from ..edit import Edit
from ..errors import RewriteError
from ..index import GraphIndex
from ..protos import weightless_copy


@dataclass
class Plan:
    """An insert, fully decided and checked: the renamed block and where and how it goes in."""

    block: onnx.ModelProto
    at: str
    processed: str
    processed_vi: onnx.ValueInfoProto
    as_output: bool
    new_host_opset: int | None
    functions: list[onnx.FunctionProto]
    opsets: list[onnx.OperatorSetIdProto]
    pre: str | None = None
    """When set, ``at`` is a graph output that keeps its name: its producer writes ``pre``, the
    block reads ``pre`` and writes ``at`` (== ``processed``); every reader of ``at`` stays."""


def splice_many(e: Edit, plans: Sequence[Plan]) -> list[tuple[list[str], list[str]]]:
    """Apply several plans (one block per site, all decided on the same index) through ``e``:
    every read moves first, while the node numbers are the index's; then every block's nodes go
    in, in one rebuild of the node list (a tie keeps the plans' order).
    The host's opset, functions and imports come from the first plan (each plan computed the
    same ones). Returns :func:`splice`'s pair per plan. O(nodes + sites x block size)."""
    index = e.index
    assert index is not None
    done = [splice(e, plan, nodes=False, shared=k == 0) for k, plan in enumerate(plans)]
    e.insert_node_groups([(_position(index, plan), plan.block.graph.node) for plan in plans])
    return done


def _position(index: GraphIndex, plan: Plan) -> int:
    """Where the block's nodes go: right after the producer of ``at`` (first for a leaf)."""
    return index.producer[plan.at] + 1 if plan.at in index.producer else 0


def splice(e: Edit, plan: Plan, *, nodes: bool = True,
           shared: bool = True) -> tuple[list[str], list[str]]:
    """Apply ``plan`` through ``e`` (an edit of the host made from the host's index: it records
    every change). The plan's block is only read, so the same plan can be applied to a probe
    copy first. Returns the labels of the rerouted main-graph nodes and the rerouted graph
    outputs. ``nodes=False`` leaves the block's nodes out and ``shared=False`` the host's
    opset, functions and imports (:func:`splice_many` adds them)."""
    index = e.index
    assert index is not None
    host = e.model
    g = host.graph
    if plan.new_host_opset is not None and shared:
        e.set_default_opset(plan.new_host_opset)
    rerouted: list[str] = []
    rerouted_outputs: list[str] = []
    if plan.pre is not None:
        # the producer of ``at`` writes ``pre``; readers of ``at`` stay (they read the block's
        # output, which takes the name ``at``, so they read processed values now)
        rerouted = [index.node_label(i) for i in sorted({u.node for u in index.uses_of(plan.at)})]
        e.rename_output(index.producer[plan.at], plan.at, plan.pre)
        rerouted_outputs = [plan.at]
        for k, out in enumerate(g.output):
            if out.name == plan.at:
                e.set_output(k, value=plan.processed_vi)
    elif not plan.as_output:
        rerouted = e.rewire(index.uses_of(plan.at), plan.processed)
        for k, out in enumerate(g.output):
            if out.name == plan.at:
                e.set_output(k, value=plan.processed_vi)
                rerouted_outputs.append(plan.at)
    bg = plan.block.graph
    e.add_initializers(bg.initializer, made=True)
    e.add_sparse_initializers(bg.sparse_initializer)
    if host.ir_version < 4:  # IR 3 wants every initializer listed as a graph input too
        e.add_inputs([onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                      for t in bg.initializer])
    e.add_value_info(vi for vi in bg.value_info if vi.name != plan.processed)
    if plan.as_output:
        e.add_outputs([plan.processed_vi])
    elif not rerouted_outputs and plan.processed_vi.type.WhichOneof("value") is not None:
        e.add_value_info([plan.processed_vi])
    if nodes:
        e.insert_nodes(_position(index, plan), bg.node)
    if shared:
        e.add_functions(plan.functions)
        e.add_opsets(plan.opsets)
    return rerouted, rerouted_outputs


def downstream_types(host: onnx.ModelProto, plan: Plan, label: str) -> dict[str, onnx.ValueInfoProto]:
    """When the block changes the activation's type, the declared types of everything computed
    from it may be stale. Splice into a weight-free probe, infer strictly, and return the new
    ValueInfo of every main-graph tensor downstream of the processed tensor. Refuses (before the
    host changes) when the downstream cannot take the processed tensor."""
    probe = weightless_copy(host)
    splice(Edit(GraphIndex(probe), follow=False), plan)
    probe_index = GraphIndex(probe)
    affected = {o for i in downstream_nodes(probe_index, [plan.processed])
                for o in probe.graph.node[i].output if o}
    affected_in_graph = {vi.name for vi in probe.graph.value_info} | {vi.name for vi in probe.graph.output}
    # declared types of affected tensors are what would clash: drop them before inferring
    keep = [vi for vi in probe.graph.value_info if vi.name not in affected]
    Edit.of(probe).set_value_info(keep, copy=False)
    for out in probe.graph.output:
        if out.name in affected:
            out.type.tensor_type.ClearField("shape")
    try:
        inferred = onnx.shape_inference.infer_shapes(probe, check_type=True, strict_mode=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError) as exc:
        first = (str(exc).strip().splitlines() or ["inference failed"])[0][:200]
        if not _infers_strictly(host):  # the host fails by itself: not the block's fault
            inferred = onnx.shape_inference.infer_shapes(probe, strict_mode=False)
            return _typed(inferred, affected & affected_in_graph)
        raise RewriteError(
            f"the graph after '{plan.at}' cannot take the output of block '{label}' ({first}); "
            "use as_output to keep the block off the main path, or pick a shape-preserving block"
        ) from None
    return _typed(inferred, affected & affected_in_graph)


def _typed(inferred: onnx.ModelProto, names: set[str]) -> dict[str, onnx.ValueInfoProto]:
    """Inferred ValueInfo of ``names`` that carry a shape (where inference could not reach, e.g.
    past a custom op, the old declaration is kept)."""
    g = inferred.graph
    return {vi.name: vi for vi in list(g.value_info) + list(g.output)
            if vi.name in names and vi.type.HasField("tensor_type")
            and vi.type.tensor_type.HasField("shape")}


def _infers_strictly(model: onnx.ModelProto) -> bool:
    """True when strict shape inference accepts ``model`` (on a weight-free copy)."""
    try:
        onnx.shape_inference.infer_shapes(weightless_copy(model), check_type=True, strict_mode=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError):
        return False
    return True


def retype(e: Edit, fresh: dict[str, onnx.ValueInfoProto]) -> None:
    """Replace the declared types of the tensors in ``fresh`` (value_info and graph outputs)."""
    g = e.graph
    keep = [vi for vi in g.value_info if vi.name not in fresh]
    known = {vi.name for vi in g.value_info}
    if len(keep) != len(g.value_info):
        e.set_value_info([*keep, *(fresh[n] for n in sorted(known & fresh.keys()))], copy=False)
    for k, out in enumerate(g.output):
        if out.name in fresh:
            e.set_output(k, retype=fresh[out.name].type)
