"""The KVDiagnosis release's Qasper and HotpotQA sources by name (``task.ids``).

Miniatures in the official layouts (HotpotQA dev, Qasper v0.3) and a miniature release ledger in the
release's form pin that the split is exactly the release's samples in the release's order; the last
test reads the real release where ``KVX_KVDIAGNOSIS_RELEASE`` points at a checkout of
ChosenQC/KVDiagnosis.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

from kvx.core.errors import ConfigError
from kvx.tasks.hotpotqa import HotpotQA
from kvx.tasks.kvdiagnosis_ids import HOTPOTQA, LEDGER, hotpotqa_ids, release_sources
from kvx.tasks.qasper import Qasper
from tests.tasks.test_qasper import PAPERS, answer

RELEASE = os.environ.get("KVX_KVDIAGNOSIS_RELEASE", "")


def count(text: str) -> int:
    return len(text.split())


def ledger(folder: Path, rows: list[tuple[str, str, str, str]]) -> Path:
    """A release folder whose ledger holds (dataset, sample_id, reference, prompt_hash) rows."""
    path = folder / LEDGER
    path.parent.mkdir(parents=True)
    lines = [
        json.dumps({"dataset": d, "sample_id": s, "reference_answer": [r], "prompt_hash": h})
        for d, s, r, h in rows
    ]
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    return folder


def hotpot_file(tmp_path: Path, rows: list[tuple[str, str]]) -> str:
    """A HotpotQA dev file (official layout) of (``_id``, answer) rows, plus a decoy."""
    data = [
        {"_id": i, "question": f"q {i}?", "answer": a, "context": [["T", [" s."]]], "supporting_facts": []}
        for i, a in [("decoy", "yes"), *rows]
    ]
    path = tmp_path / "hotpot_dev_distractor_v1.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_hotpotqa_selects_the_release_samples_in_the_release_order(tmp_path):
    # the release's hotpotqa_000000/1/2 (references Jahseh Dwayne Onfroy, animation, Afghanistan)
    rows = [(HOTPOTQA[2], "Afghanistan"), (HOTPOTQA[0], "Jahseh Dwayne Onfroy"), (HOTPOTQA[1], "animation")]
    path = hotpot_file(tmp_path, rows)
    listed = HotpotQA(path=path, ids=["hotpotqa_000001", "hotpotqa_000002", "hotpotqa_000000"])
    listed.validate()
    assert [s.answers[0] for s in listed.sources(3, 0, 0, count)] == [
        "animation",
        "Afghanistan",
        "Jahseh Dwayne Onfroy",
    ]
    release = ledger(
        tmp_path / "release",
        [
            ("hotpotqa", "hotpotqa_000000", "Jahseh Dwayne Onfroy", "h0"),
            ("hotpotqa", "hotpotqa_000001", "animation", "h1"),
            ("qasper", "qasper_000000", "English", "h2"),
            ("hotpotqa", "hotpotqa_000002", "Afghanistan", "h3"),
        ],
    )
    task = HotpotQA(path=path, ids=str(release))
    task.validate()
    assert [s.id for s in task.sources(3, 7, 0, count)] == [f"hotpotqa_{HOTPOTQA[i]}" for i in range(3)]
    assert task.manifest(2, 0)["ids"] == ["hotpotqa_000000", "hotpotqa_000001", "hotpotqa_000002"]
    with pytest.raises(ConfigError, match="n_sources=4 but task.ids=.*release lists only 3 rows"):
        task.sources(4, 0, 0, count)
    # a mixed list: dev _ids and sample ids alike
    assert hotpotqa_ids([HOTPOTQA[5], "hotpotqa_000005"]) == [HOTPOTQA[5], HOTPOTQA[5]]


def test_unknown_ids_are_named_before_any_model_loads(tmp_path):
    path = hotpot_file(tmp_path, [(HOTPOTQA[0], "Jahseh Dwayne Onfroy")])
    with pytest.raises(ConfigError, match="no HotpotQA sample hotpotqa_000200, hotpotqa_999999"):
        HotpotQA(path=path, ids=["hotpotqa_000200", "hotpotqa_999999"]).validate()
    with pytest.raises(ConfigError, match=r"2 rows are not in the data: 'nope', '5a8986fd55429938390d4046'"):
        HotpotQA(path=path, ids=["nope", "hotpotqa_000001"]).validate()
    with pytest.raises(ConfigError, match="must be a KVDiagnosis release"):
        HotpotQA(path=path, ids=str(tmp_path)).validate()
    wrong = ledger(tmp_path / "release", [("hotpotqa", "hotpotqa_000000", "XXXTentacion", "h0")])
    with pytest.raises(
        ConfigError, match=r"reference differs from the row's answer for \['hotpotqa_000000'\]"
    ):
        HotpotQA(path=path, ids=str(wrong)).validate()


def qasper_file(tmp_path: Path) -> str:
    papers = json.loads(json.dumps(PAPERS))
    papers["paperA"]["qas"][1]["answers"].append(answer([], free="no evidence given"))
    path = tmp_path / "qasper-test-v0.3.json"
    path.write_text(json.dumps(papers))
    return str(path)


def test_qasper_selects_the_release_samples_by_reference_in_file_order(tmp_path):
    path = qasper_file(tmp_path)
    # the release's form: counters in file order, one prompt hash per question
    release = ledger(
        tmp_path / "release",
        [
            ("qasper", "qasper_000000", "English language", "qa1"),
            ("qasper", "qasper_000001", "1,971; tweets", "qa2"),
            ("qasper", "qasper_000002", "no evidence given", "qa2"),
        ],
    )
    task = Qasper(path=path, ids=str(release))
    task.validate()
    sources = task.sources(3, 0, 0, count)
    assert [s.id for s in sources] == ["qasper_qa1_1", "qasper_qa2_0", "qasper_qa2_2"]
    assert task.manifest(3, 0)["ids"] == ["qasper_000000", "qasper_000001", "qasper_000002"]
    listed = Qasper(path=path, ids=["qa2_2", "qa1_0"])
    assert [s.id for s in listed.sources(2, 0, 0, count)] == ["qasper_qa2_2", "qasper_qa1_0"]
    with pytest.raises(ConfigError, match="row 'qa1_2' is not in the data"):
        Qasper(path=path, ids=["qa1_2"]).validate()  # unanswerable: no reference, never a source


def test_qasper_names_release_samples_the_file_lacks(tmp_path):
    path = qasper_file(tmp_path)
    release = ledger(
        tmp_path / "release",
        [
            ("qasper", "qasper_000000", "1,971; tweets", "qa2"),
            ("qasper", "qasper_000001", "English language", "qa1"),  # before it in the file: found
            ("qasper", "qasper_000002", "1,971", "qa1"),  # qa1 has no such answer
            ("qasper", "qasper_000003", "Dutch", "qa3"),  # no question has it
        ],
    )
    with pytest.raises(
        ConfigError, match="3 release samples .*: qasper_000001, qasper_000002, qasper_000003"
    ):
        Qasper(path=path, ids=str(release)).validate()
    ok = ledger(
        tmp_path / "ok", [("qasper", "qasper_000000", "1,971", "qa2"), ("qasper", "x", "English", "qa1")]
    )
    assert [s.id for s in Qasper(path=path, ids=str(ok)).sources(2, 0, 0, count)] == [
        "qasper_qa2_1",
        "qasper_qa1_0",
    ]


@pytest.mark.skipif(not RELEASE, reason="KVX_KVDIAGNOSIS_RELEASE names no checkout of ChosenQC/KVDiagnosis")
def test_the_real_release_names_200_sources_per_qa_workload():
    for workload in ("qasper", "hotpotqa"):
        sources = release_sources(RELEASE, workload)
        assert [s.sample_id for s in sources] == [f"{workload}_{i:06d}" for i in range(200)]
    hotpot = release_sources(RELEASE, "hotpotqa")
    ids = hotpotqa_ids(RELEASE)
    assert len(ids) == len(set(ids)) == 200 and ids == list(HOTPOTQA)
    try:
        from kvx.tasks.ruler import ruler_data_file

        dev = json.loads(ruler_data_file("hotpotqa.json").read_text(encoding="utf-8"))
    except ModuleNotFoundError:
        return
    answer_of = {row["_id"]: row["answer"] for row in dev}
    assert [answer_of[i] for i in ids] == [s.reference for s in hotpot]  # every one its reference
