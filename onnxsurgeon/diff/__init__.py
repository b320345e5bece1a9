"""See a rewrite: what changed between two models, drawn as one self-contained HTML page.

:func:`diff_models` and :func:`neighbourhood` are pure queries returning a :class:`GraphDiff`
(what to draw); :func:`render_html` turns one into a page. Submodules: ``changes`` (the diff and
the drawn neighbourhood), ``describe`` (attribute and type texts), ``layout`` (coordinates from
grandalf's Sugiyama layout), ``page`` (the HTML/SVG text).
"""

from __future__ import annotations

from .changes import Change, DiffEdge, DiffNode, GraphDiff, Terminal, diff_models, neighbourhood
from .page import TensorError, render_html, render_svg

__all__ = ["Change", "DiffEdge", "DiffNode", "GraphDiff", "Terminal", "TensorError",
           "diff_models", "neighbourhood", "render_html", "render_svg"]
