"""Files written invisibly and published whole: the one home of the atomic, durable write.

:class:`AtomicFile` is a file being written in a folder under no name (Linux ``O_TMPFILE``),
linked in under its destination name only when complete, so a process killed while it writes
(SIGKILL, the OOM killer, a power cut) leaves nothing behind: the kernel frees an unnamed file
with its last descriptor. Where the folder's filesystem cannot link such a file in (overlayfs,
no ``/proc``, other systems), the file is a hidden
``.<name>.<random>.tmp`` held under an exclusive ``flock`` while it is written; a dead writer's
lock dies with it, and the next write of the same name in that folder removes those files whose
lock it can take (:func:`sweep`). Neither kind ever opens an existing file, so nothing is
appended to or written through a link.

Durable (the default): the content is flushed to the disk (``fsync``) before it is published.
Scratch files (verification's staging) skip that.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

_BUFFER = 1 << 22
_BEHIND_MIN = 4 << 20
"""Payloads from this size are written by a thread while the caller checks them."""


def _link_proc_dir(fd: int, dest: str) -> None:
    """Link an unnamed file in as ``linkat(<the /proc/self/fd folder>, "<fd>", AT_FDCWD, dest,
    AT_SYMLINK_FOLLOW)`` (works where an absolute ``/proc`` path meets another mount of the
    same filesystem)."""
    procs = os.open("/proc/self/fd", os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.link(str(fd), dest, src_dir_fd=procs, follow_symlinks=True)
    finally:
        os.close(procs)


def _link_proc(fd: int, dest: str) -> None:
    """Link an unnamed file in through its absolute ``/proc/self/fd`` path."""
    os.link(f"/proc/self/fd/{fd}", dest, follow_symlinks=True)


_LINKERS: tuple[Callable[[int, str], None], ...] = (_link_proc_dir, _link_proc)
_LINKER: dict[int, Callable[[int, str], None] | None] = {}
"""Per device: how an ``O_TMPFILE`` is linked in there, or None (it cannot be)."""


def _linker(folder: Path) -> Callable[[int, str], None] | None:
    """How an unnamed file made in ``folder`` is linked in, probed once per device; None where
    it cannot be (no ``O_TMPFILE``, or no way to link one)."""
    flag = getattr(os, "O_TMPFILE", 0)
    if not flag:
        return None
    try:
        dev = os.stat(folder).st_dev
    except OSError:
        return None
    if dev not in _LINKER:
        _LINKER[dev] = None
        with contextlib.suppress(OSError):
            fd = os.open(folder, flag | os.O_WRONLY, 0o600)
            try:
                for link in _LINKERS:
                    probe = tempfile.mktemp(prefix=".onnxsurgeon-probe.", suffix=".tmp",
                                            dir=folder)
                    try:
                        link(fd, probe)
                    except (OSError, NotImplementedError):
                        continue
                    os.unlink(probe)
                    _LINKER[dev] = link
                    break
            finally:
                os.close(fd)
    return _LINKER[dev]


def file_mode() -> int:
    """0o666 minus the process umask: the mode a plain ``open(path, "w")`` would give."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def _lock(fd: int, *, wait: bool) -> bool:
    """Take the exclusive ``flock`` of ``fd``; False when another process holds it (or the
    system has no ``flock``: then no file is ever judged abandoned)."""
    try:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except (ImportError, OSError):
        return False
    return True


def sweep(folder: Path, dest_name: str) -> list[str]:
    """Remove the hidden temporary files ``.<dest_name>.*.tmp`` in ``folder`` that no live
    writer holds (their ``flock`` can be taken: the writer died before publishing them).
    Returns the names removed. O(entries of the folder)."""
    prefix, removed = f".{dest_name}.", list[str]()
    try:
        entries = [e.name for e in os.scandir(folder)
                   if e.name.startswith(prefix) and e.name.endswith(".tmp")
                   and e.is_file(follow_symlinks=False)]
    except OSError:
        return removed
    for name in entries:
        path = os.path.join(folder, name)
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            continue
        try:
            if _lock(fd, wait=False) and os.path.samestat(os.fstat(fd), os.lstat(path)):
                os.unlink(path)
                removed.append(name)
        except OSError:
            pass
        finally:
            os.close(fd)
    return removed


class AtomicFile:
    """A file written invisibly in ``folder`` and published under ``dest_name`` by
    :meth:`commit` (see the module docstring). ``durable``: :meth:`finish` fsyncs.

    Attributes:
        fd: the descriptor written (positional writes, or through :attr:`file`).
        file: a buffered writer over :attr:`fd`.
    """

    def __init__(self, folder: Path, dest_name: str, *, durable: bool = True) -> None:
        self.folder = folder
        self.dest_name = dest_name
        self.durable = durable
        self.tmp_path: str | None = None
        self.fd = -1
        sweep(folder, dest_name)
        link = _linker(folder)
        if link is not None:
            with contextlib.suppress(OSError):
                self.fd = os.open(folder, os.O_TMPFILE | os.O_WRONLY, 0o644)
                _lock(self.fd, wait=True)  # its hidden name at commit is held too (sweep)
        while self.fd < 0:
            fd, path = tempfile.mkstemp(prefix=f".{dest_name}.", suffix=".tmp", dir=folder)
            _lock(fd, wait=True)  # held until this process closes it, or dies
            try:
                if os.path.samestat(os.fstat(fd), os.lstat(path)):
                    self.fd, self.tmp_path = fd, path
                    break
            except OSError:
                pass
            os.close(fd)  # swept between its creation and the lock (see sweep): again
        self._link = link
        with contextlib.suppress(OSError, AttributeError):
            os.fchmod(self.fd, file_mode())  # mkstemp makes 0600; use what open() would
        self.file = os.fdopen(self.fd, "wb", buffering=_BUFFER)

    def finish(self) -> None:
        """Flush the content (and fsync it, when durable) before anything is published."""
        self.file.flush()
        if self.durable:
            os.fsync(self.file.fileno())

    def commit(self) -> None:
        """Publish the file under its destination name (atomic replace)."""
        dest = self.folder / self.dest_name
        if self.tmp_path is None and self._link is not None:  # O_TMPFILE: a hidden name first
            tmp = tempfile.mktemp(prefix=f".{self.dest_name}.", suffix=".tmp", dir=self.folder)
            self._link(self.file.fileno(), tmp)
            self.tmp_path = tmp
        if self.tmp_path is None:  # pragma: no cover - always one of the two
            raise OSError("no temporary file to publish")
        os.replace(self.tmp_path, dest)
        self.tmp_path = None
        self.close()

    def close(self) -> None:
        """Close and remove whatever was not committed."""
        with contextlib.suppress(OSError):
            self.file.close()
        if self.tmp_path is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.tmp_path)
            self.tmp_path = None


def write_behind(target: AtomicFile, payload: bytes) -> Callable[[], None]:
    """Start writing ``payload`` to ``target`` and finishing it (:meth:`AtomicFile.finish`);
    the returned function waits for that and raises what it raised. A thread does it for a
    large payload (the write and fsync run without the interpreter lock, so the caller's
    checks use the time), else the caller's thread, at once."""
    if len(payload) < _BEHIND_MIN:
        target.file.write(payload)
        target.finish()
        return lambda: None
    failed: list[BaseException] = []

    def work() -> None:
        try:
            target.file.write(payload)
            target.finish()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller by join
            failed.append(exc)

    thread = threading.Thread(target=work, name="onnxsurgeon-write", daemon=True)
    thread.start()

    def join() -> None:
        thread.join()
        if failed:
            raise failed[0]

    return join
