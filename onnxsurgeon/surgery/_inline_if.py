"""``fold``'s inlining of an ``If`` whose condition is a constant: the branch it always takes
replaces it (onnx-graphsurgeon's ``fold_constants`` and onnxsim do the same).

Before:  cond = <initializer True>;  y = If(cond) {then: t = Relu(x) -> t | else: e = Neg(x) -> e}
After:   y = Relu(x)

The branch's nodes go where the If was, in their order; a name the branch defines is renamed
where the host already has it (one :class:`~onnxsurgeon.names.NameAllocator`), the branch output
a branch node computes takes the If's output name, any other (an outer tensor or an initializer
passed through) reaches it by an ``Identity``; the branch's initializers join the host's; reads
inside the bodies of inlined nodes follow the renames scope by scope. Main graph only. Planned in
full (copies of the branches) before the caller's one edit changes anything.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from ..edit import Edit
from ..index import GraphIndex, subgraphs
from ..names import NameAllocator, all_names, graph_names


@dataclass(frozen=True)
class Inlined:
    """One If replaced by its branch: its position, the label, the branch taken, the nodes and
    initializers that replace it (private copies renamed into the host), and the renames the
    reads inside their bodies follow (applied with the edit: :func:`apply_inline`)."""

    position: int
    label: str
    branch: str
    nodes: tuple[onnx.NodeProto, ...]
    initializers: tuple[onnx.TensorProto, ...]
    renames: Mapping[str, str]


def _condition(name: str, inits: Mapping[str, onnx.TensorProto]) -> bool | None:
    """The value of a one-element constant condition, else None."""
    t = inits.get(name)
    if t is None or t.data_location == onnx.TensorProto.EXTERNAL or t.ByteSize() > 64:
        return None
    value = numpy_helper.to_array(t)
    if value.size != 1 or value.dtype.kind not in "biuf":
        return None
    return bool(np.asarray(value).reshape(-1)[0])


def plan_inline(index: GraphIndex, inputs: set[str]) -> list[Inlined]:
    """Every main-graph ``If`` (standard domain) whose condition is an initializer that is not
    a graph input, with the branch it takes planned as host nodes. A branch holding sparse
    initializers stays an If. O(nodes) plus the size of the branches inlined."""
    graph = index.graph
    ifs = [i for i, node in enumerate(graph.node)
           if node.op_type == "If" and node.domain in ("", "ai.onnx") and node.input]
    if not ifs:
        return []
    inits = {t.name: t for t in graph.initializer if t.name not in inputs}
    chosen: list[tuple[int, str, onnx.GraphProto]] = []
    for i in ifs:
        node = graph.node[i]
        cond = _condition(node.input[0], inits)
        if cond is None:
            continue
        key = "then_branch" if cond else "else_branch"
        branch = next((a.g for a in node.attribute if a.name == key), None)
        if branch is None or len(branch.sparse_initializer) or \
                len(branch.output) != len(node.output):
            continue
        chosen.append((i, key, branch))
    if not chosen:
        return []
    names = _allocator(index.model, [graph.node[i] for i, _, _ in chosen])
    return [_plan_one(i, index.node_label(i), key, graph.node[i], branch, names)
            for i, key, branch in chosen]


def _allocator(model: onnx.ModelProto, gone: Sequence[onnx.NodeProto]) -> NameAllocator:
    """Names taken in ``model`` once the If nodes ``gone`` and their bodies are: a branch's
    names stay as they are unless the rest of the model has them. O(names)."""
    counts = Counter(all_names(model))
    for node in gone:
        counts[node.name] -= 1
        for body in subgraphs(node):
            counts.subtract(graph_names(body))
    return NameAllocator(name for name, k in counts.items() if k > 0)


def _plan_one(i: int, label: str, key: str, node: onnx.NodeProto, branch: onnx.GraphProto,
              names: NameAllocator) -> Inlined:
    """The branch ``branch`` of If ``node`` as private copies renamed into the host."""
    computed = {o for n in branch.node for o in n.output if o}
    renames: dict[str, str] = {}
    taken_outputs: set[str] = set()
    for k, out in enumerate(branch.output):  # a branch node's output takes the If's output name
        if out.name in computed and out.name not in renames and node.output[k]:
            renames[out.name] = node.output[k]
            taken_outputs.add(node.output[k])
    for t in branch.initializer:
        renames[t.name] = names.fresh(t.name)
    for n in branch.node:
        for out in n.output:
            if out and out not in renames:
                renames[out] = names.fresh(out)
    nodes: list[onnx.NodeProto] = []
    for n in branch.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(n)
        if copy.name:
            copy.name = names.fresh(copy.name)
        copy.input[:] = [renames.get(x, x) for x in n.input]
        copy.output[:] = [renames.get(x, x) for x in n.output]
        nodes.append(copy)
    initializers: list[onnx.TensorProto] = []
    for t in branch.initializer:
        tensor = onnx.TensorProto()
        tensor.CopyFrom(t)
        tensor.name = renames[t.name]
        initializers.append(tensor)
    for k, out in enumerate(branch.output):
        target = node.output[k]
        if not target or target in taken_outputs and renames.get(out.name) == target:
            continue
        nodes.append(onnx.helper.make_node(
            "Identity", [renames.get(out.name, out.name)], [target],
            name=names.fresh(f"{label}/{key}/{target}")))
    return Inlined(i, label, key, tuple(nodes), tuple(initializers), renames)


def apply_inline(e: Edit, plans: Sequence[Inlined]) -> None:
    """Replace each planned If by its branch's nodes, in one rebuild of the node list; the
    reads inside the bodies those nodes hold follow the renames (their own definitions stay)."""
    for plan in plans:
        bodies = [g for n in plan.nodes for g in subgraphs(n)]
        if bodies:
            e.rename_scoped(bodies, plan.renames, define=str, depth=1)
    e.replace_nodes({p.position for p in plans}, {p.position: p.nodes for p in plans})
    e.add_initializers([t for p in plans for t in p.initializers])
