"""The pages the CLI draws, loaded in a real headless Chromium (Debian's ``chromium``; these tests
fail, never skip, without it): no console error, no request but the page itself, the
``data-change`` hooks equal the rewrite's own record, no two boxes overlap (measured with
getBoundingClientRect), edges point down, and a screenshot is written. Scenarios: an extract, an
independent copy, an insert followed by a reroute, a verification failure, and
``inspect --around``; and ``--verify --html`` on a rewriting verb, passing and (a verb with an
injected bug) failing, coloured by the forced layer-wise comparison."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import numpy_helper

from onnxsurgeon.record import rewrites
from tests import builders
from tests.browser import MEASURE, Browser, BrowserError, chromium_path
from tests.cli_helpers import ROOT
from tests.test_cli import cli


@pytest.fixture(scope="module")
def browser():
    if chromium_path() is None:
        pytest.fail("chromium is not installed: apt-get install -y chromium (.ci/run installs it)",
                    pytrace=False)
    with Browser() as b:
        yield b


HOVER = """(() => { const g = document.querySelector('[data-node="%s"] rect');
  g.dispatchEvent(new MouseEvent('mouseover', {bubbles: true}));
  return document.getElementById('info').textContent; })()"""


HOOKS = """[...document.querySelectorAll('[data-tensor]')].map(e => [
  e.getAttribute('class'), e.getAttribute('data-change'), e.getAttribute('data-tensor')])"""
CHANGES = {"added", "removed", "rerouted", "unchanged"}


def load_page(browser: Browser, page: Path, shot: Path, *, hover: str = "") -> dict:
    """Open ``page``; check it loads cleanly and offline, boxes never overlap and edges point
    down; write a screenshot; return the in-browser measurements (and, with ``hover``, the
    details panel after hovering that node)."""
    assert page.stat().st_size < 1_000_000
    view = browser.open(page)
    try:
        m = view.eval(MEASURE)
        m["hooks"] = view.eval(HOOKS)
        if hover:
            m["hover"] = view.eval(HOVER % hover)
        assert view.problems() == []
        assert view.requests() == [page.resolve().as_uri()]
        assert m["boxes"] >= 3
        assert m["overlaps"] == []
        assert m["down"] is True
        # the documented hook: whatever carries data-tensor carries one of the four changes
        assert [h for h in m["hooks"] if h[1] not in CHANGES] == []
        view.screenshot(shot)
    finally:
        view.close()
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 5_000
    return m


def changes(m: dict) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {k: set() for k in ("added", "removed", "rerouted", "unchanged")}
    for name, change in m["nodes"]:
        out[change].add(name)
    return out


def test_extract_page(browser, cnn, tmp_path):
    r = cli("extract", cnn, "-o", tmp_path / "e.onnx", "--outputs", "logits", "--json",
            "--html", tmp_path / "e.html")
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    m = load_page(browser, tmp_path / "e.html", tmp_path / "e.png", hover="conv5")
    assert "Conv conv5" in m["hover"] and "pads = [1, 1, 1, 1]" in m["hover"]
    assert "inputs: x, conv5.weight, conv5.bias" in m["hover"]
    c = changes(m)
    assert len(c["removed"]) == len(builders.tiny_cnn().graph.node) - result["nodes"] == 1
    assert c["removed"] == {"side"} and c["added"] == c["rerouted"] == set()
    assert ["side_out", "removed"] in m["edges"]


def test_independent_copy_page(browser, cnn, tmp_path):
    r = cli("copy", cnn, "-o", tmp_path / "c.onnx", "--outputs", "logits", "--weights",
            "independent", "--prefix", "twin/", "--json", "--html", tmp_path / "c.html")
    assert r.returncode == 0, r.stderr
    copied = json.loads(r.stdout)["nodes"]
    m = load_page(browser, tmp_path / "c.html", tmp_path / "c.png")
    c = changes(m)
    assert c["added"] == set(copied.values()) and len(copied) == 5
    assert c["removed"] == c["rerouted"] == set()
    assert c["unchanged"] == {"conv5"}  # the original, two hops away through the shared input x


def test_insert_then_reroute_pages(browser, cnn, tmp_path):
    mid, out = tmp_path / "mid.onnx", tmp_path / "out.onnx"
    r = cli("insert", cnn, "-o", mid, "--at", "act", "--op", "scale:factor=2",
            "--rename-output",  # act (a graph output) gets a new name: relu5 stays as it was
            "--html", tmp_path / "insert.html")
    assert r.returncode == 0, r.stderr
    ins = rewrites(onnx.load(mid))[-1]
    m = load_page(browser, tmp_path / "insert.html", tmp_path / "insert.png")
    assert changes(m)["added"] == set(ins["block_nodes"])
    assert changes(m)["rerouted"] == set(ins["rerouted"]) == {"pool", "side"}

    r = cli("reroute", mid, "-o", out, "--from", ins["processed"], "--to", "conv5_out",
            "--consumers", "side", "--html", tmp_path / "reroute.html", "--context", "1")
    assert r.returncode == 0, r.stderr
    rr = rewrites(onnx.load(out))[-1]
    m = load_page(browser, tmp_path / "reroute.html", tmp_path / "reroute.png")
    assert changes(m)["rerouted"] == set(rr["rerouted"]) == {"side"}
    assert changes(m)["added"] == changes(m)["removed"] == set()
    assert ["conv5_out", "rerouted"] in m["edges"] and [ins["processed"], "removed"] in m["edges"]

    # the two rewrites together, as `diff` sees them
    r = cli("diff", cnn, out, "-o", tmp_path / "both.html")
    assert r.returncode == 0, r.stderr
    m = load_page(browser, tmp_path / "both.html", tmp_path / "both.png")
    assert changes(m)["added"] == set(ins["block_nodes"])
    assert changes(m)["rerouted"] == set(ins["rerouted"]) | set(rr["rerouted"])


def test_collapsed_stubs_carry_the_hooks(browser, tmp_path):
    """An insert in a chain too long to draw: the stubs standing for the undrawn producer and
    readers carry data-tensor and data-change like every edge (issue 26)."""
    src = tmp_path / "chain.onnx"
    onnx.save(builders.chain(2000), src)
    r = cli("insert", src, "-o", tmp_path / "i.onnx", "--at", "relu1000", "--op",
            "scale:factor=2", "--html", tmp_path / "i.html")
    assert r.returncode == 0, r.stderr
    m = load_page(browser, tmp_path / "i.html", tmp_path / "i.png")
    stubs = [h for h in m["hooks"] if "collapsed" in h[0]]
    assert {h[0].split()[1] for h in stubs} == {"collapsed-in", "collapsed-out"}
    assert {h[1] for h in stubs} == {"unchanged"}
    assert {h[2] for h in stubs} == {"mm1000", "relu1001"}


def test_verify_failure_page(browser, cnn, tmp_path):
    """A rewrite whose downstream was tampered with: verification fails, the page colours the
    tensors by their error and marks the node where the models part."""
    good = tmp_path / "good.onnx"
    assert cli("insert", cnn, "-o", good, "--at", "act", "--op", "scale:factor=2").returncode == 0
    model = onnx.load(good)
    fc = next(t for t in model.graph.initializer if t.name == "fc.weight")
    fc.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(fc) + 0.5, "fc.weight"))
    bad = tmp_path / "bad.onnx"
    onnx.save(model, bad)
    r = cli("diff", cnn, bad, "-o", tmp_path / "v.html", "--verify")
    assert r.returncode == 1, r.stdout + r.stderr
    m = load_page(browser, tmp_path / "v.html", tmp_path / "v.png")
    assert m["divergent"] == ["fc"]
    errs = {t: float(v) for t, v, _ in m["errors"]}
    assert errs["logits"] > 0.1
    assert errs["side_out"] == 0  # the untouched branch agrees: a different colour
    assert errs["flat"] == 0  # an intermediate from the deep comparison: fc's input agrees
    colours = {t: c for t, _, c in m["errors"]}
    assert colours["logits"] != colours["side_out"]


def test_inspect_around_page(browser, cnn, tmp_path):
    r = cli("inspect", cnn, "--around", "act", "--context", "1", "--html", tmp_path / "a.html")
    assert r.returncode == 0, r.stderr
    m = load_page(browser, tmp_path / "a.html", tmp_path / "a.png")
    c = changes(m)
    assert c["unchanged"] == {"conv5", "relu5", "pool", "side", "flatten"}


def test_the_checks_can_fail(browser, tmp_path):
    """The measurements see a script error, a blocked fetch and overlapping boxes."""
    page = tmp_path / "bad.html"
    page.write_text(
        '<!DOCTYPE html><html><body><img src="http://127.0.0.1:9/x.png">'
        '<svg id="graph" width="300" height="100"><g class="node" data-node="a" '
        'data-change="added"><rect x="0" y="0" width="100" height="40"/></g>'
        '<g class="node" data-node="b" data-change="added"><rect x="50" y="10" width="100" '
        'height="40"/></g><g class="node" data-node="c" data-change="added"><rect x="200" y="0" '
        'width="50" height="40"/></g></svg><script>undefinedFunction()</script></body></html>')
    view = browser.open(page)
    m = view.eval(MEASURE)
    assert m["overlaps"] == [["a", "b"]]
    assert any("undefinedFunction" in p for p in view.problems())
    assert "http://127.0.0.1:9/x.png" in view.requests()
    view.close()
    # a closed page never answers: wait 3 s for that instead of the browser's usual 60 s
    browser.timeout, usual = 3.0, browser.timeout
    try:
        with pytest.raises(BrowserError):
            view.eval("1")
    finally:
        browser.timeout = usual


EDGES = """(() => [...document.querySelectorAll('#graph .edge')].map(e => {
  const err = e.querySelector('path.err');
  e.dispatchEvent(new MouseEvent('mouseover', {bubbles: true}));
  return [e.getAttribute('data-tensor'), e.getAttribute('data-change'),
          e.getAttribute('data-error'), err ? err.getAttribute('style') : null,
          document.getElementById('info').textContent]; }))()"""

BUGGY_INSERT = """
import sys
from onnx import numpy_helper
import onnxsurgeon.surgery as surgery
real = surgery.insert
def buggy(model, *args, **kwargs):  # a verb with a bug: it also shifts a downstream weight
    result = real(model, *args, **kwargs)
    fc = next(t for t in model.proto.graph.initializer if t.name == "fc.weight")
    fc.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(fc) + 0.5, "fc.weight"))
    return result
surgery.insert = buggy
from onnxsurgeon.cli import main
sys.exit(main(sys.argv[1:]))
"""


def verified_edges(browser: Browser, page: Path, shot: Path, report: dict) -> dict[str, tuple]:
    """Load a ``--verify --html`` page; check every drawn edge of the rewritten model that the
    forced deep comparison (else a compared pair) covers carries exactly its error
    (``data-error``, the colour, the hover text). Returns tensor -> (error, colour style) of the
    coloured edges."""
    from onnxsurgeon.diff.page import TensorError, _colour, _fmt

    load_page(browser, page, shot)
    view = browser.open(page)
    try:
        edges = view.eval(EDGES)
    finally:
        view.close()
    deep = {t["candidate"]: t["max_abs_diff"] for t in report["deep"]["tensors"]}
    assert report["deep"]["forced"] is True
    known = {**{p["candidate"]: p["max_abs_diff"] for p in report["pairs"]}, **deep}
    coloured: dict[str, tuple] = {}
    for tensor, change, error, style, hover in edges:
        if change == "removed" or tensor not in known:
            assert change == "removed" or error is None, tensor
            continue
        value = known[tensor]
        value = float("inf") if value is None else value
        assert error == _fmt(value), (tensor, error, value)
        assert style == f"stroke:{_colour(TensorError(value))}", (tensor, style)
        assert f"max |error| = {_fmt(value)}" in hover, hover
        coloured[tensor] = (float(error), style)
    return coloured


def test_insert_verify_html_colours_every_drawn_tensor(browser, cnn, tmp_path):
    """`insert --verify --html`: the page colours the drawn tensors by the forced layer-wise
    comparison (intermediates too, not only the compared outputs); all agree, nothing marked."""
    r = cli("insert", cnn, "-o", tmp_path / "i.onnx", "--at", "act", "--op", "scale:factor=2",
            "--verify", "--json", "--html", tmp_path / "i.html")
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads(r.stdout)["verify"]
    coloured = verified_edges(browser, tmp_path / "i.html", tmp_path / "i.png", report)
    assert {"pooled", "flat", "side_out", "act/pre_scale"} <= set(coloured)
    assert {"pooled", "flat"}.isdisjoint(p["candidate"] for p in report["pairs"])
    assert all(err == 0 for err, _ in coloured.values())
    assert 'data-divergent="true"' not in (tmp_path / "i.html").read_text()


def test_buggy_insert_verify_html_marks_the_first_divergent_node(browser, cnn, tmp_path):
    """A verb with a bug (the insert also shifts fc.weight): `--verify` fails, nothing is written,
    and the page colours each drawn tensor by its error from the forced deep comparison and
    marks fc, where the rewritten model first parts from the invariant."""
    out, page = tmp_path / "i.onnx", tmp_path / "bug.html"
    r = subprocess.run([sys.executable, "-c", BUGGY_INSERT, "insert", str(cnn), "-o", str(out),
                        "--at", "act", "--op", "scale:factor=2", "--verify", "--json",
                        "--html", str(page)], capture_output=True, text=True, cwd=ROOT,
                       timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    assert not out.exists() and "nothing written" in r.stderr
    report = json.loads(r.stdout)["verify"]
    assert report["verdict"] == "fail" and report["divergence"]["node"] == "fc"
    coloured = verified_edges(browser, page, tmp_path / "bug.png", report)
    assert coloured["logits"][0] > 0.1
    assert coloured["flat"][0] == coloured["pooled"][0] == coloured["side_out"][0] == 0
    assert coloured["logits"][1] != coloured["flat"][1]
    m = load_page(browser, page, tmp_path / "bug2.png", hover="fc")
    assert m["divergent"] == ["fc"] and "first divergent node" in m["hover"]


STYLES = """(() => {
  const one = (sel) => { const e = document.querySelector(sel); if (!e) return null;
    const s = getComputedStyle(e); return [s.stroke, s.strokeDasharray, s.fill]; };
  const out = {nodes: {}, edges: {}};
  for (const c of ['added', 'removed', 'rerouted', 'unchanged']) {
    out.nodes[c] = one(`#graph .node[data-change="${c}"] rect`);
    out.edges[c] = one(`#graph .edge[data-change="${c}"]:not([data-stub]) path:not(.err)`);
  }
  out.legend = document.getElementById('legend').textContent;
  return out; })()"""


def test_the_four_kinds_look_different_and_have_a_legend(browser, cnn, tmp_path):
    """Added, removed, rerouted and unchanged nodes and edges are drawn in four different
    styles (measured in the browser: stroke colour, dashes, fill), removed ones dashed, and
    the legend names all four."""
    after = tmp_path / "after.onnx"
    assert cli("insert", cnn, "-o", after, "--at", "act", "--op", "scale:factor=2",
               "--rename-output").returncode == 0
    model = onnx.load(after)
    next(n for n in model.graph.node if n.name == "side").op_type = "ReduceMean"  # old + new side
    onnx.save(model, after)
    r = cli("diff", cnn, after, "-o", tmp_path / "k.html")
    assert r.returncode == 0, r.stderr
    load_page(browser, tmp_path / "k.html", tmp_path / "k.png")
    view = browser.open(tmp_path / "k.html")
    try:
        s = view.eval(STYLES)
    finally:
        view.close()
    kinds = ("added", "removed", "rerouted", "unchanged")
    assert all(s["nodes"][k] and s["edges"][k] for k in kinds), s
    assert len({tuple(s["nodes"][k]) for k in kinds}) == 4
    assert len({s["edges"][k][0] for k in kinds}) == 4  # four edge colours
    assert s["nodes"]["removed"][1] != "none" and s["edges"]["removed"][1] != "none"
    assert s["nodes"]["added"][1] == "none" and s["edges"]["unchanged"][1] == "none"
    assert all(k in s["legend"] for k in kinds)
