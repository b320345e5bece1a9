"""Keeping a model's index true across a verb's edits, so the next verb need not rebuild it.

A recipe runs several verbs on one model in memory. Rebuilding the producer map and the int
dataflow graph (:class:`~onnxsurgeon.index.NodeEdges`) from the proto costs one Python pass over
every node (~0.3 s on 90k nodes: upb makes a wrapper per node and per repeated field). A verb
that knows what its mutate section changed says so to an :class:`Upkeep` made from the index it
worked on, in the order it changed things:

- :meth:`Upkeep.rename_tensors` / :meth:`Upkeep.name_nodes`: names only (no id changes);
- :meth:`Upkeep.leaves_changed`: graph inputs or initializers were added, dropped or reordered;
- :meth:`Upkeep.inserted`: nodes were inserted into (or appended to) the node list;
- :meth:`Upkeep.reread`: the inputs of some nodes were rewired in place;
- :meth:`Upkeep.kept_only`: only these nodes remain, in their order;
- :meth:`Upkeep.spliced`: some nodes were removed and groups of new nodes put in, in one
  rebuild of the node list (``replace``'s sites).

Nodes are read from the proto as the verb leaves it, when the edits are applied: say the edits
in the order they happened and give the nodes of :meth:`Upkeep.inserted` and
:meth:`Upkeep.reread` as they are numbered after every structural edit said before them (so say
those last).

:meth:`Upkeep.result` then gives the producer map and the ``NodeEdges`` a fresh build of the
edited model gives (same ids, same dict order; the tests compare them after every verb), or None
when something is outside what an upkeep can say (a node holding a body, a read before its
producer, a name defined twice, an edit the verb did not describe): the next verb then builds its
index from the proto, as it always did. The edits are applied only when the next verb asks for
its index (nothing is spent after a recipe's last step). Ints and the edited nodes only: O(nodes)
of int work per edit plus the protobuf fields of the nodes that changed.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import accumulate, chain, compress, repeat
from operator import attrgetter, itemgetter, lt
from typing import Any

import onnx

from .index import GraphIndex, NodeEdges, has_subgraphs, positions
from .nodefields import edge_ops, node_pass
from .splice import Written, follow_splice, splice_holds

_NAME = attrgetter("name")
_FIELD0, _FIELD1, _FIELD2, _FIELD3, _FIELD4, _FIELD5 = map(itemgetter, range(6))  # EDGE_FIELDS

__all__ = ["Upkeep", "Written"]


_Read = tuple[list[int], list[int], list[str], list[str], dict[str, int]]
"""What reading inserted nodes gives: their producer ids (flat), input counts, names, ops, and
their outputs -> node id, in definition order."""
_FEW = 64
"""Inserted nodes up to this many are read against the maps as they are (no merged copy)."""


class _Fresh:
    """The names inserted nodes are read against (:meth:`Upkeep._read_few`), as the
    :class:`~onnxsurgeon.nodefields.NameTable` of the node pass: ``known`` (their outputs so
    far, "" for an omitted input) first, then the node outputs before them and the leaves. An
    output already defined there is not set, and answers -2 (never a node id)."""

    __slots__ = ("known", "head", "ids")

    def __init__(self, head: Mapping[str, int], ids: Mapping[str, int]) -> None:
        self.known: dict[str, int] = {"": -1}
        self.head, self.ids = head, ids

    def get(self, name: str, /) -> int | None:
        found = self.known.get(name)
        return found if found is not None else self.head.get(name, self.ids.get(name))

    def setdefault(self, name: str, default: int, /) -> int:
        if name in self.head or name in self.ids:
            return -2
        return self.known.setdefault(name, default)


class Upkeep:
    """The producer map and int dataflow graph of ``index``'s model, edited along with it.

    Made before or after the mutation from the index the verb used (never mutated by the
    upkeep); each method describes one edit of the proto, applied in the order the calls come.
    Any call after a failure is ignored; :meth:`result` is then None.
    """

    def __init__(self, index: GraphIndex) -> None:
        self.graph = index.graph
        edges = index.known_int_graph()
        self.ok = edges is not None
        self._leaf_ids: dict[str, int] | None = None
        self._dangling: list[int] = []
        self._todo: list[tuple[Callable[..., None], tuple[Any, ...]]] = []
        self._done: tuple[dict[str, int], NodeEdges] | None = None
        self._memo = index.memo
        self.types: dict[int, Any] = {}
        """Node id -> output type found by the cheap type pass (``memo["edge_types"]``), kept
        for the nodes no edit can reach: a node's type follows from its op and what lies
        upstream, so only nodes before the first inserted or rewired one keep theirs (read it
        through :meth:`carried_types`, which drops the others)."""
        self._types_below = len(edges.names) if edges is not None else 0
        """Node ids (as now) below which the types found stay true; the filtering is done once,
        in :meth:`result` (or when ids are renumbered)."""
        self.validated = bool(index.memo.get("validated"))
        """The index is the one :func:`~onnxsurgeon.io.load` validated (no verb in between):
        what the edits leave untouched passed load's checks."""
        self._touched: list[int] = []
        """Ids (as now) of the nodes the edits inserted or rewired."""
        self.to_read = 0
        """Nodes said inserted without ``written``, to be read back from the proto: what
        re-reading them will cost."""
        self.rewired = 0
        """Nodes said rewired (:meth:`reread`)."""
        self.fresh_tensors: list[onnx.TensorProto] = []
        """Tensors the verb added with content that was not in the model (not copies)."""
        self.spliced_new = 0
        """New nodes said by :meth:`spliced` with their fields (not read back)."""
        self.stand_ins: list[onnx.NodeProto] = []
        """Nodes whose schema check stands for that of inserted copies of them, which are not
        among the touched nodes (:meth:`spliced`)."""
        if edges is None:
            return
        self.producer = index.producer
        self.preds = edges.preds
        self.starts = edges.starts
        self.leaves = edges.leaves
        self.names = edges.names
        self.ops = edges.ops

    def fail(self) -> None:
        """The edit is one an upkeep cannot follow: the next verb rebuilds the index."""
        self.ok = False

    # the edits, as the verb says them; applied only when the next verb asks (:meth:`result`),
    # so the last step of a recipe costs nothing here
    def rename_tensors(self, renames: Mapping[str, str]) -> None:
        """Main-graph tensors were renamed (definitions and reads alike)."""
        self._todo.append((self._rename_tensors, (dict(renames),)))

    def name_nodes(self, names: Mapping[int, str]) -> None:
        """Node ``i`` is now named ``names[i]``."""
        self._todo.append((self._name_nodes, (dict(names),)))

    def leaves_changed(self) -> None:
        """Graph inputs or initializers were added, dropped or reordered."""
        self._todo.append((self._leaves_changed, ()))

    def leaves_appended(self, initializers: Sequence[str]) -> None:
        """Initializers with these names were appended to the graph (inputs and the other
        leaves unchanged): O(their number) instead of numbering every leaf again."""
        self._todo.append((self._leaves_appended, (list(initializers),)))

    def inserted(self, pos: int, count: int, written: Written | None = None) -> None:
        """``count`` nodes were inserted at ``pos`` (``pos`` = the old length: appended).

        ``written``: for nodes that copy the model's own (op, domain and attributes; no bodies),
        what the verb wrote into them (their inputs, outputs and names, and their ops as
        :func:`~onnxsurgeon.index.edge_op` gives them), from lists it holds anyway (a copy's
        renames): the upkeep then checks these lists instead of reading the fields back from
        the proto, which for many nodes costs more than the rest of the work (upb makes a
        wrapper per field and a string per name: ~1.5 us a node). The verb answers for the
        lists being the nodes' fields; the tests compare the upkeep's result with a fresh
        build after every verb."""
        if written is None:
            self.to_read += max(count, 0)
        self._todo.append((self._inserted, (pos, count, written)))

    def appended(self) -> range:
        """The nodes the edits said so far append after all the model had, as their ids will
        be once :meth:`result` applied the edits (it is not run here); empty unless every edit
        said is an append, a node naming or a change of leaves (none moves a node id). O(edits).
        """
        allowed = (self._name_nodes, self._leaves_appended, self._leaves_changed)
        if not self.ok or self._done is not None:
            return range(0)
        first = end = len(self.names)
        for edit, args in self._todo:
            if edit == self._inserted and args[0] == end:
                end += max(args[1], 0)
            elif edit not in allowed:
                return range(0)
        return range(first, end)

    def reread(self, nodes: Iterable[int]) -> None:
        """The inputs of these nodes (indexes after the edits said before) were rewired."""
        todo = list(nodes)
        self.rewired += len(todo)
        self._todo.append((self._reread, (todo,)))

    def kept_only(self, kept: Sequence[int]) -> None:
        """Only nodes ``kept`` (ascending indexes) remain, in that order."""
        self._todo.append((self._kept_only, (list(kept),)))

    def spliced(self, removed: Iterable[int], groups: Sequence[tuple[int, int]],
                written: Written | None, stand_ins: Sequence[onnx.NodeProto] | None = None,
                ) -> None:
        """Nodes ``removed`` (indexes as now) were removed and, for each ``(pos, count)`` of
        ``groups`` (distinct positions, ascending), ``count`` new nodes put just before node
        ``pos`` (``pos`` = the old length: appended), in one rebuild of the node list. A read
        of a removed node's output moves to the new node that defines that name.

        ``written``: the new nodes' fields, in their order (None: read from the proto).
        ``stand_ins``: nodes equal to the new ones but for the names of their inputs, outputs
        and themselves (none of those empty where a stand-in's is not): the save checks their
        schemas (:func:`~onnxsurgeon.checking.check_touched`) instead of every copy's, and the
        copies do not count as touched."""
        if written is None:
            self.to_read += sum(count for _, count in groups)
        else:
            self.spliced_new += len(written.names)
        self._todo.append((self._spliced, (sorted(set(removed)), list(groups), written,
                                           list(stand_ins) if stand_ins is not None else None)))

    def holds_unapplied(self) -> list[onnx.NodeProto] | None:
        """When the edits said, not applied yet, are one splice given its new nodes' fields
        and stand-ins, maybe after initializers appended (``replace``'s weights of R), that
        provably leaves a valid node list (:func:`~onnxsurgeon.splice.splice_holds`, on the
        graph before it): its stand-ins, whose schema checks stand for its new nodes'; else
        None. The save's touched check then vouches without applying the splice
        (:meth:`dearer_than_check`: a splice of many costs more to follow than the checker's
        pass). O(nodes + edges) in numpy."""
        if not self.ok or self._done is not None or not 1 <= len(self._todo) <= 2:
            return None
        appended: list[str] = []
        if len(self._todo) == 2:
            leaves, args = self._todo[0]
            if leaves != self._leaves_appended:
                return None
            appended = args[0]
        edit, args = self._todo[-1]
        if edit != self._spliced:
            return None
        removed, groups, written, stand_ins = args
        if stand_ins is None or not splice_holds(self, removed, groups, written, appended):
            return None
        return list(stand_ins)

    def dearer_than_check(self) -> bool:
        """Whether applying the edits said (:meth:`result`) costs more than ``onnx.checker``'s
        C++ pass over the whole model: a save then runs that check and trusts the edits as said
        (:func:`~onnxsurgeon.io.save`), and only a next verb applies them. Measured on a
        90k-node chain: reading a new node back ~6 us against ~3.5 us of the check; a splice
        ~1 us per new node plus ~0.15 us per kept one, against ~0.4 us per node."""
        nodes = len(self.graph.node)
        return self.to_read * 2 >= nodes or self.spliced_new * 4 >= nodes

    def created_tensors(self, tensors: Iterable[onnx.TensorProto]) -> None:
        """These tensors were added with content of the verb's own making (a block's weights;
        not copies of the model's): the output check looks at them."""
        self.fresh_tensors.extend(tensors)

    # ------------------------------------------------------------------ names only
    def _rename_tensors(self, renames: Mapping[str, str]) -> None:
        """Main-graph tensors were renamed (definitions and reads alike): ids stay, names move.
        O(producer entries) when a node output is renamed (the map is rebuilt in order)."""
        if not self.ok or not renames:
            return
        producer = self.producer
        if not producer.keys().isdisjoint(renames):
            keys = list(producer)
            if len(renames) <= 16:  # find each key by a C-level scan, keep the order
                for old in renames.keys() & producer.keys():
                    keys[keys.index(old)] = renames[old]
            else:
                get = renames.get
                keys = [get(n, n) for n in keys]
            self.producer = dict(zip(keys, producer.values(), strict=True))
        if any(name in renames for name in self.leaves.values()):
            self.leaves = {i: renames.get(n, n) for i, n in self.leaves.items()}
            self._leaf_ids = None

    def _name_nodes(self, names: Mapping[int, str]) -> None:
        """Node ``i`` is now named ``names[i]``. O(nodes) list copy."""
        if not self.ok or not names:
            return
        self.names = list(self.names)
        for i, name in names.items():
            self.names[i] = name

    # ------------------------------------------------------------------ leaves
    def _leaves_changed(self) -> None:
        """Graph inputs or initializers changed: number the leaves again from the proto (inputs,
        then initializers, then sparse initializers, first occurrence wins) and move the reads
        of every leaf whose id changed. A read of a leaf that is gone marks its node for
        :meth:`reread`. O(inputs + initializers), plus O(edges) when an id moved."""
        if not self.ok:
            return
        g = self.graph
        inputs = list(map(_NAME, g.input))
        inits = [*map(_NAME, g.initializer), *(st.values.name for st in g.sparse_initializer)]
        names = inputs + inits
        first = dict(zip(names, range(-2, -2 - len(names), -1), strict=True))  # all distinct?
        if len(first) != len(names):  # a name listed twice (an IR 3 input and initializer)
            if len(set(inputs)) != len(inputs) or len(set(inits)) != len(inits):
                self.fail()  # an input or an initializer twice: not a valid graph
                return
            first = {}
            for name in names:
                first.setdefault(name, -2 - len(first))
        if "" in first or not self.producer.keys().isdisjoint(first):
            self.fail()  # an unnamed leaf, or a node output also named as an input or initializer
            return
        old = self.leaves
        leaves = dict(zip(first.values(), first.keys(), strict=True))
        self.leaves = leaves
        self._leaf_ids = first
        if len(first) == len(names) and list(old.values()) == names[:len(old)]:
            return  # leaves appended (or none changed): no id moved
        # every old leaf id -> its id now (None: gone); node ids (>= -1) map to themselves
        moved = dict(zip(old, map(first.get, old.values()), strict=True))
        new_preds: list[Any] = list(map(moved.get, self.preds, self.preds))  # get(p, p)
        if None in new_preds:  # reads of a leaf that is gone: their nodes are read again
            starts = self.starts
            self._dangling.extend(bisect_left(starts, at + 1) - 1
                                  for at in positions(new_preds, None))
            new_preds = [-1 if p is None else p for p in new_preds]
        self.preds = new_preds

    def _leaves_appended(self, names: list[str]) -> None:
        """Initializers ``names`` were appended: they take the next leaf ids (checked against
        the proto's last initializers; with sparse initializers, whose ids come after, every
        leaf is numbered again)."""
        if not self.ok or not names:
            return
        inits = self.graph.initializer
        n, k = len(inits), len(names)
        if (len(self.graph.sparse_initializer) or n < k
                or list(map(_NAME, inits[n - k:])) != names):
            self._leaves_changed()
            return
        ids, producer = self._ids(), self.producer
        base = -2 - len(self.leaves)
        added = dict(zip(names, range(base, base - k, -1), strict=True))  # checked at once:
        if (len(added) != k or "" in added or not ids.keys().isdisjoint(added)
                or not producer.keys().isdisjoint(added)):
            self.fail()  # unnamed, twice, or a name defined already: not a valid graph
            return
        self.leaves = {**self.leaves, **dict(zip(added.values(), added, strict=True))}
        ids.update(added)

    # ------------------------------------------------------------------ nodes
    def _ids(self) -> dict[str, int]:
        if self._leaf_ids is None:
            self._leaf_ids = dict(zip(self.leaves.values(), self.leaves.keys(), strict=True))
        return self._leaf_ids

    def _read(self, node: onnx.NodeProto, i: int) -> list[int] | None:
        """The producer ids of ``node``'s inputs (node ``i`` now), each before ``i``; None when
        a read is unknown or not before it."""
        producer, leaf_ids = self.producer, self._ids()
        out: list[int] = []
        for name in node.input:
            if not name:
                out.append(-1)
                continue
            j = producer.get(name)
            if j is None:
                j = leaf_ids.get(name)
                if j is None:
                    return None
            elif j >= i:
                return None
            out.append(j)
        return out

    def _inserted(self, pos: int, count: int, written: Written | None = None) -> None:
        """``count`` nodes were inserted at ``pos`` of the node list (``pos`` = the old length:
        appended): later nodes move by ``count``; the new nodes are read from the proto, or
        taken from ``written`` (their inputs must be defined before them, their outputs new,
        no bodies). O(nodes) of int
        shifting + the new nodes' fields."""
        if not self.ok or count <= 0:
            return
        n_old = len(self.names)
        if not 0 <= pos <= n_old or len(self.graph.node) < n_old + count:
            self.fail()
            return
        producer = self.producer
        tail: Iterable[tuple[str, int]] = ()
        if pos < n_old:
            self._types_below = min(self._types_below, pos)
            self._touched = [t + count if t >= pos else t for t in self._touched]
            self.preds = [p + count if p >= pos else p for p in self.preds]
            keys, values = list(producer), list(producer.values())
            cut = bisect_left(values, pos)  # the map is in node order: C-level split and shift
            head = dict(zip(keys[:cut], values[:cut], strict=True))
            tail = zip(keys[cut:], map(count.__add__, values[cut:]), strict=True)
            self._dangling = [i + count if i >= pos else i for i in self._dangling]
        else:
            head = dict(producer)
        self.producer = head
        new_nodes = self.graph.node[pos:pos + count]
        if written is None and count > _FEW:
            written = Written.of(new_nodes)  # None: a node holds a body
            if written is None:
                self.fail()
                return
        if written is not None:
            found = self._read_many(written, pos, head) if len(written.names) == count else None
        else:
            found = self._read_few(new_nodes, pos, head)
        if found is None:
            self.fail()  # a body, a read of a later or unknown tensor, an output defined twice
            return
        new_preds, counts, names, ops, fresh = found
        if not producer.keys().isdisjoint(fresh):
            self.fail()  # an output defined later on
            return
        head.update(fresh)
        head.update(tail)
        starts = self.starts
        at = starts[pos]
        added = len(new_preds)
        self.preds = [*self.preds[:at], *new_preds, *self.preds[at:]]
        self.starts = [*starts[:pos + 1], *map(at.__add__, accumulate(counts)),
                       *map(added.__add__, starts[pos + 1:])]
        self.names = [*self.names[:pos], *names, *self.names[pos:]]
        self.ops = [*self.ops[:pos], *ops, *self.ops[pos:]]
        self._touched.extend(range(pos, pos + count))

    def _read_few(self, new_nodes: Sequence[onnx.NodeProto], pos: int, head: dict[str, int],
                  ) -> _Read | None:
        """:meth:`_inserted`'s reading of a few new nodes: the node pass
        (:func:`~onnxsurgeon.nodefields.node_pass`) against the maps as they are (no merged
        copy; the new nodes' outputs so far in a map of their own): a read not found is of a
        later node or of nothing, an output found is defined before (or twice)."""
        fresh = _Fresh(head, self._ids())
        preds, counts, names, ops, domains, multi, holders, suspects = node_pass(
            new_nodes, fresh, pos)
        if suspects or None in preds or any(has_subgraphs(new_nodes[i - pos]) for i in holders):
            return None
        del fresh.known[""]
        return (preds, counts, names,  # type: ignore[return-value]
                edge_ops(ops, domains, [i - pos for i in multi]), fresh.known)

    def _read_many(self, written: Written, pos: int, head: dict[str, int]) -> _Read | None:
        """:meth:`_inserted`'s reading of many new nodes (``written``: their fields), a whole
        field at a time (C-level maps and one merged name table, no Python step per edge): the
        same verdicts as :meth:`_read_few`. Each output must be new (not a leaf, not twice; the
        caller checks it against every node output); each read must be of a leaf or an output
        defined before its reader."""
        ins_of, outs_of = written.inputs, written.outputs
        n = len(written.names)
        if len(ins_of) != n or len(outs_of) != n or len(written.ops) != n:
            return None
        ends = range(pos, pos + n)
        out_counts = list(map(len, outs_of))
        outs = list(chain.from_iterable(outs_of))
        where = list(chain.from_iterable(map(repeat, ends, out_counts)))
        if "" in outs:  # an optional output left out (a node's only output "" names nothing)
            if any(len(o) == 1 and not o[0] for o in outs_of):
                return None
            keep = list(map(bool, outs))
            outs, where = list(compress(outs, keep)), list(compress(where, keep))
        fresh = dict(zip(outs, where, strict=True))
        ids = self._ids()
        if len(fresh) != len(outs) or "" in ids or not ids.keys().isdisjoint(fresh):
            return None  # defined twice, or as a leaf
        known: dict[str, int] = {**ids, **head, **fresh, "": -1}
        counts = list(map(len, ins_of))
        new_preds = list(map(known.get, chain.from_iterable(ins_of)))
        readers = chain.from_iterable(map(repeat, ends, counts))
        if None in new_preds or not all(map(lt, new_preds, readers)):  # type: ignore[arg-type]
            return None  # a read of nothing, or of a later (or its own) output
        return new_preds, counts, written.names, written.ops, fresh  # type: ignore[return-value]

    def _reread(self, nodes: Iterable[int]) -> None:
        """The inputs of these nodes (indexes as now) were rewired in place: read them again
        (same number of inputs, each defined before the node). O(their inputs)."""
        if not self.ok:
            return
        preds, starts, graph_nodes = self.preds, self.starts, self.graph.node
        copied = False
        todo = sorted(set(nodes))
        if todo:
            self._types_below = min(self._types_below, todo[0])
        for i in todo:
            read = self._read(graph_nodes[i], i)
            if read is None or len(read) != starts[i + 1] - starts[i]:
                self.fail()
                return
            if not copied:
                preds, copied = list(preds), True
            preds[starts[i]:starts[i + 1]] = read
        self.preds = preds
        self._touched.extend(todo)

    def _kept_only(self, kept: Sequence[int]) -> None:
        """Only nodes ``kept`` (ascending old indexes) remain, in that order. Reads of a removed
        node mark the reader for :meth:`reread` (done by :meth:`result`, after the leaves are
        numbered again). O(nodes + edges) of ints."""
        if not self.ok:
            return
        if kept and kept[-1] == len(kept) - 1:  # a prefix (ascending, distinct): C-level cuts
            self._kept_prefix(len(kept))
            return
        new_id: list[int | None] = [None] * len(self.names)
        for k, i in enumerate(kept):
            new_id[i] = k
        starts = self.starts
        moved = [new_id[p] if p >= 0 else p for p in self.preds]
        out = list(chain.from_iterable(moved[starts[i]:starts[i + 1]] for i in kept))
        counts = [starts[i + 1] - starts[i] for i in kept]
        new_starts = [0, *accumulate(counts)]
        dangling = [new_id[i] for i in self._dangling if new_id[i] is not None]
        for at in positions(out, None):  # a kept node reads a removed one: read it again
            dangling.append(bisect_left(new_starts, at + 1) - 1)
            out[at] = -1
        self.preds = out  # type: ignore[assignment]
        self.starts = new_starts
        self.names = [self.names[i] for i in kept]
        self.ops = [self.ops[i] for i in kept]
        self.producer = {name: new_id[i] for name, i in self.producer.items()  # type: ignore[misc]
                         if new_id[i] is not None}
        self._dangling = dangling  # type: ignore[assignment]
        self._touched = [new_id[t] for t in self._touched  # type: ignore[misc]
                         if new_id[t] is not None]
        below = self._types_below
        self.types = {new_id[k]: t for k, t in self.types.items()  # type: ignore[misc]
                      if 0 <= k < below and new_id[k] is not None}
        self._types_below = len(kept)

    def _kept_prefix(self, k: int) -> None:
        """:meth:`_kept_only` of nodes ``0 .. k-1``: ids stay, every kept read is of a kept node
        or a leaf (nodes read only earlier ones), so everything is a slice."""
        starts = self.starts
        self.preds = self.preds[:starts[k]]
        self.starts = starts[:k + 1]
        self.names = self.names[:k]
        self.ops = self.ops[:k]
        keys, values = list(self.producer), list(self.producer.values())
        cut = bisect_left(values, k)  # the map is in node order
        self.producer = dict(zip(keys[:cut], values[:cut], strict=True))
        self._dangling = [i for i in self._dangling if i < k]
        self._touched = [t for t in self._touched if t < k]
        self._types_below = min(self._types_below, k)

    def _spliced(self, removed: list[int], groups: list[tuple[int, int]],
                 written: Written | None, stand_ins: list[onnx.NodeProto] | None) -> None:
        follow_splice(self, removed, groups, written, stand_ins)  # splice.py

    # ------------------------------------------------------------------ the kept state
    def result(self) -> tuple[dict[str, int], NodeEdges] | None:
        """The producer map and ``NodeEdges`` of the edited model, or None (rebuild). Applies
        the edits said so far (once; the proto must be as the verb left it)."""
        todo, self._todo = self._todo, []
        if todo and self._done is None:
            self.types = self._memo.get("edge_types", {})  # filtered by carried_types
        for edit, args in todo:
            if not self.ok:
                break
            edit(*args)
        if self._done is not None and not todo:
            return self._done
        if self.ok and self._dangling:
            dangling, self._dangling = self._dangling, []
            self._reread(dangling)
        if not self.ok or len(self.names) != len(self.graph.node):
            return None
        self._done = self.producer, NodeEdges(self.preds, self.starts, self.leaves, self.names,
                                              self.ops)
        return self._done

    def carried_types(self) -> dict[int, Any]:
        """After :meth:`result`: :attr:`types` without the nodes an edit can reach (filtered
        here, only for a next verb that reads them: the CLI's one verb never pays for it)."""
        below = self._types_below  # leaves (ids < 0) are typed again by the next pass
        if any(not 0 <= k < below for k in self.types):
            self.types = {k: t for k, t in self.types.items() if 0 <= k < below}
        return self.types

    def touched(self) -> list[int] | None:
        """After :meth:`result`: the ids of the nodes the edits inserted or rewired (ascending,
        once each), or None when :meth:`result` is None."""
        if self.result() is None:
            return None
        return sorted(set(self._touched))
