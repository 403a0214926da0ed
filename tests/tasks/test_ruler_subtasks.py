"""RULER's 11 named subtasks: configurations pinned to NVIDIA/RULER ``scripts/synthetic.yaml``, the
KVDiagnosis release's decoding budgets, and the evidence of the counting families (CWE, FWE)."""

from __future__ import annotations

import collections
from types import SimpleNamespace

import pytest
import torch

from kvx.core.identity import fields_of
from kvx.core.registry import registry
from kvx.core.setting import RetainedMap
from kvx.diagnostics.alignment import align_evidence
from kvx.diagnostics.cache_coverage import Coverage
from kvx.modeling.reader import Prompt
from kvx.readers.tiny import byte_tokenizer
from kvx.tasks.ruler import CommonWords, FrequentWords, VariableTracking, word_spans


def words(text: str) -> int:
    return len(text.split())


# NVIDIA/RULER scripts/synthetic.yaml, one row per subtask, in kvx's field names (type_haystack is
# ``haystack``; niah.py raises num_needle_k to num_needle_q, so niah_multiquery holds four keys).
NIAH = ("haystack", "type_needle_k", "type_needle_v", "num_needle_k", "num_needle_v", "num_needle_q")
SYNTHETIC_YAML = {
    "niah_single_1": dict(zip(NIAH, ("noise", "words", "numbers", 1, 1, 1))),
    "niah_single_2": dict(zip(NIAH, ("essay", "words", "numbers", 1, 1, 1))),
    "niah_single_3": dict(zip(NIAH, ("essay", "words", "uuids", 1, 1, 1))),
    "niah_multikey_1": dict(zip(NIAH, ("essay", "words", "numbers", 4, 1, 1))),
    "niah_multikey_2": dict(zip(NIAH, ("needle", "words", "numbers", 1, 1, 1))),
    "niah_multikey_3": dict(zip(NIAH, ("needle", "uuids", "uuids", 1, 1, 1))),
    "niah_multivalue": dict(zip(NIAH, ("essay", "words", "numbers", 1, 4, 1))),
    "niah_multiquery": dict(zip(NIAH, ("essay", "words", "numbers", 4, 1, 4))),
    "vt": {"num_chains": 1, "num_hops": 4},
    # freq 0/0: RULER's choice by length (30/3 from 4096 tokens, the yaml's values; 6/1 below)
    "cwe": {"num_cw": 10, "freq_cw": 0, "freq_ucw": 0},
    "fwe": {"alpha": 2.0, "coded_wordlen": 6, "vocab_size": 0},  # vocab_size -1 in RULER: auto
}
# ChosenQC/KVDiagnosis src/kvcachebench/schema.py MAX_NEW_TOKENS, by the release's task key
RELEASE_BUDGET = {"niah": 64, "vt": 128, "cwe": 256, "fwe": 256}


def task_class(name: str) -> type:
    """The class the registered task ``name`` loads (the entry points kvx ships)."""
    return registry("task").get(name)


@pytest.mark.parametrize("name", sorted(SYNTHETIC_YAML))
def test_each_named_subtask_is_rulers_configuration(name):
    task = task_class(f"ruler_{name}")()
    assert fields_of(task) == SYNTHETIC_YAML[name]  # task.generator, at its default, is left out
    assert type(task).name == name and type(task).family == "ruler"
    assert type(task).max_new_tokens == RELEASE_BUDGET[name.split("_")[0]]


def test_kvx_defaults_keep_their_own_configuration_and_budget():
    single = task_class("ruler_niah_single")()
    multikey = task_class("ruler_niah_multikey")()
    assert (single.haystack, multikey.haystack, multikey.num_needle_k) == ("noise", "needle", 4)
    assert type(single).max_new_tokens == type(multikey).max_new_tokens == 24


def test_cwe_at_ruler_lengths_uses_the_yaml_frequencies():
    source = CommonWords().sources(1, 0, 4096, words)[0]
    assert (source.metadata["freq_cw"], source.metadata["freq_ucw"]) == (30, 3)


def test_word_spans_by_hand():
    text, spans = word_spans(["ab", "c", "ab", "d"], ["ab", "d"], ["1.", "2.", "3.", "4."])
    assert text == "1. ab 2. c 3. ab 4. d"
    assert spans == [(3, 5), (14, 16), (20, 21)]
    text, spans = word_spans(["x", "yy", "x"], ["x"])
    assert (text, spans) == ("x yy x", [(0, 1), (5, 6)])


def test_cwe_evidence_is_every_occurrence_of_each_common_word():
    source = CommonWords(num_cw=3, freq_cw=4, freq_ucw=1).sources(1, 0, 300, words)[0]
    texts = [source.context[a:b] for a, b in source.evidence]
    assert collections.Counter(texts) == {word: 4 for word in source.answers}  # freq_cw x num_cw = 12
    assert len(source.evidence) == 12
    for a, _ in source.evidence:  # the word after its "i. " label, never the label
        assert source.context[a - 2 : a] == ". "
    listed = source.context.split("\n", 1)[1].split()[1::2]
    assert sum(word in source.answers for word in listed) == 12  # no occurrence left out


def test_fwe_evidence_is_every_occurrence_of_the_three_answer_words():
    source = FrequentWords().sources(1, 0, 600, words)[0]
    body = source.context.split("words. ", 1)[1]  # RULER's template: a space, not a newline
    counts = collections.Counter(body.split())
    texts = [source.context[a:b] for a, b in source.evidence]
    assert collections.Counter(texts) == {word: counts[word] for word in source.answers}
    assert len(source.evidence) == sum(counts[word] for word in source.answers)
    assert "\n" not in source.context


def test_changed_generators_changed_version_so_stored_cells_are_not_reused():
    """CWE/FWE now hand over evidence and RULER's template, VT and CWE RULER's example: cells stored
    before must not stand for the new ones, so the scorer version (in the cell identity) moved; the
    NIAH generators did not change."""
    from kvx.compressors.none import NoCompression
    from kvx.pipeline.cell import Cell

    for name in ("ruler_cwe", "ruler_fwe", "ruler_vt"):
        task = task_class(name)()
        cell = Cell(name, task, "tiny", "none", NoCompression(), 0.0, 0, 1, 512, 256)
        assert cell.identity({"name": "tiny"}).task["scorer_version"] == "2"
    assert task_class("ruler_niah_multivalue").scorer_version == "1"


def test_coverage_of_a_cwe_source_by_hand():
    """Two slots over a tiny CWE list (2 common words x 3 occurrences = 6 spans, byte tokens): one slot
    keeps every position, the other only the first common word's occurrences. ECov = (6 + 3) / 12;
    ERR = (1 + 3 l1 / (3 l1 + 3 l2)) / 2 with l1, l2 the words' lengths in bytes."""
    source = CommonWords(num_cw=2, freq_cw=3, freq_ucw=1).sources(1, 0, 200, words)[0]
    tokenizer = byte_tokenizer()
    head = "<|im_start|>user\n"  # a chat prefix before the context: offsets must shift with it
    text = head + source.context
    ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    prompt = Prompt(context_ids=ids, question_ids=ids[:, :0], context_text=text, context_offset=len(head))
    alignment = align_evidence(tokenizer, prompt, source.evidence)
    assert alignment.ok and len(alignment.spans) == 6
    first, second = source.answers
    mask = torch.zeros(2, ids.shape[1], dtype=torch.bool)
    mask[0] = True
    for (a, b), positions in zip(source.evidence, alignment.spans):
        assert tokenizer.decode(ids[0, sorted(positions)]) == source.context[a:b]
        if source.context[a:b] == first:
            mask[1, sorted(positions)] = True
    context = SimpleNamespace(
        run=SimpleNamespace(retained=RetainedMap("measured", mask)),
        alignment=alignment,
        prompt=prompt,
        source=source,
    )
    result = Coverage().measure(context)
    l1, l2 = len(first), len(second)
    assert result.values["ecov"] == pytest.approx(9 / 12)
    assert result.values["err"] == pytest.approx((1 + l1 / (l1 + l2)) / 2)
    assert result.values["n_spans"] == 6 and result.values["evidence_tokens"] == 3 * (l1 + l2)


def test_vt_starts_with_rulers_answered_example():
    """variable_tracking.py: one in-context example (3-letter names, its own value, at most 500
    tokens unanswered) with its answer, a blank line, then the task; evidence stays in the task."""
    source = VariableTracking().sources(1, 0, 900, words)[0]
    example, task = source.context.split("they are:  ", 1)
    names_line, rest = task.split("\n", 1)
    shown = names_line.split()
    assert len(shown) == 5 and all(len(name) == 3 and name.isupper() for name in shown)
    assert rest.startswith("\nMemorize and track the chain(s)")
    assert words(example + "they are:") <= VariableTracking.example_tokens
    assert f"VAR {shown[0]} = " in example
    assert all(f"VAR {b} = VAR {a}" in example for a, b in zip(shown, shown[1:]))
    start = len(source.context) - len(rest)
    assert all(a >= start for a, _ in source.evidence)  # no evidence inside the example
    assert [source.context[a:b].split()[1] for a, b in source.evidence] == source.answers


def test_cwe_starts_with_rulers_answered_example():
    """common_words_extraction.py: one answered example list first, 40 words at 10/3 repeats from
    4096 tokens (20 at 3/1 below), none of them an answer; evidence only in the task's list."""
    for target, (size, repeats, others) in ((700, (20, 3, 1)), (4096, (40, 10, 3))):
        source = CommonWords().sources(1, 0, target, words)[0]
        example, task = source.context.split("Below is a numbered list", 2)[1:]
        listed = example.split("\n")[1].split()[1::2]
        counts = collections.Counter(listed)
        answered = example.split("list are: ")[1].split()[1::2]
        assert len(counts) == size and len(answered) == 10
        assert {counts[word] for word in answered} == {repeats}
        assert sorted(counts.values()) == [others] * (size - 10) + [repeats] * 10
        assert not set(counts) & set(source.answers)
        start = len(source.context) - len(task)
        assert all(a >= start for a, _ in source.evidence)


def test_alignment_keeps_the_overlap_rule_on_overlapping_offsets():
    """Evidence tokens are those whose nonempty offset range overlaps the span, also where byte tokens
    share a character's offsets (é is two bytes) and a span cuts a character in two."""
    tokenizer = byte_tokenizer()
    text = "ab é cd ééx"
    ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    prompt = Prompt(context_ids=ids, question_ids=ids[:, :0], context_text=text)
    offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    evidence = [(0, 2), (3, 4), (5, 7), (8, 11), (1, 9)]
    alignment = align_evidence(tokenizer, prompt, evidence)
    expected = [{i for i, (s, e) in enumerate(offsets) if s < b and e > a and e > s} for a, b in evidence]
    assert alignment.ok and alignment.spans == expected
    assert alignment.spans[1] == {3, 4}  # é: two byte tokens over the same character
