"""The claim protocol on a real (sqlite) MLflow store: who owns a cell, who waits, what is deleted."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest
from mlflow.tracking import MlflowClient

from kvx.stores import leases, tracking

FAST = leases.Timing(heartbeat_s=0.2, stale_s=1.0, settle_s=0.05, poll_s=0.05)
KEY = "kvx.cell_id"


@pytest.fixture
def store(tmp_path, blank_store):
    """A new sqlite store (a copy of a migrated one: its first open is not what is tested here)."""
    blank_store(tmp_path)
    client = tracking.Store(MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}"))
    return client, client.create_experiment("kvx")


def _claim_args(store, cell, timing):
    """What ``leases.claim`` and ``leases.claimed`` take for one cell of the test store."""
    client, exp = store
    return (
        client,
        lambda: tracking.runs_with_tag(client, exp, KEY, cell),
        lambda extra: client.create_run(exp, tags={KEY: cell, **extra}).info.run_id,
        timing,
        f"cell {cell}",
    )


def _claim(store, cell="c1", timing=FAST):
    return leases.claim(*_claim_args(store, cell, timing))


def _run(store, status="RUNNING", owner=None, beat=None, lease="owner", cell="c1"):
    client, exp = store
    tags = {KEY: cell, leases.LEASE: lease}
    if owner is not None:
        tags[leases.OWNER] = owner
    if beat is not None:
        tags[leases.HEARTBEAT] = f"{beat:.3f}"
    run_id = client.create_run(exp, tags=tags).info.run_id
    if status != "RUNNING":
        client.set_terminated(run_id, status)
    return run_id


def _ids(store, cell="c1"):
    client, exp = store
    return {r.info.run_id: r.info.status for r in tracking.runs_with_tag(client, exp, KEY, cell)}


def _dead_pid() -> int:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    return int(done.stdout)


def test_a_lone_claim_owns_the_cell_marks_itself_and_beats(store):
    lease = _claim(store)
    try:
        assert lease.finished is None and lease.run_id is not None
        run = store[0].get_run(lease.run_id)
        assert run.data.tags[leases.LEASE] == "owner" and run.data.tags[leases.OWNER] == leases.worker_id()
        first = float(run.data.tags[leases.HEARTBEAT])
        time.sleep(0.6)
        assert float(store[0].get_run(lease.run_id).data.tags[leases.HEARTBEAT]) > first
    finally:
        lease.release()


def test_a_finished_run_is_reused_and_no_claim_is_left_behind(store):
    done = _run(store, status="FINISHED")
    lease = _claim(store)
    assert lease.run_id is None and lease.finished.info.run_id == done
    assert _ids(store) == {done: "FINISHED"}


def test_stale_and_failed_runs_are_deleted_by_the_new_owner(store):
    stale = _run(store, owner="elsewhere:1:x", beat=time.time() - 60)  # silent for a minute
    failed = _run(store, status="FAILED", owner="elsewhere:2:y", beat=time.time())
    lease = _claim(store)
    lease.release()
    assert _ids(store) == {lease.run_id: "RUNNING"} and lease.deleted_stale == 2
    assert stale not in _ids(store) and failed not in _ids(store)


def test_a_live_owner_is_never_deleted_and_the_claimant_waits_for_its_result(store):
    client, _ = store
    owner = _run(store, owner="elsewhere:1:x", beat=time.time())

    def finish():
        time.sleep(0.4)
        client.set_terminated(owner, "FINISHED")

    threading.Thread(target=finish).start()
    started = time.monotonic()
    lease = _claim(store)
    assert lease.finished.info.run_id == owner and time.monotonic() - started >= 0.35
    assert _ids(store) == {owner: "FINISHED"}  # the waiter's own claim is gone


def test_a_waiter_takes_over_when_the_owner_goes_silent(store):
    owner = _run(store, owner="elsewhere:1:x", beat=time.time())  # never beats again
    lease = _claim(store)
    lease.release()
    assert lease.run_id is not None and owner not in _ids(store)


def test_a_worker_that_died_on_this_machine_is_stale_at_once(store):
    dead = f"{leases.worker_id().split(':')[0]}:{_dead_pid()}:x"
    orphan = _run(store, owner=dead, beat=time.time())
    slow = leases.Timing(heartbeat_s=0.2, stale_s=3600, settle_s=0.05, poll_s=0.05)
    lease = _claim(store, timing=slow)
    lease.release()
    assert lease.run_id is not None and orphan not in _ids(store)
    mine = f"{leases.worker_id().split(':')[0]}:{os.getpid()}:x"  # alive: still live
    run = store[0].get_run(_run(store, owner=mine, beat=time.time(), cell="c2"))
    assert leases.is_live(run, slow)


def test_between_two_fresh_claims_the_smaller_run_id_wins(store):
    client, _ = store
    rival = _run(store, owner="elsewhere:1:x", beat=time.time(), lease="claim")

    def finish_rival():
        time.sleep(0.3)
        client.set_terminated(rival, "FINISHED")

    thread = threading.Thread(target=finish_rival)
    thread.start()
    lease = _claim(store)
    thread.join()
    lease.release()
    if lease.finished is not None:  # we yielded: the rival's id was smaller
        assert lease.finished.info.run_id == rival
    else:  # we won: ours was smaller, and the rival's live claim was left alone
        assert lease.run_id < rival and rival in _ids(store)


def test_concurrent_claims_yield_one_owner(store):
    """Eight threads claim one cell at once: exactly one computes it, the others reuse its run."""
    client, _ = store
    outcomes: list[leases.Claim] = []
    lock = threading.Lock()

    def worker():
        lease = _claim(store)
        if lease.run_id is not None:
            time.sleep(0.3)
            client.set_terminated(lease.run_id, "FINISHED")
            lease.release()
        with lock:
            outcomes.append(lease)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    owners = [o for o in outcomes if o.run_id is not None]
    assert len(outcomes) == 8 and len(owners) == 1
    assert {o.finished.info.run_id for o in outcomes if o.finished is not None} <= {owners[0].run_id}
    assert _ids(store) == {owners[0].run_id: "FINISHED"}


def test_the_store_retries_while_sqlite_is_locked():
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise RuntimeError("(sqlite3.OperationalError) database is locked")
        return "ok"

    assert tracking.retry_locked(flaky) == "ok" and len(calls) == 3
    with pytest.raises(RuntimeError, match="other"):
        tracking.retry_locked(lambda: (_ for _ in ()).throw(RuntimeError("other")))


def test_the_later_of_two_finished_duplicates_deletes_itself(store):
    client, _ = store
    first = _run(store, status="FINISHED")
    time.sleep(0.01)
    second = _run(store, status="FINISHED")
    runs = lambda: tracking.runs_with_tag(client, store[1], KEY, "c1")  # noqa: E731
    assert leases.first_finished(client, runs, first) == first and second in _ids(store)
    assert leases.first_finished(client, runs, second) == first and _ids(store) == {first: "FINISHED"}


def _claimed(store, cell="c1"):
    return leases.claimed(*_claim_args(store, cell, FAST))


def test_the_lifecycle_finishes_a_run_or_ends_it_as_what_stopped_it(store):
    """One context manager for cells and control ledgers: finish() ends the run FINISHED and frees
    it; an error or Ctrl-C in the body ends it FAILED or KILLED; a finished cell is only reused."""
    with _claimed(store, "ok") as lease:
        assert lease.run_id is not None and lease.heartbeat._thread.is_alive()
        assert lease.finish() == lease.run_id
    finished = lease.run_id
    assert _ids(store, "ok") == {finished: "FINISHED"} and not lease.heartbeat._thread.is_alive()
    for cell, exc, status in (("bad", ValueError("boom"), "FAILED"), ("stop", KeyboardInterrupt(), "KILLED")):
        with pytest.raises(type(exc)), _claimed(store, cell) as lease:
            raise exc
        assert _ids(store, cell) == {lease.run_id: status} and not lease.heartbeat._thread.is_alive()
    with _claimed(store, "ok") as again:  # finished by the first block: reused, nothing claimed
        assert again.run_id is None and again.finished.info.run_id == finished
    assert _ids(store, "ok") == {finished: "FINISHED"}


def test_a_run_finished_twice_keeps_the_first_and_deletes_the_later(store):
    first = _run(store, status="FINISHED", cell="dup")
    client, _ = store
    lease = _claim(store, "other")  # owns its own cell; made to finish a duplicate of "dup"
    lease.runs = lambda: tracking.runs_with_tag(client, store[1], KEY, "dup") + [client.get_run(lease.run_id)]
    assert lease.finish() == first
    assert lease.run_id not in _ids(store, "other")  # the later duplicate is deleted
