"""Insert the built-in ``identity`` block at every node output of onnx's own one-operator backend
test models (``onnx.backend.test.case.node``, generated in memory: no download) that onnxruntime
loads, and count the refusals by reason.

    python benchmarks/insert_sweep.py            # JSON on stdout

Measured for issue 11 (onnx 1.23.2, onnxruntime 1.32.0, 1,884 cases, 1,765 load in onnxruntime,
13,608 inserts): before the change 70 inserts were refused for the three reasons the issue names
(27 opset 1..7 hosts, 8 ai.onnx.ml-only hosts, 35 sequence/optional values); after it, none for
those reasons (an opset-13 host is raised to 14 for a sequence identity when none of its ops
changes meaning). The remaining 300 refusals are outputs nothing reads (the block would have no
reader; ``as_output`` is the way there).
"""

from __future__ import annotations

import collections
import json
import time
import warnings

import onnx
import onnx.backend.test.case.node as node_cases
import onnxruntime as ort

from onnxsurgeon.errors import SurgeryError
from onnxsurgeon.surgery import insert

REASONS = (
    ("supported opsets", "old opset"),
    ("default-domain", "no default-domain import (ai.onnx.ml only)"),
    ("dtype, which is unknown", "dtype unknown (sequence/optional value)"),
    ("nothing reads", "nothing reads the tensor"),
)


def main() -> None:
    warnings.filterwarnings("ignore")
    ort.set_default_logger_severity(4)
    cases = node_cases.collect_testcases(None)
    loaded = tried = 0
    refused: collections.Counter[str] = collections.Counter()
    examples: dict[str, str] = {}
    t0 = time.perf_counter()
    for case in cases:
        model = case.model
        if model is None:
            continue
        try:
            ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        except Exception:  # noqa: BLE001 - onnxruntime does not run this op: not in the set
            continue
        loaded += 1
        for out in [o for n in model.graph.node for o in n.output if o]:
            probe = onnx.ModelProto()
            probe.CopyFrom(model)
            tried += 1
            try:
                insert(probe, out, op="identity")
            except SurgeryError as exc:
                text = str(exc)
                key = next((label for needle, label in REASONS if needle in text), text[:100])
                refused[key] += 1
                examples.setdefault(key, case.name)
    print(json.dumps({"cases": len(cases), "onnxruntime_loads": loaded, "inserts": tried,
                      "refused": dict(refused.most_common()), "example_case": examples,
                      "seconds": round(time.perf_counter() - t0, 1)}, indent=1))


if __name__ == "__main__":
    main()
