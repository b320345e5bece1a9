"""Benchmark: extract the first half of a long MatMul/Add/Relu chain, file to file.

Usage: ``python benchmarks/bench_extract.py [--nodes N] [--repeat R]``

Every contender does the whole job from the saved model file to an output file, in this process,
median of ``--repeat`` runs:

* ``onnx.load + onnx.save`` — the floor (no surgery at all); the ratio column is relative to it;
* ``onnxsurgeon`` — ``onnxsurgeon.load`` + ``extract`` + ``onnxsurgeon.save``, and the verb
  alone between plain ``onnx.load`` / ``onnx.save`` (onnxsurgeon's load validates the model);
* ``onnx.utils.extract_model``, ``onnx-graphsurgeon`` and ``onnx-ir`` when importable;
* whole process, as STYLE.md measured: ``python -c "import onnx; onnx.save(onnx.load(IN), OUT)"``
  against ``python -m onnxsurgeon extract IN -o OUT --outputs T``, each a subprocess, interleaved.

The chain carries no value_info, so the extracted output's type must be inferred; a second model
with value_info on every tensor (as exporters usually write) is measured too. Results are printed,
written to ``benchmarks/results_extract.md`` and, when matplotlib is installed, plotted to
``benchmarks/results_extract.png``. Nothing is asserted: this is a script, not a test.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent


def build_chain(blocks: int, *, typed: bool, width: int = 4) -> onnx.ModelProto:
    """``blocks`` x (MatMul -> Add -> Relu) on x[1,width]; output ``y`` (same as tests' chain)."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((width, width)) * 0.5).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal((width,)).astype(np.float32), "B")
    nodes = []
    infos = []
    prev = "x"
    for i in range(blocks):
        out = "y" if i == blocks - 1 else f"relu{i}"
        nodes.append(helper.make_node("MatMul", [prev, "W"], [f"mm{i}"], name=f"MatMul_{i}"))
        nodes.append(helper.make_node("Add", [f"mm{i}", "B"], [f"add{i}"], name=f"Add_{i}"))
        nodes.append(helper.make_node("Relu", [f"add{i}"], [out], name=f"Relu_{i}"))
        if typed:
            for name in (f"mm{i}", f"add{i}") + ((out,) if out != "y" else ()):
                infos.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, width]))
        prev = out
    graph = helper.make_graph(
        nodes, "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])],
        [w, b], value_info=infos,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


# ----------------------------------------------------------------------------- contenders
def onnx_load_save(src: Path, dst: Path, mid: str) -> None:
    onnx.save(onnx.load(str(src)), str(dst))


def onnxsurgeon_extract(src: Path, dst: Path, mid: str) -> None:
    import onnxsurgeon
    from onnxsurgeon.surgery import extract

    model = onnxsurgeon.load(src)
    extract(model, [mid])
    onnxsurgeon.save(model, dst)


def onnx_io_with_extract(src: Path, dst: Path, mid: str) -> None:
    """The verb alone: plain onnx.load/onnx.save around onnxsurgeon's extract."""
    from onnxsurgeon.surgery import extract

    model = onnx.load(str(src))
    extract(model, [mid])
    onnx.save(model, str(dst))


def onnx_utils_extract(src: Path, dst: Path, mid: str) -> None:
    onnx.utils.extract_model(str(src), str(dst), ["x"], [mid])


def graphsurgeon_extract(src: Path, dst: Path, mid: str) -> None:
    import onnx_graphsurgeon as gs

    graph = gs.import_onnx(onnx.load(str(src)))
    tensor = graph.tensors()[mid]
    tensor.dtype, tensor.shape = np.float32, [1, 4]
    graph.outputs = [tensor]
    graph.cleanup()
    onnx.save(gs.export_onnx(graph), str(dst))


def onnx_ir_extract(src: Path, dst: Path, mid: str) -> None:
    import onnx_ir as ir
    from onnx_ir.passes.common import RemoveUnusedNodesPass

    model = ir.load(src)
    value = next(n for n in model.graph if n.outputs[0].name == mid).outputs[0]
    value.dtype, value.shape = ir.DataType.FLOAT, ir.Shape([1, 4])
    model.graph.outputs.clear()
    model.graph.outputs.append(value)
    RemoveUnusedNodesPass()(model)
    ir.save(model, dst)


def run_process(argv: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds (user + system, from getrusage of children) of one subprocess."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def whole_process_rows(src: Path, folder: Path, mid: str, repeat: int, label: str, kept: int):
    """The STYLE.md measurement: each job as its own ``python`` process (interpreter start and
    imports included), interleaved, median of ``repeat``."""
    floor_out, cli_out = folder / "proc_floor.onnx", folder / "proc_cli.onnx"
    jobs = {
        "python -c onnx.save(onnx.load(IN), OUT)": [
            sys.executable, "-c", "import onnx, sys; onnx.save(onnx.load(sys.argv[1]), sys.argv[2])",
            str(src), str(floor_out)],
        "python -m onnxsurgeon extract IN -o OUT --outputs T": [
            sys.executable, "-m", "onnxsurgeon", "extract", str(src), "-o", str(cli_out),
            "--outputs", mid],
    }
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in jobs}
    for _ in range(repeat):
        for name, argv in jobs.items():
            for out in (floor_out, cli_out):
                out.unlink(missing_ok=True)
            times[name].append(run_process(argv))
    names = list(jobs)
    floor = statistics.median(w for w, _ in times[names[0]])
    cpu_floor = statistics.median(c for _, c in times[names[0]])
    rows = []
    for name in names:
        seconds = statistics.median(w for w, _ in times[name])
        cpu = statistics.median(c for _, c in times[name])
        status = "-" if name == names[0] else check_output(cli_out, kept)
        rows.append((label, name, seconds, seconds / floor, cpu, cpu / cpu_floor, status))
        print(f"{label:20s} {name:46s} {seconds:7.3f} s {seconds / floor:6.2f}x   "
              f"cpu {cpu:7.3f} s {cpu / cpu_floor:6.2f}x  {status}", flush=True)
    return rows


def importable(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def run_once(
    fn: Callable[[Path, Path, str], None], src: Path, dst: Path, mid: str
) -> tuple[float, float]:
    """Wall and CPU seconds of one file-to-file run (CPU time is steadier on a busy machine)."""
    if dst.exists():
        dst.unlink()
    gc.collect()
    start, cpu = time.perf_counter(), time.process_time()
    fn(src, dst, mid)
    return time.perf_counter() - start, time.process_time() - cpu


def check_output(dst: Path, expected_nodes: int) -> str:
    model = onnx.load(str(dst), load_external_data=False)
    ok = len(model.graph.node) == expected_nodes
    return "ok" if ok else f"WRONG ({len(model.graph.node)} nodes)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=90_000, help="nodes in the chain (3 per block)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per contender (median)")
    parser.add_argument("--no-peers", action="store_true", help="only the floor and onnxsurgeon")
    parser.add_argument("--gs-max-nodes", type=int, default=15_000,
                        help="largest chain given to onnx-graphsurgeon (quadratic here)")
    parser.add_argument("--results", type=Path, default=HERE / "results_extract.md")
    args = parser.parse_args(argv)
    blocks = max(2, args.nodes // 3)
    mid = f"relu{blocks // 2 - 1}"
    kept = 3 * (blocks // 2)
    rows: list[tuple[str, str, float, float, float, float, str]] = []
    skipped: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench_extract_") as tmp:
        folder = Path(tmp)
        for typed in (False, True):
            label = "chain + value_info" if typed else "chain"
            src = folder / f"{'typed' if typed else 'plain'}.onnx"
            onnx.save(build_chain(blocks, typed=typed), str(src))
            contenders: list[tuple[str, Callable[[Path, Path, str], None]]] = [
                ("onnx.load + onnx.save", onnx_load_save),
                ("onnxsurgeon load + extract + save", onnxsurgeon_extract),
                ("onnx.load + onnxsurgeon extract + onnx.save", onnx_io_with_extract),
            ]
            if not args.no_peers and not typed:
                contenders.append(("onnx.utils.extract_model", onnx_utils_extract))
                if importable("onnx_graphsurgeon") and args.nodes <= args.gs_max_nodes:
                    contenders.append(("onnx-graphsurgeon", graphsurgeon_extract))
                elif importable("onnx_graphsurgeon"):
                    skipped.append(
                        f"onnx-graphsurgeon skipped above --gs-max-nodes={args.gs_max_nodes}: its "
                        "cleanup() is quadratic when one weight feeds every node (10.6 s at 9k nodes "
                        "on the reference machine)"
                    )
                if importable("onnx_ir"):
                    contenders.append(("onnx-ir", onnx_ir_extract))
            # round-robin: every repeat runs every contender once, so load changes on the
            # machine hit all of them alike
            times: dict[str, list[tuple[float, float]]] = {name: [] for name, _ in contenders}
            outputs: dict[str, Path] = {}
            for _ in range(args.repeat):
                for k, (name, fn) in enumerate(contenders):
                    outputs[name] = folder / f"out_{k}.onnx"
                    times[name].append(run_once(fn, src, outputs[name], mid))
            floor = statistics.median(w for w, _ in times[contenders[0][0]])
            cpu_floor = statistics.median(c for _, c in times[contenders[0][0]])
            for name, fn in contenders:
                seconds = statistics.median(w for w, _ in times[name])
                cpu = statistics.median(c for _, c in times[name])
                status = "-" if fn is onnx_load_save else check_output(outputs[name], kept)
                rows.append((label, name, seconds, seconds / floor, cpu, cpu / cpu_floor, status))
                print(f"{label:20s} {name:46s} {seconds:7.3f} s {seconds / floor:6.2f}x   "
                      f"cpu {cpu:7.3f} s {cpu / cpu_floor:6.2f}x  {status}", flush=True)
            if not typed:
                rows += whole_process_rows(src, folder, mid, args.repeat,
                                           "chain, whole process", kept)
    for note in skipped:
        print(note)
    write_results(args.results, rows, args.nodes, args.repeat, skipped)
    plot(args.results.with_suffix(".png"), rows)
    return 0


def write_results(path: Path, rows, nodes: int, repeat: int, notes: list[str]) -> None:
    import onnxruntime

    lines = [
        "# extract benchmark",
        "",
        f"Extract the first half of a {nodes}-node MatMul/Add/Relu chain, whole operation from file",
        f"to file, median of {repeat} round-robin runs in one process. Ratio: time / (onnx.load + onnx.save of the",
        "same model, same run). `chain` carries no value_info (the cut tensor's type is inferred);",
        "`chain + value_info` types every tensor, as exporters usually do. onnxsurgeon's own",
        "load validates the whole model and its save is atomic and fsynced (onnx.save is neither);",
        "the `onnx.load + onnxsurgeon extract + onnx.save` row isolates the verb. The",
        "`whole process` rows run each job as its own `python` process (start-up, imports and,",
        "for the CLI, the onnx.checker pass on the output included; CPU = user + system time of",
        "the child from getrusage), interleaved, median of the same number of runs.",
        "",
        f"Command: `python benchmarks/bench_extract.py --nodes {nodes} --repeat {repeat}`",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()},",
        f"onnx {onnx.__version__}, onnxruntime {onnxruntime.__version__}, "
        f"protobuf {_protobuf_version()}.",
        "",
        "| model | tool | wall s | wall ratio | CPU s | CPU ratio | output |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    lines += [f"| {m} | {t} | {s:.3f} | {r:.2f}x | {c:.3f} | {cr:.2f}x | {st} |"
              for m, t, s, r, c, cr, st in rows]
    if notes:
        lines += [""] + [f"- {n}" for n in notes]
    path.write_text("\n".join(lines) + "\n")


def _protobuf_version() -> str:
    from google.protobuf import __version__
    from google.protobuf.internal import api_implementation

    return f"{__version__} ({api_implementation.Type()})"


def plot(path: Path, rows) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot", file=sys.stderr)
        return
    labels = [f"{t}\n[{m}]" for m, t, *_ in rows]
    fig, ax = plt.subplots(figsize=(9, 0.6 * len(rows) + 1))
    ax.barh(labels, [row[2] for row in rows])
    ax.invert_yaxis()
    ax.set_xlabel("seconds (median), file to file")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    raise SystemExit(main())
