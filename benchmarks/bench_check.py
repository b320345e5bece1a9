"""The output check's cost on one model, in-process (issue 14, benchmarks/PROFILE.md rounds 4
and 5): for extract, insert and reroute at the middle of a MatMul/Add/Relu chain and a copy of
all of it (``benchmarks/run.py`` ``build_chain``), the touched check (``io.vouched_by_edits``),
the whole C++ ``onnx.checker`` pass on the serialized output, and save's walk over every tensor
it skips; min of ``--repeat``.

    python benchmarks/bench_check.py CHAIN.onnx [--repeat 5]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import onnx

from onnxsurgeon import io
from onnxsurgeon.external import iter_tensors
from onnxsurgeon.session import Session
from onnxsurgeon.surgery import copy, extract, insert, reroute


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    blocks = len(onnx.load(args.model, load_external_data=False).graph.node) // 3
    mid = blocks // 2 - 1
    verbs: dict[str, Callable[[Any], Any]] = {
        "extract": lambda m: extract(m, [f"relu{mid}"]),
        "insert": lambda m: insert(m, f"relu{mid}", op="l2_normalize", params={"axis": 1}),
        "reroute": lambda m: reroute(m, f"relu{mid}", f"add{mid}"),
        "copy": lambda m: copy(m, ["y"], prefix="twin/"),
    }
    for name, verb in verbs.items():
        best = [float("inf")] * 3
        vouched = False
        for _ in range(args.repeat):
            session = Session(io.load(args.model), loaded=True)
            m = session.model
            verb(m)
            t0 = time.perf_counter()
            vouched = io.vouched_by_edits(m, session.journal)
            session.close()
            t1 = time.perf_counter()
            data = m.proto.SerializeToString(deterministic=True)
            t2 = time.perf_counter()
            onnx.checker.check_model(data)
            t3 = time.perf_counter()
            list(iter_tensors(m.proto))
            t4 = time.perf_counter()
            best = [min(b, t) for b, t in zip(best, (t1 - t0, t3 - t2, t4 - t3), strict=True)]
        print(f"{name}: touched check {best[0]:.3f} s (vouched: {vouched}), whole C++ check "
              f"{best[1]:.3f} s, tensor walk {best[2]:.3f} s")


if __name__ == "__main__":
    main()
