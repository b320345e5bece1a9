"""Shared machinery of the framework converters: the conversion report, the metadata written into
converted models, value-based name maps, renames, the numeric check and the factory loader.

The numeric check is verify's: models run in verify's engine (onnxruntime, optimizations off) and
outputs are compared by its :class:`~onnxsurgeon.verify.PairAccumulator` under its ``framework``
tolerance policy, the one ``verify --against-tf/--against-torch`` uses; value matching for the name
maps takes its tolerances from the same policy.

Nothing here imports TensorFlow or PyTorch; :mod:`.tf` and :mod:`.torch` do.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from onnxsurgeon.errors import NotFoundError, SurgeryError, UsageError
from onnxsurgeon.metadata import set_metadata
from onnxsurgeon.names import NameAllocator
from onnxsurgeon.protos import default_opset, rename_tensors
from onnxsurgeon.select import FUSED_KEY, NAME_MAP_KEY
from onnxsurgeon.types import infer_value_infos
from onnxsurgeon.verify import run_model
from onnxsurgeon.verify.accumulate import (
    FRAMEWORK,
    MATCH_SCALE_ATOL,
    PairAccumulator,
    default_tolerance,
)

FRAMEWORK_KEY = "onnxsurgeon.source.framework"
FRAMEWORK_VERSION_KEY = "onnxsurgeon.source.framework_version"
EXPORTER_KEY = "onnxsurgeon.source.exporter"
CHECK_KEY = "onnxsurgeon.conversion_check"
RTOL, ATOL = default_tolerance("float32", FRAMEWORK)
"""Default (rtol, atol) of the conversion check: verify's ``framework`` policy for float32 (1e-3,
1e-5), applied to every float output; other dtypes compare exactly."""


class ConversionError(SurgeryError):
    """A framework model could not be converted (unsupported source, exporter failure, ...)."""


class ConversionMismatchError(ConversionError):
    """The converted ONNX model disagrees with the framework beyond the tolerance.

    Attributes:
        mismatch: what the check found, JSON-ready (empty when unknown): ``max_abs_diff``,
            ``output`` (the first differing output), ``batches`` (batch size -> whether it
            agreed, as strings), and where the converter could localise it ``framework_name``
            and ``framework_op`` (the first differing framework tensor and its op type),
            ``onnx_node`` and ``onnx_op`` (the ONNX node computing it) and ``static_inputs``
            (input specs whose static shapes convert correctly).
    """

    def __init__(self, message: str, mismatch: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.mismatch: dict[str, Any] = dict(mismatch or {})


@dataclass(frozen=True)
class ConversionReport:
    """What a conversion produced and how well it matches the framework.

    Attributes:
        path: the ONNX file written.
        framework: ``"tensorflow"`` or ``"pytorch"``.
        framework_version: the framework's ``__version__``.
        exporter: e.g. ``"tf2onnx 1.17.0"`` or ``"torch.onnx dynamo"``.
        opset: default-domain opset of the written model.
        inputs / outputs: ONNX graph input and output names.
        name_map: framework name -> ONNX tensor name (only where they differ).
        max_abs_diff: largest |onnx - framework| over all outputs (nan when unchecked).
        max_excess: largest ``|d| - max(atol, rtol*|ref|)`` (verify's rule: an element fails
            when it exceeds both); <= 0 means within tolerance.
        checked: whether the numeric check ran.
        rtol / atol: tolerances used.
        notes: things the caller should know (e.g. why the name map is partial).
        fused: framework names whose value exists nowhere in the ONNX model (the converter fused
            the op into another one) -> ``{"op", "node", "use"}`` (``"layout": "NCHW"`` when
            ``use`` is an ONNX tensor holding the value transposed); these are in no name map.
        verdict: ``"pass"``, ``"inconclusive"`` (outputs agree but could show no difference on
            any inputs tried: empty, constant or below the tolerance's resolution, verify's
            rules) or ``"unchecked"``.
        why: why the check was inconclusive (None otherwise).
    """

    path: Path
    framework: str
    framework_version: str
    exporter: str
    opset: int
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    name_map: Mapping[str, str] = field(default_factory=dict)
    max_abs_diff: float = float("nan")
    max_excess: float = float("nan")
    checked: bool = False
    rtol: float = RTOL
    atol: float = ATOL
    notes: tuple[str, ...] = ()
    fused: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    verdict: str = "unchecked"
    why: str | None = None


# ------------------------------------------------------------------------------ running onnx
def run_onnx(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Graph outputs of ``model`` on ``feeds``, by name, run by verify's engine (onnxruntime,
    CPU, graph optimizations off: exact, op by op)."""
    return run_model(model, feeds)


def run_all_tensors(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every graph output and typed main-graph node output of ``model`` on ``feeds`` (for
    value-based name maps), run by verify's engine in one session. O(activations) memory."""
    infos = infer_value_infos(model)
    names = [o.name for o in model.graph.output]
    have = set(names)
    for node in model.graph.node:
        for out in node.output:
            vi = infos.get(out)
            if (out and out not in have and vi is not None and vi.type.HasField("tensor_type")
                    and vi.type.tensor_type.elem_type != 0):
                have.add(out)
                names.append(out)
    return run_model(model, feeds, outputs=names, batch=max(2, len(names)))


def compare_outputs(
    actual: Sequence[np.ndarray], expected: Sequence[np.ndarray], *, rtol: float, atol: float
) -> tuple[float, float]:
    """(largest absolute difference, largest excess over the tolerance) of converted outputs
    against the framework's, by verify's engine (:class:`PairAccumulator`): an element fails when
    its difference exceeds both ``atol`` and ``rtol*|expected|``; NaN and Inf must sit at the same
    positions. ``rtol``/``atol`` apply to float outputs; other dtypes compare exactly."""
    max_abs = 0.0
    excess = -float("inf")
    for a, e in zip(actual, expected, strict=True):
        a = np.asarray(a)
        e = np.asarray(e)
        if a.shape != e.shape:
            raise ConversionMismatchError(
                f"converted output has shape {list(a.shape)} but the framework gives {list(e.shape)}; "
                "check the input shapes given to the converter"
            )
        if a.size == 0:
            continue
        if a.dtype != e.dtype:   # e.g. a framework's float64 reference of a float32 output
            common = np.result_type(a, e)
            a, e = a.astype(common), e.astype(common)
        floats = e.dtype.kind in "fc"
        acc = PairAccumulator("framework", "onnx", rtol=rtol if floats else None,
                              atol=atol if floats else None)
        acc.add(e, a)
        max_abs = max(max_abs, acc.max_abs)
        excess = max(excess, acc.max_excess)
    return max_abs, (excess if excess != -float("inf") else 0.0)


def check_or_raise(what: str, max_abs: float, excess: float, *, rtol: float, atol: float,
                   keep: str = "check=False") -> None:
    """Raise :class:`ConversionMismatchError` when ``excess`` > 0; the message ends with
    ``pass {keep} to keep it`` (the option that keeps the result)."""
    if excess > 0 or np.isnan(excess):
        raise ConversionMismatchError(
            f"{what}: ONNX output differs from the framework by up to {max_abs:.3g} "
            f"(tolerance rtol={rtol:g}, atol={atol:g}); report the op or pass {keep} to keep it"
        )


KEEP_MISMATCH = "keep_mismatch=True"
"""The option of ``from_tf``/``from_torch`` that keeps a model whose check fails (the CLI's
``--keep-mismatch``); the mismatch is then recorded under :data:`CHECK_KEY`."""


def kept_mismatch(err: ConversionMismatchError, *, rtol: float,
                  atol: float) -> tuple[float, float, str, str]:
    """A failed check kept with ``keep_mismatch=True``: its max |diff|, its excess over the
    tolerance (NaN when unknown), the verdict ``"fail"`` and the report's note saying so."""
    max_abs = float(err.mismatch.get("max_abs_diff", float("nan")))
    excess = float(err.mismatch.get("max_excess", float("nan")))
    note = (f"kept despite the check: ONNX output differs from the framework by up to "
            f"{max_abs:.3g} (tolerance rtol={rtol:g}, atol={atol:g}); recorded in "
            f"metadata_props['{CHECK_KEY}']")
    return max_abs, excess, "fail", note


# ---------------------------------------------------------------------------- value matching
def _fingerprint(a: np.ndarray) -> tuple[float, float]:
    x = a.astype(np.float64, copy=False)
    return float(x.sum()), float(np.abs(x).sum())


def _close(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether ``a`` holds ``b``'s values: the conversion tolerances, plus MATCH_SCALE_ATOL of
    ``b``'s largest magnitude (``np.allclose``'s rule; a search, not a check)."""
    scale = float(np.max(np.abs(b))) if b.size else 0.0
    return bool(np.allclose(a, b, rtol=RTOL, atol=ATOL + MATCH_SCALE_ATOL * scale, equal_nan=True))


def _informative(a: np.ndarray) -> bool:
    """A tensor whose values can identify it (not empty, not constant)."""
    if a.size < 2 or a.dtype.kind not in "fiu":
        return False
    return bool(np.ptp(a.reshape(-1)) > 0)


class ValueIndex:
    """ONNX tensor values bucketed by (dtype, shape) with fingerprints, for finding equal values."""

    def __init__(self, values: Mapping[str, np.ndarray]) -> None:
        self.values = values
        self._buckets: dict[tuple[str, tuple[int, ...]], list[tuple[str, float, float]]] = {}
        for name, v in values.items():
            v = np.asarray(v)
            if not _informative(v):
                continue
            s, sa = _fingerprint(v)
            self._buckets.setdefault((v.dtype.str, v.shape), []).append((name, s, sa))

    def matches(self, ref: np.ndarray) -> list[str]:
        """Names whose value equals ``ref`` (fp tolerance), in model order."""
        ref = np.asarray(ref)
        if not _informative(ref):
            return []
        s, sa = _fingerprint(ref)
        found = []
        for name, s2, _ in self._buckets.get((ref.dtype.str, ref.shape), ()):
            if abs(s - s2) <= RTOL * sa + MATCH_SCALE_ATOL * ref.size and _close(self.values[name], ref):
                found.append(name)
        return found

    def absent(self, ref: np.ndarray) -> bool:
        """True when ``ref`` can identify a tensor and no tensor here holds its value."""
        return _informative(np.asarray(ref)) and not self.matches(ref)

    def same(self, name: str, ref: np.ndarray) -> bool:
        v = self.values.get(name)
        return v is not None and np.shape(v) == np.shape(ref) and _close(np.asarray(v), np.asarray(ref))


def align_names(
    model: onnx.ModelProto,
    framework_values: Mapping[str, np.ndarray],
    onnx_values: Mapping[str, np.ndarray],
    *,
    prefer: Callable[[str, str], Any] | None = None,
    protect: Iterable[str] = (),
) -> dict[str, str]:
    """Make framework tensor names denote the framework's values. Mutates model.

    For each framework name (in the given order): an ONNX tensor of that name holding a different
    value (a transposed layout, say) is renamed away; then the ONNX tensor with the framework's value
    takes the framework name when it has an internal name of its own, otherwise the returned name map
    records framework name -> ONNX name. Graph inputs/outputs and ``protect`` are never renamed.

    Returns:
        The name map for names that could not be made exact.
    """
    vindex = ValueIndex(onnx_values)
    io_names = {i.name for i in model.graph.input} | {o.name for o in model.graph.output}
    keep = set(io_names) | set(protect) | {t.name for t in model.graph.initializer}
    fw_names = set(framework_values)
    alloc = NameAllocator.for_model(model)
    for n in fw_names:
        alloc.reserve(n)
    away: dict[str, str] = {}
    exact: set[str] = set()
    pending: list[tuple[str, list[str]]] = []
    for name, ref in framework_values.items():
        if name in onnx_values:
            if vindex.same(name, ref):
                exact.add(name)
                continue
            if name not in keep:
                stem, _, port = name.rpartition(":")
                away[name] = alloc.fresh(f"{stem}/onnx:{port}" if port.isdigit() else f"{name}/onnx")
        cands = vindex.matches(ref)
        if cands:
            pending.append((name, cands))
    to_fw: dict[str, str] = {}
    taken: set[str] = set()
    result: dict[str, str] = {}
    for name, cands in pending:
        rank = prefer
        best = min(cands, key=lambda c: rank(name, c)) if rank is not None else cands[0]
        can_take = best not in fw_names and best not in keep and best not in taken
        name_free = name not in onnx_values or name in away
        if can_take and name_free:
            to_fw[best] = name
            taken.add(best)
        else:
            result[name] = best
    renames = dict(away)
    renames.update(to_fw)
    rename_tensors(model, renames)
    # entries in result must point at final names
    return {k: renames.get(v, v) for k, v in result.items() if k != renames.get(v, v)}


def common_prefix_len(a: str, b: str) -> int:
    """Length of the longest common prefix of ``a`` and ``b``."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


# ------------------------------------------------------------------------------ metadata
def write_conversion_metadata(
    model: onnx.ModelProto,
    *,
    framework: str,
    framework_version: str,
    exporter: str,
    name_map: Mapping[str, str],
    check: Mapping[str, Any],
    fused: Mapping[str, Mapping[str, str]] | None = None,
) -> None:
    """Record the source framework, exporter, name map, fused names (when there are any) and
    check result. Mutates model."""
    entries = {
        FRAMEWORK_KEY: framework,
        FRAMEWORK_VERSION_KEY: framework_version,
        EXPORTER_KEY: exporter,
        NAME_MAP_KEY: json.dumps(dict(name_map), sort_keys=True, separators=(",", ":")),
        CHECK_KEY: json.dumps(dict(check), sort_keys=True, separators=(",", ":")),
    }
    if fused:
        entries[FUSED_KEY] = json.dumps({k: dict(v) for k, v in fused.items()}, sort_keys=True,
                                        separators=(",", ":"))
    set_metadata(model, entries)


def check_facts(*, checked: bool, max_abs: float, excess: float, rtol: float,
                atol: float, verdict: str = "pass", why: str | None = None) -> dict[str, Any]:
    """The conversion check as recorded under :data:`CHECK_KEY`: ``checked``, ``ok`` (None when
    unchecked; False for a model kept with ``keep_mismatch=True``), ``max_abs_diff``,
    ``max_excess`` (> 0: beyond the tolerance), ``rtol``, ``atol``."""
    def finite(v: float) -> float | None:
        return None if np.isnan(v) or np.isinf(v) else float(v)

    ok = None if not checked else verdict == "pass"
    facts = {"checked": checked, "ok": ok, "max_abs_diff": finite(max_abs),
             "max_excess": finite(excess), "rtol": rtol, "atol": atol, "verdict": verdict}
    if why:
        facts["why"] = why
    return facts


def finish(
    model: onnx.ModelProto,
    path: str | os.PathLike[str],
    *,
    framework: str,
    framework_version: str,
    exporter: str,
    name_map: Mapping[str, str],
    max_abs: float,
    excess: float,
    checked: bool,
    rtol: float,
    atol: float,
    notes: Sequence[str] = (),
    fused: Mapping[str, Mapping[str, str]] | None = None,
    verdict: str | None = None,
    why: str | None = None,
) -> ConversionReport:
    """Write metadata, save atomically, build the report. ``verdict`` defaults to ``"pass"``
    when checked (``"unchecked"`` otherwise)."""
    verdict = verdict or ("pass" if checked else "unchecked")
    write_conversion_metadata(
        model, framework=framework, framework_version=framework_version, exporter=exporter,
        name_map=name_map, fused=fused,
        check=check_facts(checked=checked, max_abs=max_abs, excess=excess, rtol=rtol,
                          atol=atol, verdict=verdict, why=why),
    )
    from onnxsurgeon.io import save

    out = save(model, path)
    return ConversionReport(
        path=Path(out), framework=framework, framework_version=framework_version,
        exporter=exporter, opset=default_opset(model) or 0,
        inputs=tuple(i.name for i in model.graph.input),
        outputs=tuple(o.name for o in model.graph.output),
        name_map=dict(name_map), max_abs_diff=max_abs, max_excess=excess, checked=checked,
        rtol=rtol, atol=atol, notes=tuple(notes), fused=dict(fused or {}), verdict=verdict,
        why=why,
    )


# ------------------------------------------------------------------------------ user code
def load_factory(spec: str) -> Any:
    """Import ``FILE.py:NAME`` and return the attribute ``NAME``.

    This executes the user's file as Python code, with the user's permissions: only pass files you
    trust (the same as running ``python FILE.py``). A package the file imports that is not
    installed raises its ``ImportError`` (the CLI names what to install); any other failure is
    a :class:`UsageError`.
    """
    path_s, sep, attr = spec.rpartition(":")
    if not sep or not path_s or not attr:
        raise UsageError(f"'{spec}' is not FILE.py:NAME; write e.g. 'model.py:build'")
    path = Path(path_s)
    if not path.is_file():
        raise NotFoundError(f"file '{path}' named in '{spec}' does not exist; check the path")
    mod_name = f"_onnxsurgeon_user_{abs(hash(str(path.resolve()))):x}"
    loader_spec = importlib.util.spec_from_file_location(mod_name, path)
    if loader_spec is None or loader_spec.loader is None:
        raise UsageError(f"cannot import '{path}'; give a .py file")
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[mod_name] = module
    try:
        loader_spec.loader.exec_module(module)
    except ImportError as exc:
        sys.modules.pop(mod_name, None)
        if exc.name:   # a package the file imports is missing: the caller names what to install
            raise
        raise UsageError(f"importing '{path}' failed: {type(exc).__name__}: {exc}") from exc
    except Exception as exc:  # noqa: BLE001 - user code, report one line
        sys.modules.pop(mod_name, None)
        raise UsageError(f"importing '{path}' failed: {type(exc).__name__}: {exc}") from exc
    if not hasattr(module, attr):
        names = _defined_names(module)
        raise NotFoundError(f"'{path}' defines no '{attr}'; "
                            + (f"it defines {names[:10]}" if names else
                               "it defines no function or class"))
    return getattr(module, attr)


def _defined_names(module: Any) -> list[str]:
    """The public functions and classes ``module``'s own file defines (not what it imports)."""
    return [n for n, v in vars(module).items()
            if not n.startswith("_") and (inspect.isfunction(v) or inspect.isclass(v))
            and getattr(v, "__module__", None) == module.__name__]


def parse_shape_spec(spec: str) -> tuple[str, list[int | str] | None, str | None]:
    """``NAME[:D0,D1,...][:DTYPE]`` -> (name, dims or None, dtype or None).

    Dims are integers or symbols (``batch``); ``?`` or ``-1`` means unknown.
    """
    parts = spec.split(":")
    name = parts[0]
    if not name:
        raise UsageError(f"input spec '{spec}' has no name; write NAME:1x3x224x224[:float32]")
    if len(parts) == 1 and re.fullmatch(r"[\d?]+(?:[x,][\d?]+)+", name):
        raise UsageError(f"input spec '{spec}' is a shape without a name; write NAME:SHAPE, "
                         f"e.g. x:{spec} (or x:{spec}:float32)")
    dims: list[int | str] | None = None
    dtype = None
    if len(parts) >= 2 and parts[1]:
        dims = []
        text = parts[1].strip().strip("[]")
        pieces = text.split(",")
        if len(pieces) == 1:   # 1x3x224x224 (only when every piece is a number or '?')
            by_x = text.split("x")
            if len(by_x) > 1 and all(p.strip().lstrip("-").isdigit() or p.strip() == "?" for p in by_x):
                pieces = by_x
        for d in pieces:
            d = d.strip()
            if not d:
                continue
            if d.lstrip("-").isdigit():
                dims.append(int(d))
            else:
                dims.append(d)
    if len(parts) >= 3 and parts[2]:
        dtype = parts[2]
    if len(parts) > 3:
        raise UsageError(f"input spec '{spec}' has too many ':' parts; write NAME:SHAPE[:DTYPE]")
    return name, dims, dtype


def split_spec_list(text: str) -> list[str]:
    """Split a comma-separated list of ``NAME[:SHAPE]`` specs whose shapes may hold commas.

    ``"input:0:1,8,8,3,mask:1x8"`` -> ``["input:0:1,8,8,3", "mask:1x8"]``: a piece that is a bare
    number (or ``?``) continues the previous shape; anything else starts a new spec. Symbolic dims
    inside a comma list are therefore read as names; write such shapes with repeated options.
    """
    specs: list[str] = []
    for piece in text.split(","):
        p = piece.strip()
        if not p:
            continue
        if specs and (p.lstrip("-").isdigit() or p == "?") and ":" in specs[-1]:
            specs[-1] += "," + p
        else:
            specs.append(p)
    return specs


def example_array(shape: Sequence[int | str | None], dtype: str | np.dtype, seed: int = 0,
                  sym_size: int = 2) -> np.ndarray:
    """Deterministic example data: normal floats, small non-negative integers, random bools."""
    rng = np.random.default_rng(seed)
    dims = [d if isinstance(d, int) and d >= 0 else sym_size for d in shape]
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return rng.standard_normal(dims).astype(dt)
    if dt.kind in "iu":
        return rng.integers(0, 8, size=dims).astype(dt)
    if dt.kind == "b":
        return rng.integers(0, 2, size=dims).astype(bool)
    raise UsageError(f"cannot make example data of dtype {dt}; give an example input")
