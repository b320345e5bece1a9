"""External data on save: ``share_data`` / ``--share-data`` reads the input's data file in place
(same path rules as loading), and a plain save writes each distinct byte range once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from onnxsurgeon import errors
from onnxsurgeon.io import load, save
from onnxsurgeon.surgery import Weights, copy, insert

from . import builders
from .conftest import run

X = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)


def _external_model(folder: Path, location: str = "cnn.onnx.data") -> Path:
    (folder / location).parent.mkdir(parents=True, exist_ok=True)
    path = folder / "cnn.onnx"
    onnx.save(builders.tiny_cnn(), path, save_as_external_data=True,
              all_tensors_to_one_file=True, location=location, size_threshold=0)
    return path


def _run(path: Path) -> dict[str, np.ndarray]:
    return run(path, {"x": X})


def _locations(path: Path) -> set[str]:
    proto = onnx.load(str(path), load_external_data=False)
    return {e.value for t in proto.graph.initializer for e in t.external_data if e.key == "location"}


def _snapshot(folder: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_shared_output_in_the_same_folder_reads_the_input_file(tmp_path):
    src = _external_model(tmp_path / "m")
    before = _snapshot(tmp_path / "m")
    model = load(src)
    insert(model, "act", op="l2_normalize", params={"axis": 1})
    out = save(model, tmp_path / "m" / "l2.onnx", share_data=True)
    assert not (tmp_path / "m" / "l2.onnx.data").exists()  # nothing copied
    assert _locations(out) == {"cnn.onnx.data"}
    reloaded = load(out)  # passes every loading check
    assert len(reloaded.proto.graph.initializer) == len(model.proto.graph.initializer)
    twin = load(src)  # the same rewrite saved with copied bytes computes the same values
    insert(twin, "act", op="l2_normalize", params={"axis": 1})
    want, got = _run(save(twin, tmp_path / "plain.onnx")), _run(out)
    assert want.keys() == got.keys()
    for k in want:
        np.testing.assert_array_equal(want[k], got[k])
    # the in-memory model is unchanged, the input untouched
    assert {e.value for t in model.proto.graph.initializer for e in t.external_data
            if e.key == "location"} == {"cnn.onnx.data"}
    assert _snapshot(tmp_path / "m") == {**before, out: out.read_bytes()}


def test_shared_output_in_a_parent_folder_names_the_subfolder(tmp_path):
    src = _external_model(tmp_path / "models" / "cnn", "weights/w.bin")
    model = load(src)
    out = save(model, tmp_path / "models" / "cnn_shared.onnx", share_data=True)
    assert _locations(out) == {"cnn/weights/w.bin"}
    for a, b in zip(_run(src).values(), _run(out).values(), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("where", ["sibling", "child"])
def test_output_outside_the_data_files_tree_is_refused_and_nothing_written(tmp_path, where):
    src = _external_model(tmp_path / "m")
    folder = tmp_path / "other" if where == "sibling" else tmp_path / "m" / "sub"
    folder.mkdir()
    with pytest.raises(errors.UsageError, match="not inside the output folder"):
        save(load(src), folder / "out.onnx", share_data=True)
    assert list(folder.iterdir()) == []


def test_a_symlink_on_the_shared_path_is_refused(tmp_path):
    real = tmp_path / "real"
    _external_model(real)
    (tmp_path / "link").symlink_to(real, target_is_directory=True)
    model = load(tmp_path / "link" / "cnn.onnx")  # the data folder is reached through the link
    with pytest.raises(errors.UsageError, match="symbolic link"):
        save(model, tmp_path / "out.onnx", share_data=True)
    assert not (tmp_path / "out.onnx").exists()


def test_independent_copy_writes_each_byte_range_once(tmp_path):
    src = _external_model(tmp_path / "m")
    model = load(src)
    result = copy(model, ["logits"], weights=Weights.INDEPENDENT, prefix="twin/")
    assert result.initializers  # the copy has its own initializers...
    out = save(model, tmp_path / "twin.onnx")
    data = tmp_path / "twin.onnx.data"
    in_size = os.path.getsize(tmp_path / "m" / "cnn.onnx.data")
    assert os.path.getsize(data) <= in_size + 64 * len(model.proto.graph.initializer)  # ...once
    got = _run(out)
    np.testing.assert_array_equal(got["logits"], got["twin/logits"])
    np.testing.assert_array_equal(got["logits"], _run(src)["logits"])


def test_cli_share_data_on_every_rewriting_verb(tmp_path):
    src = _external_model(tmp_path / "m")
    folder = tmp_path / "m"
    commands = {
        "insert": ["--at", "act", "--op", "l2_normalize:axis=1"],
        "copy": ["--outputs", "logits", "--prefix", "twin/"],
        "extract": ["--outputs", "logits"],
        "reroute": ["--from", "act", "--to", "conv5_out", "--consumers", "pool"],
    }
    for verb, extra in commands.items():
        out = folder / f"{verb}.onnx"
        proc = subprocess.run(
            [sys.executable, "-m", "onnxsurgeon", verb, str(src), "-o", str(out), *extra,
             "--share-data", "--verify"], capture_output=True, text=True)
        assert proc.returncode == 0, (verb, proc.stderr)
        assert not Path(str(out) + ".data").exists(), verb
        assert _locations(out) == {"cnn.onnx.data"}, verb
    other = tmp_path / "elsewhere"
    other.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "onnxsurgeon", "insert", str(src), "-o", str(other / "o.onnx"),
         "--at", "act", "--op", "identity", "--share-data"], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "--share-data" in proc.stderr and "Traceback" not in proc.stderr
    assert list(other.iterdir()) == []
