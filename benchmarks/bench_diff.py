"""Drawing a rewrite costs the size of the change, not of the model: whole processes on the
90k-node chain (30,000 x MatMul/Add/Relu).

Rows, each the median of ``--repeat`` runs of a fresh ``python`` process:
  floor           python -c "import onnx; onnx.load(BEFORE); onnx.load(AFTER)"
  diff            python -m onnxsurgeon diff BEFORE AFTER -o page.html   (one insert between them)
  diff --context 4
  insert          python -m onnxsurgeon insert BEFORE -o AFTER --at relu15000 --op scale:factor=2
  insert --html   the same, also drawing the page (it reloads BEFORE to compare)
  the floor and the diff again on the chain with a value_info for every tensor

Targets (issue 13): diff <= 3 s and page <= 1 MB. Usage:
    python benchmarks/bench_diff.py [--blocks 30000] [--repeat 3] [--out benchmarks/results_diff.md]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import onnx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_extract import build_chain  # noqa: E402


def timed(argv: list[str]) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds of one child process. CPU time is the steadier
    figure on a shared, loaded machine."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=30_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        before, after, page = t / "before.onnx", t / "after.onnx", t / "page.html"
        onnx.save(build_chain(args.blocks, typed=False), before)
        mid = f"relu{args.blocks // 2}"
        insert = [py, "-m", "onnxsurgeon", "insert", str(before), "-o", str(after), "--at", mid,
                  "--op", "scale:factor=2"]
        subprocess.run(insert, check=True, stdout=subprocess.DEVNULL)
        typed_before, typed_after = t / "typed_before.onnx", t / "typed_after.onnx"
        onnx.save(build_chain(args.blocks, typed=True), typed_before)
        subprocess.run([py, "-m", "onnxsurgeon", "insert", str(typed_before), "-o",
                        str(typed_after), "--at", mid, "--op", "scale:factor=2"], check=True,
                       stdout=subprocess.DEVNULL)
        cases = {
            "floor: onnx.load both models": [py, "-c", f"import onnx; onnx.load({str(before)!r}); "
                                             f"onnx.load({str(after)!r})"],
            "diff (context 2)": [py, "-m", "onnxsurgeon", "diff", str(before), str(after), "-o",
                                 str(page)],
            "diff --context 4": [py, "-m", "onnxsurgeon", "diff", str(before), str(after), "-o",
                                 str(t / "page4.html"), "--context", "4"],
            "floor: onnx.load both typed models": [
                py, "-c", f"import onnx; onnx.load({str(typed_before)!r}); "
                          f"onnx.load({str(typed_after)!r})"],
            "diff, typed chain (value_info on every tensor)": [
                py, "-m", "onnxsurgeon", "diff", str(typed_before), str(typed_after), "-o",
                str(t / "typed.html")],
            "insert": insert,
            "insert --html": [*insert, "--html", str(t / "insert.html")],
        }
        times: dict[str, list[float]] = {k: [] for k in cases}
        cpus: dict[str, list[float]] = {k: [] for k in cases}
        for _ in range(args.repeat):
            for name, cmd in cases.items():
                wall, cpu = timed(cmd)
                times[name].append(wall)
                cpus[name].append(cpu)
        sizes = {p.name: p.stat().st_size for p in (page, t / "page4.html", t / "insert.html",
                                                     t / "typed.html")}
        nodes = len(onnx.load(before).graph.node)
    floor = statistics.median(times["floor: onnx.load both models"])
    cpu_floor = statistics.median(cpus["floor: onnx.load both models"])
    lines = [f"# bench_diff: {nodes} nodes, median of {args.repeat} whole processes", "",
             "| command | wall median s | wall min s | x floor | CPU median s | CPU x floor |",
             "|---|---|---|---|---|---|"]
    for name, ts in times.items():
        med, cpu = statistics.median(ts), statistics.median(cpus[name])
        lines.append(f"| {name} | {med:.2f} | {min(ts):.2f} | {med / floor:.2f} | {cpu:.2f} | "
                     f"{cpu / cpu_floor:.2f} |")
    lines += ["", "page sizes: " + ", ".join(f"{k} {v / 1024:.0f} KB" for k, v in sizes.items()),
              "", "Target: diff <= 3 s, page <= 1 MB."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
