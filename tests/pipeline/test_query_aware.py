"""``query_aware``: false, prompt (kvx's mode, ``true`` in stores made before the names) and question
(kvpress's query-aware evaluation): what each compresses, one cell each, one control for all, and the
stored cells of ``true`` kept. kvpress parity is in ``test_engine.py``.

The tiny reader's tokenizer gives one token per byte and one per ChatML special: every count below is
counted by hand.
"""

from __future__ import annotations

import pytest
import torch

from kvx.compressors.presets import SnapKV
from kvx.core.errors import ConfigError
from kvx.core.identity import CellIdentity, SettingSpec
from kvx.core.query import OFF, PROMPT, QUESTION, query_mode, stored
from kvx.core.records import as_dicts, validate
from kvx.core.setting import n_kept, ratio_for_budget
from kvx.core.source import Source
from kvx.pipeline.cell import Cell
from kvx.pipeline.compress import compress
from kvx.tasks.ruler import NiahSingle

READER = {"name": "tiny", "fields": {"seed": 0}, "revision": "random-seed-0"}
CONTEXT = "0123456789" * 5  # 50 tokens
OPENING = 1 + 5  # <|im_start|> user\n
SUFFIX = 1 + 1 + 1 + 10  # <|im_end|> \n <|im_start|> assistant\n
N = 2


def cell(query_aware=OFF, **kw) -> Cell:
    base = dict(
        task_name="ruler_niah_single",
        task=NiahSingle(),
        reader_name="tiny",
        press_name="snapkv",
        compressor=SnapKV(window_size=4),
        ratio=0.5,
        seed=0,
        n_sources=N,
        context_tokens=300,
        max_new_tokens=4,
        query_aware=query_aware,
    )
    return Cell(**{**base, **kw})


def test_cells_stored_with_true_and_false_keep_their_ids():
    # ids kvx wrote before the modes had names (pinned): query_aware was a bool in the identity
    parts = dict(
        task={"name": "t", "fields": {}},
        reader={"name": "r", "fields": {"max_prompt_tokens": 64}},
        transform={"name": "none", "fields": {}},
        compressor={"name": "snapkv", "fields": {"window_size": 64}},
        setting=SettingSpec("ratio", 0.5),
        seed=0,
        n_sources=3,
        context_tokens=400,
        max_new_tokens=6,
    )
    assert CellIdentity(**parts, query_aware=False).id == "da5ccdcea68c80e4"
    assert CellIdentity(**parts, query_aware=True).id == "79250cf584bb9d6c"
    # a cell in the prompt mode is the cell stores hold as true, however it is spelled
    for spelled in (True, "true", PROMPT):
        identity = cell(spelled).identity(READER)
        assert identity.query_aware is True and identity.flat()["query_aware"] is True
    assert cell(False).identity(READER).query_aware is False
    assert {cell(s).identity(READER).id for s in (True, "true", PROMPT)} == {cell(PROMPT).identity(READER).id}


def test_the_three_modes_are_three_cells_with_one_control_group():
    identities = {mode: cell(mode).identity(READER) for mode in (OFF, PROMPT, QUESTION)}
    assert len({i.id for i in identities.values()}) == 3
    assert len({i.split for i in identities.values()}) == 1  # the FullCache control does not depend on it
    assert identities[QUESTION].query_aware == "question"
    labels = [cell(mode).label() for mode in (OFF, PROMPT, QUESTION)]
    assert labels == [
        "snapkv[window_size=4]@0.5",
        *(f"snapkv[window_size=4,query_aware={m}]@0.5" for m in ("prompt", "question")),
    ]


def test_a_mode_is_named_or_refused_with_the_closest_name():
    assert [query_mode(v) for v in (False, "false", True, "true", "prompt", "question")] == [
        OFF, OFF, PROMPT, PROMPT, PROMPT, QUESTION
    ]  # fmt: skip
    assert [stored(m) for m in (OFF, PROMPT, QUESTION)] == [False, True, "question"]
    with pytest.raises(ConfigError, match=r"query_aware='quesiton' is not one of .*did you mean 'question'"):
        query_mode("quesiton")
    with pytest.raises(ConfigError, match="query_aware=1"):
        cell(1)


@pytest.mark.parametrize(
    ("mode", "prefilled", "fed"),
    [
        (OFF, OPENING + 50, 2 + SUFFIX),  # the context part; the question part appended
        (PROMPT, OPENING + 50 + 2 + SUFFIX - 1, 1),  # every prompt token but the last
        (QUESTION, OPENING + 50 + 2, SUFFIX),  # the context and the question; suffix appended
    ],
)
def test_what_each_mode_compresses(tiny, engine, mode, prefilled, fed):
    source = Source(id="s", context=CONTEXT, question="Q?", answers=["a"])
    prompt = tiny.render(source, joined=mode == QUESTION)
    with torch.inference_mode():
        cache, run = compress(engine.caches, tiny, SnapKV(window_size=4), 0.5, prompt, mode)
    assert (run.prefill_ids.shape[1], run.feed.shape[1]) == (prefilled, fed)
    assert cache.get_seq_length() == n_kept(prefilled, 0.5)  # only the prefilled tokens were compressed
    assert run.start == prefilled  # positions continue after the prefill, compressed or not
    ids = [*run.prefill_ids[0].tolist(), *run.feed[0].tolist()]
    assert (
        tiny.tokenizer.decode(ids) == "<|im_start|>user\n" + CONTEXT + "Q?<|im_end|>\n<|im_start|>assistant\n"
    )


def test_a_joined_prompt_goes_with_the_question_mode_only(tiny, engine):
    source = Source(id="s", context=CONTEXT, question="Q?", answers=["a"])
    for mode, joined in ((QUESTION, False), (PROMPT, True), (OFF, True)):
        with pytest.raises(ValueError, match="a joined prompt goes with query_aware=question only"):
            compress(engine.caches, tiny, SnapKV(), 0.5, tiny.render(source, joined=joined), mode)


def test_every_mode_pairs_with_the_same_control(tiny, engine):
    cells = [cell(mode) for mode in (OFF, PROMPT, QUESTION)]
    runs = [as_dicts(records) for records in engine.run_cells(cells, tiny, progress=False)]
    assert engine.controls.computed == N  # one control per source, for the three cells
    for records in runs:
        for r in records:
            validate(r)
    assert [r["query_aware"] for r in (run[0] for run in runs)] == [False, True, "question"]
    for side in ("full", "prompt_hash", "split", "n_context_tokens", "n_question_tokens"):
        assert runs[0][0][side] == runs[1][0][side] == runs[2][0][side], side
    assert all(r["status"] == "supported" for run in runs for r in run)


def test_a_budget_counts_every_token_the_mode_compresses(tiny, engine):
    budget = 64
    runs = engine.run_cells(
        [cell(m, budget_tokens=budget) for m in (OFF, PROMPT, QUESTION)], tiny, progress=False
    )
    for source, off, whole, joined in zip(engine.sources(cell(), tiny), *(as_dicts(r) for r in runs)):
        prompt, question = tiny.render(source), tiny.render(source, joined=True)
        n_ctx, n_q = prompt.context_ids.shape[1], prompt.question_ids.shape[1]
        assert question.context_ids.shape[1] == n_ctx + len(source.question.encode())
        for record, n in ((off, n_ctx), (whole, n_ctx + n_q - 1), (joined, question.context_ids.shape[1])):
            assert record["setting"]["ratio"] == ratio_for_budget(budget, n), record["query_aware"]
            kept = record["setting"]["method_parameter"]["kept_tokens_per_head"]
            assert kept == budget, record["query_aware"]
