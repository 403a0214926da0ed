"""The public TPBench release's probe sets (``task.probe_set=release``), read from a clone as published.

The release (github.com/kentech-sail/TPBench) fixes its probes with an ordered candidate pool,
one source question per dialogue, and per-question labels:

- ``data/construction/<dataset>_compressed_r30.jsonl``: ``dialogue_id``, ``n_turns``, ``k_turns`` and
  ``methods`` (method -> the saved context text; ``full_context`` is the whole dialogue as
  ``[Tn] USER|SYSTEM: text`` lines);
- ``results/diagnostics/update_evidence/<dataset>_goal_labels.jsonl``: per ``dialogue_id`` the slot
  (``slot``, ``slot_human``), ``old_value``/``new_value``, ``origin_turn_id``, ``origin_status``,
  ``is_final_slot_update``, ``n_turns`` and the goal (``goal_first_sentence``, ``goal_text``).

The selection rules are those of the release's ``scripts/builders/build_probes.py``: P1 and P2
shuffle the pool in file order with ``random.Random(seed)`` and keep the first ``n``; P2 then keeps a
question whose label is the slot's final update, whose old/new pair is not alias-equivalent and whose
new value occurs (normalized substring) in a turn; P3 samples ``n`` of the sorted ids of resolved
final updates in dialogues of >= 10 turns whose update turn is >= 6 and in the second half, and keeps
them in sorted order. The release names its files by its own probe codes: its ``p3`` probe file is
the paper's P2 (current value) and its ``late_intent`` file the paper's P3.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvx.core.errors import ConfigError
from kvx.core.jsonl import JsonLineError, json_lines
from kvx.core.source import Segment
from kvx.tasks.dialogue_corpora import Dialogue, Turn
from kvx.tasks.tpbench import text
from kvx.tasks.tpbench.probes import Counts, Example, draw_filtered, matched_control

#: kvx corpus -> the release's dataset name (its MultiWOZ is 2.2 train; kvx applies its MultiWOZ text
#: rules, the release's ``multiwoz`` alias table, to it under ``multiwoz21``)
DATASETS = {"sgd": "sgd", "multiwoz21": "multiwoz"}
POOL = "data/construction/{dataset}_compressed_r30.jsonl"
LABELS = "results/diagnostics/update_evidence/{dataset}_goal_labels.jsonl"
#: the pool's turn budget: its saved contexts keep 30% of the turns (``_r30``)
RATIO = 0.3
FULL = "full_context"
#: the release's turn marker (``scripts/builders/construction.py``, ``split_turns``)
_MARKER = re.compile(r"^\[T(\d+)\] (USER|SYSTEM): ", re.MULTILINE)

#: field -> accepted types, per file (what the selection rules and the probes read)
_POOL_FIELDS: dict[str, tuple[type, ...]] = {
    "dialogue_id": (str,),
    "n_turns": (int,),
    "k_turns": (int,),
    "methods": (dict,),
}
_LABEL_FIELDS: dict[str, tuple[type, ...]] = {
    "dialogue_id": (str,),
    "slot": (str,),
    "slot_human": (str,),
    "old_value": (str, type(None)),
    "new_value": (str,),
    "n_turns": (int,),
    "origin_turn_id": (int,),
    "origin_status": (str,),
    "is_final_slot_update": (bool,),
    "goal_first_sentence": (str, type(None)),
}


@dataclass(frozen=True)
class PoolRow:
    """One candidate of the pool: its saved contexts and where it was read."""

    dialogue_id: str
    n_turns: int
    k_turns: int
    methods: dict[str, str]
    line: int


@dataclass(frozen=True)
class Release:
    """A release's pool and labels for one dataset, validated, with the files' sha256."""

    dataset: str
    pool_path: str
    labels_path: str
    pool_sha256: str
    labels_sha256: str
    pool: tuple[PoolRow, ...]
    labels: dict[str, dict[str, Any]]

    def methods(self) -> list[str]:
        """The saved-context methods of the pool (every row has each one)."""
        return list(self.pool[0].methods) if self.pool else []


def _rows(path: Path, fields: dict[str, tuple[type, ...]]) -> list[tuple[int, dict[str, Any]]]:
    """(line number, row) of a JSON-lines file whose rows have ``fields`` with the right types."""
    if not path.is_file():
        raise ConfigError(
            f"task.release_path: no release file {path} (a clone of github.com/kentech-sail/TPBench)"
        )
    out = []
    try:
        rows = list(json_lines(path))
    except JsonLineError as exc:
        raise ConfigError(str(exc)) from None
    for number, row in rows:
        if not isinstance(row, dict):
            raise ConfigError(f"{path}:{number}: not a JSON object")
        for name, types in fields.items():
            if name not in row:
                raise ConfigError(f"{path}:{number}: field {name!r} is missing")
            value = row[name]
            if not isinstance(value, types) or (bool not in types and isinstance(value, bool)):
                wanted = " or ".join("null" if t is type(None) else t.__name__ for t in types)
                raise ConfigError(f"{path}:{number}: field {name!r} is {value!r}, not {wanted}")
        out.append((number, row))
    if not out:
        raise ConfigError(f"{path}: no rows")
    return out


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@functools.lru_cache(maxsize=4)
def load(root: str, corpus: str) -> Release:
    """The release's pool and labels for ``corpus`` under the clone ``root``, every row checked."""
    dataset = DATASETS[corpus]
    pool_path, labels_path = (
        Path(root, POOL.format(dataset=dataset)),
        Path(root, LABELS.format(dataset=dataset)),
    )
    pool: list[PoolRow] = []
    methods: list[str] | None = None
    seen: set[str] = set()
    for number, row in _rows(pool_path, _POOL_FIELDS):
        if row["dialogue_id"] in seen:  # one source question per dialogue: an id is a source id
            raise ConfigError(f"{pool_path}:{number}: field 'dialogue_id' {row['dialogue_id']!r} repeats")
        seen.add(row["dialogue_id"])
        saved = row["methods"]
        bad = next((k for k, v in saved.items() if not isinstance(v, str)), None)
        if bad is not None:
            raise ConfigError(f"{pool_path}:{number}: field 'methods.{bad}' is not a string")
        if FULL not in saved:
            raise ConfigError(f"{pool_path}:{number}: field 'methods.{FULL}' is missing")
        if methods is not None and sorted(saved) != sorted(methods):
            raise ConfigError(
                f"{pool_path}:{number}: field 'methods' has {sorted(saved)}, the first row {sorted(methods)}"
            )
        methods = methods or list(saved)
        try:
            split_turns(saved[FULL], contiguous=True)
        except ValueError as exc:
            raise ConfigError(f"{pool_path}:{number}: field 'methods.{FULL}': {exc}") from None
        pool.append(PoolRow(row["dialogue_id"], row["n_turns"], row["k_turns"], dict(saved), number))
    labels: dict[str, dict[str, Any]] = {}
    for number, row in _rows(labels_path, _LABEL_FIELDS):
        if row["dialogue_id"] in labels:
            raise ConfigError(f"{labels_path}:{number}: field 'dialogue_id' {row['dialogue_id']!r} repeats")
        labels[row["dialogue_id"]] = row
    for row in pool:
        if row.dialogue_id not in labels:
            raise ConfigError(
                f"{pool_path}:{row.line}: field 'dialogue_id' {row.dialogue_id!r} has no row in {labels_path}"
            )
        origin, n_turns = labels[row.dialogue_id]["origin_turn_id"], len(split_turns(row.methods[FULL]))
        if not 0 <= origin < n_turns:
            raise ConfigError(
                f"{labels_path}: field 'origin_turn_id' of {row.dialogue_id!r} is {origin}, outside the"
                f" {n_turns} turns of its {FULL}"
            )
    return Release(
        dataset,
        str(pool_path),
        str(labels_path),
        _sha256(pool_path),
        _sha256(labels_path),
        tuple(pool),
        labels,
    )


def check_method(release: Release, method: str) -> None:
    """A ``task.saved_context`` the pool has, else a ConfigError with a "did you mean"."""
    known = release.methods()
    if method not in known:
        close = difflib.get_close_matches(method, known, n=1, cutoff=0.5)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(
            f"task.saved_context={method!r} is not a method of {release.pool_path}{hint} (known: {known})"
        )


def split_turns(context: str, contiguous: bool = False) -> list[tuple[int, str, str]]:
    """(turn id, speaker, utterance) of a ``[Tn] USER|SYSTEM: text`` context (the release's
    ``split_turns``: a turn runs to the next marker, trailing newlines dropped). ``contiguous``: the ids
    must be 0, 1, 2, ... (a whole dialogue); otherwise increasing (a saved subset of turns)."""
    matches = list(_MARKER.finditer(context))
    if not matches:
        raise ValueError("no [Tn] USER|SYSTEM: turns")
    if matches[0].start() != 0:
        raise ValueError(f"text before the first turn: {context[: matches[0].start()][:40]!r}")
    out: list[tuple[int, str, str]] = []
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(context)
        turn = int(match.group(1))
        if contiguous and turn != index:
            raise ValueError(f"turn T{turn} at position {index}: ids are not 0, 1, 2, ...")
        if out and turn <= out[-1][0]:
            raise ValueError(f"turn T{turn} after T{out[-1][0]}: ids do not increase")
        out.append((turn, match.group(2).lower(), context[match.end() : end].rstrip("\n")))
    return out


def _dialogue(release: Release, row: PoolRow) -> Dialogue:
    turns = split_turns(row.methods[FULL], contiguous=True)
    return Dialogue(
        row.dialogue_id, tuple(Turn(s, t) for _, s, t in turns), f"{release.pool_path}:{row.line}"
    )


def _p2_keeps(label: dict[str, Any], turns: list[str], corpus: str) -> tuple[bool, bool, bool]:
    """build_probes.py's P2 filters: (final slot update, not alias-equivalent, value occurs)."""
    old, new = label["old_value"], label["new_value"]
    return (
        bool(label["is_final_slot_update"]),
        not text.alias_equivalent(old, new, corpus),
        text.occurs_anywhere(new, turns, corpus),
    )


def _p3_eligible(label: dict[str, Any]) -> bool:
    """build_probes.py's P3 pool: a resolved final update, >= 10 turns, at turn >= 6, second half."""
    n, origin = label["n_turns"], label["origin_turn_id"]
    return (
        label["origin_status"] == "resolved"
        and bool(label["is_final_slot_update"])
        and n >= 10
        and origin >= 6
        and origin / max(1, n - 1) >= 0.5
    )


def select(
    release: Release, probe: str, corpus: str, n: int, seed: int, draw_then_filter: bool = False
) -> tuple[list[PoolRow], Counts]:
    """The pool rows of one probe set, in the release's order, and the counts of each rule (P2's
    ``n``: ``probes.draw_filtered``)."""
    if probe == "p3":
        rows = {r.dialogue_id: r for r in release.pool}
        eligible = sorted(d for d, label in release.labels.items() if d in rows and _p3_eligible(label))
        drawn = sorted(random.Random(seed).sample(eligible, min(n, len(eligible))))
        return [rows[d] for d in drawn], {"pool": len(eligible), "drawn": len(drawn)}
    order = list(release.pool)
    random.Random(seed).shuffle(order)
    counts = {"pool": len(release.pool), "drawn": min(n, len(order))}
    if probe == "p1":
        return order[:n], counts

    def keeps(row: PoolRow) -> tuple[bool, bool, bool]:
        turns = [t for _, _, t in split_turns(row.methods[FULL], contiguous=True)]
        return _p2_keeps(release.labels[row.dialogue_id], turns, corpus)

    kept, read = draw_filtered(order, n, keeps, draw_then_filter)
    return kept, counts | read


def example(release: Release, row: PoolRow, probe: str, corpus: str) -> Example:
    """The probe of one pool row: the reference, the update and answer-bearing turns (the release's
    ``evidence_turns``: the whole new value at phrase boundaries) and the matched deletion controls
    (kvx's ``matched_control``, the rule of the release's ``construction.matched_control``)."""
    label = release.labels[row.dialogue_id]
    dialogue = _dialogue(release, row)
    if probe == "p1":
        return Example("p1", dialogue, label["goal_first_sentence"] or "")
    goal = label["goal_first_sentence"] or label.get("goal_text") or ""
    old, new, origin = label["old_value"] or "", label["new_value"], label["origin_turn_id"]
    answers = tuple(i for i, t in enumerate(dialogue.turns) if text.value_in(new, t.text, corpus))
    support = tuple(sorted({origin, *answers}))
    return Example(
        probe=probe,
        dialogue=dialogue,
        goal=goal,
        slot=label["slot"],
        value=new,
        old_value=old,
        previous=(old,) if old else (),
        update_turn=origin,
        answer_turns=answers,
        deletions={
            "update": (origin,),
            "update_control": matched_control(dialogue, (origin,), old, new, corpus),
            "answers": support,
            "answers_control": matched_control(dialogue, support, old, new, corpus),
        },
    )


def probe_set(
    root: str, probe: str, corpus: str, n: int, seed: int, draw_then_filter: bool = False
) -> tuple[list[tuple[Example, PoolRow]], Counts]:
    """The release's probe set of one seed as kvx examples (each with the pool row it came from, whose
    saved contexts it replays), and the counts of its rules."""
    release = load(root, corpus)
    rows, counts = select(release, probe, corpus, n, seed, draw_then_filter)
    pairs = [(example(release, row, probe, corpus), row) for row in rows]
    if probe != "p1":
        counts["deletion_matched"] = sum(
            None not in (e.deletions["update_control"], e.deletions["answers_control"]) for e, _ in pairs
        )
    return pairs, counts


def saved_segments(saved: str) -> tuple[list[Segment], bool]:
    """A saved context as source segments: one per ``[Tn]`` turn when the text is whole marked turns
    (recency, random, first-n, uniform stride), so turn-level retention still applies; else one
    ``saved`` segment (the plain-text methods: attention, MMR, LLMLingua-2). The second value says
    which; the segments always join back to exactly the saved text."""
    try:
        turns = split_turns(saved)
    except ValueError:
        return [Segment("saved", saved)], False
    segments = [
        Segment(f"T{i}", f"[T{i}] {speaker.upper()}: {utterance}", role=speaker)
        for i, speaker, utterance in turns
    ]
    if "\n".join(s.text for s in segments) != saved:
        return [Segment("saved", saved)], False
    return segments, True
