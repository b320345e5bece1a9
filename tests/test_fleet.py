"""Fleets: one recipe on many models in parallel processes; a broken model spoils nothing."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import onnx
import pytest
import yaml

import onnxsurgeon as osg
from tests import builders
from tests.cli_helpers import cli

ROOT = Path(__file__).resolve().parent.parent
SEED = ROOT / "models" / "seed_cnn.onnx"


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture()
def fleet(tmp_path: Path) -> tuple[Path, list[Path]]:
    """A recipe and five models: two good (seed copies), one not ONNX, one without the tensor
    the recipe names, one good model built with onnx.helper that has the tensor under its name."""
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(SEED, src / "v1.onnx")
    shutil.copy(ROOT / "models" / "tf1_seed.onnx", src / "tf1.onnx")
    (src / "broken.onnx").write_bytes(b"not a model at all")
    osg.save(builders.chain(3), src / "chain.onnx")  # no 'logits:0' here
    model = onnx.load(str(SEED))
    model.producer_version = "v2"  # the next version of the same model
    onnx.save(model, str(src / "v2.onnx"))
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({"onnxsurgeon": 1, "steps": [
        {"insert": {"at": "logits:0", "op": "softmax", "params": {"axis": -1}}},
        {"extract": {"outputs": ["logits:0"]}},
        {"verify": {}},
    ]}))
    names = ["v1", "broken", "tf1", "chain", "v2"]
    return recipe, [src / f"{n}.onnx" for n in names]


def test_fleet_one_broken_model_spoils_nothing(fleet, tmp_path):
    recipe, models = fleet
    outdir = tmp_path / "out"
    proc = cli("apply", recipe, *models, "-o", f"{outdir}/", "--jobs", "2", "--json")
    assert proc.returncode == 1, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    by_name = {Path(line["model"]).name: line for line in lines}
    assert sorted(by_name) == sorted(m.name for m in models)
    assert {n: line["status"] for n, line in by_name.items()} == {
        "v1.onnx": "ok", "v2.onnx": "ok", "tf1.onnx": "ok", "broken.onnx": "failed",
        "chain.onnx": "failed"}
    assert "not an ONNX model" in by_name["broken.onnx"]["error"]
    assert "step 1 (insert), key 'at'" in by_name["chain.onnx"]["error"]
    assert sorted(p.name for p in outdir.iterdir()) == ["tf1.onnx", "v1.onnx", "v2.onnx"]
    for name in ("v1.onnx", "tf1.onnx"):
        line = by_name[name]
        assert line["output"] == str(outdir / name) and line["verify"]["ok"] is True
        assert [s["verb"] for s in line["steps"]] == ["insert", "extract", "verify"]
        # each fleet output is byte-identical to the single-model command's
        single = tmp_path / f"single_{name}"
        assert cli("apply", recipe, line["model"], "-o", single).returncode == 0
        assert sha(single) == sha(outdir / name)


def test_fleet_text_summary_and_sequential_jobs(fleet, tmp_path):
    recipe, models = fleet
    outdir = tmp_path / "out"
    proc = cli("apply", recipe, models[0], models[1], "-o", outdir)  # -o names a new folder
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["model", "status", "seconds", "output", "/", "error"]
    assert lines[1].startswith("v1.onnx") and " ok " in lines[1]
    assert lines[2].startswith("broken.onnx") and " failed " in lines[2]
    assert lines[-1] == "1 of 2 models ok, 1 failed"
    proc = cli("apply", recipe, models[0], models[2], "-o", outdir, "--jobs", "1")
    assert proc.returncode == 0 and proc.stdout.splitlines()[-1] == "2 of 2 models ok"


@pytest.mark.parametrize(("args", "expected"), [
    (["--jobs", "0"], "expected a positive number of jobs"),
    (["--plan"], "--plan takes one model"),
])
def test_fleet_usage_errors(fleet, tmp_path, args, expected):
    recipe, models = fleet
    proc = cli("apply", recipe, *models[:2], "-o", f"{tmp_path}/out/", *args)
    assert proc.returncode == 2 and expected in proc.stderr
    assert not (tmp_path / "out").exists()


def test_fleet_bad_recipe_is_exit_2_and_writes_nothing(fleet, tmp_path):
    _, models = fleet
    bad = tmp_path / "bad.yaml"
    bad.write_text("onnxsurgeon: 1\nsteps:\n  - extract: {outputs: [logits:0], input: [x]}\n")
    proc = cli("apply", bad, *models, "-o", f"{tmp_path}/out/", "--jobs", "2")
    assert proc.returncode == 2
    assert "step 1 (extract): unknown key 'input'" in proc.stderr and "did you mean 'inputs'" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_fleet_same_file_names_refused(fleet, tmp_path):
    recipe, models = fleet
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(models[0], other / models[0].name)
    proc = cli("apply", recipe, models[0], other / models[0].name, "-o", f"{tmp_path}/out/")
    assert proc.returncode == 2 and "same file name 'v1.onnx'" in proc.stderr


def test_single_model_refuses_fleet_flags(fleet, tmp_path):
    recipe, models = fleet
    proc = cli("apply", recipe, models[0], "-o", tmp_path / "o.onnx", "--jobs", "2")
    assert proc.returncode == 2 and "--jobs and --ray are for fleets" in proc.stderr


def test_fleet_json_lines_in_input_order_with_index_and_did_you_mean(fleet, tmp_path):
    """The lines come in the order the models were given, each with its index, whatever order
    the jobs finish in; a model without the recipe's tensor says "did you mean" like the single
    command does; every line fits the apply schema."""
    from onnxsurgeon.schema import validate

    recipe, models = fleet
    typo = tmp_path / "typo.yaml"
    typo.write_text(yaml.safe_dump({"onnxsurgeon": 1, "steps": [
        {"extract": {"outputs": ["logitz:0"]}}]}))
    order = [models[4], models[1], models[0], models[2]]  # v2, broken, v1, tf1
    proc = cli("apply", typo, *order, "-o", f"{tmp_path}/out/", "--jobs", "3", "--json")
    assert proc.returncode == 1 and proc.stderr == ""
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [(d["index"], d["model"]) for d in lines] == [(k, str(m)) for k, m in enumerate(order)]
    for line in lines:
        validate("apply", line)
    single = cli("apply", typo, models[0], "-o", tmp_path / "single.onnx")
    assert single.returncode == 2
    hint = single.stderr.strip().split("not found; ", 1)[1]
    assert hint.startswith("did you mean 'logits:0'")
    assert [d["error"].endswith(hint) for d in lines[:3]] == [True, False, True]
    assert "not found; did you mean 'logits:0'" in lines[3]["error"]  # tf1: its own names
