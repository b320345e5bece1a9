"""Load's two per-element passes over the main graph, read from the model's bytes in C.

:func:`onnxsurgeon.io.load` checks every initializer and :mod:`onnxsurgeon.validate` walks every
node. In Python each element costs protobuf wrapper objects and a string per field; here the
optional extension ``onnxsurgeon._scan`` (``_scan.c``, built by ``pip install`` when a C compiler
is present) reads the same fields from the serialized model: on a 90k-node chain the tensor
check takes 0.014 s instead of 0.11 s and the structural pass 0.10 s instead of 0.30 s
(benchmarks/PROFILE.md, round 7). Both functions answer exactly what the Python passes compute,
or None, and then the caller runs the Python pass: when the extension is not built, when it is
switched off (:mod:`onnxsurgeon.fast`: ``ONNXSURGEON_FAST=-scan``, or ``ONNXSURGEON_SCAN=0``),
or for bytes the scanner does not read exactly as protobuf does (the graph field given twice,
a group, a name that is not valid UTF-8). The bytes were parsed by protobuf first; the scanner
never decides anything protobuf's own objects would decide differently (``tests/test_scan.py``
holds both to the same answers).

Load also reads the main graph's value_info entries here (:func:`value_info`: each name and
its type's bytes, no ValueInfo wrapper per entry, ~7 ms for 90k entries): its check that the
names are text, then, handed on with the producer map, the declared types a verb looks up
and the entries a verb drops (``replace``: ~0.2 s of its 0.9 s on a 90k-node chain with
value_info went to reading those entries as Python objects, benchmarks/results_match.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import fast
from .nodefields import EDGE_FIELD_NUMBERS

_scan: Any = fast.scan_module()  # the extension, or None where it is not built

__all__ = ["SCAN_ENV", "ValueInfos", "available", "initializers", "nodes", "value_info"]

SCAN_ENV = "ONNXSURGEON_SCAN"
"""Set to ``0`` to run the Python passes even where the extension is built (an alias of
``ONNXSURGEON_FAST=-scan``, see :mod:`onnxsurgeon.fast`)."""


def available() -> bool:
    """The extension is built and switched on (``fast.enabled("scan")``)."""
    return fast.enabled("scan")


def initializers(data: bytes) -> tuple[list[str], list[tuple[int, tuple[int, ...]]],
                                        list[int]] | None:
    """(names, (data type, dims) of each, indexes the exact check must see) of the main graph's
    initializers, in order, read from the serialized model ``data``; None when not read here.

    Not listed in the third item: a tensor whose only fields are dims, data_type, a name and
    raw_data, like an earlier listed one in data type, dims and raw_data length. The exact
    check (:func:`onnxsurgeon.external.check_inline_tensor`) reads nothing else, so it gives
    both the same verdict."""
    ext = fast.scan_extension()
    if ext is None:
        return None
    return ext.scan_initializers(data)  # type: ignore[no-any-return, unused-ignore]


def nodes(data: bytes, first: dict[str, int]) -> tuple[Any, ...] | None:
    """The main graph's node pass (:func:`onnxsurgeon.nodefields.node_pass`, as
    :func:`onnxsurgeon.validate._check_scope` runs it), on the serialized model ``data``:
    (preds, counts, names, ops, domains, multi, holders, suspects), with ``first`` updated as
    that pass updates it; None when not read here (``first`` may then hold keys added on the
    way: the caller removes them). The C code reads the fields
    :data:`~onnxsurgeon.nodefields.EDGE_FIELD_NUMBERS` names, handed to it here."""
    ext = fast.scan_extension()
    if ext is None:
        return None
    return ext.scan_nodes(  # type: ignore[no-any-return, unused-ignore]
        data, first, EDGE_FIELD_NUMBERS)


@dataclass(frozen=True, eq=False)
class ValueInfos:
    """The main graph's value_info entries as :func:`value_info` read them from the bytes
    ``data`` of a model: each entry's name and the bytes of its ``type`` field as written
    (``onnx.TypeProto.FromString`` of them is the entry's type; b"" when it has none), in
    order. True of a proto only while its value_info field is as parsed from those bytes."""

    names: list[str]
    types: list[bytes]
    data: bytes | None
    """The bytes read (None: not kept, e.g. for a weight-heavy model)."""

    def entries(self, keep: bytes) -> bytes | None:
        """The entries whose flag in ``keep`` (one byte per entry, in order) is nonzero, as
        ``GraphProto.value_info`` fields written as in ``data``: ``GraphProto.MergeFromString``
        of them appends exactly those entries. None when not read here. O(graph bytes) in C."""
        read = getattr(fast.scan_extension(), "value_info_entries", None)
        return read(self.data, keep) if read is not None and self.data is not None else None


def value_info(data: bytes) -> ValueInfos | None:
    """The main graph's value_info entries' names and type bytes, read from the serialized
    model ``data`` (:class:`ValueInfos`); None when not read here (an entry giving its type
    twice, which protobuf merges; a name that is not valid UTF-8; the extension off)."""
    read = getattr(fast.scan_extension(), "scan_value_info", None)  # None: an older build
    found = read(data) if read is not None else None
    return ValueInfos(found[0], found[1], data) if found is not None else None
