"""Protobuf helpers every layer shares: the weight-free copy, scope-aware renaming, the default
opset. One home each, so verbs, verify and the converters cannot drift apart.

(Type facts live in :mod:`onnxsurgeon.types`, node labels and scope walks in
:mod:`onnxsurgeon.index`, one-line error text in :mod:`onnxsurgeon.errors`; see ARCHITECTURE.md.)
"""

from __future__ import annotations

import math
from collections import ChainMap
from collections.abc import Callable, Iterable, Mapping
from itertools import repeat
from operator import attrgetter
from typing import Any

import onnx
from onnx import TensorProto

from .index import check_depth, subgraphs

DEFAULT_DOMAINS = ("", "ai.onnx")
"""The two spellings of the default ONNX operator domain."""

WEIGHTLESS_MIN_BYTES = 4096
"""Inline tensors of at least this many bytes are left out of weight-free copies."""

_STUB_LOCATION = "__onnxsurgeon_stub__"


# ------------------------------------------------------------------------------ default opset
def default_opset(model: onnx.ModelProto | onnx.FunctionProto) -> int | None:
    """The default-domain (``ai.onnx``) opset version ``model`` imports, or None when it imports
    none. Callers that need a number decide their own fallback explicitly."""
    for op in model.opset_import:
        if op.domain in DEFAULT_DOMAINS:
            return int(op.version)
    return None


def set_default_opset(model: onnx.ModelProto | onnx.FunctionProto, version: int) -> None:
    """Set the default-domain opset of ``model``. Mutates model. A model that imports none
    (ai.onnx.ml only) gets the import; a function without one keeps none (it calls no
    default-domain op)."""
    for op in model.opset_import:
        if op.domain in DEFAULT_DOMAINS:
            op.version = version
            return
    if isinstance(model, onnx.ModelProto):
        model.opset_import.append(onnx.helper.make_opsetid("", version))


# --------------------------------------------------------------------------- weight-free copy
def heavy(t: TensorProto) -> bool:
    """True when ``t``'s bytes are worth not copying: external data, or at least
    :data:`WEIGHTLESS_MIN_BYTES` bytes inline (the one rule of every weight-free copy). The
    size of ``raw_data`` is read off the dims and dtype: ``ByteSize`` serializes the bytes to
    measure them (40 ms for 16 MB)."""
    if t.data_location == TensorProto.EXTERNAL:
        return True
    if t.HasField("raw_data") and t.data_type not in (TensorProto.UNDEFINED, TensorProto.STRING):
        try:
            itemsize = onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
        except (KeyError, TypeError, ValueError):
            itemsize = 0
        if itemsize:
            return math.prod(t.dims) * itemsize >= WEIGHTLESS_MIN_BYTES
    return t.ByteSize() >= WEIGHTLESS_MIN_BYTES


def _stub(t: TensorProto) -> None:
    """Make ``t`` an external-data stub: same name, dtype and dims, no bytes (enough for shape
    inference, which never reads data)."""
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    del t.external_data[:]
    entry = t.external_data.add()
    entry.key, entry.value = "location", _STUB_LOCATION


def is_stub(t: TensorProto) -> bool:
    """True when ``t`` is a bytes-free stub a weight-free copy made (see :func:`weightless_copy`)."""
    return t.data_location == TensorProto.EXTERNAL and any(
        e.key == "location" and e.value == _STUB_LOCATION for e in t.external_data)


def light_tensor(t: TensorProto) -> TensorProto:
    """``t`` itself when small, else a bytes-free stub of it (a new message either way)."""
    light = TensorProto()
    if heavy(t) and t.HasField("raw_data"):
        light.name = t.name
        light.data_type = t.data_type
        light.dims.extend(t.dims)
        _stub(light)
    else:
        light.CopyFrom(t)
    return light


def copy_fields(src: Any, dst: Any, skip: str = "") -> None:
    """Copy every set field of message ``src`` into the empty ``dst`` but ``skip``."""
    for fd, value in src.ListFields():
        if fd.name == skip:
            continue
        if fd.is_repeated:
            getattr(dst, fd.name).extend(value)
        elif fd.message_type is not None:
            getattr(dst, fd.name).CopyFrom(value)
        else:
            setattr(dst, fd.name, value)


def weightless_copy(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` whose heavy inline initializers are bytes-free stubs; the bytes are
    never read, copied or touched (the model is copied field by field, each initializer by
    the rule of :func:`light_tensor`: detaching and restoring the bytes instead grew the proto's memory by
    the weights on every copy). O(model size without weights)."""
    light = onnx.ModelProto()
    copy_fields(model, light, skip="graph")
    if model.HasField("graph"):
        copy_fields(model.graph, light.graph, skip="initializer")
        for t in model.graph.initializer:
            if t.HasField("raw_data") and heavy(t):
                stub = light.graph.initializer.add()
                copy_fields(t, stub, skip="raw_data")   # all but the bytes
                _stub(stub)
            else:
                light.graph.initializer.append(t)
    return light


# ------------------------------------------------------------------------ scope-aware renaming
def rename_scoped(
    graphs: Iterable[onnx.GraphProto],
    outer: Mapping[str, str],
    *,
    define: Callable[[str], str],
    node_name: Callable[[onnx.NodeProto], str] | None = None,
    depth: int = 1,
) -> None:
    """Rename tensors in ``graphs`` (and every graph nested in them), respecting scopes.

    Each name a graph defines (its inputs, initializers, node outputs) becomes ``define(name)``,
    visible in that graph and the graphs nested in it; a name read but not defined there is
    looked up in the enclosing scopes, then in ``outer`` (names of the scope holding
    ``graphs``), and kept when found nowhere. ``define=str`` keeps definitions, so a local
    definition shadows ``outer`` (reads of an outer name are then renamed only where they really
    mean it). ``node_name`` gives every node its new name. ``depth`` is the nesting depth of
    ``graphs`` (0 for a main graph), for the nesting limit. Mutates the graphs. Iterative,
    O(size of the graphs); calls ``define`` and ``node_name`` in graph order (inputs,
    initializers, then node by node: name, outputs), so allocators stay deterministic.
    """
    stack: list[tuple[onnx.GraphProto, Mapping[str, str], int]] = [
        (g, outer, depth) for g in reversed(list(graphs))
    ]
    while stack:
        g, parent, depth = stack.pop()
        check_depth(g, depth)
        local: dict[str, str] = {}
        for vi in g.input:
            local[vi.name] = define(vi.name)
        for t in g.initializer:
            local[t.name] = define(t.name)
        for st in g.sparse_initializer:
            local[st.values.name] = define(st.values.name)
        for node in g.node:
            if node_name is not None:
                node.name = node_name(node)
            outs = node.output
            for k, out in enumerate(outs):
                if out:
                    local[out] = fresh = define(out)
                    if fresh != out:  # a write costs more than the comparison
                        outs[k] = fresh
        scope: Mapping[str, str] = ChainMap(local, parent)  # type: ignore[arg-type]
        for vi in g.input:
            vi.name = local[vi.name]
        for t in g.initializer:
            if local[t.name] != t.name:
                t.name = local[t.name]
        for st in g.sparse_initializer:
            st.values.name = local[st.values.name]
        nested: list[tuple[onnx.GraphProto, Mapping[str, str], int]] = []
        nodes = g.node
        if not parent:  # a top scope: a read means a local name or none, and few names change
            changed = {old: new for old, new in local.items() if old != new and old}
            for i, (ins, attrs) in enumerate(map(_INPUTS_ATTRS, nodes)):
                if changed and not changed.keys().isdisjoint(ins):  # C-level test per node
                    for k, name in enumerate(ins):
                        if name in changed:
                            ins[k] = changed[name]
                if attrs:
                    nested.extend((sub, scope, depth + 1) for sub in subgraphs(nodes[i]))
            for vi in g.output:
                vi.name = scope.get(vi.name, vi.name)
            for vi in g.value_info:
                if vi.name in changed:
                    vi.name = changed[vi.name]
            stack.extend(reversed(nested))
            continue
        for node in nodes:
            for k, name in enumerate(node.input):
                if name and name in scope:
                    node.input[k] = scope[name]
            nested.extend((sub, scope, depth + 1) for sub in subgraphs(node))
        for vi in g.output:
            vi.name = scope.get(vi.name, vi.name)
        for vi in g.value_info:
            vi.name = scope.get(vi.name, vi.name)
        stack.extend(reversed(nested))


_INPUTS_ATTRS = attrgetter("input", "attribute")


def rename_reads(node: onnx.NodeProto, renames: Mapping[str, str]) -> None:
    """``node`` and the bodies it holds read ``renames[name]`` wherever they read the outer
    ``name`` (a body that defines ``name`` itself shadows it). Its outputs keep their names.
    Mutates node."""
    for k, name in enumerate(node.input):
        if name in renames:
            node.input[k] = renames[name]
    rename_scoped(subgraphs(node), renames, define=str)


def rename_tensors(model: onnx.ModelProto, renames: Mapping[str, str]) -> None:
    """Rename main-graph tensors everywhere in ``model``: their definitions, every read (nested
    bodies included, unless a body shadows the name), value_info and graph outputs. Local
    functions are untouched (their names are their own). Mutates model. Callers guarantee the
    new names are unused (they come from a :class:`~onnxsurgeon.names.NameAllocator`)."""
    if renames:
        rename_scoped([model.graph], {}, define=lambda n: renames.get(n, n), depth=0)


# ------------------------------------------------------------------ nodes as bytes
_TAGS: list[bytes] = []
"""``_TAGS[k]``: a ``GraphProto.node`` entry's tag and a length of ``k`` (varint), built once
up to :data:`_TAGGED` bytes."""
_TAGGED = 1 << 14


def varint(k: int) -> bytes:
    """``k`` (>= 0) as a protobuf varint."""
    out = bytearray()
    while k >= 0x80:
        out.append((k & 0x7F) | 0x80)
        k >>= 7
    out.append(k)
    return bytes(out)


def node_entry_head(length: int) -> bytes:
    """The bytes before a node of ``length`` bytes in a serialized ``GraphProto``: field 1's
    tag and the length as a varint."""
    if not _TAGS:  # a length below 2^14 is one or two varint bytes: built by halves
        _TAGS.extend(map(bytes, zip(repeat(0x0A), range(0x80))))  # (~0.001 s, not 0.01)
        heads = [bytes((0x0A, low)) for low in range(0x80, 0x100)]
        highs = [bytes((high,)) for high in range(1, _TAGGED >> 7)]
        _TAGS.extend([head + high for high in highs for head in heads])
    return _TAGS[length] if length < _TAGGED else b"\x0a" + varint(length)


def node_entries(blobs: list[bytes]) -> list[bytes]:
    """Each serialized node as a ``GraphProto.node`` entry (tag, length, bytes): what
    ``GraphProto.MergeFromString`` appends as nodes. C-level maps."""
    if not _TAGS:
        node_entry_head(0)
    if blobs and max(map(len, blobs)) >= _TAGGED:
        return [node_entry_head(len(b)) + b for b in blobs]
    return list(map(bytes.__add__, map(_TAGS.__getitem__, map(len, blobs)), blobs))
