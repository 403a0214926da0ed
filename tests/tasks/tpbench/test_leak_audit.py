"""§4's correction-cue leak audit, hand-counted on miniatures: the cue rule, kvx's own construction
and the release's pool (the miniature of ``test_release``)."""

from __future__ import annotations

import json

import pytest

from kvx.tasks.tpbench import leak_audit
from kvx.tasks.tpbench.__main__ import main
from kvx.tasks.tpbench.leak_audit import LeakAudit, cue_fires
from tests.tasks.tpbench.test_probes import dialogue
from tests.tasks.tpbench.test_release import write_release


@pytest.mark.parametrize(
    ("text", "fires"),
    [
        ("Actually, make it 7pm.", True),
        ("Chinese instead please", True),
        ("On second thought, the north.", True),
        ("Wait, let me check my calendar.", True),
        ("wait i need two tickets", True),
        ("Can you change the time?", True),
        ("No, I want the cheaper one.", True),
        ("no make it four", True),
        ("Not that one.", True),
        ("I'd rather stay in.", True),
        ("I changed my mind about it.", True),
        ("Never mind the taxi.", True),
        ("I need a change.", False),  # "change" alone is no cue
        ("Not there, the centre.", False),  # only "not that" / "not this"
        ("Factually correct.", False),  # whole words only
        ("No, thanks.", False),
    ],
)
def test_the_releases_cue_phrases(text, fires):
    assert cue_fires([("user", text)]) is fires


def test_only_user_turns_count():
    assert not cue_fires([("system", "Actually, we have none."), ("user", "OK, the west.")])
    assert cue_fires([("system", "Which area?"), ("user", "Actually the west.")])


# A and B: evaluated (final, not alias, the value said); C: final but "east" is never said, so P2's
# filter drops it into the rest; D: chinese -> thai at T2 is not final (thai -> korean at T4 is)
DIALOGUES = [
    dialogue(
        "A",
        [
            ("user", "Italian food please.", {"food": ["italian"]}),
            ("system", "Da Vinci is italian.", None),
            ("user", "Actually, chinese instead.", {"food": ["chinese"]}),
        ],
    ),
    dialogue(
        "B",
        [
            ("user", "A hotel in the north.", {"area": ["north"]}),
            ("system", "Which price?", None),
            ("user", "The south is better for me.", {"area": ["south"]}),
        ],
    ),
    dialogue(
        "C",
        [
            ("user", "A hotel in the west.", {"area": ["west"]}),
            ("system", "Sure.", None),
            ("user", "Never mind, the other side.", {"area": ["east"]}),
        ],
    ),
    dialogue(
        "D",
        [
            ("user", "Chinese food.", {"food": ["chinese"]}),
            ("system", "OK.", None),
            ("user", "Thai food.", {"food": ["thai"]}),
            ("system", "OK.", None),
            ("user", "Korean food.", {"food": ["korean"]}),
        ],
    ),
]


def test_built_sets_the_evaluated_examples_against_the_rest_of_the_final_updates():
    audit = leak_audit.built(DIALOGUES, "sgd", n=10, seed=42)
    # evaluated: A (cue), B, D's T4; rest: C (cue); D's T2 is no final update, in neither
    assert audit == LeakAudit("sgd", 42, evaluated=3, evaluated_cue=1, rest=1, rest_cue=1)
    assert audit.evaluated_rate == pytest.approx(1 / 3) and audit.rest_rate == 1.0
    assert audit.gap_pp == pytest.approx(100 * (1 / 3 - 1))


def test_an_empty_side_has_no_rate():
    audit = LeakAudit("sgd", 42, evaluated=0, evaluated_cue=0, rest=5, rest_cue=1)
    assert audit.evaluated_rate is None and audit.gap_pp is None and audit.rest_rate == 0.2


def test_the_releases_pool(tmp_path):
    """Final rows of the miniature: 1 (cue: "Actually ... instead"), 3 (alias), 4 (never said),
    5 (cue: "instead"), 6; P2 keeps 1, 5, 6 and drops 3 and 4 into the rest; 2 is not final."""
    root = write_release(tmp_path)
    audit = leak_audit.from_release(str(root), "sgd", n=10, seed=42)
    assert audit == LeakAudit("sgd", 42, evaluated=3, evaluated_cue=2, rest=2, rest_cue=0)
    assert audit.gap_pp == pytest.approx(100 * 2 / 3)


def test_the_command_prints_the_audit(tmp_path, capsys):
    root = write_release(tmp_path)
    assert (
        main(["--corpus", "sgd", "--release", str(root), "--seeds", "42", "--n", "10", "--leak-audit"]) == 0
    )
    table = capsys.readouterr().out
    assert "| 42 | 3 | 2 | 66.7% | 2 | 0 | 0.0% | +66.7 |" in table
    assert main(["--corpus", "sgd", "--release", str(root), "--seeds", "42", "--leak-audit", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert (row["evaluated"], row["rest"], row["seed"]) == (3, 2, 42)
    assert main(["--corpus", "sgd", "--release", str(root), "--leak-audit", "--wanted"]) == 2
    assert "--wanted does not go with --leak-audit" in capsys.readouterr().err
