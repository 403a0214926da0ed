"""Seeded synthetic task dialogues in the corpora's shape, so TPBench runs offline on a fresh machine.

States are MultiWOZ-style (``domain-slot``, booking slots ``domain-book slot``) and are written
together with the wording, so the annotation is exact: every value in a user turn's cumulative state
has been said verbatim (case-insensitively) by the end of that turn, and a changed value is said in
the turn that changes it. The mix is what the probes need: a goal in the first sentence, revisions
early and late (a few only alias rewrites such as "centre" -> "center", for alias filters),
constraints added mid-dialogue, a second domain, chit-chat, and system turns that sometimes repeat a
value.
"""

from __future__ import annotations

import random
import re
from typing import NamedTuple

from kvx.tasks.dialogue_corpora import Dialogue, State, Turn


class _Domain(NamedTuple):
    nouns: tuple[str, ...]  # how a user names what they want
    goal: tuple[str, ...]  # slots an opening request may carry, in speaking order
    later: tuple[str, ...]  # slots only added later
    names: tuple[str, ...]  # what the system offers


DOMAINS = {
    "restaurant": _Domain(
        ("a restaurant", "a place to eat", "somewhere to have dinner"),
        ("restaurant-food", "restaurant-pricerange", "restaurant-area"),
        ("restaurant-book people", "restaurant-book day", "restaurant-book time"),
        ("The Nirala", "Curry Garden", "La Margherita", "Golden Wok", "The River Bar"),
    ),
    "hotel": _Domain(
        ("a place to stay", "somewhere to stay", "accommodation"),
        ("hotel-type", "hotel-pricerange", "hotel-area", "hotel-stars"),
        ("hotel-book people", "hotel-book day", "hotel-book stay"),
        ("The Gonville", "Finches", "The Cambridge Belfry", "Allenbell", "Hamilton Lodge"),
    ),
    "train": _Domain(
        ("a train", "a train ticket"),
        ("train-departure", "train-destination", "train-day", "train-leaveat"),
        ("train-book people",),
        ("TR1062", "TR3934", "TR7355", "TR5767", "TR2048"),
    ),
    "taxi": _Domain(
        ("a taxi", "a cab"),
        ("taxi-departure", "taxi-destination"),
        ("taxi-leaveat",),
        ("a black Toyota", "a white Skoda", "a grey Volvo", "a red Ford"),
    ),
    "attraction": _Domain(
        ("something to do", "an attraction", "somewhere to visit"),
        ("attraction-type", "attraction-area"),
        (),
        ("Kettles Yard", "The Fitzwilliam", "Jesus Green", "The Junction", "Byard Art"),
    ),
}
AREAS = ("north", "south", "east", "west", "centre")
PRICES = ("cheap", "moderate", "expensive")
DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
PEOPLE = ("2", "3", "4", "5", "6", "7", "8")
CITIES = ("cambridge", "london kings cross", "norwich", "ely", "stevenage", "peterborough", "leicester")
CITIES += ("bishops stortford", "broxbourne", "birmingham new street", "london liverpool street")
PLACES = ("the copper kettle", "kings college", "addenbrookes hospital", "clare hall", "the varsity")
PLACES += ("the lensfield hotel", "queens college", "the grafton centre", "parkside police station")
VOCAB = {
    "restaurant-food": ("italian", "chinese", "indian", "thai", "french", "mexican", "japanese")
    + ("korean", "spanish", "greek", "turkish", "vietnamese", "lebanese", "british"),
    "restaurant-pricerange": PRICES,
    "restaurant-area": AREAS,
    "restaurant-book people": PEOPLE,
    "restaurant-book day": DAYS,
    "hotel-type": ("hotel", "guesthouse"),
    "hotel-pricerange": PRICES,
    "hotel-area": AREAS,
    "hotel-stars": ("2", "3", "4", "5"),
    "hotel-book people": PEOPLE,
    "hotel-book day": DAYS,
    "hotel-book stay": ("2", "3", "4", "5", "6"),
    "train-departure": CITIES,
    "train-destination": CITIES,
    "train-day": DAYS,
    "train-book people": PEOPLE,
    "taxi-departure": PLACES,
    "taxi-destination": PLACES,
    "attraction-type": ("museum", "college", "park", "theatre", "nightclub", "cinema", "swimming pool"),
    "attraction-area": AREAS,
}
#: slots whose values are clock times, drawn as "19:30" or "7:30 pm"
TIMES = ("restaurant-book time", "train-leaveat", "taxi-leaveat")
#: slot (without domain) -> (how a request says it, what the slot is called)
SLOTS = {
    "food": ("serving {v} food", "cuisine"),
    "pricerange": ("in the {v} price range", "price range"),
    "area": ("in the {v}", "area"),
    "type": ("that is a {v}", "type"),
    "stars": ("with {v} stars", "star rating"),
    "book people": ("for {v} people", "number of people"),
    "book day": ("on {v}", "day"),
    "book time": ("at {v}", "time"),
    "book stay": ("for {v} nights", "number of nights"),
    "departure": ("from {v}", "departure point"),
    "destination": ("to {v}", "destination"),
    "day": ("on {v}", "day"),
    "leaveat": ("leaving after {v}", "departure time"),
}
TITLED = ("food", "book day", "day", "departure", "destination")  # spoken capitalised
ALIASES = {"centre": "center", "guesthouse": "guest house", "theatre": "theater"}
CLOCK12 = re.compile(r"(\d{1,2}):(\d\d) ([ap]m)")

OPENERS = ("I need", "I'm looking for", "Can you help me find", "I want", "Please find me", "Hi, I'd like")
SWITCH_OPENERS = ("I also need", "Next, I'm looking for", "Can you also find me", "Now I need")
CONTEXT = ("It's for a family trip.", "We're celebrating a birthday.", "This is my first visit.", "", "")
INFORM = ("I'd also like it {p}.", "Oh, and {p}, please.", "One more thing: {p}.", "Please make it {p}.")
INFORM += ("It needs to be {p}.", "Can you find one {p}?")
REVISE = ("Actually, make that {new} instead of {old}.", "Sorry, I meant {new}, not {old}.")
REVISE += ("Can we change the {noun} to {new}?", "On second thought, let's make the {noun} {new}.")
REVISE += ("Wait, could you change the {noun} to {new}, please?", "I've changed my mind: {p} instead.")
ALIAS_SAY = ("Just to be clear, the {noun} is {new}.", "To be precise, I mean the {noun} is {new}.")
CHAT = ("Sorry, my phone was ringing.", "By the way, the weather here is lovely today.")
CHAT += ("Thanks, you've been very patient with me.", "Hold on, let me check with my partner. Okay, fine.")
CHAT += ("I've never been to this part of the country, so I'm a little lost.", "That sounds good so far.")
CHAT += ("Do you know if it gets busy around the holidays? Never mind, it doesn't matter.",)
CLOSE = ("That's all I need, thanks.", "Great, thank you for your help. Goodbye!", "Perfect, that's all.")
ASK = ("What {noun} would you like?", "Do you have a preferred {noun}?", "Any preference for the {noun}?")
OFFER_SAY = ("How about {name}? It is {p}.", "I found {name}, {p}.", "{name} is {p}. Shall I book it?")
OFFER = ("I have {n} options. How about {name}?", "{name} is a popular choice.", "There are {n} matches.")
ECHO = ("Sure, I've changed the {noun} to {new}.", "No problem, {new} it is.", "Okay, updated to {new}.")
ACK = ("Done, I've updated that for you.", "Okay, noted.", "Sure, I'll update the booking.")
SMALL = ("No worries, take your time.", "Of course.", "Sure thing. Anything else?", "Happy to help.")
BYE = ("You're welcome. Goodbye!", "Glad I could help. Have a nice day!")


class _Act(NamedTuple):
    kind: str  # goal | inform | revise | alias | chat | close
    text: str
    updates: dict[str, str]  # slot -> its new value


def generate(n_dialogues: int, seed: int) -> list[Dialogue]:
    """``n_dialogues`` dialogues, identical for identical seeds (one private RNG, nothing global)."""
    rng = random.Random(seed)
    origin = f"synthetic(seed={seed})"
    return [_dialogue(rng, f"synth-{seed}-{i:05d}", origin) for i in range(n_dialogues)]


def _dialogue(rng: random.Random, dialogue_id: str, origin: str) -> Dialogue:
    pairs = rng.randint(3, 12)
    first, second = rng.sample(sorted(DOMAINS), 2)
    switch = rng.randint(2, pairs - 2) if pairs >= 5 and rng.random() < 0.35 else -1
    closing = pairs >= 4 and rng.random() < 0.5
    values: dict[str, str] = {}
    acts: list[_Act] = []
    states: list[State] = []
    domain = first
    for u in range(pairs):
        if u in (0, switch):
            domain = first if u == 0 else second
            act = _goal(rng, domain, values, opening=u == 0)
        elif closing and u == pairs - 1:
            act = _Act("close", rng.choice(CLOSE), {})
        else:
            act = _middle(rng, domain, values)
        values.update(act.updates)
        acts.append(act)
        states.append({slot: (value,) for slot, value in values.items()})
    turns: list[Turn] = []
    for u, act in enumerate(acts):
        following = acts[u + 1] if u + 1 < len(acts) else None
        turns += [Turn("user", act.text, states[u]), Turn("system", _reply(rng, act, following))]
    return Dialogue(dialogue_id, tuple(turns), origin)


def _goal(rng: random.Random, domain: str, values: dict[str, str], opening: bool) -> _Act:
    """The request that opens a domain, all of it in one sentence (P1 asks for that sentence)."""
    spec = DOMAINS[domain]
    chosen = set(rng.sample(spec.goal, rng.randint(1, min(3, len(spec.goal)))))
    updates: dict[str, str] = {}
    for slot in (s for s in spec.goal if s in chosen):
        updates[slot] = _value(rng, slot, {**values, **updates})
    opener = rng.choice(OPENERS if opening else SWITCH_OPENERS)
    said = " ".join(_phrase(slot, value) for slot, value in updates.items())
    text = f"{opener} {rng.choice(spec.nouns)} {said}{'?' if opener.startswith('Can') else '.'}"
    context = rng.choice(CONTEXT) if opening else ""
    return _Act("goal", f"{text} {context}".strip(), updates)


def _middle(rng: random.Random, domain: str, values: dict[str, str]) -> _Act:
    """A later user turn: a new constraint, a revision, an alias rewrite or chit-chat; only slots of
    the current domain are touched, so every change is unambiguous in the wording."""
    spec = DOMAINS[domain]
    unset = [s for s in spec.goal + spec.later if s not in values]
    mine = [s for s in values if s.startswith(f"{domain}-")]
    aliasable = [s for s in mine if _alias(values[s])]
    kinds = ["chat", "inform", "revise", "alias"]
    kind = rng.choices(kinds, weights=[2, 3 if unset else 0, 3 if mine else 0, 1 if aliasable else 0])[0]
    if kind == "chat":
        return _Act("chat", rng.choice(CHAT), {})
    slot = rng.choice({"inform": unset, "revise": mine, "alias": aliasable}[kind])
    if kind == "inform":
        value = _value(rng, slot, values)
        return _Act(kind, rng.choice(INFORM).format(p=_phrase(slot, value)), {slot: value})
    if kind == "alias":
        value = _alias(values[slot])
        return _Act(kind, rng.choice(ALIAS_SAY).format(noun=_noun(slot), new=value), {slot: value})
    value = _value(rng, slot, values)
    wording = rng.choice(REVISE)
    text = wording.format(
        new=_say(slot, value), old=_say(slot, values[slot]), noun=_noun(slot), p=_phrase(slot, value)
    )
    return _Act(kind, text, {slot: value})


def _reply(rng: random.Random, act: _Act, following: _Act | None) -> str:
    """The system turn after ``act``: it asks for the slot the user adds next, or answers ``act``,
    repeating the value about half the time (answer-bearing system turns)."""
    if act.kind == "close":
        return rng.choice(BYE)
    if following is not None and following.kind == "inform" and rng.random() < 0.6:
        return rng.choice(ASK).format(noun=_noun(next(iter(following.updates))))
    if not act.updates:
        return rng.choice(SMALL)
    slot, value = rng.choice(list(act.updates.items()))
    if act.kind in ("revise", "alias"):
        if rng.random() < 0.5:
            return rng.choice(ECHO).format(noun=_noun(slot), new=_say(slot, value))
        return rng.choice(ACK)
    name = rng.choice(DOMAINS[slot.split("-")[0]].names)
    if rng.random() < 0.5:
        offer = rng.choice(OFFER_SAY).format(name=name, p=_phrase(slot, value))
    else:
        offer = rng.choice(OFFER).format(name=name, n=rng.randint(2, 30))
    return offer[0].upper() + offer[1:]


def _value(rng: random.Random, slot: str, values: dict[str, str]) -> str:
    """A value for ``slot`` unlike (aliases included) every value its domain holds, so a revision
    really changes something and "from X to X" never happens."""
    domain = slot.split("-")[0]
    taken = {_canonical(v) for s, v in values.items() if s.startswith(f"{domain}-")}
    while True:
        if slot in TIMES:
            hour, minute = rng.randint(8, 21), rng.choice((0, 15, 30, 45))
            twelve = f"{(hour - 1) % 12 + 1}:{minute:02d} {'am' if hour < 12 else 'pm'}"
            value = twelve if rng.random() < 0.3 else f"{hour:02d}:{minute:02d}"
        else:
            value = rng.choice(VOCAB[slot])
        if _canonical(value) not in taken:
            return value


def _alias(value: str) -> str | None:
    """Another spelling of the same value ("centre" -> "center", "7:30 pm" -> "19:30"), if any."""
    clock = CLOCK12.fullmatch(value)
    if clock:
        hour = int(clock[1]) % 12 + (12 if clock[3] == "pm" else 0)
        return f"{hour:02d}:{clock[2]}"
    return ALIASES.get(value)


def _canonical(value: str) -> str:
    return _alias(value) or value


def _say(slot: str, value: str) -> str:
    return value.title() if slot.split("-", 1)[1] in TITLED else value


def _phrase(slot: str, value: str) -> str:
    return SLOTS[slot.split("-", 1)[1]][0].format(v=_say(slot, value))


def _noun(slot: str) -> str:
    return SLOTS[slot.split("-", 1)[1]][1]
