"""``dims`` (issue 30): input shapes or the batch set and propagated to outputs and value_info;
Reshape/Expand constants that hard-code the old batch follow the input (0 / 1 where provably the
same), the rest refused naming the node; --verify runs two batch sizes against the original
sample by sample; the record replays."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsurgeon import load
from onnxsurgeon.record import DimsRecord
from onnxsurgeon.surgery import dims
from onnxsurgeon.surgery.dims import parse_shape
from onnxsurgeon.types import shape_of
from onnxsurgeon.verify.log import replay

from .cli_helpers import cli_main


def refused_in_process(capsys, args, needle, *, src, out):
    """``cli.main(args)`` exits 2 with one stderr line containing ``needle``; nothing written,
    the input unchanged (the in-process twin of ``assert_refused``)."""
    before = src.read_bytes()
    code, _, err = cli_main(capsys, *args)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and needle in lines[0], err
    assert not out.exists() and src.read_bytes() == before


def _i64(name: str, values: list[int]) -> TensorProto:
    return numpy_helper.from_array(np.array(values, np.int64), name)


def hard_coded(*, transpose: bool = False) -> onnx.ModelProto:
    """x[1,4,4] -> Relu -> Reshape([1,4,4]) -> Reshape([1,16]) -> Expand([1,16]) -> y, with a
    value_info entry of the old batch; ``transpose`` puts the batch on axis 1 before the
    second Reshape (unprovable)."""
    f = TensorProto.FLOAT
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Reshape", ["r", "s1"], ["t"], name="reshape1")]
    if transpose:
        nodes.append(helper.make_node("Transpose", ["t"], ["tt"], name="tr", perm=[1, 0, 2]))
        nodes.append(helper.make_node("Reshape", ["tt", "s2"], ["u"], name="reshape2"))
    else:
        nodes.append(helper.make_node("Reshape", ["t", "s2"], ["u"], name="reshape2"))
    nodes.append(helper.make_node("Expand", ["u", "s2"], ["y"], name="expand"))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", f, [1, 4, 4])],
        [helper.make_tensor_value_info("y", f, [1, 16])], [_i64("s1", [1, 4, 4]), _i64("s2", [1, 16])],
        value_info=[helper.make_tensor_value_info("r", f, [1, 4, 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("text, dims_", [
    ("1x3x224x224", [1, 3, 224, 224]), ("batch x3x224x224", ["batch", 3, 224, 224]),
    ("batch,3,224,224", ["batch", 3, 224, 224]), ("Nx3", ["N", 3]), ("?x3", [None, 3]),
])
def test_shapes_read_as_written(text, dims_):
    assert parse_shape(text) == dims_


@pytest.mark.parametrize("batch, first", [("dynamic", "batch"), ("4", 4)])
def test_dims_makes_hard_coded_reshapes_follow_the_batch_and_verify_proves_it(
        tmp_path, capsys, batch, first):
    src = tmp_path / "m.onnx"
    onnx.save(hard_coded(), src)
    out = tmp_path / "o.onnx"
    code, stdout, err = cli_main(capsys, "dims", src, "-o", out, "--batch", batch, "--verify",
                                 "--json")
    assert code == 0, stdout + err
    doc = json.loads(stdout)
    assert doc["verify"]["verdict"] == "pass"
    checks = {p["check"] for p in doc["verify"]["pairs"]}
    assert checks == ({"dims:batch 1", "dims:batch 3"} if first == "batch" else {"dims:batch 4"})
    assert set(doc["rewritten"]) == {"reshape1", "reshape2"}  # Expand by 1 keeps the batch
    m = onnx.load(out)
    g = m.graph
    assert shape_of(g.input[0]) == [first, 4, 4] and shape_of(g.output[0]) == [first, 16]
    assert {vi.name: shape_of(vi) for vi in g.value_info}["r"] == [first, 4, 4]
    consts = {t.name: numpy_helper.to_array(t).tolist() for t in g.initializer}
    reads = {n.name: consts.get(n.input[1]) for n in g.node if len(n.input) > 1}
    assert reads == {"reshape1": [0, 4, 4], "reshape2": [0, 16], "expand": [1, 16]}


def test_dims_refuses_a_reshape_whose_input_does_not_carry_the_batch(tmp_path, capsys):
    src = tmp_path / "m.onnx"
    onnx.save(hard_coded(transpose=True), src)
    out = tmp_path / "o.onnx"
    refused_in_process(capsys, ["dims", src, "-o", out, "--batch", "dynamic"],
                       "node 'reshape2' (Reshape) reads a constant whose entry 1 is the old batch 1; "
                       "cannot make it follow the input: the batch would not lead entry 1",
                       src=src, out=out)


@pytest.mark.parametrize("args, needle", [
    ([], "nothing to change"),
    (["--input", "X=2x4x4"], "did you mean 'x'"),
    (["--input", "x=2x4"], "has rank 3"),
    (["--input", "x=2*4*4"], "does not read"),
    (["--batch", "0"], "not a size"),
])
def test_dims_bad_input_is_one_line_exit_2(tmp_path, capsys, args, needle):
    src = tmp_path / "m.onnx"
    onnx.save(hard_coded(), src)
    out = tmp_path / "o.onnx"
    refused_in_process(capsys, ["dims", src, "-o", out, *args], needle, src=src, out=out)


def test_the_dims_record_replays(tmp_path):
    src = tmp_path / "m.onnx"
    onnx.save(hard_coded(), src)
    m = load(src)
    result = dims(m, inputs={"x": "Nx4x4"})
    again = load(src)
    replay(again, DimsRecord.from_json(result.record().to_json()))
    assert again.proto.graph == m.proto.graph


@pytest.mark.slow
@pytest.mark.torch
def test_dims_on_a_torch_export_with_a_constant_reshape(torch_shape_export, tmp_path, capsys):
    folded = tmp_path / "folded.onnx"
    assert cli_main(capsys, "fold", torch_shape_export, "-o", folded)[0] == 0
    out = tmp_path / "dyn.onnx"
    code, stdout, err = cli_main(capsys, "dims", folded, "-o", out, "--batch", "dynamic",
                                 "--verify", "--json")
    assert code == 0, stdout + err
    doc = json.loads(stdout)
    assert doc["verify"]["verdict"] == "pass" and len(doc["rewritten"]) == 2


@pytest.mark.slow
@pytest.mark.tf
def test_dims_on_a_keras_model_with_a_hard_coded_batch(keras_fixed_batch, tmp_path, capsys):
    out = tmp_path / "dyn.onnx"
    code, stdout, err = cli_main(capsys, "dims", keras_fixed_batch, "-o", out, "--batch",
                                 "dynamic", "--verify", "--json")
    assert code == 0, stdout + err
    doc = json.loads(stdout)
    assert doc["verify"]["verdict"] == "pass" and doc["rewritten"], doc["rewritten"]
    assert shape_of(onnx.load(out).graph.output[0])[0] == "batch"


def batch_two(case: str) -> onnx.ModelProto:
    """Hand-built graphs at batch 2 whose shape constants hard-code it (``x[2,4,8]``, or
    ``x[2,3,8]`` joined to a constant row on axis 1): a merge then the split undoing it, a merge
    behind a leading 1, a merge next to a -1 (the Shape route), and a Tile / ConstantOfShape /
    Expand making a batch of constant rows for a Concat; ``tile_alone``: a Tile meeting
    nothing."""
    f = TensorProto.FLOAT
    row = numpy_helper.from_array(np.linspace(-1, 1, 8, dtype=np.float32).reshape(1, 1, 8), "row")
    x_shape, y_shape = [2, 4, 8], [2, 4, 8]
    inits = [row]
    if case == "merge_split":
        inits += [_i64("s1", [8, 8]), _i64("s2", [2, 4, 8])]
        nodes = [helper.make_node("Reshape", ["x", "s1"], ["m"], name="merge"),
                 helper.make_node("Tanh", ["m"], ["t"], name="tanh"),
                 helper.make_node("Reshape", ["t", "s2"], ["y"], name="split")]
    elif case == "merge_lead1":
        x_shape, y_shape = [2, 8], [1, 16]
        inits += [_i64("s1", [1, 16])]
        nodes = [helper.make_node("Reshape", ["x", "s1"], ["y"], name="merge")]
    elif case in ("bias_rows", "bias_mixed"):  # Add(x, a constant at the old batch)
        bias = np.tile(np.linspace(0, 1, 32, dtype=np.float32).reshape(1, 4, 8), (2, 1, 1))
        if case == "bias_mixed":
            bias[1] += 1
        inits += [numpy_helper.from_array(bias, "bias")]
        nodes = [helper.make_node("Add", ["x", "bias"], ["y"], name="add_bias")]
    elif case == "shape_route":
        y_shape = [8, 8]
        inits += [_i64("s1", [8, -1])]
        nodes = [helper.make_node("Reshape", ["x", "s1"], ["y"], name="merge")]
    else:
        x_shape = [2, 3, 8]
        make = {"tile": ("Tile", ["row", "s"], [2, 1, 1]),
                "tile_alone": ("Tile", ["row", "s"], [2, 1, 1]),
                "constant_of_shape": ("ConstantOfShape", ["s"], [2, 1, 8]),
                "expand": ("Expand", ["row", "s"], [2, 1, 8])}[case]
        op, ins, values = make
        inits.append(_i64("s", values))
        extra = {"value": numpy_helper.from_array(np.array([0.5], np.float32))} \
            if op == "ConstantOfShape" else {}
        nodes = [helper.make_node(op, ins, ["rows"], name="make_rows", **extra)]
        if case == "tile_alone":
            nodes.append(helper.make_node("Relu", ["x"], ["y"], name="relu"))
            y_shape = [2, 3, 8]
        else:
            nodes.append(helper.make_node("Concat", ["rows", "x"], ["y"], name="join", axis=1))
    outputs = [helper.make_tensor_value_info("y", f, y_shape)]
    if case == "tile_alone":
        outputs.append(helper.make_tensor_value_info("rows", f, [2, 1, 8]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", f, x_shape)],
                              outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("case, reads, out_shape", [
    ("merge_split", {"merge": [-1, 8], "split": [-1, 4, 8]}, ["batch", 4, 8]),
    ("merge_lead1", {"merge": [1, -1]}, [1, None]),
    ("shape_route", {"merge": "Shape x 4, [-1]"}, [None, 8]),
    ("tile", {"make_rows": "Shape, [1, 1]"}, ["batch", 4, 8]),
    ("constant_of_shape", {"make_rows": "Shape, [1, 8]"}, ["batch", 4, 8]),
    ("expand", {"make_rows": "Shape, [1, 8]"}, ["batch", 4, 8]),
    ("bias_rows", {"add_bias": "Expand"}, ["batch", 4, 8]),
])
def test_dims_makes_merged_and_created_batches_follow_the_input(tmp_path, capsys, case, reads,
                                                                out_shape):
    """Each constant that hard-codes batch 2 follows the input (-1, or the batch read from
    Shape(x) times the merged static dims, joined to its other entries); --verify runs batch 2
    and 6 against the original sample by sample (a merged batch joined on its own axis)."""
    src = tmp_path / "m.onnx"
    onnx.save(batch_two(case), src)
    out = tmp_path / "o.onnx"
    code, stdout, err = cli_main(capsys, "dims", src, "-o", out, "--batch", "dynamic",
                                 "--verify", "--json")
    assert code == 0, stdout + err
    doc = json.loads(stdout)
    assert doc["verify"]["verdict"] == "pass", doc["verify"]
    assert {p["check"] for p in doc["verify"]["pairs"]} == {"dims:batch 2", "dims:batch 6"}
    assert set(doc["rewritten"]) == set(reads)
    m = onnx.load(out)
    assert shape_of(m.graph.output[0]) == out_shape
    consts = {t.name: numpy_helper.to_array(t).tolist() for t in m.graph.initializer}
    by_out = {o: n for n in m.graph.node for o in n.output}
    for label, want in reads.items():
        node = next(n for n in m.graph.node if n.name == label)
        if want == "Expand":  # the constant of equal slices: one slice expanded to the batch
            expand = by_out[node.input[1]]
            assert expand.op_type == "Expand" and consts[expand.input[0]] == \
                numpy_helper.to_array(batch_two(case).graph.initializer[1])[:1].tolist()
            continue
        feed = node.input[0 if node.op_type == "ConstantOfShape" else 1]
        if isinstance(want, list):
            assert consts[feed] == want
            continue
        concat = by_out[feed]  # Concat(batch [* k], tail)
        assert concat.op_type == "Concat", concat
        batch = by_out[concat.input[0]]
        if "x 4" in want:
            assert batch.op_type == "Mul" and consts[batch.input[1]] == [4]
            batch = by_out[batch.input[0]]
        assert batch.op_type == "Gather" and by_out[batch.input[0]].op_type == "Shape"
        assert by_out[batch.input[0]].input[0] == "x"
        assert str(consts[concat.input[1]]) == want.split(", ", 1)[1]
    again = load(src)
    replay(again, DimsRecord(shapes=doc["shapes"], batch="dynamic", rewritten=doc["rewritten"]))
    assert again.proto.graph.node == m.graph.node  # the same command: the same nodes


@pytest.mark.parametrize("case, needle", [
    ("tile_alone", "node 'make_rows' (Tile) reads a constant whose entry 0 is the old batch 2; "
                   "cannot make it follow the input: the dataflow of shapes does not prove it is "
                   "the batch"),
    ("bias_mixed", "node 'add_bias' (Add) joins tensors at the old batch 2; cannot make it "
                   "follow the input: input 1 ('bias') has dim 0 fixed at the old batch"),
])
def test_dims_refuses_a_constant_batch_it_cannot_prove(tmp_path, capsys, case, needle):
    src = tmp_path / "m.onnx"
    onnx.save(batch_two(case), src)
    out = tmp_path / "o.onnx"
    refused_in_process(capsys, ["dims", src, "-o", out, "--batch", "dynamic"], needle, src=src,
                       out=out)


@pytest.mark.slow
@pytest.mark.tf
def test_dims_on_a_keras_model_merging_and_splitting_the_batch(keras_batch_two, tmp_path,
                                                              capsys):
    """tf2onnx's batch-2 constants: the merge reads -1, the split and the Flatten follow the
    input, the folded tile of class rows becomes an Expand from Shape; --verify passes at
    batch 2 and 6 sample by sample."""
    out = tmp_path / "dyn.onnx"
    code, stdout, err = cli_main(capsys, "dims", keras_batch_two, "-o", out, "--batch", "dynamic",
                                 "--verify", "--json")
    assert code == 0, stdout + err
    doc = json.loads(stdout)
    assert doc["verify"]["verdict"] == "pass", doc["verify"]
    assert {p["check"] for p in doc["verify"]["pairs"]} == {"dims:batch 2", "dims:batch 6"}
    hows = sorted(doc["rewritten"].values())
    assert len(hows) == 4 and any("times 3" in h for h in hows), hows
    assert any("expanded to the batch read from Shape" in h for h in hows), hows
    assert shape_of(onnx.load(out).graph.output[0])[0] == "batch"


@pytest.mark.slow
@pytest.mark.torch
def test_dims_on_a_torch_export_merging_the_batch_and_expanding_a_token(
        torch_batch_two, tmp_path, capsys):
    """Unfolded, the token's expand shape is computed from constants: refused, naming the
    Expand and 'fold'; folded, every constant follows the input and --verify passes."""
    out = tmp_path / "dyn.onnx"
    refused_in_process(capsys, ["dims", torch_batch_two, "-o", out, "--batch", "dynamic"],
                       "node '/Expand' (Expand) reads a computed shape; cannot make it follow "
                       "the input: its shape '/Where_output_0' is computed from constants, so the "
                       "batch it hard-codes cannot be seen; run 'fold' first", src=torch_batch_two,
                       out=out)
    folded = tmp_path / "folded.onnx"
    assert cli_main(capsys, "fold", torch_batch_two, "-o", folded)[0] == 0
    code, stdout, err = cli_main(capsys, "dims", folded, "-o", out, "--batch", "dynamic",
                                 "--verify", "--json")
    assert code == 0, stdout + err
    doc = json.loads(stdout)
    assert doc["verify"]["verdict"] == "pass", doc["verify"]
    assert set(doc["rewritten"]) == {"/Reshape", "/Reshape_1", "/Concat"}


def test_dims_on_the_bundled_bert_export_asks_for_fold_then_follows_the_batch(tmp_path, capsys):
    """models/tiny_bert.onnx (a torch export at batch 1, its constant folding off): the token
    type Expand's shape is computed from constants, so dims refuses naming it and 'fold';
    folded, the attention Reshapes read 0 and --verify passes at two batch sizes."""
    from pathlib import Path

    src = Path(__file__).resolve().parents[1] / "models" / "tiny_bert.onnx"
    out = tmp_path / "dyn.onnx"
    refused_in_process(capsys, ["dims", src, "-o", out, "--batch", "dynamic"],
                       "node '/bert/embeddings/Expand' (Expand) reads a computed shape; cannot "
                       "make it follow the input: its shape '/bert/embeddings/Where_output_0' is "
                       "computed from constants, so the batch it hard-codes cannot be seen; run "
                       "'fold' first", src=src, out=out)
    folded = tmp_path / "folded.onnx"
    assert cli_main(capsys, "fold", src, "-o", folded)[0] == 0
    code, stdout, err = cli_main(capsys, "dims", folded, "-o", out, "--batch", "dynamic",
                                 "--verify", "--json")
    assert code == 0, stdout + err
    doc = json.loads(stdout)
    assert doc["verify"]["verdict"] == "pass", doc["verify"]
    # 8: fold drops the two Reshapes to [1, -1, 8, 16] of a [1, 8, 8, 16] tensor (no-ops)
    assert len(doc["rewritten"]) == 8 and all(h.startswith("entry 0 reads 0")
                                               for h in doc["rewritten"].values())


def test_dims_on_an_elementwise_chain_takes_the_cheap_pass_and_keeps_value_info(tmp_path, capsys):
    """x[2,4] -> MatMul -> Add -> Relu -> y at batch 2 (a broadcast bias, no shape constant):
    the shapes come from the forward pass on the int graph; only the value_info entries the
    model had are written, with the new batch; --verify passes."""
    f = TensorProto.FLOAT
    w = numpy_helper.from_array(np.eye(4, dtype=np.float32) * 0.5, "W")
    bias = numpy_helper.from_array(np.arange(4, dtype=np.float32), "B")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["mm"], name="mm"),
         helper.make_node("Add", ["mm", "B"], ["add"], name="add"),
         helper.make_node("Relu", ["add"], ["y"], name="relu")], "g",
        [helper.make_tensor_value_info("x", f, [2, 4])],
        [helper.make_tensor_value_info("y", f, [2, 4])], [w, bias],
        value_info=[helper.make_tensor_value_info("mm", f, [2, 4]),
                    helper.make_tensor_value_info("add", f, [2, 4])])
    src = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), src)
    out = tmp_path / "o.onnx"
    code, stdout, err = cli_main(capsys, "dims", src, "-o", out, "--batch", "dynamic",
                                 "--verify", "--json")
    assert code == 0, stdout + err
    assert json.loads(stdout)["verify"]["verdict"] == "pass"
    g = onnx.load(out).graph
    assert shape_of(g.output[0]) == ["batch", 4]
    assert {vi.name: shape_of(vi) for vi in g.value_info} == {"mm": ["batch", 4],
                                                              "add": ["batch", 4]}


def test_dims_expands_a_class_token_joined_at_batch_one(tmp_path, capsys):
    """Concat(row[1,1,8], x[1,3,8], axis=1) (a class token at batch 1, as a folded export
    leaves it): at any other batch the row must repeat per sample, so it becomes
    Expand(row, Shape(x)[0] x 1 x 8); --verify passes at batch 1 and 3."""
    f = TensorProto.FLOAT
    row = numpy_helper.from_array(np.linspace(-1, 1, 8, dtype=np.float32).reshape(1, 1, 8), "row")
    graph = helper.make_graph(
        [helper.make_node("Concat", ["row", "x"], ["y"], name="join", axis=1)], "g",
        [helper.make_tensor_value_info("x", f, [1, 3, 8])],
        [helper.make_tensor_value_info("y", f, [1, 4, 8])], [row])
    src = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), src)
    out = tmp_path / "o.onnx"
    code, stdout, err = cli_main(capsys, "dims", src, "-o", out, "--batch", "dynamic",
                                 "--verify", "--json")
    assert code == 0, stdout + err
    doc = json.loads(stdout)
    assert doc["verify"]["verdict"] == "pass" and list(doc["rewritten"]) == ["join"]
    m = onnx.load(out)
    join = next(n for n in m.graph.node if n.name == "join")
    assert {n.output[0]: n.op_type for n in m.graph.node}[join.input[0]] == "Expand"
    assert shape_of(m.graph.output[0]) == ["batch", 4, 8]


def test_dims_keeps_a_scalar_output_scalar_behind_a_sequence(tmp_path, capsys):
    """A graph output of rank 0 that inference cannot follow (behind SplitToSequence) keeps its
    empty shape: a shape cleared to "unknown rank" fails the checker (was exit 3)."""
    g = helper.make_graph(
        [helper.make_node("SplitToSequence", ["x"], ["seq"], axis=-1),
         helper.make_node("SequenceLength", ["seq"], ["len"])],
        "seq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
        [helper.make_tensor_value_info("len", TensorProto.INT64, [])])
    src, out = tmp_path / "seq.onnx", tmp_path / "out.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 12)]), src)
    code, _, err = cli_main(capsys, "dims", str(src), "-o", str(out), "--batch", "dynamic")
    assert code == 0, err
    written = onnx.load(out)
    assert written.graph.output[0].type.tensor_type.HasField("shape")
    assert shape_of(written.graph.output[0]) == []
    assert shape_of(written.graph.input[0])[0] == "batch"
    onnx.checker.check_model(written, full_check=True)


def test_dims_names_an_unnamed_node_that_refuses_the_new_batch(tmp_path, capsys):
    """StringNormalizer takes [C] or [1,C]: a dynamic batch is refused in one line naming the op,
    though the node has no name (was exit 3: the checker failed the written model)."""
    g = helper.make_graph(
        [helper.make_node("StringNormalizer", ["x"], ["y"], case_change_action="UPPER")],
        "strnorm", [helper.make_tensor_value_info("x", TensorProto.STRING, [1, 6])],
        [helper.make_tensor_value_info("y", TensorProto.STRING, [1, 6])])
    src, out = tmp_path / "strnorm.onnx", tmp_path / "out.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 12)]), src)
    refused_in_process(capsys, ["dims", str(src), "-o", str(out), "--batch", "dynamic"],
                       "a StringNormalizer node (unnamed) does not accept the new shapes",
                       src=src, out=out)


def test_a_model_shape_inference_cannot_read_is_refused_not_a_crash(tmp_path, capsys):
    """An Add given one input (onnx.checker refuses the model) next to a constant that fixes the
    batch: dims runs shape inference over its probe, which raises outright. One line naming
    the fix and exit 2; it used to exit 3 (an InferenceError)."""
    model = onnx.parser.parse_model("""<ir_version: 8, opset_import: ["": 17]>
g (float[3] x) => (float[3] y) {
  c = Constant<value = float[3] {1, 2, 3}>()
  d = Add(c)
  y = Add(x, d)
}""")
    src, out = tmp_path / "m.onnx", tmp_path / "out.onnx"
    onnx.save_model(model, str(src))
    refused_in_process(capsys, ["dims", src, "-o", out, "--batch", "4"],
                       "onnx's shape inference fails on the model", src=src, out=out)


def _attention(seq: int = 5) -> onnx.ModelProto:
    """x[2,seq,8] -> Reshape(constant [2,seq,2,4]) -> heads -> softmax attention -> Reshape
    (constant [2,seq,8]) -> y: the shape constants hard-code the sequence length."""
    nodes = [helper.make_node("Reshape", ["x", "s1"], ["h"]),
             helper.make_node("Transpose", ["h"], ["t"], perm=[0, 2, 1, 3]),
             helper.make_node("Transpose", ["t"], ["tt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["t", "tt"], ["sc"]),
             helper.make_node("Softmax", ["sc"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "t"], ["o"]),
             helper.make_node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]),
             helper.make_node("Reshape", ["ot", "s2"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, seq, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, seq, 8])],
                          [_i64("s1", [2, seq, 2, 4]), _i64("s2", [2, seq, 8])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)


def test_a_reshape_constant_that_hard_codes_a_changed_dim_is_refused(tmp_path, capsys):
    """Polygraphy's --override-input-shapes on a sequence length the model hard-codes: onnx's
    inference keeps the Reshape's constant shape (it does not compare element counts), so dims
    used to exit 0 with a model onnxruntime cannot run. Now refused, naming the Reshape; the
    batch (which dims rewrites) and a size that fits still go through, and run."""
    src, out = tmp_path / "m.onnx", tmp_path / "out.onnx"
    onnx.save_model(_attention(), str(src))
    refused_in_process(capsys, ["dims", src, "-o", out, "--input", "x=2x7x8"],
                       "node 'Reshape#0' (Reshape) cannot hold the new shapes: its input is 2x7x8",
                       src=src, out=out)
    code, _, err = cli_main(capsys, "dims", src, "-o", out, "--batch", "3")
    assert code == 0, err
    x = np.random.default_rng(0).standard_normal((3, 5, 8)).astype(np.float32)
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    y = sess.run(None, {"x": x})[0]
    ref = ort.InferenceSession(_attention().SerializeToString(), providers=["CPUExecutionProvider"])
    want = np.concatenate([ref.run(None, {"x": x[:2]})[0], ref.run(None, {"x": x[1:]})[0][1:]])
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("text, op", [
    ("m = MatMul(x, w)\n  y = Relu(m)", "MatMul"),
    ("a = Add(x, b)\n  y = Relu(a)", "Add"),
])
def test_a_weight_that_fixes_a_changed_dim_is_refused_not_a_crash(tmp_path, capsys, text, op):
    """x[2,5] @ w[5,3] (or + b[5]) with x made 2x7: the cheap forward pass took the MatMul's
    inner sizes on trust and typed the output, the save's checker then failed (exit 3). The pass
    now leaves a clash to onnx's inference, which names the node (exit 2)."""
    model = onnx.parser.parse_model(f"""<ir_version: 8, opset_import: ["": 17]>
g (float[2, 5] x) => (float[2, 3] y)
  <float[5, 3] w = {{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15}}, float[5] b = {{1,2,3,4,5}}> {{
  {text}
}}""")
    if op == "Add":
        model.graph.output[0].type.tensor_type.shape.dim[1].dim_value = 5
    src, out = tmp_path / "m.onnx", tmp_path / "out.onnx"
    onnx.save_model(model, str(src))
    refused_in_process(capsys, ["dims", src, "-o", out, "--input", "x=2x7"],
                       f"a {op} node (unnamed) does not accept the new shapes", src=src, out=out)
    code, _, err = cli_main(capsys, "dims", src, "-o", out, "--input", "x=4x5")  # still fits
    assert code == 0, err
    x = np.ones((4, 5), np.float32)
    y = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert y.shape == ((4, 3) if op == "MatMul" else (4, 5))
    assert shape_of(onnx.load(str(out)).graph.output[0]) == list(y.shape)


def test_if_branches_and_function_bodies_declaring_the_old_batch_follow_it(tmp_path, capsys):
    """If branches (in the main graph and in a local function) declare their outputs [2, 3],
    as exporters write them: dims --batch 4 left those sizes, inference then disagreed with
    them and the save's checker failed (exit 3). A body's static sizes are now left unknown
    (dtype, rank kept) and the main graph's shapes follow the new batch."""
    model = onnx.parser.parse_model("""<ir_version: 8, opset_import: ["": 17, "local": 1]>
g (bool c, float[2, 3] x) => (float[2, 3] y, float[2, 3] z) {
  y = If(c) <then_branch = th () => (float[2, 3] o) { o = Relu(x) },
             else_branch = el () => (float[2, 3] o) { o = Neg(x) }>
  z = local.branch(c, x)
}
<domain: "local", opset_import: ["": 17]>
branch (c, t) => (u) {
  u = If(c) <then_branch = th () => (float[2, 3] o) { o = Abs(t) },
             else_branch = el () => (float[2, 3] o) { o = Floor(t) }>
}""")
    src, out = tmp_path / "m.onnx", tmp_path / "out.onnx"
    onnx.save_model(model, str(src))
    code, _, err = cli_main(capsys, "dims", src, "-o", out, "--batch", "4")
    assert code == 0, err
    got = onnx.load(str(out))
    onnx.checker.check_model(got, full_check=True)
    assert [shape_of(o) for o in got.graph.output] == [[4, 3], [4, 3]]
    bodies = [*got.graph.node[0].attribute, *got.functions[0].node[0].attribute]
    assert [shape_of(a.g.output[0]) for a in bodies] == [[None, None]] * 4
    x = np.arange(12, dtype=np.float32).reshape(4, 3) - 5
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    for c in (True, False):
        y, z = sess.run(None, {"c": np.array(c), "x": x})
        np.testing.assert_array_equal(y, np.maximum(x, 0) if c else -x)
        np.testing.assert_array_equal(z, np.abs(x) if c else np.floor(x))
