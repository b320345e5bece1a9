"""Every CLI flag that takes a tensor or node name accepts every selector (issue 10, point 7):
the exact ONNX name, a framework name from the converters' name map, a TensorFlow-style name
with or without ``:0``, a node name and a PyTorch module path (TorchScript-style node names).

Each row runs a command once with the exact ONNX names and once per selector kind, in-process
as a user's argv, and checks the result is the same (the output graph, or the JSON document)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsurgeon import cli
from onnxsurgeon.select import NAME_MAP_KEY


def named_model() -> onnx.ModelProto:
    """x -> /stem/Mul -> a:0 -> /act/Relu -> b -> {/head/Neg -> c -> /tail/Identity -> out,
    /side/Abs -> s}; TorchScript-style node names make 'stem', 'act', 'head', 'tail' module paths;
    the name map sends fw.a, fw.b, fw.c, fw.x, fw.out to a:0, b, c, x, out."""
    f = TensorProto.FLOAT
    nodes = [
        helper.make_node("Mul", ["x", "w"], ["a:0"], name="/stem/Mul"),
        helper.make_node("Relu", ["a:0"], ["b"], name="/act/Relu"),
        helper.make_node("Neg", ["b"], ["c"], name="/head/Neg"),
        helper.make_node("Identity", ["c"], ["out"], name="/tail/Identity"),
        helper.make_node("Abs", ["b"], ["s"], name="/side/Abs"),
    ]
    w = numpy_helper.from_array(np.linspace(-1, 1, 4, dtype=np.float32).reshape(1, 4), "w")
    graph = helper.make_graph(nodes, "named", [helper.make_tensor_value_info("x", f, [2, 4])],
                              [helper.make_tensor_value_info("out", f, [2, 4]),
                               helper.make_tensor_value_info("s", f, [2, 4])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    entry = model.metadata_props.add()
    entry.key, entry.value = NAME_MAP_KEY, json.dumps(
        {"fw.a": "a:0", "fw.b": "b", "fw.c": "c", "fw.x": "x", "fw.out": "out"})
    onnx.checker.check_model(model, full_check=True)
    return model


KINDS: dict[str, dict[str, str | None]] = {
    "name map": {"a": "fw.a", "b": "fw.b", "c": "fw.c", "x": "fw.x", "out": "fw.out"},
    "TF :0": {"a": "a", "b": "b:0", "c": "c:0", "x": "x:0", "out": "out:0"},
    "node name": {"a": "/stem/Mul", "b": "/act/Relu", "c": "/head/Neg", "x": None,
                  "out": "/tail/Identity"},
    "module path": {"a": "stem", "b": "act", "c": "head", "x": None, "out": "tail"},
}
EXACT = {"a": "a:0", "b": "b", "c": "c", "x": "x", "out": "out",
         "node_b": "/act/Relu", "node_c": "/head/Neg"}
for _names in KINDS.values():   # a node is named by any selector of the tensor it makes
    _names["node_b"], _names["node_c"] = _names["b"], _names["c"]
KINDS["exact tensor"] = {**EXACT, "node_b": "b", "node_c": "c"}
"""Node-taking flags (--consumers, bypass --node, rename --nodes) also take the exact tensor."""

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
}
"""Every name-taking flag of every verb (convert's --inputs/--outputs name framework tensors of
the source, not ONNX ones; diff takes no names; --dim names a symbolic dimension)."""


def _run(capsys, tmp_path: Path, argv: list[str], names: dict[str, str | None], tag: str):
    model = tmp_path / "named.onnx"
    if not model.exists():
        model.write_bytes(named_model().SerializeToString())
    out = tmp_path / f"{tag}.onnx"
    filled = [a.format(model=model, output=out, **names) for a in argv]
    code = cli.main(filled)
    captured = capsys.readouterr()
    assert code == 0, f"{' '.join(filled)}: {captured.err}"
    if "--json" in argv:
        data = json.loads(captured.out)
        data.pop("model", None)
        return data
    return onnx.load(out).graph


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("row", list(ROWS))
def test_every_name_flag_takes_every_selector(row, kind, tmp_path, capsys):
    argv = ROWS[row]
    names = KINDS[kind]
    used = {key for key in EXACT if "{" + key + "}" in " ".join(argv)}
    if kind == "exact tensor" and not used & {"node_b", "node_c"}:
        pytest.skip("the exact names are the baseline")
    if any(names[k] is None for k in used):
        pytest.skip(f"a graph input has no {kind}")
    assert _run(capsys, tmp_path, argv, names, "kind") == _run(capsys, tmp_path, argv, EXACT, "exact")
