"""A RAG reader panel's inputs and audit: a miniature HotpotQA file for ``task=hotpotqa`` and the
aggregate's ``audit_panel`` table of what a sweep over it wrote."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from kvx.aggregate.__main__ import main


def hotpot_file(folder: Path) -> str:
    """Eight HotpotQA rows of ten passages each (the answer in passage 3) as ``hotpot_dev.json`` in
    ``folder``; its path, for ``task.path``."""
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


def audit_panel(folder: Path, out: Path) -> pd.DataFrame:
    """``python -m kvx.aggregate`` (in-process, 50 splits and bootstrap draws) of the store a sweep in
    ``folder`` wrote, into ``out``; its ``audit_panel`` table."""
    uri = f"sqlite:///{folder / 'outputs' / 'mlflow.db'}"
    args = ["--tracking-uri", uri, "--out", str(out), "--no-log", "--quiet", "--no-plots"]
    assert main([*args, "--boot", "50", "--splits", "50"]) == 0
    return pd.read_csv(out / "audit_panel.csv")
