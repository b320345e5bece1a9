"""Issue 5: untrusted and malformed models are refused cleanly, safely and without side effects.

Every malicious file comes from ``tests/make_malicious.py`` (generated into a temporary folder).
For each: the API raises the expected :class:`SurgeryError` subclass with a one-line message
naming the problem, the CLI exits 2 with one line on stderr and writes no output, the input
folder is byte-identical afterwards, nothing outside the model's folder is opened (checked with a
``sys.addaudithook`` that records every ``open``), and nothing is unpickled, dlopen-ed or spawned.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxsurgeon
import onnxsurgeon.external
from onnxsurgeon import cli, errors
from onnxsurgeon.io import load

from . import builders
from .make_malicious import SECRET, _nested_if, make_corpus

# --------------------------------------------------------------------- audit-hook recorder
_EVENTS: list[tuple[str, tuple]] = []
_RECORDING = [False]
_WATCHED = ("open", "ctypes.dlopen", "pickle.find_class", "subprocess.Popen", "os.system",
            "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "shutil.unpack_archive")


def _hook(event: str, args: tuple) -> None:
    if _RECORDING[0] and event in _WATCHED:
        _EVENTS.append((event, args))


sys.addaudithook(_hook)


class _Recorder:
    def __enter__(self) -> list[tuple[str, tuple]]:
        _EVENTS.clear()
        _RECORDING[0] = True
        return _EVENTS

    def __exit__(self, *exc: object) -> None:
        _RECORDING[0] = False


def _opened_paths(events: list[tuple[str, tuple]]) -> list[str]:
    return [os.fsdecode(a[0]) for e, a in events if e == "open" and isinstance(a[0], (str, bytes))]


def _tree_digest(root: Path) -> dict[str, str]:
    """Every entry under ``root`` (links as their target text, never followed) -> content hash."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            if p.is_symlink():
                out[str(p)] = "link:" + os.readlink(p)
            elif p.is_file():
                out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
            elif p.is_dir():
                out[str(p)] = "dir"
            else:
                out[str(p)] = "special"
    return out


# ----------------------------------------------------------------------------------- corpus
@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("malicious")
    return root, {c.name: c for c in make_corpus(root)}


def _case_names() -> list[str]:
    with tempfile.TemporaryDirectory() as tmp:
        return [c.name for c in make_corpus(tmp)]


_CASE_NAMES = _case_names()


def test_corpus_covers_every_numbered_case(corpus):
    _, cases = corpus
    assert {c.section for c in cases.values()} == {1, 2, 3, 4, 5, 6}
    assert len(cases) >= 60


@pytest.mark.parametrize("name", _CASE_NAMES)
def test_malicious_file_is_refused_by_api(corpus, name):
    root, cases = corpus
    case = cases[name]
    before = _tree_digest(root)
    with _Recorder() as events, pytest.raises(errors.SurgeryError) as info:
        load(case.path)
    err = info.value
    assert isinstance(err, getattr(errors, case.error)), f"{type(err).__name__}: {err}"
    message = str(err)
    assert "\n" not in message and len(message) < 400
    for word in case.words:
        assert word.lower() in message.lower(), message
    assert SECRET.decode()[:10] not in message
    # nothing outside the case folder, and never the secret, was opened
    case_dir = str(case.path.parent)
    for path in _opened_paths(events):
        assert Path(path).name != "secret.bin", f"opened {path}"
        if os.path.isabs(path) and path.startswith(str(root)):
            assert path.startswith(case_dir), f"opened {path} outside {case_dir}"
    kinds = {e for e, _ in events}
    assert kinds <= {"open"}, kinds  # no dlopen, unpickling, subprocess, exec
    assert not (root / "PWNED").exists()
    assert _tree_digest(root) == before  # input untouched


@pytest.mark.parametrize("name", _CASE_NAMES)
def test_malicious_file_cli_exit_2_one_line_no_output(corpus, name, tmp_path, capsys):
    root, cases = corpus
    case = cases[name]
    before = _tree_digest(root)
    out = tmp_path / "out.onnx"
    code = cli.main(["extract", str(case.path), "-o", str(out), "--outputs", "y"])
    captured = capsys.readouterr()
    assert code == 2
    lines = [ln for ln in captured.err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("onnxsurgeon: error:"), captured.err
    assert "Traceback" not in captured.err
    assert list(tmp_path.iterdir()) == []  # no output, no temp file
    assert _tree_digest(root) == before


def test_secret_outside_folder_is_never_read_even_via_every_trick(corpus):
    """The data file checks open the model folder and walk down with O_NOFOLLOW: the secret's
    atime-independent proof is the audit log, here summed over all location cases."""
    root, cases = corpus
    with _Recorder() as events:
        for case in cases.values():
            if case.section in (1, 2):
                with pytest.raises(errors.InvalidModelError):
                    load(case.path)
    opened = _opened_paths(events)
    assert opened  # the hook does see opens
    assert not [p for p in opened if Path(p).name == "secret.bin" or p == str(root / "secret.bin")]


def test_nesting_below_protobuf_limit_loads_and_deeper_is_refused(tmp_path):
    ok = tmp_path / "ok.onnx"
    ok.write_bytes(_nested_if(31))
    model = load(ok)
    assert model.proto.graph.node[0].op_type == "If"
    deep = tmp_path / "deep.onnx"
    deep.write_bytes(_nested_if(40))
    with pytest.raises(errors.InvalidModelError, match="nest"):
        load(deep)


# ------------------------------------------------------------------ never run code from a model
def test_load_never_loads_custom_op_libraries_or_runtime(tmp_path):
    """A model naming a custom-op library and a custom domain loads as plain data: no dlopen, no
    onnxruntime import, no pickle, in a fresh interpreter."""
    lib = tmp_path / "libevil.so"
    lib.write_bytes(b"\x7fELF not really")
    graph = helper.make_graph(
        [helper.make_node("EvilOp", ["x"], ["y"], name="evil", domain="ai.onnx.contrib")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("ai.onnx.contrib", 1)])
    helper.set_model_props(model, {"custom_op_library": str(lib), "pickle": "cos\nsystem\n."})
    path = tmp_path / "custom.onnx"
    onnx.save(model, path)
    code = f"""
import sys
events = []
sys.addaudithook(lambda e, a: events.append(e) if e in
    ("ctypes.dlopen", "pickle.find_class", "subprocess.Popen", "os.system", "exec") else None)
import onnxsurgeon
onnxsurgeon.load, onnxsurgeon.save  # the package resolves them (and imports onnx) on first use
events.clear()
m = onnxsurgeon.load({str(path)!r})
onnxsurgeon.save(m, {str(tmp_path / 'out.onnx')!r})
bad = [e for e in events if e != "exec"]
print(bad, "onnxruntime" in sys.modules, "torch" in sys.modules, "tensorflow" in sys.modules)
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert res.stdout.split() == ["[]", "False", "False", "False"], res.stdout + res.stderr


# ------------------------------------------------------------- 7. verb-level refusals
def _unchanged(model: onnx.ModelProto):
    before = model.SerializeToString(deterministic=True)
    return lambda: model.SerializeToString(deterministic=True) == before


def test_unknown_target_did_you_mean_and_model_unchanged():
    from onnxsurgeon.surgery.extract import extract

    model = builders.tiny_cnn()
    same = _unchanged(model)
    with pytest.raises(errors.NotFoundError) as info:
        extract(model, ["logitz"])
    assert "logitz" in str(info.value) and "logits" in str(info.value)
    assert "did you mean" in str(info.value).lower()
    assert same()


def test_reroute_cycle_is_refused_and_names_nodes():
    from onnxsurgeon.surgery.reroute import reroute

    model = builders.tiny_cnn()
    same = _unchanged(model)
    # relu5 reads conv5_out; making it read act (its own output) would close a cycle
    with pytest.raises(errors.RewriteError, match="cycle"):
        reroute(model, "conv5_out", "act")
    assert same()


def test_insert_block_with_two_inputs_is_refused():
    from onnxsurgeon.surgery.insert import insert

    block = helper.make_model(helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["c"])], "two_in",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 4, 8, 8]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [1, 4, 8, 8])],
    ), opset_imports=[helper.make_opsetid("", 17)])
    model = builders.tiny_cnn()
    same = _unchanged(model)
    with pytest.raises(errors.SurgeryError) as info:
        insert(model, "act", graph=block)
    assert isinstance(info.value, errors.RewriteError)
    assert "one input" in str(info.value) and "'b'" in str(info.value)
    assert same()


def test_dtype_mismatch_is_refused():
    from onnxsurgeon.surgery.reroute import reroute

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["a"], name="relu"),
         helper.make_node("Cast", ["x"], ["i"], name="cast", to=TensorProto.INT64),
         helper.make_node("Neg", ["a"], ["y"], name="neg"),
         helper.make_node("Neg", ["i"], ["z"], name="negi")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3]),
         helper.make_tensor_value_info("z", TensorProto.INT64, [3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model = onnx.shape_inference.infer_shapes(model)
    same = _unchanged(model)
    with pytest.raises(errors.RewriteError) as info:
        reroute(model, "a", "i")
    assert "float" in str(info.value).lower() and "int64" in str(info.value).lower()
    assert same()


def test_insert_dtype_mismatch_is_refused():
    from onnxsurgeon.surgery.insert import insert

    block = helper.make_model(helper.make_graph(
        [helper.make_node("Neg", ["a"], ["c"])], "int_block",
        [helper.make_tensor_value_info("a", TensorProto.INT64, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("c", TensorProto.INT64, [1, 4, 8, 8])],
    ), opset_imports=[helper.make_opsetid("", 17)])
    model = builders.tiny_cnn()
    same = _unchanged(model)
    with pytest.raises(errors.SurgeryError):
        insert(model, "act", graph=block)
    assert same()


# ------------------------------------------------------------------ out-of-order is repaired
def test_out_of_order_nodes_are_sorted_stably_with_warning(tmp_path):
    model = builders.tiny_cnn()
    nodes = list(model.graph.node)
    # move 'side' (reads act) and 'fc' before their producers; keep the rest in order
    shuffled = [nodes[5], nodes[4], nodes[0], nodes[1], nodes[2], nodes[3]]
    del model.graph.node[:]
    model.graph.node.extend(shuffled)
    path = tmp_path / "shuffled.onnx"
    path.write_bytes(model.SerializeToString())
    m = load(path)
    order = [n.name for n in m.proto.graph.node]
    assert order == ["conv5", "relu5", "side", "pool", "flatten", "fc"]  # stable Kahn order
    assert len(m.warnings) == 1 and "topological" in m.warnings[0]
    onnx.checker.check_model(m.proto, full_check=True)


def test_cli_prints_load_warnings(tmp_path, capsys):
    model = builders.tied_weights()
    nodes = list(model.graph.node)
    del model.graph.node[:]
    model.graph.node.extend([nodes[2], nodes[0], nodes[1]])
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    code = cli.main(["inspect", str(path)])
    captured = capsys.readouterr()
    assert code == 0
    assert "topological" in captured.err


def test_validate_refuses_out_of_order_when_sort_disabled():
    from onnxsurgeon.validate import validate

    model = builders.tied_weights()
    nodes = list(model.graph.node)
    del model.graph.node[:]
    model.graph.node.extend([nodes[1], nodes[0], nodes[2]])
    before = model.SerializeToString()
    with pytest.raises(errors.InvalidModelError, match="topolog"):
        validate(model, sort=False)
    assert model.SerializeToString() == before


def test_subgraph_dangling_and_capture_ok():
    """A body may read outer tensors (captures) but not names defined nowhere."""
    from onnxsurgeon.validate import validate

    assert validate(builders.if_capture()) == []
    assert validate(builders.loop_capture()) == []
    assert validate(builders.local_function()) == []
    model = builders.if_capture()
    then = model.graph.node[3].attribute[0].g
    then.node[0].input[1] = "nowhere"
    with pytest.raises(errors.InvalidModelError, match="nowhere"):
        validate(model)


def test_capture_of_later_tensor_is_reordered():
    """An If reading (inside its body) a tensor produced after it is out of order, not dangling."""
    from onnxsurgeon.validate import validate

    model = builders.if_capture()
    nodes = list(model.graph.node)  # relu, sum, gt, branch, add
    del model.graph.node[:]
    model.graph.node.extend([nodes[1], nodes[2], nodes[3], nodes[0], nodes[4]])
    warnings = validate(model)
    assert warnings
    names = [n.name for n in model.graph.node]
    assert names.index("relu") < names.index("branch")


def test_inline_weights_are_checked_before_allocation():
    """A 2**60-element declared shape with 4 bytes present fails fast, allocating nothing."""
    t = numpy_helper.from_array(np.zeros(1, np.float32), "W")
    del t.dims[:]
    t.dims.extend([2**30, 2**30])
    with pytest.raises(errors.InvalidModelError):
        onnxsurgeon.external.check_inline_tensor(t)
    with pytest.raises(errors.InvalidModelError):
        onnxsurgeon.external.read_tensor(t, None)
