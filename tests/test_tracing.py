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
