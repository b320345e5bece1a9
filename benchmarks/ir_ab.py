"""onnx-ir's extract against onnxsurgeon's on one chain, alone, in rotating order with the floor.

    python benchmarks/ir_ab.py CHAIN.onnx ROUNDS WIDTH    # e.g. the distinct 90k chain, 7, 16

CHAIN.onnx is a chain of ``benchmarks/run.py`` (``build_chain``); both extract the first half
(up to ``relu{blocks/2 - 1}``, as run.py's jobs do). Prints each job's times and the ratio per
round and of the medians (benchmarks/PROFILE.md, round 7).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import onnx  # noqa: E402
import run  # noqa: E402


def main() -> None:
    src, rounds, width = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    blocks = len(onnx.load(src, load_external_data=False).graph.node) // 3
    mid = f"relu{blocks // 2 - 1}"
    py = sys.executable
    jobs = {
        "onnx-ir": [py, "-c", run.PEERS["onnx-ir"], src, "/tmp/ir_ab_ir.onnx", mid, width],
        "onnxsurgeon": [py, "-m", "onnxsurgeon", "extract", src, "-o", "/tmp/ir_ab_osg.onnx",
                        "--outputs", mid],
        "floor": [py, "-c", run.FLOOR, src, "/tmp/ir_ab_floor.onnx"],
    }
    times: dict[str, list[float]] = {name: [] for name in jobs}
    names = list(jobs)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            os.sync()
            start = time.perf_counter()
            subprocess.run(jobs[name], check=True, stdout=subprocess.DEVNULL, cwd=HERE.parent)
            times[name].append(time.perf_counter() - start)
    for name, got in times.items():
        print(name, " ".join(f"{t:.2f}" for t in got), f"median {statistics.median(got):.2f}")
    per_round = [a / b for a, b in zip(times["onnx-ir"], times["onnxsurgeon"], strict=True)]
    print("onnx-ir / onnxsurgeon per round:", " ".join(f"{x:.1f}" for x in per_round),
          f"; of the medians {statistics.median(times['onnx-ir']) / statistics.median(times['onnxsurgeon']):.1f}")


if __name__ == "__main__":
    main()
