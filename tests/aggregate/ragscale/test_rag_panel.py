"""A RAG reader panel end to end: ``python -m kvx -m`` over readers and text compressors writes
records whose artifacts were computed once per row and replayed to every reader; ``python -m
kvx.aggregate`` audits the panel, and refuses it once one reader got a different artifact."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from kvx.testing.cli import SOLO_LEASE, run_kvx
from kvx.testing.rag_panel import audit_panel, hotpot_file

COMMON = ["press=none", "n_sources=6", "max_new_tokens=4", "diagnostics=[]", "progress=false", *SOLO_LEASE]


def sweep(folder: Path, *args: str) -> None:
    run_kvx(folder, *args, *COMMON)


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
