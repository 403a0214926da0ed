"""MLflow tracing is pointed at a store once per process, not reset by every cell."""

from __future__ import annotations

import mlflow

from kvx.stores import tracing


def test_tracing_is_configured_once_per_store_and_experiment(monkeypatch):
    calls = []
    monkeypatch.setattr(mlflow, "set_tracking_uri", lambda uri: calls.append(("uri", uri)))
    monkeypatch.setattr(mlflow, "set_experiment", lambda experiment_id: calls.append(("exp", experiment_id)))
    monkeypatch.setattr(tracing, "_CONFIGURED", None)
    for _ in range(3):  # three cells of one sweep
        tracing.configure("sqlite:///a.db", "1")
    assert calls == [("uri", "sqlite:///a.db"), ("exp", "1")]
    tracing.configure("sqlite:///a.db", "2")  # another experiment: pointed again
    assert calls[-1] == ("exp", "2") and len(calls) == 4


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
    monkeypatch.setattr(tracing, "_CONFIGURED", None)
    previous = mlflow.get_tracking_uri()
    tracing.configure(uri, exp)
    tracers = [tracing.Tracer(1.0, run_id) for run_id in runs]
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
    mlflow.set_tracking_uri(previous)  # the rest of the suite's fluent calls go where they went
