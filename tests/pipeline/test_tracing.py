"""MLflow tracing is pointed at a job's store while its cells run, and put back afterwards."""

from __future__ import annotations

import mlflow
import pytest

from kvx.stores import tracing


def test_tracing_points_mlflow_at_the_job_and_puts_back_what_it_found(tmp_path, monkeypatch):
    """One job's cells trace to its store and experiment; afterwards MLflow's process-wide URI (and
    ``MLFLOW_TRACKING_URI``, which MLflow exports and kvx reads as the store) is what it was, so the next
    command in the same process writes to its own store."""
    import os

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    mlflow.set_tracking_uri(None)
    calls = []
    monkeypatch.setattr(mlflow, "set_experiment", lambda experiment_id: calls.append(experiment_id))
    uri = f"sqlite:///{tmp_path / 'a.db'}"
    with tracing.pointed_at(uri, "1"):
        assert mlflow.get_tracking_uri() == uri and calls == ["1"]
        assert os.environ["MLFLOW_TRACKING_URI"] == uri
    assert not mlflow.is_tracking_uri_set() and "MLFLOW_TRACKING_URI" not in os.environ
    mlflow.set_tracking_uri("sqlite:///mine.db")  # a notebook's own choice is kept
    with tracing.pointed_at(uri, "2"):
        assert mlflow.get_tracking_uri() == uri
    assert mlflow.get_tracking_uri() == "sqlite:///mine.db" and calls == ["1", "2"]
    mlflow.set_tracking_uri(None)


@pytest.mark.slow
def test_a_traced_source_takes_the_same_path_and_gives_the_same_records(tiny, tmp_path, monkeypatch):
    """Tracing wraps each stage of the one source path in a span; the records are those of the
    untraced run, and every stage shows in the trace."""
    from mlflow.tracking import MlflowClient

    from kvx.core.records import as_dicts
    from kvx.core.registry import registry
    from kvx.pipeline.cell import Cell
    from kvx.pipeline.engine import Engine
    from kvx.tasks.ruler import NiahSingle
    from kvx.testing.records import unmeasured

    grid = [
        Cell(
            "ruler_niah_single",
            NiahSingle(),
            "tiny",
            name,
            registry("compressor").get(name)(),
            0.5,
            0,
            2,
            400,
            4,
        )
        for name in ("snapkv", "tova")
    ]
    plain = [as_dicts(r) for r in Engine(tmp_path / "plain", 2**30).run_cells(grid, tiny, progress=False)]
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("kvx")
    runs = [client.create_run(exp).info.run_id for _ in grid]
    tracers = [tracing.Tracer(1.0, run_id) for run_id in runs]
    with tracing.pointed_at(uri, exp):
        traced = Engine(tmp_path / "traced", 2**30).run_cells(grid, tiny, progress=False, tracers=tracers)
        for tracer in tracers:
            tracer.flush()
    assert [[unmeasured(r) for r in rs] for rs in plain] == [
        [unmeasured(r) for r in as_dicts(rs)] for rs in traced
    ]
    assert [t.traced for t in tracers] == [2, 2]
    traces = client.search_traces(locations=[exp], max_results=10)
    assert len(traces) == 4
    for trace in traces:
        names = {span.name for span in trace.data.spans}
        assert {"encode", "transform", "control", "compress", "prefill", "decode", "evaluate"} <= names
