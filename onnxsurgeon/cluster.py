"""Ray, the one module that imports it: run a function over many argument tuples as Ray tasks.

Fleets (``apply ... --ray``) and sharded verification (``verify ... --inputs DIR --ray``) both
map a plain, picklable function over their tasks here, so the scheduling is Ray's, not ours.
With no ``address`` a private local instance is started with ``cpus`` CPUs and stopped
afterwards (unless this process is already connected to one, which is then used); ``"auto"``
joins the cluster started on this machine with ``ray start --head``; ``ray://HOST:10001``
joins a remote cluster through Ray Client. Task arguments and results travel through Ray's
object store; files named in them must be visible to every worker (a shared filesystem).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from .errors import UsageError


def ray_map(fn: Callable[..., Any], tasks: Sequence[tuple[Any, ...]], *, address: str | None,
            cpus: int, ordered: bool = False) -> Iterator[tuple[int, Any]]:
    """``(k, fn(*tasks[k]))`` for every task, each run as a Ray task (one CPU, no retry), in
    completion order (``ordered``: in task order).

    Raises:
        UsageError: Ray is not installed.
    """
    try:
        import ray
    except ImportError:
        raise UsageError("--ray needs Ray; pip install 'onnxsurgeon[ray]'") from None
    started = False
    if not ray.is_initialized():
        if address:
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
        else:
            ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
        started = True
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(fn)
        refs = [remote.remote(*args) for args in tasks]
        if ordered:
            for k, ref in enumerate(refs):
                yield k, ray.get(ref)
            return
        index = {ref: k for k, ref in enumerate(refs)}
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            yield index[done[0]], ray.get(done[0])
    finally:
        if started:
            ray.shutdown()


def ray_shards(address: str | None, cpus: int) -> Callable[[Callable[[Any], Any], Sequence[Any]],
                                                          list[Any]]:
    """A shard map for :func:`onnxsurgeon.verify.compare` (``shards=``): every shard job a Ray
    task, results in job order."""

    def run(fn: Callable[[Any], Any], jobs: Sequence[Any]) -> list[Any]:
        return [r for _, r in ray_map(fn, [(job,) for job in jobs], address=address, cpus=cpus,
                                      ordered=True)]

    return run
