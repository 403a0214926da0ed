"""TPBench construction rules (§4) on hand-made dialogues: one dialogue per rule."""

from __future__ import annotations

from kvx.tasks.dialogue_corpora import Dialogue, Turn
from kvx.tasks.tpbench.probes import build, matched_control, updates


def dialogue(did: str, turns: list[tuple[str, str, dict | None]]) -> Dialogue:
    return Dialogue(
        did,
        tuple(Turn(s, t, None if st is None else {k: tuple(v) for k, v in st.items()}) for s, t, st in turns),
        "hand",
    )


# T0..T9: food chinese -> italian at T6 (late), area set at T2 and never revised
REVISED = dialogue(
    "revised",
    [
        ("user", "I want a restaurant. Something chinese.", {"food": ["chinese"]}),
        ("system", "Sure, which area?", None),
        ("user", "In the north please.", {"food": ["chinese"], "area": ["north"]}),
        ("system", "Golden Wok is a chinese place in the north.", None),
        ("user", "What is the phone number?", {"food": ["chinese"], "area": ["north"]}),
        ("system", "It is 01223 350688.", None),
        ("user", "Actually make it italian instead.", {"food": ["italian"], "area": ["north"]}),
        ("system", "Da Vinci is an italian place in the north.", None),
        ("user", "Great, thanks a lot for that.", {"food": ["italian"], "area": ["north"]}),
        ("system", "Goodbye.", None),
    ],
)


def test_updates_compare_adjacent_user_states():
    assert [(u.slot, u.turn, u.old, u.new) for u in updates(REVISED)] == [
        ("food", 6, ("chinese",), ("italian",))
    ]
    # first fills count only when asked
    fills = [(u.slot, u.turn) for u in updates(REVISED, first_fills=True)]
    assert fills == [("food", 0), ("area", 2), ("food", 6)]


def test_sgd_surface_forms_of_one_value_are_no_update():
    d = dialogue(
        "forms",
        [
            ("user", "Fly to NYC.", {"city": ["NYC"]}),
            ("system", "New York, right?", None),
            ("user", "Yes New York.", {"city": ["NYC", "New York"]}),
        ],
    )
    assert [u.turn for u in updates(d, first_fills=True)] == [0]  # only the first fill


def test_p2_keeps_only_the_final_update():
    d = dialogue(
        "twice",
        [
            ("user", "A table for 2.", {"people": ["2"]}),
            ("system", "Ok.", None),
            ("user", "No, for 3.", {"people": ["3"]}),
            ("system", "Ok.", None),
            ("user", "Sorry, 4 people.", {"people": ["4"]}),
        ],
    )
    examples, counts = build("p2", [d], "sgd", n=10, seed=0)
    assert [(e.value, e.old_value, e.update_turn) for e in examples] == [("4", "3", 4)]
    assert examples[0].previous == ("2", "3")
    assert (counts["drawn"], counts["final_update"], counts["not_alias"], counts["occurs"]) == (2, 1, 1, 1)


def test_p2_alias_and_occurrence_filters():
    alias = dialogue(
        "alias",
        [
            ("user", "Somewhere in the centre.", {"area": ["centre"]}),
            ("system", "Ok.", None),
            ("user", "The center, yes.", {"area": ["center"]}),
        ],
    )
    ghost = dialogue(
        "ghost",
        [
            ("user", "Something cheap.", {"price": ["cheap"]}),
            ("system", "Ok.", None),
            ("user", "Let me think again.", {"price": ["moderate"]}),  # the new value is never said
        ],
    )
    examples, counts = build("p2", [alias, ghost], "multiwoz21", n=10, seed=0)
    assert examples == []
    assert (counts["drawn"], counts["final_update"], counts["not_alias"], counts["occurs"]) == (2, 2, 1, 0)
    # on SGD "centre"/"center" normalize apart but still differ by one letter: not contained, kept
    examples, _ = build("p2", [alias], "sgd", n=10, seed=0)
    assert [e.value for e in examples] == ["center"]


def test_p3_length_and_position_rules():
    examples, counts = build("p3", [REVISED], "sgd", n=5, seed=0)
    assert [(e.slot, e.update_turn) for e in examples] == [("food", 6)]  # 6 >= 6 and 6/9 >= 0.5
    turns = [(t.speaker, t.text, t.state) for t in REVISED.turns]
    italian = {"food": ["italian"], "area": ["north"]}
    early = dialogue(
        "early",
        [*turns[:4], ("user", "Make it italian.", italian)]
        + [("system", "Ok.", None), ("user", "Thanks.", italian)] * 3,
    )
    assert len(early.turns) == 11 and [u.turn for u in updates(early)] == [4]
    assert build("p3", [early], "sgd", n=5, seed=0)[0] == []  # index 4 < 6
    short = dialogue("short", turns[:8])
    assert build("p3", [short], "sgd", n=5, seed=0)[0] == []  # 8 turns < 10
    assert counts["pool"] == 1


def test_answer_bearing_turns_and_matched_controls():
    (example,), _ = build("p2", [REVISED], "sgd", n=5, seed=0)
    assert example.update_turn == 6
    assert example.answer_turns == (6, 7)  # the user's revision and the system's restatement
    # control for T6 (5 words): user turns stating neither "chinese" nor "italian" are T2 (4 words),
    # T4 (5) and T8 (6) -> T4, the same length (length wins before position)
    assert example.deletions["update"] == (6,)
    assert example.deletions["update_control"] == (4,)
    # update + answer turns (T6 user, T7 system) -> one user and one system control turn
    assert example.deletions["answers"] == (6, 7)
    control = example.deletions["answers_control"]
    assert control is not None and len(control) == 2
    assert {REVISED.turns[i].speaker for i in control} == {"user", "system"}
    assert not {0, 3, 6, 7} & set(control)  # no turn stating either value
    # no same-speaker candidate left: None (the deletion records unsupported, never dropped)
    assert matched_control(REVISED, (0, 2, 4, 6, 8), "chinese", "italian", "sgd") is None


def test_seeded_draws_are_deterministic_and_differ_across_seeds():
    pool = [dialogue(f"d{i}", [("user", f"I need thing {i}.", {"x": [str(i)]})]) for i in range(50)]
    a, _ = build("p1", pool, "sgd", n=10, seed=42)
    b, _ = build("p1", pool, "sgd", n=10, seed=42)
    c, _ = build("p1", pool, "sgd", n=10, seed=43)
    assert [e.id for e in a] == [e.id for e in b] != [e.id for e in c]
    assert a[0].goal.startswith("I need thing")


def _mixed_pool() -> list[Dialogue]:
    """Dialogues whose update P2 keeps (a final, stated revision) and ones it filters out after the
    draw (an unstated new value), interleaved."""
    pool = []
    for i in range(30):
        said = i % 3 != 0
        pool.append(
            dialogue(
                f"m{i}",
                [
                    ("user", f"Table for {i}.", {"people": [str(i)]}),
                    ("system", "Ok.", None),
                    ("user", f"Make it {100 + i}." if said else "Change it.", {"people": [str(100 + i)]}),
                ],
            )
        )
    return pool


def test_p2_gives_the_probes_wanted_and_the_release_draw_is_the_set_of_its_size():
    """``n`` is the number of probes wanted: the seed's shuffled pool is read until ``n`` pass
    P2's filters. The release's protocol (draw ``n``, then filter) keeps the first passing items of
    the same order, so it is exactly the default set of the size it ends with."""
    pool = _mixed_pool()
    for seed in range(6):
        wanted, counts = build("p2", pool, "sgd", n=5, seed=seed)
        assert len(wanted) == counts["occurs"] == 5 and counts["drawn"] >= 5
        released, paper = build("p2", pool, "sgd", n=5, seed=seed, draw_then_filter=True)
        assert paper["drawn"] == 5 and len(released) == paper["occurs"] <= 5
        same, _ = build("p2", pool, "sgd", n=len(released), seed=seed)
        assert [e.id for e in same] == [e.id for e in released]
    assert any(len(build("p2", pool, "sgd", n=5, seed=s, draw_then_filter=True)[0]) < 5 for s in range(6))
    # a pool with fewer than n valid probes gives all of them, read to its end
    everything, counts = build("p2", pool, "sgd", n=100, seed=0)
    assert len(everything) == 20 and counts["drawn"] == 30


def test_n_sources_p2_sources_are_that_many_and_the_presets_keep_the_release_draw():
    """``task=tpbench_p2 n_sources=2`` gives 2 sources whenever the pool holds 2 valid probes; the
    presets' ``task.draw_then_filter=true`` keeps the paper's draw of n_sources, then its filters."""
    from kvx.tasks.tpbench.task import CurrentValue

    wanted = [len(CurrentValue().sources(2, seed, 0, len)) for seed in range(8)]
    paper = [len(CurrentValue(draw_then_filter=True).sources(2, seed, 0, len)) for seed in range(8)]
    assert wanted == [2] * 8 and min(paper) < 2
