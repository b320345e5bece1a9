"""External data written on save (``datastream.RangeWriter``): the byte ranges land exactly,
with direct I/O (no page cache for the output), through the kernel or through memory; on the
page-cache paths each finished window is handed to the disk while the next is copied, so the
fsync before the rename waits only for the tail."""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnxsurgeon.datastream import ALIGNMENT, BLOCK, RangeWriter
from onnxsurgeon.errors import InvalidModelError
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


PATHS = ["direct", "copy_file_range", "pread"]


def _writer(fd: int, path: str, **kw) -> RangeWriter:
    """A writer on ``fd`` that takes ``path`` (skips where this filesystem has no direct I/O)."""
    writer = RangeWriter(fd, direct=path == "direct", **kw)
    if path == "direct" and writer.direct is None:
        writer.close()
        pytest.skip("this filesystem takes no O_DIRECT")
    writer.kernel_copy = path == "copy_file_range" and writer.kernel_copy
    return writer


def _copy_all(writer: RangeWriter, fd: int, refs: list[ExternalRef], out: Path) -> list[int]:
    """Copy every range, finish the file, close the writer and ``fd``; returns the starts."""
    try:
        starts = [writer.copy(ref, f"w{i}") for i, ref in enumerate(refs)]
        writer.finish()
    finally:
        writer.close()
        os.close(fd)
    assert out.stat().st_size == writer.offset
    return starts


@pytest.mark.parametrize("path", PATHS)
def test_ranges_longer_than_a_window_are_copied_exactly(tmp_path, path):
    window = 64 * KB
    sizes = [5 * window + 123, 1000, 3 * window - 7]
    data, refs = _data_refs(tmp_path, sizes)
    fd = os.open(tmp_path / "out.data", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    writer = _writer(fd, path, window=window)
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


@pytest.mark.parametrize("path", PATHS)
def test_large_ranges_keep_their_place_in_a_block(tmp_path, path):
    """A range of >= 1 MiB at a 64-byte aligned source offset starts at an output offset
    congruent to it modulo 4 KiB (what a reflinking filesystem needs to clone it, and what lets
    direct I/O write it straight from the source's pages), still 64-byte aligned; other ranges
    are only 64-byte aligned."""
    mib = 1 << 20
    # w1 at 1000 (not 64-aligned), w2 at 1000 + mib + 24 = 64 * 16400 (64- not 4096-aligned)
    sizes = [1000, mib + 24, 2 * mib + 3, 5053, mib - 64]
    data, refs = _data_refs(tmp_path, sizes)
    offsets = np.cumsum([0, *sizes[:-1]])
    fd = os.open(tmp_path / "out.data", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    writer = _writer(fd, path, window=256 * KB)  # the direct stage fills and flushes too
    starts = _copy_all(writer, fd, refs, tmp_path / "out.data")
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


def _matmul_model(folder: Path, weight: np.ndarray) -> np.ndarray:
    """``folder/m.onnx``: y = x @ W with ``weight`` (as float32) in ``m.onnx.data``; returns W."""
    weight = weight.astype(np.float32)
    rows, cols = weight.shape
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, rows])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cols])],
        [onnx.numpy_helper.from_array(weight, "W")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
              folder / "m.onnx", save_as_external_data=True, location="m.onnx.data")
    return weight


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
    writer = RangeWriter(fd, window=window, direct=False)  # the page-cache path
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
def test_direct_writes_keep_the_output_out_of_the_page_cache(tmp_path):
    """Large block-aligned ranges go from the source's pages to the disk, the rest through the
    stage: the output's bytes are exact and it holds (almost) no page cache, so the save
    neither waits for a writeback of its own copy nor fills memory with it."""
    mib = 1 << 20
    # w0 at 0: straight from a mapping but for its last partial block; w1 at 16 MiB + 5000:
    # 8-byte aligned only, so staged (through the 8 MiB stage, twice full); w2 small; w3 ends
    # where w4 starts 64- but not 4096-byte aligned: w4's head is staged, the rest mapped
    sizes = [16 * mib + 5000, 17 * mib + 3, 777, 3 * mib, 5 * mib + 11]
    sizes[3] += (-sum(sizes[:4])) % ALIGNMENT + ALIGNMENT
    data, refs = _data_refs(tmp_path, sizes)
    w4_at = sum(sizes[:4])
    assert w4_at % ALIGNMENT == 0 and w4_at % BLOCK != 0
    fd = os.open(tmp_path / "out.data", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    writer = _writer(fd, "direct")
    try:
        starts = [writer.copy(ref, f"w{i}") for i, ref in enumerate(refs)]
        at = writer.write(b"inline bytes")
        writer.finish()
        os.fsync(fd)
        cached = _cachestat(fd).nr_cache
        mapped = writer.direct.mapped
        import fcntl

        still_direct = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT
    finally:
        writer.close()
        os.close(fd)
    # the tail block, zeroed past the end by the cut to length, may stay
    assert cached <= 2, f"{cached} pages of the output went through the page cache"
    assert still_direct, "a write was refused and the writer fell back to the page cache"

    def body(start: int, size: int) -> int:  # the whole blocks of a range
        return (start + size) // BLOCK * BLOCK - (start + (-start) % BLOCK)

    assert starts[4] % BLOCK == w4_at % BLOCK
    # no copy through memory where the blocks match: w0's and w4's whole blocks
    assert mapped == body(0, sizes[0]) + body(starts[4], sizes[4]) == 21 * mib
    out = (tmp_path / "out.data").read_bytes()
    assert len(out) == writer.offset
    offsets = np.cumsum([0, *sizes[:-1]])
    for start, offset, size in zip(starts, offsets, sizes, strict=True):
        assert out[start:start + size] == data[offset:offset + size]
    assert out[at:at + 12] == b"inline bytes"
    gaps = np.ones(len(out), dtype=bool)
    for start, size in zip([*starts, at], [*sizes, 12], strict=True):
        gaps[start:start + size] = False
    assert not np.frombuffer(out, dtype=np.uint8)[gaps].any()  # alignment gaps read as zeros


@pytest.mark.skipif(not hasattr(os, "O_DIRECT"), reason="no direct I/O on this platform")
def test_the_writer_takes_direct_io_where_the_filesystem_does(tmp_path, monkeypatch):
    """Probed without the writer: where a file opens with O_DIRECT, the writer uses it (and
    with ``direct=False`` or ONNXSURGEON_DIRECT_IO=0 it does not)."""
    try:
        os.close(os.open(tmp_path / "probe", os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o644))
    except OSError:
        pytest.skip("this filesystem takes no O_DIRECT")
    fds = [os.open(tmp_path / f"out{i}.data", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
           for i in range(3)]
    writers = [RangeWriter(fds[0]), RangeWriter(fds[1], direct=False)]
    monkeypatch.setenv("ONNXSURGEON_DIRECT_IO", "0")
    writers.append(RangeWriter(fds[2]))
    try:
        assert [w.direct is not None for w in writers] == [True, False, False]
    finally:
        for w, fd in zip(writers, fds, strict=True):
            w.close()
            os.close(fd)


@pytest.mark.parametrize("path", PATHS)
def test_a_source_cut_short_while_saving_is_refused(tmp_path, path):
    """The data file shrinks after the writer opened it: a mapped window past its end, a read
    or a kernel copy finds it, and the save fails with a clear error instead of a crash or a
    file of zeros."""
    mib = 1 << 20
    sizes = [3 * BLOCK, 2 * mib, 1000]
    data, refs = _data_refs(tmp_path, sizes)
    fd = os.open(tmp_path / "out.data", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    writer = _writer(fd, path)
    try:
        writer.copy(refs[0], "w0")  # opens the source, with its size then
        os.truncate(tmp_path / "w.data", 3 * BLOCK + mib)
        with pytest.raises(InvalidModelError, match="'w.data' ended early; it is truncated"):
            writer.copy(refs[1], "w1")
    finally:
        writer.close()
        os.close(fd)


def test_a_direct_write_the_file_refuses_goes_through_the_page_cache(tmp_path):
    """Where the file refuses a direct write (EINVAL: here a misaligned one, as a device with
    larger blocks would), the writer drops O_DIRECT and the same bytes go through the cache."""
    import fcntl

    data, refs = _data_refs(tmp_path, [5 * BLOCK + 7, 1 << 20])
    fd = os.open(tmp_path / "out.data", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    writer = _writer(fd, "direct")
    try:
        os.pwrite(fd, b"x", 1)
        writer.close()
        os.close(fd)
        pytest.skip("this filesystem takes misaligned direct writes itself")
    except OSError as exc:
        assert exc.errno == errno.EINVAL
    writer.direct._write(memoryview(b"head"), 1, "")  # refused, then written buffered
    assert not fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT
    assert os.pread(fd, 4, 1) == b"head"
    # and the writer goes on through the page cache, whatever the alignment
    starts = _copy_all(writer, fd, refs, tmp_path / "out.data")
    out = (tmp_path / "out.data").read_bytes()
    assert out[starts[0]:starts[0] + 5 * BLOCK + 7] == data[:5 * BLOCK + 7]
    assert out[starts[1]:] == data[5 * BLOCK + 7:]


@CACHESTAT
def test_a_save_over_an_output_first_releases_the_old_data_files_pages(tmp_path):
    """The old data file keeps its bytes (another open handle still reads them) but no longer
    holds memory while the new one is copied: what cp's truncation gives, without losing the
    atomic replace."""
    folder = tmp_path / "m"
    folder.mkdir()
    weight = _matmul_model(folder, np.random.default_rng(2).standard_normal((512, 1024)))
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


def test_save_of_a_large_external_model_is_exact_and_deterministic(tmp_path, monkeypatch):
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
    monkeypatch.setenv("ONNXSURGEON_DIRECT_IO", "0")  # the page-cache path: the same bytes
    save(model, tmp_path / "c.onnx")
    assert (tmp_path / "c.onnx.data").read_bytes() == (tmp_path / "a.onnx.data").read_bytes()
    assert (tmp_path / "c.onnx").read_bytes().replace(b"c.onnx.data", b"a.onnx.data") == \
        (tmp_path / "a.onnx").read_bytes()
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


_FULL_DISK = r'''
import os, resource, signal, sys
from pathlib import Path
import numpy as np
from onnxsurgeon.errors import UsageError
from onnxsurgeon.io import load, save

folder = Path(sys.argv[1])
model = load(folder / "in.onnx")
before = [(e.key, e.value) for e in model.proto.graph.initializer[0].external_data]
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[2]), hard))
try:
    save(model, folder / "out.onnx")
except UsageError as exc:
    print("refused:", exc)
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
assert not (folder / "out.onnx").exists() and not (folder / "out.onnx.data").exists()
assert [(e.key, e.value) for e in model.proto.graph.initializer[0].external_data] == before
save(model, folder / "out.onnx")  # the model is as loaded: the next save works
print("saved")
'''


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_FSIZE and SIGXFSZ")
@pytest.mark.parametrize("path", ["direct", "page cache"])
def test_a_write_the_disk_refuses_is_a_clear_error_and_leaves_the_model_intact(tmp_path, path):
    """A data file that cannot be written to its end (here the kernel's EFBIG past a file size
    limit, as a full disk gives ENOSPC; the last, staged block is the one refused): one clear
    error, nothing published, the in-memory model unchanged, and the next save works."""
    import subprocess

    size = 600 * BLOCK + 100  # the direct path maps 600 blocks, then stages the last one
    weight = np.arange(size // 4, dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("Identity", ["w"], ["y"])], "g", [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [weight.size])],
        [onnx.numpy_helper.from_array(weight, "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
              tmp_path / "in.onnx", save_as_external_data=True, location="in.onnx.data",
              size_threshold=0)
    env = {**os.environ, "ONNXSURGEON_DIRECT_IO": "1" if path == "direct" else "0"}
    done = subprocess.run([sys.executable, "-c", _FULL_DISK, str(tmp_path), str(size - 50)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "refused: cannot write" in done.stdout and "File too large" in done.stdout
    assert done.stdout.rstrip().endswith("saved")
    back = onnx.load(str(tmp_path / "out.onnx"))
    np.testing.assert_array_equal(onnx.numpy_helper.to_array(back.graph.initializer[0]), weight)


def test_a_direct_file_given_more_length_than_its_bytes_reads_zeros_there(tmp_path):
    """``finish`` with a length past the last byte: the padding of the last block and the rest
    read as zeros, whatever the stage held before (it is reused across flushes)."""
    data, refs = _data_refs(tmp_path, [3 * BLOCK + 10, 2 * BLOCK + 5])
    fd = os.open(tmp_path / "out.data", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    writer = _writer(fd, "direct", window=2 * BLOCK)  # a stage of two blocks, flushed often
    sink = writer.direct
    try:
        first = writer.copy(refs[0], "w0")
        second = writer.copy(refs[1], "w1")
        end = writer.offset
        sink.finish(end + 3 * BLOCK)
    finally:
        writer.close()
        os.close(fd)
    out = (tmp_path / "out.data").read_bytes()
    assert len(out) == end + 3 * BLOCK
    assert out[first:first + 3 * BLOCK + 10] == data[:3 * BLOCK + 10]
    assert out[second:end] == data[3 * BLOCK + 10:]
    assert out[end:] == bytes(3 * BLOCK)


@pytest.fixture
def xfs_folder(tmp_path):
    """A fresh XFS with reflinks, loop-mounted for the test (needs root, mkfs.xfs from Debian's
    xfsprogs, which .ci/run installs, and loop devices; skipped otherwise)."""
    import shutil
    import subprocess

    if not sys.platform.startswith("linux") or os.geteuid() != 0 or not shutil.which("mkfs.xfs"):
        pytest.skip("a loop-mounted XFS needs Linux, root and mkfs.xfs")
    image, mount = tmp_path / "xfs.img", tmp_path / "xfs"
    mount.mkdir()
    with open(image, "wb") as f:
        f.truncate(320 << 20)
    made = subprocess.run(["mkfs.xfs", "-q", "-m", "reflink=1", str(image)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"mkfs.xfs failed: {made.stderr.decode()[:200]}")
    mounted = subprocess.run(["mount", "-o", "loop", str(image), str(mount)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot loop-mount here: {mounted.stderr.decode()[:200]}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def _used_bytes(folder: Path) -> int:
    os.sync()
    st = os.statvfs(folder)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def test_on_a_reflinking_filesystem_large_ranges_are_shared_not_written(xfs_folder):
    """On XFS the direct writer clones the matching whole blocks (FICLONERANGE) instead of
    writing them: exact bytes, next to no new disk space; the rest is written as elsewhere.
    Then a whole save of a model there does the same."""
    mib = 1 << 20
    sizes = [8 * mib + 100, 3000, 5 * mib]
    sizes[1] += (-sum(sizes[:2])) % ALIGNMENT  # w2 64-byte aligned, not 4096: a staged head
    data, refs = _data_refs(xfs_folder, sizes)
    before = _used_bytes(xfs_folder)
    fd = os.open(xfs_folder / "out.data", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    writer = _writer(fd, "direct")
    sink = writer.direct
    starts = _copy_all(writer, fd, refs, xfs_folder / "out.data")
    out = (xfs_folder / "out.data").read_bytes()
    offsets = np.cumsum([0, *sizes[:-1]])
    for start, offset, size in zip(starts, offsets, sizes, strict=True):
        assert out[start:start + size] == data[offset:offset + size]
    assert sink.cloned == 8 * mib + (5 * mib // BLOCK - 1) * BLOCK  # w0's, w2's whole blocks
    assert sink.mapped == 0
    assert _used_bytes(xfs_folder) - before < mib  # the heads, tails and w1: a few blocks

    weight = _matmul_model(xfs_folder, np.random.default_rng(3).standard_normal((1024, 2048)))
    before = _used_bytes(xfs_folder)
    save(load(xfs_folder / "m.onnx"), xfs_folder / "copy.onnx")
    assert _used_bytes(xfs_folder) - before < weight.nbytes // 4
    back = onnx.load(str(xfs_folder / "copy.onnx"))
    np.testing.assert_array_equal(onnx.numpy_helper.to_array(back.graph.initializer[0]), weight)
