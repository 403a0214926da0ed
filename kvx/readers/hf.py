"""Any Hugging Face causal LM by id and revision: the reader real users run on GPUs."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kvx.core.errors import ConfigError
from kvx.readers.base import Reader

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

#: torch dtype names to load in, by precision
LOAD_DTYPES = {"bf16-true": "bfloat16", "16-true": "float16"}
COMMIT = re.compile(r"^[0-9a-f]{40}$")


@dataclass
class HFReader(Reader):
    """``reader=hf reader.model_id=Qwen/Qwen3-8B reader.revision=<sha> reader.precision=bf16-true``.

    The resolved commit of ``revision`` (a hub id) or the sha256 of the folder's files (a local
    model folder, where a revision means nothing) and the chat template's sha256 are part of the
    cell identity, so "main" is never ambiguous and two folders are never one reader.
    """

    model_id: str = ""
    revision: str = "main"
    attn_implementation: str = "sdpa"
    trust_remote_code: bool = False
    accelerator: str = "auto"
    precision: str = "bf16-true"

    def validate(self) -> None:
        super().validate()
        if not self.model_id:
            raise ConfigError("reader=hf needs reader.model_id=<hub id or local folder>")

    def label(self, name: str) -> str:
        return f"{name}:{self.model_id}"

    def family(self, name: str) -> str:
        """The hub organisation (``Qwen/Qwen3-8B`` -> ``qwen``); a local folder's ``model_type``.
        ``python -m kvx.aggregate --family READER=FAMILY`` overrides either."""
        folder = Path(self.model_id)
        if not folder.is_dir():
            return self.model_id.split("/", 1)[0].lower()
        config = folder / "config.json"
        model_type = json.loads(config.read_text()).get("model_type") if config.is_file() else None
        return str(model_type or folder.name)

    def fingerprint(self) -> dict[str, str]:
        folder = Path(self.model_id)
        if folder.is_dir():
            resolved = {"weights_sha256": folder_sha256(folder)}
        else:
            resolved = {"revision": resolve_revision(self.model_id, self.revision)}
        tok = self._tokenizer(resolved.get("revision", self.revision))
        template = tok.chat_template if isinstance(tok.chat_template, str) else json.dumps(tok.chat_template)
        resolved["chat_template_sha256"] = hashlib.sha256((template or "").encode()).hexdigest()
        return resolved

    def _tokenizer(self, revision: str) -> PreTrainedTokenizerBase:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(
            self.model_id, revision=revision, trust_remote_code=self.trust_remote_code
        )

    def token_counter(self) -> Callable[[str], int]:
        """The tokenizer ``load_model`` loads (same id and revision), without the weights."""
        from kvx.modeling.reader import token_count

        tok = self._tokenizer(self.revision)
        return lambda text: token_count(tok, text)

    def load_model(self) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, str]:
        import torch
        from transformers import AutoModelForCausalLM

        tok = self._tokenizer(self.revision)
        model = AutoModelForCausalLM.from_pretrained(
            self.model_id,
            revision=self.revision,
            dtype=getattr(torch, LOAD_DTYPES.get(self.precision, "float32")),  # never materialise 8B in fp32
            attn_implementation=self.attn_implementation,
            trust_remote_code=self.trust_remote_code,
        )
        if Path(self.model_id).is_dir():
            return model, tok, f"folder-sha256:{folder_sha256(Path(self.model_id))}"
        resolved = getattr(model.config, "_commit_hash", None) or self.revision
        return model, tok, str(resolved)


def resolve_revision(model_id: str, revision: str) -> str:
    """The commit a hub revision (branch or tag) points to: from the local hub cache, else the hub."""
    if COMMIT.match(revision):
        return revision
    from huggingface_hub import constants

    ref = Path(constants.HF_HUB_CACHE) / f"models--{model_id.replace('/', '--')}" / "refs" / revision
    if ref.is_file():
        return ref.read_text().strip()
    if not constants.HF_HUB_OFFLINE:
        try:
            from huggingface_hub import HfApi

            return str(HfApi().model_info(model_id, revision=revision, timeout=20).sha)
        except Exception as exc:  # no network, unknown id: the user must pin a commit
            reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
    else:
        reason = "HF_HUB_OFFLINE is set"
    raise ConfigError(
        f"reader.revision={revision!r} of {model_id!r} cannot be resolved to a commit ({reason}); "
        "pass reader.revision=<40-hex commit sha> or a local model folder as reader.model_id"
    )


def folder_sha256(folder: Path) -> str:
    """sha256 over every file of a model folder (relative path + content hash), remembered per
    (path, size, mtime) in the kvx cache so a multi-GB folder is hashed once."""
    from kvx.core.cache import cache_dir
    from kvx.modeling.weights import sha256

    memo_path = cache_dir() / "folder-hashes.json"
    try:
        memo = json.loads(memo_path.read_text())
    except (OSError, ValueError):
        memo = {}
    digest, changed = hashlib.sha256(), False
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.startswith(".")):
        stat = path.stat()
        key = f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"
        if key not in memo:
            memo[key], changed = sha256(path), True
        digest.update(f"{path.relative_to(folder).as_posix()}\0{memo[key]}\n".encode())
    if changed:
        memo_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo_path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(memo))
        os.replace(tmp, memo_path)
    return digest.hexdigest()
