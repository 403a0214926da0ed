"""H2O-inspired attention proxy (TPBench §5): keep the turns whose tokens receive the most attention.

The turn texts are joined by newlines and read in one forward pass of a causal LM with eager
attention. Each layer's attention weights (what ``output_attentions=True`` returns) are averaged over
heads and summed over query positions, giving the attention each key token receives (H2O's
accumulated score, Zhang et al. 2023); the layers are averaged, and a turn scores the mean over its
tokens. A forward hook reduces each layer as it runs, so the ``layers x heads x n x n`` weights never
sit in memory together. The helpers that map tokens to turns are shared with the LLMLingua selectors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from kvx.core.checks import check_int
from kvx.core.errors import ConfigError
from kvx.core.ranking import top_k
from kvx.modeling.hub import hub_model
from kvx.turn_selectors.base import Turn, TurnSelector, Unsupported

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from kvx.modeling.reader import LoadedReader


def join_turns(turns: Sequence[Turn]) -> tuple[str, list[tuple[int, int]]]:
    """The newline-joined turn texts and each turn's [start, end) character span in them."""
    spans, start = [], 0
    for turn in turns:
        spans.append((start, start + len(turn.text)))
        start += len(turn.text) + 1
    return "\n".join(turn.text for turn in turns), spans


def token_turns(offsets: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int]]) -> list[int]:
    """Per token, the first turn whose characters it overlaps; -1 for special tokens (empty offsets)
    and tokens made only of the newlines between turns."""
    owners = []
    for a, b in offsets:
        owner = next((i for i, (lo, hi) in enumerate(spans) if a < hi and b > lo), -1) if b > a else -1
        owners.append(owner)
    return owners


def turn_scores(values: Sequence[float], token_turn: Sequence[int], n_turns: int) -> list[float]:
    """Mean of the per-token ``values`` over each turn's tokens (``token_turn[i]`` = the turn of
    token i, -1 for none); 0.0 for a turn with no scored token, the lowest score both the attention
    and the loss scores can take."""
    sums, counts = [0.0] * n_turns, [0] * n_turns
    for value, turn in zip(values, token_turn, strict=True):
        if turn >= 0:
            sums[turn] += float(value)
            counts[turn] += 1
    return [s / c if c else 0.0 for s, c in zip(sums, counts)]


def attention_received(model: PreTrainedModel, input_ids: torch.Tensor) -> torch.Tensor:
    """Per key token of ``input_ids`` (1, n): the attention it receives, mean over heads, summed over
    queries, mean over layers. Hooks every outermost ``*Attention`` module whose output carries the
    (batch, heads, q, k) weights, as eager attention returns them."""
    import torch

    modules = {name: m for name, m in model.named_modules() if type(m).__name__.endswith("Attention")}
    outer = [m for name, m in modules.items() if not any(name.startswith(other + ".") for other in modules)]
    total = torch.zeros(input_ids.shape[1], dtype=torch.float64)
    layers = 0

    def reduce(module: Any, args: Any, output: Any) -> None:
        nonlocal layers
        weights = output[1] if isinstance(output, tuple) and len(output) > 1 else None
        if isinstance(weights, torch.Tensor) and weights.dim() == 4:
            # sum over queries first (float32 accumulation, no copy of the n x n weights)
            total.add_(weights[0].sum(dim=1, dtype=torch.float32).double().mean(0).cpu())
            layers += 1

    handles = [module.register_forward_hook(reduce) for module in outer]
    try:
        with torch.no_grad():
            model(input_ids=input_ids, use_cache=False)
    finally:
        for handle in handles:
            handle.remove()
    if not layers:
        raise Unsupported(f"{type(model).__name__} returns no attention weights to score turns with")
    return total / layers


@dataclass
class AttentionProxy(TurnSelector):
    """TPBench's H2O-inspired attention proxy: the ``k`` turns whose tokens receive the most
    attention (module docstring). Ties keep the earlier turn.

    Dialogues longer than ``max_tokens`` tokens are truncated from the start (the tokenizer's
    leading special tokens, such as BOS, stay): the earliest turns then score 0 and are dropped
    first, while the attention matrix stays bounded.
    """

    rounding: ClassVar[str] = "floor"

    #: "reader": the bound reader's model (switched to eager attention for the pass, then back);
    #: otherwise a local Hugging Face folder or hub id (e.g. gpt2, the paper's FMTS feature model)
    model: str = "reader"
    max_tokens: int = 4096
    _reader: Any = field(default=None, init=False, repr=False, compare=False)
    _own: Any = field(default=None, init=False, repr=False, compare=False)

    def validate(self) -> None:
        if not isinstance(self.model, str) or not self.model:
            raise ConfigError(f"turn_selector.model={self.model!r} must be 'reader' or a model folder/hub id")
        check_int("turn_selector.max_tokens", self.max_tokens, 2)

    def bind(self, reader: LoadedReader) -> None:
        self._reader = reader

    @property
    def uses_reader(self) -> bool:
        """With ``model=reader`` the kept turns depend on the panel's reader."""
        return self.model == "reader"

    def select(self, turns: Sequence[Turn], k: int, dialogue_id: str) -> list[int]:
        return list(range(len(turns))) if k >= len(turns) else top_k(self.scores(turns), k)

    def scores(self, turns: Sequence[Turn]) -> list[float]:
        """Per turn, the mean attention its tokens receive."""
        import torch

        text, spans = join_turns(turns)
        model, tok = self._model()
        enc = tok(text, return_offsets_mapping=True)
        ids, offsets = enc["input_ids"], enc["offset_mapping"]
        lead = next((i for i, (a, b) in enumerate(offsets) if b > a), len(ids))
        keep = list(range(lead)) + list(range(lead + max(0, len(ids) - self.max_tokens), len(ids)))
        input_ids = torch.tensor([[ids[i] for i in keep]], device=next(model.parameters()).device)
        received = self._received(model, input_ids)
        owners = token_turns([offsets[i] for i in keep], spans)
        return turn_scores(received.tolist(), owners, len(turns))

    def _model(self) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
        if self.model == "reader":
            if self._reader is None:
                raise RuntimeError("turn_selector=attention_proxy with model=reader needs bind(reader) first")
            return self._reader.model, self._reader.tokenizer
        if self._own is None:
            model, tok = hub_model("the attention proxy", self.model, _load_eager)
            device = self._reader.device if self._reader is not None else "cpu"
            self._own = model.to(device).eval(), tok
        return self._own

    def _received(self, model: PreTrainedModel, input_ids: torch.Tensor) -> torch.Tensor:
        if self.model != "reader":
            return attention_received(model, input_ids)
        assert self._reader is not None
        previous = model.config._attn_implementation
        model.set_attn_implementation("eager")
        try:
            with self._reader.autocast():
                return attention_received(model, input_ids)
        finally:
            model.set_attn_implementation(previous)


def _load_eager(model: str) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A feature model and tokenizer with eager attention (the proxy reads attention weights)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    return AutoModelForCausalLM.from_pretrained(model, attn_implementation="eager"), tok
