"""Generate the corpus of malicious and malformed ONNX files of issue 5 into a folder.

Usage:  python tests/make_malicious.py OUT_DIR        (prints one line per case)
Tests:  ``make_corpus(tmp_path)`` returns the :class:`Case` list; nothing binary is committed.

Layout::

    OUT_DIR/secret.bin               a file OUTSIDE every model folder (must never be read)
    OUT_DIR/cases/<name>/model.onnx  one case per folder, with whatever data files/links it needs

Every case is expected to fail ``onnxsurgeon.load`` with ``Case.error`` and a one-line message
containing every word of ``Case.words``. The generator is deterministic.
"""

from __future__ import annotations

import os
import pickle
import random
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SECRET = b"TOP-SECRET-0123456789abcdef" * 4  # 108 bytes
F = TensorProto.FLOAT
OPSET = 17


@dataclass(frozen=True)
class Case:
    """One malicious file: ``path`` must be refused with ``error`` naming every ``words``."""

    name: str
    path: Path
    error: str  # class name in onnxsurgeon.errors
    words: tuple[str, ...]
    section: int  # numbered case of issue 5


# ------------------------------------------------------------------------------ base models
def _mul_model(weight: TensorProto) -> onnx.ModelProto:
    """y = x * W with W[4] float (W usually external)."""
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "W"], ["y"], name="mul")], "victim",
        [helper.make_tensor_value_info("x", F, [4])],
        [helper.make_tensor_value_info("y", F, [4])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    return model


def _external_weight(entries: list[tuple[str, str]], *, name: str = "W", dims=(4,),
                     dtype: int = F) -> TensorProto:
    t = TensorProto()
    t.name = name
    t.data_type = dtype
    t.dims.extend(dims)
    t.data_location = TensorProto.EXTERNAL
    for key, value in entries:
        e = t.external_data.add()
        e.key, e.value = key, value
    return t


def _inline(raw: bytes | None = None, *, dims=(4,), dtype: int = F, floats=None,
            strings=None) -> TensorProto:
    t = TensorProto()
    t.name = "W"
    t.data_type = dtype
    t.dims.extend(dims)
    if raw is not None:
        t.raw_data = raw
    if floats is not None:
        t.float_data.extend(floats)
    if strings is not None:
        t.string_data.extend(strings)
    return t


def _graph_model(nodes, inputs, outputs, inits=(), *, functions=(), extra_opsets=()):
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(n, F, [4]) for n in inputs],
        [helper.make_tensor_value_info(n, F, [4]) for n in outputs],
        list(inits),
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET), *extra_opsets],
        functions=list(functions),
    )
    model.ir_version = 8
    return model


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _nested_if(depth: int) -> bytes:
    """Serialized model: an If whose then-branch holds an If ... ``depth`` levels deep.

    Written as raw protobuf bytes level by level (python protobuf itself refuses to build
    messages this deep), so deeper-than-parseable files can be produced too.
    """
    vi = lambda name: _field(1, name.encode())  # noqa: E731  ValueInfoProto.name
    leaf = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["o0"], name="leaf")], "level0", [],
        [helper.make_tensor_value_info("o0", F, [4])],
    )
    graph = leaf.SerializeToString()
    else_g = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["e"], name="else")], "else", [],
        [helper.make_tensor_value_info("e", F, [4])],
    ).SerializeToString()
    for level in range(1, depth + 1):
        then_attr = _field(1, b"then_branch") + _varint(20 << 3) + _varint(5) + _field(6, graph)
        else_attr = _field(1, b"else_branch") + _varint(20 << 3) + _varint(5) + _field(6, else_g)
        node = (_field(1, b"c") + _field(2, f"o{level}".encode()) + _field(3, f"if{level}".encode())
                + _field(4, b"If") + _field(5, then_attr) + _field(5, else_attr))
        graph = _field(1, node) + _field(2, f"level{level}".encode()) + _field(12, vi(f"o{level}"))
    top = onnx.GraphProto()
    top.input.extend([helper.make_tensor_value_info("x", F, [4]),
                      helper.make_tensor_value_info("c", TensorProto.BOOL, [])])
    head = helper.make_model(helper.make_graph([], "unused", [], []),
                             opset_imports=[helper.make_opsetid("", OPSET)])
    head.ir_version = 8
    head.ClearField("graph")
    # graph = the outermost level (its node is if<depth>) plus the main inputs
    main = graph + top.SerializeToString()
    return head.SerializeToString() + _field(7, main)


def _functions(mutual: bool) -> onnx.ModelProto:
    if mutual:
        fa = helper.make_function("local", "A", ["X"], ["Y"],
                                  [helper.make_node("B", ["X"], ["Y"], domain="local")],
                                  opset_imports=[helper.make_opsetid("", OPSET),
                                                 helper.make_opsetid("local", 1)])
        fb = helper.make_function("local", "B", ["X"], ["Y"],
                                  [helper.make_node("A", ["X"], ["Y"], domain="local")],
                                  opset_imports=[helper.make_opsetid("", OPSET),
                                                 helper.make_opsetid("local", 1)])
        fns = [fa, fb]
    else:
        fns = [helper.make_function("local", "A", ["X"], ["Y"],
                                    [helper.make_node("Relu", ["X"], ["R"]),
                                     helper.make_node("A", ["R"], ["Y"], domain="local")],
                                    opset_imports=[helper.make_opsetid("", OPSET),
                                                   helper.make_opsetid("local", 1)])]
    return _graph_model([helper.make_node("A", ["x"], ["y"], name="call", domain="local")],
                        ["x"], ["y"], functions=fns, extra_opsets=[helper.make_opsetid("local", 1)])


class _Pwn:
    """Unpickling this would create the marker file: proof that nothing unpickles."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


# ---------------------------------------------------------------------------------- corpus
def make_corpus(out_dir: str | os.PathLike[str]) -> list[Case]:
    """Write every malicious case under ``out_dir``; return their descriptions."""
    root = Path(out_dir)
    (root / "cases").mkdir(parents=True, exist_ok=True)
    secret = root / "secret.bin"
    secret.write_bytes(SECRET)
    cases: list[Case] = []
    good_bytes = np.arange(4, dtype=np.float32).tobytes()

    def folder(name: str) -> Path:
        d = root / "cases" / name
        d.mkdir(parents=True, exist_ok=True)
        return d

    def add(name, model_or_bytes, error, words, section, *, data: bytes | None = good_bytes):
        d = folder(name)
        if data is not None and not (d / "data.bin").exists() and not (d / "data.bin").is_symlink():
            (d / "data.bin").write_bytes(data)
        path = d / "model.onnx"
        blob = (model_or_bytes if isinstance(model_or_bytes, bytes)
                else model_or_bytes.SerializeToString())
        path.write_bytes(blob)
        cases.append(Case(name, path, error, tuple(words), section))

    def ext(name, entries, words, *, error="UnsafeModelError", section=1, **kw):
        add(name, _mul_model(_external_weight(entries, **kw)), error, words, section)

    ok_len = ("length", "16")
    # ---- 1. locations
    ext("absolute", [("location", str(secret)), ok_len], ["absolute"])
    ext("dotdot", [("location", "../../secret.bin"), ok_len], [".."])
    ext("dotdot_inner", [("location", "sub/../../../secret.bin"), ok_len], [".."])
    ext("dotdot_backslash", [("location", "..\\..\\secret.bin"), ok_len], [".."])
    ext("drive_letter", [("location", "C:/Windows/secret.bin"), ok_len], ["drive"])
    ext("drive_relative", [("location", "C:secret.bin"), ok_len], ["drive"])
    ext("unc", [("location", "\\\\server\\share\\secret.bin"), ok_len], ["unc"])
    ext("unc_slash", [("location", "//server/share/secret.bin"), ok_len], ["unc"])
    ext("empty_location", [("location", ""), ok_len], ["empty"])
    ext("no_location", [ok_len], ["empty"])
    ext("nul_byte", [("location", "data.bin\x00.txt"), ok_len], ["nul"])
    ext("ort_memory", [("location", "*/_ORT_MEM_ADDR_/*"), ("offset", "140737488355328"),
                       ok_len], ["in-memory"])
    ext("missing_file", [("location", "nothere.bin"), ok_len], ["does not exist"])
    ext("stream_name", [("location", "data.bin:secret"), ok_len], ["':'"])
    d = folder("symlink_file")
    os.symlink(os.path.relpath(secret, d), d / "data.bin")
    ext("symlink_file", [("location", "data.bin"), ok_len], ["symbolic link"])
    d = folder("symlink_dir")
    os.symlink(os.path.relpath(root, d), d / "sub")
    ext("symlink_dir", [("location", "sub/secret.bin"), ok_len], ["symbolic link"])
    d = folder("symlink_inside")
    (d / "real.bin").write_bytes(good_bytes)
    os.symlink("real.bin", d / "data.bin")
    ext("symlink_inside", [("location", "data.bin"), ok_len], ["symbolic link"])
    d = folder("hardlink")
    os.link(secret, d / "data.bin")
    ext("hardlink", [("location", "data.bin"), ("length", str(len(SECRET)))], ["hard links"],
        dims=(len(SECRET) // 4,))
    d = folder("directory")
    (d / "adir").mkdir()
    ext("directory", [("location", "adir"), ok_len], ["not", "file"])
    d = folder("fifo")
    os.mkfifo(d / "pipe")
    ext("fifo", [("location", "pipe"), ok_len], ["regular file"])
    # ---- 2. offsets, lengths, keys
    loc = ("location", "data.bin")
    ext("offset_negative", [loc, ("offset", "-4"), ok_len], ["offset", "non-negative"], section=2)
    ext("offset_text", [loc, ("offset", "abc"), ok_len], ["offset"], section=2)
    ext("offset_unicode_digit", [loc, ("offset", "\u00b2"), ok_len], ["offset"], section=2)
    ext("offset_huge", [loc, ("offset", "9" * 40), ok_len], ["offset"], section=2)
    ext("offset_past_eof", [loc, ("offset", "64"), ok_len], ["truncated"], section=2)
    ext("length_past_eof", [loc, ("length", "32")], ["32"], error="InvalidModelError",
        section=2, dims=(8,))
    ext("length_negative", [loc, ("length", "-16")], ["length"], section=2)
    ext("length_missing", [loc], ["length"], section=2)
    ext("length_mismatch", [loc, ("length", "8")], ["declares", "8"],
        error="InvalidModelError", section=2)
    ext("unknown_key", [loc, ok_len, ("evil", "x")], ["unknown external_data key"], section=2)
    ext("duplicate_key", [loc, loc, ok_len], ["repeats"], section=2)
    ext("basepath", [loc, ok_len, ("basepath", "/etc")], ["basepath"], section=2)
    ext("string_external", [loc, ok_len], ["string"], section=2, dtype=TensorProto.STRING)
    # ---- 3. inline data
    add("raw_short", _mul_model(_inline(b"\0" * 8)), "InvalidModelError", ["16 bytes", "8"], 3)
    add("raw_long", _mul_model(_inline(b"\0" * 20)), "InvalidModelError", ["20"], 3)
    add("dims_negative", _mul_model(_inline(b"", dims=(-4,))), "InvalidModelError",
        ["negative"], 3)
    add("dims_overflow", _mul_model(_inline(b"\0" * 16, dims=(2**40, 2**40, 2**40))),
        "InvalidModelError", ["more elements"], 3)
    add("dims_int64_max", _mul_model(_inline(b"\0" * 16, dims=(2**63 - 1,))),
        "InvalidModelError", ["more elements"], 3)
    add("string_raw", _mul_model(_inline(b"abcd", dtype=TensorProto.STRING)),
        "InvalidModelError", ["raw_data"], 3)
    add("typed_short", _mul_model(_inline(floats=[1.0, 2.0])), "InvalidModelError",
        ["float_data"], 3)
    add("typed_huge_shape", _mul_model(_inline(floats=[1.0], dims=(1 << 30, 4))),
        "InvalidModelError", ["float_data"], 3)
    add("unknown_dtype", _mul_model(_inline(b"\0" * 16, dtype=999)), "InvalidModelError",
        ["unknown data type"], 3)
    add("raw_and_typed", _mul_model(_inline(b"\0" * 16, floats=[1.0, 2.0, 3.0, 4.0])),
        "InvalidModelError", ["both"], 3)
    # ---- 4. not a model
    valid = _mul_model(numpy_helper.from_array(np.ones(4, np.float32), "W")).SerializeToString()
    add("truncated", valid[: len(valid) // 2], "InvalidModelError", ["not an onnx model"], 4)
    add("truncated_one_byte", valid[:-1], "InvalidModelError", ["onnx"], 4)
    add("empty", b"", "InvalidModelError", ["empty"], 4)
    rng = random.Random(5)
    add("random_bytes", bytes(rng.getrandbits(8) for _ in range(4096)), "InvalidModelError",
        ["onnx"], 4)
    add("text", b"hello, this is not a model\n" * 10, "InvalidModelError", ["onnx"], 4)
    marker = str(root / "PWNED")
    add("pickle", pickle.dumps(_Pwn(marker)), "InvalidModelError", ["onnx"], 4)
    add("zip", b"PK\x03\x04" + bytes(200), "InvalidModelError", ["onnx"], 4)
    add("no_graph", onnx.ModelProto(ir_version=8).SerializeToString(), "InvalidModelError",
        ["no onnx graph"], 4)
    no_opset = onnx.ModelProto()
    no_opset.CopyFrom(onnx.load_from_string(valid))
    del no_opset.opset_import[:]
    add("no_opset", no_opset, "InvalidModelError", ["opset_import"], 4)
    # ---- 5. structure
    R = helper.make_node
    add("cycle", _graph_model([R("Relu", ["b"], ["a"], name="relu_a"),
                               R("Add", ["x", "a"], ["b"], name="add_b"),
                               R("Relu", ["a"], ["y"], name="out")], ["x"], ["y"]),
        "InvalidModelError", ["cycle", "relu_a", "add_b"], 5)
    add("self_loop", _graph_model([R("Add", ["x", "a"], ["a"], name="selfish"),
                                   R("Relu", ["a"], ["y"], name="out")], ["x"], ["y"]),
        "InvalidModelError", ["cycle", "selfish"], 5)
    add("dangling", _graph_model([R("Add", ["x", "ghost"], ["y"], name="add")], ["x"], ["y"]),
        "InvalidModelError", ["ghost", "never produced"], 5)
    add("dangling_output", _graph_model([R("Relu", ["x"], ["y"], name="r")], ["x"],
                                        ["y", "phantom"]),
        "InvalidModelError", ["phantom", "never produced"], 5)
    add("two_producers", _graph_model([R("Relu", ["x"], ["y"], name="p1"),
                                       R("Neg", ["x"], ["y"], name="p2")], ["x"], ["y"]),
        "InvalidModelError", ["produced twice", "p1", "p2"], 5)
    add("produces_input", _graph_model([R("Relu", ["x"], ["x"], name="p1"),
                                        R("Neg", ["x"], ["y"], name="p2")], ["x"], ["y"]),
        "InvalidModelError", ["produced twice", "'x'"], 5)
    add("duplicate_input", _graph_model([R("Relu", ["x"], ["y"], name="r")], ["x", "x"], ["y"]),
        "InvalidModelError", ["input 'x' twice"], 5)
    add("duplicate_output", _graph_model([R("Relu", ["x"], ["y"], name="r")], ["x"], ["y", "y"]),
        "InvalidModelError", ["output 'y' twice"], 5)
    w = numpy_helper.from_array(np.ones(4, np.float32), "W")
    add("duplicate_initializer", _graph_model([R("Mul", ["x", "W"], ["y"], name="m")], ["x"],
                                              ["y"], [w, w]),
        "InvalidModelError", ["two initializers", "'W'"], 5)
    shadow_branch = helper.make_graph(
        [R("Relu", ["x"], ["a"], name="inner")], "then", [],
        [helper.make_tensor_value_info("a", F, [4])])
    add("shadowing", _graph_model(
        [R("Relu", ["x"], ["a"], name="outer"),
         R("If", ["c"], ["y"], name="branch", then_branch=shadow_branch, else_branch=shadow_branch)],
        ["x", "c"], ["y"]), "InvalidModelError", ["shadows", "'a'"], 5)
    # ---- 6. nesting and recursion
    add("nesting_33", _nested_if(33), "InvalidModelError", ["nest"], 6)
    add("nesting_1000", _nested_if(1000), "InvalidModelError", ["nest"], 6)
    add("recursive_function", _functions(mutual=False), "InvalidModelError",
        ["recursively", "local.A"], 6)
    add("mutual_recursion", _functions(mutual=True), "InvalidModelError",
        ["recursively", "local.A", "local.B"], 6)
    return cases


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tests/make_malicious.py OUT_DIR")
    for case in make_corpus(sys.argv[1]):
        print(f"{case.section}  {case.name:24s} {case.error:18s} {case.path}")
