"""Refusing to overwrite what is not an ONNX model: a check of the bytes, not the extension.

A serialized ``ModelProto`` is a sequence of top-level protobuf fields, each with a known number
and wire type (``ir_version`` = 1 varint, ``graph`` = 7 bytes, ``opset_import`` = 8 bytes, ...).
:func:`looks_like_onnx` walks those tags, seeking past every payload, so even a multi-GB model
costs a handful of small reads; a Python source, a JSON file or a picture fails on the first
bytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

from .errors import UsageError

_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5
# ModelProto fields (onnx.proto): number -> wire type
_MODEL_FIELDS = {1: _VARINT, 2: _LEN, 3: _LEN, 4: _LEN, 5: _VARINT, 6: _LEN, 7: _LEN, 8: _LEN,
                 14: _LEN, 20: _LEN, 25: _LEN, 26: _LEN}
_MAX_FIELDS = 100_000


def _varint(f: BinaryIO) -> int | None:
    shift = value = 0
    while shift < 70:
        b = f.read(1)
        if not b:
            return None
        value |= (b[0] & 0x7F) << shift
        if not b[0] & 0x80:
            return value
        shift += 7
    return None


def looks_like_onnx(path: str | Path) -> bool:
    """True when the file parses as top-level ``ModelProto`` fields and holds a graph or an IR
    version (an empty file counts: there is nothing to lose). O(top-level fields)."""
    p = Path(path)
    size = p.stat().st_size
    if size == 0:
        return True
    seen: set[int] = set()
    with p.open("rb") as f:
        for _ in range(_MAX_FIELDS):
            if f.tell() == size:
                return bool(seen & {1, 7})
            tag = _varint(f)
            if tag is None:
                return False
            number, wire = tag >> 3, tag & 7
            if _MODEL_FIELDS.get(number) != wire:
                return False
            seen.add(number)
            if wire == _VARINT:
                if _varint(f) is None:
                    return False
            else:
                length = _varint(f)
                if length is None or f.tell() + length > size:
                    return False
                f.seek(length, 1)
    return False


def check_overwrite(output: str | Path, *, force: bool) -> None:
    """Refuse to write ``output`` over an existing file that is not an ONNX model (or over a
    folder) unless ``force``.

    Raises:
        UsageError: the path is a folder, or a file that is not an ONNX model and ``force`` is off.
    """
    p = Path(output)
    if p.is_dir():
        raise UsageError(f"output '{output}' is a folder; give a file path such as "
                         f"'{Path(output) / 'model.onnx'}'")
    if force or not p.exists():
        return
    if not p.is_file() or not looks_like_onnx(p):
        raise UsageError(f"output '{output}' exists and is not an ONNX model; choose another -o "
                         "path, or add --force to overwrite it")
