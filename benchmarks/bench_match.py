"""``match`` of a 5-node pattern and ``replace`` of all its matches on a 90,000-node model,
whole processes, against the protobuf floor measured in the same run (issue 28).

The model is ``benchmarks/run.py``'s MatMul/Add/Relu chain (one weight for all); the pattern is
MatMul -> Add -> Relu -> MatMul -> Add (15,000 non-overlapping matches on 90,000 nodes), the
replacement the same computation with Sum for Add. Each job is its own ``python`` process,
interleaved round-robin, median of ``--repeat``; CPU = user + system time of the child. Rows
for the chain as built (no value_info: replace infers the site types once) and with value_info
(as exporters write it). Targets: match 1.5x, replace 2x the floor.

    python benchmarks/bench_match.py --nodes 90000 --repeat 5 [--out benchmarks/results_match.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

PATTERN = """g (float[1,W] p, float[W,W] w, float[W] b, float[W,W] w2, float[W] b2) => (float[1,W] y) {
  h = MatMul(p, w)
  a = Add(h, b)
  r = Relu(a)
  h2 = MatMul(r, w2)
  y = Add(h2, b2)
}
"""
TARGETS = {"match": 1.5, "replace": 2.0}


def _timed(cmd: list[str]) -> tuple[float, float, int]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc.returncode


def main() -> None:
    import onnx
    from run import build_chain, compile_sources

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=90000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    compile_sources()  # the timed processes run byte-compiled code, as an installed package
    folder = Path(tempfile.mkdtemp(prefix="bench_match_"))
    chain = build_chain(args.nodes // 3, distinct=False, width=4)
    plain = folder / "chain.onnx"
    onnx.save(chain, str(plain))
    typed = folder / "chain_vi.onnx"
    onnx.save(onnx.shape_inference.infer_shapes(chain), str(typed))
    pattern, replacement = folder / "p.txt", folder / "r.txt"
    pattern.write_text(PATTERN)
    replacement.write_text(PATTERN.replace("Add(", "Sum("))
    py = sys.executable
    rows: list[str] = []
    for label, model in (("chain", plain), ("chain + value_info", typed)):
        jobs = {
            "floor": [py, "-c", f"import onnx; onnx.save(onnx.load({str(model)!r}), "
                                f"{str(folder / 'floor.onnx')!r})"],
            "match": [py, "-m", "onnxsurgeon", "match", str(model), "--pattern", str(pattern)],
            "replace": [py, "-m", "onnxsurgeon", "replace", str(model), "-o",
                        str(folder / "out.onnx"), "--pattern", str(pattern), "--replacement",
                        str(replacement), "--force"],
        }
        times: dict[str, list[tuple[float, float]]] = {k: [] for k in jobs}
        codes: dict[str, int] = {}
        for _ in range(args.repeat):
            for name, cmd in jobs.items():
                wall, cpu, code = _timed(cmd)
                times[name].append((wall, cpu))
                codes[name] = code
        med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v))
               for k, v in times.items()}
        fw, fc = med["floor"]
        show = {"floor": "python -c onnx.save(onnx.load(IN), OUT)",
                "match": "python -m onnxsurgeon match IN --pattern P",
                "replace": "python -m onnxsurgeon replace IN -o OUT --pattern P --replacement R"}
        for name, (w, c) in med.items():
            target = f"{TARGETS[name]:.1f}x" if name in TARGETS else "-"
            if codes[name] != 0:
                ok = f"exit {codes[name]}"
            elif name not in TARGETS:
                ok = "-"
            else:  # a target holds when both the wall and the CPU ratio are within it
                ok = "met" if max(w / fw, c / fc) <= TARGETS[name] else "missed"
            rows.append(f"| {label} | {show[name]} | {w:.3f} | {w / fw:.2f}x | {c:.3f} | "
                        f"{c / fc:.2f}x | {target} | {ok} |")
    import onnxruntime

    text = "\n".join([
        "# match / replace benchmark", "",
        f"`match` of a 5-node pattern (MatMul -> Add -> Relu -> MatMul -> Add) and `replace` of "
        f"all its {args.nodes // 6} matches on a {args.nodes}-node MatMul/Add/Relu chain, whole "
        "processes, interleaved, median of "
        f"{args.repeat} runs; ratio = time / the protobuf floor (load + save with onnx) of the "
        "same run. CPU = user + system of the child.", "",
        f"Command: `python benchmarks/bench_match.py --nodes {args.nodes} --repeat {args.repeat}`",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs (shared while measured), Python "
        f"{platform.python_version()}, onnx {onnx.__version__}, onnxruntime "
        f"{onnxruntime.__version__}.", "",
        "| model | job | wall s | wall ratio | CPU s | CPU ratio | target | result |",
        "|---|---|---:|---:|---:|---:|---:|---|", *rows, ""])
    print(text)
    if args.out is not None:
        args.out.write_text(text)
    shutil.rmtree(folder, ignore_errors=True)  # the built chains: nothing left in the temp dir


if __name__ == "__main__":
    main()
