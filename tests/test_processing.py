"""Built-in processing blocks: each equals a numpy reference in onnxruntime, across opsets."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto

from onnxsurgeon.errors import RewriteError, UsageError
from onnxsurgeon.processing import BUILTIN_BLOCKS, make_block, parse_op
from tests.conftest import session

OPSETS = list(range(11, 24))
SHAPE = (2, 3, 4, 5)


def run_block(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    return session(model).run(None, {"x": x})[0]


def data(seed: int = 0, dtype=np.float32) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(SHAPE).astype(dtype)


def np_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def np_l2(x: np.ndarray, axis: int, eps: float = 1e-12) -> np.ndarray:
    return x / np.sqrt(np.maximum((x * x).sum(axis=axis, keepdims=True), eps))


CASES = [
    ("l2_normalize", {}, lambda x: np_l2(x, -1)),
    ("l2_normalize", {"axis": 1}, lambda x: np_l2(x, 1)),
    ("global_avg_pool", {}, lambda x: x.mean(axis=(2, 3), keepdims=True)),
    ("reduce_mean", {"axes": [1, 2]}, lambda x: x.mean(axis=(1, 2), keepdims=True)),
    ("reduce_mean", {"axes": [2, 3], "keepdims": 0}, lambda x: x.mean(axis=(2, 3))),
    ("reduce_mean", {}, lambda x: x.mean(axis=(0, 1, 2, 3), keepdims=True)),
    ("softmax", {}, lambda x: np_softmax(x, -1)),
    ("softmax", {"axis": 1}, lambda x: np_softmax(x, 1)),
    ("scale", {"factor": 2.5}, lambda x: x * np.float32(2.5)),
    ("clip", {"min": -0.5, "max": 0.5}, lambda x: np.clip(x, -0.5, 0.5)),
    ("clip", {"min": 0}, lambda x: np.maximum(x, 0)),
    ("clip", {"max": 0.25}, lambda x: np.minimum(x, np.float32(0.25))),
    ("identity", {}, lambda x: x),
]


@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize(("name", "params", "ref"), CASES,
                         ids=[f"{n}-{'-'.join(f'{k}={v}' for k, v in p.items())}" for n, p, _ in CASES])
def test_block_equals_numpy_reference(name, params, ref, opset):
    model = make_block(name, params, elem_type=TensorProto.FLOAT, opset=opset, shape=list(SHAPE))
    onnx.checker.check_model(model, full_check=True)
    assert [op.version for op in model.opset_import if op.domain == ""] == [opset]
    x = data()
    got = run_block(model, x)
    want = ref(x.astype(np.float64)).astype(np.float32)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)


def test_exact_blocks_are_bit_exact():
    x = data(1)
    for name, params, ref in CASES:
        if name in ("scale", "clip", "identity"):
            got = run_block(make_block(name, params, elem_type=TensorProto.FLOAT, opset=17), x)
            assert np.array_equal(got, ref(x)), name


def test_block_without_shape_still_runs():
    model = make_block("softmax", {"axis": -1}, elem_type=TensorProto.FLOAT, opset=17)
    np.testing.assert_allclose(run_block(model, data()), np_softmax(data(), -1), rtol=1e-6)


def test_reduce_mean_axes_attribute_before_18_input_from_18():
    old = make_block("reduce_mean", {"axes": [1]}, elem_type=TensorProto.FLOAT, opset=17)
    new = make_block("reduce_mean", {"axes": [1]}, elem_type=TensorProto.FLOAT, opset=18)
    (n_old,) = old.graph.node
    (n_new,) = new.graph.node
    assert [a.name for a in n_old.attribute if a.name == "axes"] == ["axes"]
    assert len(n_old.input) == 1
    assert len(n_new.input) == 2 and not any(a.name == "axes" for a in n_new.attribute)


def test_softmax_non_last_axis_before_13_is_decomposed():
    model = make_block("softmax", {"axis": 1}, elem_type=TensorProto.FLOAT, opset=12, shape=list(SHAPE))
    assert "Softmax" not in [n.op_type for n in model.graph.node]
    last = make_block("softmax", {"axis": 3}, elem_type=TensorProto.FLOAT, opset=12, shape=list(SHAPE))
    assert [n.op_type for n in last.graph.node] == ["Softmax"]
    np.testing.assert_allclose(run_block(last, data()), np_softmax(data(), 3), rtol=1e-6)


def test_l2_normalize_matches_tf_semantics_on_tiny_and_zero_vectors():
    x = np.zeros((2, 3), np.float32)
    x[1] = [1e-8, 0.0, 0.0]  # norm 1e-8 < sqrt(eps): tf divides by sqrt(eps) = 1e-6
    model = make_block("l2_normalize", {}, elem_type=TensorProto.FLOAT, opset=17, shape=[2, 3])
    got = run_block(model, x)
    assert np.array_equal(got[0], np.zeros(3, np.float32))
    np.testing.assert_allclose(got[1], [1e-2, 0, 0], rtol=1e-5)


@pytest.mark.parametrize("dtype", [TensorProto.DOUBLE, TensorProto.FLOAT16])
def test_l2_normalize_other_float_dtypes(dtype):
    np_dtype = onnx.helper.tensor_dtype_to_np_dtype(dtype)
    x = data(2).astype(np_dtype)
    x[0, 0, 0] = 0
    model = make_block("l2_normalize", {"axis": -1}, elem_type=dtype, opset=17, shape=list(SHAPE))
    got = run_block(model, x)
    assert got.dtype == np_dtype and np.isfinite(got).all()
    tol = 1e-12 if dtype == TensorProto.DOUBLE else 2e-3
    np.testing.assert_allclose(got.astype(np.float64), np_l2(x.astype(np.float64), -1), atol=tol)


def test_integer_blocks():
    x = np.arange(-6, 6, dtype=np.int64).reshape(3, 4)
    got = run_block(make_block("scale", {"factor": 3}, elem_type=TensorProto.INT64, opset=17), x)
    assert np.array_equal(got, x * 3) and got.dtype == np.int64
    got = run_block(make_block("clip", {"min": -2, "max": 3}, elem_type=TensorProto.INT64, opset=13), x)
    assert np.array_equal(got, np.clip(x, -2, 3))
    with pytest.raises(RewriteError, match="not an integer"):
        make_block("scale", {"factor": 0.5}, elem_type=TensorProto.INT64, opset=17)
    with pytest.raises(RewriteError, match="opset >= 12"):
        make_block("clip", {"min": 0}, elem_type=TensorProto.INT32, opset=11)
    with pytest.raises(RewriteError, match="does not accept int64"):
        make_block("softmax", {}, elem_type=TensorProto.INT64, opset=17)


def test_parse_op():
    assert parse_op("reduce_mean:axes=1|2,keepdims=0") == ("reduce_mean", {"axes": [1, 2], "keepdims": 0})
    assert parse_op("l2_normalize:axis=-1") == ("l2_normalize", {"axis": -1})
    assert parse_op("clip:min=0,max=6") == ("clip", {"min": 0.0, "max": 6.0})
    assert parse_op("identity") == ("identity", {})
    assert parse_op(" scale : factor = 2 ") == ("scale", {"factor": 2.0})


@pytest.mark.parametrize(("text", "pattern"), [
    ("l2norm", r"unknown processing block 'l2norm'; valid blocks: clip, global_avg_pool"),
    ("softmax:dim=1", r"no parameter 'dim'; its parameters: axis"),
    ("identity:x=1", r"no parameter 'x'; its parameters: none"),
    ("softmax:axis=one", r"'axis' of block 'softmax' must be an integer"),
    ("softmax:axis=1.5", r"must be an integer"),
    ("reduce_mean:axes=1|b", r"integers separated by '\|'"),
    ("reduce_mean:keepdims=2", r"must be 0 or 1"),
    ("scale", r"needs parameter 'factor'"),
    ("scale:factor=nan", r"finite number"),
    ("clip:min=6,max=0", r"min=6.0 > max=0.0"),
    ("softmax:axis", r"cannot parse 'axis'"),
    ("softmax:axis=1,axis=2", r"given twice"),
])
def test_parse_op_errors_name_the_valid_choices(text, pattern):
    with pytest.raises(UsageError, match=pattern):
        parse_op(text)


def test_make_block_refusals():
    with pytest.raises(UsageError, match="valid blocks"):
        make_block("nope", {}, elem_type=TensorProto.FLOAT, opset=17)
    with pytest.raises(RewriteError, match="rank >= 3"):
        make_block("global_avg_pool", {}, elem_type=TensorProto.FLOAT, opset=17, shape=[2, 3])
    with pytest.raises(RewriteError, match=r"axis=2 is out of range for a rank-2"):
        make_block("softmax", {"axis": 2}, elem_type=TensorProto.FLOAT, opset=17, shape=[2, 3])
    with pytest.raises(RewriteError, match="supported opsets are 8"):
        make_block("l2_normalize", {}, elem_type=TensorProto.FLOAT, opset=5)
    with pytest.raises(RewriteError, match="dtype, which is unknown"):
        make_block("identity", {}, elem_type=TensorProto.UNDEFINED, opset=17)


def test_every_builtin_block_is_covered():
    assert {name for name, _, _ in CASES} == set(BUILTIN_BLOCKS)


def test_make_block_is_deterministic():
    a = make_block("l2_normalize", {"axis": 1}, elem_type=TensorProto.FLOAT, opset=18, shape=["N", 3])
    b = make_block("l2_normalize", {"axis": "1"}, elem_type=TensorProto.FLOAT, opset=18, shape=["N", 3])
    assert a.SerializeToString(deterministic=True) == b.SerializeToString(deterministic=True)
