"""Who computes a cell when several workers want it: a claim on the tracking store, kept alive by a heartbeat.

Workers share nothing but the tracking store (sqlite on one machine, a tracking server for many), so
the claim lives there. A worker claims a cell by creating its RUNNING run tagged with its owner id and
a heartbeat time, waits ``settle_s`` for concurrent claims to land, then reads every run of the cell:

- a FINISHED run wins outright: the worker deletes its own claim and reuses that run;
- a live claim already marked owner, or one with a smaller run id, wins: the worker deletes its own
  claim and waits until that run finishes (reuse) or goes stale (claim again);
- otherwise the worker is the owner: it marks its run so and deletes only runs that are stale.

A run is stale when its heartbeat (or, for a run without one, its start) is older than ``stale_s``:
its worker was killed. Live runs are never deleted, so two workers cannot delete each other's work.
The protocol assumes a claim reaches the store within ``settle_s`` of being made and clocks that
agree to well within ``stale_s`` across machines.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("kvx")

OWNER = "kvx.owner"
HEARTBEAT = "kvx.heartbeat"
LEASE = "kvx.lease"  # "claim" until the run has won, then "owner"
_WORKER = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def worker_id() -> str:
    """This process, as other workers see it in a run's ``kvx.owner`` tag."""
    return _WORKER


@dataclass
class Timing:
    """How often a live run says so, and when silence means its worker is gone (seconds); the root
    config's ``lease`` node (``kvx.cli.schema``)."""

    heartbeat_s: float = 15.0
    stale_s: float = 120.0
    settle_s: float = 0.5
    poll_s: float = 2.0

    @classmethod
    def from_config(cls, cfg: Any) -> Timing:
        node = cfg.get("lease") if cfg is not None else None
        return cls(**{k: float(v) for k, v in (node or {}).items()})


def last_beat(run: Any) -> float:
    """Epoch seconds of a run's latest heartbeat, or of its start when it never beat."""
    beat = run.data.tags.get(HEARTBEAT)
    return float(beat) if beat else run.info.start_time / 1000


def is_live(run: Any, timing: Timing, now: float | None = None) -> bool:
    """RUNNING with a fresh heartbeat and, when its worker ran on this machine, that process alive:
    a worker is computing it now. (A worker killed on this machine is known dead at once.)"""
    now = time.time() if now is None else now
    if run.info.status != "RUNNING" or now - last_beat(run) > timing.stale_s:
        return False
    host, _, rest = run.data.tags.get(OWNER, "").partition(":")
    pid = rest.partition(":")[0]
    if host == socket.gethostname() and pid.isdigit():
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass  # alive, another user's
    return True


class Heartbeat:
    """Refreshes a run's heartbeat tag from a daemon thread until stopped; a failed beat is retried
    at the next one (a tracking server restarting must not kill the cell)."""

    def __init__(self, client: Any, run_id: str, every_s: float) -> None:
        self.client, self.run_id, self.every_s = client, run_id, every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"kvx-heartbeat-{run_id[:8]}", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.client.set_tag(self.run_id, HEARTBEAT, f"{time.time():.3f}")
            except Exception as exc:  # noqa: BLE001 - any store error: try again at the next beat
                log.warning("heartbeat of run %s failed (%s); retrying", self.run_id, exc)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


@dataclass
class Claim:
    """The outcome of ``claim``: this worker owns ``run_id``, or ``finished`` is someone's run to reuse."""

    run_id: str | None = None
    finished: Any = None
    heartbeat: Heartbeat | None = None
    deleted_stale: int = 0
    busy: Any = None  # with ``wait=False``: the live run of another worker that holds the cell
    client: Any = None
    runs: Callable[[], list[Any]] | None = None  # every run of what is claimed (the duplicate check)
    closed: bool = False  # the owned run has ended, FINISHED or not

    def release(self) -> None:
        if self.heartbeat is not None:
            self.heartbeat.stop()

    def finish(self) -> str:
        """End the owned run FINISHED and let it go; the run that stands for what was claimed (this
        one, or another worker's that finished first, in which case this one is deleted)."""
        assert self.run_id is not None and self.runs is not None, "finish() is for a run this worker owns"
        self.client.set_terminated(self.run_id, "FINISHED")
        self.closed = True
        self.release()
        return first_finished(self.client, self.runs, self.run_id)

    def abandon(self, exc: BaseException) -> None:
        """End the owned run as what stopped it (KILLED for Ctrl-C, else FAILED) and let it go."""
        self.closed = True
        try:
            self.client.set_terminated(
                self.run_id, "KILLED" if isinstance(exc, KeyboardInterrupt) else "FAILED"
            )
        finally:
            self.release()


@contextmanager
def claimed(
    client: Any,
    runs: Callable[[], list[Any]],
    create: Callable[[dict[str, str]], str],
    timing: Timing,
    what: str,
    wait: bool = True,
) -> Iterator[Claim]:
    """The lifecycle of a claimed run, for cells and control ledgers alike: ``claim`` it; the body
    works on ``run_id`` when this worker owns it (otherwise ``finished`` is a run to reuse, or ``busy``
    another worker's) and ends it with ``finish()``; leaving the block by an exception before that
    ends the run KILLED or FAILED, and the heartbeat always stops."""
    lease = claim(client, runs, create, timing, what, wait)
    try:
        yield lease
    except BaseException as exc:
        if lease.run_id is not None and not lease.closed:
            lease.abandon(exc)
        raise
    finally:
        lease.release()


def claim(
    client: Any,
    runs: Callable[[], list[Any]],
    create: Callable[[dict[str, str]], str],
    timing: Timing,
    what: str,
    wait: bool = True,
) -> Claim:
    """Own the runs that ``runs()`` lists, or wait for whoever does; see the module docstring.

    ``create(tags)`` makes this worker's RUNNING run with the lease tags added and returns its id.
    ``wait=False``: return at once with ``busy`` set when another worker holds it, so a worker
    that holds claims of its own never waits on someone who may be waiting on it.
    """
    waited = False
    while True:
        done = _finished(runs())
        if done is not None:
            return Claim(finished=done)
        now = time.time()
        run_id = create({OWNER: _WORKER, HEARTBEAT: f"{now:.3f}", LEASE: "claim"})
        time.sleep(timing.settle_s)
        current = runs()
        done = _finished(current)
        rivals = [r for r in current if r.info.run_id != run_id and is_live(r, timing)]
        winner = _winner(rivals, run_id)
        if done is not None or winner is not None:
            client.delete_run(run_id)  # our own claim: nobody else reads it as work
            if done is not None:
                return Claim(finished=done)
            if not wait:
                return Claim(busy=winner)
            if not waited:
                log.info(
                    "%s is being computed by %s (run %s); waiting", what, _owner(winner), winner.info.run_id
                )
                waited = True
            done = _wait(runs, timing)
            if done is not None:
                return Claim(finished=done)
            continue  # the owner went stale: claim again
        client.set_tag(run_id, LEASE, "owner")
        stale = [r for r in current if r.info.run_id != run_id and r not in rivals]
        for run in stale:  # neither finished nor live: a killed worker's leftovers
            log.info("deleting %s's stale run %s of %s", _owner(run), run.info.run_id, what)
            client.delete_run(run.info.run_id)
        beat = Heartbeat(client, run_id, timing.heartbeat_s)
        return Claim(run_id=run_id, heartbeat=beat, deleted_stale=len(stale), client=client, runs=runs)


def first_finished(client: Any, runs: Callable[[], list[Any]], run_id: str) -> str:
    """After this worker finished ``run_id``: the run that stands for the cell. If the claim ever
    failed (a store slower than ``settle_s``) and another worker finished the same cell too, the
    later finisher deletes its own run, so the store never holds the cell twice."""
    done = sorted(
        (r for r in runs() if r.info.status == "FINISHED"),
        key=lambda r: (r.info.end_time or 0, r.info.run_id),
    )
    if done and done[0].info.run_id != run_id:
        log.info("run %s duplicates run %s, finished first; deleting it", run_id, done[0].info.run_id)
        client.delete_run(run_id)
        return done[0].info.run_id
    return run_id


def _finished(runs: list[Any]) -> Any:
    return next((r for r in runs if r.info.status == "FINISHED"), None)


def _winner(rivals: list[Any], mine: str) -> Any:
    """The live rival this claim yields to: an owner first, else a claim with a smaller run id."""
    owners = [r for r in rivals if r.data.tags.get(LEASE, "owner") == "owner"]
    if owners:
        return owners[0]
    smaller = sorted((r for r in rivals if r.info.run_id < mine), key=lambda r: r.info.run_id)
    return smaller[0] if smaller else None


def _wait(runs: Callable[[], list[Any]], timing: Timing) -> Any:
    """Poll until a run finishes (return it) or no live run is left (return None)."""
    while True:
        time.sleep(timing.poll_s)
        current = runs()
        done = _finished(current)
        if done is not None:
            return done
        if not any(is_live(r, timing) for r in current):
            return None


def _owner(run: Any) -> str:
    return run.data.tags.get(OWNER, "an earlier kvx")
