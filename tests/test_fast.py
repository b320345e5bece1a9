"""The accelerators behind ``onnxsurgeon.fast``: the one switch (and its old aliases) turns each
off, the plain and the fast paths give the same bytes, and an accelerator that is not there
(the C extension missing) falls back silently to the plain path.

The scan's answers on many models both ways are ``tests/test_scan.py``'s; the writer's paths on
hand-made ranges are ``tests/test_datastream.py``'s. Here: the switch itself, and whole saves.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnxsurgeon import fast, scan
from onnxsurgeon.datastream import RangeWriter, release_cache
from onnxsurgeon.errors import UsageError
from onnxsurgeon.io import load, save

from . import builders


@pytest.fixture(autouse=True)
def _clean_switch(monkeypatch):
    for var in (fast.ENV, *(a.alias for a in fast.ACCELERATORS.values() if a.alias)):
        monkeypatch.delenv(var, raising=False)


def _on(monkeypatch, **env: str) -> set[str]:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return {name for name, _, on in fast.status() if on}


ALL = {n for n in fast.NAMES if fast.available(n)}


@pytest.mark.parametrize(("env", "off"), [
    ({}, set()),
    ({"ONNXSURGEON_FAST": "all"}, set()),
    ({"ONNXSURGEON_FAST": "none"}, set(fast.NAMES)),
    ({"ONNXSURGEON_FAST": "-direct_io"}, {"direct_io"}),
    ({"ONNXSURGEON_FAST": "none,scan, reflink"}, set(fast.NAMES) - {"scan", "reflink"}),
    ({"ONNXSURGEON_FAST": "-scan,-writeback"}, {"scan", "writeback"}),
    ({"ONNXSURGEON_SCAN": "0"}, {"scan"}),  # the old names stay aliases
    ({"ONNXSURGEON_DIRECT_IO": "0"}, {"direct_io"}),
    ({"ONNXSURGEON_DIRECT_IO": "0", "ONNXSURGEON_FAST": "direct_io"}, {"direct_io"}),
    ({"ONNXSURGEON_SCAN": "1"}, set()),
])
def test_the_switch_turns_each_accelerator_off(monkeypatch, env, off):
    assert _on(monkeypatch, **env) == ALL - off


def test_forced_overrides_the_environment_and_restores_it(monkeypatch):
    monkeypatch.setenv(fast.ENV, "none")
    with fast.forced(scan=True):
        assert fast.enabled("scan") == fast.available("scan")
        with fast.plain():
            assert not any(on for _, _, on in fast.status())
        assert fast.enabled("scan") == fast.available("scan")
    assert not fast.enabled("scan")


@pytest.mark.parametrize("value", ["scna", "-", "direct-io"])
def test_an_unknown_name_in_the_switch_is_a_one_line_usage_error(monkeypatch, value):
    monkeypatch.setenv(fast.ENV, value)
    with pytest.raises(UsageError, match=r"ONNXSURGEON_FAST=.*unknown accelerator") as err:
        fast.enabled("scan")
    assert "\n" not in str(err.value)
    with pytest.raises(UsageError, match="unknown accelerator 'nope'"):
        fast.forced(nope=True).__enter__()


def test_the_scan_switch_makes_the_c_passes_step_aside(tmp_path):
    data = builders.chain(20).SerializeToString()
    assert (scan.initializers(data) is not None) == fast.available("scan")
    with fast.forced(scan=False):
        assert scan.initializers(data) is None and scan.nodes(data, {}) is None
        plain = load(_saved(tmp_path, builders.chain(20)))
    fast_model = load(tmp_path / "m.onnx")
    assert fast_model.proto == plain.proto


def _saved(folder, proto) -> object:
    path = folder / "m.onnx"
    onnx.save(proto, path)
    return path


_WITHOUT_EXTENSION = r'''
import sys
sys.modules["onnxsurgeon._scan"] = None  # the .so missing: importing it raises ImportError
from onnxsurgeon import fast, io, scan
path = sys.argv[1]
model = io.load(path)
assert not fast.available("scan") and not fast.enabled("scan") and not scan.available()
assert scan.initializers(open(path, "rb").read()) is None
io.save(model, sys.argv[2])
print("plain", len(model.proto.graph.node))
'''


def test_a_missing_extension_falls_back_silently_to_the_python_passes(tmp_path):
    src = _saved(tmp_path, builders.chain(30))
    out = tmp_path / "out.onnx"
    run = subprocess.run([sys.executable, "-c", _WITHOUT_EXTENSION, str(src), str(out)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["plain", str(len(builders.chain(30).graph.node))]
    assert run.stderr == ""
    ref = tmp_path / "ref.onnx"
    save(load(src), ref)
    assert out.read_bytes() == ref.read_bytes()


@pytest.fixture(scope="module")
def external_model(tmp_path_factory):
    """Weights over a 32 MiB window and under 1 MiB, some at unaligned offsets, in one data
    file: every writer path (clone or mapping, staging, kernel copy, pread) has work."""
    folder = tmp_path_factory.mktemp("fast_ext")
    rng = np.random.default_rng(3)
    shapes = [(2048, 4096 + 3), (5, 7), (1024, 300), (3,), (64, 64)]
    inits = [onnx.numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), f"W{i}")
             for i, s in enumerate(shapes)]
    nodes = [helper.make_node("Identity", [f"W{i}"], [f"y{i}"]) for i in range(len(shapes))]
    outs = [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, list(s))
            for i, s in enumerate(shapes)]
    graph = helper.make_graph(nodes, "g", [], outs, inits)
    path = folder / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path,
              save_as_external_data=True, location="m.onnx.data", size_threshold=0)
    return load(path)


SWITCHES = [
    "all", "none", "-direct_io", "-reflink", "-direct_io,-kernel_copy", "-direct_io,-writeback",
    "none,direct_io", "-release_cache",
]


def test_every_switch_saves_the_same_bytes(tmp_path, monkeypatch, external_model):
    got = {}
    for value in SWITCHES:
        monkeypatch.setenv(fast.ENV, value)
        out = tmp_path / value.replace(",", "_") / "out.onnx"
        out.parent.mkdir()
        save(external_model, out)
        got[value] = (out.read_bytes(), (out.parent / "out.onnx.data").read_bytes())
    assert all(v == got["all"] for v in got.values()), [k for k, v in got.items()
                                                        if v != got["all"]]


def test_the_writer_takes_only_what_the_switch_allows(tmp_path):
    def writer(**on: bool) -> RangeWriter:
        fd = os.open(tmp_path / "w.data", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        with fast.forced(**on):
            w = RangeWriter(fd)
        w.close()
        os.close(fd)
        return w

    plain = writer(**dict.fromkeys(fast.NAMES, False))
    assert plain.direct is None and not plain.kernel_copy and plain._start_writeback is None
    quick = writer(**dict.fromkeys(fast.NAMES, True))
    assert quick.kernel_copy == fast.available("kernel_copy")
    no_clone = writer(reflink=False, direct_io=True)
    if quick.direct is None:
        pytest.skip("this filesystem takes no O_DIRECT")
    assert quick.direct.clones and no_clone.direct is not None and not no_clone.direct.clones


def test_a_mistyped_switch_is_exit_2_with_one_line_from_the_cli(tmp_path, monkeypatch, capsys):
    from onnxsurgeon import cli

    src = _saved(tmp_path, builders.chain(5))
    monkeypatch.setenv(fast.ENV, "-scna")
    assert cli.main(["extract", str(src), "-o", str(tmp_path / "o.onnx"), "--outputs", "y"]) == 2
    err = capsys.readouterr().err
    assert "unknown accelerator '-scna'" in err and err.count("\n") == 1
    assert not (tmp_path / "o.onnx").exists()


def _cached_bytes(path) -> int:
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)],
                         capture_output=True, text=True, check=True)
    return int(out.stdout.split()[0])


@pytest.mark.skipif(not shutil.which("fincore") or not fast.available("release_cache"),
                    reason="needs util-linux fincore and posix_fadvise")
def test_release_cache_drops_the_replaced_files_pages_only_when_on(tmp_path):
    path = tmp_path / "old.data"
    with open(path, "wb") as f:
        f.write(os.urandom(1 << 20))
        os.fsync(f.fileno())  # clean pages: only those can be dropped
    path.read_bytes()  # cached
    with fast.forced(release_cache=False):
        release_cache(path)
    assert _cached_bytes(path) > 0
    release_cache(path)
    assert _cached_bytes(path) == 0
