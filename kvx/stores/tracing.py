"""MLflow traces of sampled sources: one trace per (cell, source), a span per pipeline stage.

A trace shows where one answer came from and where its time went: encode, transform, the FullCache
control, prefill, compress, decode, evaluate and each diagnostic, with truncated inputs and outputs,
token counts, the kept share and timings, linked to the cell's run (the UI's Traces tab). Which
sources are traced depends on the source id alone (``tracing.sample`` of them), so the same sources
are traced in every cell and their traces compare across compressors. Untraced sources cost nothing:
their stages get a span that records nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from typing import Any

CHARS = 500  # inputs and outputs are truncated to this many characters


class _Off:
    """The span of an untraced source: accepts everything, records nothing."""

    def set_inputs(self, inputs: Any) -> None:
        pass

    def set_outputs(self, outputs: Any) -> None:
        pass

    def set_attribute(self, key: str, value: Any) -> None:
        pass


OFF = _Off()


def sampled(sample: float, source_id: str) -> bool:
    """Whether a source is traced: a fixed hash of its id below ``sample``."""
    if sample <= 0:
        return False
    if sample >= 1:
        return True
    return int(hashlib.sha256(source_id.encode()).hexdigest()[:8], 16) < sample * 0xFFFFFFFF


def short(value: Any) -> Any:
    """Truncate strings (recursively) so a trace stays small whatever the prompt length."""
    if isinstance(value, str):
        return value if len(value) <= CHARS else value[:CHARS] + f"... [{len(value)} chars]"
    if isinstance(value, dict):
        return {k: short(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [short(v) for v in value[:20]]
    return value


class Tracer:
    """Opens the spans of one cell's sampled sources; ``Tracer()`` traces nothing."""

    def __init__(self, sample: float = 0.0, run_id: str | None = None) -> None:
        self.sample, self.run_id = sample, run_id
        self.traced = 0  # sources traced in this cell
        self._on = False

    @contextlib.contextmanager
    def source(self, name: str, source_id: str, inputs: dict[str, Any]) -> Iterator[Any]:
        """The root span of one source (or OFF when it is not sampled)."""
        if not sampled(self.sample, source_id):
            yield OFF
            return
        import mlflow

        self._on = True
        self.traced += 1
        try:
            with mlflow.start_span(name=name, span_type="CHAIN", run_id=self.run_id) as span:
                span.set_inputs(short(inputs))
                yield span
        finally:
            self._on = False

    @contextlib.contextmanager
    def stage(self, name: str, inputs: dict[str, Any] | None = None, kind: str = "UNKNOWN") -> Iterator[Any]:
        """A child span of the current source's trace (OFF when the source is not traced)."""
        if not self._on:
            yield OFF
            return
        import mlflow

        with mlflow.start_span(name=name, span_type=kind) as span:
            if inputs:
                span.set_inputs(short(inputs))
            yield span

    def flush(self) -> None:
        """Traces are written in the background; a cell's are in the store before its run finishes."""
        if self.traced:
            import mlflow

            mlflow.flush_trace_async_logging()


@contextlib.contextmanager
def pointed_at(uri: str, experiment_id: str) -> Iterator[None]:
    """Point MLflow's tracing (a process-wide, fluent API) at the runs' store and experiment while a
    job runs, and back afterwards. MLflow also exports the URI as ``MLFLOW_TRACKING_URI``, which kvx
    reads as the store to use: left set, the next command in the same process (a notebook's next
    sweep, a test's) would write to this job's store instead of its own."""
    import mlflow

    previous = mlflow.get_tracking_uri() if mlflow.is_tracking_uri_set() else None
    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment(experiment_id=experiment_id)
    try:
        yield
    finally:
        mlflow.set_tracking_uri(previous)
