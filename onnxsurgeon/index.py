"""A thin, protobuf-native index over a model's main graph.

The ``ModelProto`` stays the source of truth. :class:`GraphIndex` is built once per model state and
answers: who produces a tensor, who reads it (explicit input slots of main-graph nodes, and reads
from inside If/Loop/Scan bodies), which tensors are initializers, graph inputs, graph outputs, and
what type information is known. Any verb that mutates the model must drop its index and build a
new one (``GraphIndex(model)``), or say what it changed to an :class:`~onnxsurgeon.upkeep.Upkeep`
so that a recipe's next step starts from the edited index (its
:class:`~onnxsurgeon.session.Session`).

Building is O(nodes + edges). Consumers and captures are computed lazily on first use, because
``extract`` only needs producers.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import accumulate, count, islice
from operator import attrgetter
from typing import Any, Protocol

import onnx

from .errors import InvalidModelError
from .nodefields import EDGE_FIELDS as EDGE_FIELDS  # re-exported: their home before nodefields
from .nodefields import edge_op as edge_op
from .nodefields import edge_ops, node_pass
from .scopes import (  # noqa: F401  (re-exported: their home before scopes)
    DEFAULT_INPUT_IR,
    MAX_NESTING,
    InnerRead,
    OuterScope,
    Use,
    body_captures,
    check_depth,
    graph_defined_names,
    has_subgraphs,
    iter_graphs,
    node_label,
    real_inputs,
    subgraphs,
)


@dataclass(frozen=True, slots=True)
class NodeEdges:
    """The main graph's dataflow as ints, recorded by load's validation pass (no extra protobuf
    reads) and handed to the index only while the model is provably unchanged since.

    Attributes:
        preds: the producer of each explicit input, node after node in slot order: a node index
            (>= 0), a leaf id (<= -2, see ``leaves``) or -1 for an omitted optional input ("").
        starts: node ``i`` reads ``preds[starts[i]:starts[i + 1]]`` (``len(nodes) + 1`` entries).
        leaves: leaf id -> name of a graph input or initializer.
        names: the nodes' names ("" for an unnamed node), in node order.
        ops: each node's op_type when it is in the default domain and has one output, else
            "" (what the cheap type pass can look at), in node order.
        init_types: the (data type, dims) of ``graph.initializer`` by position, as load's
            tensor check read them, when initializer ``k`` is leaf ``init_leaf(k)`` (see
            :func:`with_initializer_types`); only on the graph load hands over, which is used
            only while the model is as loaded. Not compared.
    """

    preds: list[int]
    starts: list[int]
    leaves: dict[int, str]
    names: list[str]
    ops: list[str]
    init_types: Sequence[tuple[int, tuple[int, ...]]] | None = field(default=None,
                                                                     compare=False)

    def leaf_types(self) -> Iterator[tuple[int, tuple[int, tuple[int, ...]]]]:
        """(leaf id, (data type, dims)) of every initializer, from :attr:`init_types` (none
        without them): the initializers are the last ``len(init_types)`` leaves, in order."""
        types = self.init_types or ()
        base = -2 - (len(self.leaves) - len(types))
        return zip(range(base, base - len(types), -1), types, strict=True)


def int_arrays(edges: NodeEdges, memo: dict[str, Any]) -> tuple[Any, Any]:
    """``edges.preds`` and ``edges.starts`` as numpy int64 arrays, made once per int graph and
    kept in ``memo`` (an index's, or the upkeep following its edits: the passes of one verb
    and its save share them). O(edges) the first time."""
    import numpy as np

    got = memo.get("int_arrays")
    if got is None or got[0] is not edges.preds or got[1] is not edges.starts:
        got = (edges.preds, edges.starts,
               np.fromiter(edges.preds, np.int64, count=len(edges.preds)),
               np.fromiter(edges.starts, np.int64, count=len(edges.starts)))
        memo["int_arrays"] = got
    return got[2], got[3]


def with_initializer_types(
    edges: NodeEdges, graph: onnx.GraphProto, types: Sequence[tuple[int, tuple[int, ...]]]
) -> NodeEdges:
    """``edges`` (as :func:`onnxsurgeon.validate.validate_producers` numbered the leaves of
    ``graph``) with :attr:`NodeEdges.init_types` ``types``, the (data type, dims) of
    ``graph.initializer`` by position. Kept only when initializer ``k`` is provably leaf
    ``-2 - len(graph.input) - k``: every graph input and every initializer has its own leaf
    (none listed as both, no input named "", no sparse initializer). O(1).
    """
    n_in, n_init = len(graph.input), len(graph.initializer)
    if (len(types) != n_init or graph.sparse_initializer
            or len(edges.leaves) != n_in + n_init):
        return edges
    return NodeEdges(edges.preds, edges.starts, edges.leaves, edges.names, edges.ops, types)


_NAME = attrgetter("name")
_ATTRIBUTES = attrgetter("attribute")
_INPUTS = attrgetter("input")


def _build_edges(graph: onnx.GraphProto) -> NodeEdges | None:
    """The :class:`NodeEdges` of ``graph`` with the ids load's validation gives (graph inputs,
    then initializers, as leaves), by the same node pass
    (:func:`~onnxsurgeon.nodefields.node_pass`); None when a node holds a subgraph, reads a
    name not defined before it, or redefines one (a single output "" counts). O(nodes + edges).
    """
    first: dict[str, int] = {}
    for name in map(_NAME, graph.input):
        first.setdefault(name, -2 - len(first))
    for name in map(_NAME, graph.initializer):
        first.setdefault(name, -2 - len(first))
    for st in graph.sparse_initializer:
        first.setdefault(st.values.name, -2 - len(first))
    first[""] = -1
    nodes = graph.node
    preds, counts, names, ops, domains, multi, holders, suspects = node_pass(nodes, first)
    if suspects or None in preds or any(has_subgraphs(nodes[i]) for i in holders):
        return None
    leaves = {i: name for name, i in first.items() if i < -1}
    return NodeEdges(preds, [0, *accumulate(counts)], leaves, names,  # type: ignore[arg-type]
                     edge_ops(ops, domains, multi))


def positions(items: list[Any], value: Any) -> list[int]:
    """Every position of ``value`` in ``items``, ascending, by C-level ``list.index`` scans
    (no Python step per item). O(len(items))."""
    found: list[int] = []
    at = -1
    find = items.index
    while True:
        try:
            at = find(value, at + 1)
        except ValueError:
            return found
        found.append(at)


def _positions(items: Iterable[Any]) -> dict[str, int]:
    """Name -> position; a repeated name maps to its last position (as the dict comprehension
    over ``enumerate`` this replaces did)."""
    return dict(zip(map(_NAME, items), count()))


class ListedValueInfo(Protocol):
    """The main graph's value_info entries as read from the model's bytes (names, type bytes,
    the entries flagged in ``keep`` as fields): :class:`onnxsurgeon.scan.ValueInfos`."""

    @property
    def names(self) -> list[str]: ...
    @property
    def types(self) -> list[bytes]: ...
    def entries(self, keep: bytes) -> bytes | None: ...  # noqa: D102


class GraphIndex:
    """Name-keyed index of ``model.graph`` (names are SSA identities within a scope).

    Attributes:
        model: the indexed model (not copied).
        producer: tensor name -> index of the main-graph node producing it.
        initializers: initializer name -> position in ``graph.initializer``.
        inputs: graph input name -> position (initializers listed as inputs included).
        outputs: graph output name -> position.
        edges: the int dataflow graph when handed over (by :func:`onnxsurgeon.io.indexed`: the
            model provably unchanged since load validated it; by a
            :class:`~onnxsurgeon.session.Session`: as loaded, or as the previous verb edited it
            along with its :class:`~onnxsurgeon.upkeep.Upkeep`), else None.
        listed_value_info: the main graph's value_info entries as load read them from the
            bytes (:class:`ListedValueInfo`), handed over with load's producer map (the model
            provably unchanged since), else None. True of the proto until a verb edits its
            value_info (ask before editing, as of the rest of the index).
    """

    def __init__(
        self, model: onnx.ModelProto, *, _producer: dict[str, int] | None = None,
        _edges: NodeEdges | None = None, _value_info: ListedValueInfo | None = None,
    ) -> None:
        self.model = model
        graph = model.graph
        self.graph = graph
        self.edges: NodeEdges | None = None
        self.listed_value_info: ListedValueInfo | None = None
        if _producer is not None:  # handed over (io.indexed, a Session): fresh, says the caller
            self.producer = _producer
            self.edges = _edges
            if _value_info is not None and len(_value_info.names) == len(graph.value_info):
                self.listed_value_info = _value_info
            self._index_rest(graph)
            return
        producer: dict[str, int] = {}
        setdefault = producer.setdefault
        # hot loop (upb): indexing a one-element repeated field is ~2x cheaper than iterating it
        for i, node in enumerate(graph.node):
            outs = node.output
            if len(outs) == 1:
                out = outs[0]
                if out and setdefault(out, i) != i:
                    self._produced_twice(out, node)
                continue
            for out in outs:
                if out:
                    if out in producer:
                        self._produced_twice(out, node)
                    producer[out] = i
        self.producer = producer
        self._index_rest(graph)

    def _index_rest(self, graph: onnx.GraphProto) -> None:
        self._uses: dict[str, list[Use]] = {}
        self.memo: dict[str, Any] = {}
        """Facts derived from this state by other modules (e.g. types found on the int
        graph), kept as long as the index: it is dropped when the model changes."""
        # C-level builds (~0.1 us per entry): a model may hold one initializer per node
        self.initializers = dict(zip(self.initializer_names(), count()))
        for st in graph.sparse_initializer:
            self.initializers.setdefault(st.values.name, -1)
        self.inputs = _positions(graph.input)
        self.outputs = _positions(graph.output)

    def initializer_names(self) -> list[str]:
        """The names of ``graph.initializer``, in order: from load's int graph when it carries
        the initializer types (:func:`with_initializer_types`: its leaves are then the graph
        inputs followed by exactly these names), else read from the proto (~0.25 us each)."""
        edges = self.edges
        if edges is not None and edges.init_types is not None:
            return list(islice(edges.leaves.values(), len(self.graph.input), None))
        return list(map(_NAME, self.graph.initializer))

    def _produced_twice(self, out: str, node: onnx.NodeProto) -> None:
        other = self.graph.node[self._first_producer(out)]
        raise InvalidModelError(
            f"tensor '{out}' is produced twice (nodes '{other.name}' and '{node.name}'); "
            "rename one output so every tensor has one producer"
        )

    def _first_producer(self, out: str) -> int:
        for i, node in enumerate(self.graph.node):
            if out in node.output:
                return i
        return -1

    def int_graph(self) -> NodeEdges | None:
        """The int dataflow graph: the one load handed over, else built from the proto once
        (the node pass of :mod:`onnxsurgeon.nodefields`, as load's; kept in :attr:`memo`). None when a node holds a subgraph, a tensor is produced twice or a
        node reads a name not defined before it (the name-based passes handle those).
        O(nodes + edges)."""
        if self.edges is not None:
            return self.edges
        if "int_graph" not in self.memo:
            self.memo["int_graph"] = _build_edges(self.graph)
        built: NodeEdges | None = self.memo["int_graph"]
        return built

    def known_int_graph(self) -> NodeEdges | None:
        """:meth:`int_graph` only when it exists already (handed over or built before)."""
        return self.edges if self.edges is not None else self.memo.get("int_graph")

    def edge_id(self, name: str) -> int | None:
        """``name``'s id on the int dataflow graph: its producer's node index, else its leaf id
        (a graph input or initializer, from a reverse map built once per index); None when it
        is neither, or no int graph exists yet (:meth:`known_int_graph`)."""
        j = self.producer.get(name)
        if j is not None:
            return j
        edges = self.known_int_graph()
        if edges is None:
            return None
        ids: dict[str, int] | None = self.memo.get("leaf_ids")
        if ids is None:
            ids = self.memo["leaf_ids"] = {leaf: k for k, leaf in edges.leaves.items()}
        return ids.get(name)

    # ----------------------------------------------------------------- lazily built parts
    @cached_property
    def body_holders(self) -> list[int]:
        """Main-graph nodes that hold a graph (If/Loop/Scan bodies...), ascending. One C-level
        field read per node; none at all where the int graph exists (it exists only when no
        node holds a graph)."""
        if self.known_int_graph() is not None:
            return []
        nodes = self.graph.node
        return [i for i, attrs in enumerate(map(_ATTRIBUTES, nodes))
                if attrs and has_subgraphs(nodes[i])]

    @cached_property
    def captures(self) -> dict[int, list[tuple[str, InnerRead]]]:
        """Main-graph node index -> outer-scope reads made inside its bodies."""
        nodes = self.graph.node
        return {i: body_captures(nodes[i]) for i in self.body_holders}

    @cached_property
    def consumers(self) -> dict[str, list[Use]]:
        """Tensor name -> its reads by main-graph nodes, in node order. O(nodes + edges)."""
        result: dict[str, list[Use]] = {}
        captures = self.captures
        for i, node in enumerate(self.graph.node):
            for slot, name in enumerate(node.input):
                if name:
                    result.setdefault(name, []).append(Use(i, slot))
            for name, read in captures.get(i, ()):
                result.setdefault(name, []).append(Use(i, -1, read))
        return result

    def uses_of(self, name: str) -> list[Use]:
        """``consumers.get(name, [])`` without building the map for every tensor when it is not
        built yet: one C-level membership test per node (~0.2 us) instead of a ``Use`` object
        per edge; a verb that rewires one tensor needs only its reads. O(nodes)."""
        if "consumers" in self.__dict__ or not name:
            return list(self.consumers.get(name, ()))
        if name in self._uses:
            return list(self._uses[name])
        if self.known_int_graph() is not None:
            uses_of_edges = self._uses_from_edges(name)
            if uses_of_edges is not None:
                self._uses[name] = uses_of_edges
                return list(uses_of_edges)
        captures = self.captures
        uses: list[Use] = []
        nodes = self.graph.node
        readers = {i for i, ins in enumerate(map(_INPUTS, nodes)) if name in ins}
        readers.update(i for i, caps in captures.items() if any(c == name for c, _ in caps))
        for i in sorted(readers):
            uses.extend(Use(i, slot) for slot, n in enumerate(nodes[i].input) if n == name)
            uses.extend(Use(i, -1, read) for c, read in captures.get(i, ()) if c == name)
        self._uses[name] = uses
        return list(uses)

    def _uses_from_edges(self, name: str) -> list[Use] | None:
        """:meth:`uses_of` on the int dataflow graph (no node holds a body when it exists): the
        reads of ``name``'s producer id found by C-level ``list.index`` scans, each confirmed
        against the node's input slot. None when ``name`` has no id (not a tensor here)."""
        edges = self.known_int_graph()
        assert edges is not None
        j = self.edge_id(name)
        if j is None:
            return None
        starts, nodes = edges.starts, self.graph.node
        uses: list[Use] = []
        for at in positions(edges.preds, j):
            i = bisect_right(starts, at) - 1
            slot = at - starts[i]
            if nodes[i].input[slot] == name:  # a multi-output producer: the right output?
                uses.append(Use(i, slot))
        return uses

    @cached_property
    def value_info(self) -> dict[str, onnx.ValueInfoProto]:
        """Tensor name -> the most informative ValueInfo known (outputs, inputs, value_info).
        The value_info entries by one C-level build (a typed 90k-node model has one per
        tensor)."""
        listed = list(self.graph.value_info)
        infos: dict[str, onnx.ValueInfoProto] = dict(zip(map(_NAME, listed), listed, strict=True))
        for vi in self.graph.input:
            infos[vi.name] = vi
        for vi in self.graph.output:
            if vi.type.WhichOneof("value") is not None or vi.name not in infos:
                infos[vi.name] = vi
        return infos

    @cached_property
    def type_bytes(self) -> dict[str, bytes] | None:
        """Tensor name -> the bytes of the type :attr:`value_info` holds for it (same names,
        same precedence; ``TypeProto.FromString`` of them is that type) from
        :attr:`listed_value_info`, no wrapper per entry; None without it. O(value_info)."""
        listed = self.listed_value_info
        if listed is None:
            return None
        found = dict(zip(listed.names, listed.types, strict=True))
        for vi in self.graph.input:
            found[vi.name] = vi.type.SerializeToString()
        for vi in self.graph.output:
            if vi.type.WhichOneof("value") is not None or vi.name not in found:
                found[vi.name] = vi.type.SerializeToString()
        return found

    def declared_type(self, name: str) -> onnx.TypeProto | None:
        """The type :attr:`value_info` holds for ``name`` (read only), None when it holds
        none; from :attr:`type_bytes` when the index has them (each distinct type parsed
        once), so :attr:`value_info` is not built."""
        found = self.type_bytes
        if found is None:
            vi = self.value_info.get(name)
            return vi.type if vi is not None else None
        raw = found.get(name)
        if raw is None:
            return None
        parsed: dict[bytes, onnx.TypeProto] = self.memo.setdefault("parsed_types", {})
        t = parsed.get(raw)
        if t is None:
            t = parsed[raw] = onnx.TypeProto.FromString(raw)
        return t

    @cached_property
    def node_names(self) -> dict[str, int]:
        """Node name -> index (first one wins when names repeat; unnamed nodes are absent).
        From the int graph's name list when it exists (C-level when the names are unique)."""
        edges = self.known_int_graph()
        if edges is not None:
            listed = edges.names
            found = dict(zip(listed, count()))
            unnamed = listed.count("")
            if len(found) - (unnamed > 0) + unnamed != len(listed):  # repeats: first one wins
                found = {}
                for i, name in enumerate(listed):
                    found.setdefault(name, i)
            found.pop("", None)
            return found
        names: dict[str, int] = {}
        for i, node in enumerate(self.graph.node):
            if node.name and node.name not in names:
                names[node.name] = i
        return names

    # ------------------------------------------------------------------------ queries
    def node(self, i: int) -> onnx.NodeProto:
        return self.graph.node[i]

    def node_label(self, i: int) -> str:
        """A human label for main-graph node ``i`` (see :func:`node_label`)."""
        return node_label(self.graph.node[i], i)

    def input_names(self) -> list[str]:
        """The main graph's inputs a run may feed, in order (see :func:`real_inputs`)."""
        if self.model.ir_version >= DEFAULT_INPUT_IR:
            return list(self.inputs)
        return [n for n in self.inputs if n not in self.initializers]

    def has_default(self, name: str) -> bool:
        """True when graph input ``name`` is an input with a default value: also an
        initializer, in a model of IR >= 4 (:data:`DEFAULT_INPUT_IR`)."""
        return (name in self.inputs and name in self.initializers
                and self.model.ir_version >= DEFAULT_INPUT_IR)

    def is_tensor(self, name: str) -> bool:
        """True when ``name`` is a tensor of the main graph."""
        return name in self.producer or name in self.initializers or name in self.inputs

    def tensor_names(self) -> Iterator[str]:
        """Every main-graph tensor name (inputs, initializers, node outputs)."""
        yield from self.inputs
        for name in self.initializers:
            if name not in self.inputs:
                yield name
        yield from self.producer

    def elem_type(self, name: str) -> int:
        """The element type of tensor ``name`` when known, else 0 (UNDEFINED)."""
        if name in self.initializers:
            pos = self.initializers[name]
            if pos >= 0:
                return int(self.graph.initializer[pos].data_type)
        vi = self.value_info.get(name)
        if vi is not None and vi.type.HasField("tensor_type"):
            return int(vi.type.tensor_type.elem_type)
        return 0
