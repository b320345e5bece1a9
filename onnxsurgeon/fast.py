"""The optional accelerators, behind one interface: which exist, which are on, the one switch.

Each accelerator is an optional faster way to do something the project also does plainly, and
the plain path sits beside each accelerated call: the caller asks :func:`enabled` and takes the
plain path when it says no (or when the accelerated call declines at run time, e.g. a filesystem
without direct I/O). Both paths give the same answers and the same bytes
(``tests/test_fast.py``). Each stays only while ``benchmarks/bench_fast.py`` shows it pays on this
machine (``benchmarks/results_fast.md``).

- ``scan``: load's initializer check and node pass read in C from the model's bytes
  (``_scan.c`` through :mod:`onnxsurgeon.scan`); plain: the Python passes
  (``external.check_tensors``, ``validate._check_scope``).
- ``direct_io``: a saved data file written with ``O_DIRECT`` (``datastream._DirectSink``);
  plain: through the page cache (``RangeWriter._copy_range``).
- ``reflink``: whole blocks cloned with ``FICLONERANGE`` on the direct path; plain: the blocks
  written from a mapping of the source.
- ``kernel_copy``: ranges copied by ``copy_file_range`` on the page-cache path; plain:
  ``pread``/``pwrite`` in 4 MiB chunks.
- ``writeback``: each finished 32 MiB window handed to the disk while copying
  (``sync_file_range``); plain: the final fsync writes it all.
- ``release_cache``: the cached pages of a data file a save replaces dropped first
  (``posix_fadvise``, ``datastream.release_cache``); plain: left to the kernel (freed at the
  rename's unlink).

The switch: ``ONNXSURGEON_FAST``, a comma-separated list read left to right: ``all`` (the
default) or ``none``, then names to turn on, or off with a leading ``-``
(``ONNXSURGEON_FAST=-direct_io``, ``ONNXSURGEON_FAST=none,scan``). The older variables stay as
aliases: ``ONNXSURGEON_SCAN=0`` is ``-scan`` and ``ONNXSURGEON_DIRECT_IO=0`` is ``-direct_io``.
In-process, :func:`forced` (and :func:`plain`, every accelerator off) overrides both; a child
process takes :data:`PLAIN_ENV`. An accelerator that is not available here (the extension not
built, no such system call) is off whatever the switch says, silently.
"""

from __future__ import annotations

import contextlib
import os
import platform
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType

from .errors import UsageError

__all__ = ["ACCELERATORS", "ENV", "NAMES", "PLAIN_ENV", "Accelerator", "available",
           "clone_range_request", "enabled", "forced", "plain", "scan_extension", "scan_module",
           "status"]

ENV = "ONNXSURGEON_FAST"
"""The one switch (see the module docstring)."""


@dataclass(frozen=True)
class Accelerator:
    """One accelerator: its name, what it does, the plain path beside it, its alias variable
    (set to ``0`` it turns the accelerator off) and the benchmark job that keeps it."""

    name: str
    summary: str
    plain: str
    alias: str | None
    benchmark: str


ACCELERATORS: dict[str, Accelerator] = {a.name: a for a in (
    Accelerator("scan", "load's tensor check and node pass in C (_scan.c)",
                "the Python passes", "ONNXSURGEON_SCAN", "extract half of a 90k-node chain"),
    Accelerator("direct_io", "data files written with O_DIRECT",
                "through the page cache", "ONNXSURGEON_DIRECT_IO",
                "extract/copy of a ~1 GB external-data model"),
    Accelerator("reflink", "whole blocks cloned with FICLONERANGE (direct path)",
                "blocks written from a mapping", None,
                "copy of a ~1 GB external-data model on a reflinking filesystem"),
    Accelerator("kernel_copy", "ranges copied with copy_file_range (page-cache path)",
                "pread/pwrite in 4 MiB chunks", None,
                "copy of a ~1 GB external-data model, direct_io off"),
    Accelerator("writeback", "finished windows handed to the disk while copying "
                "(sync_file_range)", "the final fsync", None,
                "copy of a ~1 GB external-data model, direct_io off"),
    Accelerator("release_cache", "the cached pages of a data file being replaced dropped "
                "first (posix_fadvise DONTNEED)", "left to the kernel", None,
                "insert over its earlier output, written through the page cache"),
)}
NAMES = tuple(ACCELERATORS)
PLAIN_ENV = {ENV: "none"}
"""Environment entries that run a child process on the plain paths only."""

_forced: dict[str, bool] = {}
_parsed: dict[str, frozenset[str]] = {}


def _scan_module() -> ModuleType | None:
    try:
        from . import _scan  # type: ignore[attr-defined, unused-ignore]  # maybe unbuilt
    except ImportError:  # not built (no C compiler at install): the Python passes run
        return None
    return _scan  # type: ignore[no-any-return, unused-ignore]


_SCAN = _scan_module()


def clone_range_request() -> int | None:
    """Linux's ``FICLONERANGE`` ioctl number where its generic encoding holds (``_IOW(0x94, 13,
    struct file_clone_range)``), else None (no cloning tried)."""
    if not sys.platform.startswith("linux") or platform.machine() not in {
            "x86_64", "aarch64", "arm64", "riscv64", "s390x", "i686", "armv7l"}:
        return None
    return (1 << 30) | (32 << 16) | (0x94 << 8) | 13


def _has_sync_file_range() -> bool:
    return sys.platform.startswith("linux")  # glibc and musl have it; checked again on use


_AVAILABLE = {
    "scan": _SCAN is not None,
    "direct_io": hasattr(os, "O_DIRECT"),
    "reflink": clone_range_request() is not None,
    "kernel_copy": hasattr(os, "copy_file_range"),
    "writeback": _has_sync_file_range(),
    "release_cache": hasattr(os, "posix_fadvise"),
}


def available(name: str) -> bool:
    """The accelerator ``name`` exists on this platform and build (whatever the switch says).

    Raises:
        UsageError: ``name`` is not an accelerator.
    """
    _check(name)
    return _AVAILABLE[name]


def _check(name: str) -> None:
    if name not in ACCELERATORS:
        raise UsageError(f"unknown accelerator '{name}'; the accelerators are "
                         f"{', '.join(NAMES)}")


def _switched_on(value: str) -> frozenset[str]:
    """The names ``ONNXSURGEON_FAST=value`` turns on."""
    got = _parsed.get(value)
    if got is not None:
        return got
    on = set(NAMES)
    for raw in value.split(","):
        word = raw.strip().lower()
        if word in ("", "all", "1"):
            on = set(NAMES) if word else on
        elif word in ("none", "0"):
            on = set()
        elif word.lstrip("-+") in ACCELERATORS:
            (on.discard if word.startswith("-") else on.add)(word.lstrip("-+"))
        else:
            raise UsageError(f"{ENV}={value!r}: unknown accelerator '{word}'; give a "
                             f"comma-separated list of all, none, {', '.join(NAMES)} (a "
                             f"leading '-' turns one off)")
    got = _parsed[value] = frozenset(on)
    return got


def enabled(name: str) -> bool:
    """The accelerator ``name`` is available and switched on: the caller takes it (and still
    falls back to the plain path where it declines at run time).

    Raises:
        UsageError: ``name`` is not an accelerator, or ``ONNXSURGEON_FAST`` names one that is not.
    """
    _check(name)
    if not _AVAILABLE[name]:
        return False
    if name in _forced:
        return _forced[name]
    alias = ACCELERATORS[name].alias
    if alias is not None and os.environ.get(alias) == "0":
        return False
    return name in _switched_on(os.environ.get(ENV, "all"))


def status() -> list[tuple[str, bool, bool]]:
    """(name, available, enabled) of every accelerator, in :data:`NAMES` order."""
    return [(name, _AVAILABLE[name], enabled(name)) for name in NAMES]


@contextlib.contextmanager
def forced(**on: bool) -> Iterator[None]:
    """Within the block, each named accelerator is on or off as given (an unavailable one stays
    off), whatever the environment says. Not thread-safe: for tests and benchmarks.

    Raises:
        UsageError: a name is not an accelerator.
    """
    for name in on:
        _check(name)
    before = dict(_forced)
    _forced.update(on)
    try:
        yield
    finally:
        _forced.clear()
        _forced.update(before)


def plain() -> contextlib.AbstractContextManager[None]:
    """Within the block every accelerator is off: the plain paths only."""
    return forced(**dict.fromkeys(NAMES, False))


def scan_module() -> ModuleType | None:
    """The C extension ``onnxsurgeon._scan`` where it is built, switched on or not."""
    return _SCAN


def scan_extension() -> ModuleType | None:
    """The C extension ``onnxsurgeon._scan`` when ``scan`` is enabled, else None (the caller
    runs the Python pass)."""
    return _SCAN if enabled("scan") else None
