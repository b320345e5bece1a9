"""Coordinates for a drawing: a layered (Sugiyama) layout computed by grandalf.

Why grandalf (PyPI, pure Python, GPLv2-or-EPLv1, used here as an unmodified dependency under the
EPL) and not a JavaScript library such as @dagrejs/dagre inlined into the page:

* the page stays plain inline SVG with coordinates fixed at write time, so it renders where
  scripts are blocked (CI artifact viewers with a strict Content-Security-Policy) and a test can
  check the geometry without a browser too;
* a pip user gets it with ``pip install onnxsurgeon``; dagre would need npm at development time
  and a vendored, separately licensed bundle (~80 KB minified) in every page;
* the same command writes byte-identical pages (no layout at view time).

Graphviz is not an option: it is a system package that users lack.

grandalf ranks the nodes (edges point down), orders each layer to reduce crossings and places
them with Brandes-Koepf. Its placement can, rarely, leave two neighbours in one layer closer than
the gap asked for (seen once in a random 500-node DAG); :func:`layout` therefore finishes each
layer with one left-to-right sweep that restores the minimum gap, keeping grandalf's order, and
routes edges through grandalf's dummy vertices from the final positions. Disconnected parts are
laid out one by one and placed side by side. Cost: grandalf is ~O(V * E) per ordering round;
about 0.2 s for 200 nodes on this machine, which is why the drawing is capped at a few hundred.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

X_GAP = 28.0
"""Least horizontal space between two boxes of one layer."""
Y_GAP = 52.0
"""Vertical space between layers (room for edge labels)."""
COMPONENT_GAP = 60.0
"""Horizontal space between disconnected parts."""
MARGIN = 20.0
DUMMY_WIDTH = 12.0
"""Width reserved for an edge passing through a layer."""


@dataclass(frozen=True, slots=True)
class Box:
    """A node to place: ``uid`` and its size."""

    uid: str
    width: float
    height: float


@dataclass(frozen=True)
class Layout:
    """Centres of the boxes, polylines of the edges (by edge position), canvas size."""

    centres: dict[str, tuple[float, float]]
    paths: tuple[tuple[tuple[float, float], ...], ...]
    width: float
    height: float


class _View:
    __slots__ = ("w", "h", "xy")

    def __init__(self, w: float, h: float) -> None:
        self.w, self.h = w, h
        self.xy: tuple[float, float] = (0.0, 0.0)


def layout(boxes: Sequence[Box], edges: Sequence[tuple[str, str]]) -> Layout:
    """Place ``boxes`` so that ``edges`` (source uid, target uid) point down, with no overlap.

    Edges must form a DAG (every ONNX graph does). Deterministic for the same input order.
    """
    from grandalf.graphs import Edge, Vertex, graph_core
    from grandalf.layouts import DummyVertex, SugiyamaLayout

    if not boxes:
        return Layout({}, tuple(() for _ in edges), 2 * MARGIN, 2 * MARGIN)
    order = {b.uid: k for k, b in enumerate(boxes)}
    vertices = {b.uid: Vertex(b.uid) for b in boxes}
    for b in boxes:
        vertices[b.uid].view = _View(b.width, b.height)
    gedges = [Edge(vertices[src], vertices[dst]) for src, dst in edges]
    edge_pos = {id(e): k for k, e in enumerate(gedges)}
    # connected parts in input order (grandalf's own Graph() orders edges by a set of objects,
    # which would make the drawing differ from run to run)
    parent = {b.uid: b.uid for b in boxes}

    def find(u: str) -> str:
        while parent[u] != u:
            parent[u] = parent[parent[u]]
            u = parent[u]
        return u

    for src, dst in edges:
        ra, rb = find(src), find(dst)
        if ra != rb:
            parent[max(ra, rb, key=order.__getitem__)] = min(ra, rb, key=order.__getitem__)
    members: dict[str, list[str]] = {}
    for b in boxes:
        members.setdefault(find(b.uid), []).append(b.uid)
    part_edges: dict[str, list[Edge]] = {}
    for (src, _), e in zip(edges, gedges, strict=True):
        part_edges.setdefault(find(src), []).append(e)
    parts = [graph_core([vertices[u] for u in uids], part_edges.get(root, []))
             for root, uids in members.items()]
    routes: dict[int, list[tuple[float, float]]] = {}
    offset = MARGIN
    height = 0.0
    for part in parts:
        sug = SugiyamaLayout(part)
        sug.xspace, sug.yspace = X_GAP, Y_GAP
        roots = [v for v in part.sV if len(v.e_in()) == 0]
        sug.init_all(roots=roots, inverted_edges=[])
        for layer in sug.layers:
            for v in layer:
                if isinstance(v, DummyVertex):
                    v.view.w = DUMMY_WIDTH
        sug.draw(3)
        xs = _separate(sug)
        left = min(x - v.view.w / 2 for layer in sug.layers for v, x in zip(layer, xs[id(layer)], strict=True))
        right = max(x + v.view.w / 2 for layer in sug.layers for v, x in zip(layer, xs[id(layer)], strict=True))
        shift = offset - left
        for layer in sug.layers:
            for v, x in zip(layer, xs[id(layer)], strict=True):
                v.view.xy = (x + shift, v.view.xy[1] + MARGIN)
                height = max(height, v.view.xy[1] + v.view.h / 2)
        for e in part.sE:
            pts = [e.v[0].view.xy]
            ctrl = sug.ctrls.get(e)
            if ctrl:
                r0, r1 = sug.grx[e.v[0]].rank, sug.grx[e.v[1]].rank
                pts += [ctrl[r].view.xy for r in range(r0 + 1, r1)]
            pts.append(e.v[1].view.xy)
            routes[edge_pos[id(e)]] = pts
        offset += (right - left) + COMPONENT_GAP
    centres = {uid: v.view.xy for uid, v in vertices.items()}
    paths = tuple(tuple(routes.get(k, ())) for k in range(len(gedges)))
    return Layout(centres, paths, offset - COMPONENT_GAP + MARGIN, height + MARGIN)


def _separate(sug: object) -> dict[int, list[float]]:
    """Final x per vertex of each layer: grandalf's, pushed right where two neighbours would be
    closer than :data:`X_GAP` (one sweep per layer, grandalf's order kept)."""
    out: dict[int, list[float]] = {}
    for layer in sug.layers:  # type: ignore[attr-defined]
        layer.sort(key=lambda v: v.view.xy[0])
        xs: list[float] = []
        for k, v in enumerate(layer):
            x = float(v.view.xy[0])
            if k:
                prev = layer[k - 1]
                x = max(x, xs[-1] + (prev.view.w + v.view.w) / 2 + X_GAP)
            xs.append(x)
        out[id(layer)] = xs
    return out
