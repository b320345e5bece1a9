"""Comma lists on every repeatable flag (issue 27): walked from the argparse parser itself, so a
flag added later is held to the same rule; plus `rename --map` and `copy --replace-input` end to
end (issue 26: `--map 2037=boxes,2007=labels` renamed one output to 'boxes,2007=labels')."""

from __future__ import annotations

import argparse
import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnxsurgeon.cli import build_parser
from onnxsurgeon.cli_flags import ListAction, split_list, whole
from tests import builders
from tests.cli_helpers import assert_refused, cli
from tests.conftest import run

# two sample items per item converter (a new converter must get its samples here)
SAMPLES = {"str": ("a", "b"), "pair": ("a=b", "c=d"), "dim": ("n=2", "m=3"),
           "input_range": ("x=0,1", "y=-2,2"), "regex": ("a{1,3}=b", "c=d"),
           "attr": ("n.pads=1,1", "m.alpha=0.5")}


def _commands() -> list[tuple[list[str], argparse.ArgumentParser]]:
    """(the words naming a (sub)command, its parser) for every command and subcommand."""
    found, stack = [], [([], build_parser())]
    while stack:
        words, parser = stack.pop()
        found.append((words, parser))
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                stack.extend(([*words, name], p) for name, p in action.choices.items())
    return found


def _repeatable() -> list[tuple[list[str], argparse.ArgumentParser, argparse.Action]]:
    """Every option that takes several values: appends, extends, nargs '+'/'*', list actions."""
    return [(words, parser, a) for words, parser in _commands() for a in parser._actions
            if a.option_strings and (isinstance(a, (ListAction, argparse._AppendAction,
                                                    argparse._ExtendAction))
                                     or a.nargs in ("+", "*"))]


def _base_argv(parser: argparse.ArgumentParser, skip: argparse.Action) -> list[str]:
    """Positionals and required options (other than ``skip``) with placeholder values."""
    argv = [
        "P" for a in parser._actions
        if not a.option_strings and not isinstance(a, argparse._SubParsersAction)
        and a.nargs != "?"]
    for a in parser._actions:
        if a.option_strings and a.required and a is not skip:
            value = (SAMPLES[a.item.__name__][0] if isinstance(a, ListAction)
                     else a.choices[0] if a.choices else "1" if a.type is int else "v")
            argv += [a.option_strings[0], value]
    for group in parser._mutually_exclusive_groups:
        if group.required:
            argv += [group._group_actions[0].option_strings[0], "v"]
    return argv


REPEATABLE = _repeatable()


def _id(entry: tuple[list[str], argparse.ArgumentParser, argparse.Action]) -> str:
    return " ".join([*entry[0], entry[2].option_strings[0]])


def test_the_walk_finds_the_list_flags():
    names = {_id(e) for e in REPEATABLE}
    assert {"rename --map", "copy --replace-input", "merge --connect", "extract --outputs",
            "extract --inputs", "bypass --node", "verify --dim", "convert torch --input",
            "reroute --consumers", "insert --range"} <= names


@pytest.mark.parametrize("entry", REPEATABLE, ids=_id)
def test_every_repeatable_flag_takes_a_comma_list_and_repeats(entry):
    """`F x,y`, `F x F y` (and `F x y` where F takes several values) give one list."""
    words, parser, action = entry
    assert isinstance(action, ListAction), f"{_id(entry)} is repeatable but no ListAction"
    first, second = SAMPLES[action.item.__name__]
    flag = action.option_strings[0]
    base = [*words, *_base_argv(parser, action)]
    top = build_parser()
    want = [action.item(first), action.item(second)]
    spellings = [[flag, first, flag, second]]
    if action.split is not whole:
        spellings.append([flag, f"{first},{second}"])
        spellings.append([f"{flag}={first},{second}"])
    if action.nargs == "+":
        spellings.append([flag, first, second])
    for spelling in spellings:
        assert getattr(top.parse_args([*base, *spelling]), action.dest) == want, spelling
    if action.split is whole:  # commas are part of the value here, and a list is refused
        assert getattr(top.parse_args([*base, flag, first]), action.dest) == want[:1]
        with pytest.raises(SystemExit) as exc:
            top.parse_args([*base, flag, "a=b,c=d"])
        assert exc.value.code == 2


@pytest.mark.parametrize("entry", [e for e in REPEATABLE if e[2].split is not whole], ids=_id)
def test_a_broken_list_is_refused_in_one_line(entry, capsys):
    """An empty item (`a,,b`, a trailing comma) and, for pairs, an item that is no pair."""
    words, parser, action = entry
    first, _ = SAMPLES[action.item.__name__]
    base = [*words, *_base_argv(parser, action), action.option_strings[0]]
    bad = [f"{first},,{first}", f"{first},"]
    if action.item.__name__ in ("_pair", "_dim"):
        bad.append(f"{first},c")
    for value in bad:
        with pytest.raises(SystemExit) as exc:
            build_parser().parse_args([*base, value])
        err = capsys.readouterr().err.strip().splitlines()
        assert exc.value.code == 2 and len(err) == 1, err
        assert action.option_strings[0] in err[0] and repr(value) in err[0], err


def test_an_escaped_comma_stays_in_the_name():
    assert split_list(r"a\,b,c") == ["a,b", "c"]
    args = build_parser().parse_args(["rename", "m", "-o", "o", "--map", r"x=a\,b,y=c"])
    assert args.map == [("x", "a,b"), ("y", "c")]


def test_a_list_given_to_a_one_name_flag_is_refused(cnn, tmp_path):
    out = tmp_path / "o.onnx"
    assert_refused(["insert", cnn, "-o", out, "--at", "act=x,side_out=y", "--op", "relu"],
                   "takes one name", inputs=[cnn], out=out)


def test_help_says_how_to_write_lists(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["rename", "--help"])
    flat = " ".join(capsys.readouterr().out.split())
    assert "every repeatable flag takes a comma list" in flat and r"'\,'" in flat


def _numbered_outputs() -> onnx.ModelProto:
    """An exported detector's numbered outputs: x -> {Relu 2037, Sigmoid 2007, Neg 2006}."""
    nodes = [helper.make_node("Relu", ["x"], ["2037"], name="r"),
             helper.make_node("Sigmoid", ["x"], ["2007"], name="s"),
             helper.make_node("Neg", ["x"], ["2006"], name="n")]
    graph = helper.make_graph(
        nodes, "det", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [4]) for n in ("2037", "2007", "2006")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_rename_map_takes_a_comma_list_end_to_end(tmp_path):
    src, out = tmp_path / "det.onnx", tmp_path / "named.onnx"
    onnx.save(_numbered_outputs(), str(src))
    proc = cli("rename", src, "-o", out, "--map", "2037=boxes,2007=labels,2006=scores", "--verify")
    assert proc.returncode == 0, proc.stderr
    model = onnx.load(str(out))
    assert [o.name for o in model.graph.output] == ["boxes", "labels", "scores"]
    x = np.float32([-1, 0, 2, -3])
    got, ref = run(model, {"x": x}), run(_numbered_outputs(), {"x": x})
    for old, new in (("2037", "boxes"), ("2007", "labels"), ("2006", "scores")):
        np.testing.assert_array_equal(got[new], ref[old])
    # not a pair: refused in one line, nothing written
    assert_refused(["rename", src, "-o", out.with_name("x.onnx"), "--map", "2037=boxes,2007"],
                   "expected A=B, got '2007'", inputs=[src], out=out.with_name("x.onnx"))


def test_copy_replace_input_takes_a_comma_list_end_to_end(cnn, tmp_path):
    out = tmp_path / "rep.onnx"
    proc = cli("copy", cnn, "-o", out, "--outputs", "logits",
               "--replace-input", "act=conv5_out,fc.weight=fc.weight", "--json")
    assert proc.returncode == 0, proc.stderr
    nodes = json.loads(proc.stdout)["nodes"]
    model = onnx.load(str(out))
    by_name = {n.name: n for n in model.graph.node}
    assert by_name[nodes["pool"]].input[0] == "conv5_out"      # A=B: reads conv5_out, not act
    assert by_name[nodes["fc"]].input[1] == "fc.weight"        # C=D: the original weight
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    got = run(model, {"x": x})
    ref = builders.tiny_cnn()
    ref.graph.node[2].input[0] = "conv5_out"   # the same network without the Relu
    np.testing.assert_array_equal(got[json.loads(proc.stdout)["outputs"]["logits"]],
                                  run(ref, {"x": x})["logits"])
