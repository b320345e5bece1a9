"""The external-data jobs of ``benchmarks/run.py`` in an order of your choosing, with system time.

    python benchmarks/order_ab.py ROUNDS "JOB,JOB,..."   # job names as in RESULTS.md

Builds the 1.26 GB external model in a temporary folder, runs the named jobs round after round
in the given order (deleting each job's output and running ``sync`` before it, as run.py does)
and prints wall/system seconds: the place of a job in the round changes its system time on this
VM (benchmarks/PROFILE.md, round 7).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import run  # noqa: E402


def main() -> None:
    rounds, order = int(sys.argv[1]), sys.argv[2].split(",")
    with tempfile.TemporaryDirectory(prefix="osg-order-") as tmp:
        src, blocks = run.build_external(Path(tmp), 1200, "model.onnx")
        jobs = run.external_jobs(src, Path(tmp), blocks, full_floor=True, peers=["onnx-ir"])
        got: dict[str, list[str]] = {name: [] for name in order}
        for _ in range(rounds):
            for name in order:
                argv, cleanup, _ = jobs[name]
                for path in cleanup:
                    path.unlink(missing_ok=True)
                os.sync()
                start = time.perf_counter()
                proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, cwd=HERE.parent)
                _, _, usage = os.wait4(proc.pid, 0)
                got[name].append(f"{time.perf_counter() - start:.2f}/s{usage.ru_stime:.2f}")
        for name, samples in got.items():
            print(f"{name:45s}", " ".join(samples))


if __name__ == "__main__":
    main()
