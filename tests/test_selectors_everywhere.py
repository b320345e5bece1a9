"""Every CLI flag that takes a tensor or node name accepts every selector (issue 10, point 7;
issue 28): the exact ONNX name, a framework name from the converters' name map, a
TensorFlow-style name with or without ``:0``, a node name, a PyTorch module path
(TorchScript-style node names) and a ``glob:``/``re:``/``op:`` selector matching that one place.

Each row runs a command once with the exact ONNX names and once per selector kind, in-process
as a user's argv, and checks the result is the same (the output graph, or the JSON document).
``test_every_flag_is_a_row_or_takes_no_name`` walks the parser, so a new flag of any command
is either given a row here or listed, with the reason, as taking no name."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsurgeon import cli
from onnxsurgeon.cli_parser import build_parser
from onnxsurgeon.select import NAME_MAP_KEY


def named_model() -> onnx.ModelProto:
    """x -> /stem/Mul(w) -> a:0 -> /act/Relu -> b -> {/head/Neg -> c -> /tail/Identity -> out,
    /side/LeakyRelu -> s}; TorchScript-style node names make 'stem', 'act', 'head', 'tail',
    'side' module paths; the name map sends fw.a, fw.b, fw.c, fw.x, fw.out, fw.s, fw.w to a:0,
    b, c, x, out, s, w."""
    f = TensorProto.FLOAT
    nodes = [
        helper.make_node("Mul", ["x", "w"], ["a:0"], name="/stem/Mul"),
        helper.make_node("Relu", ["a:0"], ["b"], name="/act/Relu"),
        helper.make_node("Neg", ["b"], ["c"], name="/head/Neg"),
        helper.make_node("Identity", ["c"], ["out"], name="/tail/Identity"),
        helper.make_node("LeakyRelu", ["b"], ["s"], name="/side/LeakyRelu", alpha=0.1),
    ]
    w = numpy_helper.from_array(np.linspace(-1, 1, 4, dtype=np.float32).reshape(1, 4), "w")
    graph = helper.make_graph(nodes, "named", [helper.make_tensor_value_info("x", f, [2, 4])],
                              [helper.make_tensor_value_info("out", f, [2, 4]),
                               helper.make_tensor_value_info("s", f, [2, 4])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    entry = model.metadata_props.add()
    entry.key, entry.value = NAME_MAP_KEY, json.dumps(
        {"fw.a": "a:0", "fw.b": "b", "fw.c": "c", "fw.x": "x", "fw.out": "out", "fw.s": "s",
         "fw.w": "w"})
    onnx.checker.check_model(model, full_check=True)
    return model


KINDS: dict[str, dict[str, str | None]] = {
    "name map": {"a": "fw.a", "b": "fw.b", "c": "fw.c", "x": "fw.x", "out": "fw.out",
                 "w": "fw.w", "s": "fw.s"},
    "TF :0": {"a": "a", "b": "b:0", "c": "c:0", "x": "x:0", "out": "out:0", "w": "w:0",
              "s": "s:0"},
    "node name": {"a": "/stem/Mul", "b": "/act/Relu", "c": "/head/Neg", "x": None,
                  "out": "/tail/Identity", "w": None, "s": "/side/LeakyRelu"},
    "module path": {"a": "stem", "b": "act", "c": "head", "x": None, "out": "tail", "w": None,
                    "s": "side"},
}
EXACT = {"a": "a:0", "b": "b", "c": "c", "x": "x", "out": "out", "w": "w", "s": "s",
         "node_b": "/act/Relu", "node_c": "/head/Neg", "node_s": "/side/LeakyRelu"}
for _names in KINDS.values():   # a node is named by any selector of the tensor it makes
    _names["node_b"], _names["node_c"], _names["node_s"] = _names["b"], _names["c"], _names["s"]
KINDS["exact tensor"] = {**EXACT, "node_b": "b", "node_c": "c", "node_s": "s"}
"""Node-taking flags (--consumers, bypass --node, rename --nodes) also take the exact tensor."""
KINDS["selector"] = {"a": "glob:a:?", "b": "re:b", "c": "op:Neg", "x": "glob:x",
                     "out": "op:Identity", "w": "re:w", "s": "glob:s",
                     "node_b": "op:Relu", "node_c": "glob:/head/*", "node_s": "op:LeakyRelu"}
"""glob:, re: and op: selectors, each matching exactly the one place (issue 28)."""

M, M2, OUT = "{model}", "{model}", "{output}"
ROWS: dict[str, list[str]] = {
    "inspect --around": ["inspect", M, "--around", "{b}", "--context", "1", "--json"],
    "extract --outputs": ["extract", M, "-o", OUT, "--outputs", "{c}"],
    "extract --inputs": ["extract", M, "-o", OUT, "--outputs", "out", "--inputs", "{b}"],
    "copy --outputs": ["copy", M, "-o", OUT, "--outputs", "{c}"],
    "copy --replace-input": ["copy", M, "-o", OUT, "--outputs", "c", "--replace-input", "{b}={a}"],
    "insert --at": ["insert", M, "-o", OUT, "--at", "{b}", "--op", "identity"],
    "reroute --from/--to": ["reroute", M, "-o", OUT, "--from", "{b}", "--to", "{a}"],
    "reroute --consumers": ["reroute", M, "-o", OUT, "--from", "b", "--to", "a:0", "--consumers",
                            "{node_c}"],
    "rename --map": ["rename", M, "-o", OUT, "--map", "{b}=renamed"],
    "rename --nodes --map": ["rename", M, "-o", OUT, "--nodes", "--map", "{node_b}=renamed_node"],
    "bypass --node": ["bypass", M, "-o", OUT, "--node", "{node_b}"],
    "precision --block": ["precision", M, "-o", OUT, "--to", "fp16", "--block", "{node_b}"],
    "merge --connect": ["merge", M, M2, "-o", OUT, "--connect", "{out}={x}", "--prefix", "2/"],
    "merge --outputs": ["merge", M, M2, "-o", OUT, "--connect", "out=x", "--prefix", "2/",
                        "--outputs", "{c}"],
    "verify --pair": ["verify", M, M2, "--pair", "{c}={c}", "--json"],
    "verify --range": ["verify", M, M2, "--range", "{x}=0,1", "--json"],
    "copy --stop": ["copy", M, "-o", OUT, "--outputs", "out", "--stop", "{b}"],
    "outputs --add": ["outputs", M, "-o", OUT, "--add", "{c}"],
    "outputs --remove": ["outputs", M, "-o", OUT, "--remove", "{out}"],
    "set --attr": ["set", M, "-o", OUT, "--attr", "{node_s}.alpha=0.5"],
    "set --weight": ["set", M, "-o", OUT, "--weight", "{w}={npy}"],
    "split --at": ["split", M, "-o", "{outdir}", "--at", "{b}"],
    "dims --input": ["dims", M, "-o", OUT, "--input", "{x}=3x4"],
    "match --select": ["match", M, "--select", "{b}", "--json"],
}
"""Every name-taking flag of every verb (convert's --inputs/--outputs name framework tensors of
the source, not ONNX ones; diff takes no names; --dim names a symbolic dimension)."""


def _run(capsys, tmp_path: Path, argv: list[str], names: dict[str, str | None], tag: str):
    model = tmp_path / "named.onnx"
    npy = tmp_path / "w.npy"
    if not model.exists():
        model.write_bytes(named_model().SerializeToString())
        np.save(npy, np.full((1, 4), 0.5, np.float32))
    out, outdir = tmp_path / f"{tag}.onnx", tmp_path / tag
    filled = [a.format(model=model, output=out, outdir=outdir, npy=npy, **names) for a in argv]
    code = cli.main(filled)
    captured = capsys.readouterr()
    assert code == 0, f"{' '.join(filled)}: {captured.err}"
    if "--json" in argv:
        data = json.loads(captured.out)
        data.pop("model", None)
        for site in data.get("sites", []) if argv[0] == "match" else []:
            site.pop("matched")  # the text that matched: the selector's own
        return data
    if outdir.is_dir():  # split: the stage models
        return [onnx.load(p).graph for p in sorted(outdir.glob("*.onnx"))]
    return onnx.load(out).graph


def _applies(row: str, kind: str) -> bool:
    """Whether a kind of name is a case of a row: the exact tensor names are the baseline (a row
    naming nodes still tries them), and a graph input or weight has no node name or module path."""
    argv = ROWS[row]
    used = {key for key in EXACT if "{" + key + "}" in " ".join(argv)}
    if kind == "exact tensor" and not used & {"node_b", "node_c", "node_s"}:
        return False
    return all(KINDS[kind][k] is not None for k in used)


@pytest.mark.parametrize("row, kind", [(r, k) for r in ROWS for k in KINDS if _applies(r, k)])
def test_every_name_flag_takes_every_selector(row, kind, tmp_path, capsys):
    argv = ROWS[row]
    if row not in _BASELINE:  # the exact names' result, once per row
        _BASELINE[row] = _run(capsys, tmp_path, argv, EXACT, "exact")
    assert _run(capsys, tmp_path, argv, KINDS[kind], "kind") == _BASELINE[row]


_BASELINE: dict[str, object] = {}


GENERIC = {"--output", "--check", "--timeout", "--memory-limit", "--html", "--context",
           "--help"}
"""Flags of many commands that take no tensor or node name."""
NO_NAME: dict[str, str] = {
    "inspect --grep": "a text filter over the listing, not a name",
    "inspect --limit": "a count", "inspect --by": "a grouping choice",
    "inspect --dim": "a symbolic dimension", "insert --op": "a block", "insert --graph": "a file",
    "insert --func": "a file", "insert --framework": "a choice", "insert --exporter": "a choice",
    "copy --weights": "a choice", "copy --prefix": "a prefix", "merge --prefix": "a prefix",
    "rename --regex": "a regular expression over every name (re.sub), not a selector",
    "precision --to": "a dtype", "precision --inputs": "a data file",
    "precision --budget": "tolerances", "bypass --input": "an input slot",
    "match --pattern": "a file", "match --framework": "a choice",
    "match --any-constant": "a constant of the pattern, not of the model",
    "match --pattern-input": "an input of the pattern function",
    "replace --pattern": "a file", "replace --replacement": "a file",
    "replace --framework": "a choice", "replace --any-constant": "a constant of the pattern",
    "replace --pattern-input": "an input of the pattern function",
    "replace --tolerance": "tolerances", "fold --max-bytes": "a size",
    "dims --batch": "a size", "opset --to": "an opset",
    "verify --data": "a data file", "verify --rtol": "a tolerance",
    "verify --atol": "a tolerance", "verify --seed": "a seed",
    "verify --dim": "a symbolic dimension", "verify --samples": "a count",
    "verify --save-inputs": "a file", "verify --ray": "an address", "verify --plot": "a file",
    "verify --threads": "a count", "verify --against-tf": "a source model",
    "verify --against-torch": "a factory", "split --stages": "a count", "split --by": "a choice",
    "split --dim": "a symbolic dimension", "demo --files": "a directory",
    "apply --jobs": "a count", "apply --ray": "an address",
}
"""Flags of one command that take no tensor or node name, and what they take instead. The
``--verify-*`` group is walked by tests/test_verify_everywhere.py (``--verify-range NAME=`` is
read as ``verify --range``, a row here); ``convert`` names framework tensors of its source and
``recipe`` takes files: their own sub-commands are not walked."""


def test_every_flag_is_a_row_or_takes_no_name():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    missing, stale = [], set(NO_NAME)
    for command, sp in sub.choices.items():
        for action in sp._actions:
            flags = set(action.option_strings)
            if not flags or action.nargs == 0 or flags & GENERIC or any(
                    f.startswith("--verify-") for f in flags):
                continue
            listed = [f"{command} {f}" for f in sorted(flags) if f"{command} {f}" in NO_NAME]
            stale.difference_update(listed)
            if listed or any(row[0] == command and flags & set(row) for row in ROWS.values()):
                continue
            missing.append(f"{command} {'/'.join(sorted(flags))}")
    assert not missing, f"flags neither in ROWS nor in NO_NAME: {missing}"
    assert not stale, f"NO_NAME lists flags the parser no longer has: {sorted(stale)}"


NOTHING = {key: "glob:nowhere*" for key in EXACT}
"""A selector matching nothing, for every placeholder."""


@pytest.mark.parametrize("row", list(ROWS))
def test_a_selector_matching_nothing_is_exit_2_with_one_line(row, tmp_path, capsys):
    model, npy = tmp_path / "named.onnx", tmp_path / "w.npy"
    model.write_bytes(named_model().SerializeToString())
    np.save(npy, np.full((1, 4), 0.5, np.float32))
    out = tmp_path / "out.onnx"
    argv = [a.format(model=model, output=out, outdir=tmp_path / "split", npy=npy, **NOTHING)
            for a in ROWS[row]]
    code = cli.main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and "'glob:nowhere*'" in err, err
    if row not in ("merge --outputs", "verify --range"):  # they say what they looked in
        assert "matches no" in err, err
    assert not out.exists()
