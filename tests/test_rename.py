"""rename: every tie kept (producer, readers in If/Loop bodies, graph inputs/outputs, initializers,
value_info, name map, module paths), refusals that leave the model byte-identical, numbers
bit-identical under the new names (onnxruntime, optimizations off), and the CLI."""

from __future__ import annotations

import json
import re

import numpy as np
import onnx
import pytest

from onnxsurgeon.errors import NotFoundError, UsageError
from onnxsurgeon.index import GraphIndex
from onnxsurgeon.io import load
from onnxsurgeon.record import rewrites
from onnxsurgeon.select import Selector, name_map
from onnxsurgeon.surgery import rename
from onnxsurgeon.verify import verify_log
from tests import builders as B
from tests.cli_helpers import ROOT, assert_refused, cli
from tests.rewire_helpers import clone, rand, run, serialized

CNN_FEEDS = {"x": rand((1, 3, 8, 8), 0)}


def _body_inputs(model: onnx.ModelProto, node: str) -> list[list[str]]:
    holder = next(n for n in model.graph.node if n.name == node)
    return [list(n.input) for a in holder.attribute for n in a.g.node]


def test_rename_keeps_producer_readers_and_graph_output():
    orig = B.tiny_cnn()
    model = clone(orig)
    r = rename(model, {"act": "features", "x": "image", "fc.weight": "head/w"})
    assert r.renamed == {"act": "features", "x": "image", "fc.weight": "head/w"}
    g = model.graph
    assert [o.name for o in g.output] == ["logits", "features", "side_out"]
    assert [i.name for i in g.input] == ["image"]
    assert "head/w" in {t.name for t in g.initializer}
    nodes = {n.name: n for n in g.node}
    assert list(nodes["relu5"].output) == ["features"]
    assert list(nodes["pool"].input) == ["features"] and list(nodes["side"].input) == ["features"]
    assert nodes["conv5"].input[0] == "image" and nodes["fc"].input[1] == "head/w"
    onnx.checker.check_model(model, full_check=True)
    before, after = run(orig, CNN_FEEDS), run(model, {"image": CNN_FEEDS["x"]})
    for old, new in (("logits", "logits"), ("act", "features"), ("side_out", "side_out")):
        assert np.array_equal(before[old], after[new]), old
    assert rewrites(model)[-1] == {"op": "rename", "renamed": r.renamed, "nodes": False}
    assert verify_log(orig, model).ok


@pytest.mark.parametrize("x", [np.float32([1.0, -2.0, 3.0]), np.float32([-1.0, -2.0, 0.5])],
                         ids=["then", "else"])
def test_rename_reaches_reads_inside_if_branches(x):
    orig = B.if_capture()
    model = clone(orig)
    rename(model, {"a": "relu_out", "W": "weights", "z": "result"})
    assert _body_inputs(model, "branch") == [["relu_out", "weights"], ["relu_out", "weights"]]
    assert [o.name for o in model.graph.output] == ["result"]
    onnx.checker.check_model(model, full_check=True)
    assert np.array_equal(run(model, {"x": x})["result"], run(orig, {"x": x})["z"])
    assert verify_log(orig, model).ok


def test_rename_reaches_reads_inside_a_loop_body():
    orig = B.loop_capture()
    model = clone(orig)
    rename(model, {"b": "bias", "W": "scale"})
    body = next(n for n in model.graph.node if n.name == "loop").attribute[0].g
    assert list(body.node[1].input) == ["acc", "scale"] and list(body.node[2].input) == ["m", "bias"]
    x = np.float32([0.5, -2.0])
    assert np.array_equal(run(model, {"x": x})["z"], run(orig, {"x": x})["z"])
    assert verify_log(orig, model).ok


def test_tensors_inside_a_loop_body_are_renamed_in_their_scope():
    orig = B.loop_capture()
    model = clone(orig)
    r = rename(model, {"m": "scaled", "acc_out": "acc_next", "b": "bias"})
    assert r.renamed == {"m": "scaled", "acc_out": "acc_next", "b": "bias"}
    body = next(n for n in model.graph.node if n.name == "loop").attribute[0].g
    assert list(body.node[1].output) == ["scaled"]
    assert list(body.node[2].input) == ["scaled", "bias"]
    assert list(body.node[2].output) == ["acc_next"] and body.output[1].name == "acc_next"
    onnx.checker.check_model(model, full_check=True)
    x = np.float32([0.5, -2.0])
    assert np.array_equal(run(model, {"x": x})["z"], run(orig, {"x": x})["z"])
    report = verify_log(orig, model)
    assert report.ok and any("nested bodies" in n for n in report.notes)


def test_regex_reaches_names_inside_both_if_branches():
    orig = B.if_capture()
    model = clone(orig)
    r = rename(model, regex={"^([te])$": r"branch_\1"})
    assert r.renamed == {"t": "branch_t", "e": "branch_e"}
    branch = next(n for n in model.graph.node if n.name == "branch")
    assert sorted(a.g.output[0].name for a in branch.attribute) == ["branch_e", "branch_t"]
    x = np.float32([1.0, -2.0, 3.0])
    assert np.array_equal(run(model, {"x": x})["z"], run(orig, {"x": x})["z"])


@pytest.mark.parametrize("mapping, needle", [
    ({"m": "x"}, "an outer scope (the main graph) uses 'x'"),
    ({"m": "acc"}, "the body of node 'loop' already uses 'acc'"),
], ids=["outer", "same-body"])
def test_inner_renames_that_would_shadow_are_refused(mapping, needle):
    model = B.loop_capture()
    before = serialized(model)
    with pytest.raises(UsageError, match=re.escape(needle)):
        rename(model, mapping)
    assert serialized(model) == before


def test_a_body_that_passes_a_capture_through_follows_it():
    """A then-branch whose output IS the outer tensor (no node; onnx.checker and onnxruntime
    refuse such models, but the index records the read): the body output is renamed too."""
    m = B.if_capture()
    then_g = next(n for n in m.graph.node if n.name == "branch").attribute[0].g
    del then_g.node[:]
    then_g.output[0].name = "a"
    rename(m, {"a": "relu_out"})
    branch = next(n for n in m.graph.node if n.name == "branch")
    assert branch.attribute[0].g.output[0].name == "relu_out"
    assert branch.attribute[1].g.node[0].input[0] == "relu_out"


def test_swap_two_names():
    orig = B.tiny_cnn()
    model = clone(orig)
    rename(model, {"logits": "side_out", "side_out": "logits"})
    assert [o.name for o in model.graph.output] == ["side_out", "act", "logits"]
    before, after = run(orig, CNN_FEEDS), run(model, CNN_FEEDS)
    assert np.array_equal(after["side_out"], before["logits"])
    assert np.array_equal(after["logits"], before["side_out"])
    assert verify_log(orig, model).ok


def test_regex_renames_every_matching_tensor():
    orig = B.chain(3)
    model = clone(orig)
    r = rename(model, regex={r"^relu(\d+)$": r"block\1/out"})
    assert r.renamed == {"relu0": "block0/out", "relu1": "block1/out"}
    assert model.graph.node[3].input[0] == "block0/out"
    x = rand((1, 4), 1)
    assert np.array_equal(run(model, {"x": x})["y"], run(orig, {"x": x})["y"])


def test_node_rename_leaves_tensors_alone():
    orig = B.tiny_cnn()
    model = clone(orig)
    r = rename(model, {"conv5": "stem/conv"}, nodes=True)
    assert r.nodes and model.graph.node[0].name == "stem/conv"
    assert list(model.graph.node[0].output) == ["conv5_out"]
    assert verify_log(orig, model).ok


@pytest.mark.parametrize("mapping, needle, exc", [
    ({"act": "logits"}, "already has a tensor named 'logits'", UsageError),
    ({"act": ""}, "empty name", UsageError),
    ({"act": "n", "logits": "n"}, "both be named 'n'", UsageError),
    ({"actt": "n"}, "did you mean 'act'", NotFoundError),
], ids=["collision", "empty", "two-to-one", "did-you-mean"])
def test_bad_renames_are_refused_before_anything_changes(mapping, needle, exc):
    model = B.tiny_cnn()
    before = serialized(model)
    with pytest.raises(exc, match=needle):
        rename(model, mapping)
    assert serialized(model) == before


def test_a_name_a_nested_body_defines_is_refused():
    model = B.if_capture()
    before = serialized(model)
    with pytest.raises(UsageError, match="body of node 'branch' defines 't'"):
        rename(model, {"a": "t"})
    assert serialized(model) == before


def test_regex_that_matches_nothing_and_bad_regex_are_refused():
    model = B.tiny_cnn()
    with pytest.raises(UsageError, match="matches no name"):
        rename(model, regex={"^nothing$": "x"})
    with pytest.raises(UsageError, match="does not compile"):
        rename(model, regex={"(": "x"})


def test_torch_converted_model_keeps_name_map_and_module_paths(tmp_path):
    model = load(ROOT / "models" / "torch_cnn.onnx")
    sel = Selector(GraphIndex(model.proto))
    conv5 = sel.resolve("conv5")
    rename(model, {conv5: "backbone/conv5", "fc": "head/logits"})
    index = GraphIndex(model.proto)
    assert name_map(model.proto) == {"conv5": "backbone/conv5", "fc": "head/logits"}
    assert Selector(index).resolve("conv5") == "backbone/conv5"
    assert Selector(index).resolve("fc") == "head/logits"
    assert [o.name for o in model.proto.graph.output] == ["head/logits"]
    assert verify_log(load(ROOT / "models" / "torch_cnn.onnx"), model).ok


def test_verify_catches_a_rename_that_lies():
    orig = B.tiny_cnn()
    model = clone(orig)
    rename(model, {"logits": "scores"})
    w = model.graph.initializer[3]  # fc.bias
    w.CopyFrom(onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(w) + 1, w.name))
    report = verify_log(orig, model)
    assert not report.ok



def test_verify_of_swapped_names_compares_each_pair_with_its_own_values():
    # the check drops a pair's values once compared: a swap's second pair still has its own
    orig = B.tiny_cnn()
    model = clone(orig)
    rename(model, {"act": "side_out", "side_out": "act"})
    report = verify_log(orig, model)
    assert report.ok
    assert [(p.reference, p.candidate) for p in report.pairs] == [
        ("logits", "logits"), ("act", "side_out"), ("side_out", "act")]
    w = model.graph.initializer[3]  # fc.bias: logits differ, the swapped pair does not
    w.CopyFrom(onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(w) + 1, w.name))
    report = verify_log(orig, model)
    assert [p.agree for p in report.pairs] == [False, True, True]

# ------------------------------------------------------------------------------------ CLI
def test_rename_cli_json_and_verify(tmp_path):
    src = tmp_path / "cnn.onnx"
    src.write_bytes(B.tiny_cnn().SerializeToString())
    out = tmp_path / "renamed.onnx"
    proc = cli("rename", src, "-o", out, "--map", "act=features", "x=image",
                "--regex", "^side_(.*)$=aux_\\1", "--json", "--verify")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["renamed"] == {"act": "features", "x": "image", "side_out": "aux_out"}
    assert data["schema"] == "onnxsurgeon.rename/1" and data["verify"]["ok"] is True
    got = run(onnx.load(str(out)), {"image": CNN_FEEDS["x"]})
    ref = run(B.tiny_cnn(), CNN_FEEDS)
    assert np.array_equal(got["aux_out"], ref["side_out"])
    again = tmp_path / "again.onnx"
    assert cli("rename", src, "-o", again, "--map", "act=features", "x=image",
                "--regex", "^side_(.*)$=aux_\\1").returncode == 0
    assert again.read_bytes() == out.read_bytes()


@pytest.mark.parametrize("args, needle", [
    (["--map", "actt=a2"], "did you mean 'act'"),
    (["--map", "act=logits"], "already has a tensor"),
    (["--map", "relu55=r", "--nodes"], "did you mean 'relu5'"),
    ([], "nothing to rename"),
], ids=["typo", "collision", "node-typo", "nothing"])
def test_rename_cli_bad_input(tmp_path, args, needle):
    src = tmp_path / "cnn.onnx"
    src.write_bytes(B.tiny_cnn().SerializeToString())
    out = tmp_path / "out.onnx"
    assert_refused(["rename", src, "-o", out, *args], needle, inputs=[src], out=out)
