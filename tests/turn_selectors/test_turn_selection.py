"""Positional turn selectors (TPBench §5), the turn-selection and deletion transforms, and the
dialogue tasks end to end on the tiny reader."""

from __future__ import annotations

import pytest

from kvx.core.errors import ConfigError
from kvx.pipeline.transform import transform_source
from kvx.tasks.tpbench.task import CurrentValue, InitialGoal
from kvx.transforms.turns import DeleteTurns, selection
from kvx.turn_selectors.base import Turn, keep_count
from kvx.turn_selectors.positional import Earliest, FirstUserPlusRecent, RandomTurns, Recency, UniformStride

TURNS = [Turn(i, "user" if i % 2 == 0 else "system", f"utterance {i}") for i in range(24)]


def test_positional_selectors_by_hand():
    assert Recency().select(TURNS[:10], 3, "d") == [7, 8, 9]
    assert Earliest().select(TURNS[:10], 3, "d") == [0, 1, 2]
    # n = 24, k = round(24 * 0.3) = 7: round(i * 24 / 7) for i < 7
    assert keep_count(24, 0.3) == 7
    assert UniformStride().select(TURNS, 7, "d") == [0, 3, 7, 10, 14, 17, 21]
    assert FirstUserPlusRecent().select(TURNS[:10], 3, "d") == [0, 8, 9]
    system_first = [Turn(i, "system" if i % 2 == 0 else "user", "x") for i in range(6)]
    assert FirstUserPlusRecent().select(system_first, 2, "d") == [1, 5]
    assert FirstUserPlusRecent().select(TURNS[:10], 1, "d") == [0]


def test_random_turns_are_seeded_per_dialogue():
    a = sorted(RandomTurns().select(TURNS, 7, "dialogue-a"))
    assert a == sorted(RandomTurns().select(TURNS, 7, "dialogue-a"))
    assert len(set(a)) == 7
    assert a != sorted(RandomTurns().select(TURNS, 7, "dialogue-b"))
    assert a != sorted(RandomTurns(seed=43).select(TURNS, 7, "dialogue-a"))


def sources(cls=CurrentValue, n=6, seed=42):
    return cls().sources(n, seed, 0, len)


def test_turn_selection_keeps_the_header_and_whole_turns():
    source = sources()[0]
    n_turns = len(source.parts()) - 1
    out = transform_source(selection("recency", Recency(), 0.3, True), "turns:recency", source)
    kept = out.info["kept_segment_ids"]
    k = keep_count(n_turns, 0.3)
    assert kept == ["header"] + [f"T{i}" for i in range(n_turns - k, n_turns)]
    assert out.source.context.startswith(f"Context:\n[T{n_turns - k}] ")
    bare = transform_source(selection("recency", Recency(), 0.3, False), "turns:recency", source)
    assert "[T" not in bare.source.context
    assert bare.source.context.splitlines()[1] == source.metadata["utterances"][f"T{n_turns - k}"]


def test_turn_fraction_is_checked():
    with pytest.raises(ConfigError, match="turn_fraction"):
        selection("recency", Recency(), 0.0, True).validate()
    with pytest.raises(ConfigError, match="turn_fraction"):
        selection("recency", Recency(), 1.5, True).validate()


def test_scorer_sees_what_the_reader_saw():
    task = CurrentValue()
    source = sources()[0]
    meta = source.metadata
    update = meta["update_turn"]
    answer = f'{{"value": "{meta["value"]}", "support": "", "abstain": false}}'
    full = task.evaluate(answer, source)
    assert full.correct and full.details["update_kept"] and full.details["answer_retained"]
    dropped = transform_source(DeleteTurns("answers"), "delete_turns", source).source
    assert update not in [s.id for s in dropped.parts()]
    score = task.evaluate(answer, dropped)
    assert score.correct  # reading is scored as is; retention is reported next to it
    assert not score.details["update_kept"] and not score.details["answer_retained"]
    assert score.details["turns_kept"] == full.details["turns_kept"] - len(meta["deletions"]["answers"])


def test_deletions_follow_the_matched_controls():
    source = sources()[0]
    for which in ("update", "update_control", "answers", "answers_control"):
        kept = {s.id for s in transform_source(DeleteTurns(which), "delete_turns", source).source.parts()}
        assert kept.isdisjoint(source.metadata["deletions"][which])
        assert len(kept) == len(source.parts()) - len(source.metadata["deletions"][which])
    with pytest.raises(ConfigError, match="transform.which"):
        DeleteTurns("everything").validate()


def test_transformed_sources_keep_the_system_prompt():
    """The reader of a selection or deletion gets the Appendix A system prompt its control got."""
    source = sources()[0]
    assert source.system
    for transform in (DeleteTurns("update"), selection("recency", Recency(), 0.5, True)):
        assert transform_source(transform, "t", source).source.system == source.system


def test_dialogue_transforms_are_versioned_in_the_cell_identity():
    """Cells stored before the system prompt was kept are recomputed, not reused; an unversioned
    transform's cells keep their ids."""
    from kvx.transforms.retrieval import BM25TopK

    recency = selection("recency", Recency(), 0.5, True)
    assert DeleteTurns("update").fingerprint() == {"version": "2"} == recency.fingerprint()
    assert BM25TopK().fingerprint() == {}


def test_tasks_validate_before_any_model(tmp_path):
    with pytest.raises(ConfigError, match="task.path is not set.*github.com/google-research-datasets"):
        CurrentValue(corpus="sgd").validate()
    with pytest.raises(ConfigError, match="no such file"):
        CurrentValue(corpus="multiwoz21", path=str(tmp_path / "missing.zip")).validate()
    with pytest.raises(ConfigError, match="task.corpus"):
        CurrentValue(corpus="woz").validate()
    InitialGoal().validate()


def test_manifest_reports_files_counts_and_hash():
    """``n_sources`` probes wanted: the seed's shuffled pool is read (``drawn``) until 200 pass; the
    release's protocol (``draw_then_filter``) draws 200 and keeps those that pass."""
    m = CurrentValue().manifest(200, 42)
    assert m["files"] == ["synthetic(seed=0)"] and m["counts"]["drawn"] > 200
    assert m["examples"] == m["counts"]["occurs"] == len(sources(n=200)) == 200
    paper = CurrentValue(draw_then_filter=True).manifest(200, 42)
    assert paper["counts"]["drawn"] == 200 and paper["examples"] == paper["counts"]["occurs"] < 200
    assert m["probe_set_sha256"] != CurrentValue().manifest(200, 43)["probe_set_sha256"]
    assert {s.metadata["probe_set_sha256"] for s in sources(n=200)} == {m["probe_set_sha256"]}


@pytest.mark.parametrize("probe", [InitialGoal, CurrentValue])
def test_sources_carry_appendix_a_prompts(probe):
    source = sources(probe)[0]
    assert source.system.startswith("You are reading a conversation that may be partial or compressed.")
    assert source.context.startswith("Context:\n[T0] USER: ")
    assert source.question.startswith("\n\nQuestion: ")
    assert source.question.endswith("Reply with only the JSON object.")


def test_plain_text_replies_score_zero_but_get_a_lenient_score():
    task = InitialGoal()
    source = sources(InitialGoal)[0]
    goal = source.metadata["goal"]
    plain = task.evaluate(f"The user's initial goal was: {goal}", source)
    assert plain.metrics["parsed"] == 0.0 and plain.value == 0.0  # the paper's rule: no JSON, no answer
    assert plain.metrics["lenient_strict"] == 1.0  # the same rule on the raw text
    parsed = task.evaluate(f'{{"value": "{goal}", "abstain": false}}', source)
    assert parsed.metrics["strict"] == parsed.metrics["lenient_strict"] == 1.0


def test_one_prefill_per_dialogue_rendering_across_probes_and_cells(tiny, engine):
    """P1 and P3 examples of the same dialogues render the same context: each is prefilled once,
    whatever the probe, the KV cell or the turn-selection cell that needs it."""
    from kvx.compressors.presets import SnapKV, StreamingLLM
    from kvx.pipeline.cell import Cell
    from kvx.tasks.tpbench.task import GoalAndLateUpdate

    def cell(task, press, compressor, **kw):
        return Cell(
            task_name=f"tpbench_{task.probe}", task=task, reader_name="tiny", press_name=press,
            compressor=compressor, ratio=0.5, seed=1, n_sources=3, context_tokens=1024, max_new_tokens=2,
            **kw,
        )  # fmt: skip

    p1, p3 = InitialGoal(synthetic_dialogues=3), GoalAndLateUpdate(synthetic_dialogues=3)
    dialogues = {s.metadata["dialogue_id"] for s in p3.sources(3, 1, 0, len)}
    assert dialogues and dialogues <= {s.metadata["dialogue_id"] for s in p1.sources(3, 1, 0, len)}
    for task in (p1, p3):
        for press, comp in (("snapkv", SnapKV(window_size=4)), ("streaming_llm", StreamingLLM())):
            records = engine.run_cells([cell(task, press, comp)], tiny, progress=False)[0]
            assert {r.status for r in records} == {"supported"}
    assert engine.prefills == 3  # one per dialogue: P3 and the second press reuse P1's prefills
    recency = selection("recency", Recency(), 0.5, True)
    for task in (p1, p3):
        engine.run_cells(
            [cell(task, "none", comp, transform_name="turns:recency", transform=recency)], tiny, False
        )[0]
    assert engine.prefills == 3 + 3  # one per selected rendering, shared by both probes
