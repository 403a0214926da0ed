"""Forked worker processes for the aggregate's two CPU-bound stages: reading batches and drawing figures.

Fork, because the workers then start with everything the parent imported (pandas, matplotlib, the
compiled schema) at no cost; where fork does not exist, or one CPU is all there is, work stays serial.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def cpus() -> int:
    """The CPUs this process may run on (a container's limit, not the host's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def can_fork(workers: int) -> bool:
    return workers >= 2 and "fork" in multiprocessing.get_all_start_methods()


def pool(workers: int) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork"))


def imap(fn: Callable[[T], R], items: Iterable[T], workers: int, window: int = 4) -> Iterator[R]:
    """``map(fn, items)`` in ``workers`` processes, results in input order, at most ``window`` items per
    worker in flight: a stream of any length holds a bounded number of results in memory."""
    if not can_fork(workers):
        yield from map(fn, items)
        return
    with pool(workers) as executor:
        pending: list[Future[R]] = []
        for item in items:
            pending.append(executor.submit(fn, item))
            if len(pending) >= window * workers:
                yield pending.pop(0).result()
        for future in pending:
            yield future.result()


def forked(workers: int, fn: Callable[..., R], *args: object) -> Callable[[], R]:
    """``fn(*args)`` started now in a forked process, which inherits its arguments instead of pickling
    them (an aggregate's rows are tens of megabytes); the returned call waits for the result (or raises
    what ``fn`` raised). Serial, computed now, where fork does not exist or ``workers`` is 1."""
    if not can_fork(workers):
        value = fn(*args)
        return lambda: value
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)

    def child() -> None:
        try:
            send.send((True, fn(*args)))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the parent, where it is reported
            send.send((False, exc))

    process = context.Process(target=child, daemon=True)
    process.start()
    send.close()

    def result() -> R:
        try:
            ok, value = receive.recv()
        except EOFError:
            raise RuntimeError(
                f"{fn.__name__}: its worker process died (exit code {process.exitcode})"
            ) from None
        finally:
            process.join()
            receive.close()
        if not ok:
            raise value
        return value

    return result
