"""Run any kvpress press as a kvx compressor, through kvpress's own hook or on a captured prefill."""

from __future__ import annotations

import dataclasses
from abc import abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

from kvx.compressors.base import Compressor
from kvx.core.setting import RetainedMap, Setting, n_kept
from kvx.modeling.layers import attention_layers, clear_head_masks, compressed_flags, compressed_layers

if TYPE_CHECKING:
    import torch
    from kvpress.presses.base_press import BasePress
    from transformers import Cache, PreTrainedModel

    from kvx.modeling.capture import Capture


class KVPressCompressor(Compressor):
    """A kvpress press; subclasses say how to build it from ``ratio`` and their fields.

    Modules defining one import kvpress, torch and transformers inside methods only: Hydra imports
    every built-in to register its config node, and a bad value must fail in a second, not after
    kvpress's ten-second import.
    """

    fast_path: ClassVar[bool] = True
    #: presses that write into the keys they are given (ThinK zeroes channels)
    mutates_keys: ClassVar[bool] = False
    #: presses whose scores do not depend on the compression ratio (read in kvpress's source): a
    #: capture's scores then serve every ratio of the press instead of being computed per cell
    ratio_free_scores: ClassVar[bool] = False
    #: the press is a kvpress ScorerPress (a score per token and head): wrappers take only these
    scorer: ClassVar[bool] = False

    @abstractmethod
    def build_press(self, ratio: float) -> BasePress:
        """The configured press for this ratio."""

    def setting(self, ratio: float, n_context: int, model: PreTrainedModel) -> Setting:
        """The press's setting with the layers it compresses; the retained share counts the
        layers left whole (sliding-window ones) as keeping every token."""
        setting = self.press_setting(ratio, n_context, model)
        if not setting.supported:
            return setting
        layers, n_layers = compressed_layers(model), len(attention_layers(model))
        setting.method_parameter["compressed_layers"] = layers
        untouched = n_layers - len(layers)
        if setting.retained_share is not None and untouched:
            setting.retained_share = (setting.retained_share * len(layers) + untouched) / n_layers
        return setting

    def press_setting(self, ratio: float, n_context: int, model: PreTrainedModel) -> Setting:
        """What the press keeps in each layer it compresses."""
        kept = n_kept(n_context, ratio) if ratio > 0 else n_context
        return Setting(
            ratio=ratio,
            retained_share=kept / n_context,
            method_parameter={"kept_tokens_per_head": kept, **self.press_fields()},
        )

    def press_fields(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    def _press(self, ratio: float, memo: dict | None = None) -> BasePress:
        """Build the press and record the scores its top-k uses (KVDiagnosis: measured maps);
        with ``memo`` (a capture's, for ratio-free presses) each layer's scores are computed once."""
        from kvpress import ScorerPress

        press = self.build_press(ratio)
        object.__setattr__(self, "_last", (press, {}))
        if isinstance(press, ScorerPress):
            scores: dict[int, torch.Tensor] = self._last[1]
            original = press.score
            memo = memo if self.ratio_free_scores else None
            config = repr(self)  # the press's fields; the ratio is not one of them

            def score(module: torch.nn.Module, *args: Any, **kwargs: Any) -> torch.Tensor:
                out = memo.get((config, module.layer_idx)) if memo is not None else None
                if out is None:
                    out = original(module, *args, **kwargs)
                    if memo is not None:
                        memo[(config, module.layer_idx)] = out
                scores[module.layer_idx] = out
                return out

            object.__setattr__(press, "score", score)
        return press

    def retained_map(
        self, model: PreTrainedModel, cache: Cache, capture: Capture | None, ratio: float
    ) -> RetainedMap:
        import torch
        from kvpress import ScorerPress

        press, scores = getattr(self, "_last", (None, {}))
        if not isinstance(press, ScorerPress):
            return RetainedMap("not_applicable", reason=f"{type(press).__name__} is not a ScorerPress")
        modules, layers = attention_layers(model), compressed_layers(model)
        # nothing scored (ratio 0, or no layer compressed): layer 0 holds every position
        n_positions = next(iter(scores.values())).shape[-1] if scores else cache.layers[0].keys.shape[2]
        heads = cache.layers[0].keys.shape[1]
        mask = torch.zeros(len(modules) * heads, n_positions, dtype=torch.bool)
        rows: list[torch.Tensor] = []
        for idx, module in enumerate(modules):
            # kvpress returns before scoring at ratio 0, and layers left whole are never scored
            if ratio == 0 or idx not in layers:
                mask[idx * heads : (idx + 1) * heads] = True
                rows.append(torch.arange(n_positions).expand(heads, -1))
                continue
            layer_scores = scores[idx][0]
            k = press.get_layer_budget(module, n_positions) if hasattr(press, "get_layer_budget") else None
            kept = layer_scores.topk(k or n_kept(n_positions, ratio), dim=-1).indices  # the press's own top-k
            mask[idx * heads : (idx + 1) * heads].scatter_(1, kept.cpu(), True)
            rows.append(kept.cpu())  # the press gathers cache rows in this order
        return RetainedMap("measured", mask, rows=rows, compressed=compressed_flags(model))

    def new_cache(self, model: PreTrainedModel) -> Cache:
        """The cache the prefill fills (kvpress's pipeline takes any: ``cache=QuantizedCache(...)``)."""
        from transformers import DynamicCache

        return DynamicCache()

    def prefill(self, model: PreTrainedModel, context_ids: torch.Tensor, ratio: float) -> Cache:
        clear_head_masks(model)
        press = self._press(ratio)
        layers = set(compressed_layers(model))
        hook = press.forward_hook

        def forward_hook(module: torch.nn.Module, args: tuple, kwargs: dict, output: Any) -> Any:
            """kvpress hooks every layer of a text-only Gemma3: leave the ones kvx does not compress."""
            return hook(module, args, kwargs, output) if module.layer_idx in layers else output

        object.__setattr__(press, "forward_hook", forward_hook)  # press(model) registers this attribute
        cache = self.new_cache(model)
        with press(model):
            model.model(input_ids=context_ids, past_key_values=cache)
        return cache

    def compress_captured(self, model: PreTrainedModel, capture: Capture, ratio: float) -> Cache:
        from transformers import DynamicCache

        from kvx.modeling.capture import append_layer

        clear_head_masks(model)
        press = self._press(ratio, capture.scores)
        press.post_init_from_model(model)
        layers = set(compressed_layers(model))
        cache = DynamicCache()
        for idx, module in enumerate(attention_layers(model)):
            layer = capture.layers[idx]
            if idx not in layers:
                append_layer(cache, layer.keys, layer.values)
                continue
            keys = layer.keys.clone() if self.mutates_keys else layer.keys
            kwargs = {
                "hidden_states": layer.hidden_states,
                "position_embeddings": layer.position_embeddings,
                "cache_position": capture.cache_position,
                "past_key_values": cache,
            }
            keys, values = press.compress(module, layer.hidden_states, keys, layer.values, None, kwargs)
            append_layer(cache, keys, values)
        return cache
