"""``python -m kvx.server``: a tracking server for many workers, on a real database.

An embedded sqlite file serves one machine. Workers on several processes or nodes log to one
``mlflow server`` instead, which keeps runs in a database (PostgreSQL here) and artifacts in a
folder or an object store (S3, or anything S3-compatible through ``MLFLOW_S3_ENDPOINT_URL``)::

    python -m kvx.server --postgres outputs/pg                  # a private Postgres cluster, started here
    python -m kvx.server --backend-store-uri postgresql+psycopg2://user:pw@db/kvx \\
        --artifacts-destination s3://bucket/kvx                 # an existing database and bucket
    MLFLOW_TRACKING_URI=http://127.0.0.1:5000 python -m kvx -m hydra/launcher=kvx_joblib ...

It prints the ``MLFLOW_TRACKING_URI`` to export once the server answers, and stops the server (and
the cluster it started) on Ctrl-C. It binds to 127.0.0.1 unless ``--host`` says otherwise.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from kvx.core import commands
from kvx.core.errors import ConfigError
from kvx.stores import postgres
from kvx.stores.health import wait_healthy
from kvx.stores.tags import embedded_store


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m kvx.server", description=__doc__.split("\n\n")[0])
    store = p.add_mutually_exclusive_group()
    store.add_argument("--backend-store-uri", help="database for runs (default: OUTPUTS_DIR/mlflow.db)")
    store.add_argument("--postgres", metavar="DIR", help="create/start a private PostgreSQL cluster in DIR")
    p.add_argument("--postgres-port", type=int, help="port of the private cluster (default: a free one)")
    p.add_argument(
        "--outputs-dir",
        metavar="OUTPUTS_DIR",
        help="serve the store runs with outputs_dir=OUTPUTS_DIR keep (default: the runs' default, outputs)",
    )
    p.add_argument(
        "--artifacts-destination", help="folder or s3://bucket/path (default: OUTPUTS_DIR/mlartifacts)"
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=5000)
    p.add_argument("--workers", type=int, default=2, help="server worker processes")
    p.add_argument("--wait-s", type=float, default=120, help="how long to wait for the server to answer")
    return p.parse_args(argv)


def served_store(outputs_dir: str | None) -> tuple[str, str]:
    """The database (an absolute sqlite URI, its folder made) and artifact folder that runs with
    ``outputs_dir=...`` keep, so a server started beside them serves what they wrote."""
    backend, artifacts = embedded_store(outputs_dir)
    if backend.startswith("sqlite:///"):
        database = Path(backend.removeprefix("sqlite:///")).resolve()
        database.parent.mkdir(parents=True, exist_ok=True)
        backend = f"sqlite:///{database}"
    return backend, artifacts


def command(backend: str, artifacts: str, host: str, port: int, workers: int) -> list[str]:
    if "://" not in artifacts:
        Path(artifacts).mkdir(parents=True, exist_ok=True)
        artifacts = str(Path(artifacts).resolve())
    return [
        sys.executable,
        "-m",
        "mlflow",
        "server",
        "--backend-store-uri",
        backend,
        "--artifacts-destination",
        artifacts,
        "--host",
        host,
        "--port",
        str(port),
        "--workers",
        str(workers),
        # uvicorn kills a worker that misses a 5 s health check; a busy machine (many sweep workers on
        # few cores) misses it without being stuck, and every request on that worker breaks
        "--uvicorn-opts",
        "--timeout-worker-healthcheck 120",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    """Serve until Ctrl-C or SIGTERM, in-process; the exit code (bad input: one ``kvx.server: ...``
    line and 2; a server that never answered: that line and 1, said in :func:`kvx.core.commands.run`)."""
    return commands.run("kvx.server", _main, argv)


def _main(argv: list[str]) -> int:
    args = parse_args(argv)
    backend = args.backend_store_uri
    if not args.postgres:
        return _serve(args, backend)
    cluster = postgres.Cluster(Path(args.postgres), args.postgres_port)
    try:
        backend = cluster.start()
    except RuntimeError as exc:
        raise ConfigError(f"--postgres {args.postgres}: {exc}") from None
    print(f"kvx.server: PostgreSQL on 127.0.0.1:{cluster.port} ({args.postgres})", flush=True)
    try:
        return _serve(args, backend)
    finally:
        cluster.stop()


def _serve(args: argparse.Namespace, backend: str | None) -> int:
    try:
        embedded, artifacts = served_store(args.outputs_dir)
        argv = command(
            backend or embedded, args.artifacts_destination or artifacts, args.host, args.port, args.workers
        )
    except OSError as exc:  # a folder for the store or the artifacts that cannot be made
        raise ConfigError(f"cannot make {exc.filename}: {exc.strerror}") from None
    url = f"http://{args.host}:{args.port}"
    process = subprocess.Popen(argv, start_new_session=True)
    stop = {"now": False}

    def request_stop(signum: int, frame: object) -> None:
        stop["now"] = True

    previous = signal.signal(signal.SIGTERM, request_stop)
    try:
        wait_healthy(f"{url}/health", process, args.wait_s)
        print(f"kvx.server: serving; export MLFLOW_TRACKING_URI={url}", flush=True)
        while not stop["now"] and process.poll() is None:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    except RuntimeError as exc:  # it exited, or never answered
        raise commands.Failed(str(exc)) from None
    finally:
        if process.poll() is None:  # the server and its workers are one process group
            os.killpg(process.pid, signal.SIGINT)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        signal.signal(signal.SIGTERM, previous)
    print("kvx.server: stopped", file=sys.stderr)
    return 0 if process.returncode in (0, -signal.SIGINT, -signal.SIGTERM) else (process.returncode or 1)


if __name__ == "__main__":
    raise SystemExit(main())
