"""Forked worker processes for the aggregate's two CPU-bound stages: reading batches and drawing figures.

Fork, because the workers then start with everything the parent imported (pandas, matplotlib, the
compiled schema) at no cost; where fork does not exist, or one CPU is all there is, work stays serial.
A Ctrl-C at the terminal reaches every process of the group: a worker then ends at once and silently
(no traceback of its own), and the main process says it was interrupted.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
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
    return ProcessPoolExecutor(
        max_workers=workers, mp_context=multiprocessing.get_context("fork"), initializer=_worker_start
    )


def _worker_start() -> None:
    """SIGINT ends a worker as it ends any program that does not catch it: at once, printing nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def imap(fn: Callable[[T], R], items: Iterable[T], workers: int, window: int = 4) -> Iterator[R]:
    """``map(fn, items)`` in ``workers`` processes, results in input order, at most ``window`` items per
    worker in flight: a stream of any length holds a bounded number of results in memory."""
    if not can_fork(workers):
        yield from map(fn, items)
        return
    executor = pool(workers)
    try:
        pending: list[Future[R]] = []
        for item in items:
            pending.append(executor.submit(fn, item))
            if len(pending) >= window * workers:
                yield pending.pop(0).result()
        for future in pending:
            yield future.result()
    except BaseException:  # Ctrl-C, an error, a consumer that stopped: run none of the items not begun
        executor.shutdown(wait=False, cancel_futures=True)
        raise
    executor.shutdown()


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
        _worker_start()
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
