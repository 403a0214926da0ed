"""A private PostgreSQL cluster on loopback, for a tracking server's backend store.

``initdb`` a folder once, ``pg_ctl start`` it on 127.0.0.1 at a free port with its socket inside the
folder, create the ``kvx`` database, and stop it again. Postgres refuses to run as root, so as root
the cluster belongs to the ``postgres`` system user (Debian's package creates it).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import time
from pathlib import Path

DATABASE = "kvx"
#: the PostgreSQL programs a private cluster runs, and how Debian and Ubuntu install them
PROGRAMS = ("initdb", "pg_ctl", "psql")
INSTALL = "apt-get install postgresql"


def binary(name: str) -> str | None:
    """A PostgreSQL program on PATH or in Debian's versioned folder (newest first)."""
    found = shutil.which(name)
    if found:
        return found
    versions = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=_version, reverse=True)
    return versions[0] if versions else None


def available() -> str | None:
    """None when a cluster can be made here, else why not."""
    missing = [n for n in PROGRAMS if binary(n) is None]
    if missing:
        return (
            f"a private PostgreSQL cluster needs {', '.join(PROGRAMS)}; not found on PATH or in "
            f"/usr/lib/postgresql/<version>/bin: {', '.join(missing)} (Debian/Ubuntu: {INSTALL})"
        )
    if os.geteuid() == 0 and not _user_exists("postgres"):
        return "running as root without a 'postgres' system user to own the cluster"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """One cluster in ``folder``: ``start()`` returns its SQLAlchemy URI, ``stop()`` shuts it down."""

    def __init__(self, folder: Path, port: int | None = None) -> None:
        self.folder = folder.resolve()
        self.data = self.folder / "data"
        self.port = port or free_port()

    def uri(self, driver: str = "postgresql+psycopg2") -> str:
        return f"{driver}://postgres@127.0.0.1:{self.port}/{DATABASE}"

    def start(self, timeout_s: float = 60) -> str:
        why = available()
        if why:
            raise RuntimeError(why)
        self.folder.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.folder, "postgres", "postgres")
            reach = subprocess.run(["runuser", "-u", "postgres", "--", "test", "-w", str(self.folder)])
            if reach.returncode != 0:
                raise RuntimeError(
                    f"the postgres user cannot reach {self.folder} (a parent folder is private); "
                    "choose a folder under a world-readable path, e.g. /var/tmp/kvx-pg"
                )
        if not (self.data / "PG_VERSION").exists():
            self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1"
        log = str(self.folder / "postgres.log")
        self._run(
            "pg_ctl", "-D", str(self.data), "-o", options, "-l", log, "-w", "-t", str(int(timeout_s)), "start"
        )
        exists = self._psql(f"select 1 from pg_database where datname = '{DATABASE}'").strip()
        if exists != "1":
            self._psql(f"create database {DATABASE}")
        return self.uri()

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def _psql(self, sql: str) -> str:
        return self._run(
            "psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d", "postgres", "-tAc", sql
        )

    def _run(self, program: str, *args: str) -> str:
        command = [binary(program) or program, *args]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        for attempt in range(20):
            done = subprocess.run(command, capture_output=True, text=True, cwd="/")
            if done.returncode == 0 or program != "psql" or attempt == 19:
                break
            time.sleep(0.25)  # the server is still coming up
        if done.returncode != 0:
            raise RuntimeError(f"{program} failed: {(done.stderr or done.stdout).strip()[-500:]}")
        return done.stdout


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def _version(path: str) -> float:
    try:
        return float(Path(path).parent.parent.name)
    except ValueError:
        return 0.0
