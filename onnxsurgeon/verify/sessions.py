"""onnxruntime sessions for verification: :func:`new_session` (optimizations off, the CPU
provider, the thread count, a clear error for a model onnxruntime refuses: an old opset without a
kernel named with the fix), :class:`Runner` (a live session and the names it returns),
:data:`COUNTS` (what verification did in this process). :mod:`onnxsurgeon.verify.run` stages
models for them and re-exports these names."""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from ..errors import InvalidModelError
from ._worker import ort_log_severity

COUNTS: Counter[str] = Counter()
"""What verification did in this process, for tests and benchmarks: ``"sessions"`` created
(and ``"sessions with N threads"``), ``"deep passes"`` (one :func:`~.deepen.settle` each)."""


class ModelRunError(InvalidModelError):
    """onnxruntime could not load or run a model (the message names the model and the cause)."""


def default_threads() -> int:
    """The onnxruntime threads of a session by default: the cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def new_session(model: Path | bytes, *, threads: int = 0, label: str | None = None,
                folder: Path | None = None, initializers: Mapping[str, Any] | None = None,
                ) -> Any:
    """An onnxruntime session for the file ``model`` (or serialized bytes): CPU, optimizations
    off, ``threads`` intra-op threads (0: :func:`default_threads`), no log lines (:func:`~onnxsurgeon.verify._worker.ort_log_severity`).
    ``folder``: where the external data of serialized bytes is (their locations are relative
    to it; onnxruntime reads them from there). ``initializers``: values onnxruntime uses in place
    of those initializers (:class:`~.light.SharedWeights`: no copy of their own)."""
    import onnxruntime as ort

    severity = ort_log_severity()  # onnxruntime's own (coloured) lines stay off stderr
    ort.set_default_logger_severity(severity)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = severity
    options.intra_op_num_threads = threads or default_threads()
    # no arena: a session exposing intermediates would keep their peak for its lifetime (the
    # same CPU time here, less memory)
    options.enable_cpu_mem_arena = False
    if folder is not None and isinstance(model, bytes):
        options.add_session_config_entry(
            "session.model_external_initializers_file_folder_path", str(folder))
    for key, value in (initializers or {}).items():
        options.add_initializer(key, value)
    name = label or (model.name if isinstance(model, Path) else "model")
    COUNTS["sessions"] += 1
    COUNTS[f"sessions with {options.intra_op_num_threads} threads"] += 1
    try:
        return ort.InferenceSession(model if isinstance(model, bytes) else str(model), options,
                                    providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises several unrelated types
        old = _old_opset_kernel(str(exc))
        if old is not None:
            raise ModelRunError(
                f"onnxruntime cannot load model '{name}': it has no kernel for {old[0]} at "
                f"opset {old[1]} (an old version of the op); convert the model first: "
                f"onnxsurgeon opset MODEL -o OUT --to {_ADVISED_OPSET}, then rerun on OUT"
            ) from None
        raise ModelRunError(
            f"onnxruntime cannot load model '{name}': {_first_line(exc)}; check the model "
            "with 'onnxsurgeon inspect' and onnx.checker"
        ) from None


_ADVISED_OPSET = 13
"""The opset ``opset --to`` is advised to when onnxruntime lacks a kernel at an older one."""

_NO_KERNEL = re.compile(r"Could not find an implementation for (\w+)\((\d+)\)")


def _old_opset_kernel(text: str) -> tuple[str, int] | None:
    """(op, version) when onnxruntime's refusal ``text`` is a missing kernel for a standard ONNX
    op at a version older than :data:`_ADVISED_OPSET` that a newer version of the op replaced
    (Add(6), Gemm(6) of old exporters): converting the opset is the fix. None otherwise (a
    missing kernel for an input type, a custom op: converting would not help)."""
    found = _NO_KERNEL.search(text)
    if found is None:
        return None
    op, version = found.group(1), int(found.group(2))
    try:
        newest = onnx.defs.get_schema(op, _ADVISED_OPSET, "").since_version
    except onnx.defs.SchemaError:
        return None
    return (op, version) if version < _ADVISED_OPSET and newest > version else None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[-1] if text else type(exc).__name__)[:300]


class Runner:
    """A live onnxruntime session plus the names it returns."""

    def __init__(self, session: Any, read_as: dict[str, str], label: str) -> None:
        self._session: Any = session
        self.read_as = read_as
        self.label = label
        self._inputs = {i.name for i in session.get_inputs()}
        # inputs with a default value (IR >= 4): fed when given
        self._optional = {i.name for i in session.get_overridable_initializers()}

    def only(self, names: Sequence[str]) -> Runner:
        """This session returning ``names`` only (each one it computes)."""
        if list(self.read_as) == list(names):
            return self
        return Runner(self._session, {n: self.read_as[n] for n in names}, self.label)

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run once; returns requested name -> array. Raises :class:`ModelRunError`."""
        feed = {k: v for k, v in feeds.items() if k in self._inputs or k in self._optional}
        missing = sorted(self._inputs - set(feed))
        if missing:
            raise ModelRunError(
                f"{self.label} model needs input(s) {missing[:8]} that were not given; add them "
                "to the inputs file"
            )
        names = list(self.read_as.values())
        if not names:  # onnxruntime would return every output
            return {}
        try:
            outs = self._session.run(names, feed)
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises several unrelated types
            raise ModelRunError(
                f"onnxruntime failed running the {self.label} model: {_first_line(exc)}; check the "
                "inputs (dtype, shape, value ranges) and the model"
            ) from None
        by_name = dict(zip(names, outs, strict=True))
        return {req: by_name[got] for req, got in self.read_as.items()}

    def close(self) -> None:
        self._session = None
