"""Benchmark: the hygiene verbs cleanup, toposort, outputs and set (issue 30) against the
protobuf floor, whole processes, in the same run.

Usage: ``python benchmarks/bench_hygiene_c.py [--blocks B] [--repeat R] [--external-mb MB]
[--reversed N]``

1. On the chain of ``B`` MatMul/Add/Relu blocks (3B nodes; default 30000 = 90k nodes, one
   shared weight): ``onnxsurgeon cleanup | toposort | outputs --add relu100 | set --weight W=..
   | fold | fold --no-fuse | opset --to 18`` against ``python -c "onnx.save(onnx.load())"``,
   interleaved, median of ``--repeat`` rounds. Target: at most 1.2x the floor (fold 1.5x).
2. On a ~``MB`` MB external-data chain for each ``--external-mb`` (``run.build_external``;
   default 1200; ``--external-mb 1200 2300`` for both benchmark sizes): the same verbs
   (``set`` replaces one 16 MiB weight); peak RSS (target: under 200 MB) and wall against
   ``cp`` of the data file plus the graph floor.
3. ``toposort`` of a reversed chain of ``N`` Neg nodes (default 1,000,000; 0 skips): wall and
   peak RSS (load sorts the main graph, toposort checks it and writes it).

Results go to ``benchmarks/results_hygiene_c.md``. Nothing is asserted: this is a script.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run import (  # noqa: E402
    FLOOR,
    GRAPH_FLOOR,
    PY,
    build_in_child,
    compile_sources,
    load_average,
    run_once,
)

BUILD_REVERSED = """
import sys, onnx
from onnx import helper, TensorProto
n = int(sys.argv[2])
g = helper.make_graph([], "rev", [helper.make_tensor_value_info("t0", TensorProto.FLOAT, [4])],
                      [helper.make_tensor_value_info(f"t{n}", TensorProto.FLOAT, [4])])
template = helper.make_node("Neg", ["a"], ["b"])
for i in range(n - 1, -1, -1):
    node = g.node.add()
    node.CopyFrom(template)
    node.input[0], node.output[0], node.name = f"t{i}", f"t{i + 1}", f"n{i}"
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), sys.argv[1])
"""


def _median(jobs: dict[str, list[str]], outs: dict[str, list[Path]], repeat: int
            ) -> dict[str, tuple[float, float, float]]:
    """name -> (median wall, max peak RSS MB, median CPU), the jobs interleaved round by
    round."""
    walls: dict[str, list[float]] = {k: [] for k in jobs}
    cpus: dict[str, list[float]] = {k: [] for k in jobs}
    rss: dict[str, float] = dict.fromkeys(jobs, 0.0)
    for _ in range(repeat):
        for name, argv in jobs.items():
            s = run_once(argv, outs[name])
            walls[name].append(s.wall)
            cpus[name].append(s.cpu)
            rss[name] = max(rss[name], s.rss_mb)
    return {k: (statistics.median(v), rss[k], statistics.median(cpus[k]))
            for k, v in walls.items()}


def _verbs(src: Path, out: Path, tag: str, mid: str, weight: str, npy: Path
           ) -> dict[str, list[str]]:
    osg = [PY, "-m", "onnxsurgeon"]
    return {
        "onnxsurgeon cleanup": [*osg, "cleanup", str(src), "-o", str(out / f"{tag}c.onnx")],
        "onnxsurgeon toposort": [*osg, "toposort", str(src), "-o", str(out / f"{tag}t.onnx")],
        "onnxsurgeon outputs --add": [*osg, "outputs", str(src), "-o", str(out / f"{tag}o.onnx"),
                                      "--add", mid],
        "onnxsurgeon set --weight": [*osg, "set", str(src), "-o", str(out / f"{tag}s.onnx"),
                                     "--weight", f"{weight}={npy}"],
        "onnxsurgeon fold": [*osg, "fold", str(src), "-o", str(out / f"{tag}f.onnx")],
        "onnxsurgeon fold --no-fuse": [*osg, "fold", str(src), "-o", str(out / f"{tag}n.onnx"),
                                       "--no-fuse"],
        "onnxsurgeon opset --to 18": [*osg, "opset", str(src), "-o", str(out / f"{tag}p.onnx"),
                                      "--to", "18"],
    }


def _outs(jobs: dict[str, list[str]]) -> dict[str, list[Path]]:
    found: dict[str, list[Path]] = {}
    for name, argv in jobs.items():
        o = Path(argv[argv.index("-o") + 1]) if "-o" in argv else Path(argv[-1])
        found[name] = [o, Path(str(o) + ".data")]
    return found


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--blocks", type=int, default=30000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--external-mb", type=int, nargs="+", default=[1200],
                        help="one external-data model per size (0: none)")
    parser.add_argument("--reversed", type=int, default=1_000_000)
    args = parser.parse_args()
    compile_sources()
    lines = ["# hygiene verbs (issue 30): cleanup, toposort, outputs, set, fold, opset vs the floor",
             "", f"Command: `python benchmarks/bench_hygiene_c.py --blocks {args.blocks} "
             f"--repeat {args.repeat} --external-mb {' '.join(map(str, args.external_mb))} --reversed "
             f"{args.reversed}`", "", f"Load average at start: {load_average()}", ""]
    with tempfile.TemporaryDirectory(prefix="bench_hygiene_c_") as tmpdir:
        tmp = Path(tmpdir)
        src = tmp / "chain.onnx"
        build_in_child("chain", src, args.blocks, 0, 16)
        npy = tmp / "W.npy"
        np.save(npy, np.full((16, 16), 0.5, np.float32))
        jobs = {"floor: onnx load+save": [PY, "-c", FLOOR, str(src), str(tmp / "floor.onnx")],
                **_verbs(src, tmp, "", "relu100", "W", npy)}
        res = _median(jobs, _outs(jobs), args.repeat)
        floor, _, floor_cpu = res["floor: onnx load+save"]
        lines += [f"## {3 * args.blocks}-node chain (median of {args.repeat})", "",
                  "| job | wall s | x floor | CPU s | CPU x floor | peak RSS MB |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {k} | {w:.3f} | {w / floor:.2f} | {c:.3f} | {c / floor_cpu:.2f} | {r:.0f} |"
                  for k, (w, r, c) in res.items()]
        for mb in (m for m in args.external_mb if m):
            ext = tmp / "ext"
            blocks = int(build_in_child("external", ext, mb, "big.onnx"))
            big = ext / "big.onnx"
            wnpy = tmp / "W0.npy"
            pattern = (np.arange(2048 * 2048, dtype=np.float32) % 5).astype(np.float32)
            np.save(wnpy, pattern.reshape(2048, 2048))
            outdir = tmp / "extout"
            outdir.mkdir()
            ejobs = {"cp of the data file": ["cp", str(ext / "big.onnx.data"),
                                             str(outdir / "cp.data")],
                     "floor of the graph": [PY, "-c", GRAPH_FLOOR, str(big),
                                            str(outdir / "graph.onnx")],
                     **_verbs(big, outdir, "x", f"relu{blocks // 2}", "W0", wnpy)}
            eouts = _outs(ejobs)
            eouts["cp of the data file"] = [outdir / "cp.data"]
            eres = _median(ejobs, eouts, 1)
            lines += ["", f"## external data, {mb} MB ({blocks} weights), one "
                      "round", "", "| job | wall s | peak RSS MB |", "|---|---|---|"]
            lines += [f"| {k} | {w:.2f} | {r:.0f} |" for k, (w, r, _) in eres.items()]
            shutil.rmtree(ext)
            shutil.rmtree(outdir)
        if args.reversed:
            rev = tmp / "rev.onnx"
            subprocess.run([PY, "-c", BUILD_REVERSED, str(rev), str(args.reversed)], check=True)
            rjobs = {"floor: onnx load+save": [PY, "-c", FLOOR, str(rev), str(tmp / "rf.onnx")],
                     "onnxsurgeon toposort": [PY, "-m", "onnxsurgeon", "toposort", str(rev),
                                              "-o", str(tmp / "rt.onnx")]}
            rres = _median(rjobs, _outs(rjobs), 1)
            lines += ["", f"## toposort of a reversed {args.reversed}-node chain, one round", "",
                      "| job | wall s | peak RSS MB |", "|---|---|---|"]
            lines += [f"| {k} | {w:.2f} | {r:.0f} |" for k, (w, r, _) in rres.items()]
    text = "\n".join(lines) + "\n"
    (HERE / "results_hygiene_c.md").write_text(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
