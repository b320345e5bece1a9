"""The child side of isolated runs: one onnxruntime session in a process of its own.

Run as a script (``python _worker.py``) by :mod:`onnxsurgeon.verify.isolate`; it imports only
numpy and onnxruntime. Protocol: one JSON object per line on stdin, one reply per line on stdout.

1. ``{"model": PATH, "names": [...], "threads": N, "memory_mb": M}`` -- set the address-space
   limit (before anything large is loaded), create the session; reply ``{"ok": true, "inputs": [...]}``.
2. ``{"feeds": IN.npz, "names": [...], "out": OUT.npz}`` -- run once on the arrays of ``IN.npz``
   (``arr_0``, ``arr_1``, ... are the inputs ``names`` in order); write the
   outputs to ``OUT.npz`` (tensors as arrays; sequences and maps as arrays plus a JSON layout in
   the reply, never pickles); reply ``{"ok": true, "layout": {...}}``.

Failures reply ``{"ok": false, "kind": "memory"|"error", "message": ...}``.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

ORT_LOG_ENV = "ONNXSURGEON_ORT_LOG_SEVERITY"
"""onnxruntime's log severity for the sessions verification creates (0 verbose ... 4 fatal)."""


def ort_log_severity() -> int:
    """The severity of every session (here and in :mod:`onnxsurgeon.verify.run`): 4, fatal
    only, unless ``$ONNXSURGEON_ORT_LOG_SEVERITY`` says otherwise (the CLI's ``-v`` sets 2).
    onnxruntime's errors reach the caller as exceptions, which name the failure in one line;
    its own (coloured) log line of the same error would only repeat it on stderr."""
    try:
        return min(4, max(0, int(os.environ.get(ORT_LOG_ENV, "4"))))
    except ValueError:
        return 4


def _set_memory_limit(memory_mb: int | None) -> None:
    if not memory_mb:
        return
    import resource

    limit = int(memory_mb) * 1024 * 1024
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def _is_memory(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    text = str(exc).lower()
    return any(k in text for k in ("bad_alloc", "failed to allocate", "cannot allocate",
                                   "out of memory", "std::length_error"))


def _encode(value: Any, arrays: dict[str, Any]) -> Any:
    """A JSON layout for ``value``; its arrays go into ``arrays`` (keys ``a0``, ``a1``, ...)."""
    import numpy as np

    if isinstance(value, np.ndarray):
        key = f"a{len(arrays)}"
        arrays[key] = value
        return {"array": key}
    if isinstance(value, (list, tuple)):
        return {"list": [_encode(v, arrays) for v in value]}
    if isinstance(value, dict):
        return {"dict": [[k if isinstance(k, (int, str)) else str(k), _encode(v, arrays)]
                         for k, v in value.items()]}
    return _encode(np.asarray(value), arrays)


def _reply(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _failure(exc: BaseException) -> dict[str, Any]:
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[-1][:300]
    return {"ok": False, "kind": "memory" if _is_memory(exc) else "error", "message": text}


def main() -> int:
    first = sys.stdin.readline()
    if not first:
        return 0
    request = json.loads(first)
    try:
        _set_memory_limit(request.get("memory_mb"))
        import numpy as np
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        options.log_severity_level = ort_log_severity()
        if request.get("threads"):
            options.intra_op_num_threads = int(request["threads"])
        session = ort.InferenceSession(str(request["model"]), options,
                                       providers=["CPUExecutionProvider"])
        names = list(request["names"])
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which decides
        _reply(_failure(exc))
        return 1
    _reply({"ok": True, "inputs": [i.name for i in session.get_inputs()],
            "optional": [i.name for i in session.get_overridable_initializers()]})
    for line in sys.stdin:
        job = json.loads(line)
        try:
            with np.load(job["feeds"], allow_pickle=False) as data:
                feeds = {n: data[f"arr_{i}"] for i, n in enumerate(job["names"])}
            outs = session.run(names, feeds)
            del feeds
            arrays: dict[str, Any] = {}
            layout = {n: _encode(v, arrays) for n, v in zip(names, outs, strict=True)}
            del outs
            np.savez(job["out"], **arrays)
            del arrays
        except BaseException as exc:  # noqa: BLE001 - reported to the parent, which decides
            _reply(_failure(exc))
            continue
        _reply({"ok": True, "layout": layout})
    return 0


if __name__ == "__main__":
    sys.exit(main())
