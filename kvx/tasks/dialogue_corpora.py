"""Task-oriented dialogue corpora in their official formats, read into one annotated shape.

Schema-Guided Dialogue (DSTC8: ``dialogue_id``, ``turns[].speaker/utterance``, per-service
``frames[].state.slot_values`` on user turns) and MultiWOZ 2.1 (``log[].text``, the belief state in
``log[].metadata`` of the system turn that follows each user turn) become ``Dialogue`` objects whose
user turns carry the cumulative dialogue state after that turn: slot -> the annotated values (SGD
lists every accepted surface form of a value; MultiWOZ has one). This is what TPBench's probe
builders compare turn by turn.

A path may be a ``.json`` or ``.json.gz`` file, a folder of them (searched recursively; SGD's
``schema.json`` is skipped) or a ``.zip`` of them — a user's clone of the public repositories as it
is. Nothing is downloaded.
"""

from __future__ import annotations

import gzip
import json
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvx.core.errors import ConfigError

#: where users get the corpora (named in the error for a missing path)
PUBLIC = {
    "sgd": "github.com/google-research-datasets/dstc8-schema-guided-dialogue (train/, dev/ or test/)",
    "multiwoz21": "MultiWOZ 2.1 (data.json, or ConvLab-2's data/multiwoz/{val,test}.json.zip)",
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
    """Every dialogue of ``corpus`` (``sgd`` or ``multiwoz21``) under ``path``, in file order."""
    if corpus not in PUBLIC:
        raise ConfigError(f"task.corpus={corpus!r} is not one of {sorted(PUBLIC)}")
    if not path:
        raise ConfigError(
            f"task.path is empty: point it at the {corpus} files; the public data: {PUBLIC[corpus]}"
        )
    if not Path(path).exists():
        raise ConfigError(f"task.path={path!r}: no such file or folder; the public data: {PUBLIC[corpus]}")
    read = _sgd if corpus == "sgd" else _multiwoz
    dialogues = [d for name, doc in json_documents(path) for d in read(name, doc)]
    if not dialogues:
        raise ConfigError(f"task.path={path!r}: no {corpus} dialogues found there")
    return dialogues


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
