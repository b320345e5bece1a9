"""Input samples for verification: seeded random arrays that respect each input's dtype and shape,
or user data from an ``.npz`` file or a folder of them.

Random floats are uniform in ``[-1, 1)`` by default (see :data:`DEFAULT_FLOAT_RANGE`), or in a
range per input. For models holding an If, samples come in mirror pairs: sample ``2k + 1`` is the
mirror of sample ``2k`` within its range (the negation for ``[-1, 1)``; bools complemented), so a
branch condition that depends on the sign of an input (``ReduceSum(x) > 0``) takes both branches
with two samples. Integer inputs that index a table (``Gather`` / embedding) are drawn inside the
table, whose size is read from the graph.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import overload

import numpy as np
import onnx
from onnx import TensorProto, helper

from ..errors import NotFoundError, UsageError
from ..index import GraphIndex, Use, iter_graphs
from ..types import TypeOracle, dtype_name

DEFAULT_INT_HIGH = 8
"""Integer inputs that index no table are drawn from ``[0, DEFAULT_INT_HIGH)``."""

_PASS_THROUGH = {"Cast": 0, "Reshape": 0, "Unsqueeze": 0, "Squeeze": 0, "Flatten": 0,
                 "Identity": 0, "Expand": 0, "Transpose": 0, "Tile": 0}
"""Ops that keep an index's values (op -> input slot that carries them)."""

_INT_TYPES = {TensorProto.INT8, TensorProto.INT16, TensorProto.INT32, TensorProto.INT64,
              TensorProto.UINT8, TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64}
_FLOAT_TYPES = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE}

Sample = dict[str, np.ndarray]
InputsLike = str | os.PathLike | Mapping[str, np.ndarray] | Sequence[Mapping[str, np.ndarray]]
"""User inputs: an .npz path, a folder of .npz files, one feed dict, or a list of feed dicts."""


@dataclass(frozen=True)
class InputSpec:
    """One graph input to feed: name, ONNX element type, shape (ints, symbols or None)."""

    name: str
    elem_type: int
    shape: tuple[int | str | None, ...] | None
    """Dims: ints, symbolic names or None (unknown); None when even the rank is unknown."""
    high: int | None = None
    """Exclusive upper bound of an integer input that indexes a table (None: not an index)."""
    has_default: bool = False
    """An input with a default value (also an initializer, IR >= 4): fed when a sample holds
    it (user data, or a ``ranges`` entry naming it), else onnxruntime uses the initializer."""


def has_if(model: onnx.ModelProto) -> bool:
    """True when any graph of ``model`` holds an If node."""
    return any(n.op_type == "If" for g in iter_graphs(model.graph) for n in g.node)


_READS_WITHOUT_MAP = 16
"""Tensors whose reads :func:`index_bounds` finds by :meth:`~onnxsurgeon.index.GraphIndex.uses_of`
(O(nodes) each) before it builds the map of every tensor's reads."""


def index_bounds(index: GraphIndex, oracle: TypeOracle) -> dict[str, int]:
    """Graph input -> exclusive bound for integer inputs that reach a ``Gather``/``GatherElements``
    index slot through value-preserving ops (Cast, Reshape, Unsqueeze, ...). The bound is the
    table's size along the gather axis (the smallest one when several tables are read).
    O(nodes + edges) of the forward walk."""
    bounds: dict[str, int] = {}
    asked = 0

    def uses(t: str) -> Sequence[Use]:
        # a few tensors' reads without the map of every tensor's (a 90k-node chain's float
        # input is read by one MatMul: 0.3 s of building saved); more walk on the map
        nonlocal asked
        asked += 1
        return index.uses_of(t) if asked <= _READS_WITHOUT_MAP else index.consumers.get(t, ())

    for name in index.input_names():
        seen: set[str] = set()
        stack = [name]
        best: int | None = None
        while stack:
            t = stack.pop()
            if t in seen:
                continue
            seen.add(t)
            for use in uses(t):
                if use.slot < 0:
                    continue
                node = index.graph.node[use.node]
                if node.op_type in ("Gather", "GatherElements") and use.slot == 1:
                    axis = next((helper.get_attribute_value(a) for a in node.attribute
                                 if a.name == "axis"), 0)
                    shape = oracle.shape(node.input[0])
                    if shape:
                        dim = shape[axis] if -len(shape) <= axis < len(shape) else None
                        if isinstance(dim, int) and dim > 0:
                            best = dim if best is None else min(best, dim)
                elif _PASS_THROUGH.get(node.op_type) == use.slot:
                    stack.extend(o for o in node.output if o)
        if best is not None:
            bounds[name] = best
    return bounds


def input_specs(index: GraphIndex, oracle: TypeOracle | None = None) -> list[InputSpec]:
    """The inputs a run may feed: every graph input, those with a default value marked
    ``has_default`` (before IR 4, initializers listed as inputs are weights: left out)."""
    oracle = oracle or TypeOracle(index)
    bounds = index_bounds(index, oracle)
    specs = []
    for name in index.input_names():
        shape = oracle.shape(name)
        specs.append(InputSpec(name, oracle.elem_type(name),
                               None if shape is None else tuple(shape), bounds.get(name),
                               index.has_default(name)))
    return specs


def _drawn(spec: InputSpec, ranges: Mapping[str, Range] | None) -> bool:
    """Random values are drawn for ``spec``: not an input with a default, unless a range names it."""
    return not spec.has_default or spec.name in (ranges or {})


def _numpy_dtype(elem_type: int, name: str) -> np.dtype:
    try:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, TypeError, ValueError):
        dtype = None
    if dtype is None or elem_type not in _FLOAT_TYPES | _INT_TYPES | {TensorProto.BOOL}:
        raise UsageError(
            f"input '{name}' has type {dtype_name(elem_type)}, for which no random values are "
            "drawn; give the inputs in an .npz file (--inputs)"
        )
    return dtype


def _concrete_shape(spec: InputSpec, dims: Mapping[str, int]) -> tuple[int, ...]:
    if spec.shape is None:
        raise UsageError(
            f"input '{spec.name}' has no known shape, so no random values can be drawn; give "
            "the inputs in an .npz file (--inputs)"
        )
    out = []
    for d in spec.shape:
        if isinstance(d, int):
            out.append(d)
        elif isinstance(d, str):
            out.append(int(dims.get(d, 1)))
        else:
            out.append(1)
    return tuple(out)


DEFAULT_FLOAT_RANGE = (-1.0, 1.0)
"""Floating inputs are drawn uniform in ``[-1, 1)`` unless a range is given. Polygraphy draws
``[0, 1)``; this keeps its scale (normalized images, unit-range audio and features stay out of
the saturating ends of softmax/sigmoid heads, where standard normal values at +-4.5 drove a
ResNet50 softmax to exactly 1.0) and covers both signs, so sign-dependent paths (Relu, Abs, an
If on a sign) run both ways."""

Range = tuple[float, float]
"""A half-open ``[lo, hi)`` range for random values."""
ALL_FLOATS = "*"
"""The key of a ranges mapping that applies to every floating input without its own range."""


def _shape_text(shape: tuple[int, ...]) -> str:
    return "x".join(str(d) for d in shape) if shape else "scalar"


def _spec_range(spec: InputSpec, ranges: Mapping[str, Range], default: Range | None) -> Range:
    if spec.name in ranges:
        return ranges[spec.name]
    if spec.elem_type in _FLOAT_TYPES:
        return default if default is not None else DEFAULT_FLOAT_RANGE
    return (0, spec.high or DEFAULT_INT_HIGH)


def _int_bounds(spec: InputSpec, dtype: np.dtype, lo: float, hi: float) -> tuple[int, int]:
    info = np.iinfo(dtype)
    low, high = max(int(math.ceil(lo)), int(info.min)), min(int(math.ceil(hi)), int(info.max) + 1)
    if high <= low:
        raise UsageError(
            f"range [{lo:g},{hi:g}) of input '{spec.name}' holds no {dtype.name} value; give "
            "--range NAME=LO,HI with LO < HI"
        )
    return low, high


def describe_inputs(specs: Sequence[InputSpec], *, dims: Mapping[str, int] | None = None,
                    ranges: Mapping[str, Range] | None = None, default: Range | None = None,
                    mirror: bool = False) -> dict[str, str]:
    """Per input, the distribution :func:`random_samples` draws it from, e.g.
    ``"uniform[-1,1) float32 1x3x8x8"``."""
    out: dict[str, str] = {}
    for spec in specs:
        if not _drawn(spec, ranges):
            out[spec.name] = "its default value (the initializer; --range NAME=LO,HI draws it)"
            continue
        dtype = _numpy_dtype(spec.elem_type, spec.name)
        shape = _shape_text(_concrete_shape(spec, dict(dims or {})))
        if spec.elem_type == TensorProto.BOOL:
            text = f"fair coin {dtype.name} {shape}"
        else:
            lo, hi = _spec_range(spec, dict(ranges or {}), default)
            if spec.elem_type in _FLOAT_TYPES:
                text = f"uniform[{lo:g},{hi:g}) {dtype.name} {shape}"
            else:
                low, high = _int_bounds(spec, dtype, lo, hi)
                text = f"integers[{low},{high}) {dtype.name} {shape}"
                if spec.name not in (ranges or {}) and spec.high:
                    text += " (indexes a table of that size)"
        if mirror:
            text += "; odd samples mirror the one before"
        out[spec.name] = text
    return out


def random_samples(specs: Sequence[InputSpec], *, seed: int = 0, samples: int = 1,
                   dims: Mapping[str, int] | None = None, ranges: Mapping[str, Range] | None = None,
                   default: Range | None = None, mirror: bool = False) -> list[Sample]:
    """``samples`` feed dicts of seeded random values. Deterministic in (specs, seed, dims, ranges).

    Floats are uniform in ``[-1, 1)`` (:data:`DEFAULT_FLOAT_RANGE`), bools fair coins, integers
    uniform in ``[0, high)`` (the table size for index inputs, else :data:`DEFAULT_INT_HIGH`).
    ``ranges`` gives ``[lo, hi)`` per input name (integers take the whole numbers in it),
    ``default`` for every floating input without one. Samples are independent; with ``mirror`` (models
    holding an If, so a sign-dependent branch takes both ways) each odd sample mirrors the one
    before within its range (``lo + hi - x``: the negation for ``[-1, 1)``; bools complemented).
    """
    dims = dict(dims or {})
    ranges = dict(ranges or {})
    for key, value in dims.items():
        if not isinstance(value, int) or value < 0:
            raise UsageError(f"dimension {key}={value!r} must be a non-negative integer")
    out: list[Sample] = []
    for k in range(max(1, samples)):
        pair, odd = divmod(k, 2)
        feed: Sample = {}
        for j, spec in enumerate(specs):
            if not _drawn(spec, ranges):
                continue
            dtype = _numpy_dtype(spec.elem_type, spec.name)
            shape = _concrete_shape(spec, dims)
            flip = bool(odd and mirror)
            rng = np.random.default_rng([seed, pair, j] if mirror else [seed, k, j])
            if spec.elem_type == TensorProto.BOOL:
                coin = rng.random(shape) < 0.5
                feed[spec.name] = ~coin if flip else coin
                continue
            lo, hi = _spec_range(spec, ranges, default)
            if spec.elem_type in _FLOAT_TYPES:
                u = lo + (hi - lo) * rng.random(shape)
                feed[spec.name] = (lo + hi - u if flip else u).astype(dtype)
            else:
                low, high = _int_bounds(spec, dtype, lo, hi)
                v = rng.integers(low, high, size=shape)
                feed[spec.name] = (low + high - 1 - v if flip else v).astype(dtype)
        # a rank-0 input draws a numpy scalar (np.float32, np.bool_), which onnxruntime refuses
        out.append({name: np.asarray(value) for name, value in feed.items()})
    return out


def _check_names(names: Sequence[str], specs: Sequence[InputSpec], where: str) -> None:
    wanted = {s.name for s in specs}
    unknown = sorted(set(names) - wanted)
    if unknown:
        raise UsageError(
            f"{where} has array(s) {unknown[:8]} that are not inputs of the model (inputs: "
            f"{sorted(wanted)[:8]}); rename or remove them"
        )
    missing = sorted(wanted - set(names) - {s.name for s in specs if s.has_default})
    if missing:
        raise UsageError(f"{where} lacks input(s) {missing[:8]}; add them to the file")


def _check_sample(sample: Mapping[str, np.ndarray], specs: Sequence[InputSpec], where: str,
                  converted: dict[str, str] | None = None) -> Sample:
    """``sample`` checked against ``specs``; arrays of another dtype of the same kind are
    converted and recorded in ``converted`` (input name -> "float64 -> float32")."""
    by_name = {s.name: s for s in specs}
    _check_names(list(sample), specs, where)
    feed: Sample = {}
    for name, spec in by_name.items():
        if name not in sample:  # checked above: an input with a default value
            continue
        arr = np.asarray(sample[name])
        want = _numpy_dtype(spec.elem_type, name) if spec.elem_type else arr.dtype
        if arr.dtype != want:
            if np.can_cast(arr.dtype, want, casting="same_kind"):
                if converted is not None:
                    converted[name] = f"{arr.dtype} -> {want}"
                arr = arr.astype(want)
            else:
                raise UsageError(
                    f"{where}: input '{name}' is {arr.dtype} but the model wants {want}; save "
                    f"it as {want}"
                )
        if spec.shape is not None and (len(spec.shape) != arr.ndim or any(
                isinstance(d, int) and d != s for d, s in zip(spec.shape, arr.shape, strict=True))):
            raise UsageError(
                f"{where}: input '{name}' has shape {list(arr.shape)} but the model wants "
                f"{list(spec.shape)}; fix the array's shape"
            )
        feed[name] = arr
    return feed


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read inputs file '{path}': {exc}; give a numpy .npz file") from None


def npz_files(path: str | os.PathLike) -> list[Path]:
    """The .npz files ``path`` names: itself, or the .npz files of a folder in name order."""
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if f.suffix == ".npz" and f.is_file())
        if not files:
            raise UsageError(f"folder '{p}' holds no .npz files; put one file per sample in it")
        return files
    if not p.is_file():
        raise NotFoundError(f"inputs file '{p}' does not exist; check the path")
    return [p]


SAMPLE_KEY = re.compile(r"^sample(\d+)/(.+)$")
"""Array names of an .npz file holding several samples: ``sample<k>/<input name>``."""


def _npz_names(path: Path) -> list[str]:
    """The array names of an .npz file (its zip directory only; no array is read)."""
    try:
        with np.load(path, allow_pickle=False) as data:
            return list(data.files)
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read inputs file '{path}': {exc}; give a numpy .npz file") from None


def _entries(path: Path) -> list[tuple[Path, int | None, list[str]]]:
    """(file, sample number or None, input names) per sample an .npz file holds."""
    names = _npz_names(path)
    matched = [SAMPLE_KEY.match(n) for n in names]
    if not names or not all(matched):
        return [(path, None, names)]
    by_sample: dict[int, list[str]] = {}
    for m in matched:
        assert m is not None
        by_sample.setdefault(int(m.group(1)), []).append(m.group(2))
    return [(path, k, by_sample[k]) for k in sorted(by_sample)]


def _read_entry(path: Path, k: int | None) -> dict[str, np.ndarray]:
    if k is None:
        return _read_npz(path)
    prefix = f"sample{k}/"
    try:
        with np.load(path, allow_pickle=False) as data:
            return {n[len(prefix):]: data[n] for n in data.files if n.startswith(prefix)}
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read inputs file '{path}': {exc}; give a numpy .npz file") from None


def save_samples(path: str | os.PathLike, samples: Sequence[Sample]) -> Path:
    """Write ``samples`` to one .npz file that ``--inputs`` replays: the arrays by input name
    for one sample, ``sample<k>/<name>`` for several. Atomic (a temporary file, then a rename)."""
    target = Path(path)
    if target.suffix != ".npz":
        raise UsageError(f"--save-inputs needs a .npz file name, got '{target}'")
    arrays: dict[str, np.ndarray] = {}
    for k, sample in enumerate(samples):
        for name, value in sample.items():
            arrays[name if len(samples) == 1 else f"sample{k}/{name}"] = value
    tmp = target.with_name(f".{target.name}.tmp.npz")
    try:
        np.savez(tmp, **arrays)  # type: ignore[arg-type]
        os.replace(tmp, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise UsageError(f"cannot write inputs file '{target}': {exc}; choose another path") from None
    return target


class NpzSamples(Sequence[Sample]):
    """The samples of a list of .npz files, read one sample at a time (bounded memory).

    A file holds one sample (arrays named by input) or several (``sample<k>/<name>``, as
    :func:`save_samples` writes them). Construction checks every sample's array names (the zip
    directory only); each sample is read and checked (dtypes, fixed dims) when it is indexed or
    iterated, and nothing is cached, so a loop that drops each sample before the next keeps one
    sample in memory. Indexing a sample again reads it again. Arrays converted to the model's
    dtype are recorded in ``converted`` (input name -> "float64 -> float32").
    """

    def __init__(self, files: Sequence[Path], specs: Sequence[InputSpec]) -> None:
        self.files = list(files)
        self.specs = list(specs)
        self.converted: dict[str, str] = {}
        self.entries: list[tuple[Path, int | None]] = []
        for f in self.files:
            for path, k, names in _entries(f):
                _check_names(names, self.specs, _where(path, k))
                self.entries.append((path, k))

    def __len__(self) -> int:
        return len(self.entries)

    @overload
    def __getitem__(self, k: int) -> Sample: ...

    @overload
    def __getitem__(self, k: slice) -> list[Sample]: ...

    def __getitem__(self, k: int | slice) -> Sample | list[Sample]:
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(len(self)))]
        path, j = self.entries[k]
        return _check_sample(_read_entry(path, j), self.specs, _where(path, j), self.converted)

    def __iter__(self) -> Iterator[Sample]:
        for k in range(len(self.entries)):
            yield self[k]


def _where(path: Path, k: int | None) -> str:
    return f"inputs file '{path.name}'" + ("" if k is None else f" sample {k}")


def stream_samples(inputs: InputsLike, specs: Sequence[InputSpec]) -> Sequence[Sample]:
    """Like :func:`user_samples`, but an .npz path or folder gives a lazy :class:`NpzSamples`
    (one sample read at a time, on demand) instead of a list holding every sample."""
    if isinstance(inputs, (str, os.PathLike)):
        return NpzSamples(npz_files(inputs), specs)
    return user_samples(inputs, specs)


def user_samples(inputs: InputsLike, specs: Sequence[InputSpec], *,
                 progress: Callable[[int, int], None] | None = None,
                 converted: dict[str, str] | None = None) -> list[Sample]:
    """Feed dicts from user data, checked against ``specs`` (names, dtypes, fixed dims)."""
    if isinstance(inputs, (str, os.PathLike)):
        lazy = NpzSamples(npz_files(inputs), specs)
        out = []
        for i in range(len(lazy)):
            out.append(lazy[i])
            if progress is not None:
                progress(i + 1, len(lazy))
        if converted is not None:
            converted.update(lazy.converted)
        return out
    if isinstance(inputs, Mapping):
        return [_check_sample(inputs, specs, "the inputs", converted)]
    return [_check_sample(s, specs, f"input sample {i}", converted) for i, s in enumerate(inputs)]


def merge_specs(*groups: Sequence[InputSpec]) -> list[InputSpec]:
    """Inputs of several models, first occurrence first; the tightest index bound wins."""
    merged: dict[str, InputSpec] = {}
    for group in groups:
        for spec in group:
            have = merged.get(spec.name)
            if have is None:
                merged[spec.name] = spec
                continue
            high = spec.high if spec.high is not None and (have.high is None or spec.high < have.high) \
                else have.high
            default = have.has_default and spec.has_default  # required by one: drawn for all
            if (high, default) != (have.high, have.has_default):
                merged[spec.name] = InputSpec(have.name, have.elem_type, have.shape, high, default)
    return list(merged.values())
