"""Dependency log noise, kept off the terminal unless ``-v``: TensorFlow's C++ logging, torch.onnx
and tf2onnx warnings and the like write to file descriptor 2 while a framework step runs; the CLI
points descriptor 2 at a temporary file for the duration of such a step and drops it
(:func:`dropped_stderr`, which :mod:`onnxsurgeon.cluster` uses around Ray's start and stop, its
Python logging at ERROR meanwhile). onnxruntime's sessions log nothing (their errors come back as
exceptions, one line each); :func:`native_logs` lets ``-v`` show its errors and warnings. On a
terminal a phase line says what a framework step is running, since these steps take seconds.

Every other phase of a command (loading, the rewrite, --verify, saving) is named on a terminal
once it has run for ``ONNXSURGEON_PHASE_AFTER`` seconds (default 2): quick commands stay quiet,
slow ones say what they are doing."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import threading
from collections.abc import Iterator

PHASE_AFTER_ENV = "ONNXSURGEON_PHASE_AFTER"
"""Seconds a phase runs before its name is shown on a terminal (default 2; 0 shows every one)."""


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """Name the phase ``name`` on stderr when stderr is a terminal and the phase is still running
    after ``$ONNXSURGEON_PHASE_AFTER`` seconds (default 2). Exceptions pass through."""
    if not sys.stderr.isatty():
        yield
        return
    try:
        after = float(os.environ.get(PHASE_AFTER_ENV, "2"))
    except ValueError:
        after = 2.0

    def show() -> None:
        sys.stderr.write(f"onnxsurgeon: {name} ...\n")
        sys.stderr.flush()

    if after <= 0:
        show()
        yield
        return
    timer = threading.Timer(after, show)
    timer.name = f"onnxsurgeon-phase: {name}"
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        timer.join()  # gone before the next phase (and before the program exits)


@contextlib.contextmanager
def framework_step(phase: str, *, verbose: bool) -> Iterator[None]:
    """Run a framework step: print ``phase`` on a terminal, capture descriptor 2 unless
    ``verbose``. Exceptions pass through (the CLI prints them after descriptor 2 is back)."""
    if sys.stderr.isatty():
        sys.stderr.write(f"onnxsurgeon: {phase} ...\n")
        sys.stderr.flush()
    if verbose:
        yield
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with dropped_stderr():
        yield


@contextlib.contextmanager
def dropped_stderr(drop: bool = True) -> Iterator[None]:
    """While the block runs (and ``drop``), descriptor 2 (``sys.stderr``'s) points at a
    temporary file that is then dropped: what native code and child processes write there
    (TensorFlow's C++ logging, Ray's start-up lines) never reaches the terminal. Exceptions pass
    through; the CLI prints them after descriptor 2 is back."""
    if not drop:
        yield
        return
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # a replaced sys.stderr (tests): nothing to do
        fd = 2
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    saved = os.dup(fd)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), fd)
        try:
            yield
        finally:
            with contextlib.suppress(Exception):
                sys.stderr.flush()
            os.dup2(saved, fd)
            os.close(saved)


@contextlib.contextmanager
def native_logs(*, verbose: bool) -> Iterator[None]:
    """For the block: with ``verbose`` (``-v``), onnxruntime's sessions (this process's and its
    isolated workers') log their errors and warnings to stderr; else nothing changes."""
    if not verbose:  # the verify package (~0.1 s of imports) only when it is asked for
        yield
        return
    from .verify._worker import ORT_LOG_ENV

    if ORT_LOG_ENV in os.environ:
        yield
        return
    os.environ[ORT_LOG_ENV] = "2"
    try:
        yield
    finally:
        os.environ.pop(ORT_LOG_ENV, None)
