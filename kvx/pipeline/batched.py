"""Greedy decoding of several caches of one source in one batched forward per step.

The FullCache control and every compressed cache of a source are fed the same question, so each
step can run as one forward over a batch instead of one forward per cache. The answers must not
depend on the batch they were decoded in, so every row is computed with the same arithmetic as
when decoded alone:

- linear layers run as a batched matrix product with one row per matrix (bit-identical to the
  unbatched product; checked once per layer shape, and a layer that differs runs row by row);
- attention runs per row on that row's own cache (``DynamicCache``, uneven layer lengths and all)
  with the per-layer causal mask, exactly as ``kvx_sdpa`` does alone;
- the LM head, the one product where the batched kernel is much faster, is computed batched, and a
  row's argmax is kept only when its top-two margin exceeds twice the largest rounding difference
  two summation orders can make (``2 K u |h| max|w|``); otherwise the row is recomputed alone.

Caches that carry state outside their tensors (AdaKV head masks on the attention modules,
quantized caches) or need another attention implementation are not batched (``batchable``).
"""

from __future__ import annotations

import time
import types
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from transformers import AttentionInterface, Cache, DynamicCache, PreTrainedModel, PreTrainedTokenizerBase
from transformers.cache_utils import DynamicLayer

from kvx.modeling import attention
from kvx.modeling.generation import Generation, eos_ids

NAME = "kvx_rows"
#: attention implementations whose unbatched decode the per-row attention reproduces exactly
SAME_ATTENTION = (None, "sdpa", attention.NAME)
_UNIT_ROUNDOFF = 2.0**-24  # float32
#: id(head weight) -> (the weight, its largest row norm); tensors compare elementwise (no WeakKeyDictionary)
_ROW_NORM: dict[int, tuple[weakref.ref, float]] = {}


@dataclass
class DecodeJob:
    """One cache to decode: its feed (question, or its last token when query-aware) and start."""

    cache: Cache
    feed: torch.Tensor  # (1, q)
    start: int
    max_new_tokens: int


def plain_head(model: PreTrainedModel) -> bool:
    """The logits are the LM head's product and nothing else (no bias, no soft-capping)."""
    head = model.get_output_embeddings()
    return (
        type(head) is torch.nn.Linear
        and head.bias is None
        and getattr(model.config, "final_logit_softcapping", None) is None
    )


def batchable(cache: Cache, attn_impl: str | None, model: PreTrainedModel) -> str | None:
    """Why this cache must decode alone, or None when it can join a batch."""
    if not plain_head(model):
        return "a head with bias or soft-capping decodes alone"
    if type(cache) is not DynamicCache:
        return f"{type(cache).__name__} decodes alone"
    if attn_impl not in SAME_ATTENTION:
        return f"attention {attn_impl} decodes alone"
    if any(getattr(m, "masked_key_indices", None) is not None for m in model.modules()):
        return "per-head masks (AdaKV) decode alone"
    if model.dtype != torch.float32:
        return f"{model.dtype} decodes alone"
    return None


class _RowCache:
    """Each row's own cache; the per-row attention reads their tensors, never a padded batch.

    A plain layer's new K/V go into a buffer sized for the whole answer, and the layer holds a view
    of its filled part: ``DynamicLayer.update`` concatenates, copying the layer's whole cache every
    step (at 4k tokens that copy costs as much as the attention) and allocating a fresh tensor each
    time. The values are the same, so the answers are too."""

    def __init__(self, caches: list[Cache], rows: list[int], buffers: dict, extra: list[int]) -> None:
        #: per row: the tokens its buffers must hold beyond the cache (its feed and answer)
        self.caches, self.rows, self.buffers, self.extra = caches, rows, buffers, extra
        self.is_compileable = False

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0  # positions come from position_ids; no mask is built for this implementation

    def update(self, keys: torch.Tensor, values: torch.Tensor, layer_idx: int, kwargs: Any = None) -> tuple:
        out = [
            self._append(c, row, keys[b : b + 1], values[b : b + 1], layer_idx, kwargs)
            for b, (c, row) in enumerate(zip(self.caches, self.rows))
        ]
        return [k for k, _ in out], [v for _, v in out]

    def _append(
        self, cache: Cache, row: int, k: torch.Tensor, v: torch.Tensor, idx: int, kwargs: Any
    ) -> tuple:
        layer = cache.layers[idx] if idx < len(cache.layers) else None
        if not _plain(layer):
            return cache.update(k, v, idx, kwargs)
        n, q = layer.keys.shape[-2], k.shape[-2]
        held = self.buffers.get((row, idx))
        if held is None or held[0].shape[-2] < n + q:
            size = n + max(q, self.extra[row])
            held = tuple(t.new_empty((*t.shape[:-2], size, t.shape[-1])) for t in (layer.keys, layer.values))
            held[0][..., :n, :].copy_(layer.keys)
            held[1][..., :n, :].copy_(layer.values)
            self.buffers[(row, idx)] = held
        held[0][..., n : n + q, :].copy_(k)
        held[1][..., n : n + q, :].copy_(v)
        layer.keys, layer.values = held[0][..., : n + q, :], held[1][..., : n + q, :]
        return layer.keys, layer.values


def _rows_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    keys: list[torch.Tensor],
    values: list[torch.Tensor],
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    outs = [
        attention.per_layer_causal_sdpa(module, query[b : b + 1], k, v, None, dropout, **kwargs)[0]
        for b, (k, v) in enumerate(zip(keys, values))
    ]
    return torch.cat(outs), None


AttentionInterface.register(NAME, _rows_attention)


class _RowLinear:
    """``forward`` for a Linear layer inside a batched decode: one row per matrix product."""

    exact: dict[tuple, bool] = {}  # (in, out, bias, feed length) -> batched product equals rows

    @staticmethod
    def forward(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] == 1:
            return F.linear(x, self.weight, self.bias)
        key = (self.in_features, self.out_features, self.bias is not None, x.shape[1])
        if _RowLinear.exact.get(key) is False:
            return torch.cat([F.linear(x[b : b + 1], self.weight, self.bias) for b in range(x.shape[0])])
        wt = self.weight.t().expand(x.shape[0], -1, -1)
        if self.bias is None:
            out = torch.bmm(x, wt)
        else:
            out = torch.baddbmm(self.bias.expand(x.shape[0], x.shape[1], -1), x, wt)
        if key not in _RowLinear.exact:
            rows = torch.cat([F.linear(x[b : b + 1], self.weight, self.bias) for b in range(x.shape[0])])
            _RowLinear.exact[key] = bool(torch.equal(out, rows))
            return rows
        return out


@contextmanager
def _rows(model: PreTrainedModel) -> Iterator[None]:
    """Row-exact linears in the decoder and per-row attention, for the duration of one decode."""
    linears = [m for m in model.model.modules() if isinstance(m, torch.nn.Linear)]
    own = {id(m): m.__dict__["forward"] for m in linears if "forward" in m.__dict__}
    for m in linears:
        m.forward = types.MethodType(_RowLinear.forward, m)
    previous = model.config._attn_implementation
    model.set_attn_implementation(NAME)
    try:
        yield
    finally:
        model.set_attn_implementation(previous)
        for m in linears:
            del m.forward
            if id(m) in own:
                m.forward = own[id(m)]


class _Head:
    """The LM head's argmax per row: batched, and recomputed alone where rounding could flip it."""

    def __init__(self, model: PreTrainedModel) -> None:
        weight = model.get_output_embeddings().weight
        self.weight = weight.detach()
        k = self.weight.shape[1]
        gamma = k * _UNIT_ROUNDOFF / (1 - k * _UNIT_ROUNDOFF)  # one dot product's relative error bound
        # the largest row norm reads the whole head (113 MB on SmolLM2): once per weight, not per source
        cached = _ROW_NORM.get(id(weight))
        if cached is None or cached[0]() is not weight:
            cached = _ROW_NORM[id(weight)] = (weakref.ref(weight), float(self.weight.norm(dim=1).max()))
        self.tolerance = 2 * gamma * cached[1]
        self.recomputed = 0

    def logits_alone(self, hidden: torch.Tensor) -> torch.Tensor:
        """(rows, vocab) logits, each row as an unbatched forward computes it."""
        return torch.cat([F.linear(hidden[b : b + 1], self.weight) for b in range(hidden.shape[0])])[:, -1]

    def argmax(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = F.linear(hidden[:, -1], self.weight)
        top = logits.topk(2, dim=-1).values
        bound = 2 * self.tolerance * hidden[:, -1].norm(dim=-1)
        tokens = logits.argmax(-1)
        for b in torch.nonzero(top[:, 0] - top[:, 1] <= bound).flatten().tolist():
            self.recomputed += 1
            tokens[b] = self.logits_alone(hidden[b : b + 1])[0].argmax()
        return tokens


def _plain(layer: Any) -> bool:
    """A dense layer holding (batch, heads, tokens, dim) tensors, which decoding may buffer."""
    return type(layer) is DynamicLayer and layer.is_initialized and layer.keys.dim() == 4


def _state(layer: Any) -> int | dict:
    return layer.keys.shape[-2] if _plain(layer) else dict(vars(layer))


@torch.inference_mode()
def greedy_decode_batch(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, jobs: list[DecodeJob]
) -> list[Generation]:
    """Decode every job greedily in one forward per step; each answer (tokens, text, stop reason,
    first logits) equals ``greedy_decode`` on that job alone. Jobs must share their feed ids."""
    feed = jobs[0].feed
    if any(not torch.equal(j.feed, feed) for j in jobs):
        raise ValueError("batched decoding needs one feed for every cache")
    stop = set(eos_ids(model))
    head = _Head(model)
    n = len(jobs)
    generated: list[list[int]] = [[] for _ in range(n)]
    reasons = ["max_new_tokens"] * n
    firsts: list[torch.Tensor | None] = [None] * n
    active = list(range(n))
    device = feed.device
    positions = torch.tensor([[j.start + i for i in range(feed.shape[1])] for j in jobs], device=device)
    ids = feed.expand(n, -1)
    step = 0
    # each layer's state as it was, so a batch that fails leaves every cache as it found it for
    # decoding one by one: a plain layer's length (its filled buffer starts with the old values;
    # holding the old tensors would keep two copies of every cache while decoding), any other
    # layer's attributes (decoding replaces their tensors, it does not write into them)
    saved = [[_state(layer) for layer in j.cache.layers] for j in jobs]
    buffers: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}
    extra = [feed.shape[1] + j.max_new_tokens for j in jobs]
    times: list[list[float]] = [[] for _ in range(n)]  # per row: each step's milliseconds
    try:
        with _rows(model):
            while active:
                started = time.perf_counter()
                caches = _RowCache([jobs[b].cache for b in active], active, buffers, extra)
                out = model.model(
                    input_ids=ids, past_key_values=caches, position_ids=positions, use_cache=True
                )
                hidden = out.last_hidden_state[:, -1:]
                if step == 0:  # the first logits are kept (diagnostics read them): computed alone, exactly
                    logits = head.logits_alone(hidden)
                    for row, b in enumerate(active):
                        firsts[b] = logits[row]
                    tokens = logits.argmax(-1)
                else:
                    tokens = head.argmax(hidden)
                still = []
                chosen = tokens.tolist()  # waits for the device: the step's time is complete
                elapsed = 1000 * (time.perf_counter() - started)
                for row, b in enumerate(active):
                    token = chosen[row]
                    generated[b].append(token)
                    times[b].append(elapsed)
                    if token in stop:
                        reasons[b] = "eos"
                    elif len(generated[b]) < jobs[b].max_new_tokens:
                        still.append(row)
                step += 1
                keep = torch.tensor(still, dtype=torch.long, device=device)
                ids = tokens[keep].view(-1, 1)
                positions = positions[keep, -1:] + 1
                active = [active[row] for row in still]
    except BaseException:
        for job, layers in zip(jobs, saved):
            for layer, state in zip(job.cache.layers, layers):
                if isinstance(state, int):
                    layer.keys, layer.values = layer.keys[..., :state, :], layer.values[..., :state, :]
                else:
                    layer.__dict__.update(state)
        raise
    return [
        Generation(g, tokenizer.decode(g, skip_special_tokens=True), r, f, t[0], t[1:], n)
        for g, r, f, t in zip(generated, reasons, firsts, times)
    ]
