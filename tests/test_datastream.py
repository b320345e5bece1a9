"""External data written on save (``datastream.RangeWriter``): the byte ranges land exactly,
through the kernel or through memory, and each finished window is handed to the disk while the
next is copied, so the fsync before the rename waits only for the tail."""

from __future__ import annotations

import ctypes
import os
import platform
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnxsurgeon.datastream import ALIGNMENT, BLOCK, RangeWriter
from onnxsurgeon.external import ExternalRef, resolve_external
from onnxsurgeon.io import load, save

KB = 1 << 10


def _data_refs(folder: Path, sizes: list[int]) -> tuple[bytes, list[ExternalRef]]:
    """A data file of random bytes holding one uint8 tensor per size, back to back, and the
    validated references to them (as load makes them)."""
    data = np.random.default_rng(0).integers(0, 256, sum(sizes), dtype=np.uint8).tobytes()
    (folder / "w.data").write_bytes(data)
    refs, offset = [], 0
    for i, size in enumerate(sizes):
        t = TensorProto(name=f"w{i}", data_type=TensorProto.UINT8, dims=[size],
                        data_location=TensorProto.EXTERNAL)
        for key, value in (("location", "w.data"), ("offset", str(offset)),
                           ("length", str(size))):
            entry = t.external_data.add()
            entry.key, entry.value = key, value
        refs.append(resolve_external(t, folder))
        offset += size
    return data, refs


@pytest.mark.parametrize("kernel", [True, False], ids=["copy_file_range", "pread"])
def test_ranges_longer_than_a_window_are_copied_exactly(tmp_path, kernel):
    window = 64 * KB
    sizes = [5 * window + 123, 1000, 3 * window - 7]
    data, refs = _data_refs(tmp_path, sizes)
    fd = os.open(tmp_path / "out.data", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    writer = RangeWriter(fd, window=window)
    writer.kernel_copy = kernel and writer.kernel_copy
    try:
        starts = [writer.copy(ref, f"w{i}") for i, ref in enumerate(refs)]
        inline = b"inline bytes"
        at = writer.write(inline)
        assert writer.copy(refs[0], "again") == starts[0]  # a range is written once
        writer.finish()
    finally:
        writer.close()
        os.close(fd)
    out = (tmp_path / "out.data").read_bytes()
    assert len(out) == writer.offset
    offset = 0
    for start, size in zip(starts, sizes, strict=True):
        assert start % ALIGNMENT == 0
        assert out[start:start + size] == data[offset:offset + size]
        offset += size
    assert out[at:at + len(inline)] == inline


def test_large_ranges_keep_their_place_in_a_block(tmp_path):
    """A range of >= 1 MiB at a 64-byte aligned source offset starts at an output offset
    congruent to it modulo 4 KiB (what a reflinking filesystem needs to clone it), still 64-byte
    aligned; other ranges are only 64-byte aligned."""
    mib = 1 << 20
    # w1 at 1000 (not 64-aligned), w2 at 1000 + mib + 24 = 64 * 16400 (64- not 4096-aligned)
    sizes = [1000, mib + 24, 2 * mib + 3, 5053, mib - 64]
    data, refs = _data_refs(tmp_path, sizes)
    offsets = np.cumsum([0, *sizes[:-1]])
    fd = os.open(tmp_path / "out.data", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    writer = RangeWriter(fd)
    try:
        starts = [writer.copy(ref, f"w{i}") for i, ref in enumerate(refs)]
        writer.finish()
    finally:
        writer.close()
        os.close(fd)
    out = (tmp_path / "out.data").read_bytes()
    for start, offset, size in zip(starts, offsets, sizes, strict=True):
        assert start % ALIGNMENT == 0
        assert out[start:start + size] == data[offset:offset + size]
    assert offsets[2] % ALIGNMENT == 0 and offsets[2] % BLOCK != 0
    assert starts[2] % BLOCK == offsets[2] % BLOCK  # large, 64-aligned source: same place
    assert starts[2] - (starts[1] + sizes[1]) < BLOCK
    assert offsets[1] % ALIGNMENT != 0 and starts[1] == 1024  # unaligned source: next 64
    assert starts[3] - (starts[2] + sizes[2]) < ALIGNMENT  # small ranges: 64-byte aligned
    assert offsets[4] % ALIGNMENT == 0 and offsets[4] % BLOCK != 0
    assert starts[4] - (starts[3] + sizes[3]) < ALIGNMENT  # just under 1 MiB: as small


class _CacheStat(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in
                ("nr_cache", "nr_dirty", "nr_writeback", "nr_evicted", "nr_recently_evicted")]


def _cachestat(fd: int) -> _CacheStat:
    """The page cache state of ``fd``'s whole file (Linux cachestat)."""
    whole = (ctypes.c_uint64 * 2)(0, 0)  # offset 0, length 0: the whole file
    stat = _CacheStat()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(451, fd, ctypes.byref(whole), ctypes.byref(stat), 0) != 0:
        pytest.skip(f"no cachestat syscall here ({os.strerror(ctypes.get_errno())})")
    return stat


def _dirty_pages(fd: int) -> int:
    """Pages of ``fd``'s file that are dirty and not yet queued for writing."""
    return int(_cachestat(fd).nr_dirty)


CACHESTAT = pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.machine() != "x86_64",
    reason="cachestat (syscall 451 on x86_64 Linux >= 6.5) observes the page cache")


@CACHESTAT
def test_finished_windows_are_handed_to_the_disk_while_copying(tmp_path):
    window = 1 << 20
    page = os.sysconf("SC_PAGE_SIZE")
    data, refs = _data_refs(tmp_path, [16 * window + 5000])
    control = os.open(tmp_path / "control.data", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.pwrite(control, data, 0)
        if _dirty_pages(control) < len(data) // page // 2:
            pytest.skip("the kernel is already writing back on its own; nothing to observe")
        os.fsync(control)
        if _dirty_pages(control):
            pytest.skip("this filesystem keeps no writeback state (tmpfs?)")
    finally:
        os.close(control)
    fd = os.open(tmp_path / "out.data", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    writer = RangeWriter(fd, window=window)
    try:
        writer.copy(refs[0], "w0")
        # every whole window went to the disk; at most the last (partial) one waits
        assert _dirty_pages(fd) <= window // page + 2
        writer.finish()
        assert _dirty_pages(fd) == 0  # the tail too: the save's fsync only waits
    finally:
        writer.close()
        os.close(fd)
    assert (tmp_path / "out.data").read_bytes() == data


@CACHESTAT
def test_a_save_over_an_output_first_releases_the_old_data_files_pages(tmp_path):
    """The old data file keeps its bytes (another open handle still reads them) but no longer
    holds memory while the new one is copied: what cp's truncation gives, without losing the
    atomic replace."""
    folder = tmp_path / "m"
    folder.mkdir()
    weight = np.random.default_rng(2).standard_normal((512, 1024)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 512])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1024])],
        [onnx.numpy_helper.from_array(weight, "W")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
              folder / "m.onnx", save_as_external_data=True, location="m.onnx.data")
    model = load(folder / "m.onnx")
    save(model, tmp_path / "out.onnx")
    old = tmp_path / "out.onnx.data"
    old_bytes = old.read_bytes()  # cached now
    fd = os.open(old, os.O_RDONLY)  # keeps the old file alive after the rename
    try:
        if _cachestat(fd).nr_cache == 0:
            pytest.skip("this filesystem keeps no page cache for the file")
        save(model, tmp_path / "out.onnx")
        assert _cachestat(fd).nr_cache == 0
        assert os.pread(fd, len(old_bytes) + 1, 0) == old_bytes  # content untouched
    finally:
        os.close(fd)
    np.testing.assert_array_equal(
        onnx.numpy_helper.to_array(onnx.load(str(tmp_path / "out.onnx")).graph.initializer[0]),
        weight)


def test_save_of_a_large_external_model_is_exact_and_deterministic(tmp_path):
    """Through the public save: weights spanning several 32 MiB windows come out bit-exact
    (onnx reads them back), and two saves give byte-identical files."""
    folder = tmp_path / "m"
    folder.mkdir()
    rng = np.random.default_rng(1)
    weights = [rng.standard_normal((2048, 2048 + 7 * i)).astype(np.float32) for i in range(3)]
    nodes, prev = [], "x"
    for i in range(len(weights)):
        nodes.append(helper.make_node("MatMul", [prev, f"W{i}"], [f"y{i}"]))
        prev = f"y{i}"
    graph = helper.make_graph(
        nodes[:1], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2048])],
        [helper.make_tensor_value_info("y0", TensorProto.FLOAT, [1, 2048])],
        [onnx.numpy_helper.from_array(w, f"W{i}") for i, w in enumerate(weights)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
              folder / "m.onnx", save_as_external_data=True, location="m.onnx.data")
    model = load(folder / "m.onnx")
    first = save(model, tmp_path / "a.onnx")
    second = save(model, tmp_path / "b.onnx")
    back = onnx.load(str(first))
    for i, w in enumerate(weights):
        got = onnx.numpy_helper.to_array(back.graph.initializer[i])
        np.testing.assert_array_equal(got, w)
    assert (tmp_path / "a.onnx.data").read_bytes() == (tmp_path / "b.onnx.data").read_bytes()
    a = onnx.load(str(first), load_external_data=False)
    b = onnx.load(str(second), load_external_data=False)
    for ta, tb in zip(a.graph.initializer, b.graph.initializer, strict=True):
        assert [(e.key, e.value) for e in ta.external_data if e.key != "location"] == \
            [(e.key, e.value) for e in tb.external_data if e.key != "location"]
