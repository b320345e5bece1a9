"""Writing a page, and the bridge from a verification report to the page's colour scale."""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path
from typing import Any

from .page import TensorError


def errors_from_report(report: Any) -> tuple[dict[str, TensorError], str]:
    """Tensor name -> :class:`TensorError` and the first divergent node ('' when none) from a
    :class:`onnxsurgeon.verify.VerifyReport`: every compared pair (under its candidate name) and
    the located divergence. A failed pair without a number (shape or NaN mismatch) counts as an
    infinite error."""
    errors: dict[str, TensorError] = {}
    for pair in getattr(report, "pairs", ()):
        value = pair.max_abs_diff
        if value is None or (isinstance(value, float) and math.isnan(value)):
            value = 0.0 if pair.ok else math.inf
        errors[pair.candidate] = TensorError(float(value), True)
    divergence = getattr(report, "divergence", None)
    divergent = ""
    if divergence is not None:
        divergent = divergence.node
        value = divergence.max_abs_diff
        errors[divergence.candidate_tensor] = TensorError(
            math.inf if value is None else float(value), True)
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
