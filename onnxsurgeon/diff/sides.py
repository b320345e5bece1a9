"""One model's main graph as a diff reads it: node bytes, and lookups by name that build
nothing per node.

Every node is serialized once (one C-level pass over the node list). Equal nodes serialize to
equal bytes, so the unchanged prefix and suffix two node lists share are found by comparing
bytes, and only the nodes between them are matched by name. The serialized nodes, joined, are
searched for a name as protobuf encodes it in a node (the field's tag, the length, the UTF-8
bytes): the producer of a tensor, its readers, or a node by name cost one C-level scan of the
bytes (about 2 ms for a 90k-node graph) plus a check of the few nodes hit, so what a drawing
looks up depends on the size of the change, not of the model. A pass over every node's inputs
in Python (:attr:`Side.reads`, :attr:`Side.producers`) is built only for changes too large to
draw whole.
"""

from __future__ import annotations

from bisect import bisect_right
from functools import cached_property
from itertools import accumulate, chain, count, repeat

import onnx

_INPUT, _OUTPUT, _NAME = 1, 2, 3
"""NodeProto field numbers of ``input``, ``output`` and ``name``."""
SCANS = 48
"""Byte scans a side answers before it builds whole-graph maps instead (a scan costs about
1/150 of building them; a small change needs a few dozen), so a large drawing never costs much
more than the maps. Maps already built (a change too large to draw whole) are used at once."""


def encoded(number: int, text: str) -> bytes:
    """``text`` as protobuf encodes string field ``number``: tag, varint length, UTF-8 bytes."""
    data = text.encode("utf-8")
    out = bytearray([number << 3 | 2])
    n = len(data)
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out) + data


class Side:
    """One model's main graph: its nodes' bytes, graph inputs and outputs, and cached lookups.
    Building is one C-level serialization of the node list plus a scan of the initializer
    and input names; each lookup is one scan of the bytes (see the module docstring)."""

    def __init__(self, model: onnx.ModelProto) -> None:
        graph = model.graph
        self.model = model
        self.nodes = graph.node
        self.count = len(self.nodes)
        self.blobs: list[bytes] = list(map(onnx.NodeProto.SerializeToString, self.nodes))
        self._joined = b"".join(self.blobs)
        self._ends = list(accumulate(map(len, self.blobs)))
        self.initializers = {t.name for t in graph.initializer}
        self.inputs = {vi.name for vi in graph.input if vi.name not in self.initializers}
        self.outputs = [vi.name for vi in graph.output]
        self._producers: dict[str, int | None] = {}
        self._readers: dict[str, list[int]] = {}
        self.scans = 0

    def _hits(self, number: int, text: str) -> list[int]:
        """Nodes whose bytes hold ``text`` encoded as field ``number`` (a superset of the nodes
        that have it there: a nested graph's node or another field may hold the same bytes)."""
        pattern, joined, ends = encoded(number, text), self._joined, self._ends
        found: list[int] = []
        at = joined.find(pattern)
        while at >= 0:
            j = bisect_right(ends, at)
            if not found or found[-1] != j:
                found.append(j)
            at = joined.find(pattern, at + 1)
        return found

    def producer(self, tensor: str) -> int | None:
        """Position of the node whose output ``tensor`` is (None for graph inputs, initializers,
        the empty name and unknown names)."""
        if tensor in self._producers:
            return self._producers[tensor]
        found = None
        if self.scans >= SCANS or "producers" in self.__dict__:
            found = self.producers.get(tensor)
        elif tensor and tensor not in self.initializers:
            self.scans += 1
            found = next((j for j in self._hits(_OUTPUT, tensor) if tensor in self.nodes[j].output),
                         None)
        self._producers[tensor] = found
        return found

    def readers(self, tensor: str) -> list[int]:
        """Positions of the nodes reading ``tensor`` as an explicit input, once per slot."""
        if tensor not in self._readers:
            if self.scans >= SCANS or "reads" in self.__dict__:
                return self.all_readers.get(tensor, [])
            self.scans += 1
            out: list[int] = []
            for j in self._hits(_INPUT, tensor):
                out.extend(repeat(j, list(self.nodes[j].input).count(tensor)))
            self._readers[tensor] = out
        return self._readers[tensor]

    def consumers(self, tensors: set[str]) -> dict[str, list[int]]:
        """Readers of each of ``tensors`` that has any (see :meth:`readers`)."""
        return {t: found for t in sorted(tensors) if t and (found := self.readers(t))}

    def named(self, name: str) -> int | None:
        """Position of the first node called ``name`` (None when there is none)."""
        if not name:
            return None
        return next((j for j in self._hits(_NAME, name) if self.nodes[j].name == name), None)

    def key(self, j: int) -> str:
        """Node ``j``'s identity in a diff: its name, else its op type and first output."""
        node = self.nodes[j]
        if node.name:
            return node.name
        return f"<{node.op_type} {node.output[0] if len(node.output) else j}>"

    @cached_property
    def producers(self) -> dict[str, int]:
        """Tensor -> producing node for the whole graph: a pass over every node's outputs, for
        changes too large to draw whole (:meth:`producer` answers one tensor without it)."""
        outs = [node.output for node in self.nodes]
        found = dict(zip(chain.from_iterable(outs),
                         chain.from_iterable(map(repeat, count(), map(len, outs))), strict=True))
        found.pop("", None)
        return found

    @cached_property
    def all_readers(self) -> dict[str, list[int]]:
        """Tensor -> reading nodes (once per slot) for the whole graph (see :attr:`reads`)."""
        found: dict[str, list[int]] = {}
        for t, j in zip(*self.reads, strict=True):
            found.setdefault(t, []).append(j)
        return found

    @cached_property
    def reads(self) -> tuple[list[str], list[int]]:
        """Every explicit input, node after node, and the node reading each: a pass over the
        whole node list, for changes too large to draw whole."""
        ins = [node.input for node in self.nodes]
        return (list(chain.from_iterable(ins)),
                list(chain.from_iterable(map(repeat, count(), map(len, ins)))))
