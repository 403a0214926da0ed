"""The transform artifact store: each text transform's output per (row, transform config, and the
reader for transforms that use one) with a manifest of what produced it, computed once and replayed
byte-identically to every reader and cell."""

from __future__ import annotations

from typing import Any

from kvx.stores.json_files import JsonFiles, content_key


class ArtifactStore(JsonFiles):
    """Transform manifests (kept segments, text sha256, versions) by ``key(scope)``."""

    @staticmethod
    def key(scope: dict[str, Any]) -> str:
        return content_key(**scope)
