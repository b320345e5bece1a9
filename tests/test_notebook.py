"""Rich display in Jupyter (issue 32): what a notebook shows for a model, ``Model.show``, every
verb's result, a verification and a listing; the tour notebook executed in a real kernel; plain
``repr`` short; ``--version`` and ``__version__`` from the package metadata."""

from __future__ import annotations

import dataclasses
import re
import sys
from importlib.metadata import version

import onnx
import pytest
import tomllib
from onnx import TensorProto, helper

import onnxsurgeon as osg
from onnxsurgeon import cli
from onnxsurgeon.record import RECENT
from onnxsurgeon.surgery import Weights, bypass, copy, extract, insert, merge, rename, reroute
from onnxsurgeon.verify import compare, verify_log
from tests.cli_helpers import ROOT

SEED = ROOT / "models" / "seed_cnn.onnx"
ACT = "network/layer_conv5/Relu:0"
NETWORK = re.compile(r"(?:https?:)?//|<script|<link|@import|url\((?!#)")
"""What an offline, self-contained output may not hold: network links, scripts, stylesheets."""


@pytest.fixture
def in_ipython(monkeypatch):
    """The process looks like an IPython session (a verb logs the model its rewrite went to)."""
    shell = type(sys)("IPython")             # a running shell, as a kernel has one
    shell.get_ipython = object
    monkeypatch.setitem(sys.modules, "IPython", shell)
    RECENT.clear()
    yield
    RECENT.clear()


def _offline(page: str) -> str:
    assert NETWORK.search(page) is None, NETWORK.search(page)
    assert page.startswith('<div class="osg"') and page.endswith("</div>")
    return page


def _changes(page: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for change, name in re.findall(r'<g class="node (\w+)" data-node="([^"]*)"', page):
        found.setdefault(change, set()).add(name)
    return found


def test_a_model_shows_its_summary_and_its_repr_stays_short():
    model = osg.load(SEED)
    page = _offline(model._repr_html_())
    for text in ("input:0", "logits:0", "aux:0", "[batch, 8, 8, 3]", "ai.onnx", "Conv",
                 "GlobalAveragePool"):
        assert text in page, text
    weights = sum(t.ByteSize() for t in model.proto.graph.initializer)
    assert re.search(r"<th>initializers</th><td>6</td>", page)
    shown = int(re.search(r"<th>bytes</th><td>([\d,]+)</td>", page).group(1).replace(",", ""))
    assert 0.9 * weights < shown <= weights            # values only, not the proto framing
    assert repr(model) == f"Model({str(SEED.resolve())!r}, 9 nodes, 1 inputs, 2 outputs, " \
                          "6 initializers)"


def test_show_draws_the_neighbourhood_of_a_tensor_and_refuses_an_unknown_one():
    model = osg.load(SEED)
    view = model.show(around="network/layer_conv5/Relu", context=1)
    assert view.tensor == ACT and len(repr(view)) < 80
    page = _offline(view._repr_html_())
    assert "<svg" in page and 'data-focus="true"' in page
    assert _changes(page) == {"unchanged": {    # producer and readers, then one hop each way
        "network/layer_conv5/Relu", "network/flatten/Reshape", "network/aux/pool",
        "network/layer_conv5/Conv2D", "network/fc1/MatMul", "network/aux/flat"}}
    with pytest.raises(osg.NotFoundError, match="did you mean"):
        model.show(around="network/layer_conv5/Rel")


def test_two_drawings_on_one_page_do_not_share_ids():
    model = osg.load(SEED)
    pages = [model.show(around=ACT, context=k)._repr_html_() for k in (1, 2)]
    ids = [set(re.findall(r' id="([^"]+)"', p)) for p in pages]
    assert ids[0] and ids[1] and not ids[0] & ids[1]
    for p in pages:                                   # each arrow points to its own marker
        assert set(re.findall(r"url\(#([^)]+)\)", p)) <= set(re.findall(r' id="([^"]+)"', p))


def _two_models() -> tuple[onnx.ModelProto, onnx.ModelProto]:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    first = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["a"], name="r")], "g", [x],
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2])]),
        opset_imports=[helper.make_opsetid("", 17)])
    second = helper.make_model(helper.make_graph(
        [helper.make_node("Neg", ["y"], ["b"], name="n")], "h",
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("b", TensorProto.FLOAT, [2])]),
        opset_imports=[helper.make_opsetid("", 17)])
    return first, second


VERBS = {
    "insert": (lambda m: insert(m, ACT, op="l2_normalize", params={"axis": 1}),
               lambda r: ("added", set(r.block_nodes)), lambda r: set(r.rerouted)),
    "copy": (lambda m: copy(m, ["logits:0"], weights=Weights.INDEPENDENT, prefix="twin/"),
             lambda r: ("added", set(r.nodes.values())), lambda r: set()),
    "reroute": (lambda m: reroute(m, ACT, "network/layer_conv5/Conv2D:0"),
                lambda r: ("rerouted", set(r.rerouted)), lambda r: set(r.rerouted)),
    "bypass": (lambda m: bypass(m, "network/layer_conv5/Relu"),
               lambda r: ("removed", set(r.removed)), lambda r: set(r.rerouted)),
    "rename": (lambda m: rename(m, {"logits:0": "scores"}), lambda r: ("removed",
               {"network/fc1/BiasAdd"}), lambda r: set()),   # its output renamed: drawn twice
    "extract": (lambda m: extract(m, ["logits:0"]), lambda r: ("removed", {
                "network/aux/pool", "network/aux/flat", "network/aux/dense"}), lambda r: set()),
}


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_every_verb_result_draws_what_it_changed_on_its_model(verb, in_ipython):
    run, expect, rerouted = VERBS[verb]
    model = osg.load(SEED)
    result = run(model)
    assert len(RECENT) == 1 and RECENT[-1][1] is model.proto
    before = RECENT[-1][2]                  # a copy of the model as the verb found it
    assert before is not model.proto
    assert [n.name for n in before.graph.node] == [n.name for n in osg.load(SEED).proto.graph.node]
    page = _offline(result._repr_html_())
    assert f"<h4>{type(result).__name__}</h4>" in page and "<svg" in page
    change, names = expect(result)
    drawn = _changes(page)
    assert names and names <= drawn.get(change, set()), (names, drawn)
    assert drawn.get("rerouted", set()) == rerouted(result)
    assert repr(result).startswith(type(result).__name__ + "(")


def test_a_merge_result_draws_too_and_a_result_without_its_model_says_so(in_ipython):
    first, second = _two_models()
    merged = merge(first, second, connect={"a": "y"})
    page = _offline(merged._repr_html_())
    assert _changes(page) == {"unchanged": {"r"}, "added": {"n"}}
    RECENT.clear()
    lost = _offline(merged._repr_html_())
    assert "<svg" not in lost and "not at hand" in lost and "MergeResult" in lost


def test_a_result_shows_its_own_rewrite_after_later_ones(in_ipython):
    """Two rewrites of one model: each result draws its diff, not what the model is now."""
    model = osg.load(SEED)
    inserted = insert(model, ACT, op="identity")
    bypassed = bypass(model, "network/layer_conv5/Relu")
    first, second = _changes(inserted._repr_html_()), _changes(bypassed._repr_html_())
    assert set(first) == {"unchanged", "added", "rerouted"} and "network/layer_conv5/Relu" in \
        first["unchanged"]
    assert second["removed"] == {"network/layer_conv5/Relu"}
    assert second["rerouted"] == set(bypassed.rerouted) == set(inserted.block_nodes)


@pytest.mark.parametrize("ipython", ["absent", "imported"])
def test_outside_ipython_no_model_is_kept_and_no_copy_taken(monkeypatch, ipython):
    """Not in a notebook -- IPython absent, or imported without a shell running (TensorFlow
    imports it): no verb copies its model or keeps it."""
    import onnxsurgeon.edit
    from onnxsurgeon import record

    def no_copy(model):
        raise AssertionError("a weightless copy was taken outside IPython")

    if ipython == "absent":
        monkeypatch.delitem(sys.modules, "IPython", raising=False)
    else:
        import IPython

        assert IPython.get_ipython() is None
    monkeypatch.setattr(onnxsurgeon.edit, "weightless_copy", no_copy)
    RECENT.clear()
    model = osg.load(SEED)
    insert(model, ACT, op="identity")
    bypass(model, "network/layer_conv5/Relu")
    extract(model, ["logits:0"])
    assert len(RECENT) == 0 and not record._BEFORE


def test_a_report_shows_coloured_verdicts_and_the_deep_error_plot():
    base = osg.load(SEED)
    model = osg.load(SEED)
    insert(model, ACT, op="l2_normalize", params={"axis": 1})
    passed = _offline(verify_log(base, model)._repr_html_())
    assert 'data-verdict="pass" style="background:#e8f5e9' in passed
    deep = compare(base, model, deep=True)
    page = _offline(deep._repr_html_())
    assert 'data-verdict="fail" style="background:#ffebee' in page and "logits:0" in page
    plot = re.search(r'<svg class="deep-plot".*?</svg>', page).group(0)
    assert plot.count('class="differs"') == sum(not t.ok for t in deep.deep.tensors) > 0
    assert plot.count('class="agrees"') + plot.count('class="uninformative"') == sum(
        t.ok for t in deep.deep.tensors) > 0
    assert "first difference: network/flatten/Reshape:0" in plot


def test_listings_show_as_tables_and_stay_lists():
    model = osg.load(SEED)
    nodes, tensors = model.nodes(grep="^(Conv|Relu)$"), model.tensors(around=ACT)
    assert isinstance(nodes, list) and [r.name for r in nodes] == [
        "network/layer_conv5/Conv2D", "network/layer_conv5/Relu"]
    page = _offline(nodes._repr_html_())
    assert page.count("<tr>") == 1 + len(nodes)
    assert "<th>name</th><th>op</th>" in page and "network/layer_conv5/Relu" in page
    page = _offline(tensors._repr_html_())
    assert page.count("<tr>") == 1 + len(tensors) and "float" in page
    assert [f.name for f in dataclasses.fields(tensors[0])][0] == "name"


def test_texts_from_the_model_are_escaped(in_ipython):
    first, _ = _two_models()
    first.graph.node[0].name = "<b>r</b>"
    page = osg.io.Model(first).show(around="a")._repr_html_()
    assert "<b>r</b>" not in page and "&lt;b&gt;r&lt;/b&gt;" in page


@pytest.mark.slow
def test_the_tour_notebook_runs_in_a_real_kernel_and_shows_html(tmp_path):
    """examples/tour.ipynb, executed by nbclient in an ipykernel of this interpreter (its
    kernelspec ``python3`` written to a private folder, so no other installed kernel runs)."""
    import json

    import nbformat
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    spec = tmp_path / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3", "language": "python"}))
    specs = KernelSpecManager(kernel_dirs=[str(tmp_path / "kernels")], ensure_native_kernel=False)
    nb = nbformat.read(ROOT / "examples" / "tour.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("import sys; print(sys.executable)"))
    km = KernelManager(kernel_name="python3", kernel_spec_manager=specs)
    NotebookClient(nb, km=km, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(ROOT)}}).execute()
    assert nb.cells[-1].outputs[0]["text"].strip() == sys.executable
    outputs = [o for c in nb.cells[:-1] if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    pages = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert len(pages) == 8
    for page in pages:
        _offline(page)
    kinds = [re.match(r'<div class="osg" data-osg="(\w+)"', p).group(1) for p in pages]
    assert kinds == ["model", "view", "result", "result", "result", "report", "report", "rows"]
    assert "<h4>inputs</h4>" in pages[0] and "<h4>ops</h4>" in pages[0]
    assert all("<svg" in p for p in pages[1:5])
    assert 'class="node added"' in pages[2] and 'class="node rerouted"' in pages[2]
    assert _changes(pages[4])["removed"] == {"network/layer_conv5/Relu"}    # the bypass
    assert _changes(pages[4])["rerouted"] == {"network/flatten/Reshape", "network/aux/pool"}
    assert 'data-verdict="pass"' in pages[5] and 'data-verdict="fail"' in pages[6]
    assert 'class="deep-plot"' in pages[6] and "twin/logits:0" in pages[7]


def test_the_tour_notebook_is_committed_without_outputs():
    import nbformat

    nb = nbformat.read(ROOT / "examples" / "tour.ipynb", as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert len(code) == 8
    assert all(c.outputs == [] and c.execution_count is None for c in code)


def test_version_agrees_with_the_package_metadata_and_pyproject(capsys):
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert osg.__version__ == version("onnxsurgeon") == declared
    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out == f"onnxsurgeon {declared}\n"


def test_the_readme_notebook_block_shows_html_for_each_expression(in_ipython, monkeypatch):
    """README "Notebooks", run as a notebook runs it: each top-level expression's value is
    displayed (its ``_repr_html_``)."""
    import ast

    from tests.test_readme import _blocks

    (block,) = [b for b in _blocks("python") if "model.show(" in b]
    monkeypatch.chdir(ROOT)
    namespace: dict[str, object] = {}
    kinds = []
    for stmt in ast.parse(block).body:
        if isinstance(stmt, ast.Expr):
            value = eval(compile(ast.Expression(stmt.value), "README.md", "eval"), namespace)
            page = _offline(value._repr_html_())
            kinds.append(re.match(r'<div class="osg" data-osg="(\w+)"', page).group(1))
        else:
            exec(compile(ast.Module([stmt], []), "README.md", "exec"), namespace)
    assert kinds == ["model", "view", "result", "rows"]


def test_ci_runs_the_readme_api_command_and_the_wheel_check():
    import subprocess

    api = subprocess.run(["awk", "/<!-- api-command -->/{getline; getline; print; exit}",
                          "README.md"], capture_output=True, text=True, cwd=ROOT, check=True)
    assert api.stdout.strip() == "python docs/make_api.py"
    ci = (ROOT / ".ci" / "run").read_text()
    assert "api-command" in ci and ".ci/wheel_check .venv/bin/python" in ci
    assert ci.index(".ci/wheel_check") > ci.index('bash -c "$cmd"')    # after the tests


def test_the_version_is_read_from_the_metadata_not_written_twice(monkeypatch, capsys):
    """A release changes pyproject.toml only: ``__version__`` and ``--version`` follow the
    installed metadata (here a stand-in for it)."""
    import importlib.metadata

    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version",
                        lambda name: "9.8.7" if name == "onnxsurgeon" else real(name))
    monkeypatch.setitem(vars(osg), "__version__", None)     # restored (or removed) afterwards
    del vars(osg)["__version__"]
    assert osg.__version__ == "9.8.7"
    with pytest.raises(SystemExit):
        cli.main(["--version"])
    assert capsys.readouterr().out == "onnxsurgeon 9.8.7\n"
