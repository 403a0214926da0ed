"""One Hydra job: build its cells, skip those already finished, run the rest, log each to MLflow."""

from __future__ import annotations

import errno
import json
import logging
import time
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from kvx.cli.cells import build_cell, choices
from kvx.cli.compose import Composer
from kvx.cli.preflight import diagnostic_label
from kvx.cli.session import Session
from kvx.cli.sources import instantiate
from kvx.core.commands import Failed
from kvx.core.errors import ConfigError
from kvx.core.identity import digest
from kvx.core.jsonl import json_lines
from kvx.core.records import (
    SCHEMA_VERSION,
    Record,
    as_dicts,
    cell_metrics,
    cost_metrics,
    dumps,
    served_metrics,
)
from kvx.modeling.heap import PeakMemory
from kvx.modeling.reader import load_reader, reader_identity
from kvx.pipeline.cell import Cell
from kvx.pipeline.judge import judge_cells, judge_metrics
from kvx.pipeline.rediagnose import Answered, kept_diagnostics
from kvx.pipeline.served import connect
from kvx.stores import leases, tracing, tracking

log = logging.getLogger("kvx")


def _parent_run_id() -> str | None:
    try:
        from hydra.core.hydra_config import HydraConfig

        hc = HydraConfig.get()
    except ValueError:
        return None
    if str(hc.mode) != "RunMode.MULTIRUN":
        return None
    path = Path(hc.sweep.dir) / tracking.PARENT_FILE
    return path.read_text().strip() if path.exists() else None


def run(cfg: DictConfig, session: Session) -> dict[str, float]:
    """One Hydra job: its own cell, or the group of cells ``cells`` lists (``kvx.cli.sweeper``)."""
    if cfg.get("cells"):
        return run_group(cfg, session)
    return run_cells([(cfg, choices(cfg))], _parent_run_id(), session)


def run_group(cfg: DictConfig, session: Session) -> dict[str, float]:
    """Each cell of the group composed as its own job would be and run in this process, source
    by source (``Engine.run_cells``), so the model loads once and each source's prefill serves
    every cell of the group."""
    from hydra.core.hydra_config import HydraConfig

    hydra_cfg = HydraConfig.get()
    if session.composer is None:
        session.composer = Composer.of_hydra(hydra_cfg)
    base = [o for o in hydra_cfg.overrides.task if not o.startswith("cells=")]
    jobs = [session.composer([*base, *overrides]) for overrides in json.loads(cfg.cells)]
    return run_cells(jobs, _parent_run_id(), session)


def run_cells(
    jobs: list[tuple[DictConfig, dict[str, str]]], parent: str | None, session: Session
) -> dict[str, float]:
    """Validate every cell, skip those already finished, then run the rest a control split at a
    time (cells of one split share their sources) and log each cell to MLflow as it finishes.

    Cells another worker is computing are left for later, and this worker waits on one only while
    it holds no claim of its own, so two sweeps over the same cells in different orders never
    wait on each other."""
    metrics: dict[str, float] = {}
    remaining = list(jobs)
    while remaining:
        opened, busy = [], []
        # every claim lives in this stack (``leases.claimed``): Ctrl-C or a failure anywhere ends each
        # run it has not finished as KILLED or FAILED and frees it
        with ExitStack() as claims:
            for cfg, typed in remaining:
                outcome = _open(claims, cfg, typed, parent, session, wait=False)
                if isinstance(outcome, _CellRun):
                    opened.append(outcome)
                elif outcome is None:
                    busy.append((cfg, typed))
                else:
                    metrics = outcome
            if not opened and busy:  # nothing to do but wait: on one cell, holding nothing
                outcome = _open(claims, *busy.pop(0), parent, session, wait=True)
                if isinstance(outcome, _CellRun):
                    opened.append(outcome)
                elif outcome is not None:
                    metrics = outcome
            metrics = _compute_all(opened, session) or metrics
        remaining = busy
    return metrics


def _compute_all(opened: list[_CellRun], session: Session) -> dict[str, float]:
    splits: dict[tuple[str, str], list[_CellRun]] = {}
    for cell_run in opened:
        splits.setdefault((cell_run.reader_key, cell_run.identity.split), []).append(cell_run)
    pending = list(opened)
    metrics: dict[str, float] = {}
    try:
        for group in splits.values():
            metrics = _compute(group, session)
            for cell_run in group:
                pending.remove(cell_run)
    except BaseException as exc:  # the claims' stack ends the pending runs
        if pending:
            pending[0].report(exc)
        raise
    return metrics


def _open(
    claims: ExitStack,
    cfg: DictConfig,
    typed: dict[str, str],
    parent: str | None,
    session: Session,
    wait: bool,
) -> _CellRun | dict[str, float] | None:
    """A cell's run claimed (its lifecycle entered into ``claims``) and its parameters logged; or,
    when a finished run already holds the cell (or another worker finished it while this one
    waited), that run's metrics; or None when another worker is computing it and ``wait`` is false."""
    cell, reader_cfg, names = build_cell(cfg, typed)
    identity = cell.identity(reader_identity(names["reader"], reader_cfg))
    diagnostics = ",".join(diagnostic_label(name, d) for name, d in cell.diagnostics)
    judge = instantiate(cfg, "judge").label(names["judge"])
    chash = digest({"cell": identity.id, "diagnostics": diagnostics})
    client, exp_id = tracking.ensure_experiment(cfg)
    reader_label = reader_cfg.label(names["reader"])
    name = f"{cell.task_name}|{reader_label}|{cell.label()}|seed={cell.seed}"
    if parent:  # the sweep's plan: the aggregate expects exactly the cells its jobs are, never more
        client.set_tag(parent, f"{tracking.PLAN}{identity.id}", name[:5000])
    done = tracking.finished_run_with(client, exp_id, tracking.CELL_ID, identity.id)
    stale, answered = None, None
    if done is not None and cfg.force:
        stale = "force=true"
    elif done is not None and done.data.metrics.get("n_error"):  # errors may be transient or fixed since
        stale = f"{done.data.metrics['n_error']:.0f} error records"
    elif done is not None and done.data.tags.get(tracking.DIAGNOSTICS, "") != diagnostics:
        before = done.data.tags.get(tracking.DIAGNOSTICS, "")
        stale = f"diagnostics were [{before}], now [{diagnostics}]"
        labels = [(n, diagnostic_label(n, d)) for n, d in cell.diagnostics]
        answered = _answered(client, done.info.run_id, kept_diagnostics(before, labels))
    elif done is not None and done.data.tags.get(tracking.JUDGE, "none") != judge:
        stale = f"judge was {done.data.tags.get(tracking.JUDGE, 'none')}, now {judge}"
    if done is not None and stale is None:
        log.info("skip %s: finished run %s is cell %s", name, done.info.run_id, identity.id)
        if parent:  # the sweep counts it as one of its finished jobs
            client.set_tag(parent, f"{tracking.REUSED}{identity.id}", done.info.run_id)
        return dict(done.data.metrics)
    replaced = None  # the sweep whose cell this run replaces: its job is done by this run
    if done is not None and answered is not None:  # diagnostics only: the recorded answers stand
        kept = f"; kept: {', '.join(answered.kept)}" if answered.kept else ""
        log.info(
            "diagnose %s again: its answers stand, replacing run %s (%s%s)",
            name,
            done.info.run_id,
            stale,
            kept,
        )
    elif done is not None:  # one setting is one cell: the new run replaces the old one
        log.info("recompute %s: replacing run %s (%s)", name, done.info.run_id, stale)
    if done is not None:  # one setting is one cell: the new run replaces the old one
        client.delete_run(done.info.run_id)
        replaced = done.data.tags.get(tracking.MLFLOW_PARENT)
    tags = {
        tracking.ROLE: "cell",
        tracking.CELL_ID: identity.id,
        tracking.CONFIG_HASH: chash,
        tracking.DIAGNOSTICS: diagnostics,
        tracking.JUDGE: judge,
        **tracking.provenance_tags(),
    }
    if parent:
        tags[tracking.MLFLOW_PARENT] = parent
    cell_runs = lambda: tracking.runs_with_tag(client, exp_id, tracking.CELL_ID, identity.id)  # noqa: E731
    lease = claims.enter_context(
        leases.claimed(
            client,
            cell_runs,
            lambda extra: client.create_run(exp_id, run_name=name, tags={**tags, **extra}).info.run_id,
            leases.Timing.from_config(cfg),
            f"cell {name}",
            wait,
        )
    )
    if lease.busy is not None:
        log.info("%s is being computed by run %s; coming back to it", name, lease.busy.info.run_id)
        return None
    if lease.finished is not None:  # another worker computed it meanwhile
        if parent:
            client.set_tag(parent, f"{tracking.REUSED}{identity.id}", lease.finished.info.run_id)
        return dict(lease.finished.data.metrics)
    cell_run = _CellRun(
        cfg, typed, parent, cell, reader_cfg, names, identity, chash, client, exp_id, name, session
    )
    cell_run.lease = lease
    cell_run.replaced = replaced if replaced != parent else None
    cell_run.answered = answered
    try:
        params = {**identity.flat(), **{f"choices.{g}": v for g, v in typed.items()}}
        params.update(ratio=cfg.ratio, budget_tokens=cfg.budget_tokens, diagnostics=diagnostics, judge=judge)
        items = sorted((k, str(v)[:500]) for k, v in params.items())
        for i in range(0, len(items), 90):
            client.log_batch(lease.run_id, params=_params(items[i : i + 90]))
    except BaseException as exc:  # a full disk: one line; the claims' stack ends the run
        cell_run.report(exc)
        raise
    return cell_run


def _compute(group: list[_CellRun], session: Session) -> dict[str, float]:
    """Run the cells of one control split together and finish each; returns the last one's metrics."""
    first = group[0]
    eng = session.engine_for(first.cfg)
    served = bool(getattr(first.reader_cfg, "served", False))
    if served:
        reader = connect(first.names["reader"], first.reader_cfg, eng.responses)
        requests_before = reader.chat.counts["requests"]
    else:
        reader = load_reader(first.names["reader"], first.reader_cfg)
    before = eng.controls.computed
    tracers = [tracing.Tracer(float(c.cfg.tracing.sample), c.lease.run_id) for c in group]
    for c in group:
        c.client.set_tag(c.lease.run_id, "model_revision", reader.revision)
    traced = any(t.sample > 0 for t in tracers)
    progress = any(bool(c.cfg.progress) for c in group)
    resume = not any(bool(c.cfg.force) for c in group)
    cells, hashes = [c.cell for c in group], [c.chash for c in group]
    # every cell of this split is here: a source's capture is not needed once it is done
    pointed = tracing.pointed_at(tracking.tracking_uri(first.cfg), first.exp_id) if traced else nullcontext()
    with pointed, PeakMemory() as peak:  # the split's cells run together: one peak for all of them
        if served:
            results = eng.run_served(cells, reader, progress, hashes)
        else:
            answered = [c.answered for c in group]
            results = eng.run_cells(cells, reader, progress, hashes, tracers, resume, True, answered)
    computed = eng.controls.computed - before
    jobs = [(c.names["judge"], instantiate(c.cfg, "judge"), r) for c, r in zip(group, results, strict=True)]
    jobs = [job for job in jobs if not job[1].identity]
    if jobs:  # before the records are logged: they hold the judgments
        judge_cells(jobs, eng.sources(first.cell, reader), Path(str(first.cfg.outputs_dir)), progress)
    metrics: dict[str, float] = {}
    for i, (cell_run, records, tracer) in enumerate(zip(group, results, tracers)):
        tracer.flush()
        rows = as_dicts(records)
        metrics = {**cell_metrics(rows), **cost_metrics(rows), **served_metrics(rows)}
        metrics.update(judge_metrics(rows, cell_run.names["judge"]))
        metrics["peak_rss_mib"] = peak.bytes / 2**20
        metrics["controls_computed"] = computed if i == 0 else 0  # the split's controls, counted once
        if served:  # requests the group's cells sent together, counted once
            metrics["requests_sent"] = reader.chat.counts["requests"] - requests_before if i == 0 else 0
        metrics["traced_sources"] = tracer.traced
        metrics["resumed_sources"] = eng.resumed.pop(cell_run.identity.id, 0)
        metrics["rediagnosed_sources"] = eng.rediagnosed.pop(cell_run.identity.id, 0)
        decodes = eng.decodes.pop(cell_run.identity.id, {})
        metrics["decoded_batched"] = decodes.get("batched", 0)
        metrics["decoded_alone"] = sum(n for how, n in decodes.items() if how != "batched")
        cell_run.finish(rows, metrics, reader, sorted(h for h in decodes if h != "batched"))
        session.finished += 1
        log.info("%s: %s", cell_run.name, json.dumps({k: round(v, 4) for k, v in metrics.items()}))
    return metrics


@dataclass
class _CellRun:
    """A claimed cell: its settings, its MLflow run and the lease that keeps the run alive."""

    cfg: DictConfig
    typed: dict[str, str]
    parent: str | None
    cell: Cell
    reader_cfg: Any
    names: dict[str, str]
    identity: Any
    chash: str
    client: Any
    exp_id: str
    name: str
    session: Session
    lease: leases.Claim | None = None
    replaced: str | None = None  # the earlier sweep whose run of this cell this one replaces
    answered: Answered | None = None  # the replaced run's records, when only its diagnostics change

    @property
    def reader_key(self) -> str:
        return digest(reader_identity(self.names["reader"], self.reader_cfg))

    def finish(self, records: list[dict], metrics: dict, reader: Any, alone: list[str]) -> None:
        """Log the cell and end its run FINISHED (a failure here is reported, and the claims' stack
        ends the run FAILED)."""
        client, run_id = self.client, self.lease.run_id
        try:
            if alone:  # why some caches decoded outside the batch
                client.set_tag(run_id, "kvx.decoded_alone", "; ".join(alone)[:5000])
            _log_cell(client, run_id, self.cfg, records, metrics)
            manifest = self.cell.task.manifest(self.cell.n_sources, self.cell.seed)
            if manifest is not None:
                client.log_dict(run_id, manifest, "task_manifest.json")
            control_name = f"{self.cell.task_name}|{reader.label}|FullCache"
            _log_control(
                client,
                self.exp_id,
                self.identity.split,
                self.parent,
                control_name,
                records,
                leases.Timing.from_config(self.cfg),
            )
            kept = self.lease.finish()
        except BaseException as exc:
            self.report(exc)
            raise
        if kept != run_id and self.parent:  # another worker finished it first: this sweep counts that run
            client.set_tag(self.parent, f"{tracking.REUSED}{self.identity.id}", kept)
        if self.replaced:  # the earlier sweep's job of this cell is this run now
            client.set_tag(self.replaced, f"{tracking.REUSED}{self.identity.id}", kept)

    def report(self, exc: BaseException) -> None:
        """A full disk is one line and exit status 1 (``kvx.core.commands.Failed``); a config error
        propagates as it is."""
        if (
            isinstance(exc, OSError)
            and not isinstance(exc, ConfigError)
            and exc.errno in (errno.ENOSPC, errno.EDQUOT)
        ):
            raise Failed(
                f"disk full while writing {exc.filename or 'an artifact'} for cell {self.name}; it is "
                f"marked FAILED and {self.session.finished} finished cell(s) are kept: free space and rerun "
                "the same command"
            ) from exc


def _artifact_rows(client: Any, run_id: str, name: str, folder: str) -> list[Any]:
    """The values of a run's JSON Lines artifact, downloaded into ``folder`` (``kvx.core.jsonl``: lines
    end at \\n only, as an answer may hold U+2028)."""
    return [row for _, row in json_lines(Path(client.download_artifacts(run_id, name, folder)))]


def _answered(client: Any, run_id: str, kept: tuple[str, ...]) -> Answered | None:
    """A finished run's records, whose answers stand when only the cell's diagnostics change; None
    (recompute the cell) when they cannot be read or another schema version wrote them."""
    import tempfile

    from mlflow.exceptions import MlflowException

    with tempfile.TemporaryDirectory() as folder:
        try:
            rows = _artifact_rows(client, run_id, "records.jsonl", folder)
            records = [Record.from_dict(row) for row in rows]
        except (OSError, ValueError, TypeError, KeyError, MlflowException) as exc:
            log.info("run %s: its records cannot be read (%s); the cell is recomputed", run_id, exc)
            return None
    if any(r.schema_version != SCHEMA_VERSION for r in records):
        return None
    return Answered({r.key: r for r in records}, kept)


def _params(items: list[tuple[str, str]]) -> list[Any]:
    from mlflow.entities import Param

    return [Param(k, v) for k, v in items]


def _log_cell(client: Any, run_id: str, cfg: DictConfig, records: list[dict], metrics: dict) -> None:
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    client.log_batch(run_id, metrics=[Metric(k, float(v), now, 0) for k, v in metrics.items()])
    client.log_text(run_id, dumps(records), "records.jsonl")
    client.log_text(run_id, OmegaConf.to_yaml(cfg, resolve=True), "config.yaml")
    client.log_table(run_id, _table(records), "records_table.json")


def _table(records: list[dict]) -> dict[str, list]:
    """A flat view for the MLflow UI's table viewer."""
    return {
        "source_id": [r["source_id"] for r in records],
        "status": [r["status"] for r in records],
        "transition": [r["transition"] for r in records],
        "full_output": [(r["full"] or {}).get("output") for r in records],
        "compressed_output": [(r["compressed"] or {}).get("output") for r in records],
        "references": ["; ".join(r["references"]) for r in records],
        "reason": [r["reason"] for r in records],
    }


def _log_control(
    client: Any,
    exp_id: str,
    split: str,
    parent: str | None,
    run_name: str,
    records: list[dict],
    timing: leases.Timing,
) -> None:
    """Log the control group once as its own run; later cells of the same split reuse it."""
    controls = [
        {"source_id": r["source_id"], "prompt_hash": r["prompt_hash"], **r["full"]}
        for r in records
        if r["full"]
    ]
    if not controls:
        return
    finished = [
        r
        for r in tracking.runs_with_tag(client, exp_id, tracking.CONTROL_KEY, split)
        if r.info.status == "FINISHED"
    ]
    if finished:
        _supplement_controls(client, exp_id, split, parent, run_name, controls, finished)
        return
    tags = {tracking.ROLE: "control", tracking.CONTROL_KEY: split, **tracking.provenance_tags()}
    if parent:
        tags[tracking.MLFLOW_PARENT] = parent
    ledgers = lambda: tracking.runs_with_tag(client, exp_id, tracking.CONTROL_KEY, split)  # noqa: E731
    with leases.claimed(
        client,
        ledgers,
        lambda extra: client.create_run(exp_id, run_name=run_name, tags={**tags, **extra}).info.run_id,
        timing,
        f"control ledger {run_name}",
    ) as lease:
        if lease.finished is not None:
            return
        run_id = lease.run_id
        client.log_param(run_id, "compressor", "none (FullCache control)")
        client.log_metric(run_id, "full_accuracy", sum(c["correct"] for c in controls) / len(controls))
        client.log_metric(run_id, "full_mean_score", sum(c["score"] for c in controls) / len(controls))
        client.log_metric(run_id, "n_sources", len(controls))
        client.log_text(run_id, dumps(controls), "controls.jsonl")
        lease.finish()


def _supplement_controls(
    client: Any,
    exp_id: str,
    split: str,
    parent: str | None,
    run_name: str,
    controls: list[dict],
    ledgers: list,
) -> None:
    """A control group's ledger gains the controls a later cell computed that it lacks (a source whose
    control failed, e.g. a served reader's server was down, and a rerun answered): one more ledger run
    for the group holding only those. The aggregate reads a group's ledgers as one."""
    if sum(r.data.metrics.get("n_sources", 0) for r in ledgers) >= len(controls):
        return
    import tempfile

    have: set[str] = set()
    with tempfile.TemporaryDirectory() as folder:
        for run in ledgers:
            rows = _artifact_rows(client, run.info.run_id, "controls.jsonl", folder)
            have |= {row["source_id"] for row in rows}
    missing = [c for c in controls if c["source_id"] not in have]
    if not missing:
        return
    tags = {tracking.ROLE: "control", tracking.CONTROL_KEY: split, **tracking.provenance_tags()}
    if parent:
        tags[tracking.MLFLOW_PARENT] = parent
    run_id = client.create_run(exp_id, run_name=f"{run_name} (+{len(missing)})", tags=tags).info.run_id
    client.log_param(run_id, "compressor", "none (FullCache control)")
    client.log_metric(run_id, "n_sources", len(missing))
    client.log_text(run_id, dumps(missing), "controls.jsonl")
    client.set_terminated(run_id, "FINISHED")
