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


if __name__ == "__main__":
    sys.exit(main())
