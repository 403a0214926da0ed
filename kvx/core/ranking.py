"""Top-k by score with a stable tie rule, shared by every selector that ranks (passages, sentences,
dialogue turns): ties keep the earlier item, so a ranking never depends on sort internals. BM25 lives
here too: tasks build their pools with it (TriviaQA, LongMemEval, ``task.raw=bm25_top_k``) and text
compressors rank with it, and plugin kinds never import each other."""

from __future__ import annotations

import logging
from collections.abc import Sequence


def top_k(scores: Sequence[float], k: int) -> list[int]:
    """Indices of the ``k`` highest scores, best first; ties keep the earlier index."""
    return sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:k]


def bm25_scores(query: str, passages: Sequence[str]) -> list[float]:
    """BM25 score of each passage for ``query`` (``bm25s``: Lucene variant, English stopwords), indexed
    over the passages themselves, so a ranking depends on nothing but the row."""
    import bm25s

    logging.getLogger("bm25s").setLevel(logging.WARNING)  # one DEBUG line per row otherwise
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(list(passages), stopwords="en", show_progress=False), show_progress=False)
    words = bm25s.tokenize([query], stopwords="en", show_progress=False, return_ids=False)[0]
    return [float(s) for s in retriever.get_scores(words)] if words else [0.0] * len(passages)
