"""Write what the analysis found: CSV and Markdown tables, figures, one HTML report, and the
same folder logged to MLflow as an ``aggregate`` run tagged with the sweeps it covers."""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from importlib.metadata import version
from pathlib import Path

from kvx.aggregate.catalogue import Catalogue
from kvx.aggregate.read.sources import Source
from kvx.aggregate.run import Options, Result

TITLE = "kvx aggregate report"


def publish(
    result: Result,
    source: Source,
    out: Path,
    plots: bool | dict[str, list[Path]],
    log_uri: str | None,
    options: Options,
    declared: Catalogue,
) -> Path:
    """Tables, figures (drawn here when ``plots`` is True; already drawn when it is the figures) and the
    report as ``declared`` (the run's catalogue, with its figures when there are any), logged to MLflow
    when ``log_uri`` is given."""
    from kvx.aggregate.publish.report import Report, write_html, write_section_markdown, write_tables

    shown = Report.of(declared)
    out.mkdir(parents=True, exist_ok=True)
    write_tables(result.tables, out, shown)
    figures: dict[str, list[Path]] = plots if isinstance(plots, dict) else {}
    if plots is True:
        from kvx.aggregate.publish.plots import plot_all

        figures = plot_all(result.tables, out, declared.figures, options.workers)
    write_section_markdown(result.tables, figures, out, shown)
    errors = sum(p.severity == "error" for p in result.problems)
    meta = {
        **source.description,
        "records read": str(result.n_records),
        "records analysed": str(result.n_rows),
        "validation": f"{errors} errors, {len(result.problems) - errors} warnings",
        **({"notes": "; ".join(source.notes)} if source.notes else {}),
        "resampling": f"{options.n_splits} row splits, {options.n_boot} bootstrap draws, seed {options.seed}",
        "kvx": version("kvx"),
        "created": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    (out / "summary.json").write_text(
        json.dumps({"meta": meta, "options": {**asdict(options), "export": str(options.export)}}, indent=2)
    )
    report = write_html(result.tables, figures, out, TITLE, meta, shown)
    if log_uri is not None:
        _log(log_uri, source, out, result, options)
    return report


def _log(uri: str, source: Source, out: Path, result: Result, options: Options) -> None:
    from mlflow.tracking import MlflowClient

    from kvx.stores import tracking

    client = MlflowClient(tracking_uri=uri)
    experiments = source.description.get("experiments", "kvx").split(", ")
    exp = client.get_experiment_by_name(experiments[0])
    exp_id = exp.experiment_id if exp is not None else client.create_experiment(experiments[0])
    tags = {
        tracking.ROLE: "aggregate",
        "kvx.sweeps": ",".join(source.sweeps) or "(runs outside sweeps)",
        **tracking.provenance_tags(),
    }
    run_id = client.create_run(exp_id, run_name=f"aggregate {out.name}", tags=tags).info.run_id
    for name, value in (("n_splits", options.n_splits), ("n_boot", options.n_boot), ("seed", options.seed)):
        client.log_param(run_id, name, str(value))
    client.log_metric(run_id, "n_records", result.n_records)
    client.log_metric(run_id, "n_analysed", result.n_rows)
    client.log_metric(run_id, "n_problems", len(result.problems))
    client.log_artifacts(run_id, str(out))
    client.set_terminated(run_id, "FINISHED")
