"""``python -m kvx.server``'s refusals, which need no server: what ``--postgres`` needs, said by its
error and by docs/scale-out.md alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvx.server import main
from kvx.stores import postgres

ROOT = Path(__file__).resolve().parents[1]


def test_postgres_without_its_programs_names_them_and_the_install_line_as_the_docs_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(postgres, "binary", lambda name: None if name != "psql" else "/usr/bin/psql")
    monkeypatch.chdir(tmp_path)
    assert main(["--postgres", "pg"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kvx.server: --postgres pg: ") and "initdb, pg_ctl, psql;" in err  # what it needs
    assert err.rstrip().endswith("/bin: initdb, pg_ctl (Debian/Ubuntu: apt-get install postgresql)")
    assert list(tmp_path.iterdir()) == []  # refused before the cluster's folder is made
    docs = " ".join((ROOT / "docs" / "scale-out.md").read_text(encoding="utf-8").split())
    assert "`initdb`, `pg_ctl` and `psql`" in docs and "`apt-get install postgresql`" in docs


@pytest.mark.parametrize("outputs_dir", [None, "D", "deep/er"])
def test_the_server_serves_the_store_runs_with_that_outputs_dir_write(tmp_path, monkeypatch, outputs_dir):
    """``--outputs-dir D`` means ``outputs_dir=D``: the database and artifacts a run there keeps (and no
    server URI in ``MLFLOW_TRACKING_URI``, which points workers at this server, is taken as its store)."""
    from kvx.server import parse_args, served_store
    from kvx.stores.tags import run_store

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000")
    args = parse_args([] if outputs_dir is None else ["--outputs-dir", outputs_dir])
    backend, artifacts = served_store(args.outputs_dir)
    folder = tmp_path / (outputs_dir or "outputs")
    assert backend == f"sqlite:///{folder / 'mlflow.db'}" and folder.is_dir()
    assert Path(artifacts).resolve() == folder / "mlartifacts"
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    runs = run_store(outputs_dir)[1]
    assert Path(runs.removeprefix("sqlite:///")).resolve() == folder / "mlflow.db"
