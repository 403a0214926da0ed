"""Transform interface: text-level compression of a structured context (turn selection for
dialogues, passage selection or rewriting for RAG pools), applied before the reader encodes it.

A transform is a dataclass (its fields are the ``transform.<field>`` Hydra node) registered in the
``kvx.transforms`` entry-point group. It sees one source and returns the segments the reader
should get, in order: kept segments unchanged (their evidence spans follow them), dropped ones
absent, rewritten ones with new text (evidence inside them is no longer addressable). It knows
nothing of readers or caches, so one transform output serves every cell of a source.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from kvx.core.source import Segment, Source
    from kvx.modeling.reader import LoadedReader


class Transform(ABC):
    """Base class for ``kvx.transforms`` plugins."""

    #: True for the identity: the pipeline then skips the stage and records nothing about it
    identity: ClassVar[bool] = False
    #: part of the cell identity when set: bump it when the same fields start giving readers other input
    version: ClassVar[str] = ""

    @property
    def uses_reader(self) -> bool:
        """True when the output depends on the reader it is bound to: its stored artifacts are then
        kept per reader, never replayed to another one."""
        return False

    def validate(self) -> None:  # noqa: B027 - optional hook
        """Raise ``kvx.core.errors.ConfigError`` for invalid fields, before any model loads."""

    def fingerprint(self) -> dict[str, Any]:
        """What the fields alone leave open about the output (the content of a file the transform
        replays) and the transform's ``version``: added to the cell identity, so two inputs are never
        one cell."""
        return {"version": self.version} if self.version else {}

    def provenance(self, source: Source) -> dict[str, Any]:
        """What the record says about where this source's output came from, beside its hashes."""
        return {}

    def bind(self, reader: LoadedReader) -> None:  # noqa: B027 - optional hook
        """Called once per cell with the loaded reader, for transforms that score text with it."""

    @abstractmethod
    def apply(self, source: Source) -> Sequence[Segment]:
        """The segments the reader should see, in order (a subset of ``source.parts()`` or rewrites).
        Raise ``kvx.core.errors.Unsupported`` for a source the transform cannot apply to."""


def query(source: Source) -> str:
    """What retrievers and text compressors rank by: the bare question a task records in
    ``metadata["query"]`` (HotpotQA), else the whole question text."""
    return str(source.metadata.get("query") or source.question)
