"""``--html`` on every rewriting command: the parser gives it to each command that writes a
rewritten model (so a later verb cannot miss it), and each command's page is headed by the
command's own summary and draws exactly the diff of the files it read and wrote."""

from __future__ import annotations

import argparse
import html
import json
import re
from pathlib import Path

import onnx
import pytest
import yaml

from onnxsurgeon.cli import build_parser
from onnxsurgeon.diff import diff_models
from tests import builders
from tests.test_cli import cli
from tests.test_diff import by_change, hooks

NOT_REWRITES = {"convert", "diff", "split"}  # split writes a folder of new models, no rewrite to draw
"""Commands with -o that write no rewrite of their input (a conversion, the page itself)."""


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_rewriting_command_takes_html():
    rewriting = {name for name, p in _subcommands().items()
                 if any("--output" in a.option_strings for a in p._actions)} - NOT_REWRITES
    assert {"extract", "copy", "insert", "reroute", "rename", "bypass", "merge",
            "apply"} <= rewriting
    for name in sorted(rewriting):
        flags = {s for a in _subcommands()[name]._actions for s in a.option_strings}
        assert {"--html", "--context"} <= flags, name


def _second(tmp: Path) -> Path:
    """A one-node model to merge behind tiny_cnn's logits."""
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Relu", ["logits"], ["mid"], name="head"),
                           helper.make_node("Neg", ["mid"], ["score"], name="neg")], "head",
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 5])],
                          [helper.make_tensor_value_info("score", TensorProto.FLOAT, [1, 5])])
    path = tmp / "second.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


COMMANDS = {
    "extract": ["--outputs", "logits"],
    "copy": ["--outputs", "logits", "--prefix", "twin/"],
    "insert": ["--at", "act", "--op", "scale:factor=2"],
    "reroute": ["--from", "act", "--to", "conv5_out", "--consumers", "side"],
    "rename": ["--map", "pooled=pool_out"],
    "bypass": ["--node", "relu5"],
    "merge": ["--connect", "logits=logits"],
    "apply": [],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_each_rewriting_command_draws_its_own_rewrite(command, tmp_path):
    src, out, page = tmp_path / "m.onnx", tmp_path / "out.onnx", tmp_path / "p.html"
    onnx.save(builders.tiny_cnn(), src)
    args: list[object] = [command, src, "-o", out, *COMMANDS[command], "--html", page]
    if command == "merge":
        args[2:2] = [_second(tmp_path)]
    if command == "apply":
        recipe = tmp_path / "r.yaml"
        recipe.write_text(yaml.safe_dump({"onnxsurgeon": 1, "steps": [
            {"insert": {"at": "pooled", "op": "scale", "params": {"factor": 2}}},
            {"reroute": {"from": "act", "to": "conv5_out", "consumers": ["side"]}}]}))
        args = ["apply", recipe, src, "-o", out, "--html", page]
    r = cli(*args)
    assert r.returncode == 0, r.stdout + r.stderr
    text = page.read_text()
    summary = html.unescape(re.search(r'<pre id="summary">(.*?)</pre>', text, re.S).group(1))
    lines = r.stdout.strip().splitlines()
    if command == "apply":  # the step lines head the page
        assert summary.splitlines() == [ln for ln in lines if ln.startswith("step ")]
    else:
        assert summary == lines[-1]
    drawn = by_change(hooks(text))
    expected = diff_models(onnx.load(src), onnx.load(out), context=2).changes()
    assert drawn == expected
    assert drawn["added"] | drawn["removed"] | drawn["rerouted"]


def test_apply_html_refuses_a_plan_and_a_fleet(tmp_path):
    src = tmp_path / "m.onnx"
    onnx.save(builders.tiny_cnn(), src)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({"onnxsurgeon": 1, "steps": [
        {"insert": {"at": "act", "op": "identity"}}]}))
    for extra, needle in (([src, "-o", tmp_path / "o.onnx", "--plan"], "--plan writes nothing"),
                          ([src, src, "-o", f"{tmp_path}/outs/"], "--html takes one model")):
        r = cli("apply", recipe, *extra, "--html", tmp_path / "p.html")
        assert r.returncode == 2 and needle in r.stderr, r.stderr
        assert not (tmp_path / "p.html").exists()


@pytest.mark.parametrize("command", ["merge", "rename", "bypass", "copy", "extract", "reroute",
                                     "apply"])
def test_verify_html_colours_intermediates_of_every_verb(command, tmp_path):
    """With --verify --html every rewriting verb's page colours drawn tensors its pairs never
    compared (intermediates, from the forced layer-wise comparison), each with the report's
    number."""
    src, out, page = tmp_path / "m.onnx", tmp_path / "out.onnx", tmp_path / "p.html"
    onnx.save(builders.tiny_cnn(), src)
    args: list[object] = [command, src, "-o", out, *COMMANDS[command], "--verify", "--json",
                          "--html", page]
    if command == "merge":
        args[2:2] = [_second(tmp_path)]
    if command == "apply":  # the final checkpoint's last step, layer by layer
        recipe = tmp_path / "r.yaml"
        recipe.write_text(yaml.safe_dump({"onnxsurgeon": 1, "steps": [
            {"insert": {"at": "act", "op": "identity"}},
            {"reroute": {"from": "act", "to": "conv5_out", "consumers": ["side"]}}]}))
        args = ["apply", recipe, src, "-o", out, "--verify", "--json", "--html", page]
    r = cli(*args)
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads(r.stdout)["verify"]
    if command == "apply":
        report = report["checkpoints"][-1]
    assert report["verdict"] == "pass" and report["deep"]["forced"] is True
    deep = {t["candidate"]: t["max_abs_diff"] for t in report["deep"]["tensors"]}
    paired = {p["candidate"] for p in report["pairs"]}
    errors = hooks(page.read_text()).errors
    intermediates = {t for t in errors if t not in paired}
    assert intermediates, errors
    for t in intermediates:
        assert errors[t] == f"{deep[t]:.3g}", t
