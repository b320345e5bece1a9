"""Writing a page, and the bridge from a verification report to the page's colour scale."""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path
from typing import Any

from .page import TensorError


def _error(value: float | None, ok: bool) -> float:
    """A compared tensor's error for the colour scale: no number (shape or NaN mismatch) is 0
    when it agreed, else infinite."""
    if value is None or math.isnan(value):
        return 0.0 if ok else math.inf
    return float(value)


def errors_from_report(report: Any, deep: Any = None) -> tuple[dict[str, TensorError], str]:
    """Tensor name -> :class:`TensorError` and the first divergent node ('' when none) from a
    :class:`onnxsurgeon.verify.VerifyReport`: every tensor of its layer-wise comparison
    (``report.deep``, and ``deep``, a :class:`onnxsurgeon.verify.DeepResult` computed for the
    page), then every compared pair, then the located divergence when nothing else compared its
    tensor (under their candidate names).
    The divergent node is the located one, else (when the report did not pass) the deep
    comparison's first difference."""
    errors: dict[str, TensorError] = {}
    divergent = ""
    for result in (getattr(report, "deep", None), deep):
        if result is None:
            continue
        for t in result.tensors:
            errors[t.candidate] = TensorError(_error(t.max_abs_diff, t.ok), t.informative)
        first = result.first_difference
        if first is not None and not divergent and not getattr(report, "ok", False):
            divergent = first.node
    for pair in getattr(report, "pairs", ()):
        errors[pair.candidate] = TensorError(_error(pair.max_abs_diff, pair.ok), True)
    divergence = getattr(report, "divergence", None)
    if divergence is not None:
        divergent = divergence.node
        value = divergence.max_abs_diff  # of one sample: the tables' maxima over all win
        errors.setdefault(divergence.candidate_tensor, TensorError(
            math.inf if value is None else float(value), True))
    return errors, divergent


def write_page(text: str, path: str | os.PathLike[str]) -> Path:
    """Write ``text`` to ``path`` atomically (a temporary file in the same folder, renamed)."""
    dest = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent or ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return dest
