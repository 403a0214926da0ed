"""A RAG reader panel end to end: ``python -m kvx -m`` over readers and text compressors writes
records whose artifacts were computed once per row and replayed to every reader; ``python -m
kvx.aggregate`` audits the panel, and refuses it once one reader got a different artifact."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from helpers import SOLO_LEASE, run_kvx

from kvx.aggregate.__main__ import main

COMMON = ["press=none", "n_sources=6", "max_new_tokens=4", "diagnostics=[]", "progress=false", *SOLO_LEASE]


def hotpot_file(folder: Path) -> str:
    rows = []
    for i in range(8):
        context = [
            [f"Title {i}-{j}", [f"Fact {j} of row {i} is word{i}{j}. ", "More text."]] for j in range(10)
        ]
        rows.append(
            {
                "_id": f"r{i}",
                "question": f"What is fact 3 of row {i}?",
                "answer": f"word{i}3",
                "context": context,
                "supporting_facts": [[f"Title {i}-3", 0]],
            }
        )
    path = folder / "hotpot_dev.json"
    path.write_text(json.dumps(rows))
    return str(path)


def sweep(folder: Path, *args: str) -> None:
    run_kvx(folder, *args, *COMMON)


def audit_panel(folder: Path, out: Path) -> pd.DataFrame:
    uri = f"sqlite:///{folder / 'outputs' / 'mlflow.db'}"
    args = ["--tracking-uri", uri, "--out", str(out), "--no-log", "--quiet", "--no-plots"]
    assert main([*args, "--boot", "50", "--splits", "50"]) == 0
    return pd.read_csv(out / "audit_panel.csv")


@pytest.mark.slow
def test_a_reader_panel_gets_one_artifact_per_row_and_a_tampered_one_is_refused(
    tmp_path: Path, blank_store
) -> None:
    blank_store(tmp_path)
    data = hotpot_file(tmp_path)
    task = ["task=hotpotqa", f"task.path={data}", "reader=tiny"]
    sweep(tmp_path, *task, "reader.seed=0,1", "transform=bm25_top_k", "transform.k=3")
    artifacts = sorted((tmp_path / "outputs" / "artifacts").rglob("*.json"))
    assert len(artifacts) == 6  # once per row, not once per reader
    panel = audit_panel(tmp_path, tmp_path / "agg1")
    assert set(panel["metric"]) == {"correct", "score", "em", "f1"}
    assert (panel["n_readers"] == 2).all() and (panel["n_rows"] == 6).all()
    assert panel["evidence"].str.startswith("bm25_top_k[k=3").all()
    assert (panel["artifact_check"] == "identical text artifact").all()

    # a regenerated artifact (consistent manifest, other text) reaches only the next reader
    manifest = json.loads(artifacts[0].read_text())
    passages = [s for s in manifest["segments"] if s["role"] == "passage"]
    passages[0]["text"] += " Regenerated."
    import hashlib

    text = "\n\n".join(s["text"] for s in manifest["segments"])
    manifest["text_sha256"] = hashlib.sha256(text.encode()).hexdigest()
    artifacts[0].write_text(json.dumps(manifest))
    sweep(tmp_path, *task, "reader.seed=2", "transform=bm25_top_k", "transform.k=3")
    panel = audit_panel(tmp_path, tmp_path / "agg2")
    assert (panel["n_readers"] == 3).all()
    assert panel["artifact_check"].str.startswith("refused").all()
    assert manifest["row_id"] in panel["artifact_check"].iloc[0]
    assert pd.read_csv(tmp_path / "agg2" / "audit_readers.csv").empty
