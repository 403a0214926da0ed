"""MultiWOZ 2.2 in its official layout (``data/MultiWOZ_2.2/{train,dev,test}/dialogues_*.json``, SGD's
format with a frame per domain on every user turn): a hand-made miniature read, turned into TPBench
probes by the release's rules, and every wrong folder named with the corpus it holds."""

from __future__ import annotations

import json

import pytest

from kvx.core.errors import ConfigError
from kvx.tasks.dialogue_corpora import load_corpus
from kvx.tasks.tpbench.probes import build
from kvx.tasks.tpbench.task import CurrentValue

DOMAINS = ("restaurant", "hotel", "taxi")


def user(text: str, active: dict[str, dict[str, list[str]]]) -> dict:
    """A 2.2 user turn: one frame per domain, inactive domains with an empty state."""
    frames = [
        {
            "actions": [],
            "service": domain,
            "slots": [],
            "state": {
                "active_intent": f"find_{domain}" if domain in active else "NONE",
                "requested_slots": [],
                "slot_values": active.get(domain, {}),
            },
        }
        for domain in DOMAINS
    ]
    return {"frames": frames, "speaker": "USER", "turn_id": "", "utterance": text}


def system(text: str) -> dict:
    return {
        "frames": [{"actions": [], "service": "restaurant", "slots": []}],
        "speaker": "SYSTEM",
        "utterance": text,
    }


def dialogue(did: str, turns: list[dict]) -> dict:
    for i, turn in enumerate(turns):
        turn["turn_id"] = str(i)
    return {"dialogue_id": did, "services": list(DOMAINS), "turns": turns}


PANASIAN = {"restaurant-food": ["panasian"], "restaurant-area": ["east"]}
CHINESE = {"restaurant-food": ["chinese"], "restaurant-area": ["east"]}
MINIATURE = [
    dialogue(  # the release's WOZ20033: food panasian -> chinese at T4, its only update
        "WOZ20033.json",
        [
            user("Are there any panasian restaurants in the east side of town?", {"restaurant": PANASIAN}),
            system("I'm not finding any. Would you like to try a different area?"),
            user("no", {"restaurant": PANASIAN}),
            system("Would you like me to check for a different type of cuisine?"),
            user("Are there any chinese restaurants on the east side of town?", {"restaurant": CHINESE}),
            system("Yu garden is located at 529 newmarket road."),
            user("Thank you goodbye.", {"restaurant": CHINESE}),
            system("Good bye."),
        ],
    ),
    dialogue(  # two domains at once, and a value listed in two surface forms
        "PMUL1.json",
        [
            user(
                "A cheap hotel, and a taxi at 8pm.",
                {
                    "hotel": {"hotel-pricerange": ["cheap"]},
                    "taxi": {"taxi-leaveat": ["8pm", "20:00"]},
                },
            ),
            system("Done."),
        ],
    ),
]


@pytest.fixture
def multiwoz22(tmp_path):
    """The official layout: split folders of dialogues files, schema.json and dialog_acts.json at the root."""
    root = tmp_path / "MultiWOZ_2.2"
    (root / "train").mkdir(parents=True)
    (root / "train" / "dialogues_001.json").write_text(json.dumps(MINIATURE[:1]))
    (root / "train" / "dialogues_002.json").write_text(json.dumps(MINIATURE[1:]))
    (root / "schema.json").write_text(json.dumps([{"service_name": "hotel", "slots": []}]))
    (root / "dialog_acts.json").write_text(
        json.dumps({"WOZ20033.json": {"0": {"dialog_act": {}, "span_info": []}}})
    )
    return root


def test_user_turns_carry_the_union_of_their_domain_frames(multiwoz22):
    woz, pmul = load_corpus("multiwoz22", str(multiwoz22))
    assert (woz.id, pmul.id) == ("WOZ20033.json", "PMUL1.json")  # the ids the release's probes name
    assert woz.origin.endswith("train/dialogues_001.json")
    assert [t.speaker for t in woz.turns] == ["user", "system"] * 4
    assert woz.turns[0].state == {"restaurant-food": ("panasian",), "restaurant-area": ("east",)}
    assert woz.turns[1].state is None and woz.turns[0].services == ()  # slots are compared whole
    assert pmul.turns[0].state == {"hotel-pricerange": ("cheap",), "taxi-leaveat": ("8pm", "20:00")}
    # a split folder reads the same as the root (schema.json and dialog_acts.json are no dialogues)
    assert load_corpus("multiwoz22", str(multiwoz22 / "train")) == [woz, pmul]


def test_p2_finds_the_releases_update(multiwoz22):
    """The release's label for WOZ20033: restaurant-food panasian -> chinese, update turn T4, final."""
    dialogues = load_corpus("multiwoz22", str(multiwoz22))
    (example,), counts = build("p2", dialogues, "multiwoz22", n=5, seed=42)
    assert (example.slot, example.old_value, example.value, example.update_turn) == (
        "restaurant-food",
        "panasian",
        "chinese",
        4,
    )
    assert example.answer_turns == (4,) and counts["pool_final_update"] == 1
    assert CurrentValue(corpus="multiwoz22", path=str(multiwoz22)).validate() is None


def write(path, document) -> str:
    path.write_text(json.dumps(document))
    return str(path)


def test_a_folder_of_another_corpus_is_named(tmp_path, multiwoz22):
    sgd = [
        {
            "dialogue_id": "1_00000",
            "turns": [
                {
                    "speaker": "USER",
                    "utterance": "To NYC.",
                    "frames": [{"service": "Flights_1", "state": {"slot_values": {"city": ["NYC"]}}}],
                }
            ],
        }
    ]
    woz21 = {"PMUL1.json": {"log": [{"text": "Hi.", "metadata": {}}]}}
    with pytest.raises(ConfigError, match=r"is sgd .*did you mean task.corpus=sgd\?"):
        load_corpus("multiwoz22", write(tmp_path / "dialogues_001.json", sgd))
    with pytest.raises(ConfigError, match=r"data.json is multiwoz21 .*did you mean task.corpus=multiwoz21\?"):
        load_corpus("multiwoz22", write(tmp_path / "data.json", woz21))
    with pytest.raises(
        ConfigError, match=r"task.path='.*MultiWOZ_2.2'.*is multiwoz22.*task.corpus=multiwoz22\?"
    ):
        load_corpus("sgd", str(multiwoz22))
    with pytest.raises(ConfigError, match="no such file or folder.*budzianowski/multiwoz"):
        CurrentValue(corpus="multiwoz22", path=str(tmp_path / "MultiWOZ_2.1")).validate()
    with pytest.raises(ConfigError, match=r"task.corpus='multiwoz2.2'.*did you mean 'multiwoz22'\?"):
        CurrentValue(corpus="multiwoz2.2", path=str(multiwoz22)).validate()
