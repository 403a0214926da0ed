"""TPBench's text rules (paper §3-4): value normalization, the phrase-boundary matcher, the alias
heuristic and content words. One module, so construction (answer-bearing turns, eligibility) and
scoring (P2 loose) apply exactly the same matcher, as §6.3.1 requires.
"""

from __future__ import annotations

import functools
import re
import unicodedata

#: MultiWOZ surface variants treated as one value (applied to MultiWOZ text only)
MULTIWOZ_ALIASES = {
    "centre": "center",
    "color": "colour",
    "1 person": "1",
    "one person": "1",
    "2 people": "2",
    "two people": "2",
    "3 people": "3",
    "three people": "3",
    "4 people": "4",
    "5 people": "5",
    "five people": "5",
    "moderate price": "moderate",
    "moderately priced": "moderate",
    "expensive priced": "expensive",
    "cheap priced": "cheap",
    "guesthouse": "guest house",
    "asian oriental": "asian",
    "north american": "american",
    "panasian": "asian",
}
_ALIAS_RES = [(re.compile(rf"\b{re.escape(a)}\b"), b) for a, b in MULTIWOZ_ALIASES.items()]
_AMPM = re.compile(r"\b(\d{1,2})(?::(\d{2}))?\s*(am|pm|a\.m\.|p\.m\.)(?!\w)", re.IGNORECASE)
_HHMM = re.compile(r"\b(\d{1,2}):(\d{2})\b")
_BARE = re.compile(r"\b(\d{3,4})\b")
_PUNCT = re.compile(r"[^\w\s:/-]+")
_SPACE = re.compile(r"\s+")

#: P1/P3 goal words that carry no content (the paper's "predefined stopword list")
_STOP = """a an the is are was were be to for of in on at by with and or i you we they this that these
those my your our user please want need would like find looking search me agent should next do action
what it have has had will shall can could may might as from up out if so no not but"""
STOPWORDS = frozenset(_STOP.split())
_WORD = re.compile(r"[a-z0-9]+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_GOAL_LEAD = re.compile(
    r"^(can you |could you |please |i'?d like to |i want to |i need to |i'?m looking to )", re.IGNORECASE
)


def _clock(hour: int, minute: int) -> str:
    return f"{hour:02d}:{minute:02d}"


def _times(text: str) -> str:
    """12-hour forms, H:MM and bare 3-4 digit clock numbers (1230) all become HH:MM."""

    def ampm(m: re.Match) -> str:
        hour, minute, half = int(m.group(1)), int(m.group(2) or 0), m.group(3).lower().replace(".", "")
        if half == "pm" and hour != 12:
            hour += 12
        if half == "am" and hour == 12:
            hour = 0
        return _clock(hour, minute)

    def bare(m: re.Match) -> str:
        digits = m.group(1)
        hour, minute = int(digits[:-2]), int(digits[-2:])
        return _clock(hour, minute) if hour <= 23 and minute <= 59 else digits

    text = _AMPM.sub(ampm, text)
    text = _HHMM.sub(lambda m: _clock(int(m.group(1)), int(m.group(2))), text)
    return _BARE.sub(bare, text)


@functools.lru_cache(maxsize=2**16)
def normalize(text: str | None, corpus: str = "sgd") -> str:
    """NFKC, lowercase, MultiWOZ aliases, times to HH:MM, punctuation other than ``: / -`` to
    spaces, whitespace collapsed: ``"12 pm"`` and ``"12:00"`` are one value. Every MultiWOZ version
    (``multiwoz21`` read here, ``multiwoz22`` in the release's imported answers) shares the aliases."""
    if not text:
        return ""
    out = unicodedata.normalize("NFKC", str(text)).lower().strip()
    if corpus.startswith("multiwoz"):
        for pattern, target in _ALIAS_RES:
            out = pattern.sub(target, out)
    out = _PUNCT.sub(" ", _times(out))
    return _SPACE.sub(" ", out).strip()


def phrase_occurs(needle: str, haystack: str) -> bool:
    """``needle`` inside ``haystack`` at word boundaries (both already normalized): ``2`` is not in
    ``20``, ``sf`` is not in ``successfully``; colons, slashes and hyphens stay inside phrases."""
    return bool(needle) and re.search(rf"(?<!\w){re.escape(needle)}(?!\w)", haystack) is not None


def value_in(value: str | None, text: str | None, corpus: str = "sgd") -> bool:
    """The complete reference value occurs in ``text`` at phrase boundaries (P2-loose, answer-bearing
    turns, answer retention)."""
    return phrase_occurs(normalize(value, corpus), normalize(text, corpus))


def same_value(a: str | None, b: str | None, corpus: str = "sgd") -> bool:
    """Equal after normalization (P2-strict); empty never matches."""
    na = normalize(a, corpus)
    return bool(na) and na == normalize(b, corpus)


def occurs_anywhere(value: str, texts: list[str], corpus: str = "sgd") -> bool:
    """Construction step 4: the normalized value is a substring of some turn's normalized text."""
    needle = normalize(value, corpus)
    return bool(needle) and any(needle in normalize(t, corpus) for t in texts)


def alias_equivalent(old: str | None, new: str | None, corpus: str = "sgd") -> bool:
    """Construction step 3: an old/new pair that is one value written two ways — equal after
    normalization, equal before a first comma ("Atlanta, GA" / "Atlanta"), or one containing the
    other when the shorter has at least 3 characters ("moderate" / "moderately")."""
    a, b = normalize(old, corpus), normalize(new, corpus)
    if not a or not b:
        return False
    if a == b:
        return True
    a, b = a.split(",", 1)[0].strip(), b.split(",", 1)[0].strip()
    if a and a == b:
        return True
    return min(len(a), len(b)) >= 3 and (a in b or b in a)


def content_words(text: str | None) -> set[str]:
    """Distinct lowercase alphanumeric tokens of two or more characters, stopwords removed."""
    return {t for t in _WORD.findall((text or "").lower()) if len(t) >= 2 and t not in STOPWORDS}


def token_f1(reference: set[str], prediction: set[str]) -> float:
    """Token-set F1 between content-word sets (0 when either is empty)."""
    common = len(reference & prediction)
    if not common:
        return 0.0
    precision, recall = common / len(prediction), common / len(reference)
    return 2 * precision * recall / (precision + recall)


def first_sentence(text: str) -> str:
    """The first sentence (a regex split: no sentence model is installable offline)."""
    return _SENTENCE_END.split(text.strip(), maxsplit=1)[0].strip()


def goal_label(sentence: str) -> str:
    """P3's goal reference: the first sentence without a leading request phrase or end punctuation."""
    out = _GOAL_LEAD.sub("", sentence.strip())
    return re.sub(r"[?.!]+\s*$", "", out).strip().lower()


def slot_phrase(slot: str) -> str:
    """A slot's natural-language form for the prompts: ``train-leaveat`` -> ``train leaveat``,
    ``Restaurants_1.price_range`` -> ``price range``."""
    name = slot.split(".", 1)[1] if "." in slot else slot
    return re.sub(r"[_\-]+", " ", name).strip().lower()
