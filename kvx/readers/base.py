"""Reader interface and the per-process model cache.

A reader is a dataclass (fields = the ``reader.<field>`` Hydra node) that loads a model and its
tokenizer. Device and precision go through Lightning Fabric, one device per job (except on the CPU
in 32-true, where Fabric would do nothing); parallel GPUs come from a Hydra launcher running
several jobs.

Every reader has ``max_prompt_tokens`` and ``truncation`` (keyword-only, inherited from
``PromptLimit``): null keeps the whole prompt; a number cuts the context from the left until the
rendered prompt fits, as the TPBench paper's readers did at 7,168 tokens, or with
``truncation=context`` keeps the context part's first N tokens, as kvpress's ``max_context_length``
does (``LoadedReader.render``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kvx.core.checks import check_choice, check_optional_int
from kvx.core.errors import ConfigError
from kvx.core.identity import WHEN_SET
from kvx.modeling.reader import TRUNCATIONS
from kvx.modeling.reader import Prompt as Prompt  # re-exported: the reader API

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


PRECISIONS = {"32-true", "16-true", "bf16-true", "16-mixed", "bf16-mixed", "64-true"}
#: Lightning Fabric's accelerator names
ACCELERATORS = {"auto", "cpu", "cuda", "gpu", "mps", "tpu"}


@dataclass
class PromptLimit:
    """The field every reader dataclass inherits (keyword-only, so it follows a subclass's own)."""

    #: null: no limit; else the most tokens a rendered prompt may take, the context cut from the left
    #: (in the reader's identity only when set: readers had the same identity before the option)
    max_prompt_tokens: int | None = field(default=None, kw_only=True, metadata=WHEN_SET)
    #: what the limit cuts: left (the context's first tokens, the template's opening and the question
    #: part kept) or context (kvpress's ``max_context_length``: the context part keeps its first
    #: ``max_prompt_tokens`` tokens, the question part is neither cut nor counted); in the identity
    #: only when not left, so the cells made before the option keep their ids
    truncation: str = field(default="left", kw_only=True, metadata=WHEN_SET)


class Reader(PromptLimit, ABC):
    """Base class for ``kvx.readers`` plugins. Subclasses are dataclasses with these fields too."""

    accelerator: str
    precision: str

    def validate(self) -> None:
        check_optional_int("reader.max_prompt_tokens", self.max_prompt_tokens, 1)
        check_choice("reader.truncation", self.truncation, TRUNCATIONS)
        if self.truncation != "left" and self.max_prompt_tokens is None:
            raise ConfigError(
                f"reader.truncation={self.truncation} cuts nothing without reader.max_prompt_tokens: set both"
            )
        if self.precision not in PRECISIONS:
            raise ConfigError(f"reader.precision={self.precision!r} is not one of {sorted(PRECISIONS)}")
        if self.accelerator not in ACCELERATORS:
            raise ConfigError(f"reader.accelerator={self.accelerator!r} is not one of {sorted(ACCELERATORS)}")

    @abstractmethod
    def load_model(self) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, str]:
        """Load (model, tokenizer, resolved revision) on the CPU in float32."""

    def token_counter(self) -> Callable[[str], int] | None:
        """Text -> token count exactly as the run counts (``kvx.modeling.reader.token_count`` over the
        tokenizer ``load_model`` returns), built without loading weights: checks that need only the
        tokenizer (``kvx.pipeline.fit.check_fits``: does each task's shortest prompt fit
        ``context_tokens``?) then run before any model loads. None (the default): this reader cannot
        count before it loads, and those checks wait for the run."""
        return None

    def fingerprint(self) -> dict[str, str]:
        """What the fields alone leave open — the resolved revision or a hash of the weights (and,
        where the tokenizer is not pinned by them, its chat template) — found without loading the
        model, so a finished cell is recognised before any weights load."""
        return {}

    def label(self, name: str) -> str:
        """How records and tables name this reader (subclasses add the model id)."""
        return name

    def family(self, name: str) -> str:
        """The model family (maker and line) for family-level resampling; the name by default."""
        return name
