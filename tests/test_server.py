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
