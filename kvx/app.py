"""One Hydra job: validate the cell, skip it if already finished, run it, log it to MLflow."""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from kvx import tracking
from kvx.compressors.base import check_ratio
from kvx.config import choices, config_hash, instantiate, semantic_config
from kvx.engine import Cell, Engine
from kvx.errors import ConfigError
from kvx.readers.base import load_reader
from kvx.records import cell_metrics
from kvx.registry import RegistryError, registry

log = logging.getLogger("kvx")
_ENGINE: Engine | None = None


def engine(cfg: DictConfig) -> Engine:
    """One engine per process, so controls and captured prefills outlive a single cell."""
    global _ENGINE
    if _ENGINE is None:
        _ENGINE = Engine(Path(str(cfg.outputs_dir)), int(cfg.capture_cache_mb) * 2**20)
    return _ENGINE


def _positive_int(cfg: DictConfig, key: str) -> int:
    value = cfg[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{key}={value!r} must be a positive integer")
    return value


def build_cell(cfg: DictConfig) -> tuple[Cell, Any, dict[str, str]]:
    """Resolve and check every setting; nothing here loads a model."""
    names = choices(cfg)
    ratio = check_ratio(cfg.ratio)
    compressor = instantiate(cfg, "press")
    compressor.validate(ratio)
    reader = instantiate(cfg, "reader")
    reader.validate()
    if isinstance(cfg.seed, bool) or not isinstance(cfg.seed, int):
        raise ConfigError(f"seed={cfg.seed!r} must be an integer")
    task = instantiate(cfg, "task")
    task.validate()
    task_budget = type(task).max_new_tokens
    cell = Cell(
        task_name=names["task"],
        task=task,
        reader_name=names["reader"],
        press_name=names["press"],
        compressor=compressor,
        ratio=ratio,
        seed=cfg.seed,
        n_sources=_positive_int(cfg, "n_sources"),
        context_tokens=_positive_int(cfg, "context_tokens"),
        max_new_tokens=task_budget if cfg.max_new_tokens is None else _positive_int(cfg, "max_new_tokens"),
        query_aware=bool(cfg.query_aware),
        diagnostics=[(n, registry("diagnostic").get(n)()) for n in _names(cfg, "diagnostics")],
    )
    return cell, reader, names


def _names(cfg: DictConfig, key: str) -> list[str]:
    value = cfg.get(key) or []
    if isinstance(value, str):
        value = [value]
    try:
        return [str(v) for v in value]
    except TypeError:
        raise ConfigError(
            f"{key}={value!r} must be a list of names, e.g. {key}=[coverage,likelihood]"
        ) from None


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


def run(cfg: DictConfig) -> dict[str, float]:
    try:
        cell, reader_cfg, names = build_cell(cfg)
    except (ConfigError, RegistryError) as exc:
        print(f"kvx: {exc}", file=sys.stderr)
        sys.exit(2)
    semantic = semantic_config(cfg, names)
    chash = config_hash(semantic)
    client, exp_id = tracking.ensure_experiment(cfg)
    name = f"{cell.task_name}|{cell.reader_name}|{cell.press_name}@{cell.ratio}|seed={cell.seed}"
    done = tracking.finished_run(client, exp_id, chash)
    if done is not None and not cfg.force and not done.data.metrics.get("n_error"):
        log.info("skip %s: finished run %s has config hash %s", name, done.info.run_id, chash)
        return dict(done.data.metrics)
    if done is not None:  # forced, or errors that may be transient or fixed since: replace the run
        why = "force=true" if cfg.force else f"{done.data.metrics['n_error']:.0f} error records"
        log.info("recompute %s: replacing run %s (%s)", name, done.info.run_id, why)
        client.delete_run(done.info.run_id)
    tracking.delete_unfinished(client, exp_id, tracking.CONFIG_HASH, chash)
    tags = {tracking.ROLE: "cell", tracking.CONFIG_HASH: chash, **tracking.provenance_tags()}
    parent = _parent_run_id()
    if parent:
        tags[tracking.MLFLOW_PARENT] = parent
    run_id = client.create_run(exp_id, run_name=name, tags=tags).info.run_id
    try:
        params = tracking.flat_params("", semantic)
        items = sorted(params.items())
        for i in range(0, len(items), 90):
            client.log_batch(run_id, params=_params(items[i : i + 90]))
        reader = load_reader(names["reader"], reader_cfg)
        client.set_tag(run_id, "model_revision", reader.revision)
        eng = engine(cfg)
        before = eng.controls.computed
        records = eng.run_cell(cell, reader, chash, progress=bool(cfg.progress))
        metrics = cell_metrics(records)
        metrics["controls_computed"] = eng.controls.computed - before
        _log_cell(client, run_id, cfg, records, metrics)
        control_name = f"{cell.task_name}|{cell.reader_name}|FullCache"
        _log_control(client, exp_id, eng.split_key(cell, reader), parent, control_name, records)
        client.set_terminated(run_id, "FINISHED")
    except ConfigError as exc:
        client.set_terminated(run_id, "FAILED")
        print(f"kvx: {exc}", file=sys.stderr)
        sys.exit(2)
    except BaseException:
        client.set_terminated(run_id, "FAILED")
        raise
    log.info("%s: %s", name, json.dumps({k: round(v, 4) for k, v in metrics.items()}))
    return metrics


def _params(items: list[tuple[str, str]]) -> list[Any]:
    from mlflow.entities import Param

    return [Param(k, v) for k, v in items]


def _log_cell(client: Any, run_id: str, cfg: DictConfig, records: list[dict], metrics: dict) -> None:
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    client.log_batch(run_id, metrics=[Metric(k, float(v), now, 0) for k, v in metrics.items()])
    client.log_text(
        run_id, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), "records.jsonl"
    )
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
    client: Any, exp_id: str, split: str, parent: str | None, run_name: str, records: list[dict]
) -> None:
    """Log the control group once as its own run; later cells of the same split reuse it."""
    controls = [
        {"source_id": r["source_id"], "prompt_hash": r["prompt_hash"], **r["full"]}
        for r in records
        if r["full"]
    ]
    if not controls or tracking.finished_run_with(client, exp_id, tracking.CONTROL_KEY, split):
        return
    tracking.delete_unfinished(client, exp_id, tracking.CONTROL_KEY, split)
    tags = {tracking.ROLE: "control", tracking.CONTROL_KEY: split, **tracking.provenance_tags()}
    if parent:
        tags[tracking.MLFLOW_PARENT] = parent
    run_id = client.create_run(exp_id, run_name=run_name, tags=tags).info.run_id
    client.log_param(run_id, "compressor", "none (FullCache control)")
    client.log_metric(run_id, "full_accuracy", sum(c["correct"] for c in controls) / len(controls))
    client.log_metric(run_id, "full_mean_score", sum(c["score"] for c in controls) / len(controls))
    client.log_metric(run_id, "n_sources", len(controls))
    client.log_text(
        run_id, "".join(json.dumps(c, ensure_ascii=False) + "\n" for c in controls), "controls.jsonl"
    )
    client.set_terminated(run_id, "FINISHED")
