"""One self-contained HTML page drawing a :class:`GraphDiff`: inline SVG, CSS and a few lines of
our own script (hover details); no external resource, so it opens offline.

Stable hooks: every node box carries ``data-node`` and ``data-change``, every edge
``data-tensor`` and ``data-change``; graph inputs/outputs carry ``data-io``, collapsed stubs
``data-collapsed`` (the number of undrawn neighbours), and both carry ``data-tensor`` and
``data-change`` too (everything matching ``[data-tensor]`` has a ``data-change``); with verification errors, coloured edges
carry ``data-error`` and the first divergent node ``data-divergent="true"``. Every text taken
from a model is escaped.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass

from .changes import DiffEdge, DiffNode, GraphDiff, Terminal
from .layout import Box, Layout, layout

CHAR_W = 7.3
"""Width of one character of the 12px monospace font the boxes use (DejaVu Sans Mono 7.22)."""
LINE_H = 15.0
MAX_CHARS = 40
COLOURS = {"added": "#2e7d32", "removed": "#c62828", "rerouted": "#e65100", "unchanged": "#8a8a8a"}
FILLS = {"added": "#e8f5e9", "removed": "#ffebee", "rerouted": "#fff3e0", "unchanged": "#fafafa"}


@dataclass(frozen=True, slots=True)
class TensorError:
    """Verification error of one tensor: largest absolute difference and whether the comparison
    could detect a change there (an uninformative one could not)."""

    max_abs: float
    informative: bool = True


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def _clip(text: str, limit: int = MAX_CHARS) -> str:
    """``text`` shortened in the middle (the ends of a scoped name tell most)."""
    if len(text) <= limit:
        return text
    head = (limit - 1) // 3
    return text[:head] + "\u2026" + text[len(text) - (limit - 1 - head):]


def _node_lines(n: DiffNode) -> list[str]:
    lines = [_clip(n.op_type), _clip(n.name)]
    if n.framework and n.framework != n.name:
        lines.append(_clip(n.framework))
    return lines


def _terminal_text(t: Terminal) -> str:
    if t.kind in ("input", "output"):
        return _clip(t.tensor)
    return f"\u22ef {t.count} more" if t.kind == "collapsed-out" else "\u22ef"


def _box(uid: str, lines: list[str], pad: float = 20.0) -> Box:
    width = max(60.0, max(len(s) for s in lines) * CHAR_W + pad)
    return Box(uid, round(width, 1), round(len(lines) * LINE_H + 12, 1))


def _colour(err: TensorError) -> str:
    """Green (0) through yellow to red (>= 1e-1), on a log scale from 1e-7."""
    if not math.isfinite(err.max_abs):
        return "#b71c1c"
    if err.max_abs <= 0:
        return "#1b5e20"
    level = min(1.0, max(0.0, (math.log10(err.max_abs) + 7) / 6))
    hue = 120 * (1 - level)
    return f"hsl({hue:.0f},75%,40%)"


def _fmt(x: float) -> str:
    return f"{x:.3g}"


def _edge_label(e: DiffEdge) -> str:
    return _clip(f"{e.dtype}{e.shape}", 28) if (e.dtype or e.shape) else ""


def _path(points: tuple[tuple[float, float], ...], h_src: float, h_dst: float) -> str:
    pts = list(points)
    (x0, y0), (x1, y1) = pts[0], pts[-1]
    pts[0] = (x0, y0 + h_src / 2)
    pts[-1] = (x1, y1 - h_dst / 2 - 3)
    return "M" + " L".join(f"{x:.1f},{y:.1f}" for x, y in pts)


def render_html(diff: GraphDiff, *, title: str = "onnxsurgeon diff", summary: str = "",
                errors: Mapping[str, TensorError] | None = None, divergent: str = "") -> str:
    """The page for ``diff``. ``summary`` heads it (the verb's own result); ``errors`` (tensor
    name -> :class:`TensorError`) colours the drawn tensors; ``divergent`` names the first node
    whose output differs. Deterministic."""
    errors = errors or {}
    return _PAGE.format(
        title=_esc(title), css=_CSS, script=_SCRIPT, header=_header(diff, title, summary, errors,
                                                                      divergent),
        svg=render_svg(diff, errors=errors, divergent=divergent))


def render_svg(diff: GraphDiff, *, errors: Mapping[str, TensorError] | None = None,
               divergent: str = "") -> str:
    """The drawing of ``diff`` alone: the page's ``<svg>`` element (styled by the classes of
    :data:`SVG_CSS`), for embedding (a notebook's output). Deterministic."""
    errors = errors or {}
    boxes: list[Box] = []
    sizes: dict[str, Box] = {}
    for n in diff.nodes:
        sizes[n.uid] = _box(n.uid, _node_lines(n))
    for t in diff.terminals:
        b = _box(t.uid, [_terminal_text(t)], pad=24.0)
        sizes[t.uid] = Box(t.uid, b.width, 24.0 if t.kind in ("input", "output") else 20.0)
    order = [t.uid for t in diff.terminals if t.kind in ("input", "collapsed-in")]
    order += [n.uid for n in diff.nodes]
    order += [t.uid for t in diff.terminals if t.kind in ("output", "collapsed-out")]
    boxes = [sizes[u] for u in order]
    geo = layout(boxes, [(e.source, e.target) for e in diff.edges])
    return _svg(diff, geo, sizes, errors, divergent)


def _svg(diff: GraphDiff, geo: Layout, sizes: dict[str, Box], errors: Mapping[str, TensorError],
         divergent: str) -> str:
    out: list[str] = [
        f'<svg id="graph" width="{geo.width:.0f}" height="{geo.height:.0f}" '
        f'viewBox="0 0 {geo.width:.0f} {geo.height:.0f}" role="img">',
        "<defs>",
    ]
    for change, colour in COLOURS.items():
        out.append(f'<marker id="arrow-{change}" viewBox="0 0 10 10" refX="9" refY="5" '
                   f'markerUnits="userSpaceOnUse" markerWidth="10" markerHeight="10" '
                   f'orient="auto-start-reverse">'
                   f'<path d="M0,0 L10,5 L0,10 z" fill="{colour}"/></marker>')
    out.append("</defs>")
    labelled: set[tuple[str, str]] = set()
    out.append('<g class="edges">')
    for e, pts in zip(diff.edges, geo.paths, strict=True):
        if not pts:
            continue
        d = _path(pts, sizes[e.source].height, sizes[e.target].height)
        err = errors.get(e.tensor) if e.change.value != "removed" else None
        extra, style, tip = "", "", f"{e.tensor}\n{e.change.value}"
        if e.dtype or e.shape:
            tip += f"\n{e.dtype}{e.shape}"
        if err is not None:
            extra = f' data-error="{_fmt(err.max_abs)}"'
            style = f'<path class="err" d="{d}" style="stroke:{_colour(err)}"/>'
            tip += f"\nmax |error| = {_fmt(err.max_abs)}" + ("" if err.informative else
                                                            " (uninformative comparison)")
        stub = ' data-stub="true"' if e.stub else ""
        out.append(f'<g class="edge {e.change.value}" data-tensor="{_esc(e.tensor)}" '
                   f'data-change="{e.change.value}"{stub}{extra}><title>{_esc(tip)}</title>'
                   f'{style}<path d="{d}" marker-end="url(#arrow-{e.change.value})"/>')
        label = _edge_label(e)
        if label and (e.source, e.tensor) not in labelled:
            labelled.add((e.source, e.tensor))
            (x0, y0), (x1, y1) = pts[0], pts[1]
            y0 += sizes[e.source].height / 2
            if len(pts) == 2:
                y1 -= sizes[e.target].height / 2
            out.append(f'<text class="elabel" x="{(x0 + x1) / 2 + 5:.1f}" '
                       f'y="{(y0 + y1) / 2 + 4:.1f}">{_esc(label)}</text>')
        out.append("</g>")
    out.append("</g>")
    out.append('<g class="nodes">')
    for n in diff.nodes:
        b, (cx, cy) = sizes[n.uid], geo.centres[n.uid]
        x, y = cx - b.width / 2, cy - b.height / 2
        marks = ""
        if divergent and n.name == divergent and n.change.value != "removed":
            marks = ' data-divergent="true"'
        if n.focus:
            marks += ' data-focus="true"'
        info = [f"{n.op_type} {n.name}", f"change: {n.change.value}"]
        if n.framework:
            info.append(f"framework: {n.framework}")
        info += [f"{k} = {v}" for k, v in n.attributes]
        info.append("inputs: " + ", ".join(n.inputs))
        info.append("outputs: " + ", ".join(n.outputs))
        if marks.startswith(' data-divergent'):
            info.append("first divergent node")
        out.append(f'<g class="node {n.change.value}" data-node="{_esc(n.name)}" '
                   f'data-change="{n.change.value}"{marks}><title>{_esc(chr(10).join(info))}</title>'
                   f'<rect x="{x:.1f}" y="{y:.1f}" width="{b.width:.1f}" height="{b.height:.1f}" '
                   f'rx="4"/>')
        for k, line in enumerate(_node_lines(n)):
            cls = "op" if k == 0 else ("fw" if k == 2 else "name")
            out.append(f'<text class="{cls}" x="{cx:.1f}" y="{y + 16 + k * LINE_H:.1f}">'
                       f"{_esc(line)}</text>")
        out.append("</g>")
    for t in diff.terminals:
        b, (cx, cy) = sizes[t.uid], geo.centres[t.uid]
        x, y = cx - b.width / 2, cy - b.height / 2
        if t.kind in ("input", "output"):
            attrs = f'data-io="{t.kind}" data-tensor="{_esc(t.tensor)}" data-change="{t.change.value}"'
            tip = f"graph {t.kind} {t.tensor}\nchange: {t.change.value}"
        else:
            attrs = (f'data-collapsed="{t.count}" data-tensor="{_esc(t.tensor)}" '
                     f'data-change="{t.change.value}"')
            tip = (f"{t.count} more reader(s) of {t.tensor} not drawn" if t.kind == "collapsed-out"
                   else f"producer of {t.tensor} not drawn")
        out.append(f'<g class="terminal {t.kind} {t.change.value}" {attrs}>'
                   f"<title>{_esc(tip)}</title>"
                   f'<rect x="{x:.1f}" y="{y:.1f}" width="{b.width:.1f}" height="{b.height:.1f}" '
                   f'rx="{b.height / 2:.1f}"/>'
                   f'<text x="{cx:.1f}" y="{cy + 4:.1f}">{_esc(_terminal_text(t))}</text></g>')
    out.append("</g></svg>")
    return "\n".join(out)


def _header(diff: GraphDiff, title: str, summary: str, errors: Mapping[str, TensorError],
            divergent: str) -> str:
    parts = [f"<h1>{_esc(title)}</h1>"]
    if summary:
        parts.append(f'<pre id="summary">{_esc(summary)}</pre>')
    before, after = diff.node_count
    totals, drawn = diff.totals, diff.drawn
    counts = ", ".join(f"{totals[c]} {c}" for c in ("added", "removed", "rerouted", "unchanged"))
    hidden = sum(totals.values()) - sum(drawn.values())
    what = f"focus: tensor {_esc(diff.focus)}; " if diff.focus else ""
    parts.append(
        f'<p id="counts">{what}{before} nodes before, {after} after: {counts}. Drawn: '
        f"{sum(drawn.values())} nodes with {diff.context} hops of context; "
        f'<span id="collapsed" data-hidden="{hidden}">{hidden} nodes collapsed</span>.</p>')
    for note in diff.notes:
        parts.append(f'<p class="note">{_esc(note)}</p>')
    if diff.rewrites:
        parts.append('<details id="record"><summary>rewrite record</summary><pre>'
                     + _esc(json.dumps(list(diff.rewrites), indent=1, sort_keys=True)[:20000])
                     + "</pre></details>")
    legend = ['<div id="legend">']
    for change, colour in COLOURS.items():
        dash = ' stroke-dasharray="5,3"' if change == "removed" else ""
        legend.append(
            f'<span class="key"><svg width="56" height="16"><rect x="1" y="1" width="22" height="14" '
            f'rx="3" fill="{FILLS[change]}" stroke="{colour}"{dash}/><line x1="28" y1="8" x2="54" '
            f'y2="8" stroke="{colour}" stroke-width="2"{dash}/></svg>{change}</span>')
    legend.append('<span class="key"><svg width="30" height="16"><rect x="1" y="2" width="28" '
                  'height="12" rx="6" class="iokey"/></svg>graph input/output</span>')
    legend.append('<span class="key"><svg width="30" height="16"><rect x="1" y="2" width="28" '
                  'height="12" rx="6" class="stubkey"/></svg>collapsed (not drawn)</span>')
    if errors:
        stops = "".join(
            f'<span class="swatch" style="background:{_colour(TensorError(v))}">{_fmt(v)}</span>'
            for v in (0.0, 1e-7, 1e-5, 1e-3, 1e-1))
        legend.append(f'<span class="key">max |error| per tensor: {stops}</span>')
    if divergent:
        legend.append(f'<span class="key"><span class="divkey"></span>first divergent node: '
                      f"{_esc(divergent)}</span>")
    legend.append("</div>")
    parts.append("".join(legend))
    parts.append('<div id="info">hover a node or an edge for its details</div>')
    return "\n".join(parts)


_CSS = """
body{font:14px sans-serif;margin:16px;color:#222;background:#fff}
h1{font-size:18px;margin:0 0 8px}
pre{background:#f5f5f5;padding:6px 8px;margin:4px 0;white-space:pre-wrap;font-size:12px}
#legend{margin:8px 0;display:flex;flex-wrap:wrap;gap:14px;align-items:center}
.key{display:inline-flex;align-items:center;gap:4px}
.swatch{color:#fff;padding:1px 5px;font:11px monospace}
.divkey{display:inline-block;width:18px;height:12px;border:3px solid #6a1b9a;border-radius:3px}
.iokey{fill:#e3f2fd;stroke:#1565c0}.stubkey{fill:#fff;stroke:#bbb;stroke-dasharray:3,2}
#info{position:sticky;top:0;background:#fffde7;border:1px solid #e0d890;padding:4px 8px;
font:12px monospace;white-space:pre-wrap;min-height:2.6em;z-index:2}
#canvas{overflow:auto;border:1px solid #ddd;margin-top:8px}
svg text{font-family:"DejaVu Sans Mono",monospace;font-size:12px;text-anchor:middle}
.node rect{stroke-width:1.5}
.node text.op{font-weight:bold}.node text.fw{fill:#555;font-style:italic}
.node.added rect{fill:#e8f5e9;stroke:#2e7d32}
.node.removed rect{fill:#ffebee;stroke:#c62828;stroke-dasharray:5,3}
.node.removed text{fill:#8e2a2a;text-decoration:line-through}
.node.rerouted rect{fill:#fff3e0;stroke:#e65100;stroke-width:2.5}
.node.unchanged rect{fill:#fafafa;stroke:#8a8a8a}
.node[data-divergent] rect{stroke:#6a1b9a;stroke-width:4}
.node[data-focus] rect{stroke:#1565c0;stroke-width:3}
.terminal rect{fill:#e3f2fd;stroke:#1565c0}
.terminal.removed rect{fill:#ffebee;stroke:#c62828;stroke-dasharray:5,3}
.terminal.added rect{fill:#e8f5e9;stroke:#2e7d32}
.terminal.collapsed-in rect,.terminal.collapsed-out rect{fill:#fff;stroke:#bbb;stroke-dasharray:3,2}
.terminal text{font-size:11px}
.edge path{fill:none;stroke-width:1.6}
.edge.added path{stroke:#2e7d32}.edge.removed path{stroke:#c62828;stroke-dasharray:6,4}
.edge.rerouted path{stroke:#e65100;stroke-width:2.4}.edge.unchanged path{stroke:#8a8a8a}
.edge path.err{stroke-width:7;opacity:.55;stroke-dasharray:none}
.edge[data-stub] path{stroke-dasharray:2,3}
text.elabel{font-size:10px;fill:#555;text-anchor:start}
.hover rect,.hover path{filter:drop-shadow(0 0 3px #1565c0)}
"""

SVG_CSS = "\n".join(line for line in _CSS.splitlines()
                    if line.startswith(("svg", ".node", ".terminal", ".edge", "text.")))
"""The page's style rules that draw :func:`render_svg`'s output (no page layout)."""

_SCRIPT = """
(function(){
  var info=document.getElementById('info');var last=null;
  document.getElementById('graph').addEventListener('mouseover',function(ev){
    var el=ev.target.closest('[data-node],[data-tensor]');
    if(!el||el===last){return;}
    if(last){last.classList.remove('hover');}
    last=el;el.classList.add('hover');
    var t=el.querySelector('title');info.textContent=t?t.textContent:'';
  });
})();
"""

_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<title>{title}</title><style>{css}</style></head>
<body>
{header}
<div id="canvas">
{svg}
</div>
<script>{script}</script>
</body></html>
"""
