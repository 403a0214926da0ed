"""A chat model behind an OpenAI-compatible endpoint (vLLM, SGLang, TGI, llama.cpp, a hosted API).

``Endpoint.complete`` sends a list of requests concurrently (``max_concurrency`` at once) under a
requests- and tokens-per-minute limit, retries 408/409/429/5xx, connection errors and timeouts with
the OpenAI client's jittered exponential backoff (honouring ``Retry-After`` up to two minutes), and
returns one reply or one exception per request, in order. Every request is first looked up in a
response cache keyed by the exact request (endpoint, model, messages, parameters), so a resumed or
rerun sweep, or a panel that gains a reader, never pays for an answer twice.

The key is read from the environment variable the user names, held only by the client, and never
written anywhere: records carry the endpoint as ``scheme://host[:port][/path]`` alone.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from kvx.modeling.chat import ChatReply, ChatRequest

#: OpenAI finish reasons -> kvx's stop reasons (anything else, e.g. content_filter, stopped the model)
STOP_REASONS = {"length": "max_new_tokens"}


class EndpointError(RuntimeError):
    """A request that failed for good: the server's status and message, never the key."""


def public_url(base_url: str) -> str:
    """The endpoint as records may show it: no user, password, query or fragment."""
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


@dataclass(frozen=True)
class Prices:
    """Money per million prompt and completion tokens (a hosted API's price table)."""

    prompt_per_mtok: float | None = None
    completion_per_mtok: float | None = None
    currency: str = "USD"

    def of(self, prompt_tokens: int | None, completion_tokens: int | None) -> float | None:
        if self.prompt_per_mtok is None or self.completion_per_mtok is None:
            return None
        if prompt_tokens is None or completion_tokens is None:
            return None
        return (prompt_tokens * self.prompt_per_mtok + completion_tokens * self.completion_per_mtok) / 1e6


class RateLimit:
    """At most ``requests`` requests and ``tokens`` tokens in any sliding minute (None: no limit),
    shared by the threads of one endpoint."""

    def __init__(self, requests: int | None, tokens: int | None, clock: Callable[[], float] = time.monotonic):
        self.requests, self.tokens, self.clock = requests, tokens, clock
        self._sent: deque[tuple[float, int]] = deque()
        self._lock = threading.Lock()

    def wait(self, tokens: int, sleep: Callable[[float], None] = time.sleep) -> float:
        """Block until a request of ``tokens`` tokens fits; the seconds waited."""
        if self.requests is None and self.tokens is None:
            return 0.0
        waited = 0.0
        while True:
            with self._lock:
                now = self.clock()
                while self._sent and now - self._sent[0][0] >= 60.0:
                    self._sent.popleft()
                used = sum(n for _, n in self._sent)
                fits_requests = self.requests is None or len(self._sent) < self.requests
                # one request larger than the whole budget goes alone in an empty minute
                fits_tokens = self.tokens is None or used + tokens <= self.tokens or not self._sent
                if fits_requests and fits_tokens:
                    self._sent.append((now, tokens))
                    return waited
                pause = max(0.01, 60.0 - (now - self._sent[0][0]))
            sleep(pause)
            waited += pause


class ResponseCache:
    """Replies by request hash, one JSON file each under ``folder`` (written atomically: two
    workers storing the same reply write the same bytes)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def _path(self, key: str) -> Path:
        return self.folder / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        try:
            return json.loads(self._path(key).read_text())
        except (OSError, ValueError):  # missing, or damaged: asked again
            return None

    def put(self, key: str, reply: dict[str, Any]) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        # ASCII (every other character escaped): a reply holding a lone surrogate is still cached, and
        # the file reads back the same under any locale's encoding
        tmp.write_text(json.dumps(reply, sort_keys=True))
        os.replace(tmp, path)


@dataclass
class Endpoint:
    """One model on one OpenAI-compatible endpoint, with its sampling fixed (temperature 0 by default)."""

    base_url: str
    model: str
    api_key_env: str | None = None
    temperature: float = 0.0
    seed: int | None = None
    timeout_s: float = 120.0
    max_retries: int = 4
    max_concurrency: int = 4
    limit: RateLimit = field(default_factory=lambda: RateLimit(None, None))
    prices: Prices = field(default_factory=Prices)
    cache: ResponseCache | None = None
    #: counts tokens when the server reports no usage: (name, counter)
    counter: tuple[str, Callable[[str], int]] | None = None
    #: requests made and replies replayed since the last ``take_counts``
    counts: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.identity = {"endpoint": public_url(self.base_url), "model": self.model}
        self._client: Any = None
        self._lock = threading.Lock()

    def client(self) -> Any:
        """The OpenAI client, built once (it holds the key; nothing else does)."""
        if self._client is None:
            from openai import OpenAI

            _quiet()

            key = os.environ.get(self.api_key_env, "") if self.api_key_env else ""
            self._client = OpenAI(
                base_url=self.base_url,
                api_key=key or "none",  # local servers take any key; the SDK insists on one
                timeout=self.timeout_s,
                max_retries=self.max_retries,
            )
        return self._client

    def params(self, request: ChatRequest) -> dict[str, Any]:
        """The request's body, exactly as sent (and hashed for the cache)."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": request.as_messages(),
            "max_tokens": request.max_tokens,
            "temperature": self.temperature,
        }
        if self.seed is not None:
            body["seed"] = self.seed
        body.update(request.body_options())  # absent unless a request asks: older cache keys hold
        return body

    def request_key(self, request: ChatRequest) -> str:
        payload = {"endpoint": public_url(self.base_url), "body": self.params(request)}
        return hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False).encode()).hexdigest()

    def complete(
        self, requests: list[ChatRequest], desc: str = "", progress: bool = True
    ) -> list[ChatReply | Exception]:
        """One reply or one exception per request, in order; cached replies first, the rest sent
        ``max_concurrency`` at a time."""
        from tqdm.auto import tqdm

        out: list[ChatReply | Exception | None] = [None] * len(requests)
        todo: list[int] = []
        for i, request in enumerate(requests):
            stored = self.cache.get(self.request_key(request)) if self.cache is not None else None
            if stored is not None:
                out[i] = self._reply(stored, request, cached=True)
                self.counts["cache_hits"] += 1
            else:
                todo.append(i)
        if todo:
            bar = tqdm(total=len(todo), desc=desc or self.model, disable=not progress, leave=False)
            with ThreadPoolExecutor(max_workers=max(1, self.max_concurrency)) as pool:
                futures = {pool.submit(self._send, requests[i]): i for i in todo}
                for future in futures:  # in submission order; each waits for its own reply
                    out[futures[future]] = future.result()
                    bar.update(1)
            bar.close()
        return [r for r in out if r is not None]

    def _send(self, request: ChatRequest) -> ChatReply | Exception:
        """One request through the rate limit and the client's retries; a failure comes back as
        an ``EndpointError`` naming the server's status and message."""
        from openai import APIConnectionError, APIStatusError, APITimeoutError

        tokens = request.max_tokens + sum(len(c) for _, c in request.messages) // 4  # a rough reservation
        self.limit.wait(tokens)
        body = self.params(request)
        started = time.perf_counter()
        with self._lock:
            self.counts["requests"] += 1
        try:
            extra = {name: body.pop(name) for name in request.body_options()}  # any server's own fields too
            raw = self.client().chat.completions.with_raw_response.create(**body, extra_body=extra or None)
            completion = raw.parse()
            retries = int(getattr(raw, "retries_taken", 0))
        except APIStatusError as exc:
            return EndpointError(f"{public_url(self.base_url)} answered {exc.status_code}: {_message(exc)}")
        except APITimeoutError:
            return EndpointError(f"{public_url(self.base_url)} did not answer within {self.timeout_s:g} s")
        except APIConnectionError as exc:
            return EndpointError(f"{public_url(self.base_url)} could not be reached: {_message(exc)}")
        except Exception as exc:  # a body that is not a chat completion
            return EndpointError(
                f"{public_url(self.base_url)} sent a malformed reply: {type(exc).__name__}: {exc}"
            )
        stored = _stored(completion)
        if isinstance(stored, str):
            return EndpointError(f"{public_url(self.base_url)} sent a malformed reply: {stored}")
        stored.update(retries=retries, seconds=time.perf_counter() - started)
        if self.cache is not None:
            self.cache.put(self.request_key(request), stored)
        return self._reply(stored, request, cached=False)

    def _reply(self, stored: dict[str, Any], request: ChatRequest, cached: bool) -> ChatReply:
        """A reply as records keep it: the served facts, tokens (counted over the messages' text and
        the reply when the server reported none) and money."""
        prompt, completion = stored.get("prompt_tokens"), stored.get("completion_tokens")
        tokens_from = "server"
        if (prompt is None or completion is None) and self.counter is not None:
            name, count = self.counter
            prompt = sum(count(c) for _, c in request.messages)
            completion = count(stored["text"])
            tokens_from = f"counted:{name}"
        finish = stored.get("finish_reason")
        served = {
            **self.identity,
            "served_model": stored.get("served_model"),
            "system_fingerprint": stored.get("system_fingerprint"),
            "finish_reason": finish,
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "tokens_from": tokens_from if prompt is not None else "unreported",
            "price": self.prices.of(prompt, completion),
            "currency": self.prices.currency if self.prices.prompt_per_mtok is not None else None,
            "cached": cached,
            "retries": 0 if cached else int(stored.get("retries", 0)),
            "seconds": 0.0 if cached else float(stored.get("seconds", 0.0)),
        }
        return ChatReply(stored["text"], STOP_REASONS.get(finish or "", "eos"), served)


def _stored(completion: Any) -> dict[str, Any] | str:
    """What the cache keeps of a completion, or why it is not one."""
    choices = getattr(completion, "choices", None)
    if not choices:
        return "no choices"
    message = getattr(choices[0], "message", None)
    text = getattr(message, "content", None)
    if not isinstance(text, str):
        return f"choices[0].message.content is {type(text).__name__}, not text"
    usage = getattr(completion, "usage", None)
    return {
        "text": text,
        "finish_reason": getattr(choices[0], "finish_reason", None),
        "served_model": getattr(completion, "model", None),
        "system_fingerprint": getattr(completion, "system_fingerprint", None) or None,
        "prompt_tokens": getattr(usage, "prompt_tokens", None),
        "completion_tokens": getattr(usage, "completion_tokens", None),
    }


def _message(exc: Exception) -> str:
    """The server's own error message, one line, short."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        text = inner.get("message") if isinstance(inner, dict) else inner
        if text:
            return str(text).splitlines()[0][:300]
    return (str(exc).splitlines() or [type(exc).__name__])[0][:300]


def served_models(base_url: str, api_key_env: str | None, timeout_s: float = 5.0) -> list[dict[str, Any]]:
    """``GET /models``: what the server serves, or an ``EndpointError`` within ``timeout_s`` when
    nothing answers (the preflight's check, before any model loads)."""
    import httpx

    _quiet()
    headers = {}
    key = os.environ.get(api_key_env, "") if api_key_env else ""
    if key:
        headers["Authorization"] = f"Bearer {key}"
    url = base_url.rstrip("/") + "/models"
    try:
        response = httpx.get(url, headers=headers, timeout=timeout_s)
    except httpx.HTTPError as exc:
        raise EndpointError(
            f"nothing answers at {public_url(base_url)} within {timeout_s:g} s ({type(exc).__name__})"
        ) from None
    if response.status_code in (401, 403):
        raise EndpointError(f"{public_url(base_url)} refused the key ({response.status_code})")
    if response.status_code >= 400:
        return []  # some servers have no model list; the first request will tell
    try:
        data = response.json().get("data", [])
    except (ValueError, AttributeError):
        return []
    return [m for m in data if isinstance(m, dict)]


def _quiet() -> None:
    """The HTTP clients' one INFO line per request would drown the sweep's own log."""
    import logging

    for name in ("httpx", "httpx2", "openai"):
        logging.getLogger(name).setLevel(logging.WARNING)
