"""``python -m onnxsurgeon`` and the ``onnxsurgeon`` command: the command line.

Before numpy loads, OpenBLAS is told to start one thread unless the caller chose otherwise
(``OPENBLAS_NUM_THREADS``): the command line does no BLAS work, and the threads OpenBLAS starts
at import spin on the other core (~0.1 s of CPU a process, 0.02-0.1 s of wall time on two
cores: a fifth of a small rewrite). Child processes (fleet jobs) inherit the setting.
"""

from __future__ import annotations

import os
import sys


def main() -> int:
    """Run the command line on ``sys.argv`` and return its exit code."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from .cli import main as cli_main

    return cli_main()


def run() -> None:
    """The program (``python -m onnxsurgeon``, the ``onnxsurgeon`` script): :func:`main`, then
    exit without freeing the heap object by object (a large model leaves hundreds of thousands
    of objects: ~0.03 s of a 90k-node rewrite); the exit handlers run and the standard streams
    are flushed first. With other threads alive, or an exit status that is not a number, the
    interpreter exits as usual."""
    import atexit
    import threading

    try:
        code = main()
    except SystemExit as exc:
        if exc.code is not None and not isinstance(exc.code, int):
            raise
        code = exc.code or 0
    if threading.active_count() > 1:
        sys.exit(code)
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # stdout closed by its reader (| head): see cli.EXIT_PIPE
        code = code or 141
    os._exit(code)


if __name__ == "__main__":
    run()
