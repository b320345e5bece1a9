"""``outputs``: expose intermediate tensors as graph outputs, or drop graph outputs.

An added output is a main-graph tensor (any selector), declared with its best known type
(:class:`~onnxsurgeon.types.TypeOracle`); a tensor whose element type or rank is unknown is
refused (onnx.checker wants both on a graph output). A dropped output takes with it what only
it needed: the nodes no remaining output needs any more and the initializers only those nodes
read (nodes that were dead before stay: that is ``cleanup``'s job).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import onnx

from ..edit import Edit
from ..errors import UsageError
from ..index import GraphIndex
from ..io import Model, as_model
from ..record import OutputsRecord, add_rewrite
from ..select import Selector, drop_missing, is_selector
from ..session import indexed
from ..types import TypeOracle, renamed_value_info
from ._proto import quick_value_info
from .cleanup import liveness

__all__ = ["OutputsResult", "outputs"]


@dataclass(frozen=True)
class OutputsResult:
    """What ``outputs`` changed.

    Attributes:
        added: tensors made graph outputs (resolved ONNX names), in the order given.
        removed: graph outputs dropped, in the order given.
        pruned_nodes: main-graph nodes that only the dropped outputs needed (labels).
        pruned_initializers: initializers that only those nodes read.
    """

    added: tuple[str, ...]
    removed: tuple[str, ...]
    pruned_nodes: tuple[str, ...]
    pruned_initializers: tuple[str, ...]

    def record(self) -> OutputsRecord:
        """The rewrite record of this change."""
        return OutputsRecord(added=self.added, removed=self.removed,
                             pruned_nodes=self.pruned_nodes,
                             pruned_initializers=self.pruned_initializers)


def _every(selector: Selector, names: Sequence[str], outs: Collection[str], *,
           drop: bool) -> list[str]:
    """``names`` with each selector replaced by the main-graph tensors it matches: for
    ``drop``, those that are graph outputs; else those that are not (yet). A match inside an
    If/Loop/Scan body is refused: only the main graph has graph outputs."""
    out: list[str] = []
    for name in names:
        if not (is_selector(name) and selector._selects(name)):
            out.append(name)
            continue
        sites = selector.find(name)
        for site in sites:
            if site.graph:
                raise UsageError(
                    f"selector '{name}' matches '{site.tensor}' inside the body "
                    f"'{site.graph}'; only the main graph has graph outputs (a body's values "
                    "leave it through its node's outputs): narrow the selector to main-graph "
                    "tensors")
        found = [s.tensor or "" for s in sites if (s.tensor in outs) == drop]
        if not found:
            what = "is a graph output" if drop else "is not a graph output already"
            raise UsageError(f"selector '{name}' matches {len(sites)} tensors, none of which "
                             f"{what}; narrow or widen the selector")
        out.extend(dict.fromkeys(found))
    return list(dict.fromkeys(out))


def outputs(model: Model | onnx.ModelProto, /, *, add: Sequence[str] = (),
            remove: Sequence[str] = ()) -> OutputsResult:
    """Make the tensors ``add`` graph outputs and drop the graph outputs ``remove``. Mutates
    model.

    Before:  x -> A -> h -> B -> y <output>;  h -> C -> z <output>
    After (add=h, remove=z):  x -> A -> h <output> -> B -> y <output>   (C went with z)

    A selector (``glob:``, ``re:``, ``op:``) in ``add`` adds every main-graph tensor it matches
    that is not an output yet; in ``remove`` it drops every graph output it matches. A match
    inside an If/Loop/Scan body is refused (only the main graph has graph outputs).

    O(nodes + edges) (ints when the main graph holds no body); type inference runs at most once,
    only for an added tensor whose type is not declared.

    Raises:
        NotFoundError / AmbiguousNameError: a name does not resolve (did-you-mean).
        UsageError: nothing asked, a tensor added twice or already an output, an output to drop
            that is not one, every output dropped, an added tensor of unknown type.
    """
    m = as_model(model)
    proto = m.proto
    index = indexed(m)
    if not add and not remove:
        raise UsageError("nothing to change; give --add T (expose a tensor) or --remove T "
                         "(drop a graph output)")
    selector = Selector(index)
    outs = index.outputs
    dropped: list[str] = []
    for name in _every(selector, remove, outs, drop=True):
        resolved = name if name in outs else selector.resolve(name)
        if resolved not in outs:
            listed = ", ".join(f"'{o}'" for o in list(outs)[:8])
            raise UsageError(f"'{name}' is not a graph output (the outputs are {listed}); "
                             "name one of them")
        if resolved in dropped:
            raise UsageError(f"output '{resolved}' is dropped twice; name it once")
        dropped.append(resolved)
    added: list[str] = []
    for name in _every(selector, add, {o: None for o in outs if o not in dropped}, drop=False):
        resolved = selector.resolve(name)
        if resolved in added:
            raise UsageError(f"tensor '{resolved}' is added twice; name it once")
        if resolved in outs and resolved not in dropped:
            raise UsageError(f"tensor '{resolved}' is a graph output already; nothing to add")
        added.append(resolved)
    remaining = [o for o in outs if o not in dropped]
    if not remaining and not added:
        raise UsageError("every graph output would be dropped; keep at least one (or --add one)")
    oracle = TypeOracle(index, quick=lambda name: quick_value_info(index, name))
    infos: list[onnx.ValueInfoProto] = []
    for name in added:
        vi = oracle.value_info(name)
        if vi is None or not _typed(vi):
            raise UsageError(f"tensor '{name}' has no known type (shape inference cannot type "
                             "it); declare its type in value_info, or expose a typed tensor")
        if vi.type.HasField("tensor_type") and not vi.type.tensor_type.HasField("shape"):
            # onnx.checker wants a graph output's shape (its rank at least)
            raise UsageError(f"tensor '{name}' has no known rank (shape inference cannot tell "
                             "it); declare its shape in value_info, or expose a tensor of known "
                             "rank")
        infos.append(renamed_value_info(vi, name))

    new_outputs = [*remaining, *added]
    pruned_nodes: list[str] = []
    pruned_inits: list[str] = []
    kept: list[int] | None = None
    keep_init: list[int] | None = None
    gone: set[str] = set()
    if dropped:
        before = liveness(index, outs, bodies=False)
        after = liveness(index, new_outputs, bodies=False)
        nodes = proto.graph.node
        n = len(nodes)
        freed = [i for i in range(n) if before.live[i] and not after.live[i]]
        if freed:
            freed_set = set(freed)
            kept = [i for i in range(n) if i not in freed_set]
            pruned_nodes = [index.node_label(i) for i in freed]
            for i in freed:
                gone.update(nodes[i].output)
            # initializers only the freed nodes read: needed before, not after, and read by no
            # node that stays (a node dead before may read one too)
            candidates = (before.reads - after.reads) & set(index.initializers)
            candidates -= set(index.inputs)
            if candidates:
                still = _reads_of(index, kept, candidates)
                gone_inits = candidates - still
                names = index.initializer_names()
                keep_init = [k for k, t in enumerate(names) if t not in gone_inits]
                pruned_inits = [t for t in names if t in gone_inits]
                gone |= gone_inits
    result = OutputsResult(tuple(added), tuple(dropped), tuple(pruned_nodes), tuple(pruned_inits))

    # ------------------------------------------------------------------ mutate (all checked)
    e = Edit(index)
    if dropped:
        copies = []
        for o in remaining:
            vi = onnx.ValueInfoProto()
            vi.CopyFrom(proto.graph.output[outs[o]])
            copies.append(vi)
        e.set_outputs(copies)
    e.add_outputs(infos)
    if gone:
        drop_missing(proto, lambda name: name not in gone)
        e.drop_value_info(gone)
    if keep_init is not None:
        e.keep_initializers(keep_init)
    if kept is not None:
        e.keep_nodes(kept)
    e.hand_on(m)
    add_rewrite(proto, result.record())
    return result


def _typed(vi: onnx.ValueInfoProto) -> bool:
    """A type with an element type (a tensor's), or a non-tensor type."""
    kind = vi.type.WhichOneof("value")
    if kind is None:
        return False
    return kind != "tensor_type" or bool(vi.type.tensor_type.elem_type)


def _reads_of(index: GraphIndex, kept: Sequence[int], names: set[str]) -> set[str]:
    """Which of ``names`` the main-graph nodes ``kept`` read (bodies' reads included)."""
    found: set[str] = set()
    nodes = index.graph.node
    captures = index.captures
    for i in kept:
        for r in nodes[i].input:
            if r in names:
                found.add(r)
        for r, _ in captures.get(i, ()):
            if r in names:
                found.add(r)
    return found
