"""Chat models: what text-level stages ask of a model that only answers messages.

An endpoint reader (``kvx.modeling.endpoint``), a judge's model and a reader-backed text compressor
all go through ``ChatModel.complete``: a list of requests in, one ``ChatReply`` or one exception per
request out, in order. A failed request never stops the others; its exception carries the server's
message and is recorded as an ``error``, never scored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class ChatRequest:
    """One chat completion: the messages and the output budget (sampling is the model's own, fixed)."""

    messages: tuple[tuple[str, str], ...]  # (role, content) pairs, in order
    max_tokens: int
    #: more fields of the request body as (name, JSON text) pairs, e.g. a judge's ``response_format``
    #: and ``reasoning_effort``: an endpoint sends them (and keys its cache on them); an in-process
    #: model has no such switches and ignores them
    options: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(
        cls, messages: list[dict[str, str]], max_tokens: int, options: dict[str, Any] | None = None
    ) -> ChatRequest:
        extra = tuple((k, json.dumps(v, sort_keys=True)) for k, v in sorted((options or {}).items()))
        return cls(tuple((m["role"], m["content"]) for m in messages), max_tokens, extra)

    def as_messages(self) -> list[dict[str, str]]:
        return [{"role": role, "content": content} for role, content in self.messages]

    def body_options(self) -> dict[str, Any]:
        return {name: json.loads(value) for name, value in self.options}


@dataclass
class ChatReply:
    """One reply: its text, why it stopped, and what the server said about itself and the cost."""

    text: str
    #: "eos" (the model stopped) | "max_new_tokens" (the budget ran out), as kvx records it
    stop_reason: str
    #: what records keep (``Answer.served``): endpoint, served model, system fingerprint, finish reason,
    #: prompt and completion tokens and where they came from, money, cache hit, retries, seconds
    served: dict[str, Any] = field(default_factory=dict)


class ChatModel(Protocol):
    """A model that answers chat requests (served or in-process)."""

    #: the model's identity (plain JSON): what a judge or a compressor records as its model
    identity: dict[str, Any]

    def complete(
        self, requests: list[ChatRequest], desc: str = "", progress: bool = True
    ) -> list[ChatReply | Exception]: ...


class LocalChat:
    """An in-process reader as a chat model: each request's system and user messages rendered with the
    reader's chat template, decoded greedily (a judge or compressor model without a server)."""

    def __init__(self, reader: Any) -> None:  # a kvx.modeling.reader.LoadedReader
        self.reader = reader
        self.identity = {"in_process": reader.identity}

    def complete(
        self, requests: list[ChatRequest], desc: str = "", progress: bool = True
    ) -> list[ChatReply | Exception]:
        import torch
        from tqdm.auto import tqdm
        from transformers import DynamicCache

        from kvx.modeling.generation import greedy_decode

        out: list[ChatReply | Exception] = []
        for request in tqdm(requests, desc=desc or "chat", disable=not progress, leave=False):
            system = "\n\n".join(c for role, c in request.messages if role == "system")
            user = "\n\n".join(c for role, c in request.messages if role != "system")
            try:
                prompt = self.reader.encode(user, "", system=system)
                cache = DynamicCache()
                with torch.inference_mode(), self.reader.autocast():
                    self.reader.model(input_ids=prompt.context_ids, past_key_values=cache)
                    gen = greedy_decode(
                        self.reader.model,
                        self.reader.tokenizer,
                        cache,
                        prompt.question_ids,
                        int(prompt.context_ids.shape[1]),
                        request.max_tokens,
                    )
                served = {"prompt_tokens": int(prompt.context_ids.shape[1] + prompt.question_ids.shape[1])}
                served["completion_tokens"] = len(gen.token_ids)
                out.append(ChatReply(gen.text.strip(), gen.stop_reason, served))
            except Exception as exc:  # one failed request; the others go on
                out.append(exc)
        return out
