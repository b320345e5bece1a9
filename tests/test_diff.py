"""diff: the changed nodes of real rewrites match the rewrite's own record; the drawing is bounded
by the change, not the model; the page's hooks, escaping, offline-ness and determinism; the
layout never overlaps boxes. (The browser checks are in test_diff_browser.py.)"""

from __future__ import annotations

import random
import re
from html.parser import HTMLParser

import onnx
import pytest
from onnx import helper

from onnxsurgeon.diff import Change, diff_models, neighbourhood, render_html
from onnxsurgeon.diff.layout import X_GAP, Box, layout
from onnxsurgeon.record import rewrites
from onnxsurgeon.surgery import Weights, copy, extract, insert, reroute
from tests import builders as B


def clone(model: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    return out


class Hooks(HTMLParser):
    """Collects the page's data- hooks and every src/href."""

    def __init__(self) -> None:
        super().__init__()
        self.nodes: list[tuple[str, str]] = []
        self.edges: list[tuple[str, str]] = []
        self.links: list[str] = []
        self.divergent: list[str] = []
        self.errors: dict[str, str] = {}

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.links += [v for k, v in attrs if k in ("src", "href") and v]
        if "data-node" in a:
            self.nodes.append((a["data-node"], a["data-change"]))
            if a.get("data-divergent") == "true":
                self.divergent.append(a["data-node"])
        elif "data-tensor" in a and "data-change" in a and "data-io" not in a:
            self.edges.append((a["data-tensor"], a["data-change"]))
            if "data-error" in a:
                self.errors[a["data-tensor"]] = a["data-error"]


def hooks(page: str) -> Hooks:
    h = Hooks()
    h.feed(page)
    return h


def by_change(h: Hooks) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {c.value: set() for c in Change}
    for name, change in h.nodes:
        out[change].add(name)
    return out


def test_insert_diff_matches_the_record():
    before = B.tiny_cnn()
    after = clone(before)
    r = insert(after, "act", op="l2_normalize", params={"axis": 1},
               keep_output_name=False)  # act (a graph output) gets a new name: relu5 stays as it was
    d = diff_models(before, after)
    rec = rewrites(after)[-1]
    assert d.rewrites == (rec,)
    page = hooks(render_html(d))
    changes = by_change(page)
    assert changes["added"] == set(rec["block_nodes"]) == set(r.block_nodes)
    assert changes["rerouted"] == set(rec["rerouted"]) == {"pool", "side"}
    assert changes["removed"] == set()
    assert {"conv5", "relu5", "flatten", "fc"} <= changes["unchanged"]
    # the reads of act that moved are drawn as removed edges, the new reads as rerouted ones
    assert ("act", "removed") in page.edges
    assert (r.processed, "rerouted") in page.edges
    assert d.totals == {"added": 4, "removed": 0, "rerouted": 2, "unchanged": 4}


def test_extract_diff_counts_every_removed_node():
    before = B.tiny_cnn()
    after = clone(before)
    r = extract(after, ["logits"])
    d = diff_models(before, after)
    changes = d.changes()
    assert changes["removed"] == {"side"}
    assert d.totals["removed"] == r.removed_nodes == 1
    assert d.totals["unchanged"] == r.kept_nodes
    assert by_change(hooks(render_html(d))) == changes


def test_copy_diff_adds_exactly_the_copied_nodes():
    before = B.tiny_cnn()
    after = clone(before)
    result = copy(after, ["logits"], weights=Weights.INDEPENDENT, prefix="twin/")
    from onnxsurgeon.index import GraphIndex
    from onnxsurgeon.surgery.copy import copied_names

    rec = rewrites(after)[-1]
    d = diff_models(before, after, context=1)
    assert result.nodes and d.changes()["added"] == set(result.nodes.values())
    node_map, _ = copied_names(GraphIndex(after), rec)
    assert d.changes()["added"] == set(node_map.values()) and len(node_map) == rec["copied"]["nodes"]
    assert d.changes()["removed"] == d.changes()["rerouted"] == set()


def test_reroute_diff_marks_the_consumers():
    before = B.tiny_cnn()
    after = clone(before)
    reroute(after, "act", "conv5_out", consumers=["side"])
    d = diff_models(before, after)
    assert d.changes()["rerouted"] == set(rewrites(after)[-1]["rerouted"]) == {"side"}
    assert d.changes()["added"] == d.changes()["removed"] == set()


def test_changed_attribute_draws_the_old_and_the_new_node():
    before = B.tiny_cnn()
    after = clone(before)
    flat = next(n for n in after.graph.node if n.name == "flatten")
    flat.attribute[0].i = 0
    d = diff_models(before, after, context=0)
    assert d.changes()["removed"] == {"flatten"} and d.changes()["added"] == {"flatten"}


def test_large_change_is_drawn_by_its_border_and_counted():
    before = B.chain(1000)  # 3000 nodes
    after = clone(before)
    r = extract(after, ["relu499"])
    d = diff_models(before, after, context=2)
    assert d.totals["removed"] == r.removed_nodes == 1500
    assert len(d.nodes) <= 20  # the cut and its neighbours, not 1500 removed nodes
    assert "MatMul_500" in d.changes()["removed"] and "Relu_499" in d.changes()["unchanged"]
    page = render_html(d)
    assert len(page) < 60_000
    assert f'data-hidden="{3000 - len(d.nodes)}"' in page


def test_insert_in_a_long_chain_draws_only_the_neighbourhood():
    before = B.chain(2000)
    after = clone(before)
    insert(after, "relu1000", op="scale", params={"factor": 2.0})
    d = diff_models(before, after, context=2)
    assert len(d.nodes) < 15
    assert d.changes()["rerouted"] == {"MatMul_1001"}
    assert sum(d.totals.values()) == 6001


def test_context_zero_draws_only_the_changes():
    before = B.tiny_cnn()
    after = clone(before)
    insert(after, "act", op="scale", params={"factor": 2.0})
    d = diff_models(before, after, context=0)
    assert d.changes()["unchanged"] == set()
    with pytest.raises(ValueError):
        diff_models(before, after, context=-1)


def test_neighbourhood_of_a_tensor():
    model = B.chain(50)
    d = neighbourhood(model, "relu20", context=1)
    names = {n.name for n in d.nodes}
    assert names == {"Add_20", "Relu_20", "MatMul_21", "Add_21"}
    assert {n.name for n in d.nodes if n.focus} == {"Relu_20", "MatMul_21"}
    assert d.totals == {"added": 0, "removed": 0, "rerouted": 0, "unchanged": 150}


def test_page_is_offline_escaped_and_deterministic():
    before = B.tiny_cnn()
    after = clone(before)
    insert(after, "act", op="l2_normalize", params={"axis": 1}, keep_output_name=False)
    evil = '<img src="http://x/y.png" onerror=alert(1)>'
    next(n for n in after.graph.node if n.name == "fc").name = evil
    next(n for n in before.graph.node if n.name == "fc").name = evil
    page = render_html(diff_models(before, after), title=evil, summary=evil)
    h = hooks(page)
    assert h.links == []  # no src/href at all, so nothing is fetched
    assert not re.search(r"(src|href)\s*=\s*[\"']?https?:", page)
    assert "<img" not in page and evil in {n for n, _ in h.nodes}
    assert "default-src 'none'" in page
    assert page == render_html(diff_models(before, after), title=evil, summary=evil)


def test_errors_colour_edges_and_mark_the_divergent_node():
    from onnxsurgeon.diff import TensorError

    before = B.tiny_cnn()
    after = clone(before)
    insert(after, "act", op="scale", params={"factor": 2.0})
    page = render_html(diff_models(before, after),
                       errors={"act": TensorError(0.0), "pooled": TensorError(0.25)},
                       divergent="pool")
    h = hooks(page)
    assert h.errors == {"act": "0", "pooled": "0.25"}
    assert h.divergent == ["pool"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_layout_never_overlaps_and_points_down(seed):
    rng = random.Random(seed)
    n = 300
    boxes = [Box(f"v{i}", rng.randint(60, 220), 42.0) for i in range(n)]
    edges = [(f"v{j}", f"v{i}") for i in range(1, n)
             for j in rng.sample(range(max(0, i - 8), i), min(2, i))]
    geo = layout(boxes, edges)
    rects = [(geo.centres[b.uid], b) for b in boxes]
    for k, ((x1, y1), b1) in enumerate(rects):
        for (x2, y2), b2 in rects[k + 1:]:
            apart_x = abs(x1 - x2) >= (b1.width + b2.width) / 2 + X_GAP - 1e-6
            apart_y = abs(y1 - y2) >= (b1.height + b2.height) / 2
            assert apart_x or apart_y, (b1, b2)
    for src, dst in edges:
        assert geo.centres[src][1] < geo.centres[dst][1]
    assert all(x - b.width / 2 >= 0 and x + b.width / 2 <= geo.width for (x, _), b in rects)


def test_disconnected_parts_sit_side_by_side():
    geo = layout([Box("a", 80, 30), Box("b", 80, 30), Box("c", 80, 30)], [("a", "b")])
    assert geo.centres["c"][0] > geo.centres["a"][0] + 80


def test_unnamed_nodes_are_matched_by_their_output():
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Neg", ["h"], ["y"])],
                          "g", [x], [y])
    before = helper.make_model(g)
    after = clone(before)
    insert(after, "h", op="scale", params={"factor": 2.0})
    d = diff_models(before, after)
    assert d.changes()["unchanged"] == {"<Relu h>"}
    assert d.changes()["rerouted"] == {"<Neg y>"}


def _perturbed_chain() -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """A 3-block chain whose middle Add reads its own bias ``B1``; the candidate's ``B1`` is
    shifted by 0.5, so add1 and everything after it differ while relu0 and mm1 agree."""
    from onnx import numpy_helper

    before = B.chain(3)
    bias = next(t for t in before.graph.initializer if t.name == "B")
    before.graph.initializer.append(numpy_helper.from_array(numpy_helper.to_array(bias), "B1"))
    add1 = next(n for n in before.graph.node if n.name == "Add_1")
    add1.input[1] = "B1"
    after = clone(before)
    b1 = next(t for t in after.graph.initializer if t.name == "B1")
    b1.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(b1) + 0.5, "B1"))
    return before, after


def test_errors_from_a_deep_comparison_colour_tensors_beyond_the_outputs():
    """The page's scale comes from the layer-wise comparison: an intermediate tensor after the
    changed weight carries its error, one before it zero, and the first difference is marked."""
    from onnxsurgeon.diff.output import errors_from_report
    from onnxsurgeon.verify import compare

    before, after = _perturbed_chain()
    plain = compare(before, after)
    assert not plain.ok and plain.deep is None
    shallow, _ = errors_from_report(plain)
    assert "relu0" not in shallow and "relu1" not in shallow  # the outputs and divergence only
    deep = compare(before, after, deep=True, locate_divergence=False).deep
    errors, divergent = errors_from_report(plain, deep)
    assert divergent == "Add_1"
    assert errors["relu0"].max_abs == 0 and errors["mm1"].max_abs == 0
    assert errors["add1"].max_abs == pytest.approx(0.5, abs=1e-6)
    assert errors["relu1"].max_abs > 0 and errors["mm2"].max_abs > 0
    assert errors["y"].max_abs > 0
    page = hooks(render_html(diff_models(before, after, include=[divergent]), errors=errors,
                             divergent=divergent))
    assert page.divergent == ["Add_1"]
    assert page.errors["relu0"] == "0" and float(page.errors["relu1"]) > 0


def test_cli_diff_verify_colours_by_the_deep_comparison(tmp_path):
    from tests.test_cli import cli

    before, after = _perturbed_chain()
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    onnx.save(before, a)
    onnx.save(after, b)
    r = cli("diff", a, b, "-o", tmp_path / "d.html", "--verify")
    assert r.returncode == 1, r.stdout + r.stderr
    h = hooks((tmp_path / "d.html").read_text())
    assert h.divergent == ["Add_1"]
    assert h.errors["relu0"] == "0"
    assert float(h.errors["add1"]) == pytest.approx(0.5, abs=1e-6)
    assert float(h.errors["relu1"]) > 0


# ------------------------------------------------------------------------------------ CLI
def test_cli_bad_html_paths_exit_2_and_write_nothing(tmp_path):
    from tests.test_cli import cli

    src = tmp_path / "m.onnx"
    src.write_bytes(B.tiny_cnn().SerializeToString())
    before = src.read_bytes()
    cases = [
        ("extract", src, "-o", tmp_path / "o.onnx", "--outputs", "logits", "--html", src),
        ("extract", src, "-o", tmp_path / "o.onnx", "--outputs", "logits", "--html",
         tmp_path / "o.onnx"),
        ("diff", src, src, "-o", tmp_path / "no" / "d.html"),
        ("diff", src, src, "-o", src),
        ("inspect", src, "--html", tmp_path / "i.html"),
        ("inspect", src, "--around", "nope", "--html", tmp_path / "i.html"),
        ("diff", src, src, "-o", tmp_path / "d.html", "--context", "-1"),
    ]
    for args in cases:
        r = cli(*args)
        assert r.returncode == 2, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert src.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_cli_diff_of_identical_models_draws_nothing_changed(tmp_path):
    from tests.test_cli import cli

    src = tmp_path / "m.onnx"
    src.write_bytes(B.tiny_cnn().SerializeToString())
    r = cli("diff", src, src, "-o", tmp_path / "d.html")
    assert r.returncode == 0, r.stderr
    h = hooks((tmp_path / "d.html").read_text())
    assert h.nodes == [] and "0 added, 0 removed, 0 rerouted, 6 unchanged" in (tmp_path / "d.html").read_text()


def test_cli_html_on_a_later_verb(tmp_path):
    """Verbs added later get --html from the shared flag helper: bypass draws what it removed."""
    from tests.test_cli import cli

    src = tmp_path / "m.onnx"
    src.write_bytes(B.tiny_cnn().SerializeToString())
    r = cli("bypass", src, "-o", tmp_path / "b.onnx", "--node", "relu5", "--html", tmp_path / "b.html")
    assert r.returncode == 0, r.stderr
    c = by_change(hooks((tmp_path / "b.html").read_text()))
    removed = set(rewrites(onnx.load(tmp_path / "b.onnx"))[-1]["removed"])
    assert removed == {"relu5"} and removed <= c["removed"]
    # conv5 now writes 'act' itself (the graph output keeps its name): old and new conv5 drawn
    assert c["removed"] - removed == c["added"] == {"conv5"}


def test_readme_shows_a_picture_of_a_page():
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    assert "](docs/diff_example.png)" in (root / "README.md").read_text()
    png = (root / "docs" / "diff_example.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and 10_000 < len(png) < 200_000


def test_boxes_show_the_framework_name():
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    model = onnx.load(root / "models" / "torch_cnn.onnx")
    view = neighbourhood(model, "conv2d", context=1)
    fw = {n.name: n.framework for n in view.nodes}
    assert fw["node_conv2d"] == "conv5"
    page = render_html(view)
    assert ">conv5</text>" in page and 'data-focus="true"' in page


def test_a_long_copy_is_drawn_by_both_ends():
    before = B.chain(1000)
    after = clone(before)
    copy(after, ["y"], weights=Weights.INDEPENDENT, prefix="t/")
    d = diff_models(before, after, context=2)
    names = d.changes()
    assert d.totals["added"] == 3000 and len(d.nodes) < 12
    assert {"t/MatMul_0", "t/Relu_999"} <= names["added"]  # where it starts and where it ends
    assert "MatMul_0" in names["unchanged"]  # the original, through the shared input x


def test_edges_of_a_small_model_are_typed_by_inference():
    before = B.tiny_cnn()
    after = clone(before)
    insert(after, "act", op="l2_normalize", params={"axis": 1})
    for v in list(after.graph.value_info):  # whatever the verb recorded: inference fills it in
        after.graph.value_info.remove(v)
    d = diff_models(before, after)
    types = {e.tensor: (e.dtype, e.shape) for e in d.edges}
    assert types["conv5_out"] == ("float32", "[1,4,8,8]")
    assert types["act/l2_normalize/sum_sq"] == ("float32", "[1,1,8,8]")


def test_edges_of_a_large_model_are_typed_by_the_drawn_nodes_alone(monkeypatch):
    """Above INFER_MAX_NODES the drawn nodes alone go through shape inference (fed the types
    the file declares), so the page costs what is drawn: the inserted block's recorded type
    types the readers after it; nothing types the untyped chain before it (issue 26)."""
    import onnxsurgeon.types as types_module
    from onnxsurgeon.diff.describe import INFER_MAX_NODES

    before = B.chain(2000)
    assert len(before.graph.node) > INFER_MAX_NODES
    after = clone(before)
    insert(after, "relu1000", op="scale", params={"factor": 2.0})
    sizes: list[int] = []
    real = types_module.infer_value_infos

    def counted(model):
        sizes.append(len(model.graph.node))
        return real(model)

    monkeypatch.setattr(types_module, "infer_value_infos", counted)
    d = diff_models(before, after, context=2)
    assert sizes and max(sizes) <= len(d.nodes)
    types = {(e.tensor, e.change.value): (e.dtype, e.shape) for e in d.edges}
    assert types[("relu1000/scale", "rerouted")] == ("float32", "[1,4]")
    assert types[("mm1001", "unchanged")] == types[("relu1001", "unchanged")] == ("float32", "[1,4]")
    assert types[("add1000", "unchanged")] == ("", "")
