"""The pages the CLI draws, loaded in a real headless Chromium (Debian's ``chromium``; these tests
fail, never skip, without it): no console error, no request but the page itself, the
``data-change`` hooks equal the rewrite's own record, no two boxes overlap (measured with
getBoundingClientRect), edges point down, and a screenshot is written. Scenarios: an extract, an
independent copy, an insert followed by a reroute, a verification failure, and
``inspect --around``."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from onnx import numpy_helper

from onnxsurgeon.record import rewrites
from tests import builders
from tests.browser import MEASURE, Browser, BrowserError, chromium_path
from tests.test_cli import cli


@pytest.fixture(scope="module")
def browser():
    if chromium_path() is None:
        pytest.fail("chromium is not installed: apt-get install -y chromium (.ci/run installs it)",
                    pytrace=False)
    with Browser() as b:
        yield b


@pytest.fixture()
def cnn(tmp_path: Path) -> Path:
    path = tmp_path / "cnn.onnx"
    path.write_bytes(builders.tiny_cnn().SerializeToString())
    return path


HOVER = """(() => { const g = document.querySelector('[data-node="%s"] rect');
  g.dispatchEvent(new MouseEvent('mouseover', {bubbles: true}));
  return document.getElementById('info').textContent; })()"""


def load_page(browser: Browser, page: Path, shot: Path, *, hover: str = "") -> dict:
    """Open ``page``; check it loads cleanly and offline, boxes never overlap and edges point
    down; write a screenshot; return the in-browser measurements (and, with ``hover``, the
    details panel after hovering that node)."""
    assert page.stat().st_size < 1_000_000
    view = browser.open(page)
    try:
        m = view.eval(MEASURE)
        if hover:
            m["hover"] = view.eval(HOVER % hover)
        assert view.problems() == []
        assert view.requests() == [page.resolve().as_uri()]
        assert m["boxes"] >= 3
        assert m["overlaps"] == []
        assert m["down"] is True
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
    with pytest.raises(BrowserError):
        view.eval("1")
