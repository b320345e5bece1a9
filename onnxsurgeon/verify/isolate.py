"""Isolated runs for untrusted models: onnxruntime in a child process with limits.

With isolation on, every session a verification opens (its models, variants exposing
intermediates, cut models) lives in its own child process (``_worker.py``, which imports only
numpy and onnxruntime). The child gets the staged model's path, sets an address-space limit
(``RLIMIT_AS``) before loading anything, and exchanges inputs and outputs through temporary
``.npz`` files in the verification's private workspace (never pickles). The parent waits for each
answer at most the wall-time limit; a child that runs longer is killed. Hitting a limit raises a
:class:`ResourceLimitError` whose one-line message names the limit and the option that raises it.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import select
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import SurgeryError, UsageError
from .run import ModelRunError, default_threads

DEFAULT_TIMEOUT = 30.0
"""Seconds one isolated step (loading a model, or one run) may take."""
DEFAULT_MEMORY_MB = 4096
"""Address space of the child process, in MiB (numpy + onnxruntime alone take ~350 MiB)."""
WORKER = Path(__file__).with_name("_worker.py")


class ResourceLimitError(SurgeryError):
    """An isolated model run hit its wall-time or memory limit."""


class ModelTimeoutError(ResourceLimitError):
    """An isolated model run took longer than the wall-time limit."""


class ModelMemoryError(ResourceLimitError):
    """An isolated model run needed more memory than the address-space limit."""


@dataclass(frozen=True)
class Limits:
    """Limits of an isolated run: seconds per step and MiB of address space (None: unlimited)."""

    timeout: float = DEFAULT_TIMEOUT
    memory_mb: int | None = DEFAULT_MEMORY_MB


def make_limits(isolate: bool = False, timeout: float | None = None,
                memory_limit: int | None = None) -> Limits | None:
    """The :class:`Limits` for the verification options (None: run in-process).

    Giving ``timeout`` or ``memory_limit`` implies ``isolate``.

    Raises:
        UsageError: a limit that is not positive, or a memory limit where ``resource`` is missing.
    """
    if not isolate and timeout is None and memory_limit is None:
        return None
    if timeout is not None and not timeout > 0:
        raise UsageError(f"timeout {timeout!r} must be a positive number of seconds")
    if memory_limit is not None and (isinstance(memory_limit, bool) or int(memory_limit) <= 0):
        raise UsageError(f"memory limit {memory_limit!r} must be a positive number of MB")
    try:
        import resource  # noqa: F401 - POSIX only
    except ImportError:
        raise UsageError("isolated runs need a POSIX system (the resource module); drop "
                         "--isolate") from None
    return Limits(timeout=float(timeout) if timeout is not None else DEFAULT_TIMEOUT,
                  memory_mb=int(memory_limit) if memory_limit is not None else DEFAULT_MEMORY_MB)


def _decode(layout: Any, data: Mapping[str, np.ndarray]) -> Any:
    if not isinstance(layout, dict):
        raise ModelRunError("the isolated worker answered an unreadable output layout")
    if "array" in layout:
        return data[str(layout["array"])]
    if "list" in layout:
        return [_decode(v, data) for v in layout["list"]]
    if "dict" in layout:
        return {k: _decode(v, data) for k, v in layout["dict"]}
    raise ModelRunError("the isolated worker answered an unreadable output layout")


def _status(code: int | None) -> str:
    if code is not None and code < 0:
        return f"signal {-code}"
    return f"exit code {code}"


class IsolatedRunner:
    """A session living in a child process; same interface as :class:`~.run.Runner`."""

    def __init__(self, path: Path, read_as: dict[str, str], label: str, limits: Limits,
                 workdir: Path, *, threads: int = 0) -> None:
        self.read_as = read_as
        self.label = label
        self.limits = limits
        self._workdir = workdir
        self._count = 0
        self._names = list(dict.fromkeys(read_as.values()))
        env = {**os.environ, "MALLOC_ARENA_MAX": "2"}
        self._proc: subprocess.Popen[bytes] | None = subprocess.Popen(
            [sys.executable, str(WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, env=env, cwd=str(workdir))
        try:
            answer = self._ask({"model": str(path), "names": self._names,
                                "threads": threads or default_threads(),
                                "memory_mb": limits.memory_mb}, "loading")
        except BaseException:
            self.close(kill=True)
            raise
        self._inputs = set(answer.get("inputs", []))
        self._optional = set(answer.get("optional", []))  # inputs with a default value

    def _ask(self, request: dict[str, Any], doing: str) -> dict[str, Any]:
        proc = self._proc
        if proc is None or proc.stdin is None or proc.stdout is None:
            raise ModelRunError(f"the isolated {self.label} session is closed")
        try:
            proc.stdin.write((json.dumps(request) + "\n").encode())
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self._died(doing)
        ready, _, _ = select.select([proc.stdout], [], [], self.limits.timeout)
        if not ready:
            self.close(kill=True)
            raise ModelTimeoutError(
                f"the {self.label} model "
                f"{'ran' if doing == 'running' else 'took'} longer than {self.limits.timeout:g} s"
                f"{'' if doing == 'running' else ' ' + doing}; raise --timeout if it is expected to"
            )
        line = proc.stdout.readline()
        if not line:
            self._died(doing)
        try:
            answer = json.loads(line)
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            self.close(kill=True)
            raise ModelRunError(f"the isolated worker answered garbage while {doing} the "
                                f"{self.label} model")
        if not answer.get("ok"):
            message = str(answer.get("message", ""))[:300]
            if answer.get("kind") == "memory" and self.limits.memory_mb:
                self.close(kill=True)
                raise self._memory_error(doing)
            verb = "load" if doing == "loading" else "run"
            raise ModelRunError(
                f"onnxruntime cannot {verb} the {self.label} model (isolated): {message}; check "
                "the inputs (dtype, shape, value ranges) and the model"
            )
        return answer

    def _memory_error(self, doing: str, how: str = "") -> ModelMemoryError:
        return ModelMemoryError(
            f"the {self.label} model needed more than {self.limits.memory_mb} MB of memory while "
            f"{doing}{how}; raise --memory-limit if it is expected to"
        )

    def _died(self, doing: str) -> None:
        proc = self._proc
        code = proc.wait() if proc is not None else None
        self.close(kill=True)
        if self.limits.memory_mb and code is not None and (code < 0 or code == 134):
            # under RLIMIT_AS a failed allocation inside onnxruntime can abort the process
            raise self._memory_error(doing, f" (the process died with {_status(code)})")
        raise ModelRunError(f"onnxruntime crashed while {doing} the {self.label} model "
                            f"({_status(code)}); the model is broken or hostile")

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, Any]:
        """Run once in the child; returns requested name -> value. Raises :class:`ModelRunError`
        or a :class:`ResourceLimitError`."""
        feed = {k: np.asarray(v) for k, v in feeds.items()
                if k in self._inputs or k in self._optional}
        missing = sorted(self._inputs - set(feed))
        if missing:
            raise ModelRunError(
                f"{self.label} model needs input(s) {missing[:8]} that were not given; add them "
                "to the inputs file"
            )
        self._count += 1
        stem = self._workdir / f"isolated-{id(self):x}-{self._count}"
        in_path, out_path = stem.with_suffix(".in.npz"), stem.with_suffix(".out.npz")
        try:
            names = list(feed)
            # arrays by position: an input named 'file' or 'allow_pickle' is no keyword clash
            np.savez(in_path, *(feed[n] for n in names))
            del feed
            answer = self._ask({"feeds": str(in_path), "names": names, "out": str(out_path)},
                               "running")
            layout = answer.get("layout")
            if not isinstance(layout, dict):
                raise ModelRunError("the isolated worker answered no outputs")
            with np.load(out_path, allow_pickle=False) as data:
                arrays = {k: data[k] for k in data.files}
            by_name = {n: _decode(layout.get(n), arrays) for n in self._names}
        finally:
            for p in (in_path, out_path):
                with contextlib.suppress(OSError):
                    p.unlink()
        return {req: by_name[got] for req, got in self.read_as.items()}

    def only(self, names: Sequence[str]) -> IsolatedRunner:
        """This runner returning ``names`` only (each one it computes)."""
        if list(self.read_as) == list(names):
            return self
        view = copy.copy(self)
        view.read_as = {n: self.read_as[n] for n in names}
        return view

    def close(self, *, kill: bool = False) -> None:
        """End the child (politely: close its stdin; ``kill``: at once)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if not kill and proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                kill = True
        if kill:
            with contextlib.suppress(OSError):
                proc.kill()
            proc.wait()
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


__all__ = ["DEFAULT_MEMORY_MB", "DEFAULT_TIMEOUT", "IsolatedRunner", "Limits", "ModelMemoryError",
           "ModelTimeoutError", "ResourceLimitError", "make_limits"]
