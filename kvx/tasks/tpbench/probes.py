"""TPBench probe construction (paper §4) from annotated dialogues.

- P1 (initial goal): one example per sampled dialogue; the reference is the first sentence of the
  first user turn.
- P2 (current value): the source pool is every slot update at a user turn (adjacent annotated
  states compared; a slot whose annotated value changes from one value to another — first fills
  of an empty slot only with ``first_fills``, since a first fill is no turning point). Each seed draws
  ``n`` source questions, then keeps those that are the slot's final update, are not alias pairs,
  and whose normalized value occurs in the dialogue text — a set keeps whatever survives.
- P3 (initial goal and late update): final updates in dialogues of >= 10 turns whose update turn
  is at index >= 6 and in the second half; no alias or occurrence filter; ``n`` drawn per seed.

Every P2/P3 example carries its update turn, its answer-bearing turns (any turn stating the
complete reference at phrase boundaries — the P2-loose matcher) and the matched deletion controls
of §4 (a same-speaker turn closest in word length, then position, stating neither the old nor the
new value; None when no such turn exists).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from kvx.tasks.dialogue_corpora import Dialogue, State
from kvx.tasks.tpbench import text


@dataclass(frozen=True)
class Update:
    """One slot whose annotated value changed at a user turn."""

    dialogue: Dialogue
    slot: str
    turn: int
    old: tuple[str, ...]  # () for a first fill
    new: tuple[str, ...]


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


def _goal(dialogue: Dialogue) -> str:
    first = next((t.text for t in dialogue.turns if t.speaker == "user" and t.text.strip()), "")
    return text.first_sentence(first)


def _surface(values: tuple[str, ...], texts: list[str], corpus: str) -> str:
    """The value form the dialogue states (SGD lists every surface form of a value)."""
    return next((v for v in values if text.occurs_anywhere(v, texts, corpus)), values[0])


def updates(dialogue: Dialogue, first_fills: bool = False) -> list[Update]:
    """Every slot whose annotated value changes between adjacent annotated user-turn states (a value
    replaced by a disjoint one; with ``first_fills``, also a slot set for the first time)."""
    out: list[Update] = []
    before: State = {}
    for index, turn in enumerate(dialogue.turns):
        if turn.speaker != "user" or turn.state is None:
            continue
        for slot in sorted(turn.state):
            new, old = turn.state[slot], before.get(slot, ())
            if new and (old or first_fills) and not set(new) & set(old):
                out.append(Update(dialogue, slot, index, old, new))
        before = turn.state
    return out


def _is_final(update: Update, by_slot: dict[tuple[str, str], int]) -> bool:
    return by_slot[(update.dialogue.id, update.slot)] == update.turn


def _example(probe: str, update: Update, history: list[Update], corpus: str) -> Example:
    turns = update.dialogue.turns
    texts = [t.text for t in turns]
    value = _surface(update.new, texts, corpus)
    old = _surface(update.old, texts, corpus) if update.old else ""
    earlier = [u for u in history if u.slot == update.slot and u.turn <= update.turn and u.old]
    previous = tuple(_surface(u.old, texts, corpus) for u in earlier)
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


def _draw(pool: list, n: int, seed: int) -> list:
    """``n`` items drawn with the seed, kept in pool order (all of them when the pool is smaller)."""
    picked = sorted(random.Random(seed).sample(range(len(pool)), min(n, len(pool))))
    return [pool[i] for i in picked]


def build(
    probe: str, dialogues: Sequence[Dialogue], corpus: str, n: int, seed: int, first_fills: bool = False
) -> tuple[list[Example], Counts]:
    """The probe set of one seed and the counts of every construction rule."""
    if probe == "p1":
        pool = [d for d in dialogues if _goal(d)]
        drawn = _draw(pool, n, seed)
        return [Example("p1", d, _goal(d)) for d in drawn], {"pool": len(pool), "drawn": len(drawn)}
    events = [u for d in dialogues for u in updates(d, first_fills)]
    history: dict[str, list[Update]] = {}
    last: dict[tuple[str, str], int] = {}
    for u in events:
        history.setdefault(u.dialogue.id, []).append(u)
        last[(u.dialogue.id, u.slot)] = u.turn
    finals = [u for u in events if _is_final(u, last)]
    if probe == "p3":
        pool = [u for u in finals if _late(u)]
        drawn = _draw(pool, n, seed)
        counts = {"pool": len(pool), "drawn": len(drawn)}
    elif probe == "p2":
        kept = [u for u in finals if not _alias(u, corpus)]
        counts = {
            "pool": len(events),
            "pool_final_update": len(finals),
            "pool_not_alias": len(kept),
            "pool_occurs": sum(_occurs(u, corpus) for u in kept),
        }
        drawn = _draw(events, n, seed)
        counts["drawn"] = len(drawn)
        drawn = [u for u in drawn if _is_final(u, last)]
        counts["final_update"] = len(drawn)
        drawn = [u for u in drawn if not _alias(u, corpus)]
        counts["not_alias"] = len(drawn)
        drawn = [u for u in drawn if _occurs(u, corpus)]
        counts["occurs"] = len(drawn)
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


def _alias(u: Update, corpus: str) -> bool:
    texts = [t.text for t in u.dialogue.turns]
    old = _surface(u.old, texts, corpus) if u.old else ""
    return text.alias_equivalent(old, _surface(u.new, texts, corpus), corpus)


def _occurs(u: Update, corpus: str) -> bool:
    texts = [t.text for t in u.dialogue.turns]
    return text.occurs_anywhere(_surface(u.new, texts, corpus), texts, corpus)
