"""What a test reads back from a tracking store a sweep wrote: its runs by role, and the check that
every cell was computed exactly once."""

from __future__ import annotations

import json
from pathlib import Path

from mlflow.tracking import MlflowClient


def store(cwd: Path, uri: str | None = None, experiment: str = "kvx") -> tuple[MlflowClient, str]:
    """The client of the store a run in ``cwd`` wrote (or of ``uri``) and the experiment's id."""
    client = MlflowClient(tracking_uri=uri or f"sqlite:///{cwd / 'outputs' / 'mlflow.db'}")
    return client, client.get_experiment_by_name(experiment).experiment_id


def ledger(cwd: Path, uri: str | None = None, experiment: str = "kvx") -> dict[str, list]:
    """Active runs of the experiment by role."""
    client, exp = store(cwd, uri, experiment)
    out: dict[str, list] = {}
    for run in client.search_runs([exp], "", max_results=1000):
        out.setdefault(run.data.tags.get("kvx.role", ""), []).append(run)
    return out


def check_exactly_once(
    cwd: Path, cells: int, sources: int, uri: str | None = None, experiment: str = "kvx"
) -> None:
    """Each cell has one FINISHED run holding each source once; no other cell or control run is left."""
    runs = ledger(cwd, uri, experiment)
    cell_runs = runs.get("cell", [])
    assert [r.info.status for r in cell_runs] == ["FINISHED"] * cells, [r.info.status for r in cell_runs]
    assert len({r.data.tags["kvx.cell_id"] for r in cell_runs}) == cells  # no cell twice
    client, _ = store(cwd, uri, experiment)
    for run in cell_runs:
        folder = cwd / "dl" / run.info.run_id
        folder.mkdir(parents=True, exist_ok=True)
        path = client.download_artifacts(run.info.run_id, "records.jsonl", str(folder))
        with open(path) as handle:
            ids = [json.loads(line)["source_id"] for line in handle]
        assert len(ids) == len(set(ids)) == sources, ids
    controls = runs.get("control", [])
    assert [r.info.status for r in controls] == ["FINISHED"] * len(controls)
    assert len({r.data.tags["kvx.control_key"] for r in controls}) == len(controls)
