"""Each accelerator of :mod:`onnxsurgeon.fast` on and off, on the job it is supposed to speed up.

    python benchmarks/bench_fast.py [--repeat 3] [--external-mb 1024] [--out benchmarks/results_fast.md]

Whole processes (``python -m onnxsurgeon ...``), each pair interleaved (on, off, on, off, ...) so
that the load of a shared machine hits both alike; before every run, untimed, its earlier output
is deleted and dirty pages are written back (``sync``). Each accelerator is switched with
``ONNXSURGEON_FAST`` only:

* ``scan``: extract half of the 90k-node chain of distinct weights (benchmarks/run.py's builder);
* ``direct_io``: insert on a ~1 GB external-data model (every weight byte is copied to an output
  in another folder); besides the time, the output's pages left in the page cache (``fincore``);
* ``kernel_copy`` and ``writeback``: the same job with ``direct_io`` off (where they act);
* ``release_cache``: the same job over its earlier output (written through the page cache and
  cached), ``direct_io`` off; besides the time, how much of the replaced data file stayed in the
  page cache (``fincore`` on a second name kept for it);
* ``reflink``: the same job on a loop-mounted XFS with reflinks (needs root and mkfs.xfs; else
  reported as not measured); ``/work`` here is ext4, which clones nothing.

An accelerator pays when the median with it off is at least 10% above the median with it on, or
when it keeps memory (page cache, RSS) the plain path fills. Writes the table to ``--out``,
keeping the hand-written ``## Decisions`` section already there.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run import build_in_child, compile_sources  # noqa: E402

PY = sys.executable
PAYS = 0.10
DECISIONS = "## Decisions"


@dataclass
class Sample:
    wall: float
    rss_mb: float
    cached_mb: float | None


def run_once(argv: Sequence[str], env: dict[str, str], prepare: Callable[[], None],
             cached: Path | None) -> Sample:
    """One child process after ``prepare()`` and a ``sync`` (untimed): wall time, peak RSS, and
    the MB of ``cached`` in the page cache after it."""
    prepare()
    os.sync()
    start = time.perf_counter()
    proc = subprocess.Popen(list(argv), env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    assert proc.stderr is not None
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{' '.join(argv[:6])}... failed: {err.strip()[-400:]}")
    return Sample(wall, usage.ru_maxrss / 1024, _cached_mb(cached) if cached else None)


def _cached_mb(path: Path) -> float | None:
    """MB of ``path`` resident in the page cache (util-linux ``fincore``), None without it."""
    if not shutil.which("fincore"):
        return None
    got = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)],
                         capture_output=True, text=True)
    try:
        return int(got.stdout.split()[0]) / 2**20
    except (IndexError, ValueError):
        return None


@dataclass
class Pair:
    accelerator: str
    job: str
    command: str
    on: list[Sample]
    off: list[Sample]


def _deleting(paths: Sequence[Path]) -> Callable[[], None]:
    def prepare() -> None:
        for p in paths:
            p.unlink(missing_ok=True)
    return prepare


def measure(accelerator: str, job: str, argv: list[str], base: str,
            prepare: Callable[[], None], cached: Path | None, repeat: int) -> Pair:
    """``repeat`` interleaved runs with ``accelerator`` on and off (on top of ``base``)."""
    envs = {}
    for side, word in (("on", accelerator), ("off", f"-{accelerator}")):
        env = dict(os.environ)
        for alias in ("ONNXSURGEON_SCAN", "ONNXSURGEON_DIRECT_IO"):
            env.pop(alias, None)
        env["ONNXSURGEON_FAST"] = ",".join(w for w in (base, word) if w)
        envs[side] = env
    pair = Pair(accelerator, job, " ".join(argv), [], [])
    for _ in range(repeat):
        for side in ("on", "off"):
            got = run_once(argv, envs[side], prepare, cached)
            (pair.on if side == "on" else pair.off).append(got)
            print(f"[{time.strftime('%H:%M:%S')}] {accelerator} {side}: {got.wall:.2f} s",
                  file=sys.stderr, flush=True)
    return pair


@contextlib.contextmanager
def xfs_folder(tmp: Path, megabytes: int) -> Iterator[Path | None]:
    """A loop-mounted XFS with reflinks, or None where it cannot be made here."""
    if os.geteuid() != 0 or not shutil.which("mkfs.xfs"):
        yield None
        return
    image, mount = tmp / "xfs.img", tmp / "xfs"
    with open(image, "wb") as f:
        f.truncate((3 * megabytes + 512) * 2**20)
    mount.mkdir()
    made = subprocess.run(["mkfs.xfs", "-q", "-m", "reflink=1", str(image)], capture_output=True)
    if made.returncode != 0 or subprocess.run(
            ["mount", "-o", "loop", str(image), str(mount)], capture_output=True).returncode:
        yield None
        return
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True)


def external_pairs(folder: Path, megabytes: int, repeat: int,
                   which: Sequence[tuple[str, str]], cached: bool) -> list[Pair]:
    src = Path(folder) / "model.onnx"
    blocks = int(build_in_child("external", folder, megabytes, "model.onnx"))
    outdir = folder / "out"
    outdir.mkdir()
    target = outdir / "insert.onnx"
    data = Path(str(target) + ".data")
    argv = [PY, "-m", "onnxsurgeon", "insert", str(src), "-o", str(target), "--at",
            f"relu{blocks // 2 - 1}", "--op", "l2_normalize:axis=1"]
    size = os.path.getsize(Path(str(src) + ".data")) / 2**30
    job = f"insert on a {size:.2f} GB external-data model"
    pairs = []
    for name, base in which:
        if name == "release_cache":
            pairs.append(measure(name, f"{job}, over its earlier output ({base})", argv, base,
                                 _earlier_output(argv, data, base), data.with_name("old.data"),
                                 repeat))
            continue
        pairs.append(measure(name, job + (f" ({base})" if base else ""), argv, base,
                             _deleting([target, data]), data if cached else None, repeat))
    return pairs


def _earlier_output(argv: list[str], data: Path, base: str) -> Callable[[], None]:
    """Before each run: the output exists (written through the page cache), its data file is
    cached, and a second name ``old.data`` keeps it after the save replaces it, so that
    ``fincore old.data`` afterwards tells how much of the replaced file stayed in memory."""
    env = {**os.environ, "ONNXSURGEON_FAST": base}

    def prepare() -> None:
        if not data.exists():
            subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
        with open(data, "rb") as f:  # its pages into the cache, as after a fresh write
            while f.read(1 << 24):
                pass
        old = data.with_name("old.data")
        old.unlink(missing_ok=True)
        os.link(data, old)
    return prepare


def _fmt(samples: list[Sample]) -> tuple[float, str]:
    walls = [s.wall for s in samples]
    return statistics.median(walls), f"{min(walls):.2f}-{max(walls):.2f}"


def report(out: Path, pairs: list[Pair], notes: list[str], argv: Sequence[str]) -> None:
    lines = ["# Accelerators on and off (benchmarks/bench_fast.py)", "",
             f"Command: `python benchmarks/{Path(__file__).name} {' '.join(argv)}`, "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
             f"load average at the end {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores "
             "(shared). Whole processes, interleaved on/off, medians (min-max).", "",
             "| accelerator | job | on: s (spread) | off: s (spread) | off/on | peak RSS on/off MB "
             "| data in page cache after, on/off MB | pays |",
             "|---|---|---|---|---|---|---|---|"]
    for p in pairs:
        mon, son = _fmt(p.on)
        moff, soff = _fmt(p.off)
        rss = (f"{statistics.median(s.rss_mb for s in p.on):.0f} / "
               f"{statistics.median(s.rss_mb for s in p.off):.0f}")
        con = [s.cached_mb for s in p.on if s.cached_mb is not None]
        coff = [s.cached_mb for s in p.off if s.cached_mb is not None]
        cache = (f"{statistics.median(con):.0f} / {statistics.median(coff):.0f}"
                 if con and coff else "-")
        faster = moff / mon - 1 >= PAYS
        lighter = bool(con and coff and statistics.median(coff) - statistics.median(con) > 100)
        verdict = "yes" if faster else ("memory" if lighter else "no")
        lines.append(f"| {p.accelerator} | {p.job} | {mon:.2f} ({son}) | {moff:.2f} ({soff}) | "
                     f"{moff / mon:.2f} | {rss} | {cache} | {verdict} |")
    lines += ["", *[f"- {n}" for n in notes], "",
              "Commands timed (the switch is `ONNXSURGEON_FAST`):", ""]
    lines += [f"- {p.accelerator}: `{p.command}`" for p in pairs]
    kept = ""  # the hand-written decisions below the table survive a re-run
    if out.exists() and DECISIONS in out.read_text():
        kept = "\n" + out.read_text()[out.read_text().index(DECISIONS):]
    out.write_text("\n".join(lines) + "\n" + kept)


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--chain-nodes", type=int, default=90000)
    parser.add_argument("--external-mb", type=int, default=1024)
    parser.add_argument("--only",
                        default="scan,direct_io,kernel_copy,writeback,release_cache,reflink")
    parser.add_argument("--out", type=Path, default=HERE / "results_fast.md")
    args = parser.parse_args(args_in)
    only = set(args.only.split(","))
    compile_sources()
    pairs: list[Pair] = []
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench_fast_", dir=HERE.parent) as tmp_name:
        tmp = Path(tmp_name)
        if "scan" in only:
            src = tmp / "chain.onnx"
            blocks = args.chain_nodes // 3
            build_in_child("chain", src, blocks, 1, 16)
            target = tmp / "extract.onnx"
            argv_ = [PY, "-m", "onnxsurgeon", "extract", str(src), "-o", str(target),
                     "--outputs", f"relu{blocks // 2 - 1}"]
            pairs.append(measure("scan", f"extract half of a {blocks * 3}-node chain", argv_,
                                 "", _deleting([target]), None, args.repeat))
        which = [(n, b) for n, b in (("direct_io", ""), ("kernel_copy", "-direct_io"),
                                     ("writeback", "-direct_io"),
                                     ("release_cache", "-direct_io")) if n in only]
        if which:
            ext = tmp / "ext"
            ext.mkdir()
            pairs += external_pairs(ext, args.external_mb, args.repeat, which, cached=True)
            shutil.rmtree(ext)
        if "reflink" in only:
            with xfs_folder(tmp, args.external_mb) as xfs:
                if xfs is None:
                    notes.append("reflink: not measured (no loop-mounted XFS here: needs root "
                                 "and mkfs.xfs); /work is ext4, which clones nothing")
                else:
                    notes.append("reflink: on a loop-mounted XFS (mkfs.xfs -m reflink=1) in a "
                                 "sparse image file on /work's ext4")
                    pairs += external_pairs(xfs, args.external_mb, args.repeat,
                                            [("reflink", "")], cached=True)
    report(args.out, pairs, notes, args_in)
    print(args.out.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
