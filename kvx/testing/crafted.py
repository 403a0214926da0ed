"""Records crafted by hand for tests with hand-computed answers, and the aggregate run on them.

``rec`` builds one record through ``Record`` (so it is schema-valid the way the app's are), ``cov``
its coverage diagnostic and ``panel`` a reader panel of them; ``write`` puts records in a folder as
the app writes a cell, ``external`` and ``write_gz`` as an importer writes a ledger kvx did not
write. ``run`` aggregates a folder with ``FAST`` options: few splits and bootstrap draws, one seed,
so a test is quick and its numbers repeat.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pandas as pd

from kvx.aggregate.options import Options
from kvx.aggregate.read.sources import DirectorySource
from kvx.aggregate.run import Result, analyse
from kvx.core.records import SUPPORTED, UNSUPPORTED, Answer, dumps, validate
from kvx.testing.synthetic import ratio_record

#: the aggregate's options for a test: few splits and bootstrap draws, a fixed seed, no progress bar
FAST = Options(n_splits=200, n_boot=200, seed=1, progress=False)
#: options for reading in one process or in two (``one_file``'s parts): their tables must agree
SERIAL = Options(n_splits=50, n_boot=50, seed=1, progress=False, workers=1)
PARALLEL = Options(n_splits=50, n_boot=50, seed=1, progress=False, workers=2)

#: the fields an importer's ledger lacks, each with its reason (``external`` marks them unknown)
UNKNOWN = {
    "prompt_hash": "the release hashes prompts with a 16-hex digest, not sha256",
    "seed": "the release records no seed (greedy decoding)",
    "full.token_ids": "the release keeps decoded text only",
}


def answer(ok: bool, score: float | None = None) -> Answer:
    """A yes/no answer, right or wrong; its score 1 or 0 unless given."""
    text = "yes" if ok else "no"
    return Answer(text, text, (1.0 if ok else 0.0) if score is None else score, ok, [1], "eos")


def rec(
    task: str = "t",
    source: str = "s0",
    reader: str = "r",
    comp: str = "snapkv",
    ratio: float = 0.5,
    full: bool = True,
    ok: bool = True,
    status: str = SUPPORTED,
    score: float | None = None,
    diags: dict | None = None,
    category: str | None = None,
    text_hash: str | None = None,
) -> dict:
    """A record written the way the app writes it (through ``Record``), for crafted inputs."""
    r = ratio_record(
        task,
        source,
        reader,
        comp,
        ratio,
        references=["yes"],
        split=f"{task}|{reader}",
        prompt_hash=f"{hash((task, source, reader)) % 16**8:064x}",
        n_context_tokens=10,
        n_question_tokens=2,
        config_hash="h",
        versions={},
        full=None if status == UNSUPPORTED else answer(full),
        diagnostics=diags,
        category=None if category is None else {"category": category, "matched": [category]},
        compressed_text_sha256=text_hash,
    )
    if status == SUPPORTED:
        r.pair(r.full, answer(ok, score))
    else:
        r.fail(status, "why")
    return r.to_dict()


def cov(ecov: float | None) -> dict:
    """A record's diagnostics holding only coverage: ERR and ECov both ``ecov`` (risk "lower"), or not
    applicable when ``ecov`` is None."""
    if ecov is None:
        return {
            "coverage": {
                "status": "not_applicable",
                "values": {},
                "reason": "no map",
                "seconds": 0.0,
                "risk": {"err": "lower", "ecov": "lower"},
            }
        }
    return {
        "coverage": {
            "status": "measured",
            "values": {"err": ecov, "ecov": ecov},
            "reason": "",
            "seconds": 0.0,
            "risk": {"err": "lower", "ecov": "lower"},
        }
    }


def panel(readers: dict[str, tuple[list[int], list[int]]], **kw) -> list[dict]:
    """A reader panel: per reader, (FullCache right, compressed right) of sources s0, s1, ...; ``kw``
    goes to every ``rec``."""
    out = []
    for reader, (raw, comp) in readers.items():
        out += [
            rec(source=f"s{i}", reader=reader, full=bool(f), ok=bool(c), **kw)
            for i, (f, c) in enumerate(zip(raw, comp, strict=True))
        ]
    return out


def write(folder: Path, records: list[dict], name: str = "cell.jsonl") -> Path:
    """``records``, each validated first, as the record file ``name`` in ``folder`` (made if absent);
    the folder, to read."""
    folder.mkdir(parents=True, exist_ok=True)
    for r in records:
        validate(r)
    (folder / name).write_text(dumps(records))
    return folder


def run(folder: Path, options: Options = FAST) -> Result:
    """The aggregate of the records in ``folder``."""
    return analyse(DirectorySource([folder]), options)


def problems(result: Result, check: str) -> pd.DataFrame:
    """The rows of a result's problems table found by ``check``."""
    p = result.tables["problems"]
    return p[p["check"] == check]


def external(record: dict) -> dict:
    """The record as an importer writes it: fields the ledger lacks null, each with its reason."""
    record = dict(record, prompt_hash=None, seed=None)
    record["full"] = dict(record["full"], token_ids=None)
    record["provenance"] = {"origin": "external", "source": "paper-release:v1", "unknown": dict(UNKNOWN)}
    return record


def write_gz(folder: Path, records: list[dict], name: str) -> None:
    """``records``, each validated first, as the gzipped record file ``name`` in ``folder``, the way an
    importer writes a task."""
    folder.mkdir(parents=True, exist_ok=True)
    for r in records:
        validate(r)
    with gzip.open(folder / name, "wt", encoding="utf-8") as fh:
        fh.write(dumps(records))


def one_file(tmp_path: Path) -> tuple[Path, list[dict]]:
    """12 records (4 sources x 3 cells) in one .jsonl.gz, as an importer writes a task."""
    rows = [
        external(rec(task="t", source=f"s{i}", comp=comp, full=i != 3, ok=(i + k) % 3 != 0))
        for i in range(4)
        for k, comp in enumerate(("snapkv", "tova", "keydiff"))
    ]
    write_gz(tmp_path / "r", rows, "t.jsonl.gz")
    return tmp_path / "r" / "t.jsonl.gz", rows
