"""Benchmark: ``verify --deep`` against an output-only ``verify`` on Keras ResNet50, whole processes.

Usage: ``python benchmarks/bench_verify.py [--size 224] [--repeat 3]``

The model is the issue's: ``keras.applications.ResNet50`` (random weights, BatchNorm statistics
from one pass over random images, softmax head, NHWC input), converted with tf2onnx at opset 17
(cached under the system temp folder). A perturbed copy scales the largest convolution weight by
1.01 and adds 1e-3. Each measured command is a fresh ``python -m onnxsurgeon verify ...``
process run under ``/usr/bin/time`` (wall seconds, peak RSS), interleaved, median of
``--repeat`` runs:

* the floor: ``python -c "import onnx; onnx.load(A); onnx.load(B)"``;
* output-only: the default ``verify A B``. Caveat, measured: this ResNet50's softmax output is
  constant across the two samples (within tolerance), so for identical models the default verify
  already deepens automatically (its cost equals ``--deep``); for the perturbed pair the output
  differs, so the default run compares outputs only, then bisects to the first difference and
  checks that node alone (more than a pure output-only run, so that ratio is a lower bound);
* ``verify A B --deep`` (every shared tensor, layer by layer, in bounded batches).

Identical models (A A) and the perturbed pair (A B) are both measured. Results are printed and
written to ``benchmarks/results_verify.md``. Nothing is asserted: this is a script, not a test.
The machine may be shared: the ratios are against the output-only run measured in the same
round, which is the number to read.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def build(size: int, folder: Path) -> tuple[Path, Path]:
    """The ResNet50 ONNX model and its perturbed copy (built once, then cached)."""
    ref, cand = folder / f"resnet50_{size}.onnx", folder / f"resnet50_{size}_perturbed.onnx"
    if ref.exists() and cand.exists():
        return ref, cand
    import keras
    import numpy as np
    import onnx
    from onnx import numpy_helper
    from onnxsurgeon.converters import from_tf

    keras.utils.set_random_seed(0)
    net = keras.applications.ResNet50(weights=None, input_shape=(size, size, 3))
    net(np.random.default_rng(0).random((4, size, size, 3)).astype("float32"), training=True)
    from_tf(net, ref, opset=17)
    model = onnx.load(ref)
    inits = {t.name: t for t in model.graph.initializer}
    convs = [n.input[1] for n in model.graph.node if n.op_type == "Conv" and n.input[1] in inits]
    largest = max(convs, key=lambda n: int(np.prod(inits[n].dims)))
    value = numpy_helper.to_array(inits[largest])
    inits[largest].CopyFrom(numpy_helper.from_array(
        (value * 1.01 + 1e-3).astype(value.dtype), largest))
    onnx.save(model, cand)
    return ref, cand


def measure(cmd: list[str]) -> tuple[float, float, int]:
    """(wall seconds, peak RSS MB, exit code) of one process under /usr/bin/time."""
    with tempfile.NamedTemporaryFile(suffix=".txt") as out:
        proc = subprocess.run(["/usr/bin/time", "-f", "%e %M", "-o", out.name, *cmd],
                              capture_output=True, text=True)
        wall, rss = Path(out.name).read_text().split()[-2:]
    return float(wall), int(rss) / 1024, proc.returncode


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    folder = Path(tempfile.gettempdir()) / "onnxsurgeon-bench-verify"
    folder.mkdir(exist_ok=True)
    ref, cand = build(args.size, folder)
    osg = [sys.executable, "-m", "onnxsurgeon", "verify"]
    cases: dict[str, list[str]] = {}
    for label, b in (("same", ref), ("perturbed", cand)):
        cases[f"floor: load both ({label})"] = [
            sys.executable, "-c", f"import onnx; onnx.load({str(ref)!r}); onnx.load({str(b)!r})"]
        cases[f"output-only ({label})"] = [*osg, str(ref), str(b), "--json"]
        cases[f"--deep ({label})"] = [*osg, str(ref), str(b), "--deep", "--json"]
    runs: dict[str, list[tuple[float, float, int]]] = {k: [] for k in cases}
    for _ in range(args.repeat):
        for key, cmd in cases.items():  # interleaved, so load changes hit every case alike
            runs[key].append(measure(cmd))
    rows = []
    for key in cases:
        wall = statistics.median(r[0] for r in runs[key])
        rss = statistics.median(r[1] for r in runs[key])
        rows.append((key, wall, rss, runs[key][0][2]))
    base = {label: next(r for r in rows if r[0] == f"output-only ({label})")
            for label in ("same", "perturbed")}
    lines = [
        f"# verify --deep vs output-only verify: Keras ResNet50 {args.size}x{args.size}",
        "",
        f"Whole processes (`python -m onnxsurgeon verify ...`), median of {args.repeat} "
        f"interleaved runs; {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}. Ratios are against the "
        "output-only run of the same pair measured in the same rounds (the machine was shared).",
        "",
        "| command | wall s | peak RSS MB | exit | wall / output-only | RSS / output-only |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for key, wall, rss, code in rows:
        b = base["same" if "(same)" in key else "perturbed"]
        lines.append(f"| {key} | {wall:.2f} | {rss:.0f} | {code} | {wall / b[1]:.2f}x | "
                     f"{rss / b[2]:.2f}x |")
    lines += ["", "Read the perturbed rows: identical models already deepen by default on this model "
              "(its softmax output is constant across samples, so the default verify compares "
              "the shared tensors behind it), so their two rows cost the same. The perturbed "
              "output-only run includes the bisection and the node check."]
    text = "\n".join(lines) + "\n"
    print(text)
    (HERE / "results_verify.md").write_text(text)


if __name__ == "__main__":
    main()
