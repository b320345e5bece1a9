"""Loading a weight-heavy model for verification without its weights in Python (issue 29).

A model file whose inline weights are heavy (over :data:`LIGHT_MIN_BYTES`) is read through a
memory map, and its bytes are re-framed on the protobuf wire without the weights: every heavy
``raw_data`` of a main-graph initializer becomes an external-data reference into the model file
itself (location: the file's name, the offset and length of those bytes in it). The proto held
in Python is then the model without its weights (a ResNet50: 140 KB instead of 100 MB), every
consumer reads a weight through the usual external-data path (:func:`onnxsurgeon.external.read_tensor`,
checked like any external reference), and onnxruntime reads the weights from the file once per
session (:class:`~onnxsurgeon.verify.run.Staged` hands it the light bytes and the file's folder),
so no copy of the weights is serialized, written or kept besides the sessions' own.

The light proto is validated as :func:`onnxsurgeon.io.load` validates a model (every tensor and
external reference, the graph's structure). Anything the re-framing does not handle (several
``graph`` fields, a file the external-data rules refuse to name, such as a hard-linked or
symlinked model file) falls back to :func:`~onnxsurgeon.io.load`.
"""

from __future__ import annotations

import math
import mmap
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import onnx

from ..errors import SurgeryError
from ..external import check_tensors, iter_tensors
from ..index import GraphIndex
from ..io import Model, load, parse_model
from ..protos import copy_fields
from ..validate import validate_producers

LIGHT_MIN_BYTES = 2**20
"""Inline weight bytes from which a model is loaded light (below, :func:`~onnxsurgeon.io.load`)."""
HEAVY_RAW_BYTES = 4096
"""Smallest ``raw_data`` moved out of the proto (``protos.WEIGHTLESS_MIN_BYTES``'s rule)."""

_GRAPH, _INITIALIZER, _RAW_DATA, _EXTERNAL_DATA, _DATA_LOCATION = 7, 5, 9, 13, 14
"""Field numbers: ModelProto.graph, GraphProto.initializer, TensorProto.raw_data,
TensorProto.external_data, TensorProto.data_location."""


def _varint(buf: mmap.mmap | bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _fields(buf: mmap.mmap | bytes, start: int, end: int
            ) -> Iterator[tuple[int, int, int, int, int]]:
    """(field number, wire type, key start, payload start, end) of each field in
    ``buf[start:end]``; payload start is that of a length-delimited field's bytes."""
    i = start
    while i < end:
        key_at = i
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            _, j = _varint(buf, i)
        elif wire == 1:
            j = i + 8
        elif wire == 5:
            j = i + 4
        elif wire == 2:
            n, i = _varint(buf, i)
            j = i + n
        else:
            raise ValueError(f"wire type {wire}")
        if j > end:
            raise ValueError("field past its message")
        yield number, wire, key_at, i, j
        i = j


def _key(number: int, wire: int) -> bytes:
    return _encode(number << 3 | wire)


def _encode(value: int) -> bytes:
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _delimited(number: int, payload: bytes) -> bytes:
    return _key(number, 2) + _encode(len(payload)) + payload


def _entry(key: str, value: str) -> bytes:
    return _delimited(_EXTERNAL_DATA, _delimited(1, key.encode()) + _delimited(2, value.encode()))


def light_bytes(buf: mmap.mmap | bytes, location: str) -> tuple[bytes, int] | None:
    """The serialized model ``buf`` with every heavy ``raw_data`` of a main-graph initializer
    replaced by an external reference to ``location`` at that data's offset, and the bytes moved
    out; None when the bytes are not framed as one graph of plain initializers. O(fields of the
    model and graph messages), no weight byte read."""
    at = _graph(buf)
    if at is None:
        return None
    out = bytearray()
    moved = 0
    for number, wire, key_at, start, end in _fields(buf, at[1], at[2]):
        if number != _INITIALIZER or wire != 2:
            out += buf[key_at:end]
            continue
        fields = list(_fields(buf, start, end))
        raws = [f for f in fields if f[0] == _RAW_DATA and f[1] == 2]
        if any(f[0] in (_EXTERNAL_DATA, _DATA_LOCATION) for f in fields) or len(raws) != 1 \
                or raws[0][4] - raws[0][3] < HEAVY_RAW_BYTES:
            out += buf[key_at:end]
            continue
        raw = raws[0]
        tensor = bytearray()
        for f in fields:
            if f is not raw:
                tensor += buf[f[2]:f[4]]
        tensor += _entry("location", location) + _entry("offset", str(raw[3]))
        tensor += _entry("length", str(raw[4] - raw[3]))
        tensor += _key(_DATA_LOCATION, 0) + _encode(1)
        out += _delimited(_INITIALIZER, bytes(tensor))
        moved += raw[4] - raw[3]
    return _regraphed(buf, at, bytes(out)), moved


def _graph(buf: mmap.mmap | bytes) -> tuple[int, int, int] | None:
    """(key start, payload start, end) of the serialized model's one ``graph`` field; None
    when it has not exactly one."""
    graphs = [f for f in _fields(buf, 0, len(buf)) if f[0] == _GRAPH and f[1] == 2]
    return graphs[0][2:] if len(graphs) == 1 else None


def _regraphed(buf: mmap.mmap | bytes, at: tuple[int, int, int], graph: bytes) -> bytes:
    """The serialized model ``buf`` with its graph field (at ``at``) holding ``graph``."""
    return bytes(buf[:at[0]]) + _delimited(_GRAPH, graph) + bytes(buf[at[2]:])


_NODE, _OUTPUT = 1, 12
"""Field numbers: GraphProto.node, GraphProto.output."""


def needed_nodes(index: GraphIndex, names: Sequence[str]) -> int | None:
    """How many leading main-graph nodes compute ``names`` (through the last node producing
    one: a graph's nodes are in topological order, so whatever they read comes before), when
    that leaves out at least a tenth of the graph's (a model of ten nodes or more); else None.
    O(names)."""
    total = len(index.graph.node)
    producer = index.producer
    last = max((producer[n] for n in names if n in producer), default=None)
    if total < 10 or last is None or (last + 1) * 10 > total * 9:
        return None
    return last + 1


Framing = tuple[tuple[int, int, int], list[tuple[int, int, int, int]]]
"""Where a serialized model's graph field is (:func:`_graph`) and its fields (number, wire
type, key start, end): what :func:`pruned_bytes` cuts, read once per model."""


def framing(buf: bytes) -> Framing | None:
    """The :data:`Framing` of the serialized model ``buf``; None when it has not exactly one
    graph. O(fields of the model and graph messages)."""
    at = _graph(buf)
    if at is None:
        return None
    return at, [(f[0], f[1], f[2], f[4]) for f in _fields(buf, at[1], at[2])]


def pruned_bytes(buf: bytes, nodes: int, framed: Framing) -> bytes:
    """The serialized model ``buf`` (framed as ``framed``) keeping only its first ``nodes``
    main-graph nodes and no graph output (a variant appends the outputs it reads). Inputs and
    initializers are kept (onnxruntime drops those no node reads). O(fields of the graph);
    nothing is parsed."""
    at, fields = framed
    node_at = -1
    kept: list[bytes] = []
    for number, wire, key_at, end in fields:
        node_at += number == _NODE and wire == 2  # the position of the node field it is
        if (number, wire) == (_OUTPUT, 2) or (number, wire) == (_NODE, 2) and node_at >= nodes:
            continue
        kept.append(buf[key_at:end])
    return _regraphed(buf, at, b"".join(kept))


def load_light(path: str | os.PathLike[str]) -> Model:
    """The model at ``path`` for verification: light (see the module docstring) when its inline
    weights reach :data:`LIGHT_MIN_BYTES`, else :func:`~onnxsurgeon.io.load`. Validated like
    ``load``; ``warnings`` as it gives them.

    Raises:
        NotFoundError / InvalidModelError / UnsafeModelError: as :func:`~onnxsurgeon.io.load`.
    """
    p = Path(path)
    try:
        if os.path.getsize(p) < LIGHT_MIN_BYTES:
            return load(p)
        with open(p, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            framed = light_bytes(buf, p.name)
    except (OSError, ValueError, IndexError):
        return load(p)  # says what is wrong with the file
    if framed is None or framed[1] < LIGHT_MIN_BYTES:
        return load(p)
    data = framed[0]
    try:
        proto = parse_model(data, str(p))
        source = Path(os.path.abspath(p))
        model = Model(proto, base_dir=source.parent, source=source)
        model._externals = check_tensors(iter_tensors(proto), model.base_dir)
        found = validate_producers(proto)
    except SurgeryError:
        return load(p)  # the full load names the problem as it always has
    model.warnings.extend(found.warnings)
    return model


_NAME = 8
"""Field number of TensorProto.name."""


def inline_weights(path: str | os.PathLike[str],
                   ) -> tuple[dict[str, tuple[int, int]], dict[int, tuple[int, int]]]:
    """(offset, length) of each heavy ``raw_data`` (:data:`HEAVY_RAW_BYTES`) of a main-graph
    initializer in the model file ``path``, by name (names held once) and by the initializer's
    position, read off the wire as :func:`light_bytes` reads it (no weight byte read); empty
    when the file is not framed as one graph. O(fields of the model and graph messages)."""
    found: dict[str, tuple[int, int]] = {}
    placed: dict[int, tuple[int, int]] = {}
    twice: set[str] = set()
    position = -1
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            graphs = [g for g in _fields(buf, 0, len(buf)) if g[0] == _GRAPH and g[1] == 2]
            if len(graphs) != 1:
                return {}, {}
            for number, wire, _, start, end in _fields(buf, graphs[0][3], graphs[0][4]):
                if number != _INITIALIZER or wire != 2:
                    continue
                position += 1
                fields = list(_fields(buf, start, end))
                raws = [t for t in fields if t[0] == _RAW_DATA and t[1] == 2]
                names = [t for t in fields if t[0] == _NAME and t[1] == 2]
                if len(raws) != 1 or len(names) != 1 or raws[0][4] - raws[0][3] < HEAVY_RAW_BYTES:
                    continue
                name = bytes(buf[names[0][3]:names[0][4]]).decode("utf-8", "replace")
                if name in found:
                    twice.add(name)
                found[name] = placed[position] = (raws[0][3], raws[0][4] - raws[0][3])
    except (OSError, ValueError, IndexError):
        return {}, {}
    return {name: at for name, at in found.items() if name not in twice}, placed


def referencing(proto: onnx.ModelProto, path: str | os.PathLike[str], *,
                vouched: bool = False) -> onnx.ModelProto | None:
    """A copy of ``proto`` whose heavy inline main-graph initializers that the model file
    ``path`` holds too (the same bytes under the same name, else at the same position: a
    renamed weight) are external references into that file
    (location: its name; read in place as :func:`load_light`'s are), the others copied; None
    when no initializer is referenced or the file is under :data:`LIGHT_MIN_BYTES` (or
    hard-linked: external data may not name it). The bytes are compared one tensor at a time (a verb may
    have changed a weight), unless ``vouched``: ``proto`` is known to be that file's (a
    ``Model._as_source`` copy). No copy of the referenced weights is made. O(model size)."""
    try:
        st = os.stat(path)
        # a light file is staged as before; external data may not name a hard-linked file
        if st.st_size < LIGHT_MIN_BYTES or st.st_nlink > 1:
            return None
    except OSError:
        return None
    where, placed = inline_weights(path)
    if not placed:
        return None
    light = onnx.ModelProto()
    copy_fields(proto, light, skip="graph")
    copy_fields(proto.graph, light.graph, skip="initializer")
    location = Path(path).name
    referenced = 0
    with open(path, "rb") as f:
        for i, t in enumerate(proto.graph.initializer):
            at = where.get(t.name)
            if at is None and not vouched:
                at = placed.get(i)
            if at is None or not t.HasField("raw_data") or len(t.external_data) \
                    or (not vouched and os.pread(f.fileno(), at[1], at[0]) != t.raw_data):
                light.graph.initializer.append(t)
                continue
            stub = light.graph.initializer.add()
            copy_fields(t, stub, skip="raw_data")  # all but the bytes
            for key, value in (("location", location), ("offset", str(at[0])),
                               ("length", str(at[1]))):
                entry = stub.external_data.add()
                entry.key, entry.value = key, value
            stub.data_location = onnx.TensorProto.EXTERNAL
            referenced += 1
    return light if referenced else None


def referenced_bytes(model: Model, weights: SharedWeights, *, limit: int, vouched: bool = False,
                     ) -> tuple[bytes, Path, dict[str, Any]] | None:
    """For ``model`` (no external data) from a model file of :data:`LIGHT_MIN_BYTES` or more: its
    :func:`referencing` copy serialized (at most ``limit`` bytes, else None: most weights
    changed), the folder its references are relative to, and the values ``weights`` shares for
    them; None when the model has no such file or the file holds none of its weights. The
    weights are neither serialized nor written, and read once by all the sessions.
    ``vouched``: the model is known to be that file's (its bytes are not compared)."""
    if model.source is None or model.data_dirs:
        return None
    real = Path(os.path.realpath(model.source))
    light = referencing(model.proto, real, vouched=vouched)
    if light is None:
        return None
    data = light.SerializeToString()
    if len(data) > limit:
        return None
    weights.vouch(real)
    return data, real.parent, weights.of(light, real.parent)


_SHARED_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16,
                 onnx.TensorProto.INT8, onnx.TensorProto.UINT8, onnx.TensorProto.INT16,
                 onnx.TensorProto.INT32, onnx.TensorProto.INT64}
"""Element types whose referenced weights sessions share (numpy holds them as they are)."""


class SharedWeights:
    """The referenced weights of a verification's sessions, one copy for all of them: each file
    a light proto references is mapped once, read-only, and each of its referenced initializers
    becomes one onnxruntime value over those bytes, which every session given it uses in place
    (``SessionOptions.add_initializer``) instead of reading its own copy. Only files a
    :func:`referencing` copy named (:meth:`vouch`) are read so. Alive until :meth:`close`
    (after the sessions using them)."""

    def __init__(self) -> None:
        self.files: set[Path] = set()
        self._maps: dict[Path, mmap.mmap] = {}
        self._values: dict[tuple[Path, int, int, int, tuple[int, ...]], Any] = {}

    def vouch(self, path: Path) -> None:
        """Let sessions share the weights of the model file ``path`` (a real path) that a
        :func:`referencing` copy references."""
        self.files.add(path)

    def of(self, light: onnx.ModelProto, folder: Path) -> dict[str, Any]:
        """Name -> shared value of each main-graph initializer of ``light`` that references a
        vouched file in ``folder`` (not a graph input; a type in :data:`_SHARED_TYPES`)."""
        import numpy as np
        import onnxruntime as ort

        inputs = {i.name for i in light.graph.input}
        shared: dict[str, Any] = {}
        for t in light.graph.initializer:
            if t.data_location != onnx.TensorProto.EXTERNAL or t.name in inputs \
                    or t.data_type not in _SHARED_TYPES:
                continue
            entries = {e.key: e.value for e in t.external_data}
            if set(entries) != {"location", "offset", "length"} or "/" in entries["location"]:
                continue
            path, offset, length = folder / entries["location"], int(entries["offset"]), \
                int(entries["length"])
            key = (path, offset, length, t.data_type, tuple(t.dims))
            if path not in self.files:
                continue
            if key not in self._values:
                if path not in self._maps:
                    try:
                        with open(path, "rb") as f:
                            self._maps[path] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                    except (OSError, ValueError):
                        self.files.discard(path)
                        continue
                dtype = onnx.helper.tensor_dtype_to_np_dtype(t.data_type)
                if length != math.prod(t.dims) * dtype.itemsize \
                        or offset + length > len(self._maps[path]):
                    continue
                array = np.frombuffer(self._maps[path], dtype=dtype,
                                      count=length // dtype.itemsize, offset=offset)
                self._values[key] = ort.OrtValue.ortvalue_from_numpy(array.reshape(key[4]))
            shared[t.name] = self._values[key]
        return shared

    def close(self) -> None:
        """Forget the values and maps (each map is unmapped once nothing reads it)."""
        self._values.clear()
        self._maps.clear()
