"""The kvpress presets (``+experiment=kvpress/longbench`` ...): kvpress's evaluate.sh grid over each
benchmark's subsets, and a sweep of one checked cell by cell on a local copy."""

from __future__ import annotations

import pytest

from kvx.tasks.kvpress.infinitebench import SUBSETS as INFINITEBENCH
from kvx.tasks.kvpress.longbench_metrics import E_TASKS, METRIC
from kvx.testing.cli import composed, plan

# kvpress's evaluation/evaluate.sh
PRESSES = ["expected_attention", "knorm", "streaming_llm", "snapkv"]
RATIOS = [0.1, 0.25, 0.5]
SUBSETS = {
    "longbench": list(METRIC),
    "longbench_e": list(E_TASKS),
    "longbench_v2": None,
    "loogle": ["shortdep_qa", "longdep_qa", "shortdep_cloze", "longdep_summarization"],
    "infinitebench": [s for s in INFINITEBENCH if s != "math_calc"],  # its budget: 30,020 tokens
}
SIZES = {"longbench": 150, "longbench_e": 150, "longbench_v2": 503, "loogle": 500, "infinitebench": 189}


@pytest.mark.parametrize("name", SUBSETS)
def test_each_preset_composes_to_evaluate_sh_over_the_subsets(name: str) -> None:
    cfg = composed(f"+experiment=kvpress/{name}", return_hydra=True)
    given = dict(cfg.hydra.sweeper.params)
    subsets = given.get("task.subset")
    expected = SUBSETS[name]
    assert (sorted(subsets.split(",")) if subsets else None) == (sorted(expected) if expected else None)
    assert given["press"].split(",") == PRESSES
    assert [float(r) for r in given["ratio"].split(",")] == RATIOS
    assert (cfg.n_sources, cfg.max_new_tokens, list(cfg.diagnostics)) == (SIZES[name], None, [])
    assert str(cfg.hydra.mode) == "RunMode.MULTIRUN"


def test_a_preset_sweep_is_checked_on_a_local_copy(tmp_path) -> None:
    import datasets

    for task, budget in (("narrativeqa", 148), ("hotpotqa", 52)):
        rows = {
            "context": ["Story: the hero goes to Paris.\n\n"] * 2,
            "question": ["Question: where?\n\n"] * 2,
            "answer_prefix": ["Answer:"] * 2,
            "answers": [["Paris"]] * 2,
            "all_classes": [None] * 2,
            "length": [10, 12],
            "task": [task] * 2,
            "max_new_tokens": [budget] * 2,
        }
        datasets.Dataset.from_dict(rows).save_to_disk(str(tmp_path / "LongBench" / task))
    args = ["+experiment=kvpress/longbench", f"task.path={tmp_path / 'LongBench'}", "reader=tiny"]
    (sweep,) = plan(*args, "task.subset=narrativeqa,hotpotqa", "press=knorm", "ratio=0.25,0.5", "n_sources=2")
    assert len(sweep["cells"]) == 4
