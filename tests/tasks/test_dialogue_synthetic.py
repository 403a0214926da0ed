"""The synthetic dialogues: deterministic, well-formed, exactly annotated, and rich in what TPBench probes."""

from __future__ import annotations

import re

import pytest

from kvx.tasks.dialogue_corpora import Dialogue
from kvx.tasks.dialogue_synthetic import DOMAINS, generate


@pytest.fixture(scope="module")
def dialogues() -> list[Dialogue]:
    return generate(200, 42)


def changes(dialogue: Dialogue) -> list[tuple[int, str]]:
    """(turn index, slot) for every slot that held a value and holds another after a user turn."""
    out, before = [], {}
    for index, turn in enumerate(dialogue.turns):
        if turn.speaker == "user":
            out += [(index, s) for s, v in turn.state.items() if s in before and before[s] != v]
            before = turn.state
    return out


def test_same_seed_same_dialogues_other_seed_others():
    assert generate(30, 7) == generate(30, 7)
    assert [d.turns for d in generate(30, 8)] != [d.turns for d in generate(30, 7)]
    assert generate(30, 7)[0].id == "synth-7-00000"
    assert generate(30, 7)[29].origin == "synthetic(seed=7)"


def test_turns_alternate_from_the_user_and_vary_in_length(dialogues):
    lengths = {len(d.turns) for d in dialogues}
    assert min(lengths) >= 6 and max(lengths) <= 24 and len(lengths) >= 6
    assert len({d.id for d in dialogues}) == len(dialogues)
    for dialogue in dialogues:
        for index, turn in enumerate(dialogue.turns):
            assert turn.speaker == ("user" if index % 2 == 0 else "system")
            assert (turn.state is None) == (turn.speaker == "system")
            assert turn.text.strip()


def test_states_are_cumulative_and_every_value_is_said(dialogues):
    for dialogue in dialogues:
        said, before = "", {}
        for turn in dialogue.turns:
            said += " " + turn.text.lower()
            if turn.speaker != "user":
                continue
            assert set(before) <= set(turn.state), dialogue.id  # slots are never dropped
            for slot, values in turn.state.items():
                assert re.fullmatch(r"[a-z]+-[a-z ]+", slot) and slot.split("-")[0] in DOMAINS
                assert len(values) == 1 and values[0] == values[0].lower()
                assert values[0] in said, (dialogue.id, slot, values)
                if before.get(slot) != values:  # a change is said by the user in that very turn
                    assert values[0] in turn.text.lower(), (dialogue.id, turn.text, slot, values)
            before = turn.state


def test_first_sentence_states_the_initial_goal(dialogues):
    for dialogue in dialogues:
        first = dialogue.turns[0]
        sentence = re.split(r"(?<=[.?!])\s", first.text)[0].lower()
        assert first.state and all(v[0] in sentence for v in first.state.values()), first.text


def test_revisions_are_common_and_alias_rewrites_a_minority(dialogues):
    revised = [d for d in dialogues if changes(d)]
    assert len(revised) >= 0.5 * len(dialogues)
    spelled = {"centre": "center", "guesthouse": "guest house", "theatre": "theater"}
    for hour in range(1, 13):
        for minute in ("00", "15", "30", "45"):
            spelled[f"{hour}:{minute} am"] = f"{hour % 12:02d}:{minute}"
            spelled[f"{hour}:{minute} pm"] = f"{hour % 12 + 12:02d}:{minute}"
    pairs = [
        (d.turns[index - 2].state[slot][0], d.turns[index].state[slot][0])
        for d in revised
        for index, slot in changes(d)
    ]
    alias = sum(spelled.get(old) == new for old, new in pairs)
    assert 0 < alias < 0.15 * len(pairs)


def test_many_dialogues_qualify_for_late_update_probes(dialogues):
    def late(dialogue: Dialogue) -> bool:
        final = {slot: index for index, slot in changes(dialogue)}
        n = len(dialogue.turns)
        return n >= 10 and any(index >= 6 and index >= n / 2 for index in final.values())

    assert sum(map(late, dialogues)) >= 0.2 * len(dialogues)


def test_some_dialogues_move_to_a_second_domain_and_chat(dialogues):
    multi = [d for d in dialogues if len({s.split("-")[0] for s in d.turns[-2].state}) > 1]
    assert 0.1 * len(dialogues) <= len(multi) < len(dialogues)
    assert len({s.split("-")[0] for d in dialogues for s in d.turns[-2].state}) >= 5
    # user turns after the first that change nothing: the matched controls of deletion probes
    idle = [d for d in dialogues if any(a.state == b.state for a, b in zip(d.turns[2::2], d.turns[::2]))]
    assert len(idle) >= 0.5 * len(dialogues)
