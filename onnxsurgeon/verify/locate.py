"""Where do two models part? Find the first tensor that differs while its inputs agree.

The search runs on the reference's topological order, restricted to the ancestors of a differing
tensor, and only over tensors both models have (names matched directly or through a mapping).
Each round exposes at most ``batch`` tensors per model (one session per model, one at a time):

1. probe ``batch`` evenly spaced tensors of the window; the window shrinks to the span between the
   last agreeing probe and the first differing one (bisection with ``batch``-way splits);
2. once the window fits in a batch, every tensor of it is compared and the first differing one
   is the candidate;
3. its direct inputs are compared; if one differs (a parallel branch the order hid), the search
   restarts on that input's ancestors. The closure shrinks each time, so it terminates.

The result differs and every comparable input of its node agrees: the node where they part.
Cost: O(log_batch(n)) rounds of two sessions plus one round per restart.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import helper

from ..closure import closure
from ..external import expected_nbytes, is_external, open_external, read_tensor, resolve_external
from ..index import GraphIndex
from ..select import name_map, node_module
from .accumulate import differs
from .report import Divergence
from .run import DEFAULT_BATCH, Staged

LOCATE_BUDGET_BYTES = 48 * 2**20
"""Estimated bytes of the tensors one locating run exposes per model, beyond ``batch`` tensors
(a ResNet50 at 128x128 computes 70 MB of tensors per sample)."""
LOCATE_MAX_TENSORS = 2048
"""Most tensors one locating run exposes per model."""
_UNKNOWN_BYTES = 4 * 2**20
"""Size assumed for a tensor whose shape is unknown."""


def tensor_bytes(staged: Staged, name: str, dims: Mapping[str, int] | None = None) -> int:
    """Estimated bytes of tensor ``name`` of ``staged`` for one sample (symbolic dims from
    ``dims``, else 1; :data:`_UNKNOWN_BYTES` when its shape or type is unknown)."""
    shape = staged.oracle.shape(name)
    elem = staged.elem_type(name)
    if shape is None or not elem:
        return _UNKNOWN_BYTES
    try:
        size = np.dtype(helper.tensor_dtype_to_np_dtype(elem)).itemsize
    except (KeyError, TypeError, ValueError):
        size = 4
    for d in shape:
        size *= d if isinstance(d, int) else ((dims or {}).get(d, 1) if isinstance(d, str) else 1)
    return max(1, size)


@dataclass
class Side:
    """One model of a comparison with the feeds of the sample being searched."""

    staged: Staged
    feeds: Mapping[str, np.ndarray]


def numpy_dtype_name(elem_type: int) -> str:
    """The numpy name of an ONNX element type ('' when unknown)."""
    name = _DTYPE_NAMES.get(elem_type)
    if name is None:
        try:
            name = str(np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
                       .name) if elem_type else ""
        except (KeyError, TypeError, ValueError):
            name = ""
        _DTYPE_NAMES[elem_type] = name
    return name


_DTYPE_NAMES: dict[int, str] = {}
"""ONNX element type -> :func:`numpy_dtype_name` (asked once per compared tensor)."""


class _Prober:
    def __init__(self, ref: Side, cand: Side, mapping: Mapping[str, str], *, rtol: float | None,
                 atol: float | None, exact: bool, batch: int) -> None:
        self.ref, self.cand, self.mapping = ref, cand, mapping
        self.rtol, self.atol, self.exact, self.batch = rtol, atol, exact, batch
        self.known: dict[str, tuple[bool, float | None]] = {}
        self.values: dict[str, tuple[np.ndarray, np.ndarray, str]] = {}
        """(reference, candidate) arrays and the candidate tensor of the last tensor found to
        differ and of what its node reads."""
        self.sessions = 0

    def m(self, name: str) -> str:
        return self.mapping.get(name, name)

    def chunks(self, names: list[str], most: int | None = None) -> list[list[str]]:
        """``names`` split in order into runs of at most ``batch`` tensors, or of estimated
        size at most :data:`LOCATE_BUDGET_BYTES` when the tensors are small (a run costs the
        same whatever it exposes: fewer runs, less time). ``most``: stop after that many."""
        out: list[list[str]] = []
        current: list[str] = []
        used = 0
        for n in names:
            if most is not None and len(out) >= most:
                return out
            size = tensor_bytes(self.ref.staged, n)
            if current and len(current) >= self.batch and (
                    used + size > LOCATE_BUDGET_BYTES or len(current) >= LOCATE_MAX_TENSORS):
                out.append(current)
                current, used = [], 0
            current.append(n)
            used += size
        if current:
            out.append(current)
        return out

    def fits(self, names: list[str]) -> bool:
        """Whether ``names`` are exposed by one run per model."""
        return len(self.chunks([n for n in names if n not in self.known], most=2)) <= 1

    def differs(self, names: list[str]) -> dict[str, bool]:
        todo = [n for n in dict.fromkeys(names) if n not in self.known]
        for chunk in self.chunks(todo):
            ref_vals = self.ref.staged.run(self.ref.feeds, chunk, batch=len(chunk))
            cand_vals = self.cand.staged.run(self.cand.feeds, [self.m(n) for n in chunk],
                                             batch=len(chunk))
            self.sessions += 2
            for n in chunk:
                self.known[n] = one_sample(self.ref.staged, n, self.m(n), ref_vals[n],
                                           cand_vals[self.m(n)], rtol=self.rtol,
                                           atol=self.atol, exact=self.exact,
                                           cand=self.cand.staged)
            # the arrays of the first tensor that differs here and of what its node reads (the
            # located node when this is the window): node_check needs no run for them
            first = next((n for n in chunk if self.known[n][0]), None)
            if first is not None:
                index = self.ref.staged.index
                keep = {first, *_node_reads(index, index.producer[first])}
                self.values = {n: (ref_vals[n], cand_vals[self.m(n)], self.m(n))
                               for n in chunk if n in keep}
            del ref_vals, cand_vals
        return {n: self.known[n][0] for n in names}


def one_sample(ref: Staged, name: str, cand_name: str, a: Any, b: Any, *, rtol: float | None,
               atol: float | None, exact: bool,
               cand: Staged | None = None) -> tuple[bool, float | None]:
    """(differs, max abs diff) of reference tensor ``name`` (value ``a``) and its counterpart
    ``cand_name`` (value ``b``) on one sample, as the search judges them; a tensor of a
    converted candidate (``cand``: :class:`~.deep.Converted`) is compared upcast."""
    from .deep import Converted  # (deep imports this module)

    if isinstance(cand, Converted):
        b = cand.upcast(a, b)
    if not isinstance(a, np.ndarray) or not isinstance(b, np.ndarray):
        return (False, None)
    return differs(a, b, dtype=numpy_dtype_name(ref.elem_type(name)), rtol=rtol, atol=atol,
                   exact=exact)


def first_probes(ref: Staged, cand: Staged, start: str, *, mapping: Mapping[str, str],
                 batch: int = DEFAULT_BATCH, strict_mapping: bool = False) -> list[str]:
    """The tensors :func:`locate` compares first when ``start`` differs (its first probes, or
    every tensor of its window when they fit one run), ``start`` excluded: what a caller may
    compare beforehand on every sample and hand to :func:`locate` as ``known``."""
    batch = max(2, batch)
    comparable = _comparable(ref.index, cand.index, dict(mapping), strict_mapping)
    if start not in comparable:
        return []
    prober = _Prober(Side(ref, {}), Side(cand, {}), mapping, rtol=None, atol=None, exact=False,
                     batch=batch)
    prober.known[start] = (True, None)
    window = _ordered_ancestors(ref.index, start, comparable)
    if len(window) <= batch or prober.fits(window):
        return window[:-1]
    return [window[p] for p in _probes(window, batch) if window[p] != start]


def _probes(window: list[str], batch: int) -> list[int]:
    step = len(window) / batch
    probes = sorted({min(len(window) - 1, int((k + 1) * step) - 1) for k in range(batch)})
    if probes[-1] != len(window) - 1:
        probes.append(len(window) - 1)
    return probes


def _comparable(ref: GraphIndex, cand: GraphIndex, mapping: Mapping[str, str],
                strict: bool) -> set[str]:
    """Reference node outputs whose counterpart the candidate computes (not a graph input)."""
    out = set()
    for name in ref.producer:
        if strict and name not in mapping:
            continue
        other = mapping.get(name, name)
        if other in cand.producer:
            out.add(name)
    return out


def _ordered_ancestors(index: GraphIndex, target: str, comparable: set[str]) -> list[str]:
    """Comparable tensors computed on the way to ``target``, in topological order, target last."""
    nodes = closure(index, [target]).nodes
    order: list[str] = []
    for i in nodes:
        order.extend(o for o in index.graph.node[i].output if o in comparable)
    if target in order:
        order.remove(target)
    order.append(target)
    return order


def _node_reads(index: GraphIndex, i: int) -> list[str]:
    names = [n for n in index.graph.node[i].input if n]
    names.extend(name for name, _ in index.captures.get(i, ()))
    return names


def locate(ref: Side, cand: Side, start: str, *, mapping: Mapping[str, str] | None = None,
           rtol: float | None = None, atol: float | None = None, exact: bool = False,
           batch: int = DEFAULT_BATCH, strict_mapping: bool = False,
           max_restarts: int = 64, start_diff: float | None = None,
           values: dict[str, tuple[np.ndarray, np.ndarray, str]] | None = None,
           known: Mapping[str, tuple[bool, float | None]] | None = None,
           ) -> Divergence | None:
    """The first tensor on the way to the differing reference tensor ``start`` where ``cand``
    parts from ``ref`` (see the module docstring). None when ``start`` agrees after all.

    Args:
        ref, cand: the two models and the feeds of one sample where they differ.
        start: a reference tensor known (or suspected) to differ.
        mapping: reference tensor name -> candidate tensor name (identity when absent).
        batch: most tensors exposed per session (at least 2).
        strict_mapping: compare only tensors ``mapping`` names (e.g. a copy inside one model).
        start_diff: the max abs difference of ``start`` when the caller compared it already
            and it differs (it is then not run again).
        values: filled with the (reference, candidate) arrays (and the candidate tensor) of
            the located tensor and of the comparable tensors its node reads, by reference name (for :func:`~.deep.node_check`).
        known: (differs, max abs diff) of reference tensors on this sample, compared already
            with their counterparts through ``mapping`` (:func:`one_sample`): not run again.
    """
    mapping = dict(mapping or {})
    batch = max(2, batch)
    rindex, cindex = ref.staged.index, cand.staged.index
    comparable = _comparable(rindex, cindex, mapping, strict_mapping)
    if start not in comparable:
        return None
    prober = _Prober(ref, cand, mapping, rtol=rtol, atol=atol, exact=exact, batch=batch)
    prober.known.update((n, v) for n, v in (known or {}).items() if n != start)
    if len(prober.known):  # the sessions that compared the pairs computed these for the search
        prober.sessions = 2
    if start_diff is not None:
        prober.known[start] = (True, start_diff)
    elif not prober.differs([start])[start]:
        return None
    target = start
    found = start
    for _ in range(max_restarts):
        window = _ordered_ancestors(rindex, target, comparable)
        while len(window) > batch and not prober.fits(window):
            probes = _probes(window, batch)
            verdict = prober.differs([window[p] for p in probes])
            lo = 0
            hi = len(window) - 1
            for p in probes:
                if verdict[window[p]]:
                    hi = p
                    break
                lo = p + 1
            window = window[lo:hi + 1]
        verdict = prober.differs(window)
        found = next((n for n in window if verdict[n]), target)
        producer = rindex.producer[found]
        reads = [n for n in _node_reads(rindex, producer) if n in comparable]
        read_verdict = prober.differs(reads)
        bad = [n for n in reads if read_verdict[n]]
        if not bad:
            break
        target = min(bad, key=lambda n: rindex.producer[n])
    if found == start and start_diff is not None:  # its difference on this sample, measured
        del prober.known[start]
        prober.differs([start])
    if values is not None and found in prober.values:
        values.update(prober.values)
    prober.values.clear()
    return _describe(ref, cand, found, prober, mapping)


def _describe(ref: Side, cand: Side, tensor: str, prober: _Prober,
              mapping: Mapping[str, str]) -> Divergence:
    return describe(ref.staged, cand.staged, tensor, mapping,
                    max_abs=prober.known.get(tensor, (True, None))[1], sessions=prober.sessions)


def describe(ref: Staged, cand: Staged, tensor: str, mapping: Mapping[str, str], *,
             max_abs: float | None, sessions: int = 0) -> Divergence:
    """A :class:`Divergence` for the reference tensor ``tensor`` (its node, framework name,
    module, differing weights, rewired inputs and changed attributes)."""
    rindex, cindex = ref.index, cand.index
    other = mapping.get(tensor, tensor)
    cnode = cindex.graph.node[cindex.producer[other]]
    rnode = rindex.graph.node[rindex.producer[tensor]]
    framework = None
    for model in (cand.model.proto, ref.model.proto):
        inverse: dict[str, str] = {}
        for key, value in name_map(model).items():
            inverse.setdefault(value, key)
        framework = inverse.get(other) or inverse.get(tensor)
        if framework:
            break
    weights = []
    for name in rnode.input:
        cname = mapping.get(name, name)
        if (rindex.initializers.get(name, -1) >= 0 and cindex.initializers.get(cname, -1) >= 0
                and not same_initializer(ref, cand, name, cname)):
            weights.append(name)
    r_inputs = tuple(mapping.get(n, n) for n in rnode.input)
    c_inputs = tuple(cnode.input)
    differ = r_inputs != c_inputs
    return Divergence(
        tensor=tensor, candidate_tensor=other,
        node=cindex.node_label(cindex.producer[other]), op_type=cnode.op_type,
        framework_name=framework, module=node_module(cnode) or node_module(rnode),
        max_abs_diff=max_abs,
        differing_weights=tuple(weights),
        reference_inputs=tuple(rnode.input) if differ else None,
        candidate_inputs=c_inputs if differ else None,
        attribute_changes=_attribute_changes(rnode, cnode),
        sessions=sessions,
    )


def same_initializer(ref: Staged, cand: Staged, rname: str, cname: str) -> bool:
    """Whether initializer ``rname`` of ``ref`` and ``cname`` of ``cand`` hold the same dtype,
    shape and bytes (external data read only when the headers agree; none read when both
    sessions share one value of them, :attr:`Staged.shared`)."""
    rt = ref.model.proto.graph.initializer[ref.index.initializers[rname]]
    ct = cand.model.proto.graph.initializer[cand.index.initializers[cname]]
    if rt.data_type != ct.data_type or list(rt.dims) != list(ct.dims):
        return False
    shared = ref.shared.get(rname)
    if shared is not None and shared is cand.shared.get(cname):
        return True
    same = _same_external_bytes(rt, ct, ref.model.base_dir, cand.model.base_dir)
    if same is not None:
        return same
    a = read_tensor(rt, ref.model.base_dir)
    b = read_tensor(ct, cand.model.base_dir)
    if a.dtype.kind == "O":
        return bool(np.array_equal(a, b))
    return a.tobytes() == b.tobytes()


_PLAIN = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16,
                    onnx.TensorProto.INT8, onnx.TensorProto.INT16, onnx.TensorProto.INT32,
                    onnx.TensorProto.INT64, onnx.TensorProto.UINT8, onnx.TensorProto.UINT16,
                    onnx.TensorProto.UINT32, onnx.TensorProto.UINT64})
"""Data types whose values are their stored bytes as they are (read as numpy without a
conversion): equal values are equal bytes."""
_CHUNK = 1 << 20


def _same_external_bytes(rt: onnx.TensorProto, ct: onnx.TensorProto, rbase: Any,
                         cbase: Any) -> bool | None:
    """Whether two external tensors of one :data:`_PLAIN` dtype and shape hold the same bytes,
    read a chunk at a time from both files (a weight of a light-loaded model is not read whole,
    twice, and copied: a model's largest weights were the peak of ``verify --deep``). None when
    they are not both such tensors, or a read ends early (:func:`read_tensor` then says why)."""
    if rt.data_type not in _PLAIN or not (is_external(rt) and is_external(ct)):
        return None
    ra, ca = resolve_external(rt, rbase), resolve_external(ct, cbase)
    want = expected_nbytes(rt)
    if want is None or ra.length != want or ca.length != want:
        return None
    with os.fdopen(open_external(ra, rt.name), "rb") as f, os.fdopen(open_external(ca, ct.name), "rb") as g:
        f.seek(ra.offset)
        g.seek(ca.offset)
        left = want
        while left:
            k = min(left, _CHUNK)
            x, y = f.read(k), g.read(k)
            if len(x) != k or len(y) != k:
                return None
            if x != y:
                return False
            left -= k
    return True


def _attribute_changes(a: onnx.NodeProto, b: onnx.NodeProto) -> tuple[str, ...]:
    """``name: a-value -> b-value`` for plain attributes that differ (same op type only)."""
    if a.op_type != b.op_type:
        return ()
    plain = (onnx.AttributeProto.INT, onnx.AttributeProto.FLOAT, onnx.AttributeProto.STRING,
             onnx.AttributeProto.INTS, onnx.AttributeProto.FLOATS, onnx.AttributeProto.STRINGS)
    va = {x.name: helper.get_attribute_value(x) for x in a.attribute if x.type in plain}
    vb = {x.name: helper.get_attribute_value(x) for x in b.attribute if x.type in plain}
    out = []
    for name in sorted(set(va) | set(vb)):
        if va.get(name) != vb.get(name):
            out.append(f"{name}: {va.get(name, '-')} -> {vb.get(name, '-')}")
    return tuple(out)
