"""load() with the C passes on and off (``ONNXSURGEON_SCAN``), each sample a fresh process.

    python benchmarks/load_ab.py MODEL.onnx ROUNDS

Prints the medians of load's whole time, its tensor check and its structural pass
(benchmarks/PROFILE.md, round 7).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

ONE = r'''
import sys, time
import onnxsurgeon.io as io
spent = {"tensors": 0.0, "structure": 0.0}
def timed(real, key):
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            spent[key] += time.perf_counter() - start
    return wrapper
io.check_tensors = timed(io.check_tensors, "tensors")
io.scan.initializers = timed(io.scan.initializers, "tensors")
io.validate_producers = timed(io.validate_producers, "structure")
start = time.perf_counter()
io.load(sys.argv[1])
print(time.perf_counter() - start, spent["tensors"], spent["structure"])
'''


def main() -> None:
    model, rounds = sys.argv[1], int(sys.argv[2])
    got: dict[str, list[tuple[float, ...]]] = {"1": [], "0": []}
    for _ in range(rounds):
        for mode in got:
            env = dict(os.environ, ONNXSURGEON_SCAN=mode, PYTHONPATH=str(ROOT))
            out = subprocess.run([sys.executable, "-c", ONE, model], env=env, check=True,
                                 capture_output=True, text=True).stdout.split()
            got[mode].append(tuple(map(float, out)))
    for mode, rows in got.items():
        load, tensors, structure = (statistics.median(col) for col in zip(*rows, strict=True))
        print(f"C passes {'on ' if mode == '1' else 'off'}: load {load:.3f} s, tensor check "
              f"{tensors:.3f} s, structural pass {structure:.3f} s (medians)")


if __name__ == "__main__":
    main()
