"""The one editing API: every change a verb makes to a model is one call here, which changes the
proto and records the change.

A verb checks everything, plans, then applies its plan through an :class:`Edit` made from the
index it worked on::

    e = Edit(index)
    e.rewire(uses, processed)                 # slots rewired: their nodes are read again
    e.add_initializers(block.initializer, made=True)
    e.insert_nodes(pos, block.node)           # nodes inserted: later ids move, rewires follow
    e.hand_on(model)                          # the journal goes to the session (next verb, save)

Each method feeds the :class:`~onnxsurgeon.upkeep.Upkeep` of that index itself, in the order
the upkeep needs (leaf changes before the nodes that read them; rewired nodes said last, as
they are numbered once every structural edit is done), so the kept index, the set of touched
nodes the save's check relies on (:func:`~onnxsurgeon.checking.check_touched`), the carried
types and the appended range are all derived from the calls that changed the proto; nothing
describes a mutation a second time. An edit the upkeep cannot follow (nodes moved, names
inside a body, a second structural edit after an insert) makes it give up: the next verb
builds its index from the proto.

An ``Edit`` without an index (``Edit.of(proto)``) edits a private proto (a block being prepared,
a probe copy) and records nothing.

Inside IPython only, making an ``Edit`` first keeps a weightless copy of the model as it is
(:func:`onnxsurgeon.record.remember_before`), which the verb's ``add_rewrite`` files with its
record, so a notebook draws the diff of each rewrite; outside IPython that costs one lookup in
``sys.modules`` (:func:`onnxsurgeon.record.in_ipython`). A verb makes one ``Edit`` per model it changes.

Cost: each call is O(what it changes) of protobuf work plus the upkeep's int bookkeeping; bulk
methods (a block of nodes, kept ids, many (node, slot) pairs, a rename map) keep a verb to a
handful of calls. No Python object per node.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from itertools import chain
from operator import attrgetter

import onnx

from .edit_leaves import LeafEdits, _replace_all, keep_only
from .external import attr_tensors
from .index import GraphIndex, Use, positions
from .io import Model
from .order import reorder_nodes
from .protos import (
    node_entries,
    rename_scoped,
    rename_tensors,
    weightless_copy,
)
from .record import in_ipython, remember_before
from .session import hand_on
from .splice import Written, splice_bytes
from .upkeep import Upkeep

__all__ = ["Edit", "keep_only"]

_NAME = attrgetter("name")
_INPUT_OUTPUT = attrgetter("input", "output")
_SERIALIZE = onnx.NodeProto.SerializeToString


class Edit(LeafEdits):
    """One verb's edits of one model, each a call that changes the proto and records it.

    Args:
        index: the index the verb checked and planned on (its model is the one edited); its
            upkeep is fed by every call. The index itself is stale once a call changed the
            structure (ask it before editing).
        follow: False for a verb whose edits the next verb should not trust (it rebuilds).
    """

    def __init__(self, index: GraphIndex, *, follow: bool = True) -> None:
        self.index: GraphIndex | None = index
        self.model = index.model
        if in_ipython():  # a notebook draws the diff of the rewrite (record.RECENT)
            remember_before(self.model, weightless_copy(self.model))
        self.graph = index.graph
        self.upkeep: Upkeep | None = Upkeep(index)
        self._follow = follow
        if not follow:
            self.upkeep.fail()
        self._rewired: set[int] = set()
        """Main-graph nodes whose reads changed, numbered as now (said to the upkeep last)."""
        self._leaves: list[str] | None = None
        """Initializers appended and not said yet; ``_leaves_changed``: other leaf edits."""
        self._leaves_changed = False
        self._inserted = False
        self._structural = False
        """A node was inserted, removed or a slot rewired: the index no longer matches."""

    @classmethod
    def of(cls, model: onnx.ModelProto) -> Edit:
        """An edit of a private proto (a block, a probe): changes it, records nothing."""
        e = cls.__new__(cls)
        e.index, e.model, e.graph, e.upkeep, e._follow = None, model, model.graph, None, False
        e._rewired, e._leaves, e._leaves_changed = set(), None, False
        e._inserted = e._structural = False
        return e

    # ------------------------------------------------------------------ the journal
    def _following(self) -> Upkeep | None:
        """The upkeep, with the leaf edits said so far told to it (they come before any node
        edit that may read them)."""
        upkeep = self.upkeep
        if upkeep is None:
            return None
        if self._leaves_changed:
            upkeep.leaves_changed()
        elif self._leaves:
            upkeep.leaves_appended(self._leaves)
        self._leaves, self._leaves_changed = None, False
        return upkeep

    def give_up(self) -> None:
        """The edits so far are ones the upkeep cannot follow: the next verb rebuilds."""
        if self.upkeep is not None:
            self.upkeep.fail()

    def finish(self) -> Upkeep | None:
        """Tell the upkeep what is still pending (leaf edits, rewired nodes); the journal of
        the edits; None for a private proto or a verb that does not follow its edits
        (``follow=False``). Call once, after the last edit."""
        upkeep = self._following()
        if upkeep is not None and self._rewired:
            upkeep.reread(sorted(self._rewired))
        self._rewired = set()
        return upkeep if self._follow else None

    def hand_on(self, model: Model | onnx.ModelProto) -> None:
        """:meth:`finish` and hand the journal to the open session of ``model``
        (:meth:`onnxsurgeon.session.Session.hand_on`: the next verb's index and the save's
        touched check come from it; without a session it goes nowhere)."""
        hand_on(model, self.finish())

    # ------------------------------------------------------------------ nodes
    def _nodes_moved(self) -> Upkeep | None:
        upkeep = self._following()
        if self._inserted and upkeep is not None:
            upkeep.fail()  # the upkeep reads inserted nodes where they end up: one edit only
        self._structural = True
        return upkeep

    def insert_nodes(self, pos: int, nodes: Sequence[onnx.NodeProto]) -> None:
        """Insert ``nodes`` (copied) at ``pos`` of the main graph's node list (``pos`` = its
        length: appended). Nodes rewired before keep their reads. O(nodes after ``pos``)."""
        upkeep = self._nodes_moved()
        field = self.graph.node
        count = len(nodes)
        if pos >= len(field):
            pos = len(field)
            field.extend(nodes)
        else:
            for k, node in enumerate(nodes):
                field.insert(pos + k, node)
        if upkeep is not None:
            upkeep.inserted(pos, count)
            self._rewired = {i + count if i >= pos else i for i in self._rewired}
        self._inserted = True

    def insert_node_groups(self, groups: Sequence[tuple[int, Sequence[onnx.NodeProto]]]) -> None:
        """Insert each ``(pos, nodes)`` group (copied) at ``pos`` of the main graph's node list
        as it is before the call (a tie keeps the groups' order): one rebuild of the list, so
        many sites cost O(nodes + inserted), not one shift of the list per group. Nodes rewired
        before keep their reads. The upkeep follows one insert only: with several groups the
        next verb rebuilds its index."""
        if len(groups) == 1:
            self.insert_nodes(*groups[0])
            return
        upkeep = self._nodes_moved()
        if upkeep is not None and groups:
            upkeep.fail()
        field = self.graph.node
        n = len(field)
        order = sorted(range(len(groups)), key=lambda k: (min(groups[k][0], n), k))
        old = list(field)
        merged: list[onnx.NodeProto] = []
        starts: list[int] = []
        added: list[int] = []
        at = total = 0
        for k in order:
            pos, nodes = min(groups[k][0], n), groups[k][1]
            merged.extend(old[at:pos])
            merged.extend(nodes)
            at = pos
            total += len(nodes)
            starts.append(pos)
            added.append(total)
        merged.extend(old[at:])
        del field[:]
        field.extend(merged)
        self._rewired = {i + (added[j - 1] if (j := bisect_right(starts, i)) else 0)
                         for i in self._rewired}
        self._inserted = True

    def copy_nodes(self, sources: Sequence[int], names: Sequence[str],
                   inputs: Sequence[Sequence[str]], outputs: Sequence[Sequence[str]], *,
                   ops: Sequence[str] | None = None) -> Sequence[onnx.NodeProto]:
        """Append copies of main-graph nodes ``sources`` named ``names``, reading ``inputs``
        and writing ``outputs`` (one list per copy); ``ops``: their
        :func:`~onnxsurgeon.index.edge_op` when known (no node holds a body): the upkeep then
        takes the fields from these lists instead of reading them back. Returns the copies (a
        body they hold is renamed with :meth:`rename_scoped`). O(copies) C-level copies plus
        the fields written."""
        upkeep = self._nodes_moved()
        field = self.graph.node
        first = len(field)
        field.extend(list(map(field.__getitem__, sources)))  # C-level copies
        copies = field[first:]
        for n, (ins, outs), name, new_in, new_out in zip(
                copies, map(_INPUT_OUTPUT, copies), names, inputs, outputs, strict=True):
            n.name = name
            ins[:] = new_in
            outs[:] = new_out
        if upkeep is not None:
            upkeep.inserted(first, len(sources), None if ops is None else Written(
                inputs, outputs, names, ops))
        self._inserted = True
        return copies

    def keep_nodes(self, kept: Sequence[int]) -> None:
        """Keep only the main-graph nodes ``kept`` (ascending ids), in their order. Rewired
        nodes that stay keep their reads. O(nodes)."""
        upkeep = self._nodes_moved()
        if len(kept) == len(self.graph.node):
            return
        keep_only(self.graph.node, kept)
        if upkeep is not None:
            upkeep.kept_only(kept)
            moved = set()
            for i in self._rewired:
                k = bisect_left(kept, i)
                if k < len(kept) and kept[k] == i:
                    moved.add(k)
            self._rewired = moved

    def remove_nodes(self, removed: Iterable[int]) -> None:
        """Remove the main-graph nodes ``removed`` (ids as now). O(nodes)."""
        gone = set(removed)
        if gone:
            self.keep_nodes([i for i in range(len(self.graph.node)) if i not in gone])

    def replace_nodes(self, removed: Collection[int],
                      inserted: Mapping[int, Sequence[onnx.NodeProto]], *,
                      graph: onnx.GraphProto | None = None) -> None:
        """Remove the nodes ``removed`` and put ``inserted[i]`` (copied) just before node ``i``
        (ids as now; ``i`` = the node count: appended), in one rebuild of the node list of the
        main graph or of ``graph`` (a body of it): :meth:`splice_nodes` of the nodes'
        bytes. The upkeep follows it in the main graph (the new nodes read back from the
        proto). O(nodes + inserted)."""
        encoded = {i: (len(nodes), b"".join(node_entries(list(map(_SERIALIZE, nodes)))))
                   for i, nodes in inserted.items() if nodes}
        self.splice_nodes(removed, encoded, graph=graph)

    def splice_nodes(self, removed: Collection[int], inserted: Mapping[int, tuple[int, bytes]],
                     *, graph: onnx.GraphProto | None = None, written: Written | None = None,
                     stand_ins: Sequence[onnx.NodeProto] | None = None) -> None:
        """Remove the nodes ``removed`` and put the ``count`` nodes serialized in
        ``inserted[i] = (count, data)`` just before node ``i`` (ids as now; ``i`` = the node
        count: appended), in the main graph or in ``graph`` (a body of it). ``data`` holds
        each node as a ``GraphProto.node`` entry (tag, length, the node's bytes; the nodes of
        many sites built once and filled in per site cost no Python object per node). The
        node list is rebuilt from bytes in one parse (upb: a wrapper per node costs more than
        parsing it).

        For the upkeep (main graph only; a body makes it give up): ``written``, the new nodes'
        fields in their order (else read back from the proto), and ``stand_ins`` (see
        :meth:`~onnxsurgeon.upkeep.Upkeep.spliced`: the nodes every new node copies but for
        its names, whose schema check the save runs instead of every copy's).
        O(nodes + inserted bytes)."""
        target = self.graph if graph is None else graph
        upkeep = self._nodes_moved()
        if target is not self.graph or self._rewired:  # rewired ids would move too
            self.give_up()
            upkeep = None
        gone, groups = splice_bytes(target, removed, inserted)
        if upkeep is not None:
            upkeep.spliced(gone, groups, written, stand_ins)
            if stand_ins:  # the copies' attribute tensors are the stand-ins': made here
                upkeep.created_tensors(chain.from_iterable(map(attr_tensors, stand_ins)))
        self._rewired = set()  # none is said before a splice (ids move everywhere)
        self._inserted = True

    def move_nodes(self, movers: Sequence[int], before: int) -> None:
        """Move nodes ``movers`` (ascending ids, all > ``before``) to just before node
        ``before``, keeping their order. The upkeep gives up (ids move). O(nodes) per node."""
        self._nodes_moved()
        self.give_up()
        field = self.graph.node
        for k, i in enumerate(movers):
            node = onnx.NodeProto()
            node.CopyFrom(field[i])
            del field[i]
            field.insert(before + k, node)

    def name_nodes(self, names: Mapping[int, str]) -> None:
        """Main-graph node ``i`` is now named ``names[i]``. O(names)."""
        field = self.graph.node
        for i, name in names.items():
            field[i].name = name
        upkeep = self._following()
        if upkeep is not None and names:
            upkeep.name_nodes(names)

    def name_body_nodes(self, graph: onnx.GraphProto, names: Mapping[int, str]) -> None:
        """Node ``i`` of the nested body ``graph`` is now named ``names[i]``. The upkeep does
        not follow bodies: the next verb rebuilds. O(names)."""
        if names:
            self.give_up()
        for i, name in names.items():
            graph.node[i].name = name

    def set_op(self, node: onnx.NodeProto, op_type: str) -> None:
        """A node of a private proto or of a local function calls ``op_type`` now (a renamed
        local function). Records nothing: main-graph calls are not renamed by any verb."""
        if self.upkeep is not None:
            self.upkeep.fail()
        node.op_type = op_type

    # ------------------------------------------------------------------ edges
    def rewire(self, uses: Iterable[Use], name: str, index: GraphIndex | None = None) -> list[str]:
        """Make every read in ``uses`` read ``name``: explicit slots of main-graph nodes, reads
        of nodes inside bodies, body outputs passing the outer tensor through. Returns the
        labels of the main-graph nodes touched, in node order, once each. ``index``: the one
        the uses come from (default: this edit's). O(uses)."""
        index = index or self.index
        assert index is not None, "rewire needs the index the uses come from"
        touched: dict[int, None] = {}
        nodes = self.graph.node
        for use in uses:
            if use.inner is None:
                nodes[use.node].input[use.slot] = name
            else:
                holder = use.inner.holder
                if isinstance(holder, onnx.NodeProto):
                    holder.input[use.inner.slot] = name
                else:
                    holder.name = name
            touched[use.node] = None
        self._rewired.update(touched)
        self._structural = True
        return [index.node_label(i) for i in sorted(touched)]

    def rename_output(self, node: int, old: str, new: str) -> None:
        """Main-graph node ``node`` writes ``new`` where it wrote ``old`` (the readers of
        ``old`` keep reading ``old``, which something else defines now: they are read again);
        value_info of ``old`` follows. O(node outputs + value_info + readers)."""
        outs = self.graph.node[node].output
        for k, name in enumerate(outs):
            if name == old:
                outs[k] = new
        for vi in self.graph.value_info:
            if vi.name == old:
                vi.name = new
        upkeep = self._following()
        if upkeep is not None and upkeep.ok and self.index is not None:
            upkeep.rename_tensors({old: new})
            self._rewired.update(u.node for u in self.index.uses_of(old))

    def rename_tensors(self, renames: Mapping[str, str]) -> None:
        """Rename main-graph tensors everywhere: definitions, every read in the scopes that do
        not shadow them, graph inputs and outputs, initializers, value_info. Every element is
        renamed once, from the state before the call, so swaps (a->b, b->a) work. O(edges) of
        ints plus the fields that change where the int graph is true, else O(model size)."""
        if not renames:
            return
        if self._structural or self.index is None or not _rename_by_edges(self.index, renames):
            rename_tensors(self.model, renames)
        upkeep = self._following()
        if upkeep is not None:
            upkeep.rename_tensors(renames)

    def rename_scoped(self, graphs: Iterable[onnx.GraphProto], outer: Mapping[str, str], *,
                      define: Callable[[str], str],
                      node_name: Callable[[onnx.NodeProto], str] | None = None,
                      depth: int = 1) -> None:
        """:func:`~onnxsurgeon.protos.rename_scoped` on bodies (If/Loop/Scan graphs) or the
        graphs of a private proto. The upkeep does not follow names inside bodies (there is no
        int graph then anyway): the next verb rebuilds."""
        if self.upkeep is not None:
            self.upkeep.fail()
        rename_scoped(graphs, outer, define=define, node_name=node_name, depth=depth)

    def name_every_node(self, graphs: Iterable[onnx.GraphProto],
                        name: Callable[[onnx.NodeProto], str]) -> None:
        """Every node of ``graphs`` (a private proto's) is named ``name(node)``, in order."""
        if self.upkeep is not None:
            self.upkeep.fail()
        for g in graphs:
            for node in g.node:
                node.name = name(node)

    def fold_body(self, graph: onnx.GraphProto, removed: Sequence[int],
                  values: Sequence[onnx.TensorProto], dead: Collection[str]) -> None:
        """In the nested body ``graph``: remove the nodes at ``removed``, append ``values`` as
        its initializers and drop the initializers named in ``dead`` (``fold`` of a body). The
        upkeep does not follow bodies: the next verb rebuilds. O(size of the body)."""
        if self.upkeep is not None:
            self.upkeep.fail()
        gone = set(removed)
        keep_only(graph.node, [i for i in range(len(graph.node)) if i not in gone])
        keep_only(graph.initializer,
                  [k for k, t in enumerate(graph.initializer) if t.name not in dead])
        graph.initializer.extend(values)

    def set_body(self, graph: onnx.GraphProto, new: onnx.GraphProto,
                 inputs: Sequence[onnx.ValueInfoProto]) -> None:
        """The nested body ``graph`` (an If/Loop/Scan graph of this model) takes the nodes,
        initializers, sparse initializers, value_info and outputs of ``new`` (copied) and
        ``inputs`` as its inputs: a verb edited it as the main graph of a model of its own
        (``surgery/_bodies.py``). The upkeep does not follow bodies: the next verb rebuilds.
        O(size of the body)."""
        self.give_up()
        self._structural = True
        for name in ("node", "initializer", "sparse_initializer", "value_info", "output"):
            _replace_all(getattr(graph, name), list(getattr(new, name)))
        _replace_all(graph.input, list(inputs))

    def set_body_types(self, graph: onnx.GraphProto, outputs: Sequence[onnx.ValueInfoProto],
                       value_info: Sequence[onnx.ValueInfoProto]) -> None:
        """The nested body ``graph`` (an If/Loop/Scan graph of this model or of a local
        function) declares ``outputs`` (its outputs, other shapes) and ``value_info`` (copied):
        ``dims`` changed the shapes it follows. The upkeep does not follow bodies: the next verb
        rebuilds. O(outputs + value_info)."""
        self.give_up()
        _replace_all(graph.output, list(outputs))
        _replace_all(graph.value_info, list(value_info))

    def set_function_nodes(self, fn: onnx.FunctionProto,
                           nodes: Sequence[onnx.NodeProto]) -> None:
        """The local function ``fn`` (of this model) has the nodes ``nodes`` (copied) now: a
        verb edited its body as the main graph of a model of its own (``fold``'s
        simplifications, ``surgery/_fuse_bodies.py``). The upkeep does not follow functions.
        O(nodes of ``fn``)."""
        self.give_up()
        _replace_all(fn.node, nodes)

    def set_all_nodes(self, nodes: Sequence[onnx.NodeProto]) -> None:
        """The main graph's nodes are ``nodes`` now (moved in, not copied: the caller's list
        must not be used after). The upkeep cannot follow a whole new node list: the next verb
        rebuilds. O(nodes)."""
        if self.upkeep is not None:
            self.upkeep.fail()
        self._structural = True
        field = self.graph.node
        del field[:]
        field.extend(nodes)


    # ------------------------------------------------------------------ hygiene verbs
    def keep_graph_nodes(self, graph: onnx.GraphProto | onnx.FunctionProto,
                         kept: Sequence[int]) -> None:
        """Keep only the nodes ``kept`` (ascending positions) of ``graph``, a nested body (or a
        local function): the main graph's nodes go through :meth:`keep_nodes`. The upkeep does
        not follow edits inside bodies: the next verb rebuilds. O(nodes of ``graph``)."""
        if len(kept) != len(graph.node):
            self.give_up()
            keep_only(graph.node, kept)

    def keep_graph_leaves(self, graph: onnx.GraphProto, *, initializers: Sequence[int],
                          sparse: Sequence[int], value_info: Sequence[int]) -> None:
        """Keep only the initializers, sparse initializers and value_info entries at these
        ascending positions of ``graph`` (a nested body: the upkeep gives up when one goes)."""
        if (len(initializers) != len(graph.initializer)
                or len(sparse) != len(graph.sparse_initializer)):
            self.give_up()
        keep_only(graph.initializer, initializers)
        keep_only(graph.sparse_initializer, sparse)
        keep_only(graph.value_info, value_info)

    def keep_opsets(self, keep: Sequence[int]) -> None:
        """Keep only the model's opset imports at the ascending positions ``keep``."""
        keep_only(self.model.opset_import, keep)

    def order_nodes(self, graph: onnx.GraphProto | onnx.FunctionProto,
                    order: Sequence[int]) -> None:
        """The nodes of ``graph`` (the main graph, a body or a local function) are in the order
        ``order`` (a permutation of their positions) now. The upkeep gives up when the main
        graph's order changes (ids move). The messages move in place, none copied
        (:func:`~onnxsurgeon.order.reorder_nodes`): O(nodes log nodes) C-level."""
        if list(order) == list(range(len(graph.node))):
            return
        if graph is self.graph:
            self._nodes_moved()
        self.give_up()
        reorder_nodes(graph.node, order)

    def set_attribute(self, node: int, attribute: onnx.AttributeProto) -> None:
        """Main-graph node ``node`` has ``attribute`` (copied; replacing the one of that name,
        else appended) now; the node is read again (the save checks it)."""
        attrs = self.graph.node[node].attribute
        for k, a in enumerate(attrs):
            if a.name == attribute.name:
                attrs[k].CopyFrom(attribute)
                break
        else:
            attrs.add().CopyFrom(attribute)
        self._rewired.add(node)

    def set_initializer(self, position: int, tensor: onnx.TensorProto) -> None:
        """Main-graph initializer ``position`` is a copy of ``tensor`` now (the verb's own
        content: the save's output check looks at it)."""
        field = self.graph.initializer
        field[position].CopyFrom(tensor)
        self._leaf_edit()
        if self.upkeep is not None:
            self.upkeep.created_tensors([field[position]])


def _rename_by_edges(index: GraphIndex, renamed: Mapping[str, str]) -> bool:
    """:func:`~onnxsurgeon.protos.rename_tensors` of main-graph tensors (every key defined in
    the main graph) where the int graph exists (then no node holds a body): the reads are found
    as the renamed tensors' ids among the ints, so only the fields that change are touched.
    False, changing nothing, when there is no int graph. O(edges) of ints + O(inputs +
    initializers + value_info) of names."""
    edges = index.known_int_graph()
    if edges is None or not renamed:
        return False
    ids = set()
    for name in renamed:
        j = index.edge_id(name)
        if j is None:
            return False
        ids.add(j)
    g = index.graph
    nodes, preds, starts = g.node, edges.preds, edges.starts
    if len(ids) <= 4:
        hits = [at for j in ids for at in positions(preds, j)]
    else:
        hits = [k for k, p in enumerate(preds) if p in ids]
    for at in hits:  # confirmed by name: a multi-output producer's other outputs stay
        i = bisect_right(starts, at) - 1
        ins = nodes[i].input
        new = renamed.get(ins[at - starts[i]])
        if new is not None:
            ins[at - starts[i]] = new
    for j in sorted(ids):
        if j >= 0:
            outs = nodes[j].output
            for k, out in enumerate(outs):
                if out in renamed:
                    outs[k] = renamed[out]
    for field in (g.input, g.initializer, g.value_info, g.output):
        for k, name in enumerate(map(_NAME, field)):
            if name in renamed:
                field[k].name = renamed[name]
    for st in g.sparse_initializer:
        if st.values.name in renamed:
            st.values.name = renamed[st.values.name]
    return True
