"""Sweeps against a tracking server (``python -m kvx.server``) on a private PostgreSQL cluster with an
S3-compatible artifact store (moto), all on loopback: grouped jobs, 16 concurrent workers, and a server
restart mid-sweep, each with every cell's records exactly once. One server serves the module (its start
and stop take ~20 s of CPU); each test writes to an experiment of its own, and so to an S3 prefix of
its own. Skips with the reason when PostgreSQL, psycopg2, boto3 or moto are not installed."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from importlib.util import find_spec
from pathlib import Path

import pytest

from kvx.stores import postgres
from kvx.stores.health import wait_healthy
from kvx.testing.cli import aggregate_strict, finish, kvx_env, start_sweep, sweep
from kvx.testing.stores import check_exactly_once, store

pytestmark = pytest.mark.slow
BUCKET = "kvx-artifacts"
S3_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def _missing() -> str | None:
    why = postgres.available()
    if why:
        return why
    for module, dist in (("psycopg2", "psycopg2-binary"), ("boto3", "boto3"), ("moto", "moto[server]")):
        if find_spec(module) is None:
            return f"{dist} is not installed (pip install 'kvx[server]')"
    if shutil.which("moto_server", path=str(Path(sys.executable).parent)) is None:
        return "moto_server is not installed (pip install 'moto[server]')"
    return None


if _missing():
    pytest.skip(_missing(), allow_module_level=True)


class Server:
    """moto (S3) + ``python -m kvx.server --postgres``; ``stop``/``start`` restart the server and its
    database on the same ports, as an operator restarting the box would."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.pg = Path(tempfile.mkdtemp(prefix="kvx-pg-"))  # pytest's tmp_path is private to root
        self.pg.chmod(0o755)
        self.port, self.s3_port, self.pg_port = (
            postgres.free_port(),
            postgres.free_port(),
            postgres.free_port(),
        )
        self.uri = f"http://127.0.0.1:{self.port}"
        self.env = kvx_env() | S3_ENV | {"MLFLOW_S3_ENDPOINT_URL": f"http://127.0.0.1:{self.s3_port}"}
        moto = str(Path(sys.executable).parent / "moto_server")
        self.moto = subprocess.Popen(
            [moto, "-H", "127.0.0.1", "-p", str(self.s3_port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self._until(f"http://127.0.0.1:{self.s3_port}/", "moto", self.moto, any_status=True)
        self.s3().create_bucket(Bucket=BUCKET)
        self.process: subprocess.Popen | None = None
        self.start()

    def s3(self):
        import boto3

        return boto3.client("s3", endpoint_url=f"http://127.0.0.1:{self.s3_port}", **_keys())

    def start(self) -> None:
        log = open(self.root / "server.log", "a")  # noqa: SIM115 - the server process holds it
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kvx.server",
                "--postgres",
                str(self.pg / "cluster"),
                "--postgres-port",
                str(self.pg_port),
                "--artifacts-destination",
                f"s3://{BUCKET}/mlflow",
                "--port",
                str(self.port),
            ],
            cwd=self.root,
            env=self.env,
            stdout=log,
            stderr=log,
        )
        self._until(f"{self.uri}/health", "kvx.server", self.process)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=60)

    def close(self) -> None:
        self.stop()
        self.moto.terminate()
        self.moto.wait(timeout=30)
        shutil.rmtree(self.pg, ignore_errors=True)

    def _until(self, url: str, what: str, process: subprocess.Popen | None = None, **kw) -> None:
        try:
            wait_healthy(url, process, **kw)
        except RuntimeError as exc:
            log = self.root / "server.log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise AssertionError(f"{what} did not start ({exc}): {tail}") from None


def _keys() -> dict[str, str]:
    return {"aws_access_key_id": "testing", "aws_secret_access_key": "testing", "region_name": "us-east-1"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("server"))
    yield s
    s.close()


def _env(server: Server) -> dict[str, str]:
    return server.env | {"MLFLOW_TRACKING_URI": server.uri}


def _sweep(server: Server, cwd: Path, experiment: str, *args: str) -> subprocess.Popen:
    """A real worker process: the server restarts under it."""
    return start_sweep(cwd, f"mlflow.experiment={experiment}", *args, env=_env(server))


def test_grouped_jobs_log_to_postgres_and_s3(server, tmp_path):
    grid = ["press=snapkv,tova", "ratio=0.25,0.5", "per_job=[ratio]", "n_sources=2"]  # joblib: test_launchers
    done = sweep(
        tmp_path, "mlflow.experiment=grouped", *grid, env=_env(server)
    )  # in-process: the store is the subject
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    check_exactly_once(tmp_path, cells=4, sources=2, uri=server.uri, experiment="grouped")
    assert "0 errors and 0 warnings" in aggregate_strict(tmp_path, server.uri, "grouped")
    _, exp = store(tmp_path, server.uri, "grouped")
    listed = server.s3().list_objects_v2(Bucket=BUCKET, Prefix=f"mlflow/{exp}/")
    keys = [o["Key"] for o in listed.get("Contents", [])]
    assert sum(k.endswith("/records.jsonl") for k in keys) == 4  # artifacts went to S3 ...
    assert not (tmp_path / "outputs" / "mlartifacts").exists()  # ... not to a local folder


def test_sixteen_concurrent_workers_lose_and_duplicate_nothing(server):
    """Sixteen workers (threads with their own clients, as processes would have) claim, compute and
    finish eight cells, each cell wanted by two; the 16-process CLI version is
    benchmarks/bench_concurrency.py (minutes on two cores)."""
    from mlflow.tracking import MlflowClient

    from kvx.stores import leases, tracking

    timing = leases.Timing(heartbeat_s=2, stale_s=60, settle_s=0.3, poll_s=0.3)
    client = tracking.Store(MlflowClient(tracking_uri=server.uri))
    exp = client.create_experiment("threads")
    failures, owners = [], []

    def worker(cell: str) -> None:
        try:
            mine = tracking.Store(MlflowClient(tracking_uri=server.uri))
            runs = lambda: tracking.runs_with_tag(mine, exp, tracking.CELL_ID, cell)  # noqa: E731
            create = lambda tags: mine.create_run(exp, tags={tracking.CELL_ID: cell, **tags}).info.run_id  # noqa: E731
            lease = leases.claim(mine, runs, create, timing, cell)
            if lease.run_id is not None:
                mine.log_text(lease.run_id, cell, "records.jsonl")  # to S3 through the server
                time.sleep(1.0)
                mine.set_terminated(lease.run_id, "FINISHED")
                lease.release()
                owners.append(leases.first_finished(mine, runs, lease.run_id))
        except Exception as exc:  # noqa: BLE001 - every failure is reported below
            failures.append(repr(exc))

    threads = [threading.Thread(target=worker, args=(f"cell{i % 8}",)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not failures, failures
    runs = client.search_runs([exp], "", max_results=100)
    assert sorted(r.data.tags[tracking.CELL_ID] for r in runs) == sorted(f"cell{i}" for i in range(8))
    assert {r.info.status for r in runs} == {"FINISHED"} and len(set(owners)) == len(owners) == 8


def test_a_server_restart_mid_sweep_loses_nothing(server, tmp_path):
    grid = ["press=snapkv", "ratio=0.25,0.5", "n_sources=16", "context_tokens=600", "max_new_tokens=16"]
    proc = _sweep(server, tmp_path, "restart", *grid)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        try:
            client, exp = store(tmp_path, server.uri, "restart")
            if client.search_runs([exp], "tags.`kvx.role` = 'cell' and attributes.status = 'RUNNING'"):
                break
        except Exception:  # noqa: BLE001 - the experiment is not there yet
            pass
        time.sleep(0.5)
    server.stop()  # the server and its database go down mid-cell ...
    time.sleep(3)
    server.start()  # ... and come back on the same ports
    code, err = finish(proc)
    assert code == 0 and "Traceback" not in err, err[-3000:]
    check_exactly_once(tmp_path, cells=2, sources=16, uri=server.uri, experiment="restart")
    assert "0 errors and 0 warnings" in aggregate_strict(tmp_path, server.uri, "restart")
