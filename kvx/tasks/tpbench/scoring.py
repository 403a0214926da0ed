"""TPBench scorers (paper §3, §5 "Scoring", §6.2.3), deterministic and model-free.

Every scorer reads the JSON reply (``reply.parse_reply``); an abstention or a reply with no JSON
object is no answer (scores 0) and is counted as such, never guessed at.

- P1: content words of the answer vs the reference sentence; strict >= 2 shared, loose >= 1, F1.
- P2: strict = equal after normalization; loose = the complete reference at phrase boundaries of
  the answer. ``superseded`` marks an answer naming an earlier value of the slot instead.
- P3: the ``value`` field parsed as ``task; slot: value``; goal = >= 1 shared content word with
  the goal reference in the task segment; strict = the complete value at phrase boundaries of the
  value segment; loose = that or >= max(1, floor(|V|/2)) of the value's content words. Unparseable
  scores 0 (counted in ``parsed``); ``whole_*`` apply the same criteria to the whole field.
"""

from __future__ import annotations

from typing import Any

from kvx.tasks.tpbench import text
from kvx.tasks.tpbench.reply import Reply, split_p3


def _base(reply: Reply) -> dict[str, float]:
    return {"abstain": float(reply.abstain), "parsed": float(reply.parsed)}


def score_p1(reply: Reply, goal: str) -> dict[str, float]:
    answer = set() if reply.abstain else text.content_words(reply.value)
    reference = text.content_words(goal)
    shared = len(reference & answer)
    return {
        "strict": float(shared >= 2),
        "loose": float(shared >= 1),
        "f1": text.token_f1(reference, answer),
        **_base(reply),
    }


def score_p2(reply: Reply, value: str, previous: list[str], corpus: str) -> dict[str, float]:
    answer = "" if reply.abstain else reply.value
    strict = text.same_value(answer, value, corpus)
    loose = text.value_in(value, answer, corpus)
    superseded = (
        not loose
        and bool(answer)
        and any(
            (text.same_value(answer, old, corpus) or text.value_in(old, answer, corpus))
            and not text.alias_equivalent(old, value, corpus)
            for old in previous
        )
    )
    return {"strict": float(strict), "loose": float(loose), "superseded": float(superseded), **_base(reply)}


def _value_match(value: str, segment: str, corpus: str) -> tuple[bool, bool]:
    strict = text.value_in(value, segment, corpus)
    target = text.content_words(value)
    loose = strict or (bool(target) and len(target & text.content_words(segment)) >= max(1, len(target) // 2))
    return strict, loose


def score_p3(reply: Reply, goal_label: str, value: str, corpus: str) -> dict[str, float]:
    answer = "" if reply.abstain else reply.value
    goal_words = text.content_words(goal_label)
    parts = split_p3(answer)
    goal = strict = loose = False
    if parts is not None:
        goal = bool(goal_words & text.content_words(parts[0]))
        strict, loose = _value_match(value, parts[2], corpus)
    whole_goal = bool(answer) and bool(goal_words & text.content_words(answer))
    whole_strict, whole_loose = _value_match(value, answer, corpus) if answer else (False, False)
    return {
        "strict": float(goal and strict),
        "loose": float(goal and loose),
        "goal": float(goal),
        "value_strict": float(strict),
        "value_loose": float(loose),
        "segments_parsed": float(parts is not None),
        "whole_strict": float(whole_goal and whole_strict),
        "whole_loose": float(whole_goal and whole_loose),
        **_base(reply),
    }


def retention(meta: dict[str, Any], kept: set[str], utterances: dict[str, str]) -> dict[str, Any]:
    """What the context the reader saw still holds (text level): the P1 reference turn, or the P2/P3
    update turn, answer-bearing turns and whether the value is present at phrase boundaries."""
    if meta["probe"] == "p1":
        return {"reference_retained": "T0" in kept}
    corpus, value = meta["corpus"], meta["value"]
    return {
        "answer_retained": any(text.value_in(value, utterances[t], corpus) for t in kept if t in utterances),
        "update_kept": meta["update_turn"] in kept,
        "answer_turns_kept": sum(t in kept for t in meta["answer_turns"]),
    }


def text_retention(meta: dict[str, Any], context: str) -> dict[str, Any]:
    """``retention`` for a context without turn ids (a saved plain-text compression): whether the P1
    reference sentence or the P2/P3 value is still stated in it at phrase boundaries. Which turns
    it kept is unknown, so ``update_kept`` and ``answer_turns_kept`` are left out, never guessed."""
    if meta["probe"] == "p1":
        return {"reference_retained": text.value_in(meta["goal"], context, meta["corpus"])}
    return {"answer_retained": text.value_in(meta["value"], context, meta["corpus"])}
