"""Rich display in Jupyter: the HTML a notebook shows for a model, a view of its graph, a verb's
result, a verification report and an ``inspect`` listing. Offline and self-contained: inline
``<style>`` scoped to one ``div.osg`` and inline SVG (the HTML diff's renderer,
:func:`onnxsurgeon.diff.render_svg`); no script, no link to any network resource.

The objects' ``_repr_html_`` methods (``Model``, :class:`~onnxsurgeon.io.GraphView` from
``Model.show``, every ``<Verb>Result``, ``VerifyReport``, the row lists of ``Model.nodes`` /
``Model.tensors``) import this module when a notebook first displays one, so nothing here is
imported, laid out or drawn before that; plain ``repr`` stays short text. Jupyter renders
HTML outputs of a notebook it does not trust (one opened, not run here) sanitized, without
their SVG: run it, or ``jupyter trust`` it.

A verb's result draws the diff of its rewrite with the HTML diff's two-sided renderer: the nodes
it removed in red, added in green, rerouted in orange, with ``CONTEXT`` hops around them. Inside
IPython only, every verb's edit (:class:`onnxsurgeon.edit.Edit`) first takes a weightless copy of
the model it is about to change, and the rewrite log keeps it with the model in
:data:`onnxsurgeon.record.RECENT` (the last 8 rewrites); outside IPython nothing is copied.
"""

from __future__ import annotations

import dataclasses
import hashlib
import html
import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import onnx

from .diff import GraphDiff, diff_models, neighbourhood, render_svg
from .diff.page import SVG_CSS
from .io import GraphView, Model
from .record import RECENT
from .types import dtype_name, shape_of

__all__ = ["CONTEXT", "deep_plot_svg", "model_html", "report_html", "result_html", "rows_html", "view_html"]

CONTEXT = 2
"""Hops of context drawn around what a verb changed."""
MAX_ROWS = 500
"""Most rows a table shows (the rest are counted)."""
VERDICT_COLOURS = {"pass": ("#e8f5e9", "#1b5e20"), "fail": ("#ffebee", "#b71c1c"),
                   "inconclusive": ("#fff8e1", "#8d6e00")}
"""Verdict -> (background, text colour) of its cell."""

_CSS = """
.osg{font:13px sans-serif;color:#222}
.osg table{border-collapse:collapse;margin:4px 0 8px}
.osg th,.osg td{border:1px solid #ddd;padding:2px 6px;text-align:left;vertical-align:top;
font:12px monospace}
.osg th{background:#f2f2f2}
.osg h4{margin:6px 0 2px;font-size:13px}
.osg .verdict{font-weight:bold;padding:1px 6px}
.osg .canvas{overflow:auto;max-height:640px;border:1px solid #ddd}
.osg pre{background:#f5f5f5;padding:4px 6px;white-space:pre-wrap;font-size:12px}
""" + "\n".join(f".osg {rule}" for rule in SVG_CSS.splitlines())


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def _wrap(kind: str, body: str) -> str:
    return f'<div class="osg" data-osg="{kind}"><style>{_CSS}</style>{body}</div>'


def _table(header: Sequence[str], rows: Iterable[Sequence[str]], *, raw: bool = False) -> str:
    """An HTML table; cells are escaped unless ``raw`` (already HTML)."""
    out = ["<table><thead><tr>", *(f"<th>{_esc(h)}</th>" for h in header), "</tr></thead><tbody>"]
    for row in rows:
        out.append("<tr>" + "".join(f"<td>{c if raw else _esc(c)}</td>" for c in row) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _unique(svg: str) -> str:
    """``svg`` with its ids made unique to its content (several drawings share one page)."""
    prefix = "osg" + hashlib.sha1(svg.encode()).hexdigest()[:10]
    return (svg.replace('id="graph"', f'id="{prefix}"')
            .replace('id="arrow-', f'id="{prefix}-arrow-')
            .replace("url(#arrow-", f"url(#{prefix}-arrow-"))


def _drawing(diff: GraphDiff, **kw: Any) -> str:
    return f'<div class="canvas">{_unique(render_svg(diff, **kw))}</div>'


def _value(v: object, limit: int = 8) -> str:
    """A field's value as a short text: lists and maps cut after ``limit`` items."""
    if isinstance(v, Mapping):
        items = [f"{k} -> {x}" for k, x in list(v.items())[:limit]]
        more = len(v) - limit
    elif isinstance(v, list | tuple | set | frozenset):
        items = [str(x) for x in list(v)[:limit]]
        more = len(v) - limit
    else:
        return str(getattr(v, "value", v))
    return ", ".join(items) + (f", \u2026 {more} more" if more > 0 else "")


# ------------------------------------------------------------------------------ a model
def _dims(vi: onnx.ValueInfoProto) -> str:
    shape = shape_of(vi)
    return "?" if shape is None else "[" + ", ".join("?" if d is None else str(d)
                                                    for d in shape) + "]"


def _dtype(vi: onnx.ValueInfoProto) -> str:
    t = vi.type
    return dtype_name(t.tensor_type.elem_type) if t.HasField("tensor_type") else \
        (t.WhichOneof("value") or "unknown")


def _tensor_bytes(t: onnx.TensorProto) -> int:
    """Bytes of an initializer's values without reading them (external: the recorded length)."""
    if t.data_location == onnx.TensorProto.EXTERNAL:
        entry = {e.key: e.value for e in t.external_data}
        if "length" in entry:
            return int(entry["length"])
    if t.raw_data:
        return len(t.raw_data)
    try:
        size = onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
    except (KeyError, TypeError, ValueError):
        size = 0
    return math.prod(t.dims) * size


def _op_counts(graph: onnx.GraphProto) -> Counter[str]:
    """Op type -> nodes, nested bodies included (iterative)."""
    counts: Counter[str] = Counter()
    stack = [graph]
    while stack:
        g = stack.pop()
        for node in g.node:
            op = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
            counts[op] += 1
            for a in node.attribute:
                if a.HasField("g"):
                    stack.append(a.g)
                stack.extend(a.graphs)
    return counts


def model_html(model: Model) -> str:
    """A model's summary: inputs, outputs (name, dtype, shape), opsets, op histogram and
    weights (count and bytes). Reads no weight bytes. O(nodes + initializers)."""
    g = model.proto.graph
    inits = {t.name for t in g.initializer}
    parts = [f"<h4>{_esc(model.source.name if model.source else 'model')}: {len(g.node)} nodes"
             "</h4>"]
    inputs = [vi for vi in g.input if vi.name not in inits]
    parts.append("<h4>inputs</h4>" + _table(["name", "dtype", "shape"],
                                            [(vi.name, _dtype(vi), _dims(vi)) for vi in inputs]))
    parts.append("<h4>outputs</h4>" + _table(["name", "dtype", "shape"],
                                             [(vi.name, _dtype(vi), _dims(vi)) for vi in g.output]))
    parts.append("<h4>opsets</h4>" + _table(["domain", "version"], [
        (o.domain or "ai.onnx", str(o.version)) for o in model.proto.opset_import]))
    hist = sorted(_op_counts(g).items(), key=lambda kv: (-kv[1], kv[0]))
    parts.append("<h4>ops</h4>" + _table(["op", "nodes"], [(op, str(n)) for op, n in hist]))
    size = sum(map(_tensor_bytes, g.initializer)) + sum(
        _tensor_bytes(s.values) for s in g.sparse_initializer)
    parts.append('<h4>weights</h4><table id="weights"><tr><th>initializers</th><td>'
                 f"{len(g.initializer) + len(g.sparse_initializer)}</td></tr>"
                 f"<tr><th>bytes</th><td>{size:,}</td></tr></table>")
    return _wrap("model", "".join(parts))


def view_html(view: GraphView) -> str:
    """The graph around ``view.tensor`` with ``view.context`` hops (the diff page's SVG)."""
    diff = neighbourhood(view.model.proto, view.tensor, context=view.context)
    head = (f"<h4>around {_esc(view.tensor)}: {len(diff.nodes)} nodes drawn, "
            f"{view.context} hops</h4>")
    return _wrap("view", head + _drawing(diff))


# ------------------------------------------------------------------------------ a verb's result
def _sides_of(result: Any) -> tuple[onnx.ModelProto, onnx.ModelProto] | None:
    """(the model before ``result``'s rewrite, the model after it) if still at hand: the copy
    taken when the verb began editing, and the next logged rewrite's copy of the same model
    (or the model itself when no later rewrite of it was logged)."""
    try:
        key = json.dumps(result.record().to_json(), sort_keys=True)
    except Exception:  # noqa: BLE001 -- a display never raises; no drawing then
        return None
    recent = list(RECENT)
    for k in range(len(recent) - 1, -1, -1):
        entry, proto, before = recent[k]
        if entry != key:
            continue
        if before is None:
            return None
        after = next((b for _, p, b in recent[k + 1:] if p is proto and b is not None), proto)
        return before, after
    return None


def result_html(result: Any) -> str:
    """What a verb did: its result's fields, and the diff of its rewrite drawn as the HTML
    diff draws it (removed nodes red, added green, rerouted orange, with :data:`CONTEXT` hops
    around them)."""
    name = type(result).__name__
    fields = [(f.name, _value(getattr(result, f.name))) for f in dataclasses.fields(result)
              if not f.name.startswith("_")]
    parts = [f"<h4>{_esc(name)}</h4>", _table(["field", "value"], fields)]
    sides = _sides_of(result)
    if sides is None:
        parts.append("<p>the model it changed is not at hand (rewritten outside this session, "
                     "or 8 rewrites ago); display the model or <code>model.show(around=...)"
                     "</code> instead</p>")
        return _wrap("result", "".join(parts))
    diff = diff_models(*sides, context=CONTEXT)
    t = diff.totals
    parts.append(f"<h4>the rewrite: {t.get('removed', 0)} nodes removed (red), "
                 f"{t.get('added', 0)} added (green), {t.get('rerouted', 0)} rerouted "
                 f"(orange), {CONTEXT} hops of context</h4>")
    parts.append(_drawing(diff))
    return _wrap("result", "".join(parts))


# ------------------------------------------------------------------------------ a verification
def _fmt(x: float | None) -> str:
    return "" if x is None else f"{x:.3g}"


def _verdict(verdict: str) -> str:
    bg, fg = VERDICT_COLOURS.get(verdict, ("#eee", "#222"))
    return (f'<span class="verdict" data-verdict="{_esc(verdict)}" '
            f'style="background:{bg};color:{fg}">{_esc(verdict)}</span>')


def deep_plot_svg(deep: Any) -> str:
    """The deep comparison's error of every shared tensor against its depth (log scale) as
    inline SVG: informative agreeing tensors blue, uninformative hollow grey, differing red,
    the first difference labelled."""
    tensors = list(deep.tensors)
    w, h, left, right, top, bottom = 600, 240, 60, 16, 24, 36
    floor = 1e-12
    logs = [math.log10(max(t.max_abs_diff or 0.0, floor)) if t.max_abs_diff is None
            or math.isfinite(t.max_abs_diff) else 2.0 for t in tensors]
    depths = [t.depth for t in tensors]
    lo_y, hi_y = math.floor(min(logs, default=-12)), math.ceil(max(logs, default=0)) + 1
    lo_x, hi_x = min(depths, default=0), max(max(depths, default=1), min(depths, default=0) + 1)

    def xy(d: float, v: float) -> tuple[float, float]:
        x = left + (d - lo_x) / (hi_x - lo_x) * (w - left - right)
        y = top + (hi_y - v) / (hi_y - lo_y) * (h - top - bottom)
        return x, y

    out = [f'<svg class="deep-plot" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img">',
           f'<text x="{w / 2}" y="14">{len(tensors)} shared tensors: max |error| by depth</text>',
           f'<line x1="{left}" y1="{h - bottom}" x2="{w - right}" y2="{h - bottom}" stroke="#888"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{h - bottom}" stroke="#888"/>']
    for k in range(lo_y, hi_y + 1, max(1, (hi_y - lo_y) // 5)):
        _, y = xy(lo_x, k)
        out.append(f'<text x="{left - 28}" y="{y + 4:.1f}" style="font-size:10px">1e{k}</text>')
    out.append(f'<text x="{w / 2}" y="{h - 6}" style="font-size:11px">depth (nodes from the '
               f"inputs) {lo_x}\u2013{hi_x}</text>")
    for t, v in zip(tensors, logs, strict=True):
        x, y = xy(t.depth, v)
        tip = f"<title>{_esc(t.tensor)}: {_fmt(t.max_abs_diff)}</title>"
        if not t.ok:
            out.append(f'<g class="differs" data-tensor="{_esc(t.tensor)}">{tip}<path d="M{x - 4:.1f},'
                       f"{y - 4:.1f} L{x + 4:.1f},{y + 4:.1f} M{x - 4:.1f},{y + 4:.1f} "
                       f'L{x + 4:.1f},{y - 4:.1f}" stroke="#c62828" stroke-width="2"/></g>')
        elif t.informative:
            out.append(f'<circle class="agrees" data-tensor="{_esc(t.tensor)}" cx="{x:.1f}" '
                       f'cy="{y:.1f}" r="3" fill="#1f77b4">{tip}</circle>')
        else:
            out.append(f'<circle class="uninformative" data-tensor="{_esc(t.tensor)}" '
                       f'cx="{x:.1f}" cy="{y:.1f}" r="3" fill="none" stroke="#888">{tip}</circle>')
    first = deep.first_difference
    if first is not None:
        x, y = xy(first.depth, logs[tensors.index(first)])
        out.append(f'<text x="{x + 8:.1f}" y="{y - 6:.1f}" style="font-size:10px;'
                   f'text-anchor:start">first difference: {_esc(first.tensor)}</text>')
    out.append("</svg>")
    return "".join(out)


def report_html(report: Any) -> str:
    """A verification: its verdict, the compared pairs with coloured verdicts, where the
    models part, the deep comparison's error plot (inline SVG)."""
    parts = [f"<h4>verify: {_verdict(report.verdict)} {_esc(report.summary())}</h4>"]
    rows = [(_esc(p.reference_text), _esc(p.candidate), _verdict(p.verdict),
             _fmt(p.max_abs_diff), _fmt(p.max_rel_diff), f"{p.mismatches}/{p.elements}",
             _fmt(p.cosine), _esc(p.reason or p.why or p.evidence or ""))
            for p in report.pairs[:MAX_ROWS]]
    parts.append(_table(["reference", "candidate", "verdict", "max |abs|", "max rel",
                         "mismatches", "cosine", "why"], rows, raw=True))
    if report.divergence is not None:
        parts.append(f"<pre>{_esc(report.divergence.to_text())}</pre>")
    for note in report.notes:
        parts.append(f"<p>{_esc(note)}</p>")
    if report.deep is not None and report.deep.tensors:
        parts.append(deep_plot_svg(report.deep))
    return _wrap("report", "".join(parts))


# ------------------------------------------------------------------------------ a listing
def rows_html(rows: Sequence[Any]) -> str:
    """``Model.nodes()`` / ``Model.tensors()`` rows as a table (at most :data:`MAX_ROWS`)."""
    if not rows:
        return _wrap("rows", "<p>no rows</p>")
    header = [f.name for f in dataclasses.fields(rows[0])]
    body = [[_value(getattr(r, k), 6) if getattr(r, k) is not None else "" for k in header]
            for r in rows[:MAX_ROWS]]
    more = f"<p>\u2026 {len(rows) - MAX_ROWS} more rows</p>" if len(rows) > MAX_ROWS else ""
    return _wrap("rows", _table(header, body) + more)
