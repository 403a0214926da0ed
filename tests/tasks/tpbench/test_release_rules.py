"""kvx's own TPBench builder follows the public release's rules (kentech-sail/TPBench:
``scripts/builders/build_probes.py``, ``results/diagnostics/update_evidence/sgd_goal_labels.jsonl``,
``origin_summary.json``), each pinned on a hand-made SGD dialogue whose updates are worked out by hand
below, then ``--pool-out`` field by field, then the measured agreement on SGD train when it is here."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from kvx.tasks.dialogue_corpora import Dialogue, Turn, load_corpus
from kvx.tasks.tpbench.__main__ import main
from kvx.tasks.tpbench.probes import build, candidates, updates


def sgd_turn(speaker: str, text: str, frames: list[tuple[str, dict]] = ()) -> dict:
    return {
        "speaker": speaker,
        "utterance": text,
        "frames": [
            {"service": s, "slots": [], "actions": [], "state": {"slot_values": v, "active_intent": "X"}}
            for s, v in frames
        ],
    }


# T2: Washington -> San Fran, a replacement. T4: origin_city ("Philly",) -> ("Philadelphia", "Philly"):
# a form put in front of the list, an update to "Philadelphia"; destination_city ("San Fran",) ->
# ("San Fran", "San Francisco"): a form appended behind the value, no update. T6: genre's first fill.
# T8: both services' frames, Movies_1 last, so genre is still "funny". T10: Media_1 alone: "drama".
WASHINGTON, PHILADELPHIA = ["Washington"], ["Philadelphia", "Philly"]
SGD_DIALOGUE = {
    "dialogue_id": "7_00001",
    "services": ["Flights_1", "Movies_1", "Media_1"],
    "turns": [
        sgd_turn("USER", "I need a flight to Washington.", [("Flights_1", {"destination_city": WASHINGTON})]),
        sgd_turn("SYSTEM", "Leaving from where?"),
        sgd_turn(
            "USER",
            "From Philly. Actually I am traveling to San Fran.",
            [("Flights_1", {"destination_city": ["San Fran"], "origin_city": ["Philly"]})],
        ),
        sgd_turn("SYSTEM", "A flight from Philadelphia to San Francisco leaves at 10 am."),
        sgd_turn(
            "USER",
            "Sounds good.",
            [
                (
                    "Flights_1",
                    {"destination_city": ["San Fran", "San Francisco"], "origin_city": PHILADELPHIA},
                )
            ],
        ),
        sgd_turn("SYSTEM", "Your flight is booked."),
        sgd_turn("USER", "Find me a funny movie.", [("Movies_1", {"genre": ["funny"]})]),
        sgd_turn("SYSTEM", "How about Dumbo?"),
        sgd_turn(
            "USER",
            "I'd rather watch a drama online.",
            [("Media_1", {"genre": ["drama"]}), ("Movies_1", {"genre": ["funny"]})],
        ),
        sgd_turn("SYSTEM", "Playing a drama."),
        sgd_turn("USER", "Thanks.", [("Media_1", {"genre": ["drama"]})]),
    ],
}


@pytest.fixture()
def sgd_file(tmp_path: Path) -> Path:
    path = tmp_path / "dialogues_001.json"
    path.write_text(json.dumps([SGD_DIALOGUE]))
    return path


@pytest.fixture()
def sgd(sgd_file: Path) -> Dialogue:
    (dialogue,) = load_corpus("sgd", str(sgd_file))
    return dialogue


def test_the_reader_keeps_each_turns_frame_services_in_order(sgd: Dialogue):
    assert [t.services for t in sgd.turns[::2]] == [
        ("Flights_1",),
        ("Flights_1",),
        ("Flights_1",),
        ("Movies_1",),
        ("Media_1", "Movies_1"),
        ("Media_1",),
    ]
    assert all(t.services == () for t in sgd.turns[1::2])


def test_a_value_is_the_first_listed_form(sgd: Dialogue):
    found = [(u.slot, u.turn, u.old, u.new, u.change) for u in updates(sgd)]
    assert found == [
        ("Flights_1.destination_city", 2, ("Washington",), ("San Fran",), "replace"),
        ("Flights_1.origin_city", 4, ("Philly",), ("Philadelphia", "Philly"), "add_form"),
        ("Media_1.genre", 10, ("funny",), ("drama",), "replace"),
    ]
    # first fills: destination_city and origin_city at their first turns, genre at T6
    fills = [(u.slot, u.turn) for u in updates(sgd, first_fills=True) if u.change == "first_fill"]
    assert fills == [("Flights_1.destination_city", 0), ("Flights_1.origin_city", 2), ("Movies_1.genre", 6)]


def test_pool_out_rows_field_by_field(sgd_file: Path, tmp_path: Path):
    out = tmp_path / "pool.jsonl"
    args = ["--corpus", "sgd", "--path", str(sgd_file), "--probes", "p2", "--seeds", "42"]
    assert main([*args, "--pool-out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    common = {"dialogue_id": "7_00001", "n_turns": 11, "alias": False, "occurs": True}
    common["origin_status"] = "resolved"
    assert rows == [
        {
            **common,
            "id": "7_00001/Flights_1.destination_city@T2",
            "slot": "Flights_1.destination_city",
            "old_value": "Washington",
            "new_value": "San Fran",
            "old_forms": ["Washington"],
            "new_forms": ["San Fran"],
            "change": "replace",
            "update_turn": 2,
            "answer_turns": [2],  # T3's "San Francisco" does not state "san fran" at a phrase boundary
            "is_final_update": True,  # the form appended at T4 is no update
            "final_update_turn": 2,
            "p3_eligible": False,  # T2 < 6
        },
        {
            **common,
            "id": "7_00001/Flights_1.origin_city@T4",
            "slot": "Flights_1.origin_city",
            "old_value": "Philly",
            "new_value": "Philadelphia",  # the form put in front
            "old_forms": ["Philly"],
            "new_forms": ["Philadelphia", "Philly"],
            "change": "add_form",
            "update_turn": 4,
            "answer_turns": [3],
            "is_final_update": True,
            "final_update_turn": 4,
            "p3_eligible": False,
        },
        {
            **common,
            "id": "7_00001/Media_1.genre@T10",
            "slot": "Media_1.genre",
            "old_value": "funny",  # set in Movies_1: one slot name across services
            "new_value": "drama",
            "old_forms": ["funny"],
            "new_forms": ["drama"],
            "change": "replace",
            "update_turn": 10,  # not T8, where Movies_1's frame comes last
            "answer_turns": [8, 9],
            "is_final_update": True,
            "final_update_turn": 10,
            "p3_eligible": True,  # 11 turns >= 10, T10 >= 6, 10/10 >= 0.5
        },
    ]


def test_pool_out_to_a_missing_folder_fails_with_the_path(sgd_file: Path, tmp_path: Path, capsys):
    bad = tmp_path / "missing" / "pool.jsonl"
    assert main(["--corpus", "sgd", "--path", str(sgd_file), "--probes", "p2", "--pool-out", str(bad)]) == 2
    assert f"--pool-out={str(bad)!r}: its folder does not exist" in capsys.readouterr().err


def test_p2_and_p3_on_the_hand_made_dialogue(sgd: Dialogue):
    examples, counts = build("p2", [sgd], "sgd", n=10, seed=42)
    assert sorted((e.slot, e.value, e.old_value) for e in examples) == [
        ("Flights_1.destination_city", "San Fran", "Washington"),
        ("Flights_1.origin_city", "Philadelphia", "Philly"),
        ("Media_1.genre", "drama", "funny"),
    ]
    assert (counts["pool"], counts["final_update"], counts["not_alias"], counts["occurs"]) == (3, 3, 3, 3)
    (late,), _ = build("p3", [sgd], "sgd", n=10, seed=42)
    assert (late.slot, late.value, late.update_turn) == ("Media_1.genre", "drama", 10)


def _revising(did: str, fifth: dict | None) -> Dialogue:
    """12 turns; food chinese from T0, italian at T10; T8's annotation is ``fifth``."""
    states = [{"food": ("chinese",)}] * 4 + [fifth, {"food": ("italian",)}]
    turns = []
    for i, state in enumerate(states):
        turns += [Turn("user", f"User turn {i} about food.", state), Turn("system", f"System turn {i}.")]
    turns[10] = Turn("user", "Make it italian instead.", states[5])
    return Dialogue(did, tuple(turns), "hand")


def test_origin_status_and_p3_needs_a_resolved_origin():
    resolved, unresolved = _revising("r", {"food": ("chinese",)}), _revising("u", None)
    assert [(u.turn, u.origin_status) for u in updates(resolved)] == [(10, "resolved")]
    # T8 has no annotation: the change may have happened there, so T10 is not known to be its origin
    assert [(u.turn, u.origin_status) for u in updates(unresolved)] == [(10, "unresolved")]
    assert [e.dialogue.id for e in build("p3", [resolved, unresolved], "sgd", n=10, seed=0)[0]] == ["r"]
    rows = candidates([resolved, unresolved], "sgd")
    assert [(r["dialogue_id"], r["origin_status"], r["p3_eligible"]) for r in rows] == [
        ("r", "resolved", True),
        ("u", "unresolved", False),
    ]
    # P2 keeps unresolved origins, as the release's P2 filter does not read origin_status
    assert len(build("p2", [resolved, unresolved], "sgd", n=10, seed=0)[0]) == 2


def _one_update(i: int) -> Dialogue:
    return Dialogue(
        f"d{i:02d}",
        (
            Turn("user", f"Red {i} please.", {"x": (f"red {i}",)}),
            Turn("system", "Ok."),
            Turn("user", f"No, blue {i}.", {"x": (f"blue {i}",)}),
        ),
        "hand",
    )


def test_p2_draw_is_the_seeded_shuffles_head_and_p3_samples_the_id_sorted_pool():
    pool = [_one_update(i) for i in range(30)]
    examples, _ = build("p2", pool, "sgd", n=5, seed=42)
    order = [d.id for d in pool]
    random.Random(42).shuffle(order)  # build_probes.py: shuffle the ordered pool, keep the first n
    assert [e.dialogue.id for e in examples] == order[:5]
    # P3 sorts its pool by example id before sampling: file order does not change the set
    late = [_revising(f"r{i:02d}", {"food": ("chinese",)}) for i in range(12)]
    forward = [e.dialogue.id for e in build("p3", late, "sgd", n=4, seed=43)[0]]
    backward = [e.dialogue.id for e in build("p3", late[::-1], "sgd", n=4, seed=43)[0]]
    ids = sorted(d.id for d in late)
    picked = sorted(random.Random(43).sample(range(len(ids)), 4))
    assert forward == backward == [ids[i] for i in picked]


def test_a_value_set_again_after_a_turn_without_it_ends_the_earlier_updates_finality(tmp_path: Path):
    # T0 the 9th; T2 March 9th (an update); T4 only a Restaurants_1 frame without a date; T6 the
    # restaurant's date "March 9th" again: a change from nothing, so T2 is not the final update
    # (the release's 110_00127), and T6 is no candidate since it has no old value
    turns = [
        sgd_turn("USER", "Tickets on the 9th.", [("Events_1", {"date": ["the 9th"]})]),
        sgd_turn("SYSTEM", "On March 9th?"),
        sgd_turn("USER", "Yes.", [("Events_1", {"date": ["March 9th", "the 9th"]})]),
        sgd_turn("SYSTEM", "Booked."),
        sgd_turn("USER", "Now a restaurant.", [("Restaurants_1", {"city": ["Oakland"]})]),
        sgd_turn("SYSTEM", "Which day?"),
        sgd_turn("USER", "March 9th too.", [("Restaurants_1", {"city": ["Oakland"], "date": ["March 9th"]})]),
    ]
    path = tmp_path / "dialogues_002.json"
    path.write_text(json.dumps([{"dialogue_id": "9_00002", "services": [], "turns": turns}]))
    (dialogue,) = load_corpus("sgd", str(path))
    assert [(u.slot, u.turn, u.old, u.change) for u in updates(dialogue)] == [
        ("Events_1.date", 2, ("the 9th",), "add_form")
    ]
    (row,) = candidates([dialogue], "sgd")
    assert (row["is_final_update"], row["final_update_turn"]) == (False, 6)
    assert [(u.slot, u.turn) for u in updates(dialogue, first_fills=True)] == [
        ("Events_1.date", 0),
        ("Events_1.date", 2),
        ("Restaurants_1.city", 4),
        ("Restaurants_1.date", 6),
    ]
    assert build("p2", [dialogue], "sgd", n=10, seed=0)[0] == []


def test_the_reference_is_the_first_listed_form_even_when_the_text_says_another():
    # the release's labels name the first form (new_value); its occurrence filter then reads that form
    d = Dialogue(
        "forms",
        (
            Turn("user", "A hotel in Boston.", {"city": ("Boston",)}),
            Turn("system", "Ok."),
            Turn("user", "No, in New York.", {"city": ("NYC", "New York")}),
        ),
        "hand",
    )
    (row,) = candidates([d], "sgd")
    assert (row["new_value"], row["answer_turns"], row["occurs"]) == ("NYC", [], False)
    assert build("p2", [d], "sgd", n=5, seed=0)[1]["occurs"] == 0


#: (dialogue, slot name) -> (old, new, update turn, answer turns, turns, final update turn), as the
#: release has them: per_item_sgd.jsonl (seed-42 P2 probes) and origin_index_sgd.jsonl (labels)
RELEASED = {
    ("8_00127", "city"): ("Philly", "Philadelphia", 10, [9, 11], 16, 10),  # a form put in front
    ("48_00072", "check_out_date"): ("Tuesday next week", "March 5th", 10, [9], 14, 10),
    ("69_00013", "genre"): ("funny", "action", 20, [20], 32, 20),  # across services
    ("17_00069", "destination_city"): ("Washington", "San Fran", 8, [8], 20, 8),  # appended form at T16
    ("69_00068", "genre"): ("adventure", "drama", 12, [10], 22, 12),  # both frames at T10
    ("110_00127", "date"): ("the 9th", "march 9th", 6, [5, 17], 26, 16),  # set again at T16
}


def test_release_facts_on_sgd_train(corpora):
    files = [corpora / "sgd" / "train" / f"dialogues_{n:03d}.json.gz" for n in (8, 17, 48, 69, 110)]
    rows = [r for f in files for r in candidates(load_corpus("sgd", str(f)), "sgd")]
    got = {
        (r["dialogue_id"], r["slot"].split(".")[1]): (
            r["old_value"],
            r["new_value"],
            r["update_turn"],
            r["answer_turns"],
            r["n_turns"],
            r["final_update_turn"],
        )
        for r in rows
        if (r["dialogue_id"], r["slot"].split(".")[1]) in RELEASED
    }
    assert got == RELEASED
