"""Every ``--json`` output has a JSON Schema (onnxsurgeon/schemas/<command>.json) and fits it.

The CLI runs in-process (``cli.main``), exactly as a user's argv; a second test runs one command
in a subprocess to show stdout carries one JSON document and stderr nothing."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from onnxsurgeon import cli
from onnxsurgeon.schema import commands_with_schema, load_schema, schema_id, validate
from tests import builders

ROOT = Path(__file__).resolve().parent.parent


def _json_commands() -> dict[str, argparse.ArgumentParser]:
    """Every (sub)command whose parser takes --json; nested ones (convert tf) by top name."""
    found: dict[str, argparse.ArgumentParser] = {}
    stack = [("", cli.build_parser())]
    while stack:
        name, parser = stack.pop()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub, p in action.choices.items():
                    stack.append((name or sub, p))
            elif "--json" in action.option_strings and name:
                found.setdefault(name, parser)
    return found


PENDING: set[str] = set()
"""Commands whose --json has no schema yet; the test fails once one of them gets a schema, so
that this list only shrinks."""


def test_every_json_command_has_a_valid_versioned_schema():
    commands = _json_commands()
    assert {"inspect", "extract", "copy", "insert", "reroute", "verify", "convert"} <= set(commands)
    missing = sorted(set(commands) - set(commands_with_schema()) - PENDING)
    assert not missing, f"add onnxsurgeon/schemas/<command>.json for {missing} (see README)"
    assert not PENDING & set(commands_with_schema()), "drop it from PENDING"
    for command in set(commands) - PENDING:
        schema = load_schema(command)
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["properties"]["schema"]["const"] == schema_id(command)
        assert schema_id(command) == f"onnxsurgeon.{command}/{schema['x-version']}"


def run_json(capsys, *argv: str) -> tuple[int, dict]:
    code = cli.main([str(a) for a in argv])
    captured = capsys.readouterr()
    assert captured.err == "", captured.err
    data = json.loads(captured.out)
    validate(data["command"], data)
    return code, data


def test_rewrite_commands_fit_their_schemas_with_the_verification_embedded(cnn, tmp_path, capsys):
    o = tmp_path / "o.onnx"
    code, data = run_json(capsys, "extract", cnn, "-o", o, "--outputs", "logits", "--json")
    assert code == 0 and data["verify"] is None and data["output"] == str(o)
    assert data["kept_nodes"] == data["nodes"] == 5 and data["removed_nodes"] == 1
    code, data = run_json(capsys, "extract", cnn, "-o", o, "--outputs", "logits", "--json",
                          "--verify")
    assert code == 0 and data["verify"]["ok"] is True
    assert data["verify"]["schema"] == "onnxsurgeon.verify/1"
    code, data = run_json(capsys, "copy", cnn, "-o", o, "--outputs", "logits", "--json",
                          "--verify")
    assert code == 0 and data["copied_nodes"] == len(data["nodes"]) == 5
    assert data["verify"]["ok"] is True and data["weights"] == "independent"
    code, data = run_json(capsys, "insert", cnn, "-o", o, "--at", "act", "--op",
                          "scale:factor=2", "--json", "--verify")
    assert code == 0 and data["block"] == "scale" and data["renamed"] == {"act": "act/pre_scale"}
    assert {p["check"] for p in data["verify"]["pairs"]} == {"at", "block", "downstream"}
    code, data = run_json(capsys, "insert", cnn, "-o", o, "--at", "act", "--op",
                          "reduce_mean:axes=2|3", "--as-output", "--json")
    assert code == 0 and data["as_output"] is True and data["rerouted"] == []
    code, data = run_json(capsys, "reroute", cnn, "-o", o, "--from", "act", "--to",
                          "conv5_out", "--json", "--prune", "--verify")
    assert code == 0 and data["from"] == "act" and data["pruned_nodes"] == 1
    assert data["verify"]["ok"] is True


def test_rename_and_bypass_fit_their_schemas(cnn, tmp_path, capsys):
    o = tmp_path / "o.onnx"
    code, data = run_json(capsys, "rename", cnn, "-o", o, "--map", "act=features", "--json",
                          "--verify")
    assert code == 0 and data["renamed"] == {"act": "features"} and data["verify"]["ok"]
    code, data = run_json(capsys, "bypass", cnn, "-o", o, "--node", "relu5", "--json")
    assert code == 0 and data["removed"] == ["relu5"] and data["verify"] is None


def test_merge_fits_its_schema(tmp_path, capsys):
    a = tmp_path / "a.onnx"
    a.write_bytes(builders.tied_weights().SerializeToString())
    code, data = run_json(capsys, "merge", a, a, "-o", tmp_path / "o.onnx", "--connect", "y=x",
                          "--prefix", "b/", "--json", "--verify")
    assert code == 0 and data["second"] == str(a) and data["verify"]["ok"] is True
    assert data["outputs"] == ["b/y"]


def test_verify_and_inspect_fit_their_schemas(cnn, tmp_path, capsys):
    code, data = run_json(capsys, "verify", cnn, cnn, "--json")
    assert code == 0 and data["ok"] is True and len(data["pairs"]) == 3
    code, data = run_json(capsys, "inspect", cnn, "--json")
    assert code == 0 and data["nodes"] == 6 and data["model"] == str(cnn)
    code, data = run_json(capsys, "inspect", ROOT / "models" / "torch_cnn.onnx", "--json")
    check = data["framework"]["conversion_check"]
    assert isinstance(check, dict) and check["checked"] is True  # an object, not JSON in a string


def test_a_document_that_breaks_the_contract_is_refused(cnn, tmp_path, capsys):
    _, data = run_json(capsys, "extract", cnn, "-o", tmp_path / "o.onnx", "--outputs", "logits",
                       "--json")
    for broken in ({**data, "nodes": {"fc": "fc"}}, {**data, "surprise": 1},
                   {k: v for k, v in data.items() if k != "output"},
                   {**data, "schema": "onnxsurgeon.extract/0"}):
        with pytest.raises(jsonschema.ValidationError):
            validate("extract", broken)


def test_json_with_verify_is_one_document_on_stdout_and_nothing_on_stderr(cnn, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "onnxsurgeon", "copy", str(cnn), "-o",
                           str(tmp_path / "t.onnx"), "--outputs", "logits", "--json", "--verify"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0 and proc.stderr == ""
    data = json.loads(proc.stdout)
    validate("copy", data)
    assert data["verify"]["ok"] is True


@pytest.mark.slow
@pytest.mark.torch
def test_convert_torch_json_fits_its_schema(tmp_path, capsys):
    src = tmp_path / "net.py"
    src.write_text("import torch\n\ndef build():\n    torch.manual_seed(0)\n"
                   "    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU())\n")
    code, data = run_json(capsys, "convert", "torch", f"{src}:build", "-o", tmp_path / "n.onnx",
                          "--input", "x:2x4", "--exporter", "torchscript", "--json")
    assert code == 0 and data["framework"] == "pytorch" and data["check"]["ok"] is True
    assert data["inputs"] == ["x"] and data["output"] == str(tmp_path / "n.onnx")


RECIPE = ROOT / "examples" / "seed_recipe.yaml"
SEED = ROOT / "models" / "seed_cnn.onnx"


def test_apply_and_recipe_fit_their_schemas_and_the_printed_recipe_applies(tmp_path, capsys):
    out = tmp_path / "r.onnx"
    code, data = run_json(capsys, "apply", RECIPE, SEED, "-o", out, "--json")
    assert code == 0 and data["schema"] == "onnxsurgeon.apply/1" and data["output"] == str(out)
    assert [s["verb"] for s in data["steps"]] == [
        "copy", "reroute", "insert", "verify", "extract", "verify"]
    assert data["plan"] is False and data["verify"]["ok"] is True
    assert [c["step"] for c in data["verify"]["checkpoints"]] == [4, 6]
    code, planned = run_json(capsys, "apply", RECIPE, SEED, "-o", tmp_path / "p.onnx", "--plan",
                             "--json")
    assert code == 0 and planned["plan"] is True and planned["output"] is None
    assert planned["steps"][0]["plan"]["nodes"]["added"] > 0
    assert not (tmp_path / "p.onnx").exists()
    code, recipe = run_json(capsys, "recipe", out, "--json")
    assert code == 0 and recipe["schema"] == "onnxsurgeon.recipe/1"
    assert recipe["model"] == str(out) and recipe["onnxsurgeon"] == 1
    assert [next(iter(s)) for s in recipe["steps"]] == ["copy", "reroute", "insert", "extract"]
    printed = tmp_path / "replay.json"
    printed.write_text(json.dumps(recipe))
    replayed = tmp_path / "replayed.onnx"
    assert cli.main(["apply", str(printed), str(SEED), "-o", str(replayed)]) == 0
    capsys.readouterr()
    import onnx

    assert onnx.load(replayed).graph == onnx.load(out).graph


def test_apply_fleet_lines_fit_the_apply_schema(tmp_path, capsys):
    """One JSON line per model: an ok one and a failed one (in tf1_seed, tf2onnx fused the
    recipe's 'Conv2D:0' into the Conv that adds the bias)."""
    import shutil

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    shutil.copy(SEED, tmp_path / "a" / "seed_cnn.onnx")
    shutil.copy(ROOT / "models" / "tf1_seed.onnx", tmp_path / "b" / "tf1_seed.onnx")
    code = cli.main(["apply", str(RECIPE), str(tmp_path / "a" / "seed_cnn.onnx"),
                     str(tmp_path / "b" / "tf1_seed.onnx"), "-o", f"{tmp_path}/fleet/", "--json"])
    captured = capsys.readouterr()
    assert code == 1 and captured.err == ""
    lines = [json.loads(line) for line in captured.out.splitlines()]
    for line in lines:
        validate("apply", line)
    by_status = {line["status"]: line for line in lines}
    assert set(by_status) == {"ok", "failed"}
    assert by_status["ok"]["output"] == f"{tmp_path}/fleet/seed_cnn.onnx"
    assert by_status["failed"]["output"] is None
    assert by_status["failed"]["error"].endswith(
        "step 2 (reroute), key 'to': 'network/layer_conv5/Conv2D:0' was fused into Conv "
        "'network/layer_conv5/BiasAdd' by the converter; its value does not exist in the ONNX "
        "model; use 'network/layer_conv5/BiasAdd:0'")
    with pytest.raises(jsonschema.ValidationError):   # a failed line must say why
        validate("apply", {k: v for k, v in by_status["failed"].items() if k != "error"})


def test_the_schemas_name_every_recipe_verb():
    from onnxsurgeon.recipe import STEPS

    apply_verbs = load_schema("apply")["properties"]["steps"]["items"]["properties"]["verb"]["enum"]
    recipe_verbs = load_schema("recipe")["properties"]["steps"]["items"]["propertyNames"]["enum"]
    assert apply_verbs == recipe_verbs == list(STEPS)
