"""Fast paths decide exactly as the slow paths they replace. The cheap tensor check on load
(:func:`onnxsurgeon.external.check_tensors`) must decide exactly
as the one-by-one exact check does: same tensor refused first, same message, nothing let through.

Each case puts one damaged tensor after many good ones of the same dtype and shape, so the fast
path (cached per shape, proved by the serialized size) is what meets it.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, numpy_helper

from onnxsurgeon.errors import SurgeryError
from onnxsurgeon.external import check_inline_tensor, check_tensors


def _good(i: int) -> TensorProto:
    return numpy_helper.from_array(np.full((4, 4), i, np.float32), f"w{i}")


def _raw_too_long(t: TensorProto) -> None:
    t.raw_data = t.raw_data + b"\0\0\0\0"


def _raw_too_short(t: TensorProto) -> None:
    t.raw_data = t.raw_data[:-4]


def _raw_and_typed(t: TensorProto) -> None:
    t.float_data.append(1.0)


def _segment(t: TensorProto) -> None:
    t.segment.begin = 0
    t.segment.end = 4


def _harmless_doc(t: TensorProto) -> None:
    t.doc_string = "fine: any other field only sends the tensor to the exact check"


def _unicode_name(t: TensorProto) -> None:
    t.name = "w\u00e9ight"


def _no_raw_typed_ok(t: TensorProto) -> None:
    t.ClearField("raw_data")
    t.float_data.extend([0.0] * 16)


def _no_raw_typed_short(t: TensorProto) -> None:
    t.ClearField("raw_data")
    t.float_data.extend([0.0] * 15)


def _empty_name_set(t: TensorProto) -> None:
    t.name = ""


def _negative_dim(t: TensorProto) -> None:
    t.dims[0] = -4


def _string_with_raw(t: TensorProto) -> None:
    t.data_type = TensorProto.STRING


def _unknown_dtype(t: TensorProto) -> None:
    t.data_type = 999


def _long_name(t: TensorProto) -> None:
    t.name = "w" * 200  # its length takes two varint bytes: the size rule must still match


def _raw_short_doc_makes_up(t: TensorProto) -> None:
    t.raw_data = t.raw_data[:-4]
    t.doc_string = "ab"  # 4 bytes more: the same serialized size as a good tensor


@pytest.mark.parametrize("damage", [
    _raw_too_long, _raw_too_short, _raw_and_typed, _segment, _harmless_doc, _unicode_name,
    _no_raw_typed_ok, _no_raw_typed_short, _empty_name_set, _negative_dim, _string_with_raw,
    _unknown_dtype, _long_name, _raw_short_doc_makes_up,
], ids=lambda f: f.__name__.strip("_"))
@pytest.mark.parametrize("where", [0, 1, 7])
def test_fast_check_decides_as_the_exact_check(damage, where):
    tensors = [_good(i) for i in range(8)]
    damage(tensors[where])
    expected: str | None = None
    for t in tensors:  # the reference: the exact check, one tensor after another
        try:
            check_inline_tensor(t)
        except SurgeryError as exc:
            expected = str(exc)
            break
    if expected is None:
        check_tensors(tensors, None)
    else:
        with pytest.raises(SurgeryError) as got:
            check_tensors(tensors, None)
        assert str(got.value) == expected


def test_fast_check_covers_every_shape_and_dtype_seen():
    """Many shapes and dtypes, each seen several times: all pass, and a raw_data one byte off
    in the last tensor of a shape already cached is refused."""
    tensors = []
    for k, dtype in enumerate((np.float32, np.float16, np.int64, np.int8, np.bool_, np.float64)):
        for shape in ((), (1,), (3, 5), (0, 7), (2, 3, 4)):
            for i in range(3):
                tensors.append(numpy_helper.from_array(np.zeros(shape, dtype), f"t{k}_{shape}_{i}"))
    check_tensors(tensors, None)
    tensors[-1].raw_data = tensors[-1].raw_data + b"\0"
    with pytest.raises(SurgeryError, match="holds"):
        check_tensors(tensors, None)


@pytest.mark.parametrize("bases", [
    ["copy/a", "copy/b", "copy/c"],            # the bulk path
    ["copy/a", "x", "copy/b"],                 # 'x' is taken: sequential path
    ["copy/a", "copy/a", "copy/b"],            # repeated base
    ["copy/a", "", "copy/b"],                  # empty base
    ["x__1", "x", "x"],                        # suffixes colliding with handed-out names
])
def test_fresh_many_equals_fresh_one_by_one(bases):
    from onnxsurgeon.names import NameAllocator

    taken = ["x", "y", "x__2"]
    one_by_one = NameAllocator(taken)
    bulk = NameAllocator(taken)
    assert bulk.fresh_many(bases) == [one_by_one.fresh(b) for b in bases]
    assert bulk.fresh("x") == one_by_one.fresh("x")  # same state afterwards


@pytest.mark.parametrize("build", ["tiny_cnn", "tied_weights", "if_capture", "loop_capture",
                                   "local_function", "init_as_input"])
def test_uses_of_equals_the_consumers_map(build):
    """The one-tensor scan insert and reroute use gives exactly the full map's entry (slots,
    reads inside nested bodies, node order), for every tensor of the main graph."""
    from onnxsurgeon.index import GraphIndex
    from tests import builders

    model = getattr(builders, build)()
    names = set(GraphIndex(model).tensor_names()) | {"no_such_tensor"}
    for name in sorted(names):
        scanned = GraphIndex(model).uses_of(name)  # fresh index: the map is not built
        assert scanned == GraphIndex(model).consumers.get(name, []), name


@pytest.mark.parametrize("blocks", [1, 7])
def test_quick_types_equal_onnx_shape_inference(blocks):
    """The cheap step the TypeOracle of insert/reroute asks first agrees with onnx inference on
    every node output of a chain, and declines (None) where it cannot tell."""
    import onnx

    from onnxsurgeon.index import GraphIndex
    from onnxsurgeon.surgery._proto import quick_value_info
    from tests import builders

    model = builders.chain(blocks)
    index = GraphIndex(model)
    inferred = {vi.name: vi for vi in onnx.shape_inference.infer_shapes(model).graph.value_info}
    inferred.update({vi.name: vi for vi in model.graph.output})
    for node in model.graph.node:
        for out in node.output:
            quick = quick_value_info(index, out)
            assert quick is not None and quick.type == inferred[out].type, out
    assert quick_value_info(index, "x") is None  # a graph input: not a node output
    cnn = builders.tiny_cnn()  # Conv is outside the cheap pass's op set
    conv_out = cnn.graph.node[0].output[0]
    assert quick_value_info(GraphIndex(cnn), conv_out) is None


def test_handed_over_model_reuses_loads_map_and_extracts_the_same_bytes(tmp_path):
    """A weight-heavy model keeps no bytes for the freshness proof; declared untouched by its
    loader (the CLI), extract walks load's int edges and writes exactly what a rebuilt index
    gives."""
    import onnx

    from onnxsurgeon.io import indexed, load, save
    from onnxsurgeon.session import Session
    from onnxsurgeon.surgery import extract
    from tests.test_copy_record import chain_distinct

    src = tmp_path / "heavy.onnx"
    onnx.save(chain_distinct(40, width=16), str(src))
    plain = load(src)
    assert plain._fresh is not None and plain._fresh[0] is None  # no proof possible
    assert indexed(plain).edges is None  # so a library caller gets a rebuilt index
    with Session(load(src), loaded=True) as trusted:
        index = trusted.index()
        assert index.edges is not None
        from onnxsurgeon.index import GraphIndex

        assert index.producer == GraphIndex(trusted.model.proto).producer
        assert trusted.index().edges is None  # used at most once
    a = load(src)
    extract(a, ["relu19"])
    with Session(load(src), loaded=True) as session:
        b = session.model
        extract(b, ["relu19"])
    assert save(a, tmp_path / "a.onnx").read_bytes() == save(b, tmp_path / "b.onnx").read_bytes()
