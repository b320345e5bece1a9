"""Loading and saving: round trips, external data streamed with fresh names, safe and atomic
saves, interrupted saves, scale (100k-node chain, deep Identity chain, > 2 GB external data)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsurgeon import errors
from onnxsurgeon.closure import closure
from onnxsurgeon.external import read_tensor
from onnxsurgeon.index import GraphIndex
from onnxsurgeon.io import load, save

from . import builders

F = TensorProto.FLOAT


from tests.conftest import run  # noqa: E402 - the shared onnxruntime helper


def _rich_model() -> onnx.ModelProto:
    """local_function + metadata, doc strings, training_info, sparse initializer, quantization
    annotation: everything that must survive untouched."""
    model = builders.local_function()
    model.doc_string = "model doc"
    model.graph.doc_string = "graph doc"
    model.graph.node[1].doc_string = "tanh doc"
    helper.set_model_props(model, {"author": "tests", "license": "MIT"})
    model.domain = "org.tests"
    model.model_version = 7
    sp = helper.make_sparse_tensor(
        numpy_helper.from_array(np.array([1.0, 2.0], np.float32), "S"),
        numpy_helper.from_array(np.array([1, 3], np.int64), "S_idx"), [4])
    model.graph.sparse_initializer.append(sp)
    qa = model.graph.quantization_annotation.add()
    qa.tensor_name = "h"
    entry = qa.quant_parameter_tensor_names.add()
    entry.key, entry.value = "SCALE_TENSOR", "w1"
    ti = model.training_info.add()
    ti.algorithm.CopyFrom(helper.make_graph(
        [helper.make_node("Add", ["w1", "b1"], ["w1_new"], name="step")], "algo", [],
        [helper.make_tensor_value_info("w1_new", F, [4])]))
    binding = ti.update_binding.add()
    binding.key, binding.value = "w1", "w1_new"
    return model


# -------------------------------------------------------------------------- round trips
def test_round_trip_inline_is_byte_identical(tmp_path):
    model = _rich_model()
    src = tmp_path / "rich.onnx"
    src.write_bytes(model.SerializeToString(deterministic=True))
    m = load(src)
    assert m.warnings == []
    out = save(m, tmp_path / "out.onnx")
    assert out.read_bytes() == src.read_bytes()
    assert not (tmp_path / "out.onnx.data").exists()
    back = onnx.load(out)
    assert back.training_info[0].update_binding[0].value == "w1_new"
    assert back.graph.sparse_initializer[0].values.name == "S"
    assert back.graph.quantization_annotation[0].tensor_name == "h"
    assert back.functions[0].name == "Affine" and back.doc_string == "model doc"
    assert sorted((p.key, p.value) for p in back.metadata_props) == [
        ("author", "tests"), ("license", "MIT")]


def test_rich_parts_survive_an_insert(tmp_path):
    from onnxsurgeon.surgery.insert import insert

    model = _rich_model()
    insert(model, "ht", op="scale", params={"factor": 2.0})
    for part in ("training_info", "functions"):
        assert getattr(model, part) == getattr(_rich_model(), part)
    assert model.graph.sparse_initializer == _rich_model().graph.sparse_initializer
    assert model.graph.quantization_annotation == _rich_model().graph.quantization_annotation
    assert model.doc_string == "model doc" and model.graph.node[1].doc_string == "tanh doc"
    save(model, tmp_path / "o.onnx")
    assert onnx.load(tmp_path / "o.onnx").training_info == _rich_model().training_info


def _external_model(folder: Path, location: str = "weights/w.bin") -> Path:
    model = builders.tiny_cnn()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "cnn.onnx"
    (folder / location).parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
              location=location, size_threshold=0)
    return path


def test_external_round_trip_fresh_names_same_tensors_runs(tmp_path):
    src = _external_model(tmp_path / "in", "weights/evil name.bin")
    before = {p: p.read_bytes() for p in (tmp_path / "in").rglob("*") if p.is_file()}
    m = load(src)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = save(m, out_dir / "model.onnx")
    saved = onnx.load(out, load_external_data=False)
    locations = {e.value for t in saved.graph.initializer for e in t.external_data
                 if e.key == "location"}
    assert locations == {"model.onnx.data"}  # generated, never copied from the input
    assert sorted(p.name for p in out_dir.iterdir()) == ["model.onnx", "model.onnx.data"]
    ref = onnx.load(src)
    got = onnx.load(out)
    for a, b in zip(ref.graph.initializer, got.graph.initializer, strict=True):
        np.testing.assert_array_equal(numpy_helper.to_array(a), numpy_helper.to_array(b))
    for t in load(out).proto.graph.initializer:
        np.testing.assert_array_equal(read_tensor(t, out_dir),
                                      numpy_helper.to_array(next(
                                          r for r in ref.graph.initializer if r.name == t.name)))
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    want, have = run(src, {"x": x}), run(out, {"x": x})
    for k in want:
        np.testing.assert_array_equal(want[k], have[k])
    # the in-memory model still points at the input's data file, the input is untouched
    assert {e.value for e in m.proto.graph.initializer[0].external_data if e.key == "location"} \
        == {"weights/evil name.bin"}
    assert before == {p: p.read_bytes() for p in (tmp_path / "in").rglob("*") if p.is_file()}


def test_save_is_deterministic(tmp_path):
    src = _external_model(tmp_path / "in")
    m = load(src)
    a = save(m, tmp_path / "a.onnx")
    b = save(m, tmp_path / "b.onnx")
    assert (tmp_path / "a.onnx.data").read_bytes() == (tmp_path / "b.onnx.data").read_bytes()
    assert a.read_bytes().replace(b"a.onnx.data", b"X") == b.read_bytes().replace(
        b"b.onnx.data", b"X")


# ------------------------------------------------------------------------------ save safety
def test_output_equal_to_input_is_refused(tmp_path):
    src = _external_model(tmp_path)
    before = src.read_bytes()
    m = load(src)
    for target in (src, tmp_path / "." / "cnn.onnx"):
        with pytest.raises(errors.UsageError, match="input model"):
            save(m, target)
    assert src.read_bytes() == before


def test_output_onto_input_data_file_is_refused(tmp_path):
    # the input's data file is exactly where the output's data file would go
    src = _external_model(tmp_path, "out.onnx.data")
    data = (tmp_path / "out.onnx.data").read_bytes()
    m = load(src)
    with pytest.raises(errors.UsageError, match="data file"):
        save(m, tmp_path / "out.onnx")
    with pytest.raises(errors.UsageError, match="data file"):
        save(m, tmp_path / "out.onnx.data")  # the output model itself onto the data file
    assert (tmp_path / "out.onnx.data").read_bytes() == data
    assert not (tmp_path / "out.onnx").exists()


def test_output_data_file_onto_input_model_is_refused(tmp_path):
    path = tmp_path / "x.data"
    path.write_bytes(builders.tiny_cnn().SerializeToString())
    m = load(path)
    with pytest.raises(errors.UsageError, match="input model"):
        save(m, tmp_path / "x", external=True)
    assert onnx.load(path) == builders.tiny_cnn()


def test_output_symlink_is_refused_and_target_untouched(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    link = tmp_path / "out.onnx"
    link.symlink_to(victim)
    with pytest.raises(errors.UsageError, match="symbolic link"):
        save(builders.tiny_cnn(), link)
    data_link = tmp_path / "o2.onnx.data"
    data_link.symlink_to(victim)
    with pytest.raises(errors.UsageError, match="symbolic link"):
        save(builders.chain(1, width=32), tmp_path / "o2.onnx", external=True)
    assert victim.read_text() == "keep me"
    assert not (tmp_path / "o2.onnx").exists()


def test_existing_data_file_is_replaced_never_appended_or_written_through(tmp_path):
    out = tmp_path / "o.onnx"
    other = tmp_path / "other.bin"
    other.write_bytes(b"OTHER" * 1000)
    os.link(other, tmp_path / "o.onnx.data")  # an existing hard link at the data path
    model = builders.chain(1, width=32)  # W is 4 KiB: moved to external data
    save(model, out, external=True)
    assert other.read_bytes() == b"OTHER" * 1000  # not written through the link
    back = onnx.load(out)  # loads with the new data
    np.testing.assert_array_equal(numpy_helper.to_array(back.graph.initializer[0]),
                                  numpy_helper.to_array(model.graph.initializer[0]))
    size = (tmp_path / "o.onnx.data").stat().st_size
    assert size == 4096
    save(model, out, external=True)  # again: same size, not appended
    assert (tmp_path / "o.onnx.data").stat().st_size == size
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.onnx", "o.onnx.data", "other.bin"]


def test_saved_files_get_the_usual_permissions(tmp_path):
    mask = os.umask(0o022)
    os.umask(mask)
    save(builders.chain(1, width=32), tmp_path / "o.onnx", external=True)
    for name in ("o.onnx", "o.onnx.data"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o666 & ~mask


def test_save_refuses_folder_and_missing_folder(tmp_path):
    with pytest.raises(errors.UsageError, match="folder"):
        save(builders.tiny_cnn(), tmp_path)
    with pytest.raises(errors.UsageError, match="does not exist"):
        save(builders.tiny_cnn(), tmp_path / "nope" / "o.onnx")


def test_failed_save_restores_model_and_leaves_nothing(tmp_path):
    """A refused save (data file moved away after load) leaves no file and the proto intact."""
    src = _external_model(tmp_path / "in")
    m = load(src)
    before = m.proto.SerializeToString()
    (tmp_path / "in" / "weights" / "w.bin").rename(tmp_path / "in" / "moved.bin")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    with pytest.raises(errors.UnsafeModelError, match="does not exist"):
        save(m, out_dir / "o.onnx")
    assert m.proto.SerializeToString() == before
    assert list(out_dir.iterdir()) == []


def test_data_file_swapped_for_a_link_after_load_is_refused(tmp_path):
    """save checks every reference again: a data file replaced by a link to a secret after
    load is refused, and the secret's bytes appear nowhere."""
    src = _external_model(tmp_path / "in")
    m = load(src)
    secret = tmp_path / "secret.bin"
    data = tmp_path / "in" / "weights" / "w.bin"
    secret.write_bytes(b"S" * data.stat().st_size)
    data.unlink()
    data.symlink_to(secret)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    with pytest.raises(errors.UnsafeModelError, match="symbolic link"):
        save(m, out_dir / "o.onnx")
    assert list(out_dir.iterdir()) == []


def test_external_tensor_without_folder_is_refused():
    t = helper.make_tensor("W", F, [1], [1.0])
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "w.bin"), ("length", "4")):
        e = t.external_data.add()
        e.key, e.value = k, v
    with pytest.raises(errors.UnsafeModelError, match="not loaded from a file"):
        read_tensor(t, None)


# --------------------------------------------------------------------- interrupted save
_KILL_SCRIPT = textwrap.dedent("""
    import os, sys
    import onnx
    from onnx import helper, TensorProto
    import onnxsurgeon.atomic
    from onnxsurgeon.io import load, save
    folder = sys.argv[1]
    if sys.argv[3] == "named":  # as on a filesystem that cannot link an unnamed file in
        onnxsurgeon.atomic._LINKERS = ()
    n = 256 * 1024 * 1024  # 1 GiB of float32, sparse: the disk holds what the kill leaves
    with open(os.path.join(folder, "w.bin"), "wb") as f:
        f.truncate(n * 4)
    w = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[n],
                    data_location=TensorProto.EXTERNAL)
    for k, v in (("location", "w.bin"), ("length", str(n * 4))):
        e = w.external_data.add(); e.key, e.value = k, v
    g = helper.make_graph([helper.make_node("Identity", ["W"], ["y"])], "g", [],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(m, os.path.join(folder, "big.onnx"))
    model = load(os.path.join(folder, "big.onnx"))
    print("ready", flush=True)
    save(model, sys.argv[2])
    print("done", flush=True)
""")


def _files_being_written(pid: int, folder: Path) -> list[int]:
    """Sizes of the files process ``pid`` has open for writing in ``folder``: named ones and
    unnamed ones (``O_TMPFILE``, shown by /proc as ``folder/#inode (deleted)``)."""
    sizes = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if os.path.dirname(target) == str(folder):
                sizes.append(os.stat(f"/proc/{pid}/fd/{fd}").st_size)
        except OSError:
            continue
    return sizes


@pytest.mark.parametrize("kind", ["unnamed", "named"])
def test_killed_save_leaves_no_partial_output_and_keeps_old_output(tmp_path, kind):
    """SIGKILL in the middle of writing an external-data file: the earlier output stays intact
    and nothing partial is visible. An unnamed temporary file (O_TMPFILE) leaves nothing at
    all; a named one (a filesystem that cannot link unnamed files in) is left by the dead
    writer and removed by the next save of that output (issue 26 item 14)."""
    import onnxsurgeon.atomic as atomic

    if kind == "unnamed" and atomic._linker(tmp_path) is None:
        pytest.skip("this filesystem cannot link an O_TMPFILE file in (the named case runs)")
    src_dir = tmp_path / "src"
    src_dir.mkdir()
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / "o.onnx"
    save(builders.tiny_cnn(), out, external=True)  # an earlier, complete output
    old = {p.name: p.read_bytes() for p in out_dir.iterdir()}
    proc = subprocess.Popen([sys.executable, "-c", _KILL_SCRIPT, str(src_dir), str(out), kind],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    deadline = time.monotonic() + 30
    started = False
    while time.monotonic() < deadline and not started:
        # the data file being written has grown: the save is mid-write
        started = any(size > 1 << 20 for size in _files_being_written(proc.pid, out_dir))
        if proc.poll() is not None:
            break
        time.sleep(0.001)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert started, "the save finished before it could be interrupted"
    visible = {p.name: p.read_bytes() for p in out_dir.iterdir() if not p.name.startswith(".")}
    assert visible == old  # the previous output is intact, nothing partial is visible
    left = sorted(p.name for p in out_dir.iterdir() if p.name.startswith("."))
    if kind == "unnamed":
        assert left == []
    else:
        assert len(left) == 1 and left[0].startswith(".o.onnx.data.") and left[0].endswith(".tmp")
    load(out)  # still a valid model with its own data
    save(builders.tiny_cnn(), out, external=True)  # the next save of that output
    assert sorted(p.name for p in out_dir.iterdir()) == sorted(old)


def test_a_save_never_removes_the_temporary_file_of_a_live_writer(tmp_path):
    """The temporary file of a save still running (its lock held) is left alone by a save of
    the same output in the same folder."""
    import onnxsurgeon.atomic as atomic

    dev = os.stat(tmp_path).st_dev
    known = atomic._LINKER.get(dev, ...)
    atomic._LINKER[dev] = None  # the named kind, as on a filesystem without linkable O_TMPFILE
    try:
        live = atomic.AtomicFile(tmp_path, "o.onnx.data")
        assert live.tmp_path is not None
        save(builders.tiny_cnn(), tmp_path / "o.onnx", external=True)
        assert os.path.exists(live.tmp_path)
        live.close()
        assert not any(p.name.startswith(".") for p in tmp_path.iterdir())
    finally:
        if known is ...:
            atomic._LINKER.pop(dev, None)
        else:
            atomic._LINKER[dev] = known


# -------------------------------------------------------------------------------- scale
def test_identity_chain_of_1000_levels(tmp_path):
    n = 1000
    nodes = [helper.make_node("Identity", [f"t{i}"], [f"t{i + 1}"], name=f"id{i}")
             for i in range(n)]
    graph = helper.make_graph(nodes, "ids", [helper.make_tensor_value_info("t0", F, [2])],
                              [helper.make_tensor_value_info(f"t{n}", F, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "ids.onnx"
    onnx.save(model, path)
    m = load(path)
    index = GraphIndex(m.proto)
    assert len(closure(index, [f"t{n}"]).nodes) == n
    from onnxsurgeon.surgery.extract import extract

    extract(m, [f"t{n}"], inputs=["t500"])
    out = save(m, tmp_path / "half.onnx")
    x = np.array([1.5, -2.0], np.float32)
    np.testing.assert_array_equal(run(out, {"t500": x})[f"t{n}"], x)


@pytest.mark.slow
def test_100k_node_chain_load_index_closure_extract_save(tmp_path):
    model = builders.chain(33_334)  # 100,002 nodes
    path = tmp_path / "chain.onnx"
    onnx.save(model, path)
    t0 = time.perf_counter()
    reference = onnx.load(path)
    onnx_load = time.perf_counter() - t0
    t0 = time.perf_counter()
    m = load(path)
    our_load = time.perf_counter() - t0
    assert len(m.proto.graph.node) == 100_002 and reference.graph.node[0] == m.proto.graph.node[0]
    index = GraphIndex(m.proto)
    c = closure(index, ["relu16666"])
    assert len(c.nodes) == 3 * 16_667
    from onnxsurgeon.surgery.extract import extract

    extract(m, ["relu16666"])
    out = save(m, tmp_path / "half.onnx")
    assert len(onnx.load(out).graph.node) == 3 * 16_667
    # validation is O(nodes + edges): a small constant factor over protobuf parsing
    assert our_load < 4 * onnx_load + 0.2, (our_load, onnx_load)


_BIG_SCRIPT = textwrap.dedent("""
    import json, os, resource, sys, time
    import onnx
    from onnx import helper, TensorProto
    folder, out_dir, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    from onnxsurgeon.io import load, save
    t0 = time.perf_counter()
    model = load(os.path.join(folder, "big.onnx"))
    if mode == "extract":
        from onnxsurgeon.surgery.extract import extract
        extract(model, ["y2"])
    elif mode == "copy":
        from onnxsurgeon.surgery.copy import copy
        copy(model, ["y2"], prefix="twin/")
    save(model, os.path.join(out_dir, mode + ".onnx"))
    # ru_maxrss survives exec on Linux (it would report the forking pytest's peak), so prefer
    # the per-address-space high-water mark VmHWM; both are peak RSS of this process.
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                rss = int(line.split()[1]) * 1024
    except OSError:
        pass
    print(json.dumps({"rss": rss, "seconds": time.perf_counter() - t0}))
""")


@pytest.mark.slow
def test_model_over_2gb_with_external_data_streams_with_small_memory(tmp_path):
    """Three 800 MB initializers (2.4 GB, a sparse file made with truncate) go through load,
    extract / copy and save with peak RSS far below the model size."""
    n = 200 * 1024 * 1024  # float32 elements per initializer: 800 MiB each
    folder = tmp_path / "big"
    folder.mkdir()
    with open(folder / "w.bin", "wb") as f:
        f.truncate(3 * n * 4)
        for k in range(3):  # a recognisable marker at the start of each tensor
            f.seek(k * n * 4)
            f.write(np.array([k + 1.5], np.float32).tobytes())
    inits = []
    for k in range(3):
        t = TensorProto(name=f"W{k}", data_type=F, dims=[n], data_location=TensorProto.EXTERNAL)
        for key, value in (("location", "w.bin"), ("offset", str(k * n * 4)),
                           ("length", str(n * 4))):
            e = t.external_data.add()
            e.key, e.value = key, value
        inits.append(t)
    nodes = [helper.make_node("Identity", [f"W{k}"], [f"y{k}"], name=f"id{k}") for k in range(3)]
    graph = helper.make_graph(nodes, "big", [],
                              [helper.make_tensor_value_info(f"y{k}", F, [n]) for k in range(3)],
                              inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
              folder / "big.onnx")
    total = 3 * n * 4
    assert total > 2**31
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    results = {}
    for mode in ("save", "extract", "copy"):
        res = subprocess.run([sys.executable, "-c", _BIG_SCRIPT, str(folder), str(out_dir), mode],
                             capture_output=True, text=True, check=True)
        results[mode] = json.loads(res.stdout)
        assert results[mode]["rss"] < total / 8, (mode, results[mode])
        out = load(out_dir / f"{mode}.onnx")
        names = [t.name for t in out.proto.graph.initializer]
        data = out_dir / f"{mode}.onnx.data"
        for t in out.proto.graph.initializer:
            assert t.data_location == TensorProto.EXTERNAL
            offset = int(next(e.value for e in t.external_data if e.key == "offset"))
            with open(data, "rb") as f:
                f.seek(offset)
                marker = np.frombuffer(f.read(4), np.float32)[0]
            assert marker == int(t.name.split("W")[-1]) + 1.5
        if mode == "extract":
            assert names == ["W2"]
        if mode == "copy":
            assert len(names) == 4
        for p in out_dir.iterdir():
            if p.name.startswith(f"{mode}.onnx."):
                p.unlink()  # keep disk use bounded
    print(json.dumps(results))


def test_save_switches_to_external_data_by_itself_above_the_threshold(tmp_path, monkeypatch):
    """Above EXTERNAL_THRESHOLD bytes of proto, big inline tensors move to one data file; the
    in-memory model keeps its inline bytes; the file round-trips to the same tensors."""
    import onnxsurgeon.io as osio
    import onnxsurgeon.saving as saving_module

    model = builders.chain(2, width=64)        # W is 64x64 float32 = 16 KiB inline
    before = model.SerializeToString()
    monkeypatch.setattr(saving_module, "EXTERNAL_THRESHOLD", 4096)
    out = tmp_path / "big.onnx"
    osio.save(model, out)
    assert model.SerializeToString() == before
    written = onnx.load(str(out), load_external_data=False)
    w = next(t for t in written.graph.initializer if t.name == "W")
    assert w.data_location == onnx.TensorProto.EXTERNAL
    assert {e.key: e.value for e in w.external_data}["location"] == "big.onnx.data"
    b = next(t for t in written.graph.initializer if t.name == "B")
    assert b.data_location != onnx.TensorProto.EXTERNAL  # 256 bytes: under EXTERNALIZE_MIN_BYTES
    full = onnx.load(str(out))
    for t in model.graph.initializer:
        got = next(g for g in full.graph.initializer if g.name == t.name)
        np.testing.assert_array_equal(onnx.numpy_helper.to_array(got), onnx.numpy_helper.to_array(t))
    monkeypatch.setattr(saving_module, "EXTERNAL_THRESHOLD", 1 << 40)
    small = tmp_path / "small.onnx"
    osio.save(model, small)
    assert not (tmp_path / "small.onnx.data").exists()


# ------------------------------------------- the write behind the check (large inline models)
def _big_chain() -> onnx.ModelProto:
    """A valid chain whose serialized size passes the size from which a thread writes the file
    while the checker reads its bytes (5 MB: one 1100x1100 float weight)."""
    from onnxsurgeon import atomic

    model = builders.chain(3, width=1100)
    assert model.ByteSize() >= atomic._BEHIND_MIN
    return model


def test_a_large_output_is_written_behind_its_check_byte_for_byte(tmp_path):
    model = _big_chain()
    out = save(model, tmp_path / "o.onnx", check="full")
    assert out.read_bytes() == model.SerializeToString(deterministic=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.onnx"]


def test_a_large_output_that_fails_its_check_is_never_published(tmp_path):
    model = _big_chain()
    out = tmp_path / "o.onnx"
    out.write_bytes(b"what the path held")
    model.graph.node.append(helper.make_node("NoSuchOp", ["x"], ["bad"], name="bad"))
    from onnxsurgeon.checking import OutputCheckError

    with pytest.raises(OutputCheckError, match="onnx.checker"):
        save(model, out, check="structure")
    assert out.read_bytes() == b"what the path held"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.onnx"]  # no temporary file


def test_a_write_that_fails_in_the_writing_thread_is_one_clear_error(tmp_path, monkeypatch):
    """The disk refuses the bytes (a full disk, here at the flush): one UsageError naming the
    file, nothing published, no temporary file left."""
    import errno

    def full_disk(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full_disk)
    out = tmp_path / "o.onnx"
    with pytest.raises(errors.UsageError, match="cannot write .*No space left on device"):
        save(_big_chain(), out, check="structure")
    assert list(tmp_path.iterdir()) == []
