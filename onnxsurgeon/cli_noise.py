"""Framework log noise, captured: TensorFlow's C++ logging, torch.onnx and tf2onnx warnings and
the like write to file descriptor 2 while a framework step runs. The CLI points descriptor 2 at a
temporary file for the duration of such a step and drops it, unless ``-v`` asks to see it. On a
terminal a phase line says what is running, since these steps take seconds."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator


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
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # a replaced sys.stderr (tests): nothing to do
        fd = 2
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
