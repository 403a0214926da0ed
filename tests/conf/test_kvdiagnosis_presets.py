"""The KVDiagnosis RULER presets (``+experiment=kvdiagnosis/ruler8k``, ``ruler16k``): RULER's 11
subtasks x the paper's eight methods x three tiers, each job checked before anything runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvx.compressors.hqq import RATIO_TO_BITS
from kvx.core.registry import registry
from kvx.testing.cli import composed, plan

# NVIDIA/RULER scripts/synthetic.yaml: the 11 subtasks the KVDiagnosis RULER workloads run (the
# release's src/kvcachebench/schema.py TASKS)
SUBTASKS = [
    "ruler_niah_single_1",
    "ruler_niah_single_2",
    "ruler_niah_single_3",
    "ruler_niah_multikey_1",
    "ruler_niah_multikey_2",
    "ruler_niah_multikey_3",
    "ruler_niah_multivalue",
    "ruler_niah_multiquery",
    "ruler_vt",
    "ruler_cwe",
    "ruler_fwe",
]
# the paper's Table 7: StreamingLLM, SnapKV, TOVA, KeyDiff, ThinK, ChunkKV, AdaKV via kvpress and
# QuantizedCache (HQQ)
#: Table 7's methods; ChunkKV is the release's ChunkKVPress_Knorm (kvpress's chunkkv is over SnapKV)
METHODS = ["streaming_llm", "snapkv", "tova", "keydiff", "adakv", "think", "chunkkv_knorm", "hqq"]
TIERS = [0.25, 0.5, 0.75]  # kvpress ratio removed: the 75/50/25% retained labels
PRESETS = {"kvdiagnosis/ruler8k": 8192, "kvdiagnosis/ruler16k": 16384}


@pytest.mark.parametrize(("name", "length"), PRESETS.items())
def test_each_ruler_preset_composes_to_the_papers_grid(name: str, length: int) -> None:
    cfg = composed(f"+experiment={name}", return_hydra=True)
    given = dict(cfg.hydra.sweeper.params)
    assert given["task"].split(",") == SUBTASKS
    assert given["press"].split(",") == METHODS
    assert [float(r) for r in given["ratio"].split(",")] == TIERS
    assert (cfg.n_sources, cfg.context_tokens, cfg.max_new_tokens) == (100, length, None)
    assert list(cfg.diagnostics) == ["coverage", "likelihood", "decoding", "attention"]
    assert str(cfg.hydra.mode) == "RunMode.MULTIRUN"


def test_hqq_reads_the_three_tiers_as_its_bit_widths() -> None:
    """One sweep serves all eight methods: HQQ turns the same ratios into 8/4/2 bits (Table 7)."""
    assert [RATIO_TO_BITS[r] for r in TIERS] == [8, 4, 2]


def test_every_subtask_is_registered_and_sizes_a_small_prompt() -> None:
    def count(text: str) -> int:  # the tiny reader's tokenizer: one token per byte
        return len(text.encode())

    for name in SUBTASKS:
        task = registry("task").get(name)()
        source = task.sources(1, 0, 2048, count)[0]  # bytes: RULER's examples take ~1900 of them
        assert count(f"{source.context}\n{source.question}") <= 2048
        assert source.evidence, name  # every family has evidence spans (coverage, EAR)


@pytest.mark.slow
def test_a_small_ruler_preset_run_passes_preflight_for_every_subtask(tmp_path: Path) -> None:
    """Every job of the preset, on the tiny reader at a small size with one press, is composed and
    checked (each subtask's ``validate()``, the context size against its minimum); ruler16k differs
    from it only in ``context_tokens``, set here."""
    given = [
        "+experiment=kvdiagnosis/ruler8k",
        "reader=tiny",
        "n_sources=1",
        "context_tokens=2048",  # the shortest prompt of ruler_cwe has 1880 tokens on the tiny reader
        "press=snapkv",
    ]
    (sweep,) = plan(*given, f"outputs_dir={tmp_path}")
    assert len(sweep["cells"]) == len(SUBTASKS) * len(TIERS)
    (job,) = sweep["jobs"]
    (grouped,) = [a for a in job if a.startswith("cells=")]
    assert len(json.loads(grouped.partition("=")[2].strip("'"))) == len(SUBTASKS) * len(TIERS)
