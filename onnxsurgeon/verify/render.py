"""Rendering a :class:`~.report.VerifyReport` as text: the pair table, the inputs each model got,
the per-tensor table of a deep comparison, notes and the one-line summary."""

from __future__ import annotations

import math
from typing import Any

from .report import FAIL, INCONCLUSIVE, PairReport, VerifyReport

_COLUMNS = ("check", "reference", "candidate", "verdict", "max_abs", "max_rel", "mismatch",
            "cosine", "worst")
_DEEP_COLUMNS = ("pos", "depth", "tensor", "node", "op", "max_abs", "max_rel", "informative", "ok")


def fmt(x: float | None) -> str:
    """A statistic for a table: 3 significant digits, '-' when unknown."""
    if x is None:
        return "-"
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    return f"{x:.3g}"


def verdict_cell(p: PairReport) -> str:
    """'ok', 'FAIL: reason' or 'inconclusive: why', with the evidence that settled it."""
    if p.verdict == FAIL:
        text = "FAIL: " + p.reason if p.reason else "FAIL"
    elif p.verdict == INCONCLUSIVE:
        text = f"inconclusive: {p.why}"
    else:
        text = "ok"
    if p.evidence:
        text += f" ({p.evidence})"
    elif p.verdict != INCONCLUSIVE and not p.informative:
        text += f" (not informative: {p.why})"
    return text


def _rows(report: VerifyReport) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for p in report.pairs:
        worst = "-" if p.worst_index is None else str(list(p.worst_index))
        if p.worst_sample:
            worst += f"@{p.worst_sample}"
        rows.append((p.check or "-", p.reference_text, p.candidate, verdict_cell(p),
                     fmt(p.max_abs_diff), fmt(p.max_rel_diff),
                     f"{p.mismatches} ({p.mismatch_percent:.2g}%)", fmt(p.cosine), worst))
    return rows


def _align(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip()
            for r in rows]


def deep_rows(report: VerifyReport) -> list[tuple[str, ...]]:
    """The per-tensor rows of the report's deep comparison (empty when none ran)."""
    if report.deep is None:
        return []
    return [(str(t.position), str(t.depth), t.tensor if t.candidate == t.tensor
             else f"{t.tensor} vs {t.candidate}", t.node, t.op_type, fmt(t.max_abs_diff),
             fmt(t.max_rel_diff), "yes" if t.informative else f"no: {t.why}",
             "ok" if t.ok else "DIFFERS") for t in report.deep.tensors]


def format_report(report: VerifyReport, *, deep_table: bool | None = None) -> str:
    """The report as aligned plain text: inputs, the pair table, the deep table (when
    ``deep_table``; default: when the deep comparison was forced), notes, summary."""
    lines = [f"input {name}: {text}" for name, text in report.inputs.items()]
    rows = [_COLUMNS, *_rows(report)]
    if not any(p.check for p in report.pairs):
        rows = [r[1:] for r in rows]
    if len(rows) > 1:
        lines.extend(_align(rows))
    if report.deep is not None:
        show = report.deep.forced if deep_table is None else deep_table
        if show and report.deep.tensors:
            lines.extend(_align([_DEEP_COLUMNS, *deep_rows(report)]))
        lines.append(report.deep.summary())
    lines.extend(f"note: {n}" for n in report.notes)
    lines.append(report.summary())
    return "\n".join(lines)


def rich_table(report: VerifyReport) -> Any:
    """The pairs as a ``rich.table.Table`` (None when rich is not installed)."""
    try:
        from rich.table import Table
    except ImportError:
        return None
    table = Table(title=report.summary())
    for column in _COLUMNS:
        table.add_column(column, justify="left" if column in ("reference", "candidate", "check",
                                                               "verdict") else "right")
    for row in _rows(report):
        table.add_row(*row)
    return table
