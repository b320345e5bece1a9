"""One rewrite at every match (issue 28): a selector (``glob:``, ``re:``, ``op:``) in a verb's
tensor or node argument makes the verb act at each match, in one rewrite with one record listing
every site; verbs that take one place refuse several matches in one line; a converted BERT
encoder (from a config) and a converted CNN count their sites independently of the selector."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsurgeon.errors import RewriteError, UsageError
from onnxsurgeon.record import InsertRecord, RewriteRecord, rewrites
from onnxsurgeon.schema import validate
from onnxsurgeon.surgery import insert
from tests.cli_helpers import cli_main

F = TensorProto.FLOAT
LAYERS = 3


def layered(n: int = LAYERS) -> onnx.ModelProto:
    """x -> n x {/layer.k/Mul (w_k = k+1) -> layer.k.pre -> Relu -> layer.k.output -> Dropout
    -> layer.k.drop}; the last Dropout's output is the graph output."""
    nodes, inits, prev = [], [], "x"
    for k in range(n):
        inits.append(numpy_helper.from_array(np.full((4,), k + 1, np.float32), f"w{k}"))
        nodes += [helper.make_node("Mul", [prev, f"w{k}"], [f"layer.{k}.pre"], name=f"/layer.{k}/Mul"),
                  helper.make_node("Relu", [f"layer.{k}.pre"], [f"layer.{k}.output"],
                                   name=f"/layer.{k}/Relu"),
                  helper.make_node("Dropout", [f"layer.{k}.output"], [f"layer.{k}.drop"],
                                   name=f"/layer.{k}/Dropout")]
        prev = f"layer.{k}.drop"
    graph = helper.make_graph(nodes, "layered", [helper.make_tensor_value_info("x", F, [2, 4])],
                              [helper.make_tensor_value_info(prev, F, [2, 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    return model


def _run(model: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})


X = np.linspace(-2, 2, 8, dtype=np.float32).reshape(2, 4)


def test_insert_at_every_match_is_one_rewrite_with_one_record():
    model = layered()
    result = insert(model, "glob:layer.?.output", op="scale", params={"factor": 2.0})
    assert [r.at for r in result.each()] == [f"layer.{k}.output" for k in range(LAYERS)]
    graph = model.graph
    for k in range(LAYERS):  # structure: each Dropout reads its own block's output
        drop = next(n for n in graph.node if n.name == f"/layer.{k}/Dropout")
        block = next(n for n in graph.node if list(n.output) == [drop.input[0]])
        assert block.op_type == "Mul" and block.input[0] == f"layer.{k}.output"
    want = X
    for k in range(LAYERS):  # numerics: relu(prev * (k+1)) * 2 per layer
        want = np.maximum(want * (k + 1), 0) * 2
    np.testing.assert_array_equal(_run(model, X)[0], want)
    (entry,) = rewrites(model)  # one record, listing every site
    record = RewriteRecord.from_json(entry)
    assert isinstance(record, InsertRecord) and entry["version"] == 2
    assert [s["at"] for s in entry["sites"]] == [r.at for r in result.each()]
    assert record == result.record() and record.each()[1].at == "layer.1.output"


def test_one_site_records_stay_version_1_and_bad_sites_are_refused():
    model = layered()
    single = insert(model, "layer.0.output", op="identity")
    data = single.record().to_json()
    assert "version" not in data and "sites" not in data
    assert RewriteRecord.from_json(data) == single.record()
    multi = insert(layered(), "op:Relu", op="identity").record().to_json()
    broken = {**multi, "sites": [{**multi["sites"][0], "rerouted": "x"}]}
    with pytest.raises(UsageError, match="site 0"):
        RewriteRecord.from_json(broken)


def test_multi_site_replays_to_the_same_bytes():
    made = layered()
    record = insert(made, "glob:layer.*.drop", op="scale", params={"factor": 0.5}).record()
    call = record.replay_call()
    again = layered()
    insert(again, call.args["at"], **call.options)
    assert again.SerializeToString() == made.SerializeToString()
    # the last site is a graph output: it kept its name, the unprocessed tensor moved
    assert made.graph.output[0].name == f"layer.{LAYERS - 1}.drop"
    assert record.all_renamed() == {f"layer.{LAYERS - 1}.drop":
                                    f"layer.{LAYERS - 1}.drop/pre_scale"}


def test_a_block_retyping_several_sites_is_refused_before_any_change():
    cast = helper.make_model(helper.make_graph(
        [helper.make_node("Cast", ["i"], ["o"], to=TensorProto.DOUBLE)], "cast",
        [helper.make_tensor_value_info("i", F, [2, 4])],
        [helper.make_tensor_value_info("o", TensorProto.DOUBLE, [2, 4])]),
        opset_imports=[helper.make_opsetid("", 17)])
    model = layered()
    before = model.SerializeToString()
    with pytest.raises(RewriteError, match="several sites"):
        insert(model, "op:Relu", graph=cast)
    assert model.SerializeToString() == before


@pytest.fixture()
def layered_file(tmp_path: Path) -> Path:
    path = tmp_path / "layered.onnx"
    path.write_bytes(layered().SerializeToString())
    return path


CASES = {
    "insert glob, verified": (["insert", "{m}", "-o", "{o}", "--at", "glob:layer.*.drop", "--op",
                               "scale:factor=2", "--verify", "--json"], 0, "sites", LAYERS),
    "bypass op:, verified": (["bypass", "{m}", "-o", "{o}", "--node", "op:Dropout", "--verify",
                              "--json"], 0, "removed", LAYERS),
    "extract re: outputs": (["extract", "{m}", "-o", "{o}", "--outputs", r"re:layer\.\d\.output",
                             "--json"], 0, "outputs", LAYERS),
    "reroute --consumers glob": (["reroute", "{m}", "-o", "{o}", "--from", "layer.0.drop", "--to",
                                  "layer.0.output", "--consumers", "glob:/layer.*/Mul", "--json"],
                                 0, "rerouted", 1),
    "copy --outputs glob": (["copy", "{m}", "-o", "{o}", "--outputs", "glob:layer.?.pre", "--json"],
                            0, "outputs", LAYERS),
    "merge --connect one match": (["merge", "{m}", "{m}", "-o", "{o}", "--connect",
                                   "glob:layer.2.d*=x", "--prefix", "2/", "--json"], 0, "inputs", 1),
    "merge --connect several": (["merge", "{m}", "{m}", "-o", "{o}", "--connect", "op:Relu=x",
                                 "--prefix", "2/"], 2, "matches 3 tensors ('layer.0.output'", 0),
    "rename re: groups": (["rename", "{m}", "-o", "{o}", "--map", r"re:layer\.(\d)\.pre=pre\1",
                           "--json"], 0, "renamed", LAYERS),
    "outputs --add every match": (["outputs", "{m}", "-o", "{o}", "--add", "glob:layer.?.pre",
                                   "--json"], 0, "added", LAYERS),
    "outputs --remove every output matched": (["outputs", "{m}", "-o", "{o}", "--add",
                                               "op:Relu", "--remove", "op:Dropout", "--json"],
                                              0, "removed", 1),
    "dims --input every input matched": (["dims", "{m}", "-o", "{o}", "--input", "glob:?=3x4",
                                          "--json"], 0, "shapes", 1),
    "zero matches": (["insert", "{m}", "-o", "{o}", "--at", "glob:encoder.*", "--op", "identity"],
                     2, "'glob:encoder.*' matches no tensor", 0),
    "rename several to one": (["rename", "{m}", "-o", "{o}", "--map", "glob:layer.?.pre=p"],
                              2, "cannot all be named 'p'", 0),
    "reroute from several": (["reroute", "{m}", "-o", "{o}", "--from", "op:Relu", "--to", "x"],
                             2, "matches 3 tensors", 0),
    "bad regex": (["bypass", "{m}", "-o", "{o}", "--node", "re:(Drop"], 2,
                  "not a valid regular expression", 0),
}


@pytest.mark.parametrize("case", list(CASES))
def test_cli_selectors(case, layered_file, tmp_path, capsys):
    argv, code, key, count = CASES[case]
    out = tmp_path / "out.onnx"
    got, stdout, stderr = cli_main(capsys, *[a.format(m=layered_file, o=out) for a in argv])
    assert got == code, stderr
    if code == 2:
        assert key in stderr and stderr.count("\n") == 1 and not out.exists()
        return
    data = json.loads(stdout)
    validate(argv[0], data)  # the --json contract, sites included
    assert len(data[key]) == count
    if "--verify" in argv:
        assert data["verify"]["verdict"] == "pass"
    assert len(rewrites(onnx.load(out))) == 1


def test_selectors_in_a_recipe(layered_file, tmp_path, capsys):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("onnxsurgeon: 1\nsteps:\n"
                      "  - insert: {at: 're:layer\\.\\d\\.output', op: scale, params: {factor: 3}}\n"
                      "  - bypass: {nodes: ['op:Dropout']}\n"
                      "  - verify: {}\n")
    out = tmp_path / "r.onnx"
    code, stdout, stderr = cli_main(capsys, "apply", recipe, layered_file, "-o", out, "--json")
    assert code == 0, stderr
    steps = json.loads(stdout)["steps"]
    assert len(steps[0]["result"]["sites"]) == LAYERS
    assert len(steps[1]["result"]["removed"]) == LAYERS
    model = onnx.load(out)
    assert not [n for n in model.graph.node if n.op_type == "Dropout"]
    want = X
    for k in range(LAYERS):
        want = np.maximum(want * (k + 1), 0) * 3
    np.testing.assert_array_equal(_run(model, X)[0], want)


def test_readme_selectors_block_runs(tmp_path):
    import subprocess
    import sys

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    (block,) = [b for b in re.findall(r"```bash\n(.*?)```", readme, flags=re.S)
                if "--at 'op:" in b]
    script = (f'onnxsurgeon() {{ "{sys.executable}" -m onnxsurgeon "$@"; }}\nset -e\n'
              + block.replace("/tmp/", f"{tmp_path}/"))
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parent.parent, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "inserted at 3 sites" in proc.stdout


# --------------------------------------------------------------------- converted models (slow)

@pytest.fixture(scope="session")
def bert(tmp_path_factory):
    """A BertModel from a small config (random weights) converted by the dynamo exporter, and
    its layer count read from the config."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from onnxsurgeon.converters import from_torch

    cfg = transformers.BertConfig(num_hidden_layers=3, hidden_size=32, num_attention_heads=2,
                                  intermediate_size=64, vocab_size=100, max_position_embeddings=32)
    torch.manual_seed(0)
    module = transformers.BertModel(cfg).eval()
    path = tmp_path_factory.mktemp("bert") / "bert.onnx"
    from_torch(module, (torch.randint(0, 100, (1, 8)),), path, exporter="dynamo",
               input_names=["input_ids"])
    return path, cfg.num_hidden_layers


@pytest.mark.slow
@pytest.mark.torch
def test_a_probe_after_every_bert_layer_output(bert, tmp_path, capsys):
    path, layers = bert
    out = tmp_path / "probed.onnx"
    code, stdout, stderr = cli_main(capsys, "insert", path, "-o", out, "--at",
                                    "glob:encoder.layer.?.output", "--op", "scale:factor=1.5",
                                    "--verify", "--json")
    assert code == 0, stderr
    data = json.loads(stdout)
    assert data["verify"]["verdict"] == "pass"
    assert len(data["sites"]) == layers  # one block per layer
    from onnxsurgeon.index import GraphIndex
    from onnxsurgeon.select import Selector

    orig = Selector(GraphIndex(onnx.load(path)))
    assert [s["at"] for s in data["sites"]] == [
        orig.resolve(f"encoder.layer.{k}.output") for k in range(layers)]
    # '*' crosses '.': the attention outputs match too (fnmatch, not path-aware)
    assert len(orig.find("glob:encoder.layer.*.output")) == 2 * layers


@pytest.fixture(scope="session")
def dropout_cnn(tmp_path_factory):
    """A torch CNN exported with its Dropout nodes kept (training mode, p=0: the identity), and
    its Dropout and ReLU module counts."""
    torch = pytest.importorskip("torch")
    nn = torch.nn
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Dropout(0.0),
                        nn.Conv2d(4, 4, 3, padding=1), nn.ReLU(), nn.Dropout(0.0),
                        nn.Flatten(), nn.Linear(4 * 8 * 8, 5), nn.Dropout(0.0)).train()
    path = tmp_path_factory.mktemp("cnn") / "cnn.onnx"
    torch.onnx.export(net, (torch.randn(1, 3, 8, 8),), str(path), dynamo=False,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                      input_names=["x"], output_names=["y"])
    count = {kind: sum(isinstance(m, getattr(nn, kind)) for m in net.modules())
             for kind in ("Dropout", "ReLU")}
    return path, count


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.parametrize("argv, key, kind", [
    (["bypass", "--node", "op:Dropout"], "removed", "Dropout"),
    (["insert", "--at", "op:Relu", "--op", "clip:min=0,max=6"], "sites", "ReLU"),
])
def test_every_dropout_and_relu_of_a_converted_cnn(dropout_cnn, argv, key, kind, tmp_path, capsys):
    path, count = dropout_cnn
    out = tmp_path / "out.onnx"
    code, stdout, stderr = cli_main(capsys, argv[0], path, "-o", out, *argv[1:], "--verify",
                                    "--json")
    assert code == 0, stderr
    data = json.loads(stdout)
    assert data["verify"]["verdict"] == "pass"
    assert len(data[key]) == count[kind] > 1


def test_a_wrong_site_fails_verify_and_is_named(layered_file, tmp_path, capsys):
    out = tmp_path / "out.onnx"
    code, _, stderr = cli_main(capsys, "insert", layered_file, "-o", out, "--at", "op:Relu",
                               "--op", "scale:factor=2")
    assert code == 0, stderr
    model = onnx.load(out)
    block = next(n for n in model.graph.node if list(n.output) == ["layer.1.output/scale"])
    factor = next(t for t in model.graph.initializer if t.name in block.input)
    factor.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(factor) * 1.5, factor.name))
    bad = tmp_path / "bad.onnx"
    onnx.save(model, bad)
    code, stdout, _ = cli_main(capsys, "verify", layered_file, bad, "--rewrite-log", "--json")
    assert code == 1
    failed = [p for p in json.loads(stdout)["pairs"] if p["verdict"] == "fail"]
    assert failed and failed[0]["check"] == "block"
    assert "layer.1.output" in json.dumps(failed[0])


@pytest.mark.slow
@pytest.mark.torch
def test_a_torch_function_at_every_match(layered_file, tmp_path, capsys):
    pytest.importorskip("torch")
    func = tmp_path / "f.py"
    func.write_text("def double(x):\n    return x * 2.0\n")
    out = tmp_path / "out.onnx"
    code, stdout, stderr = cli_main(capsys, "insert", layered_file, "-o", out, "--at", "op:Relu",
                                    "--func", f"{func}:double", "--framework", "torch", "--verify",
                                    "--json")
    assert code == 0, stderr
    data = json.loads(stdout)
    assert len(data["sites"]) == LAYERS and data["verify"]["verdict"] == "pass"
    want = X
    for k in range(LAYERS):
        want = np.maximum(want * (k + 1), 0) * 2
    np.testing.assert_allclose(_run(onnx.load(out), X)[0], want, rtol=1e-6)


def test_sites_at_one_position_keep_their_order_and_a_long_chain_is_linear():
    model = layered()
    result = insert(model, "glob:w?", op="scale", params={"factor": -1.0})  # three initializers
    assert [n.input[0] for n in model.graph.node[:LAYERS]] == ["w0", "w1", "w2"]
    assert [r.at for r in result.each()] == ["w0", "w1", "w2"]
    onnx.checker.check_model(model, full_check=True)
    want = X
    for k in range(LAYERS):
        want = np.maximum(want * -(k + 1), 0)
    np.testing.assert_array_equal(_run(model, X)[0], want)

    import time

    n = 15_000  # 5,000 sites: one rebuild of the node list, one block built per type
    nodes = [helper.make_node("Dropout" if i % 3 == 0 else "Relu", [f"t{i}"], [f"t{i + 1}"])
             for i in range(n)]
    chain = helper.make_model(helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("t0", F, [1])],
        [helper.make_tensor_value_info(f"t{n}", F, [1])]), opset_imports=[helper.make_opsetid("", 17)])
    start = time.perf_counter()
    assert len(insert(chain, "op:Dropout", op="identity").each()) == n // 3
    assert time.perf_counter() - start < 12  # quadratic: a minute
    assert len(chain.graph.node) == n + n // 3
