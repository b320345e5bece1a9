"""extract: structural, numeric (onnxruntime, optimizations off, exact) and error behaviour."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnxsurgeon import io
from onnxsurgeon.errors import NotFoundError, RewriteError, UsageError
from onnxsurgeon.record import rewrites
from onnxsurgeon.surgery import extract
from tests import builders

# ----------------------------------------------------------------------------- helpers
from tests.conftest import run, session  # noqa: E402 - the shared onnxruntime helpers


def _np_dtype(elem: int) -> np.dtype:
    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem))


def random_feeds(model: onnx.ModelProto, seed: int = 0, dims: int = 2) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else dims for d in tt.shape.dim]
        feeds[vi.name] = rng.standard_normal(shape).astype(_np_dtype(tt.elem_type))
    return feeds


def run_exposed(model: onnx.ModelProto, names, feeds) -> dict[str, np.ndarray]:
    """Values of ``names`` in ``model`` (intermediate tensors exposed as extra outputs of a copy)."""
    return run(model, feeds, list(names))


def check_extract_exact(original: onnx.ModelProto, extracted: onnx.ModelProto, stops=()):
    """Extracted outputs equal the same tensors of the original, bit for bit."""
    onnx.checker.check_model(extracted, full_check=True)
    feeds = random_feeds(original)
    outs = [o.name for o in extracted.graph.output]
    ref = run_exposed(original, list(outs) + list(stops), feeds)
    inner = {vi.name: ref[vi.name] if vi.name in ref else feeds[vi.name]
             for vi in extracted.graph.input
             if vi.name not in {t.name for t in extracted.graph.initializer}}
    got = run(extracted, inner)
    for name in outs:
        np.testing.assert_array_equal(got[name], ref[name])
    return got


CASES = [
    # builder, outputs, stops, expected graph inputs, expected kept node names
    ("tiny_cnn", ["act"], [], ["x"], ["conv5", "relu5"]),
    ("tiny_cnn", ["logits"], ["act"], ["act"], ["pool", "flatten", "fc"]),
    ("tiny_cnn", ["logits", "side_out"], [], ["x"], ["conv5", "relu5", "pool", "flatten", "fc", "side"]),
    ("tied_weights", ["y"], ["h"], ["h"], ["relu", "mm2"]),
    ("tied_weights", ["h"], [], ["x"], ["mm1"]),
    ("if_capture", ["z"], [], ["x"], ["relu", "sum", "gt", "branch", "add"]),
    ("if_capture", ["y"], [], ["x"], ["relu", "sum", "gt", "branch"]),
    ("if_capture", ["y"], ["a"], ["x", "a"], ["sum", "gt", "branch"]),
    ("loop_capture", ["z"], [], ["x"], ["neg", "loop", "relu"]),
    ("loop_capture", ["z"], ["b"], ["x", "b"], ["loop", "relu"]),
    ("local_function", ["y"], ["ht"], ["ht"], ["affine2"]),
    ("local_function", ["h"], [], ["x"], ["affine1"]),
    ("init_as_input", ["y"], [], ["x", "W"], ["mm", "relu"]),
    ("init_as_input", ["y"], ["h"], ["h"], ["relu"]),
]


@pytest.mark.parametrize(("builder", "outputs", "stops", "inputs", "nodes"), CASES,
                         ids=[f"{c[0]}-{'+'.join(c[1])}-{'+'.join(c[2]) or 'nostop'}" for c in CASES])
def test_extract_structure_and_values(builder, outputs, stops, inputs, nodes):
    original = getattr(builders, builder)()
    model = onnx.ModelProto()
    model.CopyFrom(original)
    result = extract(model, outputs, inputs=stops)
    assert [o.name for o in model.graph.output] == outputs
    assert [i.name for i in model.graph.input] == inputs
    assert [n.name for n in model.graph.node] == nodes
    assert result.outputs == outputs and result.stops == stops and result.inputs == inputs
    assert result.kept_nodes == len(nodes)
    assert result.removed_nodes == len(original.graph.node) - len(nodes)
    # every kept initializer is read by a kept node (directly or inside a body)
    reads = {n for node in model.graph.node for n in node.input}
    reads |= {n for node in model.graph.node for a in node.attribute if a.g.node
              for inner in a.g.node for n in inner.input}
    assert {t.name for t in model.graph.initializer} <= reads
    check_extract_exact(original, model, stops)


def test_output_consumed_inside_is_cut_cleanly():
    model = builders.tiny_cnn()
    extract(model, ["act"])
    assert {t.name for t in model.graph.initializer} == {"conv5.weight", "conv5.bias"}
    assert [o.name for o in model.graph.output] == ["act"]
    assert model.graph.output[0].type.tensor_type.shape.dim[1].dim_value == 4


def test_if_captures_are_kept_and_model_runs():
    """onnx.utils.extract_model drops tensors only captured by If branches; we must not."""
    original = builders.if_capture()
    model = builders.if_capture()
    extract(model, ["y"], inputs=["a"])
    assert "W" in {t.name for t in model.graph.initializer}  # read only inside the branches
    got = check_extract_exact(original, model, ["a"])
    assert got["y"].shape == (3,)


def test_loop_captures_are_kept_and_model_runs():
    original = builders.loop_capture()
    model = builders.loop_capture()
    extract(model, ["z"])
    assert {t.name for t in model.graph.initializer} == {"W", "trips", "true"}
    assert [n.name for n in model.graph.node] == ["neg", "loop", "relu"]
    check_extract_exact(original, model)


def test_initializer_listed_as_input_stays_initializer():
    model = builders.init_as_input()
    extract(model, ["y"])
    assert model.ir_version == 3
    assert [t.name for t in model.graph.initializer] == ["W"]
    assert [i.name for i in model.graph.input] == ["x", "W"]
    onnx.checker.check_model(model, full_check=True)


def test_stop_on_initializer_makes_it_an_input():
    original = builders.tied_weights()
    model = builders.tied_weights()
    extract(model, ["h"], inputs=["W"])
    assert len(model.graph.initializer) == 0
    assert [i.name for i in model.graph.input] == ["x", "W"]
    check_extract_exact(original, model, ["W"])


def test_model_level_fields_are_preserved():
    model = builders.local_function()
    model.doc_string = "the doc"
    model.graph.doc_string = "graph doc"
    onnx.helper.set_model_props(model, {"author": "me"})
    opsets = [(o.domain, o.version) for o in model.opset_import]
    extract(model, ["y"], inputs=["ht"])
    assert model.doc_string == "the doc" and model.graph.doc_string == "graph doc"
    assert model.producer_name == "onnxsurgeon-tests"
    assert [(o.domain, o.version) for o in model.opset_import] == opsets
    assert [f.name for f in model.functions] == ["Affine"]
    props = {p.key: p.value for p in model.metadata_props}
    assert props["author"] == "me"
    assert rewrites(model)[-1] == {"op": "extract", "outputs": ["y"], "inputs": ["ht"]}


def test_value_info_of_kept_tensors_is_kept():
    model = builders.tiny_cnn()
    for name, shape in (("conv5_out", [1, 4, 8, 8]), ("pooled", [1, 4, 1, 1]), ("flat", [1, 4])):
        model.graph.value_info.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, shape))
    extract(model, ["act"])
    assert [vi.name for vi in model.graph.value_info] == ["conv5_out"]
    model = builders.tiny_cnn()
    model.graph.value_info.append(helper.make_tensor_value_info("flat", TensorProto.FLOAT, [1, 4]))
    model.graph.value_info.append(helper.make_tensor_value_info("pooled", TensorProto.FLOAT, [1, 4, 1, 1]))
    extract(model, ["logits"], inputs=["pooled"])
    assert [vi.name for vi in model.graph.value_info] == ["flat"]


def _dynamic_model() -> onnx.ModelProto:
    """x[N,6] -> Relu -> r ; Reshape(r, shape) -> s (dims unknown) -> Neg -> y."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Reshape", ["r", "shape"], ["s"], name="reshape"),
        helper.make_node("Neg", ["s"], ["y"], name="neg"),
    ]
    graph = helper.make_graph(
        nodes, "dyn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6]),
         helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    graph.output[0].type.tensor_type.shape.dim.add()
    graph.output[0].type.tensor_type.shape.dim.add()
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def test_stop_with_unknown_dims_gets_symbolic_dims():
    model = _dynamic_model()
    extract(model, ["y"], inputs=["s"])
    (inp,) = model.graph.input
    assert inp.name == "s" and inp.type.tensor_type.elem_type == TensorProto.FLOAT
    dims = inp.type.tensor_type.shape.dim
    assert len(dims) == 2 and all(d.dim_param for d in dims)
    onnx.checker.check_model(model, full_check=True)
    value = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(run(model, {"s": value})["y"], -value)


def test_symbolic_dim_of_stop_is_kept():
    model = _dynamic_model()
    extract(model, ["s"], inputs=["r"])
    assert [i.name for i in model.graph.input] == ["shape", "r"]  # kept inputs first, then stops
    dims = model.graph.input[1].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in dims] == ["N", 6]


def test_untyped_intermediate_output_is_inferred():
    original = builders.chain(20)
    model = builders.chain(20)
    extract(model, ["relu9"])
    assert len(model.graph.node) == 30
    dims = [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim]
    assert dims == [1, 4]
    check_extract_exact(original, model)


def test_stop_sharing_a_node_with_a_needed_output():
    """Split produces p (a stop) and q (needed): Split stays, its p output gets an unused name."""
    nodes = [
        helper.make_node("Split", ["x"], ["p", "q"], name="split", axis=0, num_outputs=2),
        helper.make_node("Relu", ["p"], ["o1"], name="relu"),
        helper.make_node("Neg", ["q"], ["o2"], name="neg"),
    ]
    graph = helper.make_graph(
        nodes, "split", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 2])],
        [helper.make_tensor_value_info("o1", TensorProto.FLOAT, [2, 2]),
         helper.make_tensor_value_info("o2", TensorProto.FLOAT, [2, 2])],
    )
    original = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model = onnx.ModelProto()
    model.CopyFrom(original)
    extract(model, ["o1", "o2"], inputs=["p"])
    assert [i.name for i in model.graph.input] == ["x", "p"]
    assert model.graph.node[0].output[0] != "p"
    check_extract_exact(original, model, ["p"])


@pytest.mark.parametrize(("outputs", "stops", "error", "text"), [
    (["logit"], [], NotFoundError, "did you mean 'logits'"),
    (["logits"], ["actt"], NotFoundError, "did you mean 'act'"),
    (["act"], ["pooled"], UsageError, "not on the path"),
    (["act"], ["act"], UsageError, "both an output and a stop"),
    ([], [], UsageError, "at least one output"),
])
def test_errors_leave_model_unchanged(outputs, stops, error, text):
    model = builders.tiny_cnn()
    before = model.SerializeToString(deterministic=True)
    with pytest.raises(error, match=text):
        extract(model, outputs, inputs=stops)
    assert model.SerializeToString(deterministic=True) == before


def test_unknown_stop_type_is_refused():
    model = _dynamic_model()
    del model.graph.input[1].type.tensor_type.shape.dim[:]  # 'shape' of unknown length
    model.graph.input[1].type.tensor_type.shape.Clear()
    before = model.SerializeToString(deterministic=True)
    with pytest.raises(RewriteError, match="'s'"):
        extract(model, ["y"], inputs=["s"])
    assert model.SerializeToString(deterministic=True) == before


def test_output_of_unknown_rank_is_refused():
    model = builders.loop_capture()  # shape inference gives the Loop output no rank
    before = model.SerializeToString(deterministic=True)
    with pytest.raises(RewriteError, match="rank of output 'y' is unknown"):
        extract(model, ["y"])
    assert model.SerializeToString(deterministic=True) == before


def test_deterministic():
    a, b = builders.if_capture(), builders.if_capture()
    extract(a, ["y"], inputs=["a"])
    extract(b, ["y"], inputs=["a"])
    assert a.SerializeToString(deterministic=True) == b.SerializeToString(deterministic=True)


def test_names_resolve_through_selector():
    model = builders.tiny_cnn()
    result = extract(model, ["fc"], inputs=["relu5"])  # node names -> their single outputs
    assert result.outputs == ["logits"] and result.stops == ["act"]


def test_large_chain_half():
    original = builders.chain(600)
    model = builders.chain(600)
    result = extract(model, ["relu299"], inputs=["relu99"])
    assert result.kept_nodes == 600
    assert [n.name for n in model.graph.node][0] == "MatMul_100"
    check_extract_exact(original, model, ["relu99"])


def test_external_data_round_trip(tmp_path):
    from onnx.external_data_helper import convert_model_to_external_data

    original = builders.tiny_cnn()
    src = onnx.ModelProto()
    src.CopyFrom(original)
    convert_model_to_external_data(src, all_tensors_to_one_file=True, location="w.bin",
                                   size_threshold=0)
    onnx.save(src, str(tmp_path / "m.onnx"))
    model = io.load(tmp_path / "m.onnx")
    extract(model, ["logits"], inputs=["act"])
    (tmp_path / "out").mkdir()
    out = io.save(model, tmp_path / "out" / "cut.onnx")
    saved = onnx.load(str(out), load_external_data=False)
    assert {t.name for t in saved.graph.initializer} == {"fc.weight", "fc.bias"}
    assert all(t.data_location == TensorProto.EXTERNAL for t in saved.graph.initializer)
    onnx.checker.check_model(str(out), full_check=True)
    feeds = random_feeds(original)
    act = run_exposed(original, ["act", "logits"], feeds)
    got = session(str(out)).run(None, {"act": act["act"]})[0]
    np.testing.assert_array_equal(got, act["logits"])


def test_output_that_is_a_graph_input():
    model = builders.tied_weights()
    result = extract(model, ["x", "h"])
    assert result.inputs == ["x"] and result.outputs == ["x", "h"]
    assert [n.name for n in model.graph.node] == ["mm1"]
    check_extract_exact(builders.tied_weights(), model)


@pytest.mark.parametrize("step", [2, 7, 150])  # many runs (rebuild) ... few runs (slice deletes)
def test_keep_only_both_strategies(step):
    from onnxsurgeon.edit import keep_only

    model = builders.chain(100)
    before = [n.SerializeToString() for n in model.graph.node]
    keep = list(range(0, 300, step)) + [299]
    keep = sorted(set(keep))
    keep_only(model.graph.node, keep)
    assert [n.SerializeToString() for n in model.graph.node] == [before[i] for i in keep]


# ------------------------------------------------ gauntlet regression (moved from test_gauntlet.py)


def _ok(proc):
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stderr[-2000:]}"
    return proc


def test_regression_contrib_op_outputs_are_typed_by_onnxruntime(tmp_path):
    """Bug 2: nothing downstream of a com.microsoft op had a type (onnx has no schema for it):
    extract/copy/insert refused, verify wrote 'tensor data type 0' models."""
    import onnx
    from onnx import TensorProto

    from onnxsurgeon.index import GraphIndex
    from onnxsurgeon.types import TypeOracle
    from tests import gauntlet_models as gm
    from tests.cli_helpers import cli

    model = onnx.load(str(gm.custom_domain(tmp_path)))
    oracle = TypeOracle(GraphIndex(model))
    assert oracle.elem_type("g") == TensorProto.FLOAT and oracle.shape("g") == [2, 32]
    dst = tmp_path / "x.onnx"
    _ok(cli("extract", tmp_path / "custom_domain.onnx", "-o", dst, "--outputs", "g", "--verify"))
    assert onnx.load(str(dst)).graph.output[0].type.tensor_type.elem_type == TensorProto.FLOAT


def test_local_functions_kept_only_when_called():
    """A function called only from an If body, and one called only through it, stay; a function
    no kept node calls goes (onnx.utils.extract_model drops it too)."""
    f_inner = helper.make_function("local", "Inner", ["a"], ["b"], [helper.make_node("Neg", ["a"], ["b"])],
                                   opset_imports=[helper.make_opsetid("", 17)])
    f_outer = helper.make_function("local", "Outer", ["a"], ["b"],
                                   [helper.make_node("Inner", ["a"], ["b"], domain="local")],
                                   opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])
    f_side = helper.make_function("local", "Side", ["a"], ["b"], [helper.make_node("Abs", ["a"], ["b"])],
                                  opset_imports=[helper.make_opsetid("", 17)])
    vi = helper.make_tensor_value_info
    then_g = helper.make_graph([helper.make_node("Outer", ["x"], ["t"], domain="local")], "then", [],
                               [vi("t", TensorProto.FLOAT, [3])])
    else_g = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [],
                               [vi("e", TensorProto.FLOAT, [3])])
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], name="if", then_branch=then_g, else_branch=else_g),
         helper.make_node("Side", ["x"], ["s"], name="side", domain="local")],
        "funcs", [vi("c", TensorProto.BOOL, []), vi("x", TensorProto.FLOAT, [3])],
        [vi("y", TensorProto.FLOAT, [3]), vi("s", TensorProto.FLOAT, [3])])
    original = helper.make_model(graph, functions=[f_inner, f_outer, f_side],
                                 opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])
    original.ir_version = 8
    model = onnx.ModelProto()
    model.CopyFrom(original)
    extract(model, ["y"])
    assert [f.name for f in model.functions] == ["Inner", "Outer"]
    onnx.checker.check_model(model, full_check=True)
    x = np.array([1.0, -2.0, 3.0], np.float32)
    for c in (True, False):
        got = run(model, {"c": np.array(c), "x": x})["y"]
        assert np.array_equal(got, -x if c else x)
    extract(model, ["y"])  # nothing more to drop
    assert [f.name for f in model.functions] == ["Inner", "Outer"]
    side = onnx.ModelProto()
    side.CopyFrom(original)
    extract(side, ["s"])
    assert [f.name for f in side.functions] == ["Side"]
