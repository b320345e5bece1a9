"""Loading and saving models: safe external-data paths, lazy weights, streamed bytes, atomic saves.

Weights stored as external data are never read at load time; :func:`save` copies their bytes from
the source file to the destination in chunks. The checks here do not rely on the installed onnx
version's own (which has had several path bugs): every location is validated by us before any byte
is read.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import TensorProto

from .errors import InvalidModelError, SurgeryError, UnsafeModelError, UsageError
from .index import iter_graphs

PROTOBUF_LIMIT = 2**31 - 1
"""Largest serialized ModelProto protobuf allows."""
EXTERNAL_THRESHOLD = 1_800_000_000
"""Above this many bytes of model proto, save moves large tensors to external data by itself."""
EXTERNALIZE_MIN_BYTES = 1024
"""Tensors smaller than this stay inline when saving switches to external data."""
ALIGNMENT = 64
"""Byte alignment of every tensor in written external data files."""
_CHUNK = 1 << 22
_ALLOWED_KEYS = frozenset({"location", "offset", "length", "checksum", "basepath"})


@dataclass
class Model:
    """A model in memory plus where its external data lives.

    Attributes:
        proto: the ``ModelProto`` (source of truth; external tensors keep their references).
        base_dir: the folder external-data locations are relative to (None: no external data).
        source: the file the model was loaded from, if any.
    """

    proto: onnx.ModelProto
    base_dir: Path | None = None
    source: Path | None = None
    warnings: list[str] = field(default_factory=list)


def as_model(model: Model | onnx.ModelProto) -> Model:
    """Wrap a bare ``ModelProto`` (no external data folder) in a :class:`Model`."""
    return model if isinstance(model, Model) else Model(model)


# ----------------------------------------------------------------------------- element sizes
_ITEMSIZE = {
    TensorProto.FLOAT: 4, TensorProto.UINT8: 1, TensorProto.INT8: 1, TensorProto.UINT16: 2,
    TensorProto.INT16: 2, TensorProto.INT32: 4, TensorProto.INT64: 8, TensorProto.BOOL: 1,
    TensorProto.FLOAT16: 2, TensorProto.DOUBLE: 8, TensorProto.UINT32: 4, TensorProto.UINT64: 8,
    TensorProto.COMPLEX64: 8, TensorProto.COMPLEX128: 16, TensorProto.BFLOAT16: 2,
}
for _name, _size in (("FLOAT8E4M3FN", 1), ("FLOAT8E4M3FNUZ", 1), ("FLOAT8E5M2", 1),
                     ("FLOAT8E5M2FNUZ", 1), ("FLOAT8E8M0", 1)):
    if hasattr(TensorProto, _name):
        _ITEMSIZE[getattr(TensorProto, _name)] = _size
_NIBBLE_TYPES = {getattr(TensorProto, n) for n in ("UINT4", "INT4", "FLOAT4E2M1")
                 if hasattr(TensorProto, n)}


def expected_nbytes(tensor: TensorProto) -> int | None:
    """Bytes the raw data of ``tensor`` must have according to dims and dtype (None: unknown
    element size, e.g. strings). Refuses negative or absurd dims."""
    count = 1
    for d in tensor.dims:
        if d < 0:
            raise InvalidModelError(
                f"tensor '{tensor.name}' has a negative dimension {d}; the file is corrupt, "
                "re-export the model"
            )
        count *= d
        if count > 1 << 50:
            raise InvalidModelError(
                f"tensor '{tensor.name}' declares {list(tensor.dims)} elements, more than any "
                "file holds; the file is corrupt, re-export the model"
            )
    if tensor.data_type in _NIBBLE_TYPES:
        return (count + 1) // 2
    size = _ITEMSIZE.get(tensor.data_type)
    return None if size is None else count * size


def is_external(tensor: TensorProto) -> bool:
    return tensor.data_location == TensorProto.EXTERNAL


# ------------------------------------------------------------------------- external data refs
@dataclass(frozen=True)
class ExternalRef:
    """A validated external-data reference: absolute file path, offset and length in bytes."""

    path: Path
    offset: int
    length: int


def _external_fields(tensor: TensorProto) -> dict[str, str]:
    fields: dict[str, str] = {}
    for entry in tensor.external_data:
        if entry.key not in _ALLOWED_KEYS:
            raise UnsafeModelError(
                f"tensor '{tensor.name}' has unknown external_data key '{entry.key[:40]}'; "
                f"only {sorted(_ALLOWED_KEYS)} are allowed, re-export the model"
            )
        if entry.key in fields:
            raise UnsafeModelError(
                f"tensor '{tensor.name}' repeats external_data key '{entry.key}'; re-export the model"
            )
        fields[entry.key] = entry.value
    return fields


def _safe_relative(location: str, tensor_name: str) -> Path:
    bad = None
    if not location:
        bad = "is empty"
    elif "\x00" in location:
        bad = "contains a NUL byte"
    elif location.startswith(("/", "\\")) or (len(location) > 1 and location[1] == ":"):
        bad = "is absolute"
    elif location.startswith("*/_ORT_MEM_ADDR_/*") or "_ORT_MEM_ADDR_" in location:
        bad = "is an in-memory address, not a file"
    else:
        parts = location.replace("\\", "/").split("/")
        if any(p == ".." for p in parts):
            bad = "contains '..'"
        elif any(p == "" for p in parts):
            bad = "has an empty path component"
    if bad:
        raise UnsafeModelError(
            f"external data location {location[:80]!r} of tensor '{tensor_name}' {bad}; "
            "external data must be a plain file name inside the model's folder"
        )
    return Path(*location.replace("\\", "/").split("/"))


def resolve_external(tensor: TensorProto, base_dir: Path | None) -> ExternalRef:
    """Validate ``tensor``'s external-data reference and return where its bytes are.

    Nothing outside ``base_dir`` is ever named: absolute paths, ``..``, drive letters, UNC and
    in-memory forms, symlinks anywhere on the path, hard-linked files, and offsets or lengths that
    do not fit the file or the declared shape are refused with :class:`UnsafeModelError`.
    """
    fields = _external_fields(tensor)
    name = tensor.name
    if base_dir is None:
        raise UnsafeModelError(
            f"tensor '{name}' uses external data but the model was not loaded from a file; "
            "load it with onnxsurgeon.load(path)"
        )
    rel = _safe_relative(fields.get("location", ""), name)
    base = Path(os.path.abspath(base_dir))
    current = base
    for part in rel.parts:
        current = current / part
        try:
            st = os.lstat(current)
        except OSError:
            raise UnsafeModelError(
                f"external data file '{rel}' of tensor '{name}' does not exist next to the "
                "model; copy the data file beside the .onnx file"
            ) from None
        if stat.S_ISLNK(st.st_mode):
            raise UnsafeModelError(
                f"external data path '{rel}' of tensor '{name}' goes through a symbolic link; "
                "replace the link with the real file"
            )
    if not stat.S_ISREG(st.st_mode):
        raise UnsafeModelError(
            f"external data '{rel}' of tensor '{name}' is not a regular file; point it at the data file"
        )
    if st.st_nlink > 1:
        raise UnsafeModelError(
            f"external data file '{rel}' of tensor '{name}' has {st.st_nlink} hard links; "
            "copy it to a file of its own"
        )
    offset = _int_field(fields, "offset", name, default=0)
    if "length" not in fields:
        raise UnsafeModelError(
            f"tensor '{name}' has external data without a 'length'; re-export the model with "
            "explicit lengths"
        )
    length = _int_field(fields, "length", name, default=0)
    if offset + length > st.st_size:
        raise UnsafeModelError(
            f"tensor '{name}' reads bytes {offset}..{offset + length} of '{rel}', which has only "
            f"{st.st_size}; the data file is truncated or belongs to another model"
        )
    want = expected_nbytes(tensor)
    if want is not None and want != length:
        raise InvalidModelError(
            f"tensor '{name}' declares shape {list(tensor.dims)} ({want} bytes) but its external "
            f"data has {length}; the data file belongs to another model"
        )
    return ExternalRef(current, offset, length)


def _int_field(fields: dict[str, str], key: str, tensor: str, *, default: int) -> int:
    raw = fields.get(key)
    if raw is None:
        return default
    if not raw.isdigit():
        raise UnsafeModelError(
            f"external data {key} {raw[:30]!r} of tensor '{tensor}' is not a non-negative "
            "integer; re-export the model"
        )
    return int(raw)


def iter_tensors(model: onnx.ModelProto) -> Iterator[TensorProto]:
    """Initializers of every graph and tensors held in node attributes (Constant values ...)."""
    graphs = list(iter_graphs(model.graph))
    for fn in model.functions:
        for node in fn.node:
            yield from _attr_tensors(node)
    for g in graphs:
        yield from g.initializer
        for st in g.sparse_initializer:
            yield st.values
            yield st.indices
        for node in g.node:
            yield from _attr_tensors(node)


def _attr_tensors(node: onnx.NodeProto) -> Iterator[TensorProto]:
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.TENSOR:
            yield attr.t
        elif attr.type == onnx.AttributeProto.TENSORS:
            yield from attr.tensors


def check_inline_tensor(tensor: TensorProto) -> None:
    """Refuse inline data that disagrees with the declared shape (before anything allocates)."""
    if is_external(tensor):
        return
    if tensor.data_type == TensorProto.STRING:
        if tensor.raw_data:
            raise InvalidModelError(
                f"string tensor '{tensor.name}' stores raw_data, which strings cannot use; "
                "re-export the model"
            )
        return
    want = expected_nbytes(tensor)
    if tensor.HasField("raw_data"):
        if want is not None and len(tensor.raw_data) != want:
            raise InvalidModelError(
                f"tensor '{tensor.name}' declares shape {list(tensor.dims)} ({want} bytes) but "
                f"holds {len(tensor.raw_data)} bytes; the file is corrupt, re-export the model"
            )


def read_tensor(tensor: TensorProto, base_dir: Path | None) -> np.ndarray:
    """The values of ``tensor`` as numpy, reading external bytes only for this tensor."""
    from onnx import numpy_helper

    if not is_external(tensor):
        check_inline_tensor(tensor)
        return numpy_helper.to_array(tensor)
    ref = resolve_external(tensor, base_dir)
    with open(ref.path, "rb") as f:
        f.seek(ref.offset)
        data = f.read(ref.length)
    inline = TensorProto()
    inline.CopyFrom(tensor)
    del inline.external_data[:]
    inline.data_location = TensorProto.DEFAULT
    inline.raw_data = data
    return numpy_helper.to_array(inline)


# ------------------------------------------------------------------------------------ load
def load(path: str | os.PathLike[str]) -> Model:
    """Load an ONNX file without reading external weights; validate every external reference.

    Raises:
        NotFoundError / InvalidModelError / UnsafeModelError: one line naming the problem and fix.
    """
    from .errors import NotFoundError

    p = Path(path)
    try:
        st = os.stat(p)
    except OSError:
        raise NotFoundError(f"model file '{p}' does not exist; check the path") from None
    if not stat.S_ISREG(st.st_mode):
        raise InvalidModelError(f"'{p}' is not a file; give the path of a .onnx file")
    if st.st_size == 0:
        raise InvalidModelError(f"'{p}' is empty; give a complete .onnx file")
    try:
        with open(p, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise InvalidModelError(f"cannot read '{p}': {exc.strerror}; check permissions") from None
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError):
        raise InvalidModelError(
            f"'{p}' is not an ONNX model (protobuf parse failed: truncated or another format); "
            "give a complete .onnx file"
        ) from None
    del data
    if not proto.HasField("graph") or (len(proto.graph.node) == 0 and len(proto.graph.output) == 0):
        raise InvalidModelError(
            f"'{p}' holds no ONNX graph (not a model file, or an empty one); give a .onnx model"
        )
    if len(proto.opset_import) == 0:
        raise InvalidModelError(
            f"'{p}' declares no opset_import; it is not a valid ONNX model, re-export it"
        )
    model = Model(proto, base_dir=p.resolve().parent, source=p.resolve())
    validate_tensors(model)
    return model


def validate_tensors(model: Model) -> None:
    """Check every tensor's data against its declared shape and every external reference."""
    for tensor in iter_tensors(model.proto):
        if is_external(tensor):
            resolve_external(tensor, model.base_dir)
        else:
            check_inline_tensor(tensor)


# ------------------------------------------------------------------------------------ save
def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def save(model: Model | onnx.ModelProto, path: str | os.PathLike[str], *,
         external: bool | None = None) -> Path:
    """Write ``model`` to ``path`` atomically and deterministically.

    External tensors stay external: their bytes are streamed from the source data file into one
    fresh data file named ``<output file name>.data`` beside the output. With ``external=None``
    the save switches inline tensors to external data by itself when the proto would pass 2 GB.
    The input file and its data files are never written. Temporary files live in the destination
    folder and are renamed into place only when complete.

    Returns:
        The path written.
    """
    m = as_model(model)
    out = Path(path)
    folder = out.parent if str(out.parent) else Path(".")
    if not folder.is_dir():
        raise UsageError(f"output folder '{folder}' does not exist; create it first")
    if out.is_symlink():
        raise UsageError(f"output path '{out}' is a symbolic link; choose a plain file path")
    if out.exists() and out.is_dir():
        raise UsageError(f"output path '{out}' is a folder; give a file name ending in .onnx")
    data_name = out.name + ".data"
    data_path = folder / data_name
    if m.source is not None and (_same_file(out, m.source) or out.resolve() == m.source):
        raise UsageError(
            f"output '{out}' is the input model; write to another file (the input is never modified)"
        )
    proto = m.proto
    tensors = list(iter_tensors(proto))
    external_tensors = [t for t in tensors if is_external(t)]
    refs = {id(t): resolve_external(t, m.base_dir) for t in external_tensors}
    for ref in refs.values():
        if _same_file(ref.path, out) or _same_file(ref.path, data_path):
            raise UsageError(
                f"output '{out}' would overwrite the input's data file '{ref.path.name}'; "
                "write to another folder or file name"
            )
    if external is None:
        external = bool(external_tensors) or proto.ByteSize() > EXTERNAL_THRESHOLD
    move_inline: list[TensorProto] = []
    if external:
        move_inline = [
            t for t in tensors
            if not is_external(t) and t.HasField("raw_data")
            and len(t.raw_data) >= EXTERNALIZE_MIN_BYTES
        ]
    to_write = external_tensors + move_inline
    saved_state: list[tuple[TensorProto, bytes | None, list[tuple[str, str]], int]] = []
    tmp_model = tmp_data = None
    try:
        if to_write:
            if data_path.is_symlink():
                raise UsageError(
                    f"data file path '{data_path}' is a symbolic link; remove it or choose "
                    "another output name"
                )
            fd, tmp_data = tempfile.mkstemp(prefix=f".{data_name}.", suffix=".tmp", dir=folder)
            with os.fdopen(fd, "wb") as f:
                offset = 0
                for t in to_write:
                    pad = (-offset) % ALIGNMENT
                    if pad:
                        f.write(b"\0" * pad)
                        offset += pad
                    start = offset
                    if is_external(t):
                        ref = refs[id(t)]
                        offset += _stream(ref, f)
                    else:
                        f.write(t.raw_data)
                        offset += len(t.raw_data)
                    saved_state.append((
                        t,
                        t.raw_data if not is_external(t) else None,
                        [(e.key, e.value) for e in t.external_data],
                        t.data_location,
                    ))
                    del t.external_data[:]
                    t.ClearField("raw_data")
                    t.data_location = TensorProto.EXTERNAL
                    for key, value in (("location", data_name), ("offset", str(start)),
                                       ("length", str(offset - start))):
                        entry = t.external_data.add()
                        entry.key, entry.value = key, value
                f.flush()
                os.fsync(f.fileno())
        payload = proto.SerializeToString(deterministic=True)
        if len(payload) > PROTOBUF_LIMIT:
            raise UsageError(
                f"model is {len(payload)} bytes, over protobuf's 2 GB limit even with weights "
                "external; save with external=True"
            )
        fd, tmp_model = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=folder)
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        if tmp_data is not None:
            os.replace(tmp_data, data_path)
            tmp_data = None
        os.replace(tmp_model, out)
        tmp_model = None
    except SurgeryError:
        raise
    except OSError as exc:
        raise UsageError(f"cannot write '{out}': {exc.strerror}; check the folder and free space") from None
    finally:
        for tmp in (tmp_model, tmp_data):
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
        for t, raw, entries, location in saved_state:
            del t.external_data[:]
            for key, value in entries:
                entry = t.external_data.add()
                entry.key, entry.value = key, value
            t.data_location = location
            if raw is not None:
                t.raw_data = raw
    return out


def _stream(ref: ExternalRef, dst: object) -> int:
    """Copy ``ref``'s byte range into the open file ``dst`` in chunks; returns bytes copied."""
    remaining = ref.length
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(ref.path, flags)
    with os.fdopen(fd, "rb") as src:
        src.seek(ref.offset)
        while remaining:
            chunk = src.read(min(_CHUNK, remaining))
            if not chunk:
                raise InvalidModelError(
                    f"external data file '{ref.path.name}' ended early; it is truncated"
                )
            dst.write(chunk)  # type: ignore[attr-defined]
            remaining -= len(chunk)
    return ref.length
