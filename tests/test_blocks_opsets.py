"""Built-in blocks for every opset where their ops exist, on one-operator models of the three kinds
``insert`` used to refuse: opset 1..7 hosts (identity since opset 1), hosts that import only
ai.onnx.ml, and sequence- / optional-typed values (If, Loop, SequenceMap, Optional outputs).
Each insert is checked structurally, numerically (onnxruntime, optimizations off) and by the
rewrite's own --verify invariant; refusals that remain name the opset that would work."""

from __future__ import annotations

import functools
import json
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsurgeon.errors import RewriteError
from onnxsurgeon.processing import BUILTIN_BLOCKS, make_block
from onnxsurgeon.surgery import insert
from onnxsurgeon.verify import verify_log
from tests.cli_helpers import cli
from tests.rewire_helpers import clone, rand, run, serialized
from tests.test_processing import CASES, SHAPE, data, run_block

F = TensorProto.FLOAT


@pytest.mark.parametrize("opset", range(1, 11))
def test_every_block_builds_from_its_minimum_opset_and_is_refused_below(opset):
    for name, params, ref in CASES:
        spec = BUILTIN_BLOCKS[name]
        if opset < spec.min_opset:
            with pytest.raises(RewriteError, match=f"supported opsets are {spec.min_opset}\\.\\."):
                make_block(name, params, elem_type=F, opset=opset, shape=list(SHAPE))
            continue
        model = make_block(name, params, elem_type=F, opset=opset, shape=list(SHAPE))
        onnx.checker.check_model(model, full_check=True)
        x = data()
        want = ref(x.astype(np.float64)).astype(np.float32)
        np.testing.assert_allclose(run_block(model, x), want, rtol=2e-6, atol=1e-6)
    assert BUILTIN_BLOCKS["identity"].min_opset == 1


def _one_op(op: str, opset: int, *, inputs=("x",), attrs=None, shape=(2, 3),
            domain: str = "", imports=None) -> onnx.ModelProto:
    node = helper.make_node(op, list(inputs), ["y"], name=op.lower(), domain=domain, **(attrs or {}))
    g = helper.make_graph([node, helper.make_node("Softsign" if not domain else op, ["y"], ["z"],
                                                  name="after", domain=domain, **(attrs or {}) if domain else {})],
                          f"{op}_{opset}", [helper.make_tensor_value_info(i, F, list(shape)) for i in inputs],
                          [helper.make_tensor_value_info("z", F, list(shape))])
    m = helper.make_model(g, opset_imports=imports or [helper.make_opsetid("", opset)])
    m.ir_version = 3
    onnx.checker.check_model(m, full_check=True)
    return m


@pytest.mark.parametrize("op, opset", [("Softsign", 1), ("Softplus", 1), ("Softsign", 3),
                                       ("Softplus", 5), ("Sigmoid", 6), ("Relu", 6), ("Tanh", 6),
                                       ("Exp", 6), ("Relu", 7)])
def test_identity_insert_into_old_opset_models(op, opset):
    orig = _one_op(op, opset)
    model = clone(orig)
    r = insert(model, "y", op="identity")
    assert [o.version for o in model.opset_import] == [opset]
    assert [n.op_type for n in model.graph.node] == [op, "Identity", "Softsign"]
    assert model.graph.node[2].input[0] == r.processed
    onnx.checker.check_model(model, full_check=True)
    x = rand((2, 3), 0)
    assert np.array_equal(run(model, {"x": x})["z"], run(orig, {"x": x})["z"])
    assert verify_log(orig, model).ok


def test_clip_and_scale_at_their_oldest_opsets():
    for block, params, opset, fn in (("clip", {"min": 0.0}, 6, lambda v: np.maximum(v, 0)),
                                     ("scale", {"factor": 2.0}, 7, lambda v: v * 2)):
        orig = _one_op("Relu", opset)
        model = clone(orig)
        insert(model, "y", op=block, params=params)
        x = rand((2, 3), 1)
        y = fn(np.maximum(x, 0))
        np.testing.assert_allclose(run(model, {"x": x})["z"], y / (1 + np.abs(y)), rtol=1e-6)
        assert verify_log(orig, model).ok


def _ml_only() -> onnx.ModelProto:
    """A host that imports only ai.onnx.ml: x -> Scaler -> y -> Scaler -> z."""
    attrs = {"offset": [0.5, -1.0, 2.0], "scale": [2.0, 0.5, 1.5]}
    return _one_op("Scaler", 0, attrs=attrs, domain="ai.onnx.ml",
                   imports=[helper.make_opsetid("ai.onnx.ml", 3)])


@pytest.mark.parametrize("block, params", [("identity", {}), ("l2_normalize", {"axis": 1}),
                                           ("scale", {"factor": 3.0})])
def test_ml_only_host_gets_a_default_domain_import(block, params):
    orig = _ml_only()
    model = clone(orig)
    insert(model, "y", op=block, params=params)
    opsets = {o.domain: o.version for o in model.opset_import}
    assert opsets == {"ai.onnx.ml": 3, "": 16}  # the ai.onnx release that came with ai.onnx.ml 3
    onnx.checker.check_model(model, full_check=True)
    assert verify_log(orig, model).ok


def test_ml_only_host_takes_a_graph_block(tmp_path):
    orig = _ml_only()
    block = make_block("softmax", {"axis": 1}, elem_type=F, opset=18, shape=[2, 3])
    model = clone(orig)
    insert(model, "y", graph=block)
    assert {o.domain: o.version for o in model.opset_import} == {"ai.onnx.ml": 3, "": 18}
    x = rand((2, 3), 2).astype(np.float64)
    offset, scale = np.array([0.5, -1.0, 2.0]), np.array([2.0, 0.5, 1.5])
    y = (x - offset) * scale  # the first Scaler
    e = np.exp(y - y.max(axis=1, keepdims=True))
    want = (e / e.sum(axis=1, keepdims=True) - offset) * scale  # softmax, then the second Scaler
    np.testing.assert_allclose(run(model, {"x": x.astype(np.float32)})["z"], want, rtol=1e-5, atol=1e-6)
    assert verify_log(orig, model).ok


# ------------------------------------------------------------------- sequence / optional values
def _sequence_model() -> onnx.ModelProto:
    """SequenceConstruct(x, x2) -> seq -> SequenceMap(Relu) -> mapped -> ConcatFromSequence."""
    body = helper.make_graph([helper.make_node("Relu", ["e"], ["r"], name="body_relu")], "body",
                             [helper.make_tensor_value_info("e", F, [2, 3])],
                             [helper.make_tensor_value_info("r", F, [2, 3])])
    nodes = [helper.make_node("SequenceConstruct", ["x", "x2"], ["seq"], name="construct"),
             helper.make_node("SequenceMap", ["seq"], ["mapped"], name="map", body=body),
             helper.make_node("ConcatFromSequence", ["mapped"], ["z"], name="concat", axis=0)]
    g = helper.make_graph(nodes, "seq", [helper.make_tensor_value_info("x", F, [2, 3]),
                                         helper.make_tensor_value_info("x2", F, [2, 3])],
                          [helper.make_tensor_value_info("z", F, [4, 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m, full_check=True)
    return m


def _loop_scan_model() -> onnx.ModelProto:
    """A Loop whose body emits a sequence (SequenceInsert): seq of 3 tensors -> concat -> z."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"], name="cond"),
         helper.make_node("Cast", ["i"], ["fi"], name="cast", to=F),
         helper.make_node("Mul", ["x", "fi"], ["xi"], name="mul"),
         helper.make_node("SequenceInsert", ["s_in", "xi"], ["s_out"], name="ins")],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_sequence_value_info("s_in", F, [2, 3])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_sequence_value_info("s_out", F, [2, 3])])
    nodes = [helper.make_node("SequenceEmpty", [], ["empty"], name="empty", dtype=F),
             helper.make_node("Loop", ["n", "t", "empty"], ["seq"], name="loop", body=body),
             helper.make_node("ConcatFromSequence", ["seq"], ["z"], name="concat", axis=0)]
    g = helper.make_graph(nodes, "loop_seq", [helper.make_tensor_value_info("x", F, [2, 3])],
                          [helper.make_tensor_value_info("z", F, [6, 3])],
                          [numpy_helper.from_array(np.array(3, np.int64), "n"),
                           numpy_helper.from_array(np.array(True), "t")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m, full_check=True)
    return m


def _optional_model() -> onnx.ModelProto:
    nodes = [helper.make_node("Optional", ["x"], ["opt"], name="wrap"),
             helper.make_node("OptionalGetElement", ["opt"], ["z"], name="unwrap")]
    g = helper.make_graph(nodes, "opt", [helper.make_tensor_value_info("x", F, [2, 3])],
                          [helper.make_tensor_value_info("z", F, [2, 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    onnx.checker.check_model(m, full_check=True)
    return m


@pytest.mark.parametrize("make, at, feeds", [
    (_sequence_model, "seq", {"x": rand((2, 3), 3), "x2": rand((2, 3), 4)}),
    (_sequence_model, "mapped", {"x": rand((2, 3), 3), "x2": rand((2, 3), 4)}),
    (_loop_scan_model, "seq", {"x": rand((2, 3), 5)}),
    (_optional_model, "opt", {"x": rand((2, 3), 6)}),
], ids=["sequence-construct", "sequence-map", "loop-sequence", "optional"])
def test_identity_insert_at_sequence_and_optional_values(make, at, feeds):
    orig = make()
    model = clone(orig)
    r = insert(model, at, op="identity")
    processed_vi = next(vi for vi in model.graph.value_info if vi.name == r.processed)
    assert processed_vi.type.WhichOneof("value") in ("sequence_type", "optional_type")
    onnx.checker.check_model(model, full_check=True)
    assert np.array_equal(run(model, feeds)["z"], run(orig, feeds)["z"])
    assert verify_log(orig, model).ok


def test_graph_block_with_a_sequence_input():
    seq_type = helper.make_tensor_sequence_value_info("s", F, [2, 3])
    g = helper.make_graph([helper.make_node("SequenceErase", ["s"], ["t"], name="erase_last")],
                          "drop_last", [seq_type], [helper.make_tensor_sequence_value_info("t", F, [2, 3])])
    block = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    orig = _sequence_model()
    model = clone(orig)
    insert(model, "seq", graph=block)
    onnx.checker.check_model(model, full_check=True)
    feeds = {"x": rand((2, 3), 3), "x2": rand((2, 3), 4)}
    assert np.array_equal(run(model, feeds)["z"], np.maximum(feeds["x"], 0))
    assert verify_log(orig, model).ok


def test_an_opset_13_host_is_raised_to_14_for_a_sequence_identity_when_nothing_changes():
    orig = _downgraded(_sequence_model(), 13)
    model = clone(orig)
    insert(model, "seq", op="identity")
    assert [o.version for o in model.opset_import] == [14]
    feeds = {"x": rand((2, 3), 3), "x2": rand((2, 3), 4)}
    assert np.array_equal(run(model, feeds)["z"], run(orig, feeds)["z"])
    assert verify_log(orig, model).ok


def _with_reshape(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` whose x first goes through a Reshape (Reshape changed at opset 14)."""
    m = clone(model)
    m.graph.node.insert(0, helper.make_node("Reshape", ["x", "shape"], ["xr"], name="reshape"))
    m.graph.node[1].input[0] = "xr"
    m.graph.initializer.append(numpy_helper.from_array(np.array([2, 3], np.int64), "shape"))
    onnx.checker.check_model(m, full_check=True)
    return m


@pytest.mark.parametrize("make, at, block, needle", [
    (_sequence_model, "seq", "l2_normalize", "takes tensors but the activation is a sequence"),
    (lambda: _with_reshape(_downgraded(_sequence_model(), 13)), "seq", "identity",
     "needs opset >= 14"),
], ids=["tensor-block", "old-opset"])
def test_what_stays_refused_says_why(make, at, block, needle):
    model = make()
    before = serialized(model)
    with pytest.raises(RewriteError, match=needle):
        insert(model, at, op=block)
    assert serialized(model) == before


def _downgraded(model: onnx.ModelProto, opset: int) -> onnx.ModelProto:
    """The same graph stamped with an older opset (SequenceMap is gone: keep construct+concat)."""
    m = clone(model)
    del m.graph.node[1]
    m.graph.node[1].input[0] = "seq"
    m.opset_import[0].version = opset
    onnx.checker.check_model(m, full_check=True)
    return m


def test_cli_identity_into_an_opset_1_model(tmp_path):
    src = tmp_path / "relu1.onnx"
    src.write_bytes(_one_op("Softsign", 1).SerializeToString())
    out = tmp_path / "out.onnx"
    proc = cli("insert", src, "-o", out, "--at", "y", "--op", "identity", "--json", "--verify")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["rerouted"] == ["after"]
    assert [o.version for o in onnx.load(str(out)).opset_import] == [1]


# ------------------------------------------------- onnx's own one-operator backend test models
@functools.lru_cache(maxsize=1)
def _backend_cases() -> dict:
    import onnx.backend.test.case.node as cases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # some case generators divide by zero on purpose
        return {c.name: c for c in cases.collect_testcases(None)}


def _backend_case(name: str):
    return _backend_cases()[name]


@pytest.mark.parametrize("case", [
    "test_not_2d", "test_and_bcast4v3d", "test_xor2d",                    # opsets 1 and 7
    "test_ai_onnx_ml_binarizer", "test_ai_onnx_ml_array_feature_extractor",  # ai.onnx.ml only
    "test_if_seq", "test_loop13_seq", "test_sequence_map_add_2_sequences",  # sequence values
    "test_split_to_sequence_1", "test_identity_opt",                         # ... and optional
])
def test_identity_at_the_output_of_onnx_backend_models(case):
    """These one-operator models (shipped with onnx, the set onnxruntime's own tests run) were
    refused for one of the three reasons; the identity insert now keeps their expected outputs
    and passes its own --verify invariant on the case's inputs."""
    c = _backend_case(case)
    orig = c.model
    model = clone(orig)
    out = orig.graph.output[0].name
    r = insert(model, out, op="identity")
    assert r.rerouted_outputs == [out]
    onnx.checker.check_model(model, full_check=True)
    inputs, expected = c.data_sets[0]
    feeds = dict(zip([i.name for i in orig.graph.input], inputs, strict=True))
    got = run(model, feeds)[r.processed]
    want = expected[0]
    if isinstance(want, list):
        assert len(got) == len(want) and all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))
    elif want is None:
        assert got is None
    else:
        np.testing.assert_allclose(got, want, rtol=1e-6)
    if not any(isinstance(v, list) or v is None for v in inputs):
        assert verify_log(orig, model, inputs=feeds).ok
