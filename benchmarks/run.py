"""All benchmarks in one command, as whole processes, against a floor measured in the same run.

Usage::

    python benchmarks/run.py                      # the full run (tens of minutes on 2 cores)
    python benchmarks/run.py --smoke --out DIR    # seconds: tiny sizes, one repeat (the tests)

Every job is its own ``python`` process (interpreter start, imports, load, work, save), run
round-robin with the other jobs of its row group ``--repeat`` times (``--external-repeat``
for the external-data groups; each round in its own shuffled, seeded order); the table gives
medians (and the fastest round's wall time) of
wall time, CPU time (user + system of the child) and peak RSS (``wait4``). Each ratio divides by
the floor of the same model measured in the same rounds: ``python -c "import onnx;
onnx.save(onnx.load(IN), OUT)"`` (for copy, the same floor on the copy's own result; for external
data, ``cp`` of the bytes written plus a load and save of the graph alone). The machine load
(``/proc/loadavg``) is recorded before and after each group, since a shared machine moves the
absolute numbers; the ratios are what to compare. Issue 14's targets are judged from the table
by ``benchmarks/targets.py`` and written at the top of the report.

Models (written to a temporary folder and deleted afterwards):

* ``shared``: N/3 blocks MatMul -> Add -> Relu on x[1,4], one weight and bias for all blocks;
* ``distinct``: the same with a 16x16 weight and a bias per block (2N/3 initializers);
* ``external``: a 16-block chain of 2048x2048 float32 weights in an external data file
  (``--external-mb``, about 1.2 GB by default), and one over 2 GB (``--big-mb``).

Verbs: ``extract`` (the first half), ``copy`` (the whole chain, independent weights),
``insert l2_normalize`` and ``reroute`` (in the middle). Peers (extract only):
``onnx.utils.extract_model``, onnx-graphsurgeon and onnx-ir, each up to ``--peer-max-nodes``
nodes (onnx-graphsurgeon's cleanup is quadratic on the shared-weight chain: capped lower,
``--gs-shared-max-nodes``). Results go to ``OUT/RESULTS.md`` and ``OUT/results.png``.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
PY = sys.executable
FLOOR = "import onnx, sys; onnx.save(onnx.load(sys.argv[1]), sys.argv[2])"
GRAPH_FLOOR = ("import onnx, sys; onnx.save(onnx.load(sys.argv[1], load_external_data=False), "
               "sys.argv[2])")
FLOOR_EXTERNAL = ("import onnx, sys; onnx.save(onnx.load(sys.argv[1]), sys.argv[2], "
                  "save_as_external_data=True, location=sys.argv[2].split('/')[-1] + '.data')")
PEERS = {
    "onnx.utils.extract_model": (
        "import onnx.utils, sys; onnx.utils.extract_model(sys.argv[1], sys.argv[2], ['x'], "
        "[sys.argv[3]], check_model=False)"),
    "onnx-graphsurgeon": (
        "import sys, numpy as np, onnx, onnx_graphsurgeon as gs\n"
        "graph = gs.import_onnx(onnx.load(sys.argv[1]))\n"
        "t = graph.tensors()[sys.argv[3]]\n"
        "t.dtype, t.shape = np.float32, [1, int(sys.argv[4])]\n"
        "graph.outputs = [t]\n"
        "graph.cleanup()\n"
        "onnx.save(gs.export_onnx(graph), sys.argv[2])"),
    "onnx-ir": (
        "import sys, onnx_ir as ir\n"
        "from onnx_ir.passes.common import RemoveUnusedNodesPass\n"
        "model = ir.load(sys.argv[1])\n"
        "v = next(n for n in model.graph if n.outputs[0].name == sys.argv[3]).outputs[0]\n"
        "v.dtype, v.shape = ir.DataType.FLOAT, ir.Shape([1, int(sys.argv[4])])\n"
        "model.graph.outputs.clear()\n"
        "model.graph.outputs.append(v)\n"
        "RemoveUnusedNodesPass()(model)\n"
        "ir.save(model, sys.argv[2])"),
}
# onnx-ir's ir.save above keeps an external tensor's reference as it is (no byte is written: the
# output names the input's data file by the same relative location, which is not there when the
# output is in another folder). For external data this variant writes the kept bytes, as
# onnxsurgeon does without --share-data.
IR_WITH_DATA = PEERS["onnx-ir"].replace(
    "ir.save(model, sys.argv[2])",
    "import os; ir.save(model, sys.argv[2], external_data=os.path.basename(sys.argv[2]) + '.data')")


# ----------------------------------------------------------------------------------- models
def build_chain(blocks: int, *, distinct: bool, width: int) -> object:
    """``blocks`` x (MatMul -> Add -> Relu) on x[1,width]; one weight for all, or one each."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits, nodes, prev = [], [], "x"
    if not distinct:
        inits = [numpy_helper.from_array((rng.standard_normal((width, width)) * 0.5)
                                         .astype(np.float32), "W"),
                 numpy_helper.from_array(rng.standard_normal(width).astype(np.float32), "B")]
    for i in range(blocks):
        w, b = (f"W{i}", f"B{i}") if distinct else ("W", "B")
        if distinct:
            inits.append(numpy_helper.from_array(
                (rng.standard_normal((width, width)) * 0.25).astype(np.float32), w))
            inits.append(numpy_helper.from_array(rng.standard_normal(width).astype(np.float32), b))
        out = "y" if i == blocks - 1 else f"relu{i}"
        nodes += [helper.make_node("MatMul", [prev, w], [f"mm{i}"], name=f"MatMul_{i}"),
                  helper.make_node("Add", [f"mm{i}", b], [f"add{i}"], name=f"Add_{i}"),
                  helper.make_node("Relu", [f"add{i}"], [out], name=f"Relu_{i}")]
        prev = out
    graph = helper.make_graph(nodes, "chain",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])],
                              inits)
    return onnx.helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                  ir_version=8)


def build_external(folder: Path, megabytes: int, name: str) -> tuple[Path, int]:
    """A chain of D x D float32 weights (D = 2048, 16 MiB each) in one external data file of
    about ``megabytes``; real bytes (a repeated pattern), not a sparse file. Returns the model
    path and its block count."""
    import onnx
    from onnx import TensorProto, helper

    dim = 2048 if megabytes >= 64 else 256
    per = dim * dim * 4
    blocks = max(2, round(megabytes * 2**20 / per))
    folder.mkdir(parents=True, exist_ok=True)
    data_name = name + ".data"
    pattern = (np.arange(dim * dim, dtype=np.float32) % 7 - 3).astype(np.float32) * 1e-3
    inits, nodes, prev = [], [], "x"
    with open(folder / data_name, "wb") as f:
        for i in range(blocks):
            f.write((pattern * (1 + i % 3)).tobytes())
            t = TensorProto(name=f"W{i}", data_type=TensorProto.FLOAT, dims=[dim, dim],
                            data_location=TensorProto.EXTERNAL)
            for key, value in (("location", data_name), ("offset", str(i * per)),
                               ("length", str(per))):
                e = t.external_data.add()
                e.key, e.value = key, value
            inits.append(t)
            out = "y" if i == blocks - 1 else f"relu{i}"
            nodes += [helper.make_node("MatMul", [prev, f"W{i}"], [f"mm{i}"], name=f"MatMul_{i}"),
                      helper.make_node("Relu", [f"mm{i}"], [out], name=f"Relu_{i}")]
            prev = out
    graph = helper.make_graph(nodes, "ext", [helper.make_tensor_value_info("x", 1, [1, dim])],
                              [helper.make_tensor_value_info("y", 1, [1, dim])], inits)
    path = folder / name
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), str(path))
    return path, blocks


def build_in_child(kind: str, *args: object) -> str:
    """Build a model in a child process and return what it prints. The benchmark process must
    stay small: Linux carries a process's peak RSS across fork + exec, so every job it starts
    would report at least the parent's peak."""
    proc = subprocess.run([PY, __file__, "--build", kind, *map(str, args)], check=True,
                          capture_output=True, text=True)
    return proc.stdout.strip()


def _build_main(kind: str, args: Sequence[str]) -> None:
    import onnx

    if kind == "chain":
        path, blocks, distinct, width = args
        onnx.save(build_chain(int(blocks), distinct=distinct == "1", width=int(width)), path)
    else:
        folder, megabytes, name = args
        _, blocks = build_external(Path(folder), int(megabytes), name)
        print(blocks)


def compile_sources() -> None:
    """Byte-compile the onnxsurgeon being measured, as ``pip install`` does. An editable install
    or a fresh checkout has no ``.pyc`` files, and under ``PYTHONDONTWRITEBYTECODE`` the timed
    processes never write them: each would compile every module it imports at start-up (~0.07 s
    a process), a cost no installed user pays. The peers and onnx come compiled from
    site-packages."""
    import compileall
    from importlib.util import find_spec

    spec = find_spec("onnxsurgeon")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        compileall.compile_dir(folder, quiet=1)


# ---------------------------------------------------------------------------- measurement
@dataclass
class Sample:
    wall: float
    cpu: float
    rss_mb: float


def run_once(argv: Sequence[str], cleanup: Sequence[Path]) -> Sample:
    """One child process: wall, CPU (user + system) and peak RSS from ``wait4``. Before it
    starts, untimed, the files of its previous round are deleted and every dirty page is
    written back (``sync``): a job that does not flush what it wrote (cp, onnx.save, onnx-ir)
    would otherwise leave its write-back, up to gigabytes, to the disk time of whichever job
    runs when the kernel gets to it (each job is measured as on an idle machine)."""
    for p in cleanup:
        p.unlink(missing_ok=True)
    os.sync()
    start = time.perf_counter()
    proc = subprocess.Popen(list(argv), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, argv[:6]))}... failed ({proc.returncode}): "
                           f"{err.strip()[-400:]}")
    return Sample(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024)


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


REPORTED_KIB = Path("/sys/module/page_reporting/parameters/reported_kib")


def reported_kib() -> int | None:
    """KiB of free memory this VM has handed back to its host so far (free page reporting,
    where the kernel counts it), or None. Pages handed back cost the next process that
    allocates them system time (benchmarks/PROFILE.md, rounds 7 and 8)."""
    try:
        return int(REPORTED_KIB.read_text())
    except (OSError, ValueError):
        return None


def startup_seconds(repeat: int = 5) -> float:
    """Median wall time of ``python -c "import onnx"``: what every timed process pays before
    its work (a slow release of a dependency shows here first: ml_dtypes 0.7.0 made it 1.0 s)."""
    walls = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run([PY, "-c", "import onnx"], check=True)
        walls.append(time.perf_counter() - start)
    return statistics.median(walls)


@dataclass
class Row:
    group: str
    size: str
    job: str
    wall: float
    cpu: float
    rss_mb: float
    floor: str
    ratio: float
    cpu_ratio: float
    best: float = float("nan")  # the fastest round's wall time


def measure_group(group: str, size: str, jobs: dict[str, tuple[list[str], list[Path], str]],
                  repeat: int, rows: list[Row], loads: list[str], seed: int = 0) -> None:
    """Round-robin ``repeat`` times over ``jobs`` (name -> argv, files to delete first, the
    name of its floor job); append medians and ratios to ``rows``. Each round runs the jobs in
    its own order (shuffled, seeded by the group, the round and ``seed``: the same order in
    every run of that seed).
    On this VM a process writing gigabytes a second or three after another one freed
    gigabytes pays seconds of system time for fresh pages (measured: the same `cp` 0.38 s and
    4.08 s), so no job may always run in the same place, nor the same distance after another
    (a rotation keeps the distances: reroute and copy paid every round)."""
    loads.append(f"{group} {size}: load {load_average()} before")
    returned = reported_kib()
    samples: dict[str, list[Sample]] = {name: [] for name in jobs}
    for r in range(repeat):
        order = list(jobs)
        random.Random(f"{group} {size} round {r}" + (f" seed {seed}" if seed else "")).shuffle(
            order)
        for name in order:
            argv, cleanup, _ = jobs[name]
            samples[name].append(run_once(argv, cleanup))
    loads[-1] += f", {load_average()} after"
    after = reported_kib()
    if returned is not None and after is not None:
        loads[-1] += (f"; the VM returned {(after - returned) / 2**20:.1f} GB of free memory to "
                      "its host meanwhile")
    med = {name: Sample(statistics.median(s.wall for s in ss), statistics.median(s.cpu for s in ss),
                        statistics.median(s.rss_mb for s in ss)) for name, ss in samples.items()}
    for name, (_, _, floor) in jobs.items():
        m = med[name]
        if floor.startswith("="):  # a sum of floors: "=JOB & JOB"
            parts = [med[p] for p in floor[1:].split(" & ")]
            fw, fc = sum(p.wall for p in parts), sum(p.cpu for p in parts)
        else:
            fw, fc = med[floor].wall, med[floor].cpu
        rows.append(Row(group, size, name, m.wall, m.cpu, m.rss_mb, floor.lstrip("="),
                        m.wall / fw, m.cpu / fc if fc else float("nan"),
                        min(x.wall for x in samples[name])))


def chain_jobs(src: Path, tmp: Path, blocks: int, width: int, peers: Sequence[str],
               share_data: bool = False) -> dict[str, tuple[list[str], list[Path], str]]:
    mid = f"relu{blocks // 2 - 1}"
    add = f"add{blocks // 2 - 1}"
    o = {k: tmp / f"{k}.onnx" for k in ("floor", "extract", "copy", "insert", "reroute",
                                        "copy_floor", *peers)}
    # the copy's floor reads a copy result made before the rounds start
    copy_result = tmp / "copy_result.onnx"
    if not copy_result.exists():
        subprocess.run([PY, "-m", "onnxsurgeon", "copy", str(src), "-o", str(copy_result),
                        "--outputs", "y", "--prefix", "twin/"], check=True,
                       stdout=subprocess.DEVNULL)
    osg = [PY, "-m", "onnxsurgeon"]
    share = ["--share-data"] if share_data else []

    def out(k: str) -> list[Path]:
        return [o[k], Path(str(o[k]) + ".data")]

    jobs: dict[str, tuple[list[str], list[Path], str]] = {
        "floor: onnx load+save": ([PY, "-c", FLOOR, str(src), str(o["floor"])], out("floor"),
                                  "floor: onnx load+save"),
        "floor of copy: onnx load+save of the copy's result": (
            [PY, "-c", FLOOR, str(copy_result), str(o["copy_floor"])], out("copy_floor"),
            "floor of copy: onnx load+save of the copy's result"),
        "onnxsurgeon extract (half)": (
            [*osg, "extract", str(src), "-o", str(o["extract"]), "--outputs", mid, *share],
            out("extract"), "floor: onnx load+save"),
        "onnxsurgeon copy (whole, independent)": (
            [*osg, "copy", str(src), "-o", str(o["copy"]), "--outputs", "y", "--prefix", "twin/",
             *share], out("copy"), "floor of copy: onnx load+save of the copy's result"),
        "onnxsurgeon insert l2_normalize": (
            [*osg, "insert", str(src), "-o", str(o["insert"]), "--at", mid, "--op",
             "l2_normalize:axis=1", *share], out("insert"), "floor: onnx load+save"),
        "onnxsurgeon reroute": (
            [*osg, "reroute", str(src), "-o", str(o["reroute"]), "--from", mid, "--to", add,
             *share], out("reroute"), "floor: onnx load+save"),
    }
    for peer in peers:
        jobs[f"{peer} extract (half)"] = (
            [PY, "-c", PEERS[peer], str(src), str(o[peer]), mid, str(width)], out(peer),
            "floor: onnx load+save")
    return jobs


def external_jobs(src: Path, tmp: Path, blocks: int, *, full_floor: bool,
                  peers: Sequence[str]) -> dict[str, tuple[list[str], list[Path], str]]:
    mid, pre = f"relu{blocks // 2 - 1}", f"mm{blocks // 2 - 1}"
    data = Path(str(src) + ".data")
    osg = [PY, "-m", "onnxsurgeon"]
    outdir = tmp / "out"  # another folder: copies the bytes
    outdir.mkdir(exist_ok=True)

    def out(p: Path) -> list[Path]:
        return [p, Path(str(p) + ".data")]

    jobs: dict[str, tuple[list[str], list[Path], str]] = {
        "cp of the data file": (["cp", str(data), str(outdir / "cp.data")], [outdir / "cp.data"],
                                "cp of the data file"),
        "cp + fsync of the data file": (
            ["sh", "-c", 'cp "$1" "$2" && sync "$2"', "sh", str(data), str(outdir / "cps.data")],
            [outdir / "cps.data"], "cp of the data file"),
        "floor of the graph: onnx load+save without weights": (
            [PY, "-c", GRAPH_FLOOR, str(src), str(outdir / "graph.onnx")],
            out(outdir / "graph.onnx"), "floor of the graph: onnx load+save without weights"),
    }
    if full_floor:
        jobs["onnx load+save (weights included)"] = (
            [PY, "-c", FLOOR_EXTERNAL, str(src), str(outdir / "full.onnx")],
            out(outdir / "full.onnx"), "onnx load+save (weights included)")
    copied = "=cp of the data file & floor of the graph: onnx load+save without weights"
    graph_only = "floor of the graph: onnx load+save without weights"
    for verb, extra in (("extract", ["--outputs", mid]),
                        ("insert", ["--at", mid, "--op", "l2_normalize:axis=1"]),
                        ("reroute", ["--from", mid, "--to", pre]),
                        ("copy", ["--outputs", "y", "--prefix", "twin/"])):
        target = outdir / f"{verb}.onnx"
        jobs[f"onnxsurgeon {verb}"] = ([*osg, verb, str(src), "-o", str(target), *extra],
                                       out(target), copied)
        shared = src.parent / f"shared_{verb}.onnx"
        jobs[f"onnxsurgeon {verb} --share-data"] = (
            [*osg, verb, str(src), "-o", str(shared), *extra, "--share-data"], out(shared),
            graph_only)
    for peer in peers:
        target = outdir / f"{peer}.onnx"
        jobs[f"{peer} extract"] = ([PY, "-c", PEERS[peer], str(src), str(target), mid, "2048"],
                                   out(target), copied)
        if peer == "onnx-ir":
            target = outdir / "onnx-ir-data.onnx"
            jobs["onnx-ir extract, writing its data file"] = (
                [PY, "-c", IR_WITH_DATA, str(src), str(target), mid, "2048"], out(target), copied)
    return jobs


# ---------------------------------------------------------------------------------- report
def versions() -> dict[str, str]:
    from importlib import metadata

    found = {"python": platform.python_version()}
    for dist in ("onnxsurgeon", "onnx", "onnxruntime", "protobuf", "numpy", "ml_dtypes",
                 "onnx-ir", "onnx-graphsurgeon"):
        try:
            found[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            found[dist] = "not installed"
    try:
        rev = subprocess.run(["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, check=True).stdout.strip()
        found["onnxsurgeon"] += f" (git {rev})"
    except (OSError, subprocess.CalledProcessError):
        pass
    # asked as the timed jobs import it (same interpreter, same working folder)
    built = subprocess.run([PY, "-c", "import onnxsurgeon.scan as s; print(s.available())"],
                           capture_output=True, text=True).stdout.strip()
    found["onnxsurgeon"] += {"True": ", its C extension built"}.get(
        built, ", without its C extension (Python passes)")
    return found


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f", {kb / 2**20:.0f} GB RAM"
    except (OSError, ValueError, IndexError):
        pass
    return f"{platform.machine()}, {os.cpu_count()} CPUs ({cpu}){mem}, {platform.system()}"


def write_report(out: Path, rows: list[Row], loads: list[str], notes: list[str],
                 command: str, startup: float) -> Path:
    import targets

    lines = ["# Benchmarks: whole processes against the protobuf floor", "",
             f"Command: `{command}`", "", f"Machine: {machine()}.", "",
             "Versions: " + ", ".join(f"{k} {v}" for k, v in versions().items()) + ".", "",
             f"Start-up: `python -c \"import onnx\"` takes {startup:.2f} s (median of 5), paid "
             "by every process below, floors included.", "",
             "## Issue 14's targets in this run", "",
             "Judged by `benchmarks/targets.py` from the table below (medians).", "",
             *targets.markdown(rows), "",
             "## Every job", "",
             "Every job is a separate `python` process (start-up, imports, load, work, save and, "
             "for onnxsurgeon, the `onnx.checker` pass on the output), jobs of a group run "
             "round-robin, each round in its own shuffled (seeded) order, medians of the repeats. "
             "The ratio divides by the floor named in the "
             "row, measured in the same rounds; CPU = user + system time of the child, RSS = its "
             "peak resident memory. The machine is shared, so absolute times move with the load "
             "recorded below; compare the ratios.", ""]
    lines += ["| model | nodes | job | wall s | ratio | best s | CPU s | CPU ratio | peak RSS MB "
              "| floor |", "|---|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        floor = "-" if r.job == r.floor else r.floor
        lines.append(f"| {r.group} | {r.size} | {r.job} | {r.wall:.2f} | {r.ratio:.2f}x | "
                     f"{r.best:.2f} | {r.cpu:.2f} | {r.cpu_ratio:.2f}x | {r.rss_mb:.0f} | "
                     f"{floor} |")
    lines += ["", "## Machine load during the run (1, 5, 15 min load average)", ""]
    lines += [f"- {entry}" for entry in loads]
    if notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    lines.append("")
    path = out / "RESULTS.md"
    path.write_text("\n".join(lines))
    return path


def plot(out: Path, rows: list[Row]) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    groups = [g for g in ("shared", "distinct") if any(r.group == g for r in rows)]
    if not groups:
        return None
    fig, axes = plt.subplots(1, len(groups), figsize=(6 * len(groups), 4.5), squeeze=False)
    for ax, group in zip(axes[0], groups, strict=True):
        jobs = list(dict.fromkeys(r.job for r in rows if r.group == group))
        for job in jobs:
            pts = sorted((int(r.size), r.wall) for r in rows if r.group == group and r.job == job)
            style = "--" if job.startswith("floor") else "-"
            ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker="o", label=job)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("nodes")
        ax.set_ylabel("wall s (median, whole process)")
        ax.set_title(f"{group} weights chain")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][-1].legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    path = out / "results.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ------------------------------------------------------------------------------------ main
def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--build"]:
        _build_main(argv[1], argv[2:])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,30000,90000,270000",
                        help="node counts of the chains (comma separated; 0: no chains, e.g. "
                             "to run only the external-data models)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--external-repeat", type=int, default=7,
                        help="rounds of the external-data groups, whose jobs the VM's cost of "
                             "fresh pages hits at random (more rounds than --repeat)")
    parser.add_argument("--shapes", default="shared,distinct")
    parser.add_argument("--peer-max-nodes", type=int, default=90000,
                        help="peers run up to this many nodes")
    parser.add_argument("--gs-shared-max-nodes", type=int, default=10000,
                        help="onnx-graphsurgeon on the shared-weight chain up to this many nodes")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the rounds' job orders (0: the orders of earlier runs). "
                             "Each seed repeats its orders exactly; on this VM a job's place "
                             "after another can cost it seconds, so compare runs of several "
                             "seeds before blaming a job")
    parser.add_argument("--external-mb", type=int, default=1200)
    parser.add_argument("--big-mb", type=int, default=2200, help="0 skips the >2 GB model")
    parser.add_argument("--out", type=Path, default=HERE)
    parser.add_argument("--smoke", action="store_true",
                        help="tiny sizes, one repeat, small external models (for the tests)")
    args = parser.parse_args(argv)
    if args.smoke:  # every code path once, in seconds: one small chain, one peer, small data
        args.sizes, args.repeat, args.external_mb, args.big_mb = "120", 1, 4, 0
        args.external_repeat = 1
        args.shapes, args.peer_max_nodes, args.gs_shared_max_nodes = "distinct", 120, 0
    args.out.mkdir(parents=True, exist_ok=True)
    compile_sources()
    command = " ".join(["python benchmarks/run.py", *argv])
    rows: list[Row] = []
    loads: list[str] = []
    notes: list[str] = []
    available = []
    from importlib.util import find_spec

    for peer, module in (("onnx.utils.extract_model", "onnx"), ("onnx-graphsurgeon",
                                                                 "onnx_graphsurgeon"),
                         ("onnx-ir", "onnx_ir")):
        if find_spec(module) is not None:  # not imported: this process stays small
            available.append(peer)
        else:
            notes.append(f"{peer} is not installed: not measured")
    sizes = [int(s) for s in args.sizes.split(",") if s and int(s) > 0]
    with tempfile.TemporaryDirectory(prefix="osg-bench-") as tmpname:
        tmp = Path(tmpname)
        for shape in args.shapes.split(","):
            distinct = shape == "distinct"
            width = 16 if distinct else 4
            for n in sizes:
                blocks = max(2, n // 3)
                folder = tmp / f"{shape}{n}"
                folder.mkdir()
                src = folder / "chain.onnx"
                build_in_child("chain", src, blocks, int(distinct), width)
                peers = [p for p in available if n <= args.peer_max_nodes and not (
                    p == "onnx-graphsurgeon" and not distinct and n > args.gs_shared_max_nodes)]
                if args.smoke:
                    peers = peers[:1]
                print(f"[{time.strftime('%H:%M:%S')}] {shape} {n} nodes ({', '.join(peers)})",
                      file=sys.stderr, flush=True)
                measure_group(shape, str(blocks * 3),
                              chain_jobs(src, folder, blocks, width, peers), args.repeat, rows,
                              loads, args.seed)
                shutil.rmtree(folder)
        for label, mb in (("external", args.external_mb), ("external >2 GB", args.big_mb)):
            if not mb:
                continue
            folder = tmp / label.replace(" ", "_").replace(">", "")
            blocks = int(build_in_child("external", folder, mb, "model.onnx"))
            src = folder / "model.onnx"
            size_gb = os.path.getsize(str(src) + ".data") / 1e9
            big = size_gb > 2
            peers = [p for p in available if p == "onnx-ir" and not args.smoke]
            print(f"[{time.strftime('%H:%M:%S')}] {label} {size_gb:.2f} GB", file=sys.stderr,
                  flush=True)
            measure_group(f"{label} ({size_gb:.2f} GB)", str(blocks * 2),
                          external_jobs(src, folder, blocks, full_floor=not big, peers=peers),
                          args.external_repeat, rows, loads, args.seed)
            if big:
                notes.append(f"{label}: onnx load+save of all {size_gb:.2f} GB in one process is "
                             "not run (it holds every weight in memory); the floor is cp plus "
                             "the graph's own load+save")
            shutil.rmtree(folder)
        if any(mb for mb in (args.external_mb, args.big_mb)):
            notes.append("external data: onnxsurgeon fsyncs every file it writes before renaming "
                         "it into place (a crash leaves the old output or the whole new one) and "
                         "writes the data file with direct I/O where the filesystem takes it "
                         "(ONNXSURGEON_DIRECT_IO=0: through the page cache); "
                         "cp, onnx and onnx-ir do not (their bytes reach the disk later, on the "
                         "kernel's time): 'cp + fsync' is the durable copy for comparison. "
                         "Before every job the harness deletes that job's earlier output and "
                         "runs sync, untimed, so no job pays for another's write-back")
            notes.append("external data: 'onnx-ir extract' writes no data file (ir.save keeps "
                         "the input's references: its output in another folder cannot be "
                         "loaded); 'writing its data file' passes external_data= and is the peer "
                         "of onnxsurgeon extract, the other the peer of extract --share-data")
    if args.peer_max_nodes < max(sizes, default=0):
        notes.append(f"peers run up to {args.peer_max_nodes} nodes (--peer-max-nodes); "
                     f"onnx-graphsurgeon on the shared-weight chain up to "
                     f"{args.gs_shared_max_nodes} (its cleanup() is quadratic when one weight "
                     "feeds every node)")
    notes.append("peers are measured on extract only (the verb all of them offer)")
    report = write_report(args.out, rows, loads, notes, command, startup_seconds())
    chart = plot(args.out, rows)
    print(f"wrote {report}" + (f" and {chart}" if chart else ""), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
