"""Issue 14's targets, judged from the rows of one ``run.py`` run (no figure typed by hand).

    python benchmarks/targets.py RESULTS.md     # judge the table of an earlier report again

Each target reads the medians of the run (and, for "onnx-ir's best run", the fastest round of
that peer); a target whose rows the run did not measure (a smaller ``--sizes``, no peers) says
"not measured" instead of holding. ``run.py`` writes the table at the top of RESULTS.md.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

CHAIN_SIZE = "90000"
"""The chain the issue's targets are stated at (90k nodes)."""
EXTERNAL_GROUPS = ("external (", "external >2 GB (")


class RowLike(Protocol):
    group: str
    size: str
    job: str
    wall: float
    rss_mb: float
    ratio: float
    best: float
    floor: str


@dataclass(frozen=True)
class Verdict:
    target: str
    measured: str
    holds: bool | None  # None: not measured in this run

    @property
    def word(self) -> str:
        return {True: "holds", False: "misses", None: "not measured"}[self.holds]


def _find(rows: Sequence[RowLike], group: str, job: str, size: str | None = None) -> RowLike | None:
    for r in rows:
        if r.group.startswith(group) and r.job == job and (size is None or r.size == size):
            return r
    return None


def _judge(target: str, parts: Iterable[tuple[str, float | None]],
           ok: Callable[[float], bool], fmt: str = "{:.2f}x") -> Verdict:
    """One verdict over labelled figures: holds when every measured figure is ``ok`` (None or
    NaN, as a report without the ``best s`` column gives, is not measured)."""
    measured = [(label, v) for label, v in parts if v is not None and v == v]
    if not measured:
        return Verdict(target, "-", None)
    text = ", ".join(f"{label} {fmt.format(v)}" for label, v in measured)
    return Verdict(target, text, all(ok(v) for _, v in measured))


def evaluate(rows: Sequence[RowLike]) -> list[Verdict]:
    """Every target of issue 14 against ``rows``."""
    shapes = ("distinct", "shared")
    out: list[Verdict] = []

    def ratio(group: str, job: str, size: str | None = None) -> float | None:
        r = _find(rows, group, job, size)
        return r.ratio if r else None

    def faster(group: str, peer: str) -> float | None:
        ours = _find(rows, group, "onnxsurgeon extract (half)", CHAIN_SIZE)
        theirs = _find(rows, group, f"{peer} extract (half)", CHAIN_SIZE)
        return theirs.wall / ours.wall if ours and theirs else None

    for verb, job, limit in (("extract", "onnxsurgeon extract (half)", 1.3),
                             ("insert", "onnxsurgeon insert l2_normalize", 1.5),
                             ("reroute", "onnxsurgeon reroute", 1.5),
                             ("copy", "onnxsurgeon copy (whole, independent)", 1.5)):
        floor = "its floor" if verb == "copy" else "the floor"
        out.append(_judge(f"90k chain: {verb} <= {limit}x {floor}",
                          ((s, ratio(s, job, CHAIN_SIZE)) for s in shapes),
                          lambda v, limit=limit: v <= limit))
    for peer, times in (("onnx-graphsurgeon", 5), ("onnx-ir", 10)):
        out.append(_judge(f"90k chain: extract >= {times}x faster than {peer}",
                          ((s, faster(s, peer)) for s in shapes),
                          lambda v, times=times: v >= times))
    out.append(_growth(rows, shapes))
    for group in EXTERNAL_GROUPS:
        label = next((r.group for r in rows if r.group.startswith(group)), group.rstrip(" ("))
        ours = _find(rows, group, "onnxsurgeon extract")
        ir = _find(rows, group, "onnx-ir extract, writing its data file")
        out.append(_judge(f"{label}: extract at least as fast as onnx-ir's best run (its data "
                          "file written)",
                          [("ours (median) / onnx-ir (best)",
                            ours.wall / ir.best if ours and ir else None)],
                          lambda v: v <= 1.0))
        out.append(_judge(f"{label}: insert, reroute, copy <= 1.5x cp of the data plus the "
                          "graph's load+save",
                          ((verb, ratio(group, f"onnxsurgeon {verb}"))
                           for verb in ("insert", "reroute", "copy")),
                          lambda v: v <= 1.5))
        out.append(_judge(f"{label}: peak RSS of every onnxsurgeon job <= 200 MB",
                          [("largest", max((r.rss_mb for r in rows if r.group.startswith(group)
                                            and r.job.startswith("onnxsurgeon")), default=None))],
                          lambda v: v <= 200, "{:.0f} MB"))
        out.append(_judge(f"{label}: --share-data <= 1.5x the graph's own load+save",
                          ((verb, ratio(group, f"onnxsurgeon {verb} --share-data"))
                           for verb in ("extract", "insert", "reroute", "copy")),
                          lambda v: v <= 1.5))
    return out


def _growth(rows: Sequence[RowLike], shapes: Sequence[str]) -> Verdict:
    """Linear growth: from the second-largest to the largest chain measured, no onnxsurgeon
    job's time or peak memory grows by more than 10% beyond what linear code grows on this
    machine: the node count's factor, or the job's floor's own factor where that is larger
    (onnx's load+save is linear code, and past the caches, and with the VM's fresh pages, a
    working set three times larger costs it more than three times the time)."""
    worst: tuple[float, str] | None = None
    for shape in shapes:
        sizes = sorted({int(r.size) for r in rows if r.group == shape})
        if len(sizes) < 2:
            continue
        small, large = str(sizes[-2]), str(sizes[-1])
        nodes = sizes[-1] / sizes[-2]
        for r in rows:
            if r.group != shape or r.size != large or not r.job.startswith("onnxsurgeon"):
                continue
            before = _find(rows, shape, r.job, small)
            if before is None:
                continue
            floors = (_find(rows, shape, r.floor, small), _find(rows, shape, r.floor, large))
            for what, of in (("time", "wall"), ("memory", "rss_mb")):
                grew = getattr(r, of) / getattr(before, of)
                linear, why = nodes, f"x{nodes:.1f} nodes"
                if floors[0] is not None and floors[1] is not None:
                    floor_grew = getattr(floors[1], of) / getattr(floors[0], of)
                    if floor_grew > linear:
                        linear, why = floor_grew, f"its floor's x{floor_grew:.2f}"
                excess = grew / linear
                if worst is None or excess > worst[0]:
                    worst = (excess, f"{shape} {r.job[len('onnxsurgeon '):]} {what} x{grew:.2f} "
                                     f"against {why} ({small} -> {large} nodes)")
    target = "time and memory linear in node count (worst job, within 10%)"
    if worst is None:
        return Verdict(target, "-", None)
    return Verdict(target, worst[1], worst[0] <= 1.1)


def markdown(rows: Sequence[RowLike]) -> list[str]:
    """The verdicts as a Markdown table."""
    lines = ["| target | measured | verdict |", "|---|---|---|"]
    lines += [f"| {v.target} | {v.measured} | {v.word} |" for v in evaluate(rows)]
    return lines


def parse(text: str) -> list[RowLike]:
    """The job rows of a RESULTS.md table (its first table with a ``job`` column) as
    ``run.Row`` (CPU figures not read); a report without the ``best s`` column gives NaN
    there."""
    from run import Row

    nan = float("nan")
    rows: list[RowLike] = []
    header: list[str] | None = None
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            if line.startswith("| model |") and "job" in cells:
                header = cells
            continue
        if not line.startswith("|"):
            break
        if set(line) <= set("|-: "):
            continue
        row = dict(zip(header, cells, strict=False))
        job = row["job"]
        rows.append(Row(
            row["model"], row["nodes"], job, float(row["wall s"]), nan,
            float(row.get("peak RSS MB", "nan")),
            job if row.get("floor", "-") == "-" else row["floor"],
            float(row["ratio"].rstrip("x")), nan, float(row.get("best s", "nan"))))
    return rows


def main(argv: Sequence[str]) -> int:
    for line in markdown(parse(Path(argv[0]).read_text())):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
