"""``split``: a torch-exported GPT-2 cut into 3 stages chains to the whole bit for bit, balanced
(largest stage <= 1.25 x the mean), crossing one hidden state per cut; ``merge`` of the stages
gives the whole back; a hand-built chain cut ``--at`` a tensor; bad cuts: one line, exit 2."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnxsurgeon.schema import validate
from onnxsurgeon.surgery import merge, split
from tests.cli_helpers import cli_main
from tests.conftest import GPT2_DIMS, run


def _chain(stages: list[onnx.ModelProto], feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run the stages in order, each fed from the original feeds and earlier stages' outputs."""
    pool = dict(feeds)
    for stage in stages:
        names = {i.name for i in stage.graph.input}
        pool.update(run(stage, {k: v for k, v in pool.items() if k in names}))
    return pool


@pytest.mark.slow
@pytest.mark.torch
def test_gpt2_in_three_stages_chains_to_the_whole_bit_for_bit(gpt2, tmp_path, capsys):
    out = tmp_path / "stages"
    code, text, err = cli_main(capsys, "split", gpt2, "-o", out, "--stages", 3, "--json",
                               "--verify")
    assert code == 0, err
    shown = json.loads(text)
    validate("split", shown)
    assert shown.pop("verify")["verdict"] == "pass"     # the joined stages equal the whole
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest == shown
    stages = [onnx.load(str(out / s["file"])) for s in manifest["stages"]]
    assert len(stages) == 3
    costs = [s["cost"] for s in manifest["stages"]]
    assert max(costs) <= 1.25 * (sum(costs) / len(costs))
    d = GPT2_DIMS
    hidden = d["batch"] * d["seq"] * d["embd"] * 4        # one float hidden state per cut
    assert [c["bytes"] for c in manifest["cuts"]] == [hidden, hidden]
    # the manifest's record: --at its cut tensors makes byte-identical stages again
    again_dir = tmp_path / "again"
    at = ",".join(c["at"] for c in manifest["cuts"])
    assert cli_main(capsys, "split", gpt2, "-o", again_dir, "--at", at)[0] == 0
    for s in manifest["stages"]:
        assert (again_dir / s["file"]).read_bytes() == (out / s["file"]).read_bytes()
    whole_model = onnx.load(str(gpt2))
    ids = np.random.default_rng(0).integers(0, d["vocab"], (d["batch"], d["seq"]))
    feeds = {"input_ids": ids.astype(np.int64)}
    whole = run(whole_model, feeds)
    chained = _chain(stages, feeds)
    for name, value in whole.items():
        assert np.array_equal(chained[name], value), name
    # each stage says where it sits
    meta = {p.key: p.value for p in stages[1].metadata_props}
    assert json.loads(meta["onnxsurgeon.split"])["stage"] == 1
    # merge(stage 0, stage 1, stage 2) along the manifest's cuts is the whole again
    merged = stages[0]
    for k, cut in enumerate(manifest["cuts"], start=1):
        merge(merged, stages[k], connect={t: t for t in cut["tensors"]})
    assert [o.name for o in merged.graph.output] == [o.name for o in whole_model.graph.output]
    again = run(merged, feeds)
    for name, value in whole.items():
        assert np.array_equal(again[name], value), name


def _line(n: int = 6) -> onnx.ModelProto:
    """x -> Relu -> Neg -> Relu -> ... (n nodes) -> y, with a side output of node 1."""
    nodes, prev = [], "x"
    for i in range(n):
        out = "y" if i == n - 1 else f"t{i}"
        nodes.append(helper.make_node("Relu" if i % 2 == 0 else "Neg", [prev], [out], name=f"n{i}"))
        prev = out
    nodes.append(helper.make_node("Add", ["t1", "x"], ["side"], name="side"))
    vi = [helper.make_tensor_value_info(v, TensorProto.FLOAT, [2, 3]) for v in ("x", "y", "side")]
    return helper.make_model(helper.make_graph(nodes, "line", [vi[0]], vi[1:]),
                             opset_imports=[helper.make_opsetid("", 17)])


def test_split_at_a_tensor_passes_what_crosses_and_keeps_graph_outputs():
    model = _line()
    before = model.SerializeToString()
    result = split(model, at=["t2"])
    assert model.SerializeToString() == before              # the input is never modified
    first, second = result.stages
    assert (first.first_node, first.last_node, second.first_node) == (0, 2, 3)
    assert first.outputs == ["t1", "t2"] and sorted(second.inputs) == ["t1", "t2", "x"]
    assert result.crossing == [["t1", "t2"]]                # t1 is read by 'side' after the cut
    assert result.producers == {"t1": 0, "t2": 0}
    from onnxsurgeon.schema import stamp  # nothing written (--verify failed): files are null

    unwritten = stamp("split", {"model": "m.onnx", "output": None, **result.manifest([])})
    validate("split", unwritten)
    assert [s["file"] for s in unwritten["stages"]] == [None, None]
    feeds = {"x": np.arange(6, dtype=np.float32).reshape(2, 3) - 2}
    whole = run(model, feeds)
    chained = _chain([s.model.proto for s in result.stages], feeds)
    assert all(np.array_equal(chained[k], v) for k, v in whole.items())


@pytest.mark.parametrize("argv, needle", [
    (["--stages", "50"], "cannot make 50 stages"),
    (["--stages", "1"], ">= 2"),
    (["--at", "x"], "not computed by a node"),
    (["--at", "nope"], "'nope' not found"),
    (["--at", "t3,t1"], "node order"),
    (["--at", "side"], "last node"),
    (["--at", "t1", "--stages", "3"], "make 2 stages, not 3"),
], ids=["too-many", "one", "input", "missing", "order", "last", "count"])
def test_bad_cuts_are_one_line_exit_2(tmp_path, capsys, argv, needle):
    path = tmp_path / "line.onnx"
    onnx.save(_line(), str(path))
    code, out, err = cli_main(capsys, "split", path, "-o", tmp_path / "out", *argv)
    assert code == 2 and out == "" and err.count("\n") == 1 and needle in err, err
    assert not (tmp_path / "out").exists()


def test_an_external_data_model_splits_into_stages_with_their_own_weights(tmp_path, capsys):
    rng = np.random.default_rng(0)
    inits, nodes, prev = [], [], "x"
    for i in range(4):
        w = rng.standard_normal((64, 64)).astype(np.float32)
        inits.append(onnx.numpy_helper.from_array(w, f"w{i}"))
        nodes += [helper.make_node("MatMul", [prev, f"w{i}"], [f"h{i}"], name=f"mm{i}"),
                  helper.make_node("Relu", [f"h{i}"], [f"r{i}"], name=f"relu{i}")]
        prev = f"r{i}"
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 64]) for n in ("x", prev)]
    model = helper.make_model(helper.make_graph(nodes, "g", vi[:1], vi[1:], inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    src = tmp_path / "m.onnx"
    onnx.save(model, str(src), save_as_external_data=True, location="m.onnx.data",
              size_threshold=0)
    out = tmp_path / "out"
    code, _, err = cli_main(capsys, "split", src, "-o", out, "--stages", 2, "--verify")
    assert code == 0, err
    for k, weights in enumerate([["w0", "w1"], ["w2", "w3"]]):
        stage = onnx.load(str(out / f"stage_{k}.onnx"), load_external_data=False)
        assert [t.name for t in stage.graph.initializer] == weights
        assert {e.value for t in stage.graph.initializer for e in t.external_data
                if e.key == "location"} == {f"stage_{k}.onnx.data"}
    feeds = {"x": rng.standard_normal((2, 64)).astype(np.float32)}
    pool = dict(feeds)
    for k in range(2):
        pool.update(run(out / f"stage_{k}.onnx", {n: pool[n] for n in (["x"], ["r1"])[k]}))
    assert np.array_equal(pool[prev], run(src, feeds)[prev])
