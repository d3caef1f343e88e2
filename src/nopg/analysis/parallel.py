"""Run independent jobs on local processes or on a Ray cluster, results in input order.

The gradient analysis evaluates every estimator on many independent data sets; each data set is
one job. Local runs use :class:`concurrent.futures.ProcessPoolExecutor` (``spawn`` start method,
one torch thread per worker); with ``ray_address`` the jobs go to Ray (``"local"`` starts a
private local Ray instance, anything else is passed to ``ray.init(address=...)``, e.g.
``"auto"`` or ``"ray://head:10001"``). Ray is optional: ``pip install "nopg[ray]"``.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any, TypeVar

from tqdm.auto import tqdm

__all__ = ["default_workers", "parallel_map"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


def default_workers() -> int:
    """The CPU cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not on Linux
        return max(1, os.cpu_count() or 1)


def _init_worker() -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)


def parallel_map(fn: Callable[[Any], T], items: Sequence[Any], *, workers: int | None = None,
                 ray_address: str | None = None, progress: bool = True, desc: str = "jobs"
                 ) -> list[T]:
    """``[fn(item) for item in items]``, run in parallel.

    Parameters
    ----------
    fn : callable
        A module-level function (it is pickled to the workers).
    items : sequence
        Picklable arguments, one job each.
    workers : int, optional
        Local processes (default: the available cores); ``1`` runs in this process. With Ray it
        is the CPU count of a ``"local"`` instance.
    ray_address : str, optional
        Run on Ray instead of local processes.
    progress : bool
        Show a progress bar.
    desc : str
        Progress-bar label.
    """
    items = list(items)
    if workers is not None and (isinstance(workers, bool) or int(workers) < 1):
        raise ValueError(f"workers must be a positive int. Got {workers!r} instead.")
    n_workers = default_workers() if workers is None else int(workers)
    bar = tqdm(total=len(items), desc=desc, disable=not progress, dynamic_ncols=True)
    try:
        if ray_address is not None:
            return _ray_map(fn, items, ray_address, n_workers, bar)
        if n_workers == 1 or len(items) <= 1:
            out = []
            for item in items:
                out.append(fn(item))
                bar.update(1)
            return out
        return _process_map(fn, items, n_workers, bar)
    finally:
        bar.close()


def _process_map(fn: Callable[[Any], T], items: list[Any], n_workers: int, bar: tqdm) -> list[T]:
    results: list[Any] = [None] * len(items)
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(n_workers, len(items)), mp_context=context,
                             initializer=_init_worker) as pool:
        pending = {pool.submit(fn, item): i for i, item in enumerate(items)}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                results[pending.pop(future)] = future.result()
                bar.update(1)
    return results


def _ray_map(fn: Callable[[Any], T], items: list[Any], address: str, n_workers: int, bar: tqdm
             ) -> list[T]:
    try:
        import ray
    except ImportError as err:
        raise ValueError("ray_address needs Ray: pip install 'nopg[ray]'") from err
    started = False
    if not ray.is_initialized():
        if address == "local":
            ray.init(num_cpus=n_workers, include_dashboard=False, log_to_driver=False)
        else:
            ray.init(address=address, log_to_driver=False)
        started = True
    try:
        logger.info("Ray cluster resources: %s", ray.cluster_resources())
        remote = ray.remote(num_cpus=1)(_ray_job)
        refs = [remote.remote(fn, item) for item in items]
        index = {ref: i for i, ref in enumerate(refs)}
        results: list[Any] = [None] * len(items)
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                results[index[ref]] = ray.get(ref)
                bar.update(1)
        return results
    finally:
        if started:
            ray.shutdown()


def _ray_job(fn: Callable[[Any], T], item: Any) -> T:
    _init_worker()
    return fn(item)
