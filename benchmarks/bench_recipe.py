"""Benchmark: a 5-step recipe in one process vs its steps as CLI calls; a fleet with 1 vs 2 jobs.

Usage: ``python benchmarks/bench_recipe.py [--blocks B] [--fleet-blocks F] [--repeat R]``

Whole processes only (as users see them), each timed with ``time.perf_counter`` around
``subprocess.run``, interleaved, median of ``--repeat`` rounds:

1. On a chain of ``B`` MatMul/Add/Relu blocks (3B nodes; default 30000 = 90k nodes), the recipe
   insert -> copy -> reroute -> rename -> extract as ``onnxsurgeon apply`` (one load, one save)
   against each step as its own ``onnxsurgeon <verb>`` call chained file to file. Target: apply
   costs at most 1.5x the slowest single step. The floor ``python -c "onnx.save(onnx.load())"``
   is measured in the same rounds.
2. A fleet of 8 chains of ``F`` blocks: ``apply RECIPE M1..M8 -o DIR/ --jobs 2`` against
   ``--jobs 1``. Target: at least 1.7x faster with 2 jobs (on 2 free cores).

The machine load (``os.getloadavg``) is printed with the results: on a shared machine the fleet
speed-up is bounded by the cores the other processes leave free. Results go to
``benchmarks/results_recipe.md``. Nothing is asserted: this is a script, not a test.
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

import onnx
import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_extract import build_chain  # noqa: E402


def recipe_steps(blocks: int) -> list[dict]:
    mid, late = blocks // 2, (2 * blocks) // 3
    return [
        {"insert": {"at": f"relu{mid}", "op": "scale", "params": {"factor": 1.0}}},
        {"copy": {"outputs": ["relu300"], "prefix": "twin/"}},
        {"reroute": {"from": f"relu{late}", "to": f"relu{late - 1}",
                     "consumers": [f"MatMul_{late + 1}"]}},
        {"rename": {"mapping": {"y": "out"}}},
        {"extract": {"outputs": ["out", "twin/relu300"]}},
    ]


def cli_steps(blocks: int) -> list[list[str]]:
    mid, late = blocks // 2, (2 * blocks) // 3
    return [
        ["insert", "--at", f"relu{mid}", "--op", "scale:factor=1.0"],
        ["copy", "--outputs", "relu300", "--prefix", "twin/"],
        ["reroute", "--from", f"relu{late}", "--to", f"relu{late - 1}",
         "--consumers", f"MatMul_{late + 1}"],
        ["rename", "--map", "y=out"],
        ["extract", "--outputs", "out,twin/relu300"],
    ]


CPU: dict[str, list[float]] = {}
"""CPU seconds (user + system of the child processes) per label, beside the wall times."""


def timed(cmd: list[str], label: str = "") -> float:
    """Wall seconds of one whole process; its CPU seconds are kept in CPU[label]."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{proc.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    CPU.setdefault(label, []).append(cpu)
    return elapsed


def osg(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "onnxsurgeon", *map(str, args)]


def bench_recipe(tmp: Path, blocks: int, repeat: int, typed: bool) -> dict[str, float]:
    src = tmp / "chain.onnx"
    onnx.save(build_chain(blocks, typed=typed), str(src))
    recipe = tmp / "r.yaml"
    recipe.write_text(yaml.safe_dump({"onnxsurgeon": 1, "steps": recipe_steps(blocks)}))
    floor_cmd = [sys.executable, "-c",
                 f"import onnx; onnx.save(onnx.load({str(src)!r}), {str(tmp / 'floor.onnx')!r})"]
    times: dict[str, list[float]] = {"floor": [], "apply": []}
    names = [s[0] for s in cli_steps(blocks)]
    for n in names:
        times[n] = []
    for _ in range(repeat):
        times["floor"].append(timed(floor_cmd, "floor"))
        times["apply"].append(timed(osg("apply", recipe, src, "-o", tmp / "applied.onnx"), "apply"))
        prev = src
        for k, (verb, *flags) in enumerate(cli_steps(blocks)):
            out = tmp / f"step{k}.onnx"
            times[verb].append(timed(osg(verb, prev, "-o", out, *flags), verb))
            prev = out
    a, b = onnx.load(str(tmp / "applied.onnx")), onnx.load(str(prev))
    if a.graph != b.graph:
        raise SystemExit("apply and the chained CLI calls wrote different graphs")
    return {k: statistics.median(v) for k, v in times.items()}


def bench_fleet(tmp: Path, blocks: int, repeat: int) -> dict[str, float]:
    folder = tmp / "fleet"
    folder.mkdir()
    first = folder / "m0.onnx"
    onnx.save(build_chain(blocks, typed=False), str(first))
    models = [first]
    for k in range(1, 8):
        models.append(folder / f"m{k}.onnx")
        shutil.copy(first, models[-1])
    recipe = tmp / "fleet.yaml"
    recipe.write_text(yaml.safe_dump({"onnxsurgeon": 1, "steps": recipe_steps(blocks)}))
    times: dict[str, list[float]] = {"jobs1": [], "jobs2": []}
    for _ in range(repeat):
        for jobs in (1, 2):
            out = tmp / f"out{jobs}"
            shutil.rmtree(out, ignore_errors=True)
            times[f"jobs{jobs}"].append(timed(osg("apply", recipe, *models, "-o", f"{out}/",
                                                  "--jobs", str(jobs)), f"jobs{jobs}"))
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=30000)
    parser.add_argument("--fleet-blocks", type=int, default=10000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--typed", action="store_true",
                        help="value_info on every tensor of the chain (as exporters write it)")
    args = parser.parse_args()
    from run import compile_sources  # this folder: the same byte-compiled code as run.py times

    compile_sources()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-recipe-") as name:
        tmp = Path(name)
        r = bench_recipe(tmp, args.blocks, args.repeat, args.typed)
        f = bench_fleet(tmp, args.fleet_blocks, args.repeat)
    load_after = os.getloadavg()
    steps = {k: v for k, v in r.items() if k not in ("floor", "apply")}
    slowest = max(steps, key=lambda k: steps[k])
    cpu = {k: statistics.median(v) for k, v in CPU.items()}
    cpu_slowest = max(steps, key=lambda k: cpu[k])
    lines = [
        "# Recipes and fleets (whole processes)",
        "",
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
        f"load average before {load_before[0]:.1f}, after {load_after[0]:.1f} "
        "(other processes share the cores). Median of "
        f"{args.repeat} interleaved rounds; `python benchmarks/bench_recipe.py --blocks "
        f"{args.blocks} --fleet-blocks {args.fleet_blocks} --repeat {args.repeat}`.",
        "",
        f"## 5-step recipe on a {3 * args.blocks}-node chain"
        + (" with value_info" if args.typed else " without value_info"),
        "",
        "| process | wall s | x floor | CPU s |",
        "|---|---|---|---|",
        f"| floor: `onnx.save(onnx.load())` | {r['floor']:.2f} | 1.00 | {cpu['floor']:.2f} |",
    ]
    for verb, t in steps.items():
        lines.append(f"| `onnxsurgeon {verb}` alone | {t:.2f} | {t / r['floor']:.2f} | "
                     f"{cpu[verb]:.2f} |")
    lines += [
        f"| five CLI calls chained | {sum(steps.values()):.2f} | "
        f"{sum(steps.values()) / r['floor']:.2f} | {sum(cpu[v] for v in steps):.2f} |",
        f"| `onnxsurgeon apply` (5 steps) | {r['apply']:.2f} | {r['apply'] / r['floor']:.2f} | "
        f"{cpu['apply']:.2f} |",
        "",
        f"apply / slowest single step ({slowest}): **{r['apply'] / steps[slowest]:.2f}x** wall, "
        f"**{cpu['apply'] / cpu[cpu_slowest]:.2f}x** CPU ({cpu_slowest}) (target at most 1.5x)",
        "",
        f"## Fleet of 8 models ({3 * args.fleet_blocks} nodes each), same recipe",
        "",
        "| jobs | wall s | CPU s |",
        "|---|---|---|",
        f"| 1 | {f['jobs1']:.2f} | {cpu['jobs1']:.2f} |",
        f"| 2 | {f['jobs2']:.2f} | {cpu['jobs2']:.2f} |",
        "",
        f"speed-up with 2 jobs: **{f['jobs1'] / f['jobs2']:.2f}x** (target at least 1.7x)",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    (HERE / "results_recipe.md").write_text(text)


if __name__ == "__main__":
    main()
