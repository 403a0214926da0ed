"""Synthetic, schema-valid record sets: for the aggregate's tests and its benchmark.

Records look like a real sweep's (FullCache partner, transitions, diagnostics with risk
declarations, categories, intervention rows, token ids), with failure risk tied to the
diagnostics so separation is non-trivial. ``log_sweep`` writes them into an MLflow store the way
``python -m kvx`` does: a sweep run, one cell run per cell, one control run per control group.
"""

from __future__ import annotations

import gzip
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kvx.core.identity import digest
from kvx.core.records import CC, CW, ERROR, SUPPORTED, UNSUPPORTED, Answer, Record, cell_metrics, dumps
from kvx.diagnostics.attention_access import Attention
from kvx.diagnostics.cache_coverage import Coverage
from kvx.diagnostics.categories import categorize, category_row
from kvx.diagnostics.likelihood import Likelihood
from kvx.stores import tracking

N_CONTEXT, N_QUESTION = 1000, 40  # tokens of every synthetic prompt
RISK = {
    name: cls.risk
    for name, cls in (("coverage", Coverage), ("likelihood", Likelihood), ("attention", Attention))
}


@dataclass(frozen=True)
class Grid:
    tasks: tuple[str, ...] = ("ruler_niah_single",)
    readers: tuple[str, ...] = ("smollm2",)
    compressors: tuple[str, ...] = ("snapkv", "tova")
    ratios: tuple[float, ...] = (0.25, 0.5)
    n_sources: int = 10
    seed: int = 0
    diagnostics: bool = True
    intervention: bool = True
    #: (compressor, ratio) cells the compressor cannot run: every record unsupported (ThinK at 25% in
    #: KVDiagnosis Table 11)
    unsupported: tuple[tuple[str, float], ...] = ()
    error_rate: float = 0.0  # share of each cell's sources whose compressed run failed with an error


def _hash(*parts: object) -> str:
    return hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()


def _rng(*parts: object) -> np.random.Generator:
    """A stream of its own, so adding draws from it leaves every other synthetic value unchanged."""
    return np.random.default_rng(int(_hash(*parts)[:8], 16))


def _answer(correct: bool, rng: np.random.Generator) -> Answer:
    tokens = rng.integers(0, 49152, 24).tolist()
    output = "The special magic number is 4963732." if correct else f"I think it is {int(rng.integers(1e6))}."
    score = 1.0 if correct else float(rng.choice([0.0, 0.5]))
    return Answer(output, output.lower(), score, correct, tokens, "eos")


#: KV bytes per token of a SmolLM2-135M-like reader: K and V x 30 layers x 3 KV heads x 64 dims x 2 bytes
BYTES_PER_TOKEN = 2 * 30 * 3 * 64 * 2
#: compressors that mask or zero what they drop, keeping it in memory: the share of each held byte
#: they can mask (ThinK zeroes key channels only, AdaKV masks whole positions per head)
MASKING = {"think": 0.5, "adakv": 1.0}


def _full_cost(rng: np.random.Generator, tokens: int) -> dict[str, Any]:
    return {
        "kv_bytes": tokens * BYTES_PER_TOKEN,
        "question_ms": float(rng.gamma(20.0, 1.8)),
        "decode_ms_per_token": float(rng.gamma(30.0, 0.7)),
        "new_tokens": 24,
        "decode_rows": int(rng.choice([1, 4])),
    }


def _compressed_cost(rng: np.random.Generator, compressor: str, ratio: float, context: int) -> dict[str, Any]:
    """Token-dropping compressors hold the share of the context they keep; masking ones hold every
    token (the question is fed after the cache, as in a context-only run)."""
    masking = MASKING.get(compressor)
    kept = context if masking is not None else round(ratio * context)
    return {
        "kv_bytes": kept * BYTES_PER_TOKEN,
        "masked_share": 0.0 if masking is None else masking * (1 - ratio),
        "compress_s": float(rng.gamma(10.0, 0.004)),
        "prefill_s": float(rng.gamma(20.0, 0.008)),
        "question_ms": float(rng.gamma(20.0, 1.5)),
        "decode_ms_per_token": float(rng.gamma(30.0, 0.6)),
        "new_tokens": 24,
        "decode_rows": int(rng.choice([1, 4])),
    }


def split_key(grid: Grid, task: str, reader: str) -> str:
    return _hash("split", task, reader, grid.seed, grid.n_sources)


def _diagnostics(
    failed: bool, structural: bool, rng: np.random.Generator, intervention: bool, cw: bool, cc: bool
):
    shift = 1.0 if failed else 0.0
    ecov = float(np.clip(rng.normal(0.85 - 0.5 * shift, 0.2), 0, 1))
    err = float(np.clip(ecov + rng.normal(0, 0.05), 0, 1))
    dnll = float(rng.gamma(1.0 + 2 * shift, 0.5))
    nll_f = float(rng.gamma(2.0, 0.2))
    out = {
        "coverage": {"status": "structural", "values": {}, "reason": "", "seconds": 0.001}
        if structural
        else {
            "status": "measured",
            "values": {"err": err, "ecov": ecov, "n_slots": 60, "n_spans": 1},
            "reason": "",
            "seconds": 0.001,
        },
        "likelihood": {
            "status": "measured",
            "reason": "",
            "seconds": 0.01,
            "values": {
                "nll_full": nll_f,
                "nll_comp": nll_f + dnll,
                "delta_nll": dnll,
                "gpr": float(np.exp(-dnll)),
                "kl": float(rng.gamma(1 + shift, 0.3)),
                "top50": float(np.clip(rng.normal(0.9 - 0.3 * shift, 0.1), 0, 1)),
                "rank_shift_first": int(rng.poisson(3 * shift)),
                "rank_shift_mean": float(rng.gamma(1 + shift, 1.0)),
                "n_tokens": 8,
            },
        },
        "attention": {
            "status": "measured",
            "reason": "",
            "seconds": 0.2,
            "values": {
                "eam_comp": float(rng.uniform(0.02, 0.2)),
                "eam_full": 0.15,
                "ear": float(rng.uniform(0.2, 1.2) - 0.3 * shift),
                "neae_comp": float(rng.uniform(0.5, 3)),
                "neae_full": 2.0,
            },
        },
    }
    for name, risk in RISK.items():
        out[name]["risk"] = dict(risk)
    if intervention and (cw or cc):
        ev, sham = bool(rng.random() < 0.3), bool(rng.random() < 0.08)
        values = {"boost": 4.0, "boosted_rows": 12}
        if cw:
            values |= {"reproduced": bool(rng.random() < 0.9)}
            values |= {
                "repaired_evidence": values["reproduced"] and ev,
                "repaired_sham": values["reproduced"] and sham,
            }
        else:
            values |= {
                "degraded_evidence": bool(rng.random() < 0.05),
                "degraded_sham": bool(rng.random() < 0.05),
            }
        out["intervention"] = {"status": "measured", "values": values, "reason": "", "seconds": 3.0}
    return out


def ratio_record(
    task: str, source_id: str, reader: str, compressor: str, ratio: float, seed: int = 0, **fields: Any
) -> Record:
    """A record of a ratio cell with its key, setting and cell identity filled the way the app fills
    them (revision ``rev1``); ``fields`` gives or overrides the other ``Record`` fields."""
    cell = {
        "task": task,
        "reader": reader,
        "press": compressor,
        "setting.kind": "ratio",
        "setting.value": ratio,
    }
    base: dict[str, Any] = {
        "key": f"{task}/{source_id}/{reader}@rev1/{compressor}/ratio={ratio}/seed={seed}",
        "status": SUPPORTED,
        "reason": "",
        "task": task,
        "source_id": source_id,
        "reader": reader,
        "model_revision": "rev1",
        "compressor": compressor,
        "seed": seed,
        "setting": {
            "kind": "ratio",
            "value": ratio,
            "ratio": ratio,
            "retained_share": ratio,
            "method_parameter": {},
        },
        "cell": {"id": digest(cell | {"seed": seed}), "fields": cell | {"seed": seed}},
    }
    return Record(**(base | fields))


def cell_records(grid: Grid, task: str, reader: str, compressor: str, ratio: float) -> list[dict]:
    """The records of one cell; FullCache answers depend only on (task, reader, source)."""
    out = []
    structural = compressor in ("think", "hqq")
    difficulty = {c: 0.1 * (i + 1) for i, c in enumerate(grid.compressors)}[compressor]
    for i in range(grid.n_sources):
        source_id = f"{task}_{i:06d}"
        full_rng = np.random.default_rng(int(_hash(task, reader, i, grid.seed)[:8], 16))
        full_ok = bool(full_rng.random() < (0.85 if reader == grid.readers[0] else 0.7))
        full = _answer(full_ok, full_rng)
        full.cost = _full_cost(_rng("cost", task, reader, i, grid.seed), N_CONTEXT)
        rng = np.random.default_rng(int(_hash(task, reader, compressor, ratio, i, grid.seed)[:8], 16))
        comp_ok = bool(rng.random() > difficulty + (0.5 - ratio)) if full_ok else bool(rng.random() < 0.1)
        comp = _answer(comp_ok, rng)
        cost_rng = _rng("cost", task, reader, compressor, ratio, i, grid.seed)
        comp.cost = _compressed_cost(cost_rng, compressor, ratio, N_CONTEXT)
        record = ratio_record(
            task,
            source_id,
            reader,
            compressor,
            ratio,
            grid.seed,
            references=["4963732"],
            prompt_hash=_hash("prompt", task, reader, i, grid.seed),
            n_context_tokens=N_CONTEXT,
            n_question_tokens=N_QUESTION,
            config_hash=_hash("cell", task, reader, compressor, ratio)[:16],
            versions={"kvx": "0.1.0"},
            query_aware=False,
            split=split_key(grid, task, reader),
            seconds=1.0,
            task_family="ruler" if task.startswith("ruler_") else None,
        )
        if (compressor, ratio) in grid.unsupported:
            record.full = full
            record.fail(UNSUPPORTED, f"{compressor} cannot keep {1 - ratio:.0%} of the cache")
            out.append(record.to_dict())
            continue
        if grid.error_rate and rng.random() < grid.error_rate:
            record.full = full
            record.fail(ERROR, "RuntimeError: CUDA out of memory (synthetic)")
            out.append(record.to_dict())
            continue
        record.pair(full, comp)
        cw, cc = record.transition == CW, record.transition == CC
        if grid.diagnostics:
            record.diagnostics = _diagnostics(cw, structural, rng, grid.intervention, cw, cc)
            if cw:
                record.category = categorize(category_row(record.diagnostics))
        out.append(record.to_dict())
    return out


def cells(grid: Grid) -> Iterable[tuple[tuple[str, str, str, float], list[dict]]]:
    for task in grid.tasks:
        for reader in grid.readers:
            for compressor in grid.compressors:
                for ratio in grid.ratios:
                    yield (
                        (task, reader, compressor, ratio),
                        cell_records(grid, task, reader, compressor, ratio),
                    )


def controls(records: list[dict]) -> list[dict]:
    return [
        {"source_id": r["source_id"], "prompt_hash": r["prompt_hash"], **r["full"]}
        for r in records
        if r["full"]
    ]


#: record fields schema 2 added (kvx.core.upgrade): a schema-1 record has none of them
ADDED_IN_2 = ("cell", "transform", "reader_family", "prompt_format", "task_family", "provenance")


def as_schema1(record: dict[str, Any]) -> dict[str, Any]:
    """The record as kvx 0.1 wrote it (schema 1): the benchmark's study by an earlier kvx, kept faithful by
    a test against records kvx 0.1's own generator and engine wrote (tests/fixtures/schema1). Schema 1 had
    no setting kind, cell identity or costs, and ran nothing for an unsupported setting (no FullCache
    answer in its record)."""
    out = {k: v for k, v in record.items() if k not in ADDED_IN_2}
    out["schema_version"] = "1"
    out["setting"] = {k: v for k, v in record["setting"].items() if k not in ("kind", "value")}
    for side in ("full", "compressed"):
        if out.get(side):
            out[side] = {k: v for k, v in out[side].items() if k != "cost"}
    if out["status"] == UNSUPPORTED:
        out["full"] = None
    return out


def write_records(root: Path, grid: Grid, compresslevel: int = 1, schema1: bool = False) -> int:
    """Write the grid as a record directory of ``.jsonl.gz`` files (one per cell) with a control ledger per
    control group, streaming cell by cell; returns the number of records written. ``schema1``: the records
    as kvx 0.1 wrote them (``as_schema1``), which the aggregate upgrades on read."""
    root.mkdir(parents=True, exist_ok=True)
    written, ledgers = 0, set()
    for (task, reader, compressor, ratio), records in cells(grid):
        if schema1:
            records = [as_schema1(r) for r in records]
        name = f"{task}__{reader}__{compressor}__{ratio}.jsonl.gz"
        with gzip.open(root / name, "wt", encoding="utf-8", compresslevel=compresslevel) as fh:
            fh.write(dumps(records))
        written += len(records)
        split = records[0]["split"]
        if split not in ledgers:
            ledgers.add(split)
            with gzip.open(root / f"{split}.controls.jsonl.gz", "wt", encoding="utf-8") as fh:
                fh.write(dumps(controls(records)))
    return written


def log_cell(
    client: Any,
    exp_id: str,
    name: str,
    records: list[dict],
    sweep: str | None = None,
    status: str = "FINISHED",
    metrics: dict[str, float] | None = None,
) -> str:
    """One cell run as ``python -m kvx`` logs it (its sweep's plan tag first, when it has a sweep): the
    records, the counts they give (or ``metrics``), ended ``status``; returns its id."""
    from mlflow.entities import Metric

    tags = {
        tracking.ROLE: "cell",
        tracking.CELL_ID: records[0]["cell"]["id"],
        tracking.CONFIG_HASH: records[0]["config_hash"],
    }
    if sweep is not None:
        tags[tracking.MLFLOW_PARENT] = sweep
    run_id = client.create_run(exp_id, run_name=name, tags=tags).info.run_id
    logged = cell_metrics(records) if metrics is None else metrics
    client.log_batch(run_id, metrics=[Metric(k, float(v), 0, 0) for k, v in logged.items()])
    client.log_text(run_id, dumps(records), "records.jsonl")
    client.set_terminated(run_id, status)
    return run_id


def log_controls(client: Any, exp_id: str, name: str, records: list[dict], sweep: str | None = None) -> str:
    """A control group's FullCache ledger run, from its records' answers; returns its id."""
    tags = {tracking.ROLE: "control", tracking.CONTROL_KEY: records[0]["split"]}
    if sweep is not None:
        tags[tracking.MLFLOW_PARENT] = sweep
    run_id = client.create_run(exp_id, run_name=name, tags=tags).info.run_id
    client.log_text(run_id, dumps(controls(records)), "controls.jsonl")
    client.set_terminated(run_id, "FINISHED")
    return run_id


def log_sweep(uri: str, grid: Grid, experiment: str = "kvx", plan: bool = True) -> str:
    """Write the grid into an MLflow store like a ``python -m kvx -m`` sweep; returns the sweep id.
    ``plan=False``: as an earlier kvx logged it, without the cells its jobs are (``kvx.plan.*``)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    exp_id = exp.experiment_id if exp else client.create_experiment(experiment)
    n_jobs = len(grid.tasks) * len(grid.readers) * len(grid.compressors) * len(grid.ratios)
    tags = {tracking.ROLE: "sweep", tracking.PLANNED_JOBS: str(n_jobs)}
    sweep = client.create_run(exp_id, run_name="sweep synthetic", tags=tags).info.run_id
    logged: set[str] = set()
    for (task, reader, compressor, ratio), records in cells(grid):
        name = f"{task}|{reader}|{compressor}@{ratio}"
        if plan:
            client.set_tag(sweep, f"{tracking.PLAN}{records[0]['cell']['id']}", name)
        log_cell(client, exp_id, name, records, sweep)
        if records[0]["split"] not in logged:
            logged.add(records[0]["split"])
            log_controls(client, exp_id, f"{task}|{reader}|FullCache", records, sweep)
    client.set_terminated(sweep, "FINISHED")
    return sweep
