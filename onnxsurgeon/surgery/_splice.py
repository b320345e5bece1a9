"""Splicing a prepared block into its host for ``insert``: the plan (everything decided and
checked), retyping what lies downstream when the block changes the activation's type, and the
mutation itself."""

from __future__ import annotations

from dataclasses import dataclass

import onnx

from ..closure import downstream_nodes
from ..errors import RewriteError
from ..index import GraphIndex
from ..protos import set_default_opset, weightless_copy
from ..upkeep import Upkeep
from ._edges import rewire


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


def _rename_source(index: GraphIndex, at: str, pre: str) -> list[str]:
    """The producer of ``at`` writes ``pre`` instead, and ``at``'s value_info follows; readers of
    ``at`` are left alone (they will read the block's output, which takes the name ``at``).
    Returns the labels of the main-graph nodes reading ``at`` (they read processed values now)."""
    g = index.graph
    node = g.node[index.producer[at]]
    for k, name in enumerate(node.output):
        if name == at:
            node.output[k] = pre
    for vi in g.value_info:
        if vi.name == at:
            vi.name = pre
    readers = sorted({u.node for u in index.uses_of(at)})
    return [index.node_label(i) for i in readers]


def splice(host: onnx.ModelProto, index: GraphIndex, plan: Plan) -> tuple[list[str], list[str]]:
    """Apply ``plan`` to ``host`` (``index`` is the host's index). Mutates host; the plan's block
    is only read, so the same plan can be applied to a probe copy first."""
    g = host.graph
    if plan.new_host_opset is not None:
        set_default_opset(host, plan.new_host_opset)
        for fn in host.functions:
            set_default_opset(fn, plan.new_host_opset)
    rerouted: list[str] = []
    rerouted_outputs: list[str] = []
    if plan.pre is not None:
        rerouted, rerouted_outputs = _rename_source(index, plan.at, plan.pre), [plan.at]
        for out in g.output:
            if out.name == plan.at:
                out.CopyFrom(plan.processed_vi)
    elif not plan.as_output:
        rerouted = rewire(index, index.uses_of(plan.at), plan.processed)
        for out in g.output:
            if out.name == plan.at:
                out.CopyFrom(plan.processed_vi)
                rerouted_outputs.append(plan.at)
    bg = plan.block.graph
    g.initializer.extend(bg.initializer)
    g.sparse_initializer.extend(bg.sparse_initializer)
    if host.ir_version < 4:  # IR 3 wants every initializer listed as a graph input too
        g.input.extend(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                       for t in bg.initializer)
    g.value_info.extend(vi for vi in bg.value_info if vi.name != plan.processed)
    if plan.as_output:
        g.output.append(plan.processed_vi)
    elif not rerouted_outputs and plan.processed_vi.type.WhichOneof("value") is not None:
        g.value_info.append(plan.processed_vi)
    pos = index.producer[plan.at] + 1 if plan.at in index.producer else 0
    for k, node in enumerate(bg.node):
        g.node.insert(pos + k, node)
    host.functions.extend(plan.functions)
    host.opset_import.extend(plan.opsets)
    return rerouted, rerouted_outputs


def upkeep_after_splice(index: GraphIndex, plan: Plan, readers: list[int]) -> Upkeep:
    """What :func:`splice` changed, told to an :class:`~onnxsurgeon.upkeep.Upkeep` of the
    host's ``index`` (``readers``: the main-graph nodes reading ``plan.at`` before): the
    activation renamed to ``plan.pre``, the block's initializers (and IR 3 inputs) added, its
    nodes inserted after the activation's producer, the readers rewired."""
    upkeep = Upkeep(index)
    if plan.pre is not None:
        upkeep.rename_tensors({plan.at: plan.pre})
    bg = plan.block.graph
    if len(bg.initializer) or len(bg.sparse_initializer):
        if index.model.ir_version >= 4 and not len(bg.sparse_initializer):
            upkeep.leaves_appended([t.name for t in bg.initializer])
        else:  # IR 3 lists them as graph inputs too (inputs come first in the numbering)
            upkeep.leaves_changed()
        upkeep.created_tensors(bg.initializer)
    pos = index.producer[plan.at] + 1 if plan.at in index.producer else 0
    count = len(bg.node)
    upkeep.inserted(pos, count)
    if not plan.as_output:
        upkeep.reread(i + count if i >= pos else i for i in readers)
    return upkeep


def downstream_types(host: onnx.ModelProto, plan: Plan, label: str) -> dict[str, onnx.ValueInfoProto]:
    """When the block changes the activation's type, the declared types of everything computed
    from it may be stale. Splice into a weight-free probe, infer strictly, and return the new
    ValueInfo of every main-graph tensor downstream of the processed tensor. Refuses (before the
    host changes) when the downstream cannot take the processed tensor."""
    probe = weightless_copy(host)
    probe_index = GraphIndex(probe)
    splice(probe, probe_index, plan)
    probe_index = GraphIndex(probe)
    affected = {o for i in downstream_nodes(probe_index, [plan.processed])
                for o in probe.graph.node[i].output if o}
    affected_in_graph = {vi.name for vi in probe.graph.value_info} | {vi.name for vi in probe.graph.output}
    # declared types of affected tensors are what would clash: drop them before inferring
    keep = [vi for vi in probe.graph.value_info if vi.name not in affected]
    del probe.graph.value_info[:]
    probe.graph.value_info.extend(keep)
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


def retype(host: onnx.ModelProto, fresh: dict[str, onnx.ValueInfoProto]) -> None:
    """Replace the declared types of the tensors in ``fresh`` (value_info and graph outputs)."""
    g = host.graph
    keep = [vi for vi in g.value_info if vi.name not in fresh]
    known = {vi.name for vi in g.value_info}
    if len(keep) != len(g.value_info):
        del g.value_info[:]
        g.value_info.extend(keep)
        g.value_info.extend(fresh[n] for n in sorted(known & fresh.keys()))
    for out in g.output:
        if out.name in fresh:
            out.type.CopyFrom(fresh[out.name].type)

