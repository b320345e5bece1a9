"""Verification engine: run models in onnxruntime and prove rewrites numerically.

The only part of the core that imports onnxruntime. Each CLI command is one call here and returns
a frozen :class:`VerifyReport` whose ``to_json()`` matches the CLI contract:

* :func:`compare` -- two models on the same (random or user) inputs, per-pair statistics, and the
  first tensor where they part when they differ;
* :func:`verify_rewrite` / :func:`verify_log` -- the invariant a recorded rewrite implies
  (extract, copy, insert, reroute), compared exactly with graph optimizations off;
* :func:`verify_against` -- a model against reference outputs from any callable (the hook for
  TensorFlow / PyTorch, which the core never imports);
* :func:`run_model` -- values of any tensors of one model for one feed.

Every function takes ``isolate=True`` (optionally ``timeout=`` seconds, ``memory_limit=`` MB) to
run onnxruntime in a child process under those limits, for untrusted models
(:mod:`onnxsurgeon.verify.isolate`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from . import folding as folding  # registers the fold, dims and opset checks
from . import hygiene as hygiene  # registers the cleanup/toposort/outputs/set checks
from . import precision as _precision  # noqa: F401 - registers the precision check
from . import split as _split  # noqa: F401 - registers the split stage check
from .accumulate import TOLERANCES, PairAccumulator, compare_arrays, default_tolerance
from .against import verify_against
from .compare import compare, default_samples
from .inputs import InputSpec, NpzSamples, input_specs, random_samples, stream_samples, user_samples
from .isolate import (
    Limits,
    ModelMemoryError,
    ModelTimeoutError,
    ResourceLimitError,
    make_limits,
)
from .locate import locate
from .log import verify_log
from .render import format_report
from .report import (
    FAIL,
    INCONCLUSIVE,
    PASS,
    DeepResult,
    Divergence,
    PairReport,
    TensorError,
    VerifyReport,
)
from .rewrite import verify_rewrite  # with .verbs: registers every check in invariant.CHECKS
from .run import DEFAULT_BATCH, ModelLike, ModelRunError, Staged, Workspace, to_model
from .sites import _check_replace as _check_replace  # registers the replace check
from .verbs import verify_merge


def run_model(model: ModelLike, feeds: Mapping[str, np.ndarray], *,
              outputs: Sequence[str] | None = None, batch: int = DEFAULT_BATCH,
              threads: int = 0, isolate: bool = False, timeout: float | None = None,
              memory_limit: int | None = None) -> dict[str, np.ndarray]:
    """Values of ``outputs`` (default: the graph outputs; any main-graph tensors, exposed in
    batches of ``batch`` per session) for one feed. Optimizations off, CPU provider.
    ``isolate`` / ``timeout`` / ``memory_limit``: run in a child process under limits."""
    m = to_model(model)
    limits = make_limits(isolate, timeout, memory_limit)
    with Workspace() as ws:
        staged = Staged(m, ws, "model", threads=threads, limits=limits)
        return staged.run(feeds, outputs, batch=batch)


__all__ = [
    "DEFAULT_BATCH", "FAIL", "INCONCLUSIVE", "PASS", "TOLERANCES", "DeepResult",
    "PairAccumulator", "TensorError", "Divergence", "InputSpec", "Limits", "ModelLike",
    "ModelMemoryError", "ModelRunError", "ModelTimeoutError", "NpzSamples", "PairReport",
    "ResourceLimitError", "VerifyReport", "compare", "compare_arrays", "default_samples",
    "default_tolerance", "format_report", "input_specs", "locate", "make_limits",
    "random_samples", "run_model", "stream_samples", "user_samples", "verify_against",
    "verify_log", "verify_merge", "verify_rewrite",
]
