"""The types ``replace`` checks per site: each tensor's type looked up once in the type
oracle's order (declared, an initializer's, the cheap forward pass, inference), by C-level maps
over load's listing where it has one (:class:`_SiteTypes`); sites inside If/Loop/Scan bodies by
their body's declared or inferred types (:class:`_BodyTypes`); the lookup the matcher reads a
bound tensor's type through (:func:`site_type_lookup`). :mod:`onnxsurgeon.surgery.replace`
re-exports ``site_type_lookup``."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from functools import partial
from itertools import compress
from operator import attrgetter, methodcaller
from typing import Any

import onnx

from ..index import GraphIndex
from ..pattern.declared import indexed_type
from ..protos import weightless_copy
from ..selectors import body_graphs
from ..types import TypeOracle, infer_value_infos, is_complete
from ._edgewalk import propagate_edges

_TYPE = attrgetter("type")
_ELEM = attrgetter("tensor_type.elem_type")  # read only: sets no field; 0 unless set
_TYPE_KEY = methodcaller("SerializeToString", deterministic=True)

_Key = bytes | tuple[int, tuple[int | str | None, ...]]
"""A tensor's type as the per-site checks compare it: (dtype, dims) when it is a tensor type
the cheap pass or an initializer gives, else the serialized TypeProto (b"-": unknown)."""


class _SiteTypes:
    """Types of the model's tensors for the per-site checks, each looked up once, in the type
    oracle's order: declared (value_info, graph inputs and outputs), an initializer's, the cheap
    type pass on the int dataflow graph (:func:`~onnxsurgeon.surgery._edgewalk.propagate_edges`
    over the nodes up to the last site, run once; complete types only), onnx shape inference
    (run once, only for a tensor the pass cannot type), the type oracle for the rest. A type is
    kept as a :data:`_Key`; the TypeProto is made only for a signature not seen before."""

    def __init__(self, index: GraphIndex, upto: int) -> None:
        self.index = index
        self.raw = index.type_bytes
        """Name -> its declared type's bytes as load read them (None: ask ``value_info``)."""
        self.declared: Mapping[str, Any] = self.raw if self.raw is not None else index.value_info
        self.canon: dict[bytes, bytes | None] = {}
        """A declared type's bytes -> its :data:`_Key` (None: no element type)."""
        self.initializers = index.initializers
        self.producer = index.producer
        self.oracle: TypeOracle | None = None
        self.inferred: dict[str, onnx.ValueInfoProto] | None = None
        self.memo: dict[str, _Key] = {}
        self.cheap: dict[int, Any] | None = None
        self.upto = upto

    def key(self, name: str) -> _Key:
        found = self.memo.get(name)
        if found is not None:
            return found
        declared = self._declared_keys([name])[0] if name in self.declared else None
        key: _Key
        if declared is not None:
            key = declared
        elif self.initializers.get(name, -1) >= 0:
            init = self.index.graph.initializer[self.initializers[name]]
            key = int(init.data_type), tuple(init.dims)
        else:
            j = self.producer.get(name)
            cheap = self._cheap().get(j) if j is not None else None
            key = cheap if cheap is not None else self._slow(name)
        self.memo[name] = key
        return key

    def fill(self, names: Iterable[str]) -> None:
        """:meth:`key` of every name not asked before, in order (memoized): a name neither
        declared nor an initializer that the cheap pass types by C-level maps, the others one
        by one. O(names)."""
        memo = self.memo
        todo = [n for n in dict.fromkeys(names) if n not in memo]
        declared, inits = self.declared, self.initializers
        mine = [n for n in todo if n in declared]
        if mine:  # :meth:`key`'s first case by C-level maps (a typed model declares each)
            keys: list[Any] = self._declared_keys(mine)
            typed = [k is not None for k in keys]
            memo.update(zip(compress(mine, typed), compress(keys, typed), strict=True))
        plain = [n for n in todo if n not in declared and n not in inits]
        if plain:
            get: Callable[[Any], Any] = self._cheap().get  # None: no producer or no type
            got: list[Any] = list(map(get, map(self.producer.get, plain)))
            typed = [t is not None for t in got]
            memo.update(zip(compress(plain, typed), compress(got, typed), strict=True))
        for name in todo:
            if name not in memo:
                self.key(name)

    def _declared_keys(self, names: list[str]) -> list[bytes | None]:
        """The :data:`_Key` of each declared name's type, None for a type without an element
        type; by C-level maps, each distinct type parsed once (load's bytes of it when the
        index has them, else the ValueInfo's type serialized)."""
        if self.raw is not None:
            types = list(map(self.raw.__getitem__, names))
        else:
            types = list(map(_TYPE_KEY, map(_TYPE, map(self.declared.__getitem__, names))))
        canon = self.canon
        for t in set(types).difference(canon):
            parsed = onnx.TypeProto.FromString(t)
            canon[t] = _TYPE_KEY(parsed) if _ELEM(parsed) else None
        return list(map(canon.__getitem__, types))

    def cheap_types(self) -> dict[int, Any]:
        """Node id -> its output's type by the cheap pass (run once, when first asked)."""
        return self._cheap()

    def _cheap(self) -> dict[int, Any]:
        """Node id -> type by the cheap pass, run once when a type is first asked of it."""
        if self.cheap is None:
            self.cheap = {}
            index = self.index
            if index.known_int_graph() is not None and self.upto > 0:
                self.cheap = index.memo.setdefault("edge_types", {})
                propagate_edges(index, range(self.upto), {}, (), cache=self.cheap,
                                partial=True)
        return self.cheap

    def _slow(self, name: str) -> bytes:
        index = self.index
        info = None
        if name not in index.inputs and name not in index.outputs:
            if self.inferred is None:  # inference once, as the oracle runs it
                self.inferred = infer_value_infos(index.model)
            info = self.inferred.get(name)
        if not is_complete(info):
            if self.oracle is None:
                self.oracle = TypeOracle(index)
            info = self.oracle.value_info(name)
        t = info.type if info is not None and info.type.WhichOneof("value") else None
        return t.SerializeToString(deterministic=True) if t is not None else b"-"


class _BodyTypes:
    """Types of one body's tensors for the per-site checks (:class:`_SiteTypes`'s ``fill`` and
    ``memo``): what the body declares (its inputs, outputs, value_info, initializers), else
    what onnx inference of the whole model puts there (``inferred``: made once, when a body
    tensor is not declared), else the enclosing main graph's (a captured tensor)."""

    def __init__(self, graph: onnx.GraphProto, main: _SiteTypes,
                 inferred: Callable[[], onnx.GraphProto | None]) -> None:
        self.memo: dict[str, _Key] = {}
        self.declared = {vi.name: vi.type for vi in (*graph.input, *graph.output,
                                                       *graph.value_info)}
        self.declared.update((t.name, onnx.helper.make_tensor_type_proto(t.data_type, t.dims))
                             for t in graph.initializer)
        self.main, self.inferred = main, inferred
        self.found: dict[str, onnx.TypeProto] | None = None
        self.outer = main.index.producer.keys() | main.index.initializers.keys() | \
            set(main.index.inputs)

    def fill(self, names: Iterable[str]) -> None:
        """The key of every name not asked before. O(names), one inference at most."""
        for name in dict.fromkeys(names):
            if name in self.memo:
                continue
            t = self.declared.get(name)
            if t is None or not t.WhichOneof("value"):
                if self.found is None:  # the inferred body's value_info, read once
                    body = self.inferred()
                    self.found = {vi.name: vi.type for vi in body.value_info} if (
                        body is not None) else {}
                t = self.found.get(name)
            if t is not None and t.WhichOneof("value"):
                self.memo[name] = t.SerializeToString(deterministic=True)
            elif name in self.outer:
                self.memo[name] = self.main.key(name)
            else:
                self.memo[name] = b"-"


def _body_types(host: onnx.ModelProto, main: _SiteTypes,
                graphs: Mapping[str, onnx.GraphProto]) -> Callable[[str], _BodyTypes]:
    """Path -> :class:`_BodyTypes` of that body (inference of the whole model run once, on a
    weight-free copy, when first needed)."""
    made: dict[str, _BodyTypes] = {}
    inferred: list[dict[str, onnx.GraphProto]] = []

    def bodies() -> dict[str, onnx.GraphProto]:
        if not inferred:
            try:
                model = onnx.shape_inference.infer_shapes(weightless_copy(host),
                                                          strict_mode=False)
            except Exception:  # noqa: BLE001 - inference is best effort here
                model = onnx.ModelProto()
            inferred.append(dict(body_graphs(model.graph)))
        return inferred[0]

    def of(path: str) -> _BodyTypes:
        if path not in made:
            made[path] = _BodyTypes(graphs[path], main, lambda: bodies().get(path))
        return made[path]

    return of


def site_type_lookup(index: GraphIndex, types: _SiteTypes | None = None) -> _SiteLookup:
    """The site tensors' types :func:`~onnxsurgeon.pattern.find_matches` compares with what a
    pattern declares: in the main graph the per-site checks' own (declared, initializer, the
    cheap pass, inference: ``types``, made when not given); None in a body (find_matches then
    reads what the body declares). Also by int id (:class:`~onnxsurgeon.pattern.declared.IdTypeLookup`)."""
    return _SiteLookup(index, types if types is not None else _SiteTypes(
        index, len(index.graph.node)))


class _SiteLookup:
    """:func:`site_type_lookup`'s answer: by name, and by id in the int dataflow graph."""

    def __init__(self, index: GraphIndex, main: _SiteTypes) -> None:
        self.index, self.main = index, main
        self.seen: dict[_Key, tuple[int, int | None] | None] = {}
        self.declared = partial(indexed_type, index)
        self.by_node: dict[int, Any] | None = None
        self.cheap: dict[int, Any] | None = None
        self.leaves: dict[int, str] = {}
        self.ops: list[str] = []
        self.by_type: dict[bytes, tuple[int, int | None] | None] = {}
        """A declared TypeProto's bytes -> its (dtype, rank) (:meth:`by_id`)."""

    def __call__(self, path: str, name: str) -> tuple[int, int | None] | None:
        if path:
            return None
        known = self.declared(name)
        if known is not None:
            return known
        key = self.main.key(name)
        if isinstance(key, tuple):
            return key[0], len(key[1])
        seen = self.seen
        if key not in seen:
            t = _type_of(key)
            shape = _shape(t)
            seen[key] = None if t is None or not t.HasField("tensor_type") else (
                _elem(t), len(shape) if shape is not None else None)
        return seen[key]

    def by_id(self, g: int) -> tuple[int, int | None] | None:
        """What :meth:`__call__` answers for tensor ``g`` of the index's int dataflow graph
        when it comes from what the graph declares or from the cheap type pass, without the
        name; None otherwise (ask by name). A node's ValueInfo is found through a node id -> entry
        table built once (O(value_info)); an initializer's or a Constant's name is left to the
        names."""
        by_node = self.by_node
        if by_node is None:
            by_node = self._by_node()
        if g < 0:
            leaf = self.leaves.get(g)
            return self.declared(leaf) if leaf is not None else None
        ops = self.ops
        op = ops[g] if g < len(ops) else ""  # no int graph: none of its ids
        if not op or op == "Constant":
            return None
        vi = by_node.get(g, False)
        if vi is False:
            cheap = self.cheap
            if cheap is None:
                cheap = self.cheap = self.main.cheap_types()
            found = cheap.get(g)
            return (found[0], len(found[1])) if found is not None else None
        if vi is None:
            return None
        # the type's bytes (load's, else one C call); most tensors share a type: read it once
        key = vi if type(vi) is bytes else vi.type.SerializeToString()
        found = self.by_type.get(key, False)
        if found is False:
            found = self.by_type[key] = _dtype_rank(onnx.TypeProto.FromString(key))
        return found

    def _by_node(self) -> dict[int, Any]:
        """Node id -> its output's declared type's bytes as load read them (else its
        ValueInfo), None for a node whose output is named as an initializer (the names
        decide). O(value_info + initializers)."""
        index = self.index
        edges = index.known_int_graph()
        self.leaves, self.ops = (edges.leaves, edges.ops) if edges is not None else ({}, [])
        producer = index.producer
        table: Mapping[str, Any] = self.main.declared
        by_node: dict[Any, Any] = dict(zip(map(producer.get, table), table.values(),
                                           strict=True))
        for name in index.initializers:
            j = producer.get(name)
            if j is not None:
                by_node[j] = None
        by_node.pop(None, None)
        self.by_node = by_node
        return by_node


def _dtype_rank(t: onnx.TypeProto) -> tuple[int, int | None] | None:
    """A declared type's (dtype, rank) as :meth:`_SiteLookup.by_id` answers it: None unless a
    tensor type with a dtype; rank None without a shape."""
    if not t.HasField("tensor_type"):
        return None
    tt = t.tensor_type
    elem = tt.elem_type
    if not elem:
        return None
    return int(elem), (len(tt.shape.dim) if tt.HasField("shape") else None)


def _type_of(key: _Key) -> onnx.TypeProto | None:
    """The TypeProto a :data:`_Key` stands for."""
    if isinstance(key, tuple):
        return onnx.helper.make_tensor_type_proto(key[0], list(key[1]))
    return None if key == b"-" else onnx.TypeProto.FromString(key)


def _shape(t: onnx.TypeProto | None) -> list[int | str | None] | None:
    if t is None or not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
            for d in t.tensor_type.shape.dim]


def _elem(t: onnx.TypeProto | None) -> int:
    return int(t.tensor_type.elem_type) if t is not None and t.HasField("tensor_type") else 0
