"""The ``onnx.checker`` policy a saved model passes (the guarantee every CLI output carries).

:func:`onnxsurgeon.io.save` applies it through its ``check=`` option, so API users get the same
guarantee as the CLI. The full check (strict shape inference included) costs ~0.2 s per 45k
nodes, several times the surgery itself on large graphs, hence the levels of :class:`Check`.

When a written file fails while the model it was loaded from fails the same check, the failure
is not the rewrite's doing: the file is kept and a warning is returned. Otherwise the file (and
its data file) is removed and :class:`OutputCheckError` is raised.
"""

from __future__ import annotations

import contextlib
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # onnx is imported lazily: the CLI reads FULL_CHECK_MAX_NODES at start-up
    import onnx

FULL_CHECK_MAX_NODES = 20_000
"""Outputs with more nodes than this are not given the full check by ``Check.AUTO`` / ``SMALL``."""


class Check(str, Enum):
    """How :func:`onnxsurgeon.io.save` checks the file it wrote with ``onnx.checker``."""

    OFF = "off"
    """No check."""
    STRUCTURE = "structure"
    """The plain check: SSA, topological order, scoping, op schemas."""
    FULL = "full"
    """The plain check plus strict shape inference."""
    AUTO = "auto"
    """FULL up to :data:`FULL_CHECK_MAX_NODES` nodes, STRUCTURE above (what the CLI runs)."""
    SMALL = "small"
    """FULL up to :data:`FULL_CHECK_MAX_NODES` nodes, nothing above (the default of ``save``:
    on where it is cheap)."""

    def __str__(self) -> str:
        return self.value


class OutputCheckError(RuntimeError):
    """A written model fails ``onnx.checker`` although the model it came from passes.

    Not a :class:`~onnxsurgeon.errors.SurgeryError`: it means a bug in onnxsurgeon (the CLI
    reports it as an internal error), or an API caller who built an invalid model.
    """


def node_count(model: onnx.ModelProto, limit: int) -> int:
    """Nodes of the main graph plus every nested body; counting stops once past ``limit`` (so a
    large graph is not walked in Python just to be counted)."""
    from .index import iter_graphs

    graph = model.graph
    count = len(graph.node)
    if count > limit:
        return count
    for g in iter_graphs(graph):
        if g is not graph:
            count += len(g.node)
            if count > limit:
                break
    return count


def full_check_for(model: onnx.ModelProto, level: Check) -> bool | None:
    """Whether ``level`` asks for the full check (True), the plain one (False) or none (None)."""
    if level is Check.OFF:
        return None
    if level is Check.FULL or level is Check.STRUCTURE:
        return level is Check.FULL
    small = node_count(model, FULL_CHECK_MAX_NODES) <= FULL_CHECK_MAX_NODES
    if level is Check.SMALL:
        return True if small else None
    return small


def check_written(path: Path, *, full: bool, reference: Path | None,
                  written: bytes | None = None) -> str | None:
    """Run ``onnx.checker`` on the file at ``path``.

    ``written``: the very bytes just written to ``path`` (a model without external data), so
    the checker parses them from memory instead of reading the file back (the same check: an
    external-data model is always checked from its path, where the checker resolves its files).

    Returns None when it passes, a one-line warning when it fails as ``reference`` (the model it
    came from) does too.

    Raises:
        OutputCheckError: the file fails (and ``reference`` passes or is None); the file and its
            ``.data`` file are removed first.
    """
    import onnx

    try:
        onnx.checker.check_model(str(path) if written is None else written, full_check=full)
    except Exception as exc:  # noqa: BLE001 - the checker raises several types
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if reference is not None:
            try:
                onnx.checker.check_model(str(reference), full_check=full)
            except Exception:  # noqa: BLE001 - the input already fails: not our doing
                return f"the output fails onnx.checker as the input does ({first[:160]})"
        for p in (path, path.with_name(path.name + ".data")):
            with contextlib.suppress(OSError):
                p.unlink()
        raise OutputCheckError(f"output failed onnx.checker: {first[:300]}") from exc
    return None
