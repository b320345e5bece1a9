"""``fold``'s ``MatMul(x, W) + B`` -> ``Gemm(x, W, B)`` fusion (:mod:`onnxsurgeon.surgery.fuse`
lists the conditions): one site checked by :func:`_gemm`, every site of a large graph found in bulk
on the int dataflow graph by :func:`_gemm_sites`, and the Gemm written as protobuf bytes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import chain, compress, repeat
from operator import attrgetter, eq
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from ..protos import varint
from ..upkeep import Written

if TYPE_CHECKING:
    from .fuse import _Facts

FLOATS = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16})
"""Element types Gemm and the rules of :mod:`~onnxsurgeon.surgery.fuse` take."""

_DOMAIN_INPUTS = attrgetter("domain", "input")


def _text(tag: bytes, text: str) -> bytes:
    """A string field of a message: ``tag``, the length as a varint, the UTF-8 bytes."""
    raw = text.encode()
    return tag + varint(len(raw)) + raw


def _gemm_bytes(x: str, w: str, b: str, y: str, name: str, *, weights: bytes | None = None
                ) -> bytes:
    """``NodeProto(op_type="Gemm", input=[x, w, b], output=[y], name=name)`` serialized, as
    protobuf writes it (fields in number order, the name written even when empty).
    ``weights``: ``w`` and ``b``'s fields, when the caller has them already."""
    if weights is None:
        weights = _text(b"\x0a", w) + _text(b"\x0a", b)
    return b"".join((_text(b"\x0a", x), weights, _text(b"\x12", y), _text(b"\x1a", name),
                     b"\x22\x04Gemm"))


_GEMM = b"\x0a%c%b%b\x12%c%b\x1a%c%b\x22\x04Gemm"
""":func:`_gemm_bytes` when every name is under 128 bytes (x's length and bytes, w and b's
fields, y's, the name's)."""


def _gemm(facts: _Facts, nodes: Sequence[onnx.NodeProto], ops: Sequence[str], add_at: int
          ) -> tuple[int, bytes] | None:
    """The Gemm (its bytes) replacing the MatMul read by Add ``add_at`` and that Add, or None
    (``ops``: every node's op type, so that only real sites touch their MatMul)."""
    add_domain, add_ins = _DOMAIN_INPUTS(nodes[add_at])
    if add_domain not in ("", "ai.onnx") or len(add_ins) != 2:
        return None
    producer, inits = facts.index.producer, facts.inits
    for slot in (0, 1):
        mm_out, b = add_ins[slot], add_ins[1 - slot]
        mm_at = producer.get(mm_out)
        if mm_at is None or ops[mm_at] != "MatMul" or b not in inits:
            continue
        mm_domain, mm_ins = _DOMAIN_INPUTS(nodes[mm_at])
        if mm_domain not in ("", "ai.onnx") or len(mm_ins) != 2:
            continue
        x, w = mm_ins
        wt, bt = inits.get(w), inits[b]
        if wt is None or len(wt.dims) != 2 or wt.data_type not in FLOATS:
            continue
        if bt.data_type != wt.data_type or not facts.only_reader(mm_out, add_at):
            continue
        n = wt.dims[1]
        if tuple(bt.dims) not in ((), (1,), (n,), (1, n), (1, 1)):
            continue
        if not facts.is_matrix(x, wt.data_type):
            continue
        return mm_at, _gemm_bytes(x, w, b, nodes[add_at].output[0], nodes[mm_at].name)
    return None


def _gemm_sites(facts: _Facts, nodes: Sequence[onnx.NodeProto], ops: list[str]
                ) -> tuple[dict[int, tuple[int, bytes]], Written] | None:
    """Every Add -> (MatMul, Gemm bytes) that :func:`_gemm` finds, found on the int dataflow
    graph: the candidates by numpy over the producer ids, op ids and read counts, each
    (weight, bias) pair's types read once, ``x``'s type from the forward type pass (one look-up
    per distinct type object); the names each Gemm writes from the producer map and the leaves
    (no node read but where those cannot say). With the Gemms' fields, in site order, for the
    upkeep. None without an int graph (the caller asks :func:`_gemm` per Add). O(nodes) in
    numpy + ~1 us a site."""
    from ._edgewalk import edge_arrays

    edges = facts.index.known_int_graph()
    arrays = edge_arrays(facts.index)
    if edges is None or arrays is None or facts._edge_types is None:
        return None
    adds = _every(ops, "Add")
    eops = edges.ops
    if any(map("Add".__ne__, map(eops.__getitem__, adds))):  # an Add of domain "ai.onnx"...
        return None
    preds, starts = arrays
    n = len(starts) - 1
    counts = np.diff(starts)
    reads = np.bincount(preds[preds >= 0], minlength=n)
    good_mm = (counts == 2) & (reads == 1)  # and a MatMul: asked of the candidates only
    producer = facts.index.producer
    for o in facts.outputs:
        j = producer.get(o)
        if j is not None:
            good_mm[j] = False
    leaves = edges.leaves
    span = max(map(abs, leaves), default=1) + 1
    leaf_init = np.zeros(span, bool)  # by -leaf id
    for k, name in leaves.items():
        leaf_init[-k] = name in facts.inits
    a = np.asarray(adds, np.int64)
    a = a[counts[a] == 2] if len(a) else a
    p0, p1 = preds[starts[a]], preds[starts[a] + 1]

    def sided(mm: np.ndarray, b: np.ndarray) -> np.ndarray:
        ok = (mm >= 0) & (b <= -2)
        ok[ok] = good_mm[mm[ok]] & leaf_init[-b[ok]]
        if ok.any():
            at = np.flatnonzero(ok)
            ok[at] = list(map("MatMul".__eq__, map(eops.__getitem__, mm[at].tolist())))
        return ok

    ok0, ok1 = sided(p0, p1), sided(p1, p0)
    keep = ok0 | ok1
    a, p0, p1, ok0, ok1 = a[keep], p0[keep], p1[keep], ok0[keep], ok1[keep]
    # -(w leaf) * span - (b leaf) -> (the Gemm's dtype, or -1: no site; w and b's fields)
    pairs: dict[int, tuple[int, bytes]] = {}
    types = facts._edge_types
    inits = facts.inits

    def pair_keys(w: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, list[tuple[int, bytes]]]:
        """Each (w, b) leaf pair's index into the distinct pairs, and those pairs' facts."""
        uniq, inverse = np.unique(-w * span - b, return_inverse=True)
        for key in uniq.tolist():
            if key not in pairs:
                wn, bn = leaves[-(key // span)], leaves[-(key % span)]
                pairs[key] = (_pair_type(inits[wn], inits[bn]) or -1,
                              _text(b"\x0a", wn) + _text(b"\x0a", bn))
        return inverse, list(map(pairs.__getitem__, uniq.tolist()))

    def slot(mm: np.ndarray, b: np.ndarray, ok: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Where this slot's MatMul makes a Gemm with the Add; each candidate's x and w."""
        at = starts[np.where(ok, mm, 0)]
        x, w = preds[at], preds[at + 1]
        ok = ok & (w <= -2)
        ok[ok] = leaf_init[-w[ok]]
        idx = np.flatnonzero(ok)
        if not len(idx):
            return ok, x, w
        inverse, facts_of = pair_keys(w[idx], b[idx])
        want = np.asarray([t for t, _ in facts_of], np.int64)[inverse]
        xs = x[idx]
        got = list(map(types.get, np.maximum(xs, -1).tolist()))  # a leaf is asked as -1
        ids, first, where = np.unique(np.fromiter(map(id, got), np.int64, count=len(got)),
                                      return_index=True, return_inverse=True)
        codes = [-2 if t is None else int(t[0]) if len(t[1]) == 2 else -1
                 for t in map(got.__getitem__, first.tolist())]
        have = np.asarray(codes, np.int64)[where]
        have[xs < 0] = -2  # the pass's types are asked for node outputs only
        good = (want != -1) & (have == want)
        for k in np.flatnonzero((want != -1) & (have == -2)).tolist():
            # x a graph input, or untyped by the pass: the oracle says
            good[k] = facts.is_matrix(nodes[int(mm[idx[k]])].input[0], int(want[k]))
        ok[idx] = good
        return ok, x, w

    ok0, x0, w0 = slot(p0, p1, ok0)
    ok1, x1, w1 = slot(p1, p0, ok1)
    first = ok0 | ok1
    s0 = ok0[first]
    add_ids = a[first].tolist()
    mm_arr = np.where(s0, p0[first], p1[first])
    x_arr = np.where(s0, x0[first], x1[first])
    w_arr = np.where(s0, w0[first], w1[first])
    b_arr = np.where(s0, p1[first], p0[first])
    mm_ids = mm_arr.tolist()
    inverse, facts_of = pair_keys(w_arr, b_arr) if mm_ids else (np.zeros(0, np.int64), [])
    wbs = list(map([wb for _, wb in facts_of].__getitem__, inverse.tolist()))
    w_names = list(map(leaves.__getitem__, w_arr.tolist()))
    b_names = list(map(leaves.__getitem__, b_arr.tolist()))
    # the names each Gemm writes: x, y, the MatMul's name, without reading a node (a
    # one-output node's output is the one name the producer map gives it)
    x_names, y_names = _output_names(producer, eops, leaves, x_arr, np.asarray(add_ids, np.int64))
    if None in x_names:
        x_names = [x or nodes[mm].input[0] for x, mm in zip(x_names, mm_ids, strict=True)]
    if None in y_names:
        y_names = [y or nodes[i].output[0] for y, i in zip(y_names, add_ids, strict=True)]
    names = list(map(edges.names.__getitem__, mm_ids))
    xs, ys, ns = (list(map(str.encode, v)) for v in (x_names, y_names, names))
    if max(map(len, chain(xs, ys, ns)), default=0) < 128:  # one-byte lengths: one format
        xl, yl, nl = (list(map(len, v)) for v in (xs, ys, ns))
        data = list(map(_GEMM.__mod__, zip(xl, xs, wbs, yl, ys, nl, ns, strict=True)))
    else:
        data = [_gemm_bytes(x.decode(), "", "", y.decode(), n.decode(), weights=wb)
                for x, wb, y, n in zip(xs, wbs, ys, ns, strict=True)]
    sites = dict(zip(add_ids, zip(mm_ids, data, strict=True), strict=True))
    written = Written(list(zip(x_names, w_names, b_names, strict=True)),
                      list(zip(y_names)), names, ["Gemm"] * len(names))
    return sites, written


def _output_names(producer: Mapping[str, int], eops: Sequence[str], leaves: Mapping[int, str],
                  x_ids: np.ndarray, y_ids: np.ndarray) -> tuple[list[Any], list[Any]]:
    """The names of tensors ``x_ids`` (node or leaf ids) and of the outputs of nodes ``y_ids``,
    None where a node may have several outputs (``eops[j]`` ""). The producer map lists the
    outputs in node order: a node's first key is found by a binary search of the ids.
    O(producer entries) in numpy + O(ids log nodes)."""
    keys = list(producer)
    at = np.fromiter(producer.values(), np.int64, count=len(keys))
    if len(at) and not bool(np.all(at[1:] >= at[:-1])):  # not in node order: by a dict
        name_of = dict(zip(producer.values(), keys, strict=True))
        xs = [leaves[j] if j <= -2 else name_of.get(j) if j >= 0 and eops[j] else None
              for j in x_ids.tolist()]
        return xs, [name_of.get(i) if eops[i] else None for i in y_ids.tolist()]

    def named(ids: np.ndarray) -> list[Any]:
        pos = np.minimum(np.searchsorted(at, ids), max(len(at) - 1, 0))
        found = at[pos] == ids if len(at) else np.zeros(len(ids), bool)
        got: list[Any] = list(map(keys.__getitem__, pos.tolist())) if len(at) else \
            [None] * len(ids)
        ids_list = ids.tolist()
        one = list(map(eops.__getitem__, ids_list))  # "": maybe several outputs
        for k in np.flatnonzero(~found).tolist() if not bool(found.all()) else ():
            got[k] = None
        if "" in one:
            got = [g if op else None for g, op in zip(got, one, strict=True)]
        return got

    xs = named(np.maximum(x_ids, 0))
    if bool(np.any(x_ids < 0)):
        for k in np.flatnonzero(x_ids < 0).tolist():
            j = int(x_ids[k])
            xs[k] = leaves.get(j) if j <= -2 else None
    return xs, named(y_ids)


def _every(ops: list[str], op: str) -> list[int]:
    """Every position of ``op`` in ``ops`` by one C-level pass (where it is common: a
    :func:`~onnxsurgeon.index.positions` scan costs a call per match)."""
    return list(compress(range(len(ops)), map(eq, ops, repeat(op))))


def _pair_type(wt: onnx.TensorProto, bt: onnx.TensorProto) -> int | None:
    """The element type of a Gemm with weight ``wt`` and bias ``bt``, or None when they make
    none (the weight 2-D of a float type, the bias of that type broadcast over its last dim)."""
    if len(wt.dims) != 2 or wt.data_type not in FLOATS or bt.data_type != wt.data_type:
        return None
    n = wt.dims[1]
    if tuple(bt.dims) not in ((), (1,), (n,), (1, n), (1, 1)):
        return None
    return int(wt.data_type)
