"""SGD and MultiWOZ 2.1 in their official formats: hand-made files for every rule, then the real copies."""

from __future__ import annotations

import gzip
import json
import zipfile

import pytest

from kvx.core.errors import ConfigError
from kvx.tasks.dialogue_corpora import load_corpus


def sgd_turn(speaker: str, text: str, frames: list[tuple[str, dict | None]]) -> dict:
    out = []
    for service, values in frames:
        frame = {"service": service, "slots": [], "actions": []}
        if values is not None:
            frame["state"] = {"active_intent": "X", "requested_slots": [], "slot_values": values}
        out.append(frame)
    return {"speaker": speaker, "utterance": text, "frames": out}


SGD = [
    {
        "dialogue_id": "1_00000",
        "services": ["Restaurants_2", "Hotels_1"],
        "turns": [
            sgd_turn("USER", "A table on the 8th.", [("Restaurants_2", {"date": ["the 8th"]})]),
            sgd_turn("SYSTEM", "What time?", [("Restaurants_2", None)]),
            sgd_turn("USER", "At noon; and a hotel.", [("Hotels_1", {"city": ["NYC", "New York"]})]),
            sgd_turn(
                "USER", "Make it the 9th.", [("Restaurants_2", {"date": ["the 9th"], "time": ["noon"]})]
            ),
        ],
    }
]
MULTIWOZ = {
    "PMUL1.json": {
        "goal": {},
        "log": [
            {"text": "A cheap hotel for 2 people.", "metadata": {}},
            {
                "text": "Sure.",
                "metadata": {
                    "hotel": {
                        "book": {"booked": [], "people": "2", "day": ""},
                        "semi": {"pricerange": "cheap", "area": "not mentioned"},
                    },
                    "taxi": {"book": {"booked": []}, "semi": {}},
                },
            },
            {"text": "Actually make it 3 people.", "metadata": {}},
        ],
    }
}


def test_sgd_state_is_every_services_latest_frame(tmp_path):
    folder = tmp_path / "sgd" / "test"
    folder.mkdir(parents=True)
    with gzip.open(folder / "dialogues_001.json.gz", "wt") as handle:
        json.dump(SGD, handle)
    (folder / "schema.json").write_text(json.dumps([{"service_name": "Hotels_1"}]))  # not dialogues
    (dialogue,) = load_corpus("sgd", str(tmp_path / "sgd"))
    assert dialogue.id == "1_00000" and dialogue.origin.endswith("dialogues_001.json.gz")
    speakers = [t.speaker for t in dialogue.turns]
    assert speakers == ["user", "system", "user", "user"] and dialogue.turns[1].state is None
    assert dialogue.turns[0].state == {"Restaurants_2.date": ("the 8th",)}
    # a frame of another service adds that service; every accepted surface form is kept
    assert dialogue.turns[2].state == {
        "Restaurants_2.date": ("the 8th",),
        "Hotels_1.city": ("NYC", "New York"),
    }
    # a service's new frame replaces its whole state (the revision)
    assert dialogue.turns[3].state == {
        "Restaurants_2.date": ("the 9th",),
        "Restaurants_2.time": ("noon",),
        "Hotels_1.city": ("NYC", "New York"),
    }


def test_multiwoz_state_comes_from_the_next_system_turn(tmp_path):
    archive = tmp_path / "test.json.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("test.json", json.dumps(MULTIWOZ))
    (dialogue,) = load_corpus("multiwoz21", str(archive))
    assert dialogue.id == "PMUL1.json" and dialogue.origin.endswith("test.json.zip:test.json")
    first, system, last = dialogue.turns
    assert (first.speaker, system.speaker, last.speaker) == ("user", "system", "user")
    # empty and "not mentioned" are unset; booking slots are named domain-book slot
    assert first.state == {"hotel-book people": ("2",), "hotel-pricerange": ("cheap",)}
    assert system.state is None and last.state is None  # no system turn after it: not annotated
    plain = tmp_path / "data.json"  # the official single-file layout reads the same
    plain.write_text(json.dumps(MULTIWOZ))
    assert load_corpus("multiwoz21", str(plain))[0].turns == dialogue.turns


@pytest.mark.parametrize(
    ("corpus", "path", "message"),
    [
        ("sgd", "", "task.path is empty.*dstc8-schema-guided-dialogue"),
        ("multiwoz21", "/no/such/place", "no such file or folder.*MultiWOZ 2.1"),
        ("taskmaster", "/tmp", "task.corpus='taskmaster' is not one of"),
    ],
)
def test_bad_paths_name_the_key_and_where_the_data_lives(corpus, path, message):
    with pytest.raises(ConfigError, match=message):
        load_corpus(corpus, path)


def test_a_folder_without_dialogues_is_an_error(tmp_path):
    (tmp_path / "schema.json").write_text("[]")
    with pytest.raises(ConfigError, match="no sgd dialogues"):
        load_corpus("sgd", str(tmp_path))


def test_the_real_copies_read_whole(corpora):
    sgd = load_corpus("sgd", str(corpora / "sgd" / "test"))
    assert len(sgd) == 2921 and len({d.origin for d in sgd}) == 24  # "SGD test (24/34 files)"
    assert len(load_corpus("sgd", str(corpora / "sgd" / "dev"))) == 2098
    woz = load_corpus("multiwoz21", str(corpora / "multiwoz21" / "test.json.zip"))
    assert len(woz) == 1000
    for dialogue in (sgd[0], woz[0]):
        users = [t for t in dialogue.turns if t.speaker == "user"]
        assert users and all(t.state is not None for t in users[:-1])
        assert all(t.state is None for t in dialogue.turns if t.speaker == "system")
