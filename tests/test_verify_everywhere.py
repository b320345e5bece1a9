"""--verify takes verify's data and tolerance options on every command (issue 27), the
inconclusive advice names the command's own flags, ``verify --rewrite-log --deep`` runs, copy's
stop tensors, and copy / merge checks that settle by structure (issue 26, item 10). Models are
built with onnx.helper (a Keras model split into body and head for the slow merge test) and run
in onnxruntime."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsurgeon.cli_parser import VERIFY_OPTIONS, build_parser
from onnxsurgeon.errors import UsageError
from onnxsurgeon.io import Model, load
from onnxsurgeon.record import records
from onnxsurgeon.surgery import bypass, copy
from onnxsurgeon.verify import verify_log, verify_merge
from onnxsurgeon.verify.log import replay

from .cli_helpers import cli, cli_main
from .rewire_helpers import clone

F = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits, name: str = "m") -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def sub_drop_relu(b: float) -> onnx.ModelProto:
    """x[N,8] -> Sub(x, b) -> s -> Identity 'drop' -> t -> Relu -> y: with b >= 1 every random
    input in [-1,1) gives y == 0, so bypassing 'drop' cannot be shown right by its outputs (and
    the Identity the check puts in its place is not the graph the bypass leaves)."""
    return _model([helper.make_node("Sub", ["x", "b"], ["s"], name="sub"),
                   helper.make_node("Identity", ["s"], ["t"], name="drop"),
                   helper.make_node("Relu", ["t"], ["y"], name="relu")],
                  [helper.make_tensor_value_info("x", F, ["N", 8])],
                  [helper.make_tensor_value_info("y", F, ["N", 8])],
                  [numpy_helper.from_array(np.full((1, 8), b, np.float32), "b")])


def seg_head(gain: float = 1e4) -> onnx.ModelProto:
    """A segmentation head: x[1,3,8,8] -> Conv 'head/conv' (large weights) -> logits -> Sigmoid
    -> prob (saturated at 0 and 1 for any input range) -> ArgMax over classes -> seg."""
    w = (np.random.default_rng(5).standard_normal((2, 3, 3, 3)) * gain).astype(np.float32)
    return _model([helper.make_node("Conv", ["x", "w"], ["logits"], name="head/conv",
                                    pads=[1, 1, 1, 1]),
                   helper.make_node("Sigmoid", ["logits"], ["prob"], name="head/sigmoid"),
                   helper.make_node("ArgMax", ["prob"], ["seg"], name="head/argmax", axis=1,
                                    keepdims=0)],
                  [helper.make_tensor_value_info("x", F, [1, 3, 8, 8])],
                  [helper.make_tensor_value_info("prob", F, [1, 2, 8, 8]),
                   helper.make_tensor_value_info("seg", TensorProto.INT64, [1, 8, 8])],
                  [numpy_helper.from_array(w, "w")], name="seg")


def body_and_head(tmp_path: Path) -> tuple[Path, Path]:
    """A model split in two: body x[1,16] -> MatMul -> Relu -> feat; head feat -> MatMul (weights
    ~1e-7) -> Add(ones) -> out, an output that barely moves (constant in float32)."""
    rng = np.random.default_rng(2)
    w1 = rng.standard_normal((16, 16)).astype(np.float32)
    w2 = (rng.standard_normal((16, 4)) * 1e-7).astype(np.float32)
    body = _model([helper.make_node("MatMul", ["x", "w1"], ["mm"], name="body/mm"),
                   helper.make_node("Relu", ["mm"], ["feat"], name="body/relu")],
                  [helper.make_tensor_value_info("x", F, [1, 16])],
                  [helper.make_tensor_value_info("feat", F, [1, 16])],
                  [numpy_helper.from_array(w1, "w1")], name="body")
    head = _model([helper.make_node("MatMul", ["feat", "w2"], ["hm"], name="head/mm"),
                   helper.make_node("Add", ["hm", "one"], ["out"], name="head/add")],
                  [helper.make_tensor_value_info("feat", F, [1, 16])],
                  [helper.make_tensor_value_info("out", F, [1, 4])],
                  [numpy_helper.from_array(w2, "w2"),
                   numpy_helper.from_array(np.ones((1, 4), np.float32), "one")], name="head")
    paths = tmp_path / "body.onnx", tmp_path / "head.onnx"
    onnx.save(body, str(paths[0]))
    onnx.save(head, str(paths[1]))
    return paths


def _subparsers(parser: argparse.ArgumentParser, prefix: str = ""):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield f"{prefix}{name}", sub
                yield from _subparsers(sub, f"{prefix}{name} ")


def _flags(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {s: a for a in parser._actions for s in a.option_strings}


# ------------------------------------------------------------- one group on every --verify
def test_every_command_with_verify_takes_the_verify_options_and_its_advice_exists():
    commands = dict(_subparsers(build_parser()))
    with_verify = {name: sub for name, sub in commands.items() if "--verify" in _flags(sub)}
    assert {"extract", "copy", "insert", "reroute", "rename", "bypass", "merge", "apply",
            "diff"} <= set(with_verify)
    helps = {}
    for name, sub in with_verify.items():
        flags = _flags(sub)
        missing = [f for f in VERIFY_OPTIONS if f not in flags]
        assert not missing, f"{name} lacks {missing}"
        helps[name] = [flags[f].help for f in VERIFY_OPTIONS]
    assert len({tuple(h) for h in helps.values()}) == 1  # one definition, the same everywhere
    # the advice of an inconclusive check names flags its command has, verify's included
    for name, sub in {**with_verify, "verify": commands["verify"]}.items():
        advice = sub.get_default("verify_advice")
        assert advice, name
        for words in advice:
            assert words.split()[0] in _flags(sub), f"{name}: {words}"
    assert commands["verify"].get_default("verify_advice")[0].startswith("--inputs")
    assert "--inputs" not in with_verify["copy"]._option_string_actions


@pytest.fixture(scope="module")
def zeroing(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("zeroing") / "m.onnx"
    onnx.save(sub_drop_relu(2.0), str(path))
    return path


def test_verb_inconclusive_advice_names_its_own_flags_and_real_inputs_settle_it(zeroing, tmp_path,
                                                                               capsys):
    out = tmp_path / "out.onnx"
    base = ["bypass", zeroing, "-o", out, "--node", "drop", "--verify"]
    proc = cli(*base)
    assert proc.returncode == 1 and not out.exists(), proc.stderr
    line = next(ln for ln in proc.stderr.splitlines() if "inconclusive" in ln)
    assert "--verify-inputs FILE.npz" in line and "--verify-range LO,HI" in line
    assert "--verify-deep" in line
    assert "(--inputs" not in line and "or --deep" not in line and "--range LO" not in line
    # after --verify-deep the advice no longer offers it (and the deep table is in the JSON)
    proc = cli(*base, "--verify-deep", "--json")
    assert proc.returncode == 1, proc.stderr
    line = next(ln for ln in proc.stderr.splitlines() if "inconclusive" in ln)
    assert "--verify-inputs" in line and "deep" not in line.partition("; give")[2]
    deep = json.loads(proc.stdout)["verify"]["deep"]
    assert deep["forced"] and deep["tensors"]
    # real inputs where Sub is positive: the check is informative and passes
    npz = tmp_path / "real.npz"
    np.savez(npz, x=np.random.default_rng(1).uniform(3.0, 4.0, (1, 8)).astype(np.float32))
    proc = cli(*base, "--verify-inputs", npz, "--json")
    assert proc.returncode == 0 and out.exists(), proc.stderr
    report = json.loads(proc.stdout)["verify"]
    assert report["verdict"] == "pass" and report["inputs"]["x"] == f"from {npz}"
    # so does a random range there, under the new name or the old one
    for flag in ("--verify-range", "--range"):
        out.unlink()
        code, _, err = cli_main(capsys, *base, f"{flag}=x=3,4")
        assert code == 0 and out.exists(), err


def test_resolution_advice_of_a_pair_names_the_verify_flags(tmp_path):
    """y = Identity(x * 1e-4) + 1 varies by far less than its tolerance resolves: the pair's own
    advice ('--deep', '--atol' on verify) is given in --verify-* names."""
    path, out = tmp_path / "m.onnx", tmp_path / "out.onnx"
    onnx.save(_model([helper.make_node("Mul", ["x", "tiny"], ["s"], name="mul"),
                      helper.make_node("Identity", ["s"], ["t"], name="drop"),
                      helper.make_node("Add", ["t", "one"], ["y"], name="add")],
                     [helper.make_tensor_value_info("x", F, [1, 8])],
                     [helper.make_tensor_value_info("y", F, [1, 8])],
                     [numpy_helper.from_array(np.full((1, 8), 1e-4, np.float32), "tiny"),
                      numpy_helper.from_array(np.ones((1, 8), np.float32), "one")]), str(path))
    proc = cli("bypass", path, "-o", out, "--node", "drop", "--verify", "--json")
    assert proc.returncode == 1, proc.stderr
    (pair,) = json.loads(proc.stdout)["verify"]["pairs"]
    assert pair["why"].startswith("below the tolerance's resolution"), pair
    assert pair["why"].endswith("(--verify-deep) or give a tighter --verify-atol"), pair
    assert "(--deep)" not in proc.stderr and "tighter --atol" not in proc.stderr


def test_samples_dims_seed_and_tolerances_take_effect(tmp_path, capsys):
    path, out = tmp_path / "m.onnx", tmp_path / "out.onnx"
    model = sub_drop_relu(0.9)  # positive now and then: whether a seed's inputs show it varies
    onnx.save(model, str(path))
    code, stdout, err = cli_main(capsys, "bypass", path, "-o", out, "--node", "drop", "--verify",
                                 "--json", "--verify-samples", "3", "--verify-dim", "N=2",
                                 "--allow-inconclusive")
    assert code == 0, err
    report = json.loads(stdout)["verify"]
    assert report["samples"] == 3 and report["inputs"]["x"].endswith("float32 2x8"), report
    bypassed = clone(model)
    bypass(bypassed, ["drop"])
    verdicts = {seed: verify_log(model, bypassed, seed=seed).verdict for seed in range(12)}
    good = next(s for s, v in verdicts.items() if v == "pass")
    bad = next(s for s, v in verdicts.items() if v == "inconclusive")
    for seed, want in ((good, 0), (bad, 1)):
        out.unlink(missing_ok=True)
        code, _, err = cli_main(capsys, "bypass", path, "-o", out, "--node", "drop", "--verify",
                                "--verify-seed", seed)
        assert code == want and out.exists() == (want == 0), (seed, err)
    # insert's block is compared within tolerance: the given one
    code, stdout, err = cli_main(capsys, "insert", path, "-o", tmp_path / "ins.onnx", "--at",
                                 "s", "--op", "scale:factor=2", "--verify", "--json",
                                 "--verify-range=x=3,4", "--verify-rtol", "0.01",
                                 "--verify-atol", "0.001")
    assert code == 0, err
    (block,) = [p for p in json.loads(stdout)["verify"]["pairs"] if p["check"] == "block"]
    assert (block["rtol"], block["atol"], block["exact"]) == (0.01, 0.001, False)


def test_apply_and_diff_take_the_verify_options(zeroing, tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("onnxsurgeon: 1\nsteps:\n  - bypass: {nodes: [drop]}\n")
    out = tmp_path / "out.onnx"
    proc = cli("apply", recipe, zeroing, "-o", out, "--verify")
    assert proc.returncode == 1 and not out.exists(), proc.stdout
    assert "(--inputs" not in proc.stdout and "or --deep" not in proc.stdout
    assert "--verify-inputs FILE.npz" in proc.stdout, proc.stdout
    proc = cli("apply", recipe, zeroing, "-o", out, "--verify", "--verify-range=x=3,4", "--json")
    assert proc.returncode == 0 and out.exists(), proc.stdout + proc.stderr
    (check,) = json.loads(proc.stdout)["verify"]["checkpoints"]
    assert check["step"] == "final" and check["verdict"] == "pass", check
    # diff --verify of the same two models: the same data flags
    page = tmp_path / "d.html"
    proc = cli("diff", zeroing, out, "-o", page, "--verify")
    assert proc.returncode == 1 and "--verify-inputs FILE.npz" in proc.stderr, proc.stderr
    proc = cli("diff", zeroing, out, "-o", page, "--verify", "--verify-range=x=3,4")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_verify_command_advice_and_rewrite_log_deep(zeroing, tmp_path):
    out = tmp_path / "out.onnx"
    assert cli("bypass", zeroing, "-o", out, "--node", "drop").returncode == 0
    proc = cli("verify", zeroing, out, "--rewrite-log")
    assert proc.returncode == 1 and "(--inputs FILE.npz)" in proc.stderr, proc.stderr
    assert "--deep" in proc.stderr and "--verify-" not in proc.stderr
    proc = cli("verify", zeroing, out, "--rewrite-log", "--deep", "--json")
    assert proc.returncode == 1, proc.stderr  # runs now (it was refused: exit 2)
    assert "--deep" not in proc.stderr and "--inputs FILE.npz" in proc.stderr
    report = json.loads(proc.stdout)
    assert report["kind"] == "rewrite:bypass" and report["deep"]["forced"]
    assert {t["tensor"] for t in report["deep"]["tensors"]} >= {"s"}
    proc = cli("verify", zeroing, out, "--rewrite-log", "--deep", "--range=x=3,4", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["deep"]["tensors"]


# ------------------------------------------------------------------- copy's stop tensors
@pytest.mark.parametrize("how", [["--stop", "logits"], ["--replace-input", "logits=logits"]],
                         ids=["stop", "replace-input"])
def test_copy_of_a_saturated_segmentation_head_at_a_stop_tensor_passes(tmp_path, capsys, how):
    """Issue 26 item 10: the copy of a head read from its activation was refused as
    inconclusive (exit 1, nothing written) at any --range, while extract passed by structure."""
    path, out = tmp_path / "seg.onnx", tmp_path / "out.onnx"
    onnx.save(seg_head(), str(path))
    for span in ("0,255", "-3,-1"):  # in-process; the default range end to end below
        code, _, err = cli_main(capsys, "copy", path, "-o", out, "--outputs", "prob", *how,
                                "--verify", f"--range={span}")
        assert code == 0 and out.exists(), err
        code, _, err = cli_main(capsys, "extract", path, "-o", tmp_path / "x.onnx", "--outputs",
                                "prob", "--inputs", "logits", "--verify", f"--range={span}")
        assert code == 0, err
    out.unlink()
    proc = cli("copy", path, "-o", out, "--outputs", "prob", *how, "--verify", "--json")
    assert proc.returncode == 0 and out.exists(), proc.stdout + proc.stderr
    result = json.loads(proc.stdout)
    (pair,) = [p for p in result["verify"]["pairs"] if p["check"] == "copy"]
    assert not pair["informative"] and pair["verdict"] == "pass" and pair["evidence"]
    assert result["outputs"] == {"prob": "copy/prob"} and result["copied_nodes"] == 1
    copied = onnx.load(str(out))
    (sig,) = [n for n in copied.graph.node if n.name == "copy/head/sigmoid"]
    assert list(sig.input) == ["logits"]  # the copy reads the original's activation
    (rec,) = records(copied)[-1:]
    assert rec.replace_inputs == {"logits": "logits"}
    # a wrong copy still cannot pass: the copied Sigmoid made a Relu
    bad = clone(copied)
    next(n for n in bad.graph.node if n.name == "copy/head/sigmoid").op_type = "Relu"
    assert verify_log(load(path), bad).verdict != "pass"


def test_copy_stop_tensors_are_recorded_verified_and_replayed(tmp_path):
    model = seg_head()
    result = copy(model, ["seg"], stop_at=["prob"], prefix="twin/")
    assert result.outputs == {"seg": "twin/seg"} and list(result.nodes) == ["head/argmax"]
    (rec,) = records(model)
    assert rec.replace_inputs == {"prob": "prob"}
    assert verify_log(seg_head(), model).verdict == "pass"
    again = seg_head()
    replay(Model(again), rec)  # the record replays to itself (it raises otherwise)
    assert records(again)[-1] == rec
    with pytest.raises(UsageError, match="stop tensor 'w' is not on the path"):
        copy(seg_head(), ["seg"], stop_at=["prob", "w"])
    with pytest.raises(UsageError, match="both a stop tensor and replaced"):
        copy(seg_head(), ["prob"], stop_at=["logits"], replace_inputs={"logits": "x"})


def test_copy_of_a_module_path_with_several_outputs_copies_all_of_them(tmp_path):
    """x -> /enc/Mul -> /enc/Split -> a, b, each read outside 'enc': the module path copies
    both (it was refused as ambiguous)."""
    path, out = tmp_path / "m.onnx", tmp_path / "out.onnx"
    onnx.save(_model([helper.make_node("Mul", ["x", "w"], ["m"], name="/enc/Mul"),
                      helper.make_node("Split", ["m", "sizes"], ["a", "b"], name="/enc/Split",
                                       axis=1),
                      helper.make_node("Relu", ["a"], ["y1"], name="/head/Relu"),
                      helper.make_node("Sigmoid", ["b"], ["y2"], name="/head/Sigmoid")],
                     [helper.make_tensor_value_info("x", F, [1, 4])],
                     [helper.make_tensor_value_info("y1", F, [1, 2]),
                      helper.make_tensor_value_info("y2", F, [1, 2])],
                     [numpy_helper.from_array(np.float32([[1, 2, 3, 4]]), "w"),
                      numpy_helper.from_array(np.int64([2, 2]), "sizes")]), str(path))
    assert cli("extract", path, "-o", out, "--outputs", "enc").returncode == 2  # still one
    proc = cli("copy", path, "-o", out, "--outputs", "enc", "--verify", "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["outputs"] == {"a": "copy/a", "b": "copy/b"}
    assert [o.name for o in onnx.load(str(out)).graph.output] == ["y1", "y2", "copy/a", "copy/b"]


# ------------------------------------------------------------------------ merge settles
def test_merge_of_a_split_model_settles_a_constant_output_by_structure(tmp_path):
    """Issue 26 item 10: merge body.onnx head.onnx --verify never ran the settlement extract
    and insert run; the head's output is constant in float32, so it was inconclusive."""
    body, head = body_and_head(tmp_path)
    out = tmp_path / "merged.onnx"
    proc = cli("merge", body, head, "-o", out, "--connect", "feat=feat", "--verify", "--json")
    assert proc.returncode == 0 and out.exists(), proc.stdout + proc.stderr
    (pair,) = json.loads(proc.stdout)["verify"]["pairs"]
    assert not pair["informative"] and pair["verdict"] == "pass" and pair["evidence"]
    # a merged model whose first part is not FIRST's cannot pass that way
    merged = onnx.load(str(out))
    w1 = next(t for t in merged.graph.initializer if t.name == "w1")
    w1.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(w1) * np.float32(1.5), "w1"))
    assert verify_merge(load(body), load(head), merged).verdict != "pass"
    # nor one whose second part is not SECOND's
    merged = onnx.load(str(out))
    next(n for n in merged.graph.node if n.op_type == "Add").op_type = "Sub"
    assert verify_merge(load(body), load(head), merged).verdict == "fail"


@pytest.mark.slow
@pytest.mark.tf
def test_merge_of_a_keras_model_split_into_body_and_head_settles(tmp_path):
    """The issue's case: a Keras model converted with tf2onnx, split with extract into body and
    head at the body's activation, merged back with --verify (the head's output is constant in
    float32: inconclusive before the merge check settled)."""
    keras = pytest.importorskip("keras")
    from onnxsurgeon.converters import from_tf

    from onnxsurgeon.io import save
    from onnxsurgeon.surgery import extract

    keras.utils.set_random_seed(0)
    x = keras.Input((16,), name="x")
    h = keras.layers.Dense(16, activation="relu", name="body")(x)
    y = keras.layers.Dense(4, name="head", bias_initializer="ones",
                           kernel_initializer=keras.initializers.RandomNormal(stddev=1e-7))(h)
    from_tf(keras.Model(x, y), tmp_path / "k.onnx")
    body, head = load(tmp_path / "k.onnx"), load(tmp_path / "k.onnx")
    extract(body, ["body"])
    (act,) = [o.name for o in body.proto.graph.output]
    extract(head, ["head"], inputs=[act])
    save(body, tmp_path / "body.onnx")
    save(head, tmp_path / "head.onnx")
    out = tmp_path / "merged.onnx"
    proc = cli("merge", tmp_path / "body.onnx", tmp_path / "head.onnx", "-o", out, "--connect",
               f"{act}={act}", "--verify", "--json")
    assert proc.returncode == 0 and out.exists(), proc.stdout + proc.stderr
    (pair,) = json.loads(proc.stdout)["verify"]["pairs"]
    assert not pair["informative"] and pair["verdict"] == "pass", pair
