"""Writing external data on save: validated byte ranges copied by the kernel, or shared in place.

:class:`RangeWriter` fills one new data file. Each source file is opened once (through
:func:`~onnxsurgeon.external.open_external`, which re-checks that it is the file validated on
load) and its ranges are copied with ``copy_file_range`` where the kernel has it (no byte passes
through Python: ``cp`` speed, constant memory), else with ``pread``/``pwrite`` in 4 MB chunks. A
range written once is written once: tensors reading the same bytes of the same file (a copy's
initializers, tied weights) point at one range of the output.

Durability: the save fsyncs every file before renaming it into place, so a crash or power loss
leaves no torn file. Where the filesystem takes direct I/O (Linux ``O_DIRECT``: ext4, XFS,
btrfs), the data file is written with it (:class:`_DirectSink`): the bytes go from the source
file's cached pages to the disk without passing through new page cache, so the save neither
waits for a later writeback of its own copy nor fills memory with it (a multi-GB save would
evict the user's other cached files; on a VM that hands free memory back to its host, those
fresh pages are what costs most). Ranges at the same place in a 4 KiB block of the source and
the output (every large, 64-byte aligned tensor: below) are cloned where the filesystem can,
else written straight from a mapping of the source, one 32 MiB window per call; the rest (heads
and tails of ranges, small or unaligned tensors, inline bytes, alignment gaps) is gathered in a
staging buffer of whole blocks. Elsewhere the writer copies through the page cache and hands
every finished 32 MiB window to the disk while it copies the next (Linux
``sync_file_range(SYNC_FILE_RANGE_WRITE)``: starts the writeback, waits for nothing), so the
fsync waits only for the tail. Each of these is an accelerator of :mod:`onnxsurgeon.fast`
(``direct_io``, ``reflink``, ``kernel_copy``, ``writeback``) with its plain path beside it;
``ONNXSURGEON_FAST=-direct_io`` (or ``ONNXSURGEON_DIRECT_IO=0``) takes the page-cache path on any
filesystem. All give the same bytes.

Reflinks: on filesystems with shared extents (XFS, btrfs, bcachefs) a range's whole blocks are
cloned instead of copied (no byte copied, no new disk space: ``FICLONERANGE`` on the direct
path, ``copy_file_range`` on the other) where both ends sit at the same place in a 4 KiB block.
So a range of at least 1 MiB whose source offset is 64-byte aligned starts at an output offset
congruent to its source offset modulo 4 KiB (still 64-byte aligned: at most 4032 bytes of zeros
before it), and the copy of its unaligned head is a call of its own.

:func:`shared_location` is ``save(share_data=True)``: instead of copying, the output names the
input's data file itself, by a path relative to the output's folder that must follow the same
rules as loading (inside that folder's tree, no ``..``, no symlink, no hard link) and must open
the very file (device and inode) that was validated.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import mmap
import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path

from . import fast
from .errors import InvalidModelError, UnsafeModelError, UsageError
from .external import (
    ExternalRef,
    _check_open_file,
    _open_beneath,
    _safe_relative,
    open_external,
)

ALIGNMENT = 64
"""Byte alignment of every tensor in written external data files."""
BLOCK = 4096
"""A range of at least ``CLONE_MIN`` bytes keeps its source offset modulo this."""
CLONE_MIN = 1 << 20
_CHUNK = 1 << 22
WINDOW = 1 << 25
"""Bytes copied per kernel call and handed to the disk at once (32 MiB)."""
STAGE = 1 << 23
"""Bytes of the direct writer's staging buffer (8 MiB, or the window where that is less)."""
_NO_DIRECT = {errno.EINVAL, errno.EOPNOTSUPP}
"""What a file that refuses a direct write says (then it is written through the page cache)."""
_NO_KERNEL_COPY = {errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EBADF,
                   errno.EPERM}


def _ended_early(name: str) -> InvalidModelError:
    """The error of a source data file shorter than a range it was validated to hold."""
    return InvalidModelError(f"external data file '{name}' ended early; it is truncated")


class RangeWriter:
    """Appends aligned byte ranges to the open, empty file ``fd`` (positional writes only).

    Not thread-safe; :meth:`close` closes the source files (not ``fd``).
    """

    def __init__(self, fd: int, *, window: int = WINDOW, direct: bool = True) -> None:
        self.fd = fd
        self.window = window  # bytes per kernel copy call and per writeback hand-over
        self.offset = 0
        # direct I/O where the file takes it (``direct=False`` or fast's direct_io off: never)
        self.direct = _DirectSink.start(fd, window) if direct else None
        self.kernel_copy = fast.enabled("kernel_copy")  # else pread/pwrite
        self._start_writeback = _writeback_starter() if fast.enabled("writeback") else None
        self._handed = 0  # bytes [0, _handed) are already on their way to the disk
        self._sources: dict[tuple[int, int], tuple[int, int]] = {}  # identity -> (fd, size)
        self._written: dict[tuple[int, int, int, int], int] = {}  # (dev, ino, off, len) -> start

    def _align(self) -> int:
        self.offset += (-self.offset) % ALIGNMENT  # the gap reads as zeros (a sparse hole)
        return self.offset

    def write(self, data: bytes) -> int:
        """Append ``data``; returns where it starts."""
        start = self._align()
        view = memoryview(data)
        if self.direct is not None:
            self.direct.put(view, start)
            self.offset = start + len(data)
            return start
        done = 0
        while done < len(view):
            done += os.pwrite(self.fd, view[done:done + _CHUNK], start + done)
            self._hand_over(start + done)
        self.offset = start + len(data)
        return start

    def copy(self, ref: ExternalRef, tensor: str) -> int:
        """Append the bytes ``ref`` names (once per distinct range); returns where they start."""
        key = (*ref.identity, ref.offset, ref.length)
        if ref.identity != (0, 0) and key in self._written:
            return self._written[key]
        src, size = self._source(ref, tensor)
        if ref.offset + ref.length > size:
            raise UnsafeModelError(
                f"external data file '{ref.path.name}' shrank while in use; load the model again"
            )
        start = self._align()
        if ref.length >= CLONE_MIN and ref.offset % ALIGNMENT == 0:
            start += (ref.offset - start) % BLOCK  # a multiple of ALIGNMENT: both offsets are
            self.offset = start
        self._copy_range(src, ref.offset, start, ref.length, ref)
        self.offset = start + ref.length
        self._written[key] = start
        return start

    def _source(self, ref: ExternalRef, tensor: str) -> tuple[int, int]:
        opened = self._sources.get(ref.identity) if ref.identity != (0, 0) else None
        if opened is None:
            fd = open_external(ref, tensor)  # refuses a file replaced since it was validated
            opened = (fd, os.fstat(fd).st_size)
            if ref.identity != (0, 0):
                self._sources[ref.identity] = opened
            else:  # pragma: no cover - hand-built refs: not cached, closed with the others
                self._sources[(-1, fd)] = opened
        return opened

    def _copy_range(self, src: int, at: int, to: int, length: int, ref: ExternalRef) -> None:
        if self.direct is not None:
            self.direct.copy(src, at, to, length, ref.path.name)
            return
        done = 0
        while done < length and self.kernel_copy:
            want = min(self.window, length - done)
            head = (-(at + done)) % BLOCK
            if head and (at - to) % BLOCK == 0:
                want = min(want, head)  # then block-aligned calls, which the kernel may clone
            try:
                n = os.copy_file_range(src, self.fd, want, at + done, to + done)
            except OSError as exc:
                if exc.errno not in _NO_KERNEL_COPY:
                    raise
                self.kernel_copy = False  # this filesystem pair cannot: copy through memory
                break
            if n == 0:
                raise _ended_early(ref.path.name)
            done += n
            self._hand_over(to + done)
        while done < length:
            chunk = os.pread(src, min(_CHUNK, length - done), at + done)
            if not chunk:
                raise _ended_early(ref.path.name)
            view = memoryview(chunk)
            while view:
                n = os.pwrite(self.fd, view, to + done)
                view = view[n:]
                done += n
            self._hand_over(to + done)

    def _hand_over(self, end: int) -> None:
        """Start writeback of ``[_handed, end)`` once it spans a whole window."""
        if self._start_writeback is not None and end - self._handed >= self.window:
            if not self._start_writeback(self.fd, self._handed, end - self._handed):
                self._start_writeback = None  # this file cannot: the final fsync does it all
            self._handed = end

    def finish(self) -> None:
        """Give the file its full length (a trailing alignment gap included) and start the
        writeback of what is left (the caller's fsync waits for it)."""
        if self.direct is not None:
            self.direct.finish(self.offset)
            return
        os.ftruncate(self.fd, self.offset)
        if self._start_writeback is not None and self.offset > self._handed:
            self._start_writeback(self.fd, self._handed, self.offset - self._handed)
            self._handed = self.offset

    def close(self) -> None:
        for fd, _ in self._sources.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._sources.clear()
        if self.direct is not None:
            self.direct.close()


_CLONE_RANGE = fast.clone_range_request()


class _DirectSink:
    """Writes one data file, front to back, with ``O_DIRECT`` (see the module docstring).

    Every write is of whole 4 KiB blocks at a block-aligned offset from page-aligned memory, as
    direct I/O asks. The whole blocks of a range at the same place in a block of the source and
    of the output are cloned from the source where the filesystem can (:meth:`_clone`), else
    written straight from a read-only mapping of a source window; the rest comes from
    :attr:`stage`, which holds the blocks ``[base, base + fill)`` of the output being
    gathered. :meth:`finish` writes the last, partial block whole and cuts the file to its
    length. Should the file refuse a direct write (``EINVAL``: a device with larger
    blocks; EOPNOTSUPP), the descriptor drops ``O_DIRECT`` and the same writes go through the
    page cache.
    Reading a source that shrank meanwhile fails as :func:`_ended_early` (a mapped page past
    the end is never touched by Python: the kernel reads it for the write, and reports EFAULT).
    """

    def __init__(self, fd: int, window: int) -> None:
        self.fd = fd
        self.window = max(BLOCK, window - window % BLOCK)
        self.size = min(STAGE, self.window)  # of the stage
        self.stage = mmap.mmap(-1, self.size)  # anonymous: page-aligned and zero-filled
        self.view = memoryview(self.stage)
        self.base = 0  # file offset of stage[0], a whole block
        self.fill = 0  # bytes staged
        self.mapped = 0  # bytes written straight from a mapping of a source
        self.cloned = 0  # bytes shared with a source (reflinked), not written
        self.clones = fast.enabled("reflink")  # until the filesystem says it cannot

    @classmethod
    def start(cls, fd: int, window: int) -> _DirectSink | None:
        """The sink for ``fd`` with ``O_DIRECT`` set, or None where the platform or the
        filesystem has no direct I/O (or ``fast.enabled("direct_io")`` says no)."""
        if not fast.enabled("direct_io"):
            return None
        try:
            import fcntl

            flags = fcntl.fcntl(fd, fcntl.F_GETFL)
            fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_DIRECT)
        except (ImportError, OSError):  # e.g. a filesystem without direct I/O (EINVAL)
            return None
        return cls(fd, window)

    @property
    def end(self) -> int:
        """The output offset up to which bytes are written or staged."""
        return self.base + self.fill

    def put(self, data: memoryview, to: int) -> None:
        """Stage ``data`` (bytes in memory) at output offset ``to`` (>= :attr:`end`)."""
        self._zeros_to(to)
        self._stage(data)

    def _stage(self, data: memoryview) -> None:
        """Append ``data`` to the stage (flushing it each time it is full)."""
        done = 0
        while done < len(data):
            n = min(len(data) - done, self.size - self.fill)
            self.view[self.fill:self.fill + n] = data[done:done + n]
            self.fill += n
            done += n
            self._flush_if_full()

    def copy(self, src: int, at: int, to: int, length: int, name: str) -> None:
        """Write the source bytes ``[at, at + length)`` of ``src`` at output offset ``to``
        (>= :attr:`end`)."""
        self._zeros_to(to)
        end = to + length
        head = min(end, to + (-to) % BLOCK)  # up to the output's next block boundary
        self._stage_from(src, at, head - to, name)
        body = end - end % BLOCK
        pos = head
        if pos < body and (at + pos - to) % BLOCK == 0:  # pos is a block boundary
            self._flush()
            if self._clone(src, at + pos - to, pos, body - pos):
                self.base = pos = body
            else:
                pos = self._from_mapping(src, at + pos - to, pos, body - pos, name)
        self._stage_from(src, at + pos - to, end - pos, name)

    def _clone(self, src: int, at: int, to: int, length: int) -> bool:
        """Share the source's whole blocks ``[at, at + length)`` at ``to`` instead of writing
        them (``FICLONERANGE``: XFS, btrfs, bcachefs; the output keeps its own copy should the
        source change later). False, and no more tries, where the filesystem cannot."""
        if not self.clones or _CLONE_RANGE is None:
            return False
        import fcntl
        import struct

        try:
            fcntl.ioctl(self.fd, _CLONE_RANGE, struct.pack("=qQQQ", src, at, length, to))
        except OSError:  # EOPNOTSUPP (ext4, tmpfs), EXDEV (another filesystem), EINVAL (blocks
            self.clones = False  # larger than 4 KiB): the blocks are written instead
            return False
        self.cloned += length
        return True

    def _from_mapping(self, src: int, at: int, to: int, length: int, name: str) -> int:
        """Write whole blocks straight from windows of a mapping of ``src`` (``at`` and ``to``
        are whole blocks); returns the output offset reached (``to + length``, or less where
        the source cannot be mapped: the caller stages the rest)."""
        done = 0
        while done < length:
            n = min(self.window, length - done)
            try:
                window = mmap.mmap(src, n, offset=at + done, prot=mmap.PROT_READ)
            except ValueError:  # the file is shorter than at + done + n now
                raise _ended_early(name) from None
            except OSError:  # pragma: no cover - a filesystem without mappings: stage it
                break
            try:
                with memoryview(window) as view:
                    self._write(view, to + done, name)
            finally:
                window.close()
            done += n
            self.base = to + done
            self.mapped += n
        return to + done

    def _stage_from(self, src: int, at: int, length: int, name: str) -> None:
        """Read ``length`` source bytes from ``at`` into the stage (flushing it when full)."""
        done = 0
        while done < length:
            n = min(length - done, self.size - self.fill)
            with self.view[self.fill:self.fill + n] as room:
                got = os.preadv(src, [room], at + done)
            if got <= 0:
                raise _ended_early(name)
            self.fill += got
            done += got
            self._flush_if_full()

    def _zeros_to(self, to: int) -> None:
        """Stage zeros up to output offset ``to`` (an alignment gap, under a block, reads as
        zeros)."""
        if to > self.end:
            self._stage(memoryview(bytes(to - self.end)))

    def _flush_if_full(self) -> None:
        if self.fill == self.size:
            self._flush()

    def _flush(self) -> None:
        """Write what is staged: whole blocks, as every caller stages up to a block boundary
        (a full stage, the start of a mapped body, the padded end)."""
        if self.fill:
            # released even when the write fails (a live slice would keep the stage open)
            with self.view[:self.fill] as staged:
                self._write(staged, self.base, "")
            self.base += self.fill
            self.fill = 0

    def _write(self, view: memoryview, at: int, name: str) -> None:
        done = 0
        while done < len(view):
            try:
                done += os.pwrite(self.fd, view[done:], at + done)
            except OSError as exc:
                if exc.errno == errno.EFAULT and name:  # a mapped page past the source's end
                    raise _ended_early(name) from None
                if exc.errno not in _NO_DIRECT or not self._drop_direct():
                    raise

    def _drop_direct(self) -> bool:
        """Clear ``O_DIRECT`` on the file (the same writes then go through the page cache);
        False when it was clear already."""
        import fcntl

        flags = fcntl.fcntl(self.fd, fcntl.F_GETFL)
        if not flags & os.O_DIRECT:
            return False
        fcntl.fcntl(self.fd, fcntl.F_SETFL, flags & ~os.O_DIRECT)
        return True

    def finish(self, length: int) -> None:
        """Write what is staged (the last block padded) and give the file its ``length``
        (>= :attr:`end`; a trailing gap reads as zeros)."""
        pad = (-self.fill) % BLOCK  # a whole last block, zeros after the staged bytes
        self.view[self.fill:self.fill + pad] = bytes(pad)
        self.fill += pad
        self._flush()
        os.ftruncate(self.fd, length)

    def close(self) -> None:
        """Release the staging buffer; never raises (it runs while a failed save unwinds)."""
        try:
            self.view.release()
            self.stage.close()
        except BufferError:  # pragma: no cover - a slice still held: freed with it
            pass


def release_cache(path: Path) -> None:
    """Drop the cached pages of ``path``, the data file this save is about to replace (its
    content is untouched). ``cp`` truncates the file it overwrites before copying, so the copy
    reuses the pages the old bytes held; an atomic save keeps the old file until the rename, and
    without this the old and the new bytes would both sit in memory during the copy, which then
    evicts other files' cache for its pages (see benchmarks/PROFILE.md, round 3). A hint only:
    anything unusual (not a regular file, no fadvise) is left alone. The ``release_cache``
    accelerator of :mod:`onnxsurgeon.fast`; switched off, the pages are left to the kernel."""
    if not hasattr(os, "posix_fadvise") or not fast.enabled("release_cache"):  # macOS, Windows
        return
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except OSError:  # pragma: no cover - a filesystem without the advice
        pass
    finally:
        os.close(fd)


_SYNC_FILE_RANGE_WRITE = 2


@functools.cache
def _writeback_starter() -> Callable[[int, int, int], bool] | None:
    """``start(fd, offset, length) -> ok``: Linux's ``sync_file_range`` with
    ``SYNC_FILE_RANGE_WRITE`` (queue the dirty pages of the range for writing, return at once;
    a hint only, the fsync before the rename is the guarantee), or None where libc lacks it."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        call = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (ImportError, OSError, AttributeError):  # pragma: no cover - no ctypes, or a libc
        # without it (glibc and musl have it)
        return None
    call.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    call.restype = ctypes.c_int

    def start(fd: int, offset: int, length: int) -> bool:
        return call(fd, offset, length, _SYNC_FILE_RANGE_WRITE) == 0

    return start


def shared_location(ref: ExternalRef, out_folder: Path, tensor: str) -> str:
    """The ``location`` under which a model saved in ``out_folder`` reads ``ref``'s file in
    place: relative, inside ``out_folder``'s tree, and opening (under the loading rules) the
    very file that was validated.

    Raises:
        UsageError: the file is outside the output folder's tree, or that path would not open
            the same file (a symlink on the way, another file of that name).
    """
    folder = Path(os.path.abspath(out_folder))
    rel = os.path.relpath(os.path.abspath(ref.path), folder)
    parts = tuple(rel.replace(os.sep, "/").split("/"))
    fix = ("write the output into the input's folder (or a folder above it), or drop "
           "--share-data (share_data=False) to copy the bytes")
    if os.path.isabs(rel) or ".." in parts:
        raise UsageError(
            f"--share-data: the input's data file '{ref.path}' is not inside the output folder "
            f"'{folder}'; {fix}"
        )
    location = "/".join(parts)
    try:
        _safe_relative(location, tensor)
        fd = _open_beneath(folder, parts, tensor)
        try:
            st = _check_open_file(fd, location, tensor)
        finally:
            os.close(fd)
    except UnsafeModelError as exc:
        raise UsageError(f"--share-data: {exc}; {fix}") from None
    if ref.identity != (0, 0) and (st.st_dev, st.st_ino) != ref.identity:
        raise UsageError(
            f"--share-data: '{location}' seen from the output folder is not the data file the "
            f"input read; {fix}"
        )
    return location
