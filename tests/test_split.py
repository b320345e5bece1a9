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
    # and its rewrite log ends in its split: verify proves the middle stage against the whole
    code, text, err = cli_main(capsys, "verify", gpt2, out / "stage_1.onnx", "--rewrite-log")
    assert code == 0 and text.splitlines()[-1].startswith("ok:"), err
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


def test_a_one_node_model_is_refused_without_advising_the_stages_it_asked_for(tmp_path, capsys):
    """One node cannot make 2 stages: the fix is not '--stages 2 or fewer' (what was asked)."""
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "one",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    path = tmp_path / "one.onnx"
    onnx.save(helper.make_model(g), str(path))
    code, out, err = cli_main(capsys, "split", path, "-o", tmp_path / "out", "--stages", "2")
    assert code == 2 and err.count("\n") == 1, err
    assert "the model has 1 node: it cannot make 2 stages; a model of fewer than 2 nodes" in err
    assert "--stages 2 or fewer" not in err and not (tmp_path / "out").exists()


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


def _costs_line() -> onnx.ModelProto:
    """x[1,16] -> fc0 (16x1024 weight) -> relu -> expand1 (to 16x1024) -> sum1 -> expand2 ->
    sum2 -> fc1 (1024x1 weight) -> y: its weights, FLOPs and activation bytes sit in different
    places, so each cost puts the cut of 2 stages elsewhere."""
    rng = np.random.default_rng(0)

    def weight(name: str, *shape: int) -> onnx.TensorProto:
        return onnx.numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    ints = [onnx.numpy_helper.from_array(np.array(v, dtype=np.int64), n)
            for n, v in (("wide", [16, 1024]), ("axis0", [0]))]
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["a"], name="fc0"),
             helper.make_node("Relu", ["a"], ["r"], name="relu"),
             helper.make_node("Expand", ["r", "wide"], ["e1"], name="expand1"),
             helper.make_node("ReduceSum", ["e1", "axis0"], ["s1"], name="sum1"),
             helper.make_node("Expand", ["s1", "wide"], ["e2"], name="expand2"),
             helper.make_node("ReduceSum", ["e2", "axis0"], ["s2"], name="sum2"),
             helper.make_node("MatMul", ["s2", "w1"], ["y"], name="fc1")]
    graph = helper.make_graph(
        nodes, "costs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1])],
        [weight("w0", 16, 1024), *ints, weight("w1", 1024, 1)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("by, cut, costs", [
    # FLOPs per node: 32768, 1024, 0, 16384, 0, 16384, 2048 (half: 34304); after relu is 512
    # off, after fc0 1536 off: both in the window, both cross 4 kB, the closer wins
    ("flops", 2, [33792, 34816]),
    # weight bytes: 65536 in fc0, 4096 in fc1: every cut after fc0 is as balanced; the first
    # with the fewest bytes crossing (4 kB) is taken
    ("params", 1, [65536, 4096]),
    # activation bytes: 4k, 4k, 64k, 4k, 64k, 4k, 4 (half 73730): after expand1 is 2 off but
    # crosses 64 kB, after sum1 is 4094 off (in the window) and crosses 4 kB
    ("activations", 4, [77824, 69636]),
], ids=["flops", "params", "activations"])
def test_each_cost_places_the_cut_by_its_own_balance(tmp_path, capsys, by, cut, costs):
    path = tmp_path / "costs.onnx"
    onnx.save(_costs_line(), str(path))
    code, out, err = cli_main(capsys, "split", path, "-o", tmp_path / "s", "--stages", 2,
                              "--by", by, "--json")
    assert code == 0, err
    manifest = json.loads(out)
    assert manifest["by"] == by and [c["after_node"] + 1 for c in manifest["cuts"]] == [cut]
    field = {"flops": "flops", "params": "param_bytes", "activations": "activation_bytes"}[by]
    assert [s["cost"] for s in manifest["stages"]] == [s[field] for s in manifest["stages"]] \
        == costs
    assert [c["bytes"] for c in manifest["cuts"]] == [4096]


def _weighted_line() -> onnx.ModelProto:
    """x[2,64] -> (MatMul 64x64 inline weight -> Relu) x 4 -> y."""
    rng = np.random.default_rng(1)
    inits, nodes, prev = [], [], "x"
    for i in range(4):
        w = rng.standard_normal((64, 64)).astype(np.float32)
        inits.append(onnx.numpy_helper.from_array(w, f"w{i}"))
        nodes += [helper.make_node("MatMul", [prev, f"w{i}"], [f"h{i}"], name=f"mm{i}"),
                  helper.make_node("Relu", [f"h{i}"], [f"r{i}"], name=f"relu{i}")]
        prev = f"r{i}"
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 64]) for n in ("x", prev)]
    return helper.make_model(helper.make_graph(nodes, "g", vi[:1], vi[1:], inits),
                             opset_imports=[helper.make_opsetid("", 17)])


def test_a_stage_records_its_split_is_proven_against_the_source_and_replays(tmp_path, capsys):
    """Each stage's log ends in a split_stage record (which stage, the cuts, its cost):
    ``verify --rewrite-log SOURCE STAGE`` proves it (and catches a changed weight), ``recipe
    STAGE`` writes the split_stage step that makes the same stage from the source."""
    from onnxsurgeon.record import SplitRecord, records

    src = tmp_path / "m.onnx"
    onnx.save(_weighted_line(), str(src))
    out = tmp_path / "out"
    assert cli_main(capsys, "split", src, "-o", out, "--stages", 2)[0] == 0
    stage = onnx.load(str(out / "stage_1.onnx"))
    (record,) = records(stage)
    assert record == SplitRecord(stage=1, stages=2, at=("r1",), by="flops", dims={},
                                 inputs=("r1",), outputs=("r3",), cost=record.cost)
    assert record.cost == 2 * (2 * 64 * 64 * 2 + 2 * 64)          # 2 x (MatMul + Relu)
    assert [t.name for t in stage.graph.initializer] == ["w2", "w3"]   # its own, inline
    assert all(t.HasField("raw_data") for t in stage.graph.initializer)
    code, text, err = cli_main(capsys, "verify", src, out / "stage_1.onnx", "--rewrite-log")
    assert code == 0 and "split" in text, err
    bad = onnx.ModelProto()
    bad.CopyFrom(stage)
    w = onnx.numpy_helper.to_array(bad.graph.initializer[0]) + 1
    bad.graph.initializer[0].CopyFrom(onnx.numpy_helper.from_array(w, "w2"))
    onnx.save(bad, str(tmp_path / "bad.onnx"))
    assert cli_main(capsys, "verify", src, tmp_path / "bad.onnx", "--rewrite-log")[0] == 1
    code, text, err = cli_main(capsys, "recipe", out / "stage_1.onnx")
    assert code == 0 and "split_stage: {at: [r1], by: flops, stage: 1}" in text, err
    (tmp_path / "r.yaml").write_text(text)
    assert cli_main(capsys, "apply", tmp_path / "r.yaml", src, "-o", tmp_path / "s1.onnx")[0] == 0
    assert onnx.load(str(tmp_path / "s1.onnx")).graph == stage.graph


def test_a_recipe_ending_in_split_writes_the_stages_to_its_output_folder(tmp_path, capsys):
    """``apply R MODEL -o DIR``: the steps before run in memory, the last split step writes DIR
    as ``split`` does (stamped with the recipe); --verify proves the chain equals the model."""
    src = tmp_path / "m.onnx"
    onnx.save(_weighted_line(), str(src))
    recipe = tmp_path / "r.yaml"
    recipe.write_text("onnxsurgeon: 1\nsteps:\n  - rename: {mapping: {r1: mid}}\n"
                      "  - split: {stages: 2}\n")
    out = tmp_path / "stages"
    code, text, err = cli_main(capsys, "apply", recipe, src, "-o", out, "--verify", "--json")
    assert code == 0, err
    doc = json.loads(text)
    validate("apply", doc)
    assert doc["output"] == str(out) and doc["verify"]["ok"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert doc["steps"][1]["result"]["stages"] == manifest["stages"]
    assert manifest["cuts"][0]["tensors"] == ["mid"]                  # after the rename
    stages = [onnx.load(str(out / s["file"])) for s in manifest["stages"]]
    assert all(any(p.key == "onnxsurgeon.recipe" for p in s.metadata_props) for s in stages)
    feeds = {"x": np.random.default_rng(2).standard_normal((2, 64)).astype(np.float32)}
    assert np.array_equal(_chain(stages, feeds)["r3"], run(src, feeds)["r3"])
    # a split before the last step, and a split recipe over several models: one line, exit 2
    recipe.write_text("onnxsurgeon: 1\nsteps:\n  - split: {stages: 2}\n  - cleanup: {}\n")
    code, _, err = cli_main(capsys, "apply", recipe, src, "-o", tmp_path / "x")
    assert code == 2 and "must be the last step" in err and err.count("\n") == 1, err
    recipe.write_text("onnxsurgeon: 1\nsteps:\n  - split: {stages: 2}\n")
    code, _, err = cli_main(capsys, "apply", recipe, src, src, "-o", tmp_path / "y")
    assert code == 2 and "one model at a time" in err and err.count("\n") == 1, err
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def _resident_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def test_splitting_inline_weights_holds_them_once_not_once_per_stage():
    """Each stage is cut from a weight-free copy and given only its own weights: splitting a
    model of 32 MB inline weights into 4 stages grows memory by about the weights once (the
    stages), not by a copy per stage (it grew 5x the weights: a whole copy per stage, and every
    weight-free copy re-wrote the bytes it had detached)."""
    rng = np.random.default_rng(3)
    inits, nodes, prev = [], [], "x"
    for i in range(8):
        inits.append(onnx.numpy_helper.from_array(
            rng.standard_normal((1024, 1024)).astype(np.float32), f"w{i}"))
        nodes += [helper.make_node("MatMul", [prev, f"w{i}"], [f"h{i}"], name=f"mm{i}"),
                  helper.make_node("Relu", [f"h{i}"], [f"r{i}"], name=f"relu{i}")]
        prev = f"r{i}"
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 1024]) for n in ("x", prev)]
    model = helper.make_model(helper.make_graph(nodes, "g", vi[:1], vi[1:], inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    weights = 8 * 4.0
    before = _resident_mb()
    result = split(model, stages=4)
    grown = _resident_mb() - before
    assert [len(s.model.proto.graph.initializer) for s in result.stages] == [2, 2, 2, 2]
    assert grown < 1.75 * weights, f"split grew {grown:.0f} MB for {weights:.0f} MB of weights"
