"""Finding names (inspect --nodes/--tensors/--grep/--around, Listing) and name maps that stay true
after every verb: entries of removed tensors dropped, renamed ones followed, checked by value."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from onnxsurgeon.errors import NotFoundError
from onnxsurgeon.index import GraphIndex
from onnxsurgeon.listing import Listing
from onnxsurgeon.schema import validate
from onnxsurgeon.select import NAME_MAP_KEY, Selector, name_map
from onnxsurgeon.surgery import bypass, extract, insert, reroute
from tests import builders
from tests.cli_helpers import cli_main as main
from tests.rewire_helpers import clone, expose, rand, run

ROOT = Path(__file__).resolve().parent.parent
TORCH_CNN = ROOT / "models" / "torch_cnn.onnx"


def test_inspect_nodes_lists_every_node_with_its_module(capsys):
    code, out, _ = main(capsys, "inspect", TORCH_CNN, "--nodes")
    assert code == 0
    assert out == (
        "node         op          inputs                       outputs  module\n"
        "node_conv2d  Conv        x, conv5.weight, conv5.bias  conv2d   conv5\n"
        "node_relu    Relu        conv2d                       relu     -\n"
        "node_mean    ReduceMean  relu, val_2                  mean     -\n"
        "node_linear  Gemm        mean, fc.weight, fc.bias     logits   fc\n"
        "(4 nodes)\n")


def test_inspect_tensors_gives_types_edges_and_framework_names(capsys):
    code, out, _ = main(capsys, "inspect", TORCH_CNN, "--tensors", "--grep", "conv2d|logits")
    assert code == 0
    assert out.splitlines() == [
        "tensor  dtype  shape          kind        producer     consumers  framework names",
        "conv2d  float  [batch,4,8,8]  activation  node_conv2d  node_relu  conv5",
        "logits  float  [batch,5]      output      node_linear  -          fc",
        "(2 tensors)"]


def test_grep_matches_framework_names_and_around_walks_hops(capsys, tmp_path):
    code, out, _ = main(capsys, "inspect", TORCH_CNN, "--tensors", "--grep", "^fc$")
    assert code == 0 and [line.split()[0] for line in out.splitlines()[1:-1]] == ["logits"]
    path = tmp_path / "cnn.onnx"
    path.write_bytes(builders.tiny_cnn().SerializeToString())
    code, out, _ = main(capsys, "inspect", path, "--around", "act", "--context", "0", "--json")
    data = json.loads(out)
    validate("inspect", data)
    assert {r["name"] for r in data["node_list"]} == {"relu5", "pool", "side"}
    assert {r["name"] for r in data["tensor_list"]} == {"conv5_out", "act", "pooled", "side_out"}
    act = next(r for r in data["tensor_list"] if r["name"] == "act")
    assert act == {"name": "act", "dtype": "float", "shape": [1, 4, 8, 8], "producer": "relu5",
                   "consumers": ["pool", "side"], "kind": "output", "framework_names": []}
    code, out, _ = main(capsys, "inspect", path, "--around", "act", "--context", "1", "--nodes",
                        "--json")
    assert {r["name"] for r in json.loads(out)["node_list"]} == {
        "conv5", "relu5", "pool", "side", "flatten"}
    assert "tensor_list" not in json.loads(out)


def test_nested_body_nodes_are_listed_with_their_graph():
    rows = Listing(builders.if_capture()).nodes()
    nested = [r for r in rows if r.graph != "main"]
    assert nested and all(r.graph.startswith("branch.") for r in nested)
    assert {r.graph for r in nested} == {"branch.then_branch", "branch.else_branch"}


def test_limit_and_bad_inputs(capsys, tmp_path):
    code, out, _ = main(capsys, "inspect", TORCH_CNN, "--tensors", "--limit", "2")
    assert code == 0 and out.splitlines()[-1] == "(2 of 10 tensors shown; --limit 0 lists all)"
    code, _, err = main(capsys, "inspect", TORCH_CNN, "--grep", "(")
    assert code == 2 and "is not a valid regular expression" in err
    code, _, err = main(capsys, "inspect", TORCH_CNN, "--around", "conv6")
    assert code == 2 and err.startswith("onnxsurgeon: error: tensor 'conv6' not found")


def test_model_find_and_summary_hint():
    listing = Listing(onnx.load(str(TORCH_CNN)))
    row = listing.find("conv5")
    assert row.name == "conv2d" and row.framework_names == ["conv5"] and row.shape == ["batch", 4, 8, 8]
    with pytest.raises(NotFoundError):
        listing.find("conv6")


# ------------------------------------------------------------------ name maps kept true
def _with_map(model: onnx.ModelProto, mapping: dict[str, str]) -> onnx.ModelProto:
    p = model.metadata_props.add()
    p.key, p.value = NAME_MAP_KEY, json.dumps(mapping)
    return model


def test_extract_drops_the_entries_of_removed_tensors(capsys, tmp_path):
    src = tmp_path / "m.onnx"
    src.write_bytes(_with_map(builders.tiny_cnn(), {"features": "act", "aux": "side_out",
                                                    "head": "logits"}).SerializeToString())
    head = tmp_path / "head.onnx"
    assert main(capsys, "extract", src, "-o", head, "--outputs", "head")[0] == 0
    assert name_map(onnx.load(str(head))) == {"features": "act", "head": "logits"}
    code, _, err = main(capsys, "insert", head, "-o", tmp_path / "x.onnx", "--at", "aux",
                        "--op", "identity")
    assert code == 2 and "did you mean 'aux'" not in err  # no stale suggestion


def test_bypass_and_reroute_prune_drop_entries_of_removed_tensors():
    model = _with_map(builders.tiny_cnn(), {"relu": "act", "conv": "conv5_out"})
    bypass(model, ["relu5"])  # act (a graph output) is gone: conv5_out takes over its name
    assert name_map(model) == {"conv": "act"}
    feeds = {"x": rand((1, 3, 8, 8), 2)}
    conv = run(expose(builders.tiny_cnn(), "conv5_out"), feeds)["conv5_out"]
    assert np.array_equal(run(model, feeds)["act"], conv)
    model = _with_map(builders.tiny_cnn(), {"relu": "act", "conv": "conv5_out"})
    reroute(model, "act", "conv5_out", prune=True)  # relu5 no longer needed
    assert name_map(model) == {"conv": "conv5_out"}


@pytest.mark.parametrize("verb", ["insert", "extract"])
def test_map_sends_framework_names_to_tensors_with_the_same_values(verb):
    """By value: every map entry of the rewritten torch_cnn names a tensor equal to that
    framework tensor in the original model."""
    orig = onnx.load(str(TORCH_CNN))
    model = clone(orig)
    if verb == "insert":
        insert(model, "fc", op="scale", params={"factor": 2.0})  # fc's tensor is a graph output
    else:
        extract(model, ["fc"], inputs=["conv5"])
    feeds = {"x": rand((2, 3, 8, 8), 1)}
    before = name_map(orig)
    want = run(expose(orig, *before.values()), feeds)
    after = name_map(model)
    assert after
    inits = {t.name for t in model.graph.initializer}
    new_feeds = {i.name: feeds[i.name] if i.name in feeds else want[i.name]
                 for i in model.graph.input if i.name not in inits}
    got = run(expose(model, *after.values()), new_feeds)
    for key, tensor in after.items():
        assert np.array_equal(got[tensor], want[before[key]]), key
    assert Selector(GraphIndex(model)).resolve("fc") == after["fc"]


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.parametrize("exporter", ["dynamo", "torchscript"])
def test_a_module_called_twice_is_ambiguous_and_each_call_maps_by_value(tmp_path, exporter):
    import torch
    from onnxsurgeon.converters import from_torch

    from onnxsurgeon.errors import AmbiguousNameError

    class Twice(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Linear(4, 4)
            self.head = torch.nn.Linear(4, 2)

        def forward(self, x):
            a = self.emb(x)
            b = self.emb(torch.relu(a))
            return self.head(a + b)

    torch.manual_seed(0)
    module = Twice().eval()
    x = torch.randn(2, 4)
    path = tmp_path / "twice.onnx"
    from_torch(module, (x,), path, exporter=exporter, input_names=["x"])
    model = onnx.load(str(path))
    fmap = name_map(model)
    assert "emb" not in fmap and {"emb#0", "emb#1"} <= set(fmap)
    with pytest.raises(AmbiguousNameError, match=r"module 'emb' is called 2 times; name one "
                                                 r"call: 'emb#0' \(.*\), 'emb#1' \(.*\)"):
        Selector(GraphIndex(model)).resolve("emb")
    seen: list[np.ndarray] = []
    handle = module.emb.register_forward_hook(lambda _m, _i, out: seen.append(out.detach().numpy()))
    with torch.no_grad():
        module(x)
    handle.remove()
    got = run(expose(model, fmap["emb#0"], fmap["emb#1"]), {"x": x.numpy()})
    np.testing.assert_allclose(got[fmap["emb#0"]], seen[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[fmap["emb#1"]], seen[1], rtol=1e-5, atol=1e-6)
    assert not np.allclose(seen[0], seen[1])


def test_around_with_json_also_draws_the_page(capsys, tmp_path):
    """--around T --json --html P: the stamped inspect document on stdout and the page at P."""
    page = tmp_path / "a.html"
    code, out, err = main(capsys, "inspect", TORCH_CNN, "--around", "conv5", "--context", "1",
                          "--json", "--html", page)
    assert (code, err) == (0, "")
    data = json.loads(out)
    validate("inspect", data)
    assert data["tensor"] == "conv2d" and {r["name"] for r in data["tensor_list"]} >= {"conv2d"}
    assert page.read_text().startswith("<!DOCTYPE html>")
    code, out, err = main(capsys, "inspect", TORCH_CNN, "--html", page)
    assert (code, out) == (2, "")
    assert err == ("onnxsurgeon: error: --html on inspect draws a neighbourhood: add --around "
                   "TENSOR\n")
