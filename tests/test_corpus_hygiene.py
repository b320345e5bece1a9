"""The newer verbs over real models, in-process (``cli.main``), judged by onnxruntime.

cleanup, toposort, outputs, set, fold, dims, opset, precision, split, match, replace and
``inspect --profile`` run on the non-torch corpus model and the committed models/*.onnx (Keras,
TF1, TF2, a PyTorch export, a BERT export), with the tensors picked by the gauntlet's plan. No
call may exit 3; a refusal is one line naming the problem and the fix; each written model passes
onnx.checker and computes what the verb promises; each ``--json`` document is its schema's; the
input file is never modified. Light models shipped with onnx (squeezenet, IR 3: its weights are
listed as graph inputs) run in a slow test. Regression cases for what this sweep found (dims,
fold, opset) are hand-built onnx.helper graphs.
"""

from __future__ import annotations

import collections
import json
from functools import cache
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsurgeon import cli
from onnxsurgeon.schema import validate
from tests import corpus_models as cm
from tests.test_gauntlet import Plan, checked, exact, make_plan, run

ROOT = Path(__file__).resolve().parent.parent
LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
UNARY = ("Relu", "Sigmoid", "Tanh", "Erf", "Sqrt", "Exp")
COMMITTED = ("seed_cnn", "keras_cnn", "tf1_seed", "torch_cnn", "tiny_bert")
# dims --batch 3: what each model allows (a refusal names the node and the fix)
DIMS_REFUSED = {"detection_nms_if": "pick/Squeeze", "tiny_bert": "run 'fold' first"}


@cache
def _plan(name: str, folder: Path) -> Plan:
    if name in cm.REGISTRY:
        return make_plan(cm.build(name, folder))
    folder.mkdir(parents=True, exist_ok=True)  # a copy: probes are written beside the model
    (folder / f"{name}.onnx").write_bytes((ROOT / "models" / f"{name}.onnx").read_bytes())
    return make_plan(folder / f"{name}.onnx")


def call(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert code != 3, f"internal error: {argv}\n{err[-2000:]}"
    return code, out, err


def done(capsys: pytest.CaptureFixture[str], command: str, *argv: object) -> dict:
    """A ``--json`` call that must succeed; its document, checked against the command's schema."""
    code, out, err = call(capsys, command, *argv, "--json")
    assert code == 0, f"{command} {argv}: exit {code}\n{err[-2000:]}"
    doc = json.loads(out)
    validate(command, doc)
    return doc


def refused(code: int, err: str, *words: str) -> None:
    lines = [x for x in err.splitlines() if x.startswith("onnxsurgeon: error:")]
    assert code == 2 and len(lines) == 1 and "; " in lines[0], err
    for w in words:
        assert w in lines[0], lines[0]


def first_attribute(model: onnx.ModelProto) -> str | None:
    """``NODE.KEY=VALUE`` of the first named node's int attribute, at its own value."""
    for node in model.graph.node:
        for a in node.attribute:
            if node.name and a.type == onnx.AttributeProto.INT and "." not in a.name:
                return f"{node.name}.{a.name}={a.i}"
    return None


def same_pattern(path: Path, op: str, rank: int, opset: int) -> Path:
    dims = ",".join(f"d{k}" for k in range(rank))
    path.write_text(f'<ir_version: 8, opset_import: ["" : {opset}]>\n'
                    f"g (float[{dims}] x) => (float[{dims}] y) {{ y = {op}(x) }}\n")
    return path


def sweep(plan: Plan, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = plan.path
    before = src.read_bytes()
    model = onnx.load(str(src))
    graph = model.graph
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    mid = next(t for t in plan.candidates[len(plan.candidates) // 2:] + plan.candidates
               if t not in plan.outputs)
    want = run(src, plan.feeds, [mid])

    def same_outputs(path: Path, what: str) -> None:
        checked(path)
        got = run(path, plan.feeds)
        for o in plan.outputs:
            exact(got[o], want[o], f"{what}: output {o}")

    def out(tag: str) -> Path:
        return tmp_path / f"{tag}.onnx"

    done(capsys, "cleanup", src, "-o", out("cleanup"), "--verify")
    same_outputs(out("cleanup"), "cleanup")
    done(capsys, "toposort", src, "-o", out("toposort"), "--verify")
    same_outputs(out("toposort"), "toposort")
    done(capsys, "toposort", src, "-o", out("topo2"))
    assert out("toposort").read_bytes() == out("topo2").read_bytes(), "toposort: not deterministic"
    done(capsys, "outputs", src, "-o", out("outputs"), "--add", mid, "--verify")
    got = run(checked(out("outputs")), plan.feeds)
    exact(got[mid], want[mid], f"outputs --add {mid}")
    attr = first_attribute(model)
    if attr:
        done(capsys, "set", src, "-o", out("set"), "--attr", attr, "--verify")
        same_outputs(out("set"), f"set {attr}")
    folded = done(capsys, "fold", src, "-o", out("fold"), "--verify")
    checked(out("fold"))
    got = run(out("fold"), plan.feeds)
    for o in plan.outputs:
        np.testing.assert_allclose(got[o], want[o], rtol=1e-5, atol=1e-6, err_msg=f"fold: {o}")
    assert len(onnx.load(str(out("fold"))).graph.node) <= len(graph.node), folded
    done(capsys, "opset", src, "-o", out("opset"), "--to", str(opset + 1), "--verify")
    assert max(o.version for o in checked(out("opset")).opset_import if o.domain in ("", "ai.onnx")) == opset + 1
    # dims --batch 3 where dim 0 of an input is the batch: the model runs at batch 3, or a refusal
    code, _, err = call(capsys, "dims", src, "-o", out("dims"), "--batch", "3", "--verify")
    name = src.stem
    if name in DIMS_REFUSED:
        refused(code, err, DIMS_REFUSED[name])
        assert not out("dims").exists()
    else:
        assert code == 0, err[-2000:]
        three = {k: np.concatenate([v] * 3) if v.shape[:1] in ((1,), (2,)) else v
                 for k, v in plan.feeds.items()}
        three = {k: v[:3] if v.ndim else v for k, v in three.items()}
        for o, value in run(checked(out("dims")), three).items():
            assert value.shape[0] == 3, f"dims: output {o} has shape {value.shape}"
    # precision: float16 inside, float32 at the edges, within the precision budget
    done(capsys, "precision", src, "-o", out("fp16"), "--to", "fp16", "--keep-io-types", "--verify")
    low = checked(out("fp16"))
    assert any(t.data_type == TensorProto.FLOAT16 for t in low.graph.initializer)
    assert [o.type.tensor_type.elem_type for o in low.graph.output] == \
        [o.type.tensor_type.elem_type for o in graph.output]
    syms = sorted({d.dim_param for i in graph.input for d in i.type.tensor_type.shape.dim if d.dim_param})
    dim = ["--dim", *[f"{d}=2" for d in syms]] if syms else []
    manifest = done(capsys, "split", src, "-o", tmp_path / "stages", "--stages", "2", "--verify", *dim)
    assert len(manifest["stages"]) == 2 and sorted(p.name for p in (tmp_path / "stages").glob("*.onnx")) == \
        ["stage_0.onnx", "stage_1.onnx"], manifest
    ops = collections.Counter(n.op_type for n in graph.node)
    common, count = ops.most_common(1)[0]
    assert done(capsys, "match", src, "--select", f"op:{common}")["matches"] == count
    unary = next((op for op in UNARY if op in ops and all(
        plan.rank.get(n.input[0]) == plan.rank.get(next(m for m in graph.node if m.op_type == op).input[0])
        and plan.dtype.get(n.input[0]) == TensorProto.FLOAT for n in graph.node if n.op_type == op)), None)
    if unary:
        rank = plan.rank[next(n for n in graph.node if n.op_type == unary).input[0]]
        pattern = same_pattern(tmp_path / "p.onnxtxt", unary, rank, opset)
        doc = done(capsys, "replace", src, "-o", out("replace"), "--pattern", pattern,
                   "--replacement", pattern, "--verify")
        assert doc["matches"] == ops[unary], doc["matches"]
        same_outputs(out("replace"), f"replace {unary} -> {unary}")
    profile = done(capsys, "inspect", src, "--profile", *dim)["profile"]
    assert profile["total"]["macs"] > 0 and profile["rows"], profile["total"]
    assert src.read_bytes() == before


@pytest.mark.parametrize("name", ["detection_nms_if", *COMMITTED])
def test_newer_verbs_on_the_corpus(name, tmp_path_factory, tmp_path, capsys):
    sweep(_plan(name, tmp_path_factory.getbasetemp() / "hygiene_corpus"), tmp_path, capsys)


# ------------------------------------------------------------------------------ dims regressions
def _ir3_reshape_model() -> onnx.ModelProto:
    """x[1,3,4] -> Reshape(., [1, 12]) -> Relu -> y[1,12], IR 3: the shape constant and the
    weight are initializers listed as graph inputs (weights then, as in onnx's light models)."""
    shape = numpy_helper.from_array(np.array([1, 12], np.int64), "shape")
    w = numpy_helper.from_array(np.full((12,), 0.5, np.float32), "w")
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["flat"], name="flatten"),
             helper.make_node("Add", ["flat", "w"], ["z"], name="add"),
             helper.make_node("Relu", ["z"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "ir3", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4]),
                                             helper.make_tensor_value_info("shape", TensorProto.INT64, [2]),
                                             helper.make_tensor_value_info("w", TensorProto.FLOAT, [12])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 12])], [shape, w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    model.ir_version = 3
    return model


def _squeeze_batch_model() -> onnx.ModelProto:
    """x[1,4] -> Squeeze(axis 0) -> Relu -> y[4]: only batch 1 fits."""
    nodes = [helper.make_node("Squeeze", ["x", "axes"], ["s"], name="drop/Squeeze"),
             helper.make_node("Relu", ["s"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "sq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
                              [numpy_helper.from_array(np.array([0], np.int64), "axes")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_dims_follows_a_batch_hard_coded_in_an_ir3_weight_listed_as_input(tmp_path, capsys):
    src, dst = tmp_path / "ir3.onnx", tmp_path / "ir3_b3.onnx"
    onnx.save(_ir3_reshape_model(), str(src))
    doc = done(capsys, "dims", src, "-o", dst, "--batch", "3")
    assert "flatten" in doc["rewritten"], doc
    x = np.random.default_rng(0).standard_normal((3, 3, 4)).astype(np.float32)
    got = run(checked(dst), {"x": x})["y"]
    exact(got, np.maximum(x.reshape(3, 12) + np.float32(0.5), 0), "dims --batch 3 on IR 3")


@pytest.mark.parametrize("batch", ["3", "dynamic"])
def test_dims_refuses_a_batch_a_node_does_not_accept(tmp_path, capsys, batch):
    """A Squeeze of the batch axis runs only at batch 1: a static 3 fails onnx's inference, a
    dynamic batch passes it (a symbolic dim squeezes) and was written, failing at run time."""
    src, dst = tmp_path / "sq.onnx", tmp_path / "sq_b3.onnx"
    onnx.save(_squeeze_batch_model(), str(src))
    for extra in ((), ("--verify",)):
        code, _, err = call(capsys, "dims", src, "-o", dst, "--batch", batch, *extra)
        refused(code, err, "drop/Squeeze", "Squeeze")
        assert not dst.exists()
    assert call(capsys, "dims", src, "-o", dst, "--batch", "1")[0] == 0  # the batch it has


def _ir3_tile_model() -> onnx.ModelProto:
    """onnx's pytorch-operator/test_operator_repeat, rebuilt: IR 3, opset 9,
    x[1,2] -> Tile(., Constant int64 [2, 3]) -> y[2,6]."""
    repeats = numpy_helper.from_array(np.array([2, 3], np.int64), "repeats_value")
    nodes = [helper.make_node("Constant", [], ["repeats"], value=repeats),
             helper.make_node("Tile", ["x", "repeats"], ["y"])]
    graph = helper.make_graph(nodes, "tile", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    model.ir_version = 3
    return model


def test_fold_and_opset_on_an_ir3_constant(tmp_path, capsys):
    """fold lists what it folds as graph inputs (IR 3 wants every initializer there); opset 8
    has no int64 Constant: a refusal, not the save's internal error."""
    src = tmp_path / "tile.onnx"
    onnx.save(_ir3_tile_model(), str(src))
    doc = done(capsys, "fold", src, "-o", tmp_path / "folded.onnx", "--verify")
    assert doc["folded"] == ["repeats"], doc
    folded = checked(tmp_path / "folded.onnx")
    assert [n.op_type for n in folded.graph.node] == ["Tile"]
    x = np.arange(2, dtype=np.float32).reshape(1, 2)
    exact(run(folded, {"x": x})["y"], np.tile(x, (2, 3)), "fold on IR 3")
    code, _, err = call(capsys, "opset", src, "-o", tmp_path / "o8.onnx", "--to", "8")
    refused(code, err, "Constant", "int64")
    assert not (tmp_path / "o8.onnx").exists()


def test_precision_bf16_below_opset_13_is_refused(tmp_path, capsys):
    """Cast takes bfloat16 from opset 13 (onnx's light models and pytorch-converted tests are
    opset 6-9): a refusal naming the fix, not the save's internal error; fp16 still converts."""
    src = tmp_path / "ir3.onnx"
    onnx.save(_ir3_reshape_model(), str(src))
    code, _, err = call(capsys, "precision", src, "-o", tmp_path / "bf.onnx", "--to", "bf16")
    refused(code, err, "opset 13", "--to fp16")
    assert not (tmp_path / "bf.onnx").exists()
    done(capsys, "precision", src, "-o", tmp_path / "fp.onnx", "--to", "fp16", "--keep-io-types")
    checked(tmp_path / "fp.onnx")


def _ir3_conv_model() -> onnx.ModelProto:
    """x[1,2,4,4] -> Conv(w, b) -> Relu -> y, opset 13, IR 3: the weights are initializers
    listed as graph inputs (onnx's light squeezenet after ``opset --to 13``)."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((3, 2, 1, 1)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal((3,)).astype(np.float32), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv"),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    f = TensorProto.FLOAT
    graph = helper.make_graph(nodes, "ir3conv", [helper.make_tensor_value_info("x", f, [1, 2, 4, 4]),
                                                 helper.make_tensor_value_info("w", f, [3, 2, 1, 1]),
                                                 helper.make_tensor_value_info("b", f, [3])],
                              [helper.make_tensor_value_info("y", f, [1, 3, 4, 4])], [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 3
    return model


@pytest.mark.parametrize("to", ["bf16", "fp16"])
def test_precision_of_weights_listed_as_graph_inputs(to, tmp_path, capsys):
    """A weight listed as a graph input is that input's default: without --keep-io-types both
    take the low type together (the initializer stayed float32 while its input was declared
    low: onnx.checker's 'Inferred elem type differs', exit 3 on light squeezenet)."""
    src = tmp_path / "ir3conv.onnx"
    onnx.save(_ir3_conv_model(), str(src))
    dst = tmp_path / f"{to}.onnx"
    done(capsys, "precision", src, "-o", dst, "--to", to)
    low = checked(dst)
    inits = {t.name: t.data_type for t in low.graph.initializer}
    for vi in low.graph.input:
        if vi.name in inits:
            assert vi.type.tensor_type.elem_type == inits[vi.name], (vi.name, inits[vi.name])
    want = TensorProto.FLOAT16 if to == "fp16" else TensorProto.BFLOAT16
    assert {inits["w"], inits["b"]} == {want}
    if to == "fp16":  # numpy feeds float16, not bfloat16
        x = np.random.default_rng(1).standard_normal((1, 2, 4, 4)).astype(np.float32)
        ref = run(src, {"x": x})["y"]
        got = run(dst, {"x": x.astype(np.float16)})["y"]
        np.testing.assert_allclose(got.astype(np.float32), ref, rtol=1e-2, atol=1e-2)


@pytest.mark.slow
def test_newer_verbs_on_light_squeezenet(tmp_path, capsys):
    """onnx's light squeezenet: IR 3, opset 9, weights made by ConstantOfShape (so the outputs
    are constant: --verify's data cannot tell, the numeric checks here can)."""
    src = LIGHT / "light_squeezenet.onnx"
    before = src.read_bytes()
    plan = make_plan(src)
    want = run(src, plan.feeds)
    for command, *argv in (("cleanup",), ("toposort",), ("fold",), ("opset", "--to", "10")):
        dst = tmp_path / f"{command}.onnx"
        done(capsys, command, src, "-o", dst, *argv)
        got = run(checked(dst), plan.feeds)
        for o in plan.outputs:
            np.testing.assert_allclose(got[o], want[o], rtol=1e-5, atol=1e-6, err_msg=f"{command}: {o}")
    done(capsys, "dims", src, "-o", tmp_path / "b3.onnx", "--batch", "3")
    x = {k: np.concatenate([v] * 3) for k, v in plan.feeds.items()}
    assert all(v.shape[0] == 3 for v in run(checked(tmp_path / "b3.onnx"), x).values())
    manifest = done(capsys, "split", src, "-o", tmp_path / "stages", "--stages", "2", "--verify")
    assert len(manifest["stages"]) == 2
    assert done(capsys, "match", src, "--select", "op:Conv")["matches"] == 26
    assert done(capsys, "inspect", src, "--profile")["profile"]["total"]["macs"] > 0
    assert src.read_bytes() == before
