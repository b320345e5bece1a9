"""Benchmark: ``dims`` (issue 30) against the protobuf floor, whole processes, in the same run.

Usage: ``python benchmarks/bench_dims.py [--blocks B] [--repeat R] [--external-mb MB ...]
[--before DIR]``

1. On the chain of ``B`` MatMul/Add/Relu blocks (3B nodes; default 30000 = 90k nodes, one
   shared weight, x[1,4]): ``onnxsurgeon dims --batch dynamic`` against
   ``python -c "onnx.save(onnx.load())"``, interleaved, median of ``--repeat`` rounds (target:
   at most 1.2x the floor); ``--before DIR`` adds the same command run from another checkout
   (an A/B against earlier code). The same on the chain at a static batch of 8 (a broadcast
   meets the old batch: the cheap pass proves no dim hard-codes it).
2. On each ~``MB`` MB external-data chain (``run.build_external``; default 1200 and 2300): the
   same command, one round: wall and peak RSS (target: under 200 MB) beside ``cp`` of the data
   file and the graph's own load+save (dims writes the output's data file: a copy).

Results go to ``benchmarks/results_dims.md``. Nothing is asserted: this is a script.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run import FLOOR, GRAPH_FLOOR, PY, build_in_child, compile_sources, load_average, run_once  # noqa: E402

AT_BATCH_8 = ("import onnx, sys; m = onnx.load(sys.argv[1]); "
              "[setattr(v.type.tensor_type.shape.dim[0], 'dim_value', 8) "
              "for v in (m.graph.input[0], m.graph.output[0])]; onnx.save(m, sys.argv[2])")
BEFORE = ("import runpy, sys; sys.path.insert(0, {dir!r}); "
          "runpy.run_module('onnxsurgeon', run_name='__main__')")


def _median(jobs: dict[str, list[str]], repeat: int) -> dict[str, tuple[float, float]]:
    """name -> (median wall, max peak RSS MB), the jobs interleaved round by round."""
    walls: dict[str, list[float]] = {k: [] for k in jobs}
    rss: dict[str, float] = dict.fromkeys(jobs, 0.0)
    for _ in range(repeat):
        for name, argv in jobs.items():
            out = Path(argv[argv.index("-o") + 1] if "-o" in argv else argv[-1])
            s = run_once(argv, [out, Path(str(out) + ".data")])
            walls[name].append(s.wall)
            rss[name] = max(rss[name], s.rss_mb)
    return {k: (statistics.median(v), rss[k]) for k, v in walls.items()}


def _dims(src: Path, out: Path, before: str | None = None) -> list[str]:
    head = [PY, "-c", BEFORE.format(dir=before)] if before else [PY, "-m", "onnxsurgeon"]
    return [*head, "dims", str(src), "-o", str(out), "--batch", "dynamic"]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--blocks", type=int, default=30000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--external-mb", type=int, nargs="*", default=[1200, 2300])
    parser.add_argument("--before", default=None, metavar="DIR",
                        help="a checkout whose dims is timed beside this one's")
    args = parser.parse_args()
    compile_sources()
    command = " ".join(["python benchmarks/bench_dims.py", *sys.argv[1:]])
    lines = ["# dims vs the floor (issue 30)", "", f"Command: `{command}`", "",
             f"Load average at start: {load_average()} (2 cores shared with other jobs)", ""]
    with tempfile.TemporaryDirectory(prefix="bench_dims_") as tmpdir:
        tmp = Path(tmpdir)
        src = tmp / "chain.onnx"
        build_in_child("chain", src, args.blocks, 0, 4)
        jobs = {"floor: onnx load+save": [PY, "-c", FLOOR, str(src), str(tmp / "floor.onnx")],
                "onnxsurgeon dims --batch dynamic": _dims(src, tmp / "dims.onnx")}
        if args.before:
            jobs["the same, code of --before"] = _dims(src, tmp / "before.onnx", args.before)
        res = _median(jobs, args.repeat)
        floor = res["floor: onnx load+save"][0]
        lines += [f"## {3 * args.blocks}-node chain (median of {args.repeat}, interleaved)", "",
                  "| job | wall s | x floor | peak RSS MB |", "|---|---|---|---|"]
        lines += [f"| {k} | {w:.3f} | {w / floor:.2f} | {r:.0f} |" for k, (w, r) in res.items()]
        lines.append(f"\nLoad average after the chain: {load_average()}")
        src8 = tmp / "chain8.onnx"  # the same chain at a static batch of 8
        subprocess.run([PY, "-c", AT_BATCH_8, str(src), str(src8)], check=True)
        jobs8 = {"floor: onnx load+save": [PY, "-c", FLOOR, str(src8), str(tmp / "f8.onnx")],
                 "onnxsurgeon dims --batch dynamic": _dims(src8, tmp / "dims8.onnx")}
        if args.before:
            jobs8["the same, code of --before"] = _dims(src8, tmp / "before8.onnx", args.before)
        res8 = _median(jobs8, args.repeat)
        floor8 = res8["floor: onnx load+save"][0]
        lines += ["", f"## the same chain at batch 8 (x[8,4]; median of {args.repeat}, "
                  "interleaved)", "", "| job | wall s | x floor | peak RSS MB |",
                  "|---|---|---|---|"]
        lines += [f"| {k} | {w:.3f} | {w / floor8:.2f} | {r:.0f} |" for k, (w, r) in res8.items()]
        lines.append(f"\nLoad average after the batch-8 chain: {load_average()}")
        for mb in args.external_mb:
            ext = tmp / f"ext{mb}"
            blocks = int(build_in_child("external", ext, mb, "big.onnx"))
            big = ext / "big.onnx"
            out = tmp / f"extout{mb}"
            out.mkdir()
            ejobs = {"cp of the data file": ["cp", str(ext / "big.onnx.data"), str(out / "cp.data")],
                     "floor of the graph": [PY, "-c", GRAPH_FLOOR, str(big), str(out / "g.onnx")],
                     "onnxsurgeon dims --batch dynamic": _dims(big, out / "dims.onnx")}
            eres = _median(ejobs, 1)
            lines += ["", f"## external data, {mb} MB ({blocks} weights), one round", "",
                      "| job | wall s | peak RSS MB |", "|---|---|---|"]
            lines += [f"| {k} | {w:.2f} | {r:.0f} |" for k, (w, r) in eres.items()]
            shutil.rmtree(ext)
            shutil.rmtree(out)
    lines.append(f"\nLoad average at the end: {load_average()}")
    text = "\n".join(lines) + "\n"
    (HERE / "results_dims.md").write_text(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
