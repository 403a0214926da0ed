"""TPBench §4's correction-cue leak audit: does a seed's P2 sample favour explicit revision wording?

A method keyed to correction cues ("actually", "instead", "I changed my mind") would gain if the
evaluated examples held more of them than the pool they were drawn from. The audit compares the P2
examples a seed evaluates with the rest of the final-update pool (every final slot update not
evaluated): the share of each whose dialogue has a user turn matching a fixed correction-cue
expression, and the gap in percentage points. The rest includes candidates P2's alias and
value-occurrence filters removed, so the gap mixes sampling and eligibility, as the paper says.

The cue list and the rule are the release's (github.com/kentech-sail/TPBench, commit 1e16964,
``scripts/audit/anchor_filter_audit.py``): whole-word, case-insensitive, on user turns only. The
paper's seed-42 figures, on the release's pool: SGD 28.1% of 128 evaluated against 21.3% of the 663
others (+6.9 pp); MultiWOZ 32.3% of 161 against 28.8% of 503 (+3.5 pp).

This is a check of probe construction, read before any model loads: the reader's answers and the
compressed contexts do not enter it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kvx.tasks.dialogue_corpora import Dialogue
from kvx.tasks.tpbench import release
from kvx.tasks.tpbench.probes import build, final_turns, slot_name, updates

#: the release's correction cues: a phrase, or a phrase with its optional comma and alternatives
CUES = (
    "actually",
    "instead",
    "rather",
    "on second thought",
    "scrap that",
    r"wait,? (?:let me|i)",
    "let me change",
    "let's change",
    r"change (?:it|that|the)",
    r"no,? (?:make it|change it|i (?:want|need|meant))",
    r"not (?:that|this)",
    "i meant",
    "i'd rather",
    "i would rather",
    "i changed my mind",
    "never mind",
)
CUE = re.compile(r"\b(?:" + "|".join(CUES) + r")\b", re.IGNORECASE)


@dataclass(frozen=True)
class LeakAudit:
    """The evaluated examples of one corpus and seed against the rest of the final-update pool."""

    corpus: str
    seed: int
    evaluated: int
    evaluated_cue: int
    rest: int
    rest_cue: int

    @property
    def evaluated_rate(self) -> float | None:
        return self.evaluated_cue / self.evaluated if self.evaluated else None

    @property
    def rest_rate(self) -> float | None:
        return self.rest_cue / self.rest if self.rest else None

    @property
    def gap_pp(self) -> float | None:
        """Evaluated minus rest, in percentage points (None when either side is empty)."""
        if self.evaluated_rate is None or self.rest_rate is None:
            return None
        return 100 * (self.evaluated_rate - self.rest_rate)

    def row(self) -> dict[str, object]:
        """The audit as one JSON-ready row (``python -m kvx.tasks.tpbench --leak-audit --json``)."""
        return {
            "corpus": self.corpus,
            "seed": self.seed,
            "evaluated": self.evaluated,
            "evaluated_cue": self.evaluated_cue,
            "evaluated_rate": self.evaluated_rate,
            "rest": self.rest,
            "rest_cue": self.rest_cue,
            "rest_rate": self.rest_rate,
            "gap_pp": self.gap_pp,
        }


def cue_fires(turns: Iterable[tuple[str, str]]) -> bool:
    """Whether any user turn of (speaker, text) turns holds a correction cue."""
    return any(speaker == "user" and CUE.search(text) for speaker, text in turns)


def _turns(dialogue: Dialogue) -> list[tuple[str, str]]:
    return [(t.speaker, t.text) for t in dialogue.turns]


def _audit(corpus: str, seed: int, evaluated: Sequence[bool], rest: Sequence[bool]) -> LeakAudit:
    return LeakAudit(corpus, seed, len(evaluated), sum(evaluated), len(rest), sum(rest))


def built(
    dialogues: Sequence[Dialogue], corpus: str, n: int, seed: int, first_fills: bool = False
) -> LeakAudit:
    """The audit of kvx's own construction: the seed's P2 set as the release draws it (``n`` drawn,
    then filtered) against every other final update of the corpus files."""
    examples, _ = build("p2", dialogues, corpus, n, seed, first_fills, draw_then_filter=True)
    chosen = {(e.dialogue.id, e.slot, e.update_turn) for e in examples}
    evaluated, rest = [], []
    for dialogue in dialogues:
        last = final_turns(dialogue)
        fires = cue_fires(_turns(dialogue))
        for u in updates(dialogue, first_fills):
            if last[slot_name(u.slot)] == u.turn:
                (evaluated if (dialogue.id, u.slot, u.turn) in chosen else rest).append(fires)
    return _audit(corpus, seed, evaluated, rest)


def from_release(root: str, corpus: str, n: int, seed: int) -> LeakAudit:
    """The audit of the release's own pool (a clone of kentech-sail/TPBench): the seed's P2 probes
    (``n`` drawn, then filtered, as ``build_probes.py``) against the pool's other rows whose label is
    the slot's final update — the paper's 791 SGD and 664 MultiWOZ candidates."""
    loaded = release.load(root, corpus)
    rows, _ = release.select(loaded, "p2", corpus, n, seed, draw_then_filter=True)
    chosen = {row.dialogue_id for row in rows}
    evaluated, rest = [], []
    for row in loaded.pool:
        if loaded.labels[row.dialogue_id]["is_final_slot_update"]:
            turns = [(s, t) for _, s, t in release.split_turns(row.methods[release.FULL], contiguous=True)]
            (evaluated if row.dialogue_id in chosen else rest).append(cue_fires(turns))
    return _audit(corpus, seed, evaluated, rest)
