"""RAG text compressors with models: LongLLMLingua (llmlingua on a local LM), RECOMP extractive and
abstractive, EXIT and Provence. Each runs on tiny local models (deterministic outputs, budget
respected, supplied order kept) and is ``Unsupported`` with its reason where it needs the hub."""

from __future__ import annotations

import pytest
import torch

from kvx.core.errors import ConfigError, Unsupported
from kvx.core.source import Segment, Source
from kvx.testing.models import save_tiny_bert
from kvx.transforms.exit import Exit
from kvx.transforms.longllmlingua import LongLLMLinguaRAG
from kvx.transforms.provence import Provence
from kvx.transforms.recomp import RecompAbstractive, RecompExtractive

POOL = [
    Segment("preamble", "Answer the question based on the given documents.", role="instruction"),
    Segment(
        "doc1",
        "Document 1:\nFrance\nParis is the capital of France. It lies on the Seine.",
        "passage",
        "France",
    ),
    Segment("doc2", "Document 2:\nBanana\nBananas are yellow. They grow in bunches.", "passage", "Banana"),
    Segment(
        "doc3",
        "Document 3:\nGermany\nBerlin is the capital of Germany. It has many museums.",
        "passage",
        "Germany",
    ),
]
WORDS = sorted(
    {w.strip(".,?:") for s in POOL for w in s.text.split()} | {"Which", "city", "is", "?", ".", ":"}
)


def source(question: str = "Which city is the capital of Germany?") -> Source:
    return Source.from_segments(
        POOL, id="q", question=question, answers=["Berlin"], metadata={"query": question}
    )


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    """A tiny random BERT encoder folder (WordPiece over the pool's words)."""
    return save_tiny_bert(tmp_path_factory.mktemp("bert"), WORDS)


@pytest.fixture(scope="module")
def t5(tmp_path_factory, bert):
    """A tiny random T5 summarizer folder sharing the BERT WordPiece tokenizer."""
    from transformers import BertTokenizerFast, T5Config, T5ForConditionalGeneration

    folder = tmp_path_factory.mktemp("t5")
    BertTokenizerFast.from_pretrained(bert).save_pretrained(folder)
    torch.manual_seed(0)
    config = T5Config(
        vocab_size=len(WORDS) + 5,
        d_model=32,
        d_kv=8,
        d_ff=64,
        num_layers=1,
        num_heads=2,
        decoder_start_token_id=0,
        pad_token_id=0,
        eos_token_id=3,
    )
    T5ForConditionalGeneration(config).save_pretrained(folder)
    return str(folder)


@pytest.fixture()
def lm_folder(tiny, tmp_path):
    folder = tmp_path / "lm"
    tiny.model.save_pretrained(folder)
    tiny.tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.fixture()
def offline(monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # no 30 s of retries


def passages(segments) -> list[str]:
    return [s.id for s in segments if s.role == "passage"]


def test_longllmlingua_compresses_the_pool_to_its_rate(lm_folder, tmp_path, monkeypatch):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "tiktoken"))
    long_pool = POOL[:1] + [
        Segment(s.id, s.text + " " + " ".join(["More words about this topic."] * 20), s.role, s.title)
        for s in POOL[1:]
    ]
    src = Source.from_segments(
        long_pool, id="q", question="q?", answers=["Berlin"], metadata={"query": "capital?"}
    )
    compressor = LongLLMLinguaRAG(rate=0.3, model=lm_folder)
    compressor.validate()
    out = compressor.apply(src)
    assert out[0] == long_pool[0] and [s.id for s in out] == ["preamble", "longllmlingua"]
    original = sum(len(s.text) for s in long_pool[1:])
    assert 0 < len(out[1].text) < 0.6 * original  # about rate of the tokens (plus llmlingua's +100 budget)
    assert compressor.apply(src) == out  # deterministic
    assert len(LongLLMLinguaRAG(rate=0.9, model=lm_folder).apply(src)[1].text) > len(out[1].text)


def test_longllmlingua_bad_fields():
    for bad in ({"rate": 0.0}, {"rate": 1.5}, {"dynamic_ratio": -1}, {"model": ""}):
        with pytest.raises(ConfigError, match="transform\\."):
            LongLLMLinguaRAG(**bad).validate()


def test_recomp_extractive_keeps_k_sentences_in_supplied_order(bert):
    compressor = RecompExtractive(k=2, top_passages=0, model=bert)
    compressor.validate()
    out = compressor.apply(source())
    assert [s.id for s in out] == ["preamble", "recomp"]
    kept = out[1].text
    all_sentences = [
        "Paris is the capital of France.", "It lies on the Seine.", "Bananas are yellow.",
        "They grow in bunches.", "Berlin is the capital of Germany.", "It has many museums.",
    ]  # fmt: skip
    scores = compressor.scores("Which city is the capital of Germany?", all_sentences)
    best = sorted(sorted(range(6), key=lambda i: (-scores[i], i))[:2])
    assert kept == " ".join(all_sentences[i] for i in best)  # the two best, supplied order
    assert compressor.apply(source()) == out
    # top_passages: BM25 first keeps the Germany and France passages (the shared words), then 1 sentence
    narrow = RecompExtractive(k=1, top_passages=2, model=bert).apply(source())[1].text
    assert narrow in all_sentences and "Banana" not in narrow


def test_recomp_abstractive_writes_one_bounded_summary(t5):
    compressor = RecompAbstractive(max_new_tokens=5, top_passages=2, model=t5)
    compressor.validate()
    out = compressor.apply(source())
    assert [s.id for s in out] == ["preamble", "recomp"]
    assert len(out[1].text.split()) <= 5 and compressor.apply(source()) == out


def test_exit_threshold_bounds_what_is_kept(lm_folder):
    from kvx.transforms.extractive import header, sentences

    assert Exit(threshold=0.0, model=lm_folder).apply(source()) == POOL  # every sentence kept
    assert passages(Exit(threshold=1.0, model=lm_folder).apply(source())) == []  # P(yes) < 1 always
    exit_ = Exit(threshold=0.5, model=lm_folder)
    question = source().metadata["query"]
    expected = []
    for segment in POOL[1:]:
        body = segment.text.removeprefix(header(segment))
        kept = [t for t in sentences(body) if exit_.p_yes(question, body, t) >= 0.5]
        if kept:
            expected.append(header(segment) + " ".join(kept))
    assert [s.text for s in exit_.apply(source())][1:] == expected
    p = exit_.p_yes(question, "Paris is the capital of France.", "Paris is the capital of France.")
    assert 0.0 < p < 1.0


def test_provence_needs_consent_and_prunes_with_the_models_own_code(monkeypatch):
    with pytest.raises(ConfigError, match="trust_remote_code=true"):
        Provence().validate()
    Provence(trust_remote_code=True).validate()

    class FakeProvence:  # the model's process(): keeps sentences that share a word with the question
        def process(self, question, context, threshold, always_select_title):
            words = {w.strip("?.").lower() for w in question.split()}
            kept = [s for s in context.split(". ") if words & {w.strip(".").lower() for w in s.split()}]
            return {"pruned_context": ". ".join(kept)}

    import kvx.transforms.provence as provence

    monkeypatch.setattr(provence, "_load", lambda model, trust_remote_code: FakeProvence())
    out = Provence(trust_remote_code=True, model="fake/provence-test").apply(source("Berlin museums?"))
    assert passages(out) == ["doc3"] and out[-1].text.startswith("Document 3:\nGermany\nBerlin")


@pytest.mark.parametrize(
    "compressor",
    [RecompExtractive(), RecompAbstractive(), Exit(), Provence(trust_remote_code=True)],
    ids=["recomp_extractive", "recomp_abstractive", "exit", "provence"],
)
def test_hub_compressors_are_unsupported_offline_with_the_reason(compressor, offline):
    compressor.validate()
    for _ in range(2):  # the second row answers from the remembered reason
        with pytest.raises(Unsupported, match="from the Hugging Face hub, which is unreachable here"):
            compressor.apply(source())
