"""Ray, the one module that imports it: run a function over many argument tuples as Ray tasks.

Fleets (``apply ... --ray``) and sharded verification (``verify ... --inputs DIR --ray``) both
map a plain, picklable function over their tasks here, so the scheduling is Ray's, not ours.
With no ``address`` a private local instance is started with ``cpus`` CPUs and stopped
afterwards (Ray's ``address="local"``: never a cluster that happens to run on this machine;
if this process is already connected to one, that one is used); ``"auto"`` joins the cluster
started on this machine with ``ray start --head``; ``HOST:PORT`` joins that cluster's head and
``ray://HOST:10001`` a remote cluster through Ray Client. Task arguments and results travel
through Ray's object store; files named in them must be visible to every worker (a shared
filesystem).

Ray failing to start or to reach a cluster is a dependency's failure, not a bug: it is a
:class:`ClusterError` (one line, what to do), which the CLI prints with exit 2. A concrete
address is probed first (a TCP connection, :data:`PROBE_SECONDS`), since Ray itself waits
minutes for a head that is not there.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from .cli_noise import dropped_stderr
from .errors import SurgeryError, UsageError

PROBE_SECONDS = 5.0
"""How long a concrete ``HOST:PORT`` / ``ray://HOST:PORT`` address may take to accept a TCP
connection before the run is refused."""

_CONCRETE = re.compile(r"^(?:ray://)?(\[[^\]]+\]|[^:/\s]+):(\d{1,5})$")

_FIX = ("start one with 'ray start --head' (then --ray auto), give the address of a running "
        "head, or give --ray alone for a private local instance")


class ClusterError(SurgeryError):
    """Ray could not start, reach the cluster at the given address, or run a task."""


def _probe(address: str) -> None:
    """Refuse a concrete address nothing listens on, within :data:`PROBE_SECONDS` ("auto"
    means ``$RAY_ADDRESS`` when that is set, as it does for Ray)."""
    given = address
    if address == "auto" and os.environ.get("RAY_ADDRESS"):
        address = os.environ["RAY_ADDRESS"]
        given = f"auto (RAY_ADDRESS={address})"
    found = _CONCRETE.match(address)
    if found is None:
        return
    host, port = found.group(1).strip("[]"), int(found.group(2))
    try:
        with socket.create_connection((host, port), timeout=PROBE_SECONDS):
            pass
    except OSError as exc:
        why = (f"no answer within {PROBE_SECONDS:g} s" if isinstance(exc, TimeoutError)
               else exc.strerror or type(exc).__name__)
        raise ClusterError(f"--ray {given}: no Ray cluster answers there ({why}); "
                           f"{_FIX}") from None


def _start(ray: Any, address: str | None, cpus: int, quiet: bool) -> None:
    """``ray.init`` for ``address`` (None: a private local instance); ClusterError if Ray
    cannot start or connect."""
    import logging

    if address:
        if address not in ("auto", "local") and (
                address.endswith((".onnx", ".npz", "/")) or os.path.exists(address)):
            raise ClusterError(f"--ray took '{address}' as the cluster's ADDRESS; put --ray "
                               "after the files (or write --ray=ADDRESS)")
        _probe(address)
    options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
    if quiet:
        options["logging_level"] = logging.ERROR
    try:
        with dropped_stderr(quiet):
            if address:
                ray.init(address=address, **options)
            else:
                ray.init(address="local", num_cpus=cpus, **options)
    except Exception as exc:  # noqa: BLE001 - Ray raises many unrelated types
        with contextlib.suppress(Exception), dropped_stderr(quiet):
            ray.shutdown()  # whatever a failed start left running
        if address == "auto" and isinstance(exc, ConnectionError):
            raise ClusterError("--ray auto: no Ray cluster runs on this machine; start one with "
                               "'ray start --head', or give --ray alone for a private local "
                               "instance") from None
        text = _text(exc)
        where = f"--ray {address}" if address else "--ray"
        what = "cannot join the Ray cluster" if address else "cannot start a local Ray instance"
        fix = _FIX if address else "check that Ray runs here ('ray start --head' shows why)"
        raise ClusterError(f"{where}: {what} ({type(exc).__name__}: {text}); {fix}") from None


@contextlib.contextmanager
def connected(address: str | None, cpus: int, *, quiet: bool = False) -> Iterator[Any]:
    """The ``ray`` module, connected for the block: to ``address``, or (None) to a private
    local instance with ``cpus`` CPUs, shut down afterwards; an existing connection of this
    process is used as it is. ``quiet`` keeps Ray's start-up and shut-down lines off stderr
    (its Python logging at ERROR, descriptor 2 dropped meanwhile).

    Raises:
        UsageError: Ray is not installed.
        ClusterError: Ray cannot start or reach ``address``.
    """
    try:
        import ray
    except ImportError:
        raise UsageError("--ray needs Ray; pip install 'onnxsurgeon[ray]'") from None
    if ray.is_initialized():
        yield ray
        return
    _start(ray, address, cpus, quiet)
    try:
        yield ray
    finally:
        with dropped_stderr(quiet):
            ray.shutdown()


def ray_map(fn: Callable[..., Any], tasks: Sequence[tuple[Any, ...]], *, address: str | None,
            cpus: int, ordered: bool = False, quiet: bool = False,
            failed: Callable[[int, str], Any] | None = None) -> Iterator[tuple[int, Any]]:
    """``(k, fn(*tasks[k]))`` for every task, each run as a Ray task (one CPU, no retry), in
    completion order (``ordered``: in task order), connected as :func:`connected` says.

    A task Ray could not run (its worker died, the cluster went away) yields
    ``(k, failed(k, reason))`` when ``failed`` is given, else raises.

    Raises:
        UsageError: Ray is not installed.
        ClusterError: Ray cannot start or reach ``address``; a task failed and no ``failed``.
    """
    with connected(address, cpus, quiet=quiet) as ray:
        try:
            yield from _results(ray, fn, tasks, ordered, failed)
        except ray.exceptions.RayError as exc:  # the cluster itself failed, not one task
            raise ClusterError(f"Ray failed while running the tasks ({_text(exc)}); rerun, or "
                               "run without --ray") from None


def _text(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300] or type(exc).__name__


def _results(ray: Any, fn: Callable[..., Any], tasks: Sequence[tuple[Any, ...]], ordered: bool,
             failed: Callable[[int, str], Any] | None) -> Iterator[tuple[int, Any]]:
    """Submit every task, then ``(k, result)`` as :func:`ray_map` says."""
    remote = ray.remote(num_cpus=1, max_retries=0)(fn)
    refs = [remote.remote(*args) for args in tasks]

    def result(k: int, ref: Any) -> Any:
        try:
            return ray.get(ref)
        except ray.exceptions.RayError as exc:
            reason = f"Ray could not run task {k + 1}: {_text(exc)}"
            if failed is None:
                raise ClusterError(f"{reason}; rerun it, or run without --ray") from None
            return failed(k, reason)

    if ordered:
        for k, ref in enumerate(refs):
            yield k, result(k, ref)
        return
    index = {ref: k for k, ref in enumerate(refs)}
    pending = list(refs)
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        k = index[done[0]]
        yield k, result(k, done[0])


def ray_shards(address: str | None, cpus: int, *, quiet: bool = False,
               ) -> Callable[[Callable[[Any], Any], Sequence[Any]], list[Any]]:
    """A shard map for :func:`onnxsurgeon.verify.compare` (``shards=``): every shard job a Ray
    task, results in job order (``quiet``: see :func:`ray_map`)."""

    def run(fn: Callable[[Any], Any], jobs: Sequence[Any]) -> list[Any]:
        return [r for _, r in ray_map(fn, [(job,) for job in jobs], address=address, cpus=cpus,
                                      ordered=True, quiet=quiet)]

    return run
