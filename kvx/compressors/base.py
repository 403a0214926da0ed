"""Compressor interface.

A compressor is a small dataclass (its fields are the Hydra node ``press.<field>``) that turns a
context into a cache. Two ways exist:

* ``prefill`` (the hook path) runs the context through the model with the compression active;
  every compressor supports it.
* ``compress_captured`` (the fast path) builds the same cache from one captured full prefill:
  kvpress presses edit the cache only after each layer's attention has run, so the hidden
  states of a compressed prefill are those of the full prefill. Compressors that set
  ``fast_path = True`` must produce exactly the hook path's cache (tests check this).
"""

from __future__ import annotations

import contextlib
import dataclasses
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

from kvx.core.checks import check_ratio as check_ratio  # re-exported: plugins import it from here
from kvx.core.identity import SettingSpec
from kvx.core.setting import RetainedMap, Setting
from kvx.core.setting import n_kept as n_kept  # re-exported: the compressor API
from kvx.core.setting import ratio_for_budget as ratio_for_budget

if TYPE_CHECKING:
    import torch
    from transformers import Cache, PreTrainedModel

    from kvx.modeling.capture import Capture


def slot(default: str) -> Any:
    """A press another press wraps: a nested config group (``press/base=tova``, fields as
    ``press.base.window_size=32``) whose option is ``default`` unless chosen."""
    return dataclasses.field(default=None, metadata={"slot": default})


class Compressor(ABC):
    """Base class for ``kvx.compressors`` plugins."""

    fast_path: ClassVar[bool] = False
    #: True for the FullCache itself: the one compressor a served reader (no cache in this process) runs
    keeps_everything: ClassVar[bool] = False
    #: a registered attention implementation the reader must switch to while this compressor runs
    attn_implementation: ClassVar[str | None] = None
    #: decode positions continue from the compressed cache length (key re-rotation), not the original
    decode_from_cache_length: ClassVar[bool] = False

    def validate(self) -> None:  # noqa: B027 - optional hook, presets without fields have nothing to check
        """Reject invalid fields before any model loads (``ratio`` and ``budget_tokens`` are checked
        once for every compressor by ``kvx.cli.preflight``); raise ``kvx.core.errors.ConfigError``."""

    #: why a fixed token budget does not apply to this compressor ("" = it does)
    budget_unsupported: ClassVar[str] = ""

    @abstractmethod
    def setting(self, ratio: float, n_context: int, model: PreTrainedModel) -> Setting:
        """Interpret ``ratio`` for this method; unsupported settings say why."""

    #: its own fields fix what it keeps (a threshold, a target size, HQQ's ``press.bits``): the run's
    #: ratio is not used, and the ratios it ignores are one cell
    ratio_unused: ClassVar[bool] = False

    def setting_spec(self, ratio: float, budget_tokens: int | None) -> SettingSpec:
        """The setting as the cell identity sees it: a token budget, a ratio, or ``none`` for
        compressors whose own fields fix what they keep (so ratios they ignore are one cell)."""
        if budget_tokens is not None:
            return SettingSpec("budget_tokens", budget_tokens)
        return SettingSpec("none", None) if self.ratio_unused else SettingSpec("ratio", ratio)

    def budget_ratio(self, budget: int, n_context: int) -> float:
        """The kvpress ratio that keeps ``budget`` of ``n_context`` tokens per head."""
        return ratio_for_budget(budget, n_context)

    def resolve(self, spec: SettingSpec, n_context: int, model: PreTrainedModel) -> Setting:
        """The setting on one context: a budget becomes this context's ratio (recorded with both)."""
        if spec.kind == "budget_tokens" and self.budget_unsupported:
            return Setting(0.0, None, {}, False, self.budget_unsupported, spec.kind, spec.value)
        if spec.kind == "budget_tokens":
            ratio = self.budget_ratio(int(spec.value), n_context)
        else:
            ratio = float(spec.value) if spec.kind == "ratio" else 0.0
        setting = self.setting(ratio, n_context, model)
        setting.kind, setting.value = spec.kind, spec.value
        if spec.kind == "budget_tokens" and setting.supported:
            setting.method_parameter["budget_tokens"] = spec.value
        return setting

    @abstractmethod
    def prefill(self, model: PreTrainedModel, context_ids: torch.Tensor, ratio: float) -> Cache:
        """Hook path: prefill ``context_ids`` with compression active and return the cache."""

    def compress_captured(self, model: PreTrainedModel, capture: Capture, ratio: float) -> Cache:
        """Fast path: build the compressed cache from a captured full prefill."""
        raise NotImplementedError(f"{type(self).__name__} has no fast path")

    def retained_map(
        self, model: PreTrainedModel, cache: Cache, capture: Capture | None, ratio: float
    ) -> RetainedMap:
        """The map of the compression that just built ``cache``; N/A unless a subclass knows it."""
        return RetainedMap("not_applicable", reason=f"{type(self).__name__} exposes no original-position map")

    #: the press compresses while the answer is generated (kvpress's decoding presses): the decode runs
    #: under ``decode_under`` and alone, never in a batch
    compresses_decoding: ClassVar[bool] = False

    def decode_under(self, model: PreTrainedModel) -> contextlib.AbstractContextManager[None]:
        """What the decode of this compressor's cache runs under: nothing, for prefill-only presses."""
        return contextlib.nullcontext()

    #: the registered name this compressor's stored cells were hashed under, when it was renamed
    legacy_name: ClassVar[str | None] = None

    def identity_fields(self) -> dict[str, Any]:
        """The fields the cell identity hashes; a slot's press as its registered name and fields."""
        from kvx.core.identity import fields_of

        out = fields_of(self)
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            if "slot" in f.metadata and f.name in out:
                out[f.name] = nested_identity(out[f.name])
        return out

    def stored_identity(self, name: str) -> dict[str, Any] | None:
        """The identity an earlier kvx hashed this same setting under (its stores keep their cells),
        or None when it is today's."""
        if self.legacy_name is not None:
            return {"name": self.legacy_name, "fields": self.identity_fields()}
        return None


def registered_name(compressor: Compressor) -> str:
    """The name ``compressor``'s class is registered under (``snapkv``)."""
    from kvx.core.registry import registry

    return registry("compressor").name_of(type(compressor))


def nested_identity(compressor: Compressor) -> dict[str, Any]:
    """A slot's press in its wrapper's identity: its registered name and its own identity fields."""
    return {"name": registered_name(compressor), "fields": compressor.identity_fields()}


def label(compressor: Compressor, name: str, **extra: Any) -> str:
    """``name`` with the fields that differ from their defaults; a slot's press in parentheses when
    it is not the default option or has fields of its own: ``adakv(tova)``, ``chunkkv[chunk_length=10]``."""
    from kvx.core.identity import changed_fields

    changed = {k: v for k, v in changed_fields(compressor).items() if k not in _slots(compressor)}
    changed.update(extra)
    shown = ",".join(f"{k}={v}" for k, v in changed.items())
    out = f"{name}[{shown}]" if shown else name
    inner = []
    for field_name, default in _slots(compressor).items():
        value = getattr(compressor, field_name)
        text = label(value, registered_name(value))
        if text != default:
            inner.append(text if len(_slots(compressor)) == 1 else f"{field_name}={text}")
    return f"{out}({','.join(inner)})" if inner else out


def _slots(compressor: Compressor) -> dict[str, str]:
    return {f.name: f.metadata["slot"] for f in dataclasses.fields(compressor) if "slot" in f.metadata}  # type: ignore[arg-type]
