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
from typing import TYPE_CHECKING, Any

import numpy as np

from ..lazy import lazy_package
from .isolate import make_limits
from .run import DEFAULT_BATCH, ModelLike, Staged, Workspace, to_model

if TYPE_CHECKING:
    from . import folding as folding
    from . import hygiene as hygiene
    from .accumulate import TOLERANCES, PairAccumulator, compare_arrays, default_tolerance
    from .against import verify_against
    from .compare import compare, default_samples
    from .inputs import (
        InputSpec,
        NpzSamples,
        input_specs,
        random_samples,
        stream_samples,
        user_samples,
    )
    from .isolate import Limits, ModelMemoryError, ModelTimeoutError, ResourceLimitError
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
    from .rewrite import verify_rewrite
    from .run import ModelRunError
    from .verbs import verify_merge

# The public names are imported on first use (PEP 562): ``verify A B`` loads what comparing two
# models needs, not every rewrite check (their modules load the surgery they check: ~0.05 s of
# a process). The checks register themselves when the registry is first read
# (:data:`~onnxsurgeon.verify.invariant.CHECKS`).
_HOMES = {
    "accumulate": ("TOLERANCES", "PairAccumulator", "compare_arrays", "default_tolerance"),
    "against": ("verify_against",),
    "compare": ("compare", "default_samples"),
    "inputs": ("InputSpec", "NpzSamples", "input_specs", "random_samples", "stream_samples",
               "user_samples"),
    "isolate": ("Limits", "ModelMemoryError", "ModelTimeoutError", "ResourceLimitError"),
    "locate": ("locate",),
    "log": ("verify_log",),
    "render": ("format_report",),
    "report": ("FAIL", "INCONCLUSIVE", "PASS", "DeepResult", "Divergence", "PairReport",
               "TensorError", "VerifyReport"),
    "rewrite": ("verify_rewrite",),
    "run": ("ModelRunError",),
    "verbs": ("verify_merge",),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}


def _submodule(name: str) -> Any:
    """A submodule the eager imports used to load (``verify.folding``)."""
    from importlib import import_module
    from importlib.util import find_spec

    if name.startswith("__") or find_spec(f"{__name__}.{name}") is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return import_module(f".{name}", __name__)


__getattr__, __dir__ = lazy_package(__name__, _HOME_OF, _submodule)


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
