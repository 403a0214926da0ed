"""Content-based turn selectors (TPBench §5): MMR, the H2O-inspired attention proxy, LLMLingua."""

from __future__ import annotations

import hashlib
import math
import os

import numpy as np
import pytest
import torch

from kvx.core.errors import ConfigError
from kvx.core.ranking import top_k
from kvx.modeling.lingua import CL100K_URL, offline_tiktoken
from kvx.testing.models import save_tiny_bert
from kvx.turn_selectors.attention_proxy import (
    AttentionProxy,
    attention_received,
    join_turns,
    token_turns,
    turn_scores,
)
from kvx.turn_selectors.base import Turn, Unsupported
from kvx.turn_selectors.llmlingua import (
    LLMLINGUA2_MODEL,
    LLMLingua2,
    LongLLMLingua,
    parse_labels,
    word_offsets,
)
from kvx.turn_selectors.mmr import MMR, mmr_order

BOOKING = [
    "I'd like to book a table for two at an Italian restaurant tonight.",
    "Can you reserve an Italian restaurant table for two people this evening?",
    "Please book me a table for 2 at an Italian place tonight.",
    "What will the weather be like in Cambridge tomorrow?",
    "I also need a taxi to the train station at 9am.",
]
DIALOGUE = [
    "Hi, I need a cheap Italian restaurant in the north.",
    "Sure. Any price range?",
    "Cheap please.",
    "Okay.",
    "Actually make it Chinese instead, for 4 people at 7pm on Friday.",
    "Done, booked Golden Dragon, reference XK42.",
    "Thanks!",
    "Bye.",
]


def as_turns(texts: list[str]) -> list[Turn]:
    return [Turn(i, "user" if i % 2 == 0 else "system", text) for i, text in enumerate(texts)]


# --- pure helpers, by hand ---------------------------------------------------------------------

# Unit rows v0 = v1 = (1, 0), v2 = (0, 1), v3 = (0.6, 0.8). Mean (0.65, 0.45), normalised
# q = (0.8222, 0.5692): sim(., q) = 0.8222, 0.8222, 0.5692, 0.9487, so v3 is the first pick.
# sim to v3: v0 0.6, v1 0.6, v2 0.8.
# lam=0.5: v0/v1 0.5*0.8222 - 0.5*0.6 = 0.111 > v2 0.2846 - 0.4 = -0.115 -> v0 (tie with v1: earlier);
#          then v1 0.4111 - 0.5*1 = -0.089 > v2 -0.115 -> v1; then v2.
# lam=0.3: v0 0.2467 - 0.42 = -0.173 > v2 0.1708 - 0.56 = -0.389 -> v0;
#          then v1 0.2467 - 0.7*1 = -0.453 < v2 -0.389 -> v2 (the duplicate goes last).
# lam=0:   v0 -0.6 > v2 -0.8 -> v0; v1 -1 < v2 -0.8 -> v2; v1.
HAND = [[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.6, 0.8]]


@pytest.mark.parametrize(
    ("lam", "expected"), [(0.5, [3, 0, 1, 2]), (0.3, [3, 0, 2, 1]), (0.0, [3, 0, 2, 1]), (1.0, [3, 0, 1, 2])]
)
def test_mmr_order_hand_computed(lam, expected):
    assert mmr_order(np.array(HAND), 4, lam) == expected
    # scale does not matter (cosine), and torch input gives the same order
    assert mmr_order(torch.tensor(HAND) * torch.tensor([[2.0], [5.0], [0.5], [3.0]]), 4, lam) == expected


def test_mmr_order_k_bounds():
    assert mmr_order(np.array(HAND), 2, 0.3) == [3, 0]
    assert mmr_order(np.array(HAND), 9, 0.3) == [3, 0, 2, 1]
    assert mmr_order(np.array(HAND), 0, 0.5) == []


def test_turn_scores_by_hand():
    # token turns: -1 (BOS), turn 0 twice, turn 1, -1 (separator), turn 2; turn 3 has no token
    values = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert turn_scores(values, [-1, 0, 0, 1, -1, 2], 4) == [2.5, 4.0, 6.0, 0.0]


def test_top_k_ties_keep_the_earlier_turn():
    assert top_k([0.5, 0.9, 0.5, 0.9], 3) == [1, 3, 0]
    assert top_k([0.0, 0.0, 0.0], 2) == [0, 1]


def test_join_and_map_tokens_to_turns():
    text, spans = join_turns(as_turns(["ab", "cd"]))
    assert (text, spans) == ("ab\ncd", [(0, 2), (3, 5)])
    # special (0, 0); "a"; "b\n" overlaps turn 0; "\n" alone belongs to no turn; "cd"
    assert token_turns([(0, 0), (0, 1), (1, 3), (2, 3), (3, 5)], spans) == [-1, 0, 0, -1, 1]


def test_llmlingua2_label_parsing_and_word_positions():
    labeled = "Hi 0\t\t|\t\t, 1\t\t|\t\tcheap 1\t\t|\t\tthere 0"
    words, labels = parse_labels(labeled)
    assert (words, labels) == (["Hi", ",", "cheap", "there"], [0, 1, 1, 0])
    text = "Hi, cheap\nthere"
    offsets = word_offsets(text, words + ["zzz"])
    assert offsets == [(0, 2), (2, 3), (4, 9), (10, 15), (0, 0)]
    _, spans = join_turns(as_turns(["Hi, cheap", "there"]))
    assert turn_scores(labels, token_turns(offsets[:4], spans), 2) == [2 / 3, 0.0]
    assert parse_labels("") == ([], [])


# --- budgets and config -----------------------------------------------------------------------


@pytest.mark.parametrize("cls", [MMR, AttentionProxy, LongLLMLingua, LLMLingua2])
def test_content_selectors_floor_their_budget(cls):
    selector = cls()
    assert selector.rounding == "floor"
    assert selector.budget(7, 0.3) == 2
    assert selector.budget(5, 0.3) == 1  # round would keep 2
    assert selector.budget(7, 0.5) == 3  # round would keep 4
    assert selector.budget(3, 0.1) == 1  # never below one turn
    selector.validate()  # the defaults are valid


@pytest.mark.parametrize(
    ("selector", "named"),
    [
        (MMR(lam=1.5), "turn_selector.lam=1.5"),
        (MMR(lam="half"), "turn_selector.lam='half'"),
        (MMR(model=""), "turn_selector.model=''"),
        (AttentionProxy(max_tokens=1), "turn_selector.max_tokens=1"),
        (AttentionProxy(max_tokens=True), "turn_selector.max_tokens=True"),
        (AttentionProxy(model=""), "turn_selector.model=''"),
        (LongLLMLingua(model=""), "turn_selector.model=''"),
        (LLMLingua2(model="some/other-model"), "turn_selector.model='some/other-model'"),
        (LLMLingua2(rate=0.0), "turn_selector.rate=0"),
        (LLMLingua2(rate=1.2), "turn_selector.rate=1.2"),
    ],
)
def test_validate_names_the_bad_field(selector, named):
    with pytest.raises(ConfigError, match=named.replace(".", r"\.").replace("?", r"\?")):
        selector.validate()


def test_a_budget_of_every_turn_loads_no_model():
    turns = as_turns(DIALOGUE[:3])
    for selector in (MMR(model="/nonexistent"), AttentionProxy(), LongLLMLingua(model="/nonexistent")):
        assert selector.select(turns, 3, "d") == [0, 1, 2]


# --- MMR with the real MiniLM encoder ---------------------------------------------------------


def test_mmr_minilm_avoids_redundant_turns_and_is_deterministic():
    turns = as_turns(BOOKING)
    picked = MMR().select(turns, 2, "d")
    assert len(picked) == 2 and len(set(picked) & {0, 1, 2}) == 1  # one booking turn, not two
    assert MMR().select(turns, 2, "d") == picked  # deterministic
    # pure relevance keeps the near-duplicate booking turns, which dominate the mean
    assert set(MMR(lam=1.0).select(turns, 2, "d")) <= {0, 1, 2}


# --- attention proxy on the tiny random Llama -------------------------------------------------


def test_attention_received_matches_output_attentions(tiny):
    ids = torch.tensor([list(range(5, 40))])
    previous = tiny.model.config._attn_implementation
    tiny.model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            out = tiny.model(ids, output_attentions=True)
        expected = torch.stack([a[0].double().mean(0).sum(0) for a in out.attentions]).mean(0)
        assert torch.allclose(attention_received(tiny.model, ids), expected)
    finally:
        tiny.model.set_attn_implementation(previous)
    # each query row sums to 1, so the received attention sums to the number of queries
    assert math.isclose(float(expected.sum()), ids.shape[1], rel_tol=1e-6)


def test_attention_proxy_with_the_reader(tiny):
    turns = as_turns([f"turn {i}: " + "word " * (i % 4 + 1) for i in range(20)])
    ids = torch.tensor([list(range(5, 30))])
    with torch.no_grad():
        before = tiny.model(ids).logits
    implementation = tiny.model.config._attn_implementation
    selector = AttentionProxy()
    selector.validate()
    selector.bind(tiny)
    picked = selector.select(turns, 6, "d")
    assert len(picked) == 6 == len(set(picked)) and all(0 <= i < 20 for i in picked)
    assert selector.select(turns, 6, "d") == picked
    # the reader is left as it was: same attention implementation, same logits
    assert tiny.model.config._attn_implementation == implementation
    with torch.no_grad():
        assert torch.equal(tiny.model(ids).logits, before)


def test_attention_proxy_truncates_from_the_start(tiny):
    turns = as_turns(["a" * 30, "b" * 30, "c" * 30, "d" * 10, "e" * 10])
    selector = AttentionProxy(max_tokens=25)  # byte tokens: the last two turns and part of "c"
    selector.bind(tiny)
    assert set(selector.select(turns, 3, "d")) == {2, 3, 4}
    assert set(selector.select(turns, 2, "d")) <= {2, 3, 4}


def test_attention_proxy_with_its_own_model_folder(tiny, tmp_path):
    tiny.model.save_pretrained(tmp_path)
    tiny.tokenizer.save_pretrained(tmp_path)
    turns = as_turns(DIALOGUE)
    own = AttentionProxy(model=str(tmp_path))
    reader = AttentionProxy()
    reader.bind(tiny)
    # the same weights give the same turns, whether loaded eager or switched to eager
    assert own.select(turns, 3, "d") == reader.select(turns, 3, "d")


# --- LLMLingua ---------------------------------------------------------------------------------


def test_offline_tiktoken_installs_cl100k(tmp_path, monkeypatch):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    offline_tiktoken()
    url = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
    data = (tmp_path / hashlib.sha1(url.encode()).hexdigest()).read_bytes()
    assert (
        hashlib.sha256(data).hexdigest() == "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
    )
    offline_tiktoken()  # already there: a no-op


def test_offline_tiktoken_leaves_the_environment_and_uses_tiktokens_own_folder(tmp_path, monkeypatch):
    """Nothing is set in ``os.environ`` (a process's later children and tests see it as it was), and
    the file lands where tiktoken itself reads: its temp-folder default, else ``$DATA_GYM_CACHE_DIR``."""
    import tempfile

    import tiktoken

    from kvx.modeling.lingua import tiktoken_cache

    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)
    monkeypatch.delenv("DATA_GYM_CACHE_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    before = dict(os.environ)
    offline_tiktoken()
    assert dict(os.environ) == before
    assert tiktoken_cache() == tmp_path / "data-gym-cache"
    assert (tmp_path / "data-gym-cache" / hashlib.sha1(CL100K_URL.encode()).hexdigest()).is_file()
    assert tiktoken.get_encoding("cl100k_base").encode("hello world") == [15339, 1917]
    monkeypatch.setenv("DATA_GYM_CACHE_DIR", str(tmp_path / "gym"))
    assert tiktoken_cache() == tmp_path / "gym"
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")
    with pytest.raises(ConfigError, match=r"\$TIKTOKEN_CACHE_DIR is empty"):
        offline_tiktoken()


def test_llmlingua2_offline_is_unsupported(tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # no 30 s of retries
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    selector = LLMLingua2()
    selector.validate()
    for _ in range(2):  # the second call answers from the remembered reason
        with pytest.raises(
            Unsupported, match=f"LLMLingua-2 needs {LLMLINGUA2_MODEL} from the Hugging Face hub"
        ):
            selector.select(as_turns(DIALOGUE), 2, "d")


def test_llmlingua2_with_a_local_label_model(tmp_path, monkeypatch):
    from transformers import BertForTokenClassification, BertTokenizerFast

    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "tiktoken"))
    folder = tmp_path / "tiny-bert-base-multilingual-cased"  # llmlingua picks its word rules by name
    words = sorted({w.strip(".,?!") for text in DIALOGUE for w in text.split()} | set(".,?!"))
    save_tiny_bert(folder, words, BertForTokenClassification)

    turns = as_turns(DIALOGUE)
    selector = LLMLingua2(model=str(folder))
    selector.validate()
    picked = selector.select(turns, 3, "d")
    assert len(picked) == 3 == len(set(picked)) and all(0 <= i < len(turns) for i in picked)
    assert selector.select(turns, 3, "d") == picked
    # by hand: the labels of the whole dialogue, cut into turns by each turn's WordPiece word count
    text, _ = join_turns(turns)
    result = selector._load(use_llmlingua2=True).compress_prompt_llmlingua2(
        [text], rate=0.5, return_word_label=True
    )
    _, labels = parse_labels(result["fn_labeled_original_prompt"])
    assert 0 < sum(labels) < len(labels)
    tokenizer = BertTokenizerFast.from_pretrained(folder)
    counts = [sum(not t.startswith("##") for t in tokenizer.tokenize(turn.text)) for turn in turns]
    assert sum(counts) == len(labels)
    starts = np.cumsum([0, *counts])
    expected = [sum(labels[a:b]) / (b - a) for a, b in zip(starts[:-1], starts[1:])]
    assert selector.scores(turns) == pytest.approx(expected)
    # at rate 1 the label model keeps every word
    assert LLMLingua2(model=str(folder), rate=1.0).scores(turns) == [1.0] * len(turns)


def test_longllmlingua_scores_mean_token_loss_per_turn(tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "tiktoken"))
    folder = tmp_path / "lm"
    tiny.model.save_pretrained(folder)
    tiny.tokenizer.save_pretrained(folder)
    turns = as_turns(DIALOGUE)
    selector = LongLLMLingua(model=str(folder))
    picked = selector.select(turns, 3, "d")
    assert selector.select(turns, 3, "d") == picked

    # by hand: the byte tokenizer gives token j = character j of the (ASCII) text, no specials;
    # token j >= 1 has loss -log p(x_j | x_<j); a turn scores its tokens' mean loss
    text, spans = join_turns(turns)
    ids = torch.tensor([tiny.tokenizer.encode(text, add_special_tokens=False)])
    assert ids.shape[1] == len(text)
    with torch.no_grad():
        logits = tiny.model(ids).logits[0].float()
    loss = torch.nn.functional.cross_entropy(logits[:-1], ids[0, 1:], reduction="none")
    means = [float(loss[max(lo, 1) - 1 : hi - 1].mean()) for lo, hi in spans]
    assert selector.scores(turns) == pytest.approx(means, rel=1e-4)
    assert picked == sorted(range(len(turns)), key=lambda i: -means[i])[:3]


@pytest.mark.slow
@pytest.mark.embedded
def test_longllmlingua_with_smollm2():
    turns = as_turns(DIALOGUE)
    selector = LongLLMLingua()
    picked = selector.select(turns, 3, "d")
    assert len(picked) == 3 == len(set(picked)) and all(0 <= i < len(turns) for i in picked)
    assert LongLLMLingua().select(turns, 3, "d") == picked
