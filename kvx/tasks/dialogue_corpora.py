"""Task-oriented dialogue corpora in their official formats, read into one annotated shape.

Schema-Guided Dialogue (DSTC8: ``dialogue_id``, ``turns[].speaker/utterance``, per-service
``frames[].state.slot_values`` on user turns), MultiWOZ 2.1 (``log[].text``, the belief state in
``log[].metadata`` of the system turn that follows each user turn) and MultiWOZ 2.2 (SGD's layout,
``data/MultiWOZ_2.2/{train,dev,test}/dialogues_*.json``: every user turn has a frame per domain whose
``state.slot_values`` holds that domain's ``domain-slot`` values) become ``Dialogue`` objects whose
user turns carry the cumulative dialogue state after that turn: slot -> the annotated values (SGD and
MultiWOZ 2.2 list every accepted surface form of a value; MultiWOZ 2.1 has one). This is what
TPBench's probe builders compare turn by turn.

A path may be a ``.json`` or ``.json.gz`` file, a folder of them (searched recursively;
``schema.json`` is skipped, and so is any document of another layout, such as MultiWOZ 2.2's
``dialog_acts.json``) or a ``.zip`` of them — a user's clone of the public repositories as it is.
Nothing is downloaded. Files of another corpus's layout fail with the corpus they look like.
"""

from __future__ import annotations

import gzip
import json
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvx.core.checks import check_choice
from kvx.core.errors import ConfigError

#: where users get the corpora (named in the error for a missing path)
PUBLIC = {
    "sgd": "github.com/google-research-datasets/dstc8-schema-guided-dialogue (train/, dev/ or test/)",
    "multiwoz21": "MultiWOZ 2.1 (data.json, or ConvLab-2's data/multiwoz/{val,test}.json.zip)",
    "multiwoz22": "github.com/budzianowski/multiwoz, data/MultiWOZ_2.2/ (train/, dev/ or test/)",
}
#: MultiWOZ's placeholders for a slot nobody filled
UNSET = ("", "not mentioned")

State = dict[str, tuple[str, ...]]


@dataclass(frozen=True)
class Turn:
    speaker: str  # "user" | "system"
    text: str
    #: user turns: the cumulative dialogue state after this turn (slot -> annotated values); None on
    #: system turns, and on user turns the corpus leaves unannotated
    state: State | None = None
    #: SGD user turns: the services whose frames this turn has, in frame order (TPBench's update rule
    #: reads a slot name's value from the last of them that has it); () elsewhere
    services: tuple[str, ...] = ()


@dataclass(frozen=True)
class Dialogue:
    id: str
    turns: tuple[Turn, ...]
    origin: str  # the file (and member) it was read from, for "which files a split had"


def json_documents(path: str | Path) -> Iterator[tuple[str, Any]]:
    """(name, parsed JSON) for a .json/.json.gz file, every such file under a folder, or in a zip."""
    root = Path(path)
    if not root.exists():
        raise FileNotFoundError(str(root))
    if root.is_dir():
        files = sorted(p for p in root.rglob("*") if p.name.endswith((".json", ".json.gz", ".zip")))
        for file in files:
            if file.name != "schema.json":
                yield from json_documents(file)
    elif root.suffix == ".zip":
        with zipfile.ZipFile(root) as archive:
            for member in sorted(archive.namelist()):
                if member.endswith(".json") and not member.endswith("schema.json"):
                    yield f"{root}:{member}", json.loads(archive.read(member))
    elif root.name.endswith(".json.gz"):
        with gzip.open(root, "rt", encoding="utf-8") as handle:
            yield str(root), json.load(handle)
    else:
        yield str(root), json.loads(root.read_text(encoding="utf-8"))


def load_corpus(corpus: str, path: str) -> list[Dialogue]:
    """Every dialogue of ``corpus`` (``sgd``, ``multiwoz21`` or ``multiwoz22``) under ``path``, in file
    order; a file of another corpus's layout is an error naming the corpus it looks like."""
    check_choice("task.corpus", corpus, PUBLIC)
    if not path:
        raise ConfigError(
            f"task.path is empty: point it at the {corpus} files; the public data: {PUBLIC[corpus]}"
        )
    if not Path(path).exists():
        raise ConfigError(f"task.path={path!r}: no such file or folder; the public data: {PUBLIC[corpus]}")
    read = {"sgd": _sgd, "multiwoz21": _multiwoz, "multiwoz22": _multiwoz22}[corpus]
    dialogues = []
    for name, doc in json_documents(path):
        found = layout(doc)
        if found is not None and found != corpus:
            raise ConfigError(
                f"task.path={path!r}: {name} is {found} ({PUBLIC[found]}), not {corpus}; "
                f"did you mean task.corpus={found}?"
            )
        dialogues += read(name, doc)
    if not dialogues:
        raise ConfigError(f"task.path={path!r}: no {corpus} dialogues found there")
    return dialogues


def layout(document: Any) -> str | None:
    """Which corpus a parsed file looks like: ``multiwoz21`` (dialogue id -> ``log``), ``multiwoz22``
    (a list of dialogues whose frames key slots ``<service>-<slot>``), ``sgd`` (a list of dialogues
    whose frames key slots without the service); None for anything else (a schema, MultiWOZ 2.2's
    ``dialog_acts.json``, a list without annotated frames)."""
    if isinstance(document, dict):
        first = next(iter(document.values()), None)
        return "multiwoz21" if isinstance(first, dict) and "log" in first else None
    for frame in _frames(document):
        slots = (frame.get("state") or {}).get("slot_values")
        if slots:
            prefix = f"{frame.get('service')}-"
            return "multiwoz22" if all(str(k).startswith(prefix) for k in slots) else "sgd"
    return None


def _frames(document: Any) -> Iterator[dict[str, Any]]:
    """Every frame of a list of SGD-layout dialogues, skipping what is not one."""
    for dialogue in document if isinstance(document, list) else ():
        turns = dialogue.get("turns") if isinstance(dialogue, dict) else None
        for turn in turns if isinstance(turns, list) else ():
            frames = turn.get("frames") if isinstance(turn, dict) else None
            yield from (f for f in frames or () if isinstance(f, dict))


def _sgd(origin: str, document: Any) -> Iterator[Dialogue]:
    """A DSTC8 dialogues file: a list of dialogues. Each user frame holds its service's full state,
    so the dialogue state is every service's latest frame state, prefixed ``service.slot``."""
    if not isinstance(document, list):
        return
    for dialogue in document:
        if not isinstance(dialogue, dict) or "turns" not in dialogue:
            continue
        services: dict[str, dict[str, tuple[str, ...]]] = {}
        turns = []
        for turn in dialogue["turns"]:
            speaker = str(turn["speaker"]).lower()
            state, here = None, []
            if speaker == "user":
                for frame in turn.get("frames", []):
                    values = (frame.get("state") or {}).get("slot_values")
                    if values is not None:
                        services[frame["service"]] = {slot: tuple(v) for slot, v in values.items()}
                        here.append(frame["service"])
                state = {
                    f"{service}.{slot}": v for service, slots in services.items() for slot, v in slots.items()
                }
            turns.append(Turn(speaker, str(turn["utterance"]), state, tuple(here)))
        yield Dialogue(str(dialogue["dialogue_id"]), tuple(turns), origin)


def _multiwoz(origin: str, document: Any) -> Iterator[Dialogue]:
    """A MultiWOZ 2.1 data file: dialogue id -> {"log": [...]}, user and system turns alternating;
    the belief state after user turn i is in the metadata of system turn i + 1 (``domain-slot``,
    booking slots ``domain-book slot``; empty and "not mentioned" values are unset)."""
    if not isinstance(document, dict):
        return
    for dialogue_id, dialogue in document.items():
        if not isinstance(dialogue, dict) or "log" not in dialogue:
            continue
        log = dialogue["log"]
        turns = []
        for index, entry in enumerate(log):
            speaker = "user" if index % 2 == 0 else "system"
            state = None
            if speaker == "user" and index + 1 < len(log):
                state = _belief(log[index + 1].get("metadata") or {})
            turns.append(Turn(speaker, str(entry["text"]), state))
        yield Dialogue(str(dialogue_id), tuple(turns), origin)


def _multiwoz22(origin: str, document: Any) -> Iterator[Dialogue]:
    """A MultiWOZ 2.2 dialogues file: SGD's layout, but each user turn lists a frame for every domain,
    each holding that domain's whole state (``hotel-area``, ``hotel-bookpeople``, ...), so the
    dialogue state after the turn is their union (as the release's ``convert_to_multiwoz_format.py``
    builds it). Slots keep their ``domain-slot`` names, which TPBench compares whole."""
    if not isinstance(document, list):
        return
    for dialogue in document:
        if not isinstance(dialogue, dict) or "turns" not in dialogue:
            continue
        turns = []
        for turn in dialogue["turns"]:
            speaker = str(turn["speaker"]).lower()
            state = None
            if speaker == "user":
                frames = [(f.get("state") or {}).get("slot_values") for f in turn.get("frames", [])]
                if any(values is not None for values in frames):
                    state = {slot: tuple(v) for values in frames for slot, v in (values or {}).items()}
            turns.append(Turn(speaker, str(turn["utterance"]), state))
        yield Dialogue(str(dialogue["dialogue_id"]), tuple(turns), origin)


def _belief(metadata: dict[str, Any]) -> State | None:
    if not metadata:
        return None
    state: State = {}
    for domain, parts in metadata.items():
        for part, slots in (parts or {}).items():
            for slot, value in (slots or {}).items():
                if slot == "booked" or not isinstance(value, str) or value.strip() in UNSET:
                    continue
                name = f"{domain}-{slot}" if part == "semi" else f"{domain}-{part} {slot}"
                state[name] = (value,)
    return state
