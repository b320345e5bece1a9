"""Splicing a node list: the nodes of many sites put in and the replaced ones removed in one
rebuild from bytes, and the upkeep following that splice on ints.

``replace`` puts R's copies in at every site of P at once (:meth:`~onnxsurgeon.edit.Edit.splice_nodes`,
the one caller of :func:`splice_bytes`): each kept node's bytes and each group's are merged in
node order and parsed in one call (upb: a wrapper per node costs more than parsing it). The
kept index then follows (:meth:`~onnxsurgeon.upkeep.Upkeep.spliced` -> :func:`follow_splice`):
every id renumbered, the kept nodes' reads moved, the new nodes' reads looked up by name, all on
whole lists (C-level maps, no Python step per node or edge). :class:`Written` carries the new
nodes' fields as written, so they need not be read back; for copies of one template per site,
:class:`Replicas` says them per site (the save then vouches for the splice per site and per
template node, not per new node and edge: :func:`splice_holds`).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Collection, Mapping, Sequence
from itertools import accumulate, chain, compress, filterfalse, repeat
from operator import add, attrgetter, itemgetter, lt, mul, sub
from typing import Any, NamedTuple

import numpy as np
import onnx

from .index import has_subgraphs, int_arrays, positions
from .nodefields import EDGE_FIELDS, edge_op
from .protos import node_entries

__all__ = ["Replicas", "Written", "follow_splice", "slot_getter", "splice_bytes", "splice_holds"]

_FIELD0, _FIELD1, _FIELD2, _FIELD3, _FIELD4, _FIELD5 = map(itemgetter, range(6))  # EDGE_FIELDS
_NAME = attrgetter("name")
_SERIALIZE = onnx.NodeProto.SerializeToString
_RUN = 4096
"""Pieces of a rebuilt node list joined and parsed at a time."""


_Getter = Callable[[Sequence[str]], Sequence[str]]


def slot_getter(at: Sequence[int]) -> _Getter:
    """``names -> [names[k] for k in at]`` as a C-level itemgetter (always a sequence)."""
    if len(at) > 1:
        return itemgetter(*at)
    if at:
        k = at[0]

        def one(vals: Sequence[str]) -> Sequence[str]:
            return (vals[k],)

        return one
    return lambda vals: ()


class Replicas(NamedTuple):
    """New nodes that copy one template per site but for their names (``replace``'s copies of
    R, a group of them per site): template node ``j`` reads a site's names at the slots
    ``reads[j]`` and defines those at ``writes[j]``. A site's names are ``n_read`` it reads
    from outside its copy (R's inputs, bound to the site's), then ``n_made`` its copy defines
    (R's outputs, bound to the site's, then its inner tensors), then names its nodes read that
    are the same at every site (R's weights)."""

    reads: Sequence[Sequence[int]]
    writes: Sequence[Sequence[int]]
    n_read: int
    n_made: int
    sites: Sequence[Sequence[str]]
    """Each site's names, the sites in the order their groups are in the node list."""


class _SlotFields(Sequence[Sequence[str]]):
    """The inputs or the outputs (``slots``: :attr:`Replicas.reads` or :attr:`Replicas.writes`)
    of every node of :class:`Replicas`, in list order, made from the sites' names when first
    read: only an upkeep that applies its edits reads them (a save that vouches per site, or
    that runs the whole check, never does)."""

    def __init__(self, slots: Sequence[Sequence[int]], sites: Sequence[Sequence[str]]) -> None:
        self._getters, self._sites = list(map(slot_getter, slots)), sites
        self._made: list[Sequence[str]] | None = None

    def _list(self) -> list[Sequence[str]]:
        if self._made is None:
            getters = self._getters
            self._made = [get(v) for v in self._sites for get in getters]
        return self._made

    def __len__(self) -> int:
        return len(self._sites) * len(self._getters)

    def __getitem__(self, k: Any) -> Any:
        return self._list()[k]

    def __iter__(self) -> Any:
        return iter(self._list())


class Written(NamedTuple):
    """The fields of inserted nodes, as written into them (:meth:`~onnxsurgeon.upkeep.Upkeep.inserted`, :meth:`~onnxsurgeon.upkeep.Upkeep.spliced`)."""

    inputs: Sequence[Sequence[str]]
    outputs: Sequence[Sequence[str]]
    names: Sequence[str]
    ops: Sequence[str]
    """Each node's :func:`~onnxsurgeon.nodefields.edge_op`."""
    replicas: Replicas | None = None
    """When the nodes are copies of one template per site: ``inputs`` and ``outputs`` are
    made from it (:meth:`of_replicas`)."""

    @classmethod
    def of_replicas(cls, replicas: Replicas, names: Sequence[str], ops: Sequence[str]) -> Written:
        """The fields of the nodes ``replicas`` describes (their inputs and outputs made from it
        when first read), named ``names``, their ops ``ops``, in list order."""
        return cls(_SlotFields(replicas.reads, replicas.sites),
                   _SlotFields(replicas.writes, replicas.sites), names, ops, replicas)

    @classmethod
    def of(cls, nodes: Sequence[onnx.NodeProto]) -> Written | None:
        """The fields of ``nodes``, read from the proto by
        :data:`~onnxsurgeon.nodefields.EDGE_FIELDS` (one C-level call per node); None when one
        holds a body (If/Loop/Scan: the upkeep cannot follow it)."""
        fields = list(map(EDGE_FIELDS, nodes))
        if any(has_subgraphs(nodes[k]) for k in compress(range(len(fields)),
                                                         map(_FIELD2, fields))):
            return None
        outs_of = list(map(_FIELD1, fields))
        return cls(list(map(_FIELD0, fields)), outs_of, list(map(_FIELD3, fields)),
                   list(map(edge_op, map(_FIELD4, fields), map(_FIELD5, fields), outs_of)))


def splice_bytes(target: onnx.GraphProto, removed: Collection[int],
                 inserted: Mapping[int, tuple[int, bytes]]) -> tuple[set[int], list[tuple[int, int]]]:
    """Remove the nodes ``removed`` of ``target`` and put the ``count`` nodes serialized in
    ``inserted[i] = (count, data)`` just before node ``i`` (see
    :meth:`~onnxsurgeon.edit.Edit.splice_nodes`), in one parse. Mutates ``target``. Returns
    the removed ids and the ``(pos, count)`` groups put in, ascending (for
    :meth:`~onnxsurgeon.upkeep.Upkeep.spliced`). O(nodes + inserted bytes)."""
    field = target.node
    n = len(field)
    gone = set(removed)
    kept = list(filterfalse(gone.__contains__, range(n)))
    items = sorted(inserted.items())  # distinct ids: C-level
    at = list(map(_FIELD0, items))
    if at and at[-1] <= n:  # (else appended groups given as several positions past the end)
        values = list(map(_FIELD1, items))
        groups = list(zip(at, map(_FIELD0, values), map(_FIELD1, values), strict=True))
        if 0 in map(_FIELD1, groups):
            groups = [g for g in groups if g[1]]
            at = list(map(_FIELD0, groups))
    else:
        groups = sorted((min(i, n), count, data) for i, (count, data) in items if count)
        at = list(map(_FIELD0, groups))
    if len(set(at)) == len(at):
        # node i's slot holds the group put before it, then its own bytes (when kept)
        parts = [b""] * (n + 1)
        deque(map(parts.__setitem__, kept,
                  node_entries(list(map(_SERIALIZE, map(field.__getitem__, kept))))), 0)
        deque(map(parts.__setitem__, at, map(add, map(_FIELD2, groups),
                                               map(parts.__getitem__, at))), 0)
        pieces: Sequence[bytes] = parts
    else:  # appended groups given as several positions past the end: merged in order
        # (kept node i sorts as 2i + 1, a group put before node i as 2i: two ascending runs)
        keys = [*map(add, map(mul, kept, repeat(2)), repeat(1)),
                *(2 * pos for pos, _, _ in groups)]
        parts = [*node_entries(list(map(_SERIALIZE, map(field.__getitem__, kept)))),
                 *(data for _, _, data in groups)]
        order = sorted(range(len(keys)), key=keys.__getitem__)
        pieces = list(map(parts.__getitem__, order))
    del field[:]
    # parsed a run at a time (a merge appends to the node list): join's buffer table (80 bytes
    # a piece) and the whole list's bytes are never held at once
    for k in range(0, len(pieces), _RUN):
        target.MergeFromString(b"".join(pieces[k:k + _RUN]))
    return gone, [(pos, count) for pos, count, _ in groups]


def follow_splice(up: Any, removed: list[int], groups: list[tuple[int, int]],
                  written: Written | None, stand_ins: list[onnx.NodeProto] | None) -> None:
    """:meth:`Upkeep.spliced <onnxsurgeon.upkeep.Upkeep.spliced>` applied to the upkeep ``up``
    (a layer above this module), on ints and whole lists (C-level maps, no Python step per
    node or edge): every id is renumbered, the kept nodes' reads follow, the new nodes' reads are
    looked up by name, and every read must be of an earlier node or a leaf. O(nodes +
    edges)."""
    if not up.ok:
        return
    n, total = len(up.names), sum(map(_FIELD1, groups))
    at = list(map(_FIELD0, groups))
    if ((removed and not 0 <= removed[0] <= removed[-1] < n)
            or (at and not (at[0] >= 0 and at[-1] <= n and at == sorted(set(at))))
            or len(up.graph.node) != n - len(removed) + total):
        up.fail()
        return
    # old id -> new id: the kept nodes before it plus the new nodes put at or before it
    kept_mask = [1] * n
    deque(map(kept_mask.__setitem__, removed, repeat(0)), 0)
    added = [0] * (n + 1)
    deque(map(added.__setitem__, at, map(_FIELD1, groups)), 0)
    kept_before = [0, *accumulate(kept_mask)]
    added_upto = list(accumulate(added))
    new_of: list[Any] = list(map(add, kept_before[:n], added_upto[:n]))
    n_new = n - len(removed) + total
    kept_ids = list(compress(new_of, kept_mask))
    ends = [kept_before[pos] + added_upto[pos] for pos in at]
    new_ids = list(chain.from_iterable(map(range, map(sub, ends, map(_FIELD1, groups)),
                                           ends)))
    if written is None:
        written = Written.of(list(map(up.graph.node.__getitem__, new_ids)))
    if written is None or not (len(written.names) == len(written.inputs) == total
                               == len(written.outputs) == len(written.ops)):
        up.fail()  # a body among the new nodes, or fields that do not fit
        return
    # the new nodes' outputs, and the producer map in node order (two ascending runs)
    outs = list(chain.from_iterable(written.outputs))
    where = list(chain.from_iterable(map(repeat, new_ids, map(len, written.outputs))))
    if "" in outs:
        if any(len(o) == 1 and not o[0] for o in written.outputs):
            up.fail()  # a node's only output names nothing
            return
        keep = list(map(bool, outs))
        outs, where = list(compress(outs, keep)), list(compress(where, keep))
    fresh = dict(zip(outs, where, strict=True))
    ids = up._ids()
    if len(fresh) != len(outs) or not ids.keys().isdisjoint(fresh.keys()):
        up.fail()  # a new output defined twice, or as a leaf
        return
    old_producer = up.producer
    old_keys, old_vals = list(old_producer), list(old_producer.values())
    alive = list(map(kept_mask.__getitem__, old_vals))
    items = [*zip(compress(old_keys, alive),
                  map(new_of.__getitem__, compress(old_vals, alive)), strict=True),
             *fresh.items()]
    items.sort(key=_FIELD1)
    producer = dict(items)
    if len(producer) != len(items):
        up.fail()  # a new output also defined by a kept node
        return
    touched = [new_of[t] for t in up._touched if kept_mask[t]]
    dangling = [new_of[i] for i in up._dangling if kept_mask[i]]
    # a read of a removed node's output: of the new node defining that name now (a node
    # with several outputs, or of another domain: its readers are read again by name)
    deque(map(new_of.__setitem__, removed, repeat(None)), 0)
    again = list(filter(old_producer.__contains__, fresh))  # only removed nodes' names
    olds = list(map(old_producer.__getitem__, again))
    news: list[int | None] = list(map(fresh.__getitem__, again))
    if "" in map(up.ops.__getitem__, olds):  # several outputs: read by name again
        news = [k if up.ops[j] else None for j, k in zip(olds, news, strict=True)]
    deque(map(new_of.__setitem__, olds, news), 0)
    table = [*new_of, *range(-1 - len(up.leaves), 0)]  # leaf id -k at table[-k]
    starts = up.starts
    old_counts = list(map(sub, starts[1:], starts[:-1]))
    counts = [0] * n_new
    deque(map(counts.__setitem__, kept_ids, compress(old_counts, kept_mask)), 0)
    deque(map(counts.__setitem__, new_ids, map(len, written.inputs)), 0)
    new_starts = [0, *accumulate(counts)]
    first_of, end_of = new_starts.__getitem__, new_starts[1:].__getitem__
    preds: list[Any] = [None] * new_starts[-1]
    edge_kept = chain.from_iterable(map(repeat, kept_mask, old_counts))
    deque(map(preds.__setitem__,
              chain.from_iterable(map(range, map(first_of, kept_ids), map(end_of, kept_ids))),
              map(table.__getitem__, compress(up.preds, edge_kept))), 0)
    known = producer.copy()  # a C-level clone, then the (few) leaves
    known.update(ids)
    known[""] = -1
    read = list(map(known.get, chain.from_iterable(written.inputs)))
    if None in read:
        up.fail()  # a new node reads a name defined nowhere
        return
    deque(map(preds.__setitem__,
              chain.from_iterable(map(range, map(first_of, new_ids), map(end_of, new_ids))),
              read), 0)
    for spot in positions(preds, None):  # a kept node read a removed one: read it again
        dangling.append(bisect_left(new_starts, spot + 1) - 1)
        preds[spot] = -1
    if not all(map(lt, preds, chain.from_iterable(map(repeat, range(n_new), counts)))):
        up.fail()  # a read of a later (or its own) output
        return
    names: list[Any] = [None] * n_new
    ops: list[Any] = [None] * n_new
    deque(map(names.__setitem__, kept_ids, compress(up.names, kept_mask)), 0)
    deque(map(names.__setitem__, new_ids, written.names), 0)
    deque(map(ops.__setitem__, kept_ids, compress(up.ops, kept_mask)), 0)
    deque(map(ops.__setitem__, new_ids, written.ops), 0)
    up._types_below = min(up._types_below, removed[0] if removed else n,
                            at[0] if at else n)
    if stand_ins is None:
        touched.extend(new_ids)
    else:
        up.stand_ins.extend(stand_ins)
    up._touched, up._dangling = touched, dangling
    up.producer, up.preds, up.starts = producer, preds, new_starts
    up.names, up.ops = names, ops


def splice_holds(up: Any, removed: list[int], groups: list[tuple[int, int]],
                 written: Written | None, appended: Sequence[str] = ()) -> bool:
    """Whether the splice the upkeep ``up`` was told of, after the initializers ``appended``
    (the graph's last ones, said by :meth:`~onnxsurgeon.upkeep.Upkeep.leaves_appended`) and
    nothing else, leaves a valid node list, decided on the int dataflow graph as it was before
    the splice: no id renumbered, no new graph built (what :func:`follow_splice` costs, ~1 us a
    new node, is dearer than the checker's whole pass for a splice of many). True when every
    name a new node reads is a leaf, omitted or defined before it (by a kept node before its
    place, or an earlier new node), every name it defines is defined by no kept node and no
    leaf, and only once, every read of a removed node's output by a kept node finds the new
    node defining that name at or before it, every graph output a removed node produced is
    defined again, and the appended initializers are named, each once, and no node defines
    their names. False: it cannot tell (the caller checks otherwise). O(nodes + edges) in
    numpy; for :class:`Replicas`, O(template) plus O(sites x names per site) for the new
    nodes."""
    n = len(up.names)
    if not up.ok or written is None or up._touched or up._dangling:
        return False
    total = sum(map(_FIELD1, groups))
    at = list(map(_FIELD0, groups))
    if ((removed and not 0 <= removed[0] <= removed[-1] < n)
            or (at and not (at[0] >= 0 and at[-1] <= n and at == sorted(set(at))))
            or len(up.graph.node) != n - len(removed) + total
            or not (len(written.names) == len(written.inputs) == total
                    == len(written.outputs) == len(written.ops))):
        return False
    producer = up.producer
    leaf_ids = up._ids()
    if appended:
        if not _appended_hold(up.graph, appended, leaf_ids, producer):
            return False
        leaf_ids = {**leaf_ids, **dict.fromkeys(appended, -2 - len(leaf_ids))}  # any leaf id
    gone = np.zeros(n + 1, bool)  # n: a place past the end (appended), never removed
    gone[np.fromiter(removed, np.int64, count=len(removed))] = True
    if written.replicas is not None:
        found = _replicas_hold(written.replicas, groups, leaf_ids, producer, gone)
    else:
        found = _nodes_hold(written, groups, leaf_ids, producer, gone)
    if found is None:
        return False
    fresh, place = found  # each new name -> who defines it; where that one is put
    # the kept nodes' reads of removed nodes: of the new node defining that name now
    preds, starts = int_arrays(up, up._memo)  # the upkeep's lists: those of the graph before
    owner = np.repeat(np.arange(n), np.diff(starts))
    hit = preds >= 0
    hit[hit] = gone[preds[hit]]
    hit &= ~gone[owner]
    if bool(hit.any()):
        ids, readers = preds[hit], owner[hit]
        if "" in map(up.ops.__getitem__, ids.tolist()):
            return False  # a removed node with several outputs: which one is read?
        read = _names_of(producer, ids)
        if read is None:
            return False
        k = np.fromiter(map(fresh.get, read, repeat(-1)), np.int64, count=len(ids))
        if not bool(((k >= 0) & (place[np.maximum(k, 0)] <= readers)).all()):
            return False
    # every graph output still produced
    return all(name in fresh for name in (o.name for o in up.graph.output)
               if (j := producer.get(name)) is not None and gone[j])


def _appended_hold(graph: onnx.GraphProto, appended: Sequence[str], leaf_ids: Mapping[str, int],
                   producer: Mapping[str, int]) -> bool:
    """Whether the initializers ``appended`` are the graph's last ones (no sparse one after),
    each named, once, and by no other leaf or node output of the graph before."""
    inits, k = graph.initializer, len(appended)
    return (not len(graph.sparse_initializer) and len(inits) >= k
            and list(map(_NAME, inits[len(inits) - k:])) == list(appended)
            and "" not in appended and len(set(appended)) == k
            and leaf_ids.keys().isdisjoint(appended) and producer.keys().isdisjoint(appended))


_Found = tuple[dict[str, int], Any]
"""The new names -> the new node (or site) defining each, and where each of those is put (the
old node id it goes before)."""


def _nodes_hold(written: Written, groups: list[tuple[int, int]], leaf_ids: Mapping[str, int],
                producer: Mapping[str, int], gone: Any) -> _Found | None:
    """:func:`splice_holds` for the new nodes, one by one: their outputs named, each once, and
    by no leaf and no kept node; every read a leaf, omitted, an earlier new node's output or a
    kept node's before the node's place. None: not so. O(new nodes + their edges)."""
    total = len(written.names)
    place = np.repeat(np.asarray(list(map(_FIELD0, groups)), np.int64),
                      list(map(_FIELD1, groups)))  # before old id
    outs = list(chain.from_iterable(written.outputs))
    if "" in outs or not leaf_ids.keys().isdisjoint(outs):
        return None
    olds = np.fromiter(map(producer.get, outs, repeat(-1)), np.int64, count=len(outs))
    if bool(((olds >= 0) & ~gone[np.maximum(olds, 0)]).any()):
        return None  # a kept node defines it too
    owners: Any = range(total)  # the new node defining each of ``outs``
    if len(outs) != total:
        owners = np.repeat(np.arange(total), list(map(len, written.outputs))).tolist()
    fresh = dict(zip(outs, owners, strict=True))
    if len(fresh) != len(outs):
        return None  # a name two new nodes define
    # the new nodes' reads: a leaf, "", an earlier new node's output, a kept node's before it
    ins = list(chain.from_iterable(written.inputs))
    reader = np.repeat(np.arange(total), list(map(len, written.inputs)))
    inner = np.fromiter(map(leaf_ids.get, ins, repeat(0)), np.int64, count=len(ins)) == 0
    if "" in ins:
        inner &= np.fromiter(map(bool, ins), bool, count=len(ins))
    names = list(compress(ins, inner.tolist()))  # the reads of node outputs
    reader = reader[inner]
    new_def = np.fromiter(map(fresh.get, names, repeat(-1)), np.int64, count=len(names))
    old_def = np.fromiter(map(producer.get, names, repeat(-1)), np.int64, count=len(names))
    ok = (new_def >= 0) & (new_def < reader)
    ok |= (new_def < 0) & (old_def >= 0) & ~gone[np.maximum(old_def, 0)] \
        & (old_def < place[reader])
    return (fresh, place) if bool(ok.all()) else None


def _replicas_hold(rep: Replicas, groups: list[tuple[int, int]], leaf_ids: Mapping[str, int],
                   producer: Mapping[str, int], gone: Any) -> _Found | None:
    """:func:`splice_holds` for copies of one template, a group per site: the template once
    (each name a site's copy defines defined by one of its nodes, before any of them reads
    it; the names it reads from outside never defined by it), then the sites' names column by
    column: the names the copies define named, each once, by no leaf and no kept node; a name a
    copy reads from outside a leaf, an earlier site's or a kept node's before the site; a name
    every site reads alike the same at every site (the stand-ins' schema check holds for all)
    and a leaf or omitted. None: not so. O(template) + O(sites x names per site)."""
    reads, writes, n_read, n_made, sites = rep
    t, m, width = len(reads), len(sites), n_read + n_made
    if (len(writes) != t or len(groups) != m or min(n_read, n_made) < 0
            or any(count != t for _, count in groups)):
        return None
    size = len(sites[0]) if m else width
    defined = sorted(chain.from_iterable(writes))
    if defined != list(range(n_read, width)) or size < width:
        return None  # a made slot defined twice or never, a read slot or a shared one defined
    made_by = dict(chain.from_iterable(zip(outs, repeat(j)) for j, outs in enumerate(writes)))
    for j, ins in enumerate(reads):
        for k in ins:
            if not 0 <= k < size or made_by.get(k, -1) >= j:
                return None  # no such slot, or read before (or by) the node defining it
    place = np.asarray(list(map(_FIELD0, groups)), np.int64)
    if not m:
        return {}, place
    if any(len(names) != size for names in sites):
        return None
    cols = list(zip(*sites, strict=True))
    for col in cols[width:]:  # shared: the same at every site, a leaf or omitted
        first = col[0]
        if col.count(first) != m or (first and first not in leaf_ids):
            return None
    made = list(chain.from_iterable(cols[n_read:width]))
    if "" in made or not leaf_ids.keys().isdisjoint(made):
        return None
    fresh = dict(zip(made, list(range(m)) * n_made, strict=True))  # name -> its site
    if len(fresh) != len(made):
        return None  # a name two copies (or two nodes of one) define
    olds = np.fromiter(map(producer.get, made, repeat(-1)), np.int64, count=len(made))
    if bool(((olds >= 0) & ~gone[np.maximum(olds, 0)]).any()):
        return None  # a kept node defines it too
    site_ids = np.arange(m)
    for col in cols[:n_read]:
        first = col[0]
        if col.count(first) == m and first in leaf_ids:
            continue  # one weight every site reads
        if "" in col:
            return None  # omitted at a site: its schema check is not the stand-in's
        leaf = np.fromiter(map(leaf_ids.__contains__, col), bool, count=m)
        new_def = np.fromiter(map(fresh.get, col, repeat(-1)), np.int64, count=m)
        old_def = np.fromiter(map(producer.get, col, repeat(-1)), np.int64, count=m)
        ok = leaf | ((new_def >= 0) & (new_def < site_ids))
        ok |= (new_def < 0) & (old_def >= 0) & ~gone[np.maximum(old_def, 0)] & (old_def < place)
        if not bool(ok.all()):
            return None
    return fresh, place


def _names_of(producer: dict[str, int], ids: Any) -> list[str] | None:
    """The output name of each node of ``ids`` (nodes with one output), from the producer map
    (name -> node id): it lists the outputs in node order, so a binary search of the ids finds
    each (a dict of it reversed where it is not in order); None when a node is not in it.
    O(producer entries) + O(ids log nodes)."""
    keys = list(producer)
    at = np.fromiter(producer.values(), np.int64, count=len(keys))
    if len(at) > 1 and not bool((at[1:] >= at[:-1]).all()):
        name_of = dict(zip(producer.values(), keys, strict=True))
        if not name_of.keys() >= set(ids.tolist()):
            return None
        return list(map(name_of.__getitem__, ids.tolist()))
    pos = np.minimum(np.searchsorted(at, ids), len(at) - 1)
    if not len(at) or not bool((at[pos] == ids).all()):
        return None
    return list(map(keys.__getitem__, pos.tolist()))
