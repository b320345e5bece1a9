"""Property-based fuzzing of load -> query -> rewrite -> save on mutated builder models.

Hypothesis mutates valid models (rename / drop / duplicate nodes, inputs, outputs,
initializers and attributes; corrupt external_data fields, dims and dtypes; truncate or flip
bytes of the serialized file) and runs load, GraphIndex, closure, inspect, extract, copy, insert
and save on the result. Every outcome must be either success or a clean :class:`SurgeryError`
(no other exception, no partial or temporary file visible in the output folder). When the mutated
input still passes ``onnx.checker``, every saved output must pass it too.

Budget: ~150 examples, no deadline, well under a minute (a CI-sized run).
"""

from __future__ import annotations

import copy as pycopy
import os
import tempfile
from pathlib import Path

import onnx
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from onnxsurgeon import errors
from onnxsurgeon.closure import closure, downstream_nodes
from onnxsurgeon.index import GraphIndex
from onnxsurgeon.io import load, save

from . import builders

BASES = {
    "tiny_cnn": builders.tiny_cnn(),
    "tied": builders.tied_weights(),
    "if": builders.if_capture(),
    "loop": builders.loop_capture(),
    "func": builders.local_function(),
    "old_ir": builders.init_as_input(),
    "chain": builders.chain(3),
}
NAMES = ["x", "act", "W", "y", "a", "", "conv5_out", "fresh", "h", "b", "logits", "../x"]
EXT_KEYS = ["location", "offset", "length", "checksum", "basepath", "evil", ""]
EXT_VALUES = ["data.bin", "../data.bin", "/etc/passwd", "", "-1", "0", "16", "999999999",
              "abc", "C:x", "*/_ORT_MEM_ADDR_/*", "data.bin\x00", "\u00b2", "weights.bin"]

mutation = st.one_of(
    st.tuples(st.just("rename_output"), st.integers(0, 50), st.sampled_from(NAMES)),
    st.tuples(st.just("rename_input"), st.integers(0, 50), st.sampled_from(NAMES)),
    st.tuples(st.just("drop_node"), st.integers(0, 50), st.none()),
    st.tuples(st.just("dup_node"), st.integers(0, 50), st.none()),
    st.tuples(st.just("swap_nodes"), st.integers(0, 50), st.integers(0, 50)),
    st.tuples(st.just("drop_graph_input"), st.integers(0, 5), st.none()),
    st.tuples(st.just("dup_graph_input"), st.integers(0, 5), st.none()),
    st.tuples(st.just("dup_graph_output"), st.integers(0, 5), st.none()),
    st.tuples(st.just("rename_graph_output"), st.integers(0, 5), st.sampled_from(NAMES)),
    st.tuples(st.just("drop_init"), st.integers(0, 5), st.none()),
    st.tuples(st.just("dup_init"), st.integers(0, 5), st.none()),
    st.tuples(st.just("rename_init"), st.integers(0, 5), st.sampled_from(NAMES)),
    st.tuples(st.just("dims"), st.integers(0, 5), st.sampled_from([-1, 0, 3, 2**40, 2**62])),
    st.tuples(st.just("dtype"), st.integers(0, 5), st.sampled_from([0, 2, 7, 8, 16, 99])),
    st.tuples(st.just("raw_cut"), st.integers(0, 5), st.integers(0, 64)),
    st.tuples(st.just("drop_attr"), st.integers(0, 50), st.none()),
    st.tuples(st.just("dup_attr"), st.integers(0, 50), st.none()),
    st.tuples(st.just("external"), st.integers(0, 5),
              st.lists(st.tuples(st.sampled_from(EXT_KEYS), st.sampled_from(EXT_VALUES)),
                       max_size=4)),
)
byte_damage = st.one_of(
    st.none(),
    st.tuples(st.just("truncate"), st.floats(0.0, 1.0)),
    st.tuples(st.just("flip"), st.floats(0.0, 1.0), st.integers(1, 255)),
)


def _pick(seq, i):
    return seq[i % len(seq)] if len(seq) else None


def _apply(model: onnx.ModelProto, op: tuple) -> None:  # noqa: C901 - a flat dispatch
    g = model.graph
    kind, i, arg = op
    node = _pick(g.node, i)
    init = _pick(g.initializer, i)
    if kind == "rename_output" and node is not None and len(node.output):
        node.output[0] = arg
    elif kind == "rename_input" and node is not None and len(node.input):
        node.input[i % len(node.input)] = arg
    elif kind == "drop_node" and node is not None:
        del g.node[i % len(g.node)]
    elif kind == "dup_node" and node is not None:
        g.node.append(pycopy.deepcopy(node))
    elif kind == "swap_nodes" and len(g.node) > 1:
        a, b = i % len(g.node), arg % len(g.node)
        na, nb = onnx.NodeProto(), onnx.NodeProto()
        na.CopyFrom(g.node[a])
        nb.CopyFrom(g.node[b])
        g.node[a].CopyFrom(nb)
        g.node[b].CopyFrom(na)
    elif kind == "drop_graph_input" and len(g.input):
        del g.input[i % len(g.input)]
    elif kind == "dup_graph_input" and len(g.input):
        g.input.append(pycopy.deepcopy(g.input[i % len(g.input)]))
    elif kind == "dup_graph_output" and len(g.output):
        g.output.append(pycopy.deepcopy(g.output[i % len(g.output)]))
    elif kind == "rename_graph_output" and len(g.output):
        g.output[i % len(g.output)].name = arg
    elif kind == "drop_init" and init is not None:
        del g.initializer[i % len(g.initializer)]
    elif kind == "dup_init" and init is not None:
        g.initializer.append(pycopy.deepcopy(init))
    elif kind == "rename_init" and init is not None:
        init.name = arg
    elif kind == "dims" and init is not None:
        if len(init.dims):
            init.dims[0] = arg
        else:
            init.dims.append(arg)
    elif kind == "dtype" and init is not None:
        init.data_type = arg
    elif kind == "raw_cut" and init is not None and init.HasField("raw_data"):
        init.raw_data = init.raw_data[: arg % (len(init.raw_data) + 1)]
    elif kind == "drop_attr" and node is not None and len(node.attribute):
        del node.attribute[0]
    elif kind == "dup_attr" and node is not None and len(node.attribute):
        node.attribute.append(pycopy.deepcopy(node.attribute[0]))
    elif kind == "external" and init is not None:
        init.data_location = onnx.TensorProto.EXTERNAL
        init.ClearField("raw_data")
        del init.external_data[:]
        for key, value in arg:
            e = init.external_data.add()
            e.key, e.value = key, value


def _visible(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))


def _checker_ok(model: onnx.ModelProto, folder: Path | None = None) -> bool:
    try:
        if folder is None:
            onnx.checker.check_model(model)
        else:
            onnx.checker.check_model(str(folder))
        return True
    except Exception:  # noqa: BLE001 - any checker complaint means "not a valid input"
        return False


def _save_checked(model, folder: Path, name: str, input_valid: bool) -> None:
    """save must succeed (then a checker-valid file when the input was valid) or raise cleanly
    leaving nothing visible but what was there before."""
    before = _visible(folder)
    try:
        out = save(model, folder / name)
    except errors.SurgeryError as exc:
        assert "\n" not in str(exc)
        assert _visible(folder) == before
        return
    assert out.exists()
    if input_valid:
        onnx.checker.check_model(str(out))


def _exercise(model_path: Path, work: Path, input_valid: bool) -> list[str]:
    """Run every stage; return what happened (for hypothesis statistics and assertions)."""
    from onnxsurgeon.inspect import inspect_model
    from onnxsurgeon.surgery.copy import copy
    from onnxsurgeon.surgery.extract import extract
    from onnxsurgeon.surgery.insert import insert

    try:
        model = load(model_path)
    except errors.SurgeryError as exc:
        assert "\n" not in str(exc)
        return [f"load refused: {type(exc).__name__}"]
    happened = ["load ok"]
    proto = model.proto
    outputs = [o.name for o in proto.graph.output]
    index = GraphIndex(proto)
    try:
        inspect_model(model)
        if outputs:
            closure(index, outputs[:1])
        downstream_nodes(index, [vi.name for vi in proto.graph.input])
    except errors.SurgeryError as exc:
        assert "\n" not in str(exc)
    _save_checked(model, work, "plain.onnx", input_valid)
    if not outputs:
        return happened
    verbs = [
        ("extract", lambda m: extract(m, outputs[:1])),
        ("copy", lambda m: copy(m, outputs[:1], prefix="twin/")),
        ("insert", lambda m: insert(m, outputs[0], op="scale", params={"factor": 2.0})),
    ]
    for name, verb in verbs:
        fresh = load(model_path)  # a verb mutates: give each its own copy
        before = fresh.proto.SerializeToString()
        try:
            verb(fresh)
        except errors.SurgeryError as exc:
            assert "\n" not in str(exc)
            assert fresh.proto.SerializeToString() == before  # refused => unchanged
            happened.append(f"{name} refused")
            continue
        happened.append(f"{name} ok" + (" (valid input)" if input_valid else ""))
        _save_checked(fresh, work, f"{name}.onnx", input_valid)
    return happened


_EXAMPLES = int(os.environ.get("ONNXSURGEON_FUZZ_EXAMPLES", "150"))  # raise it for a long run


@settings(max_examples=_EXAMPLES, deadline=None, derandomize=_EXAMPLES <= 150,
          suppress_health_check=[HealthCheck.too_slow])
@given(base=st.sampled_from(sorted(BASES)), ops=st.lists(mutation, min_size=0, max_size=3),
       damage=byte_damage, external=st.booleans())
def test_fuzz_load_query_rewrite_save(base, ops, damage, external):
    model = onnx.ModelProto()
    model.CopyFrom(BASES[base])
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        src_dir, work = root / "src", root / "work"
        src_dir.mkdir()
        work.mkdir()
        path = src_dir / "model.onnx"
        if external:
            onnx.save(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                      location="data.bin", size_threshold=0)
            model = onnx.load(path, load_external_data=False)
        for op in ops:
            _apply(model, op)
        blob = model.SerializeToString()
        if damage is not None:
            if damage[0] == "truncate":
                blob = blob[: int(len(blob) * damage[1])]
            else:
                pos = int((len(blob) - 1) * damage[1])
                blob = blob[:pos] + bytes([blob[pos] ^ damage[2]]) + blob[pos + 1:]
        path.write_bytes(blob)
        input_valid = damage is None and _checker_ok(model) if not external else (
            damage is None and _checker_ok(model, path))
        src_before = {p.name: p.read_bytes() for p in src_dir.iterdir()}
        for outcome in _exercise(path, work, input_valid):
            event(outcome)
        assert {p.name: p.read_bytes() for p in src_dir.iterdir()} == src_before
        leftovers = [n for n in os.listdir(work) if n.startswith(".")]
        assert leftovers == []


@pytest.mark.parametrize("base", sorted(BASES))
def test_unmutated_bases_pass_every_stage(base, tmp_path):
    """The fuzz harness itself can succeed: valid bases go through every verb and save."""
    path = tmp_path / "m.onnx"
    onnx.save(BASES[base], path)
    work = tmp_path / "work"
    work.mkdir()
    happened = _exercise(path, work, input_valid=True)
    assert happened[0] == "load ok"
    assert {"extract ok (valid input)", "copy ok (valid input)"} <= set(happened), happened
    assert {"plain.onnx", "extract.onnx", "copy.onnx"} <= set(_visible(work))


def test_insert_on_old_ir_gives_checker_valid_model():
    """Found by this fuzzer: insert on IR < 4 once left its initializers out of graph inputs."""
    from onnxsurgeon.surgery.insert import insert

    model = onnx.ModelProto()
    model.CopyFrom(BASES["old_ir"])
    insert(model, "y", op="scale", params={"factor": 2.0})
    onnx.checker.check_model(model)
