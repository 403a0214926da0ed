"""The example plugin's ten-line text transform (keep the first and last segment) in a real sweep,
combined with a KV press in one cell, then aggregated: records say what the transform kept."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from kvx.testing.cli import SOLO_LEASE

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
HOTPOT = [
    {
        "_id": f"q{i}",
        "question": f"What does item {i} hold?",
        "answer": f"value{i}",
        "supporting_facts": [["Last", 0], ["Middle", 0]],
        "context": [
            ["First", ["Nothing here."]],
            ["Middle", [f"Item {i} is filed here."]],
            ["Last", [f"Item {i} holds value{i}."]],
        ],
    }
    for i in range(2)
]


@pytest.fixture(scope="module")
def plugin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("plugin")
    src = root / "src"
    shutil.copytree(
        REPO / "plugins" / "kvx-plugin-example", src, ignore=shutil.ignore_patterns("build", "*.egg-info")
    )
    target = root / "site"
    pip = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--no-deps",
        "--no-build-isolation",
        "--quiet",
        "--no-index",
    ]
    done = subprocess.run([*pip, "--target", str(target), str(src)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return target


def run(cwd: Path, plugin: Path, module: str, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in {"MLFLOW_TRACKING_URI", "KVX_DISABLE_PLUGINS"}}
    env |= {"PYTHONPATH": str(plugin), "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=cwd, env=env, capture_output=True, text=True
    )


def test_keep_ends_transform_runs_in_a_sweep_with_a_kv_press(tmp_path, blank_store, plugin):
    blank_store(tmp_path)
    data = tmp_path / "hotpot.json"
    data.write_text(json.dumps(HOTPOT))
    args = ["-m", "task=hotpotqa", f"task.path={data}", "transform=none,keep_ends", "press=none,tova"]
    args += ["reader=tiny", "n_sources=2", "max_new_tokens=3", "progress=false", *SOLO_LEASE]
    done = run(tmp_path, plugin, "kvx", *args)
    assert done.returncode == 0, done.stderr[-3000:]
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}")
    exp = client.get_experiment_by_name("kvx").experiment_id
    cells = client.search_runs([exp], "tags.`kvx.role` = 'cell'")
    assert len(cells) == 4
    records = []
    for r in cells:
        path = client.download_artifacts(r.info.run_id, "records.jsonl", str(tmp_path / r.info.run_id))
        records += [json.loads(line) for line in Path(path).read_text().splitlines()]
    kept = [r for r in records if r["cell"]["fields"]["transform"] == "kvx-plugin-example:keep_ends"]
    assert len(kept) == 4 and all(r["status"] == "supported" for r in records)
    for r in kept:
        t = r["transform"]
        assert t["kept_segment_ids"] == ["preamble", "doc3"] and t["n_segments"] == 4
        assert t["evidence_kept"] == 1 and t["evidence_total"] == 2  # the Middle fact went with doc2
        assert 0 < t["retained_token_share"] < 1 and r["compressed_text_sha256"] == t["context_sha256"]
        assert r["diagnostics"]["coverage"]["status"] == "not_applicable"  # two prompts: no cache pair
        assert r["diagnostics"]["decoding"]["status"] == "measured"
    plain = [r for r in records if r["cell"]["fields"]["transform"] == "none"]
    assert all("transform" not in r and "compressed_text_sha256" not in r for r in plain)
    # the FullCache control is the untransformed context, shared by every cell of a source
    assert len({(r["source_id"], json.dumps(r["full"])) for r in records}) == 2
    done = run(tmp_path, plugin, "kvx.aggregate", "--no-plots", "--no-log", "--out", str(tmp_path / "agg"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert pd.read_csv(tmp_path / "agg" / "problems.csv").empty
    matrix = pd.read_csv(tmp_path / "agg" / "matrix.csv", keep_default_na=False)
    assert sorted(matrix["compressor"]) == [
        "FullCache",
        "none[transform=kvx-plugin-example:keep_ends]",
        "none[transform=none]",
        "tova[transform=kvx-plugin-example:keep_ends]",
        "tova[transform=none]",
    ]
    assert "transform" in matrix.columns


def test_turn_selector_plugin_runs_on_the_dialogue_probes(tmp_path, blank_store, plugin):
    """A third-party turn selector is one entry point: ``turn_selector=longest_turns`` after pip install."""
    blank_store(tmp_path)
    args = ["-m", "task=tpbench_p2", "turn_selector=longest_turns,recency", "turn_fraction=0.5", "press=none"]
    args += ["reader=tiny", "n_sources=3", "max_new_tokens=3", "progress=false", "diagnostics=[]"]
    args += SOLO_LEASE
    done = run(tmp_path, plugin, "kvx", *args)
    assert done.returncode == 0, done.stderr[-3000:]
    records = []
    for path in (tmp_path / "outputs" / "mlartifacts").rglob("records.jsonl"):
        records += [json.loads(line) for line in path.read_text().splitlines()]
    longest = [r for r in records if r["transform"]["name"] == "turns:kvx-plugin-example:longest_turns"]
    assert longest and all(r["status"] == "supported" for r in records)
    for r in longest:  # floor(n / 2) turns, the header kept
        n = r["compressed"]["details"]["turns_total"]
        assert r["compressed"]["details"]["turns_kept"] == max(1, n // 2)
        assert r["transform"]["kept_segment_ids"][0] == "header"
