"""load's initializer and node passes read in C from the model's bytes (onnxsurgeon/_scan.c).

The extension must give exactly what the Python passes give, or nothing (the caller then runs
them): these tests load every model both ways (``ONNXSURGEON_SCAN=0`` is the Python pass) and
compare everything load hands on, or the one-line error it raises. The models: the bundled ones,
the builders' (subgraphs, captures, local functions, initializers listed as inputs), protobuf
encodings that protobuf's own objects read in a particular way (a field given twice, unknown
fields, known fields with another wire type, packed dims, the graph field split in two, groups),
damaged tensors and names, and bytes mutated at random by Hypothesis. Other tests prove that the
C pass is the one that ran, and the load tests run again with it switched off.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from onnx import TensorProto

from onnxsurgeon import scan
from onnxsurgeon.errors import SurgeryError
from onnxsurgeon.io import load
from onnxsurgeon.nodefields import EDGE_FIELD_NAMES, EDGE_FIELD_NUMBERS

from . import builders

ROOT = Path(__file__).resolve().parent.parent

BUILT = scan._scan is not None
need_built = pytest.mark.skipif(
    not BUILT and not os.environ.get("CI"),
    reason="onnxsurgeon._scan is not built here (no C compiler at install)")


def test_the_extension_is_built_in_ci():
    """CI installs with a compiler: a missing extension there is a build failure, not a skip
    (else every test below would silently compare the Python pass with itself)."""
    if os.environ.get("CI"):
        assert BUILT, "onnxsurgeon._scan did not build; see pip's output for _scan.c"
    elif not BUILT:
        pytest.skip("not built here")


@need_built
def test_the_extension_is_not_older_than_its_source():
    """An editable install builds the extension next to its source, once: after an edit of
    _scan.c the tests would run the old build."""
    built = Path(scan._scan.__file__)
    source = ROOT / "onnxsurgeon" / "_scan.c"
    if built.parent != source.parent:
        pytest.skip("installed elsewhere (not an editable install)")
    assert built.stat().st_mtime >= source.stat().st_mtime, (
        "onnxsurgeon/_scan.c changed after the extension was built; run pip install -e . again")


# ------------------------------------------------------------------ what load hands on
def _state(path: Path) -> tuple:
    """Everything load computes that a later step reads, or the error it raised."""
    try:
        model = load(path)
    except SurgeryError as exc:
        return ("refused", type(exc).__name__, str(exc))
    fresh = model._fresh
    handed: tuple = ()
    if fresh is not None:
        data, producers, edges, listed = fresh
        handed = (data is not None, list(producers.items()),
                  edges, edges.init_types if edges is not None else None,
                  listed is None or _reads_as_protobuf(listed, model.proto.graph))
    return ("loaded", list(model.warnings), model._externals, handed,
            model.proto.SerializeToString(deterministic=True))


def _reads_as_protobuf(listed: scan.ValueInfos, graph: onnx.GraphProto) -> bool:
    """The value_info entries the C pass read are protobuf's: the same names, each type
    parsed from its bytes equal to the entry's, and any subset of them picked from the bytes
    parses into exactly those entries."""
    entries = list(graph.value_info)
    if listed.names != [vi.name for vi in entries] or [
            onnx.TypeProto.FromString(t) for t in listed.types] != [vi.type for vi in entries]:
        return False
    if listed.data is None:  # a weight-heavy model: load kept no bytes, so none are picked
        return listed.entries(bytes(len(entries))) is None
    for keep in ([k % 2 for k in range(len(entries))], [1] * len(entries)):
        picked = listed.entries(bytes(keep))
        rebuilt = onnx.GraphProto()
        rebuilt.MergeFromString(picked if picked is not None else b"!")
        if list(rebuilt.value_info) != [vi for vi, k in zip(entries, keep, strict=True) if k]:
            return False
    return True


def _both(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[tuple, tuple, int]:
    """load's answer with the C pass and without it, and how many C passes answered."""
    answered = 0
    real_nodes, real_inits = scan.nodes, scan.initializers

    def counted(real):
        def wrapper(*args):
            nonlocal answered
            out = real(*args)
            answered += out is not None
            return out
        return wrapper

    monkeypatch.setattr(scan, "nodes", counted(real_nodes))
    monkeypatch.setattr(scan, "initializers", counted(real_inits))
    monkeypatch.delenv(scan.SCAN_ENV, raising=False)
    with_c = _state(path)
    monkeypatch.setenv(scan.SCAN_ENV, "0")
    without = _state(path)
    monkeypatch.delenv(scan.SCAN_ENV)
    return with_c, without, answered


def _write(tmp_path: Path, data: bytes, name: str = "m.onnx") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


# ------------------------------------------------------------------ protobuf by hand
def _varint(v: int) -> bytes:
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(number: int, payload: bytes | int, wire: int = 2) -> bytes:
    tag = _varint(number << 3 | wire)
    if wire == 0:
        return tag + _varint(int(payload))  # type: ignore[arg-type]
    assert isinstance(payload, bytes)
    return tag + _varint(len(payload)) + payload


def _text(number: int, value: str | bytes) -> bytes:
    return _field(number, value.encode() if isinstance(value, str) else value)


def _node(inputs=(), outputs=(), name=None, op="Relu", domain=None, extra=b"") -> bytes:
    out = b"".join(_text(1, i) for i in inputs) + b"".join(_text(2, o) for o in outputs)
    if name is not None:
        out += _text(3, name)
    out += _text(4, op)
    if domain is not None:
        out += _text(7, domain)
    return out + extra


def _value_info(name: str, dims=(4,)) -> bytes:
    shape = b"".join(_field(1, _field(1, d, 0)) for d in dims)
    tensor_type = _field(1, TensorProto.FLOAT, 0) + _field(2, shape)
    return _text(1, name) + _field(2, _field(1, tensor_type))


def _tensor(name: str, values: np.ndarray, extra: bytes = b"", packed: bool = False) -> bytes:
    dims = (_field(1, b"".join(_varint(d) for d in values.shape)) if packed and values.ndim
            else b"".join(_field(1, d, 0) for d in values.shape))
    return (dims + _field(2, TensorProto.FLOAT, 0) + _text(8, name)
            + _field(9, values.astype(np.float32).tobytes()) + extra)


def _model(nodes: list[bytes], inits: list[bytes] = (), inputs=("x",), outputs=("y",),
           graph_extra: bytes = b"", split_graph: bool = False) -> bytes:
    graph_parts = [b"".join(_field(1, n) for n in nodes), _text(2, "g"),
                   b"".join(_field(5, t) for t in inits),
                   b"".join(_field(11, _value_info(i)) for i in inputs),
                   b"".join(_field(12, _value_info(o)) for o in outputs), graph_extra]
    opset = _field(8, _text(1, "") + _field(2, 18, 0))
    head = _field(1, 8, 0) + opset
    if split_graph:  # protobuf merges the two: nodes from the first, the rest from the second
        return head + _field(7, graph_parts[0]) + _field(7, b"".join(graph_parts[1:]))
    return head + _field(7, b"".join(graph_parts))


W = np.arange(16, dtype=np.float32).reshape(4, 4) / 16
B = np.ones(4, np.float32)

HAND = {
    "plain": _model([_node(["x", "W"], ["m"], "mm", "MatMul"), _node(["m", "B"], ["a"], "ad", "Add"),
                     _node(["a"], ["y"], "r")], [_tensor("W", W), _tensor("B", B)]),
    "name given twice (the last wins)": _model(
        [_node(["x"], ["y"], "first", extra=_text(3, "second"))]),
    "op given twice": _model([_node(["x"], ["y"], op="Tanh", extra=_text(4, "Relu"))]),
    "unknown fields and known ones with another wire type": _model(
        [_node(["x"], ["y"], "n", extra=_field(99, 7, 0) + _field(1, 5, 0) + _field(2, 3, 0)
               + _field(5, 1, 0) + _field(98, b"\x01\x02\x03\x04", 5))],
        graph_extra=_field(1, 9, 0) + _field(5, 1, 0)),
    "outputs written before inputs": _model(
        [_field(2, b"m") + _field(1, b"x") + _text(4, "Relu"), _node(["m"], ["y"])]),
    "a node reading its own output": _model(
        [_field(2, b"y") + _field(1, b"y") + _text(4, "Relu")]),
    "a node reading a later output": _model([_node(["m"], ["y"]), _node(["x"], ["m"])]),
    "two producers of one name": _model([_node(["x"], ["y"]), _node(["x"], ["y"])]),
    "an empty single output": _model([_node(["x"], [""]), _node(["x"], ["y"])]),
    "several outputs, some empty": _model(
        [_node(["x"], ["y", "", "z", ""], op="Split"), _node(["z"], ["w"])], outputs=("y",)),
    "no outputs at all": _model([_node(["x"], [], op="Print"), _node(["x"], ["y"])]),
    "a custom domain": _model([_node(["x"], ["y"], op="Cust", domain="my.dom")]),
    "no name, no op": _model([_field(1, b"x") + _field(2, b"y")]),
    "a dangling read": _model([_node(["x", "ghost"], ["y"], op="Add")]),
    "an initializer read as input too": _model(
        [_node(["x", "W"], ["y"], op="MatMul")], [_tensor("W", W)], inputs=("x", "W")),
    "the graph field split in two": _model(
        [_node(["x", "W"], ["y"], op="MatMul")], [_tensor("W", W)], split_graph=True),
    "an unknown group in a node": _model(
        [_node(["x"], ["y"], extra=_varint(97 << 3 | 3) + _field(1, 5, 0) + _varint(97 << 3 | 4))]),
    "an unknown group in the graph": _model(
        [_node(["x"], ["y"])], graph_extra=_varint(97 << 3 | 3) + _varint(97 << 3 | 4)),
    "packed dims": _model([_node(["x", "W"], ["y"], op="MatMul")], [_tensor("W", W, packed=True)]),
    "an empty packed dims field (a scalar)": _model(
        [_node(["x", "S"], ["y"], op="Mul")],
        [_field(1, b"") + _field(2, 1, 0) + _text(8, "S") + _field(9, B.tobytes()[:4])]),
    "dims split by another field": _model(
        [_node(["x", "W"], ["y"], op="MatMul")],
        [_field(1, 4, 0) + _text(8, "W") + _field(1, 4, 0) + _field(2, 1, 0)
         + _field(9, W.tobytes())]),
    "data_type given twice": _model(
        [_node(["x", "W"], ["y"], op="MatMul")],
        [_tensor("W", W, extra=_field(2, TensorProto.DOUBLE, 0))]),
    "a short tensor after a good one of its kind": _model(
        [_node(["x", "W"], ["m"], op="MatMul"), _node(["m", "V"], ["y"], op="MatMul")],
        [_tensor("W", W), _field(1, 4, 0) + _field(1, 4, 0) + _field(2, 1, 0) + _text(8, "V")
         + _field(9, W.tobytes()[:-4])]),
    "typed data instead of raw_data": _model(
        [_node(["x", "B"], ["y"], op="Add")],
        [_field(1, 4, 0) + _field(2, 1, 0) + _text(8, "B")
         + _field(4, np.ones(4, np.float32).tobytes())]),
    "raw and typed data both": _model(
        [_node(["x", "B"], ["y"], op="Add")],
        [_tensor("B", B, extra=_field(4, np.ones(4, np.float32).tobytes()))]),
    "a nameless initializer": _model(
        [_node(["x", "B"], ["y"], op="Add")],
        [_field(1, 4, 0) + _field(2, 1, 0) + _field(9, B.tobytes())]),
    "a negative dim": _model(
        [_node(["x", "B"], ["y"], op="Add")],
        [_field(1, -4, 0) + _field(2, 1, 0) + _text(8, "B") + _field(9, B.tobytes())]),
    "a string tensor with raw_data": _model(
        [_node(["x", "B"], ["y"], op="Add")],
        [_field(1, 4, 0) + _field(2, TensorProto.STRING, 0) + _text(8, "B")
         + _field(9, B.tobytes())]),
    "an unknown data type": _model(
        [_node(["x", "B"], ["y"], op="Add")],
        [_field(1, 4, 0) + _field(2, 99, 0) + _text(8, "B") + _field(9, B.tobytes())]),
    "a 4-bit type": _model(
        [_node(["x", "B"], ["y"], op="Add")],
        [_field(1, 4, 0) + _field(2, TensorProto.INT4, 0) + _text(8, "B")
         + _field(9, b"\x11\x22")]),
    "a segment": _model(
        [_node(["x", "B"], ["y"], op="Add")],
        [_tensor("B", B, extra=_field(3, _field(1, 0, 0) + _field(2, 4, 0)))]),
    "two initializers of one name": _model(
        [_node(["x", "B"], ["y"], op="Add")], [_tensor("B", B), _tensor("B", B)]),
    "a node name that is not UTF-8": _model([_node(["x"], ["y"], name=b"n\xff")]),
    "an input name that is not UTF-8": _model([_node(["x", b"w\xff"], ["y"], op="Add")]),
    "an output name that is not UTF-8": _model([_node(["x"], [b"y\xc3"]), _node(["x"], ["y"])]),
    "an op that is not UTF-8": _model([_node(["x"], ["y"], op=b"Re\xedlu")]),
    "a domain that is not UTF-8": _model([_node(["x"], ["y"], domain=b"d\xff")]),
    "an initializer name that is not UTF-8": _model(
        [_node(["x", "B"], ["y"], op="Add")], [_tensor(b"B\xff".decode("latin-1"), B)]),
    "a surrogate in a name": _model([_node(["x"], ["y"], name=b"n\xed\xa0\x80")]),
    "an overlong encoding in a name": _model([_node(["x"], ["y"], name=b"n\xc0\xaf")]),
    "non-ASCII names": _model([_node(["x"], ["ü"], name="名前"), _node(["ü"], ["y"])]),
    "value_info entries": _model(
        [_node(["x"], ["m"]), _node(["m"], ["y"])],
        graph_extra=_field(13, _value_info("m")) + _field(13, _value_info("y", (4, 2)))
        + _field(13, _value_info("m", ()))),
    "a value_info entry without a type, one without a name": _model(
        [_node(["x"], ["m"]), _node(["m"], ["y"])],
        graph_extra=_field(13, _text(1, "m")) + _field(13, _value_info("", (2,)))),
    "a value_info name given twice, unknown fields": _model(
        [_node(["x"], ["m"]), _node(["m"], ["y"])],
        graph_extra=_field(13, _value_info("q") + _text(1, "m") + _field(9, 3, 0)
                           + _text(3, "doc"))),
    "a value_info type given twice (merged)": _model(
        [_node(["x"], ["m"]), _node(["m"], ["y"])],
        graph_extra=_field(13, _value_info("m") + _field(2, _field(1, _field(
            2, _field(1, _field(1, 7, 0))))))),
    "a value_info name that is not UTF-8": _model(
        [_node(["x"], ["m"]), _node(["m"], ["y"])],
        graph_extra=_field(13, _value_info("m")) + _field(13, _text(1, b"v\xff"))),
    "no nodes": _model([], outputs=("x",)),
}


@need_built
@pytest.mark.parametrize("case", sorted(HAND))
def test_hand_encoded_models_load_the_same_both_ways(tmp_path, monkeypatch, case):
    path = _write(tmp_path, HAND[case])
    with_c, without, _ = _both(path, monkeypatch)
    assert with_c == without


@need_built
def test_the_c_passes_answer_on_plain_bytes_and_step_aside_on_merged_ones(tmp_path, monkeypatch):
    """The C passes are the ones that ran on an ordinary model (both answered), and on a graph
    field given twice (which protobuf merges) both stepped aside."""
    _, _, answered = _both(_write(tmp_path, HAND["plain"]), monkeypatch)
    assert answered == 2
    _, _, answered = _both(_write(tmp_path, HAND["the graph field split in two"], "s.onnx"),
                           monkeypatch)
    assert answered == 0


@need_built
def test_the_value_info_pass_answers_on_plain_bytes_and_steps_aside_on_merged_ones(tmp_path):
    """load hands on the value_info entries read in C (what an index's ``type_bytes`` and a
    verb's dropping of entries read): on ordinary entries, none for an entry whose type
    protobuf merges from two fields or whose name is not text."""
    def listed(case: str) -> scan.ValueInfos | None:
        fresh = load(_write(tmp_path, HAND[case], f"{len(case)}.onnx"))._fresh
        assert fresh is not None
        return fresh[3]

    found = listed("value_info entries")
    assert found is not None and found.names == ["m", "y", "m"]
    assert found.types[0] is found.types[2] or found.types[0] != found.types[2]
    assert listed("a value_info entry without a type, one without a name").types[0] == b""
    assert listed("a value_info name given twice, unknown fields").names == ["m"]
    assert listed("a value_info type given twice (merged)") is None
    assert scan.value_info(HAND["a value_info name that is not UTF-8"]) is None  # load refuses
    assert found.entries(b"\x01") is None  # not one flag per entry
    # a weight-heavy model: the names and types are handed on, its bytes are not kept
    heavy = _model([_node(["x", "W"], ["m"], op="Add"), _node(["m"], ["y"])],
                   [_tensor("W", np.ones(4096, np.float32))],
                   graph_extra=_field(13, _value_info("m")))
    fresh = load(_write(tmp_path, heavy, "heavy.onnx"))._fresh
    assert fresh is not None and fresh[0] is None and fresh[3] is not None
    assert fresh[3].names == ["m"] and fresh[3].data is None and fresh[3].entries(b"\x01") is None


@need_built
def test_the_c_node_pass_reads_the_fields_it_is_handed():
    """_scan.c names no node field: it reads those nodefields.EDGE_FIELD_NUMBERS says (the one
    description validation and the index read too). Handed name and op_type swapped, it reads
    each as the other; handed input and output swapped, the node reads "y" and defines "x"."""
    data = _model([_node(["x"], ["y"], name="n", op="Relu")])
    numbers = dict(zip(EDGE_FIELD_NAMES, EDGE_FIELD_NUMBERS, strict=True))

    def scanned(**swap: str) -> tuple:
        given = dict(numbers)
        for a, b in swap.items():
            given[a], given[b] = numbers[b], numbers[a]
        first = {"x": -2, "": -1}
        preds, _, names, ops, *_ = scan._scan.scan_nodes(
            data, first, tuple(given[name] for name in EDGE_FIELD_NAMES))
        return preds, names, ops, first

    assert scanned() == ([-2], ["n"], ["Relu"], {"x": -2, "": -1, "y": 0})
    assert scanned(name="op_type") == ([-2], ["Relu"], ["n"], {"x": -2, "": -1, "y": 0})
    assert scanned(input="output")[0] == [None]  # "y" read before it is defined
    with pytest.raises(ValueError, match="distinct"):
        scan._scan.scan_nodes(data, {}, (1, 1, 5, 3, 4, 7))


def _builder_models() -> dict[str, onnx.ModelProto]:
    out = {name: getattr(builders, name)() for name in
           ("tiny_cnn", "tied_weights", "if_capture", "loop_capture", "local_function",
            "init_as_input", "if_defines_its_output")}
    out["chain"] = builders.chain(40)
    return out


@need_built
@pytest.mark.parametrize("name", sorted(_builder_models()))
def test_builder_models_load_the_same_both_ways(tmp_path, monkeypatch, name):
    path = tmp_path / "m.onnx"
    onnx.save(_builder_models()[name], str(path))
    with_c, without, answered = _both(path, monkeypatch)
    assert with_c[0] == "loaded" and with_c == without
    assert answered == 2


@need_built
@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "models").glob("*.onnx")))
def test_bundled_models_load_the_same_both_ways(monkeypatch, name):
    with_c, without, answered = _both(ROOT / "models" / name, monkeypatch)
    assert with_c[0] == "loaded" and with_c == without
    assert answered == 2


@need_built
def test_a_large_chain_of_distinct_weights_loads_the_same_both_ways(tmp_path, monkeypatch):
    """The benchmark's shape (a weight and a bias per block), where the initializer groups
    repeat: only the first tensor of each kind is checked exactly."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import run  # type: ignore[import-not-found]
    finally:
        sys.path.pop(0)
    proto = run.build_chain(400, distinct=True, width=8)
    path = tmp_path / "c.onnx"
    onnx.save(proto, str(path))
    data = path.read_bytes()
    names, types, exact = scan.initializers(data)
    assert names == [t.name for t in proto.graph.initializer]
    assert types == [(t.data_type, tuple(t.dims)) for t in proto.graph.initializer]
    assert exact == [0, 1]  # one (16x16-like) weight and one bias are checked exactly
    with_c, without, answered = _both(path, monkeypatch)
    assert with_c == without and answered == 2


@need_built
def test_a_bad_tensor_of_a_known_kind_is_still_refused(tmp_path, monkeypatch):
    """A tensor like an earlier good one but a byte short is listed for the exact check (its
    raw_data length differs), so it is refused with the same message."""
    path = _write(tmp_path, HAND["a short tensor after a good one of its kind"])
    with_c, without, _ = _both(path, monkeypatch)
    assert with_c == without
    assert with_c[0] == "refused" and "tensor 'V' declares shape [4, 4]" in with_c[2]


# ------------------------------------------------------------------ random damage
_SEEDS = {name: HAND[name] for name in ("plain", "several outputs, some empty",
                                        "an initializer read as input too")}
_SEEDS["if"] = builders.if_capture().SerializeToString()
_SEEDS["func"] = builders.local_function().SerializeToString()


@need_built
@settings(max_examples=400, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.filter_too_much])
@given(seed=st.sampled_from(sorted(_SEEDS)), edits=st.lists(
    st.tuples(st.floats(0, 1), st.sampled_from([0x00, 0x01, 0x0A, 0x12, 0x1A, 0x22, 0x2A, 0x3A,
                                                 0x7F, 0x80, 0xC3, 0xED, 0xFF])),
    min_size=1, max_size=3))
def test_randomly_damaged_bytes_load_the_same_both_ways(tmp_path, monkeypatch, seed, edits):
    """Bytes that protobuf still parses after random edits (bytes overwritten with field tags,
    lengths, varint continuations, UTF-8 lead bytes): the same model or the same refusal both
    ways."""
    data = bytearray(_SEEDS[seed])
    for where, byte in edits:
        data[min(int(where * len(data)), len(data) - 1)] = byte
    try:
        onnx.ModelProto().ParseFromString(bytes(data))
    except Exception:  # noqa: BLE001 - protobuf's own parse refuses: load refuses before any pass
        assume(False)
    path = _write(tmp_path, bytes(data), "f.onnx")
    with_c, without, answered = _both(path, monkeypatch)
    event(f"{with_c[0]}, {answered} C passes answered")
    assert with_c == without


# ------------------------------------------------------------------ the Python passes
LOAD_TESTS = ["tests/test_load_fastpaths.py", "tests/test_security.py", "tests/test_foundations.py",
              "tests/test_io.py", "tests/test_fuzz.py"]


@need_built
def test_the_load_tests_pass_with_the_c_passes_switched_off():
    """The Python passes stay the reference: load's own tests pass with ONNXSURGEON_SCAN=0."""
    env = dict(os.environ, **{scan.SCAN_ENV: "0"})
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                           "-k", "not over_2gb",  # 12 s of external-data streaming, no node pass
                           *LOAD_TESTS], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
