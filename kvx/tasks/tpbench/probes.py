"""TPBench probe construction (paper §4) from annotated dialogues.

- P1 (initial goal): one example per sampled dialogue; the reference is the first sentence of the
  first user turn.
- P2 (current value): the source pool is every slot update at a user turn (``updates``: a slot's
  value is the first form its annotation lists, so a value replaced by another is an update, and so
  is a form put in front of the list — SGD's ``('Philly',)`` -> ``('Philadelphia', 'Philly')`` is an
  update to "Philadelphia"; first fills of an empty slot only with ``first_fills``, since a first
  fill is no turning point). Each seed shuffles the pool and keeps the first ``n`` source questions,
  then those that are the slot's final update, are not alias pairs, and whose normalized value
  occurs in the dialogue text — a set keeps whatever survives.
- P3 (initial goal and late update): resolved final updates in dialogues of >= 10 turns whose update
  turn is at index >= 6 and in the second half; no alias or occurrence filter; ``n`` sampled per
  seed from the pool sorted by example id.

These are the public release's rules (kentech-sail/TPBench: ``scripts/builders/build_probes.py``
draws, ``results/diagnostics/update_evidence/sgd_goal_labels.jsonl`` and ``origin_summary.json``
for updates, reference forms and origin status); ``candidates`` lists the P2 pool with every flag
so it can be compared with the release's labels row by row.

Every P2/P3 example carries its update turn, its answer-bearing turns (any turn stating the
complete reference at phrase boundaries — the P2-loose matcher) and the matched deletion controls
of §4 (a same-speaker turn closest in word length, then position, stating neither the old nor the
new value; None when no such turn exists).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TypeVar

from kvx.tasks.dialogue_corpora import Dialogue, Turn
from kvx.tasks.tpbench import text

#: the release's ``origin_status``: the update's turn is where the change happened ("resolved"), or
#: an unannotated user turn since the previous annotated state may hold it ("unresolved")
RESOLVED, UNRESOLVED = "resolved", "unresolved"


@dataclass(frozen=True)
class Update:
    """One slot whose value (the first form its annotation lists) changed at a user turn."""

    dialogue: Dialogue
    slot: str
    turn: int
    old: tuple[str, ...]  # () for a first fill
    new: tuple[str, ...]
    origin_status: str = RESOLVED

    @property
    def change(self) -> str:
        """``first_fill``, ``replace`` (disjoint lists) or ``add_form`` (a form put in front of the list)."""
        if not self.old:
            return "first_fill"
        return "add_form" if set(self.old) & set(self.new) else "replace"


@dataclass(frozen=True)
class Example:
    probe: str  # "p1" | "p2" | "p3"
    dialogue: Dialogue
    goal: str  # first sentence of the first user turn
    slot: str = ""
    value: str = ""  # the current value (reference of P2, value part of P3)
    old_value: str = ""  # the value before the final update ("" for a first fill)
    previous: tuple[str, ...] = ()  # every earlier value of the slot (superseded values)
    update_turn: int = -1
    answer_turns: tuple[int, ...] = ()
    #: deletion name -> turn indices removed ("update", "update_control", "answers", "answers_control")
    deletions: dict[str, tuple[int, ...] | None] = field(default_factory=dict)

    @property
    def id(self) -> str:
        if self.probe == "p1":
            return self.dialogue.id
        return f"{self.dialogue.id}/{self.slot}@T{self.update_turn}"

    def digest(self) -> str:
        payload = {k: v for k, v in asdict(self).items() if k != "dialogue"}
        payload["dialogue"] = [self.dialogue.id, [(t.speaker, t.text) for t in self.dialogue.turns]]
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


#: how many examples each construction rule keeps (reported per corpus and seed): ``pool``,
#: ``drawn``, then P2's ``final_update``, ``not_alias``, ``occurs`` (and the same rules over the whole
#: pool, ``pool_*``: the paper's 791/623 SGD figures); ``deletion_matched`` for P2/P3
Counts = dict[str, int]
T = TypeVar("T")


def _goal(dialogue: Dialogue) -> str:
    first = next((t.text for t in dialogue.turns if t.speaker == "user" and t.text.strip()), "")
    return text.first_sentence(first)


def updates(dialogue: Dialogue, first_fills: bool = False) -> list[Update]:
    """Every slot whose annotated value changes between adjacent annotated user turns, as the release
    decides it: a slot's value is the first form its annotation lists, so a value replaced by another
    is an update, and so is a form put in front of the list (SGD's ``('Philly',)`` ->
    ``('Philadelphia', 'Philly')`` is an update to "Philadelphia"), while a form appended behind the
    value (``('San Fran',)`` -> ``('San Fran', 'San Francisco')``) is none. Slots are compared by name
    across services (``slot_name``), on what each turn's own frames annotate (``_view``). With
    ``first_fills``, a slot set where the previous turn had no value counts too."""
    return [u for u in _changes(dialogue) if u.old or first_fills]


def final_turns(dialogue: Dialogue) -> dict[str, int]:
    """Slot name -> the turn of its last change, a value set again after a turn without it included:
    the release's ``final_slot_update_turn_id`` (SGD train 110_00127: "march 9th" set at T6, absent
    from T10-T14's frames, set again at T16, so T6 is not the final update)."""
    return {slot_name(u.slot): u.turn for u in _changes(dialogue)}


def _changes(dialogue: Dialogue) -> list[Update]:
    out: list[Update] = []
    view: dict[str, tuple[str, tuple[str, ...]]] = {}  # slot name -> (state key, values)
    gap = False  # a user turn without annotation since the previous annotated state
    for index, turn in enumerate(dialogue.turns):
        if turn.speaker != "user":
            continue
        if turn.state is None:
            gap = True
            continue
        current = _view(turn)
        for name in sorted(current):
            key, new = current[name]
            old = view.get(name, ("", ()))[1]
            if new and old[:1] != new[:1]:
                out.append(Update(dialogue, key, index, old, new, UNRESOLVED if gap else RESOLVED))
        view, gap = current, False
    return out


def _view(turn: Turn) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Slot name -> (state key, values) a user turn annotates. SGD: the slots of the turn's own frames,
    in frame order, a later frame overriding an earlier one (the release's 69_00068 is "adventure" ->
    "drama" at T12, not at T10 where both services' frames are listed); elsewhere the turn's whole
    state."""
    state = turn.state or {}
    keys = sorted(state)
    if turn.services:
        keys = [k for service in turn.services for k in keys if k.startswith(f"{service}.")]
    return {slot_name(k): (k, state[k]) for k in keys}


def slot_name(slot: str) -> str:
    """A slot as the release keys it: SGD's ``Movies_1.genre`` and ``Media_1.genre`` are one slot,
    ``genre``, so a value set in one service and changed in another is an update (the release's
    ``funny`` -> ``action`` in SGD train 69_00013); MultiWOZ's ``domain-slot`` stays whole."""
    return slot.split(".", 1)[1] if "." in slot else slot


def _is_final(update: Update, by_slot: dict[tuple[str, str], int]) -> bool:
    return by_slot[(update.dialogue.id, slot_name(update.slot))] == update.turn


def forms(update: Update) -> tuple[str, str]:
    """(old value, reference): the first form each annotated list names, as the release's labels have
    them ("" for a first fill)."""
    return update.old[0] if update.old else "", update.new[0]


def _example(probe: str, update: Update, history: list[Update], corpus: str) -> Example:
    turns = update.dialogue.turns
    old, value = forms(update)
    name = slot_name(update.slot)
    earlier = [u for u in history if slot_name(u.slot) == name and u.turn <= update.turn and u.old]
    previous = tuple(u.old[0] for u in earlier)
    answers = tuple(i for i, t in enumerate(turns) if text.value_in(value, t.text, corpus))
    group = tuple(sorted({update.turn, *answers}))
    return Example(
        probe=probe,
        dialogue=update.dialogue,
        goal=_goal(update.dialogue),
        slot=update.slot,
        value=value,
        old_value=old,
        previous=tuple(dict.fromkeys(previous)),
        update_turn=update.turn,
        answer_turns=answers,
        deletions={
            "update": (update.turn,),
            "update_control": matched_control(update.dialogue, (update.turn,), old, value, corpus),
            "answers": group,
            "answers_control": matched_control(update.dialogue, group, old, value, corpus),
        },
    )


def matched_control(
    dialogue: Dialogue, targets: Sequence[int], old: str, new: str, corpus: str
) -> tuple[int, ...] | None:
    """For each target turn (in order), the unused same-speaker turn closest in word count, then in
    position (then earliest), among turns that are not targets and state neither value."""
    old_n, new_n = text.normalize(old, corpus), text.normalize(new, corpus)
    turns = dialogue.turns
    clean = [
        i
        for i, t in enumerate(turns)
        if i not in targets
        and not text.phrase_occurs(old_n, text.normalize(t.text, corpus))
        and not text.phrase_occurs(new_n, text.normalize(t.text, corpus))
    ]
    picked: list[int] = []
    for target in sorted(targets):
        words = len(turns[target].text.split())
        same = [i for i in clean if i not in picked and turns[i].speaker == turns[target].speaker]
        if not same:
            return None
        picked.append(min(same, key=lambda i: (abs(len(turns[i].text.split()) - words), abs(i - target), i)))
    return tuple(sorted(picked))


def _head(pool: list, n: int, seed: int) -> list:
    """P1/P2's draw (the release's ``build_probes.py``): the pool shuffled with the seed, its first
    ``n`` in shuffled order (all of them when the pool is smaller)."""
    shuffled = list(pool)
    random.Random(seed).shuffle(shuffled)
    return shuffled[:n]


def _sample(pool: list, n: int, seed: int) -> list:
    """P3's draw (the release's): ``n`` items sampled with the seed, kept in pool order."""
    picked = sorted(random.Random(seed).sample(range(len(pool)), min(n, len(pool))))
    return [pool[i] for i in picked]


def draw_filtered(
    order: Sequence[T], n: int, keeps: Callable[[T], Sequence[bool]], draw_then_filter: bool
) -> tuple[list[T], Counts]:
    """P2's draw through its filters (final update, not alias, occurs), in the seed's shuffled order:
    the release's protocol reads its first ``n`` and keeps what passes (``draw_then_filter``); kvx's
    default reads on until ``n`` pass. Both keep the first passing items of one order, so the
    release's set is the default's set of its size. Counts are sequential, as ``build_probes.py``
    applies the filters."""
    kept: list[T] = []
    passed = [0, 0, 0]
    read = 0
    for item in order:
        if len(kept) == n or (draw_then_filter and read == n):
            break
        read += 1
        flags = keeps(item)
        for i in range(3):
            passed[i] += all(flags[: i + 1])
        if all(flags):
            kept.append(item)
    return kept, {"drawn": read, **dict(zip(("final_update", "not_alias", "occurs"), passed))}


def build(
    probe: str,
    dialogues: Sequence[Dialogue],
    corpus: str,
    n: int,
    seed: int,
    first_fills: bool = False,
    draw_then_filter: bool = False,
) -> tuple[list[Example], Counts]:
    """The probe set of one seed and the counts of every construction rule (``draw_filtered``: how
    P2's ``n`` is read)."""
    if probe == "p1":
        pool = [d for d in dialogues if _goal(d)]
        drawn = _head(pool, n, seed)
        return [Example("p1", d, _goal(d)) for d in drawn], {"pool": len(pool), "drawn": len(drawn)}
    events = [u for d in dialogues for u in updates(d, first_fills)]
    history: dict[str, list[Update]] = {}
    for u in events:
        history.setdefault(u.dialogue.id, []).append(u)
    last = {(d.id, name): turn for d in dialogues for name, turn in final_turns(d).items()}
    finals = [u for u in events if _is_final(u, last)]
    if probe == "p3":
        pool = sorted((u for u in finals if _late(u) and u.origin_status == RESOLVED), key=_id)
        drawn = _sample(pool, n, seed)
        counts = {"pool": len(pool), "drawn": len(drawn)}
    elif probe == "p2":
        kept = [u for u in finals if not _alias(u, corpus)]
        counts = {
            "pool": len(events),
            "pool_final_update": len(finals),
            "pool_not_alias": len(kept),
            "pool_occurs": sum(_occurs(u, corpus) for u in kept),
        }
        drawn, read = draw_filtered(
            _head(events, len(events), seed),
            n,
            lambda u: (_is_final(u, last), not _alias(u, corpus), _occurs(u, corpus)),
            draw_then_filter,
        )
        counts |= read
    else:
        raise ValueError(f"unknown probe {probe!r}: expected p1, p2 or p3")
    examples = [_example(probe, u, history[u.dialogue.id], corpus) for u in drawn]
    counts["deletion_matched"] = sum(
        None not in (e.deletions["update_control"], e.deletions["answers_control"]) for e in examples
    )
    return examples, counts


def _late(u: Update) -> bool:
    n = len(u.dialogue.turns)
    return n >= 10 and u.turn >= 6 and u.turn / max(1, n - 1) >= 0.5


def _id(u: Update) -> str:
    """The example id an update gets (``Example.id``): P3 sorts its pool by it, as the release sorts
    its question ids, so the draw does not depend on file order."""
    return f"{u.dialogue.id}/{u.slot}@T{u.turn}"


def _alias(u: Update, corpus: str) -> bool:
    return text.alias_equivalent(*forms(u), corpus)


def _occurs(u: Update, corpus: str) -> bool:
    return text.occurs_anywhere(forms(u)[1], [t.text for t in u.dialogue.turns], corpus)


def candidates(dialogues: Sequence[Dialogue], corpus: str, first_fills: bool = False) -> list[dict]:
    """Every P2 candidate (the pool before any draw) with what each construction rule decides, one
    JSON-ready row each, in corpus order (``--pool-out``; fields in docs/tpbench.md, Construction)."""
    rows = []
    for dialogue in dialogues:
        events = updates(dialogue, first_fills)
        last = final_turns(dialogue)
        for u in events:
            old, value = forms(u)
            example = _example("p2", u, events, corpus)
            final = last[slot_name(u.slot)] == u.turn
            rows.append(
                {
                    "id": example.id,
                    "dialogue_id": dialogue.id,
                    "slot": u.slot,
                    "old_value": old,
                    "new_value": value,
                    "old_forms": list(u.old),
                    "new_forms": list(u.new),
                    "change": u.change,
                    "update_turn": u.turn,
                    "answer_turns": list(example.answer_turns),
                    "n_turns": len(dialogue.turns),
                    "is_final_update": final,
                    "final_update_turn": last[slot_name(u.slot)],
                    "alias": _alias(u, corpus),
                    "occurs": _occurs(u, corpus),
                    "origin_status": u.origin_status,
                    "p3_eligible": last[slot_name(u.slot)] == u.turn
                    and _late(u)
                    and u.origin_status == RESOLVED,
                }
            )
    return rows
