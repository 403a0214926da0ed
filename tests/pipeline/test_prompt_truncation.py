"""``reader.max_prompt_tokens``: over-long prompts lose context tokens from the left, never the
template's opening or the question (the TPBench paper's readers truncate from the left at 7,168
tokens; LongMemEval-KU at 32K); with ``reader.truncation=context`` the context part keeps its first
tokens, as kvpress's ``max_context_length`` does (its parity: ``test_engine.py``).

The tiny reader's tokenizer gives one token per byte and one per ChatML special, so every count
below is counted by hand.
"""

from __future__ import annotations

import pytest

from kvx.core.errors import ConfigError
from kvx.core.source import Segment, Source
from kvx.modeling.reader import load_reader, reader_identity
from kvx.readers.tiny import TinyLlama

CONTEXT = "0123456789" * 5  # 50 tokens
# <|im_start|> system\n(7) S <|im_end|> \n <|im_start|> user\n(5): 17 tokens before the context
HEAD = 1 + 7 + 1 + 1 + 1 + 1 + 5
# Q?(2) <|im_end|> \n <|im_start|> assistant\n(10): 15 tokens after it
TAIL = 2 + 1 + 1 + 1 + 10


def source(**kw) -> Source:
    return Source(context=CONTEXT, question="Q?", answers=["a"], system="S", id="s1", **kw)


def limited(limit: int | None, truncation: str = "left"):
    """The session's tiny weights under a prompt limit (the same model: no reload)."""
    return load_reader("tiny", TinyLlama(num_hidden_layers=3, max_prompt_tokens=limit, truncation=truncation))


def text(reader, prompt) -> str:
    ids = prompt.context_ids[0].tolist() + prompt.question_ids[0].tolist()
    return reader.tokenizer.decode(ids)


def test_a_long_context_is_cut_from_the_left():
    base = limited(None)  # whichever reader earlier tests left loaded, these weights now
    full = base.render(source())
    assert (full.context_ids.shape[1], full.question_ids.shape[1]) == (HEAD + 50, TAIL)
    reader = limited(60)
    assert reader.model is base.model and reader.max_prompt_tokens == 60  # a limit is no reload
    prompt = reader.render(source())
    assert prompt.truncated == HEAD + 50 + TAIL - 60 == 22
    assert prompt.context_ids.shape[1] + prompt.question_ids.shape[1] == 60
    kept = CONTEXT[22:]  # "23456789" + three "0123456789"
    opening = "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\n"
    assert text(reader, prompt) == f"{opening}{kept}Q?<|im_end|>\n<|im_start|>assistant\n"
    assert text(reader, prompt).endswith("Q?<|im_end|>\n<|im_start|>assistant\n")  # the question is whole
    assert limited(HEAD + 50 + TAIL).render(source()).truncated == 0  # a prompt that fits is not cut


def test_the_limit_must_leave_a_context_token(tiny):
    assert text(tiny, limited(HEAD + TAIL + 1).render(source())).count("9Q?") == 1  # one token left: "9"
    message = r"max_prompt_tokens=32 is too small for source s1.*\(17 tokens\).*\(15 tokens\)"
    with pytest.raises(ConfigError, match=message):
        limited(HEAD + TAIL).render(source())


def test_segment_spans_follow_the_cut(tiny):
    segments = (Segment("a", CONTEXT[:20]), Segment("b", CONTEXT[20:]))
    src = Source.from_segments(segments, "", question="Q?", answers=["a"], system="S", id="s2")
    assert tiny.render(src).segment_spans == [(HEAD, HEAD + 20), (HEAD + 20, HEAD + 50)]
    # 22 tokens cut: all of a, and b's first 2
    assert limited(60).render(src).segment_spans == [(0, 0), (HEAD, HEAD + 28)]


def test_context_truncation_keeps_the_context_parts_first_tokens():
    reader = limited(HEAD + 20, "context")  # the limit counts the context part only
    prompt = reader.render(source())
    assert prompt.truncated == 30 and prompt.question_ids.shape[1] == TAIL
    opening = "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\n"
    assert text(reader, prompt) == f"{opening}{CONTEXT[:20]}Q?<|im_end|>\n<|im_start|>assistant\n"
    # joined (query_aware=question): the question ends the context part, and goes first
    joined = limited(HEAD + 51, "context").render(source(), joined=True)
    assert (joined.truncated, joined.question_ids.shape[1]) == (1, TAIL - 2)
    assert text(reader, joined) == f"{opening}{CONTEXT}Q<|im_end|>\n<|im_start|>assistant\n"
    assert limited(HEAD + 52, "context").render(source(), joined=True).truncated == 0


def test_context_truncation_clips_segment_spans(tiny):
    segments = (Segment("a", CONTEXT[:20]), Segment("b", CONTEXT[20:]))
    src = Source.from_segments(segments, "", question="Q?", answers=["a"], system="S", id="s2")
    assert limited(HEAD + 10, "context").render(src).segment_spans == [(HEAD, HEAD + 10), (0, 0)]


def test_invalid_truncations_fail_validation():
    with pytest.raises(
        ConfigError, match="reader.truncation='contxt' is not one of .*did you mean 'context'"
    ):
        TinyLlama(max_prompt_tokens=64, truncation="contxt").validate()
    with pytest.raises(ConfigError, match="reader.truncation=context cuts nothing without reader.max_prompt"):
        TinyLlama(truncation="context").validate()
    TinyLlama(max_prompt_tokens=64, truncation="context").validate()


def test_truncation_is_part_of_the_identity_only_when_not_left():
    left = reader_identity("tiny", TinyLlama(max_prompt_tokens=64))
    assert "truncation" not in left["fields"]  # the cells cut from the left before the option keep their ids
    assert left == reader_identity("tiny", TinyLlama(max_prompt_tokens=64, truncation="left"))
    context = reader_identity("tiny", TinyLlama(max_prompt_tokens=64, truncation="context"))
    assert context["fields"]["truncation"] == "context" and context != left


def test_invalid_limits_fail_validation():
    for bad in (0, -5, True, 7.5):
        with pytest.raises(ConfigError, match="reader.max_prompt_tokens"):
            TinyLlama(max_prompt_tokens=bad).validate()
    TinyLlama(max_prompt_tokens=7168).validate()
    TinyLlama().validate()


def test_the_limit_is_part_of_the_cell_identity():
    # null: exactly the fields the reader had before the option, so older stores still match
    assert reader_identity("tiny", TinyLlama())["fields"] == {
        "seed": 0, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "accelerator": "cpu", "precision": "32-true",
    }  # fmt: skip
    a, b = (reader_identity("tiny", TinyLlama(max_prompt_tokens=m)) for m in (7168, 32768))
    assert a["fields"]["max_prompt_tokens"] == 7168
    assert len({str(reader_identity("tiny", TinyLlama())), str(a), str(b)}) == 3


def test_records_say_what_was_cut(tiny, engine):
    from kvx.compressors.none import NoCompression
    from kvx.pipeline.cell import Cell
    from kvx.tasks.tpbench.task import CurrentValue

    task = CurrentValue(synthetic_dialogues=3)
    src = task.sources(1, 1, 0, len)[0]
    full = tiny.render(src)
    n = full.context_ids.shape[1] + full.question_ids.shape[1]
    reader = limited(n - 40)
    cell = Cell(
        task_name="tpbench_p2", task=task, reader_name="tiny", press_name="none", compressor=NoCompression(),
        ratio=0.0, seed=1, n_sources=1, context_tokens=1024, max_new_tokens=2,
    )  # fmt: skip
    record = engine.run_cells([cell], reader, progress=False)[0][0]
    assert record.status == "supported", record.reason
    assert record.truncation == {"max_prompt_tokens": n - 40, "mode": "left", "context_tokens_cut": 40}
    assert record.n_context_tokens == full.context_ids.shape[1] - 40
    assert record.n_question_tokens == full.question_ids.shape[1]
    assert "reader.max_prompt_tokens" in record.cell["fields"]
    assert record.to_dict()["truncation"]["context_tokens_cut"] == 40
    plain = engine.run_cells([cell], tiny, progress=False)[0][0]
    assert plain.truncation is None and "truncation" not in plain.to_dict()
    assert plain.cell["id"] != record.cell["id"] and "reader.max_prompt_tokens" not in plain.cell["fields"]


def test_a_cut_prompt_is_not_aligned_to_evidence(tiny):
    from kvx.diagnostics.alignment import align_evidence

    assert align_evidence(tiny.tokenizer, tiny.render(source()), [(0, 5)]).ok
    cut = align_evidence(tiny.tokenizer, limited(60).render(source()), [(0, 5)])
    assert not cut.ok and "reader.max_prompt_tokens" in cut.reason


def test_a_transformed_prompt_is_cut_on_its_own(tiny, engine):
    from kvx.compressors.none import NoCompression
    from kvx.pipeline.cell import Cell
    from kvx.pipeline.transform import transform_source
    from kvx.tasks.tpbench.task import CurrentValue
    from kvx.transforms.turns import selection
    from kvx.turn_selectors.positional import Recency

    task = CurrentValue(synthetic_dialogues=3)
    src = task.sources(1, 1, 0, len)[0]
    recency = selection("recency", Recency(), 0.5, True)
    kept = transform_source(recency, "turns:recency", src).source
    full, short = tiny.render(src), tiny.render(kept)
    n_full = full.context_ids.shape[1] + full.question_ids.shape[1]
    n_short = short.context_ids.shape[1] + short.question_ids.shape[1]
    limit = n_short - 5  # both sides are cut: the full prompt by more
    cell = Cell(
        task_name="tpbench_p2", task=task, reader_name="tiny", press_name="none", compressor=NoCompression(),
        ratio=0.0, seed=1, n_sources=1, context_tokens=1024, max_new_tokens=2,
        transform_name="turns:recency", transform=recency,
    )  # fmt: skip
    record = engine.run_cells([cell], limited(limit), progress=False)[0][0]
    assert record.status == "supported", record.reason
    assert record.truncation == {
        "max_prompt_tokens": limit,
        "mode": "left",
        "context_tokens_cut": n_full - limit,
        "compressed_context_tokens_cut": 5,
    }
