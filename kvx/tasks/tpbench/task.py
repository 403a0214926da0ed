"""The TPBench tasks ``tpbench_p1``, ``tpbench_p2`` and ``tpbench_p3``: probe sets as kvx sources.

A source is one probe example: the dialogue as ``[Tn] USER/SYSTEM`` turns (one segment per turn,
after a ``Context:`` header segment), the Appendix A system prompt and question, and metadata the
scorers, turn selectors and deletion transforms read (update turn, answer-bearing turns, matched
deletion controls). ``seed`` draws the probe set (the paper's 42, 43, 44) and ``n_sources`` is the
number of probes wanted; with ``draw_then_filter`` (the presets) it is the paper's draw of 200 and P2
keeps whatever survives its filters. ``probe_set=release`` reads the
public release's probes instead (``kvx.tasks.tpbench.release``) and ``saved_context`` replays one of
its saved compressed contexts as the source's context.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from kvx.core.checks import check_choice
from kvx.core.errors import ConfigError
from kvx.core.identity import NEVER, WHEN_SET, when_set
from kvx.core.source import SPEAKERS, Segment, Source
from kvx.tasks import dialogue_corpora, dialogue_synthetic
from kvx.tasks.base import CountTokens, Score, Task
from kvx.tasks.dialogue_corpora import Dialogue
from kvx.tasks.tpbench import prompts, release, scoring, text
from kvx.tasks.tpbench.probes import Counts, Example, build
from kvx.tasks.tpbench.reply import Reply, parse_reply

CORPORA = ("synthetic", "sgd", "multiwoz21", "multiwoz22")
#: ``build``: kvx's construction from corpus files; ``release``: the public release's probes
PROBE_SETS = ("build", "release")


@functools.lru_cache(maxsize=4)
def dialogues(corpus: str, path: str | None, synthetic_dialogues: int) -> tuple[Dialogue, ...]:
    """The corpus, read once per process (a real corpus from ``path``; the synthetic one generated)."""
    if corpus == "synthetic":
        return tuple(dialogue_synthetic.generate(synthetic_dialogues, seed=0))
    return tuple(dialogue_corpora.load_corpus(corpus, str(path or "")))


def to_source(
    example: Example,
    corpus: str,
    probe_set: str,
    slot: str | None = None,
    context: list[Segment] | None = None,
    extra: dict[str, Any] | None = None,
) -> Source:
    """The source of one example. ``slot``: the slot's phrase in the question (default its name made
    readable); ``context``: the segments after the header (default the dialogue's turns); ``extra``:
    more metadata (the release id, the saved context read)."""
    turns = example.dialogue.turns
    segments = [Segment("header", prompts.HEADER)] + (
        context
        if context is not None
        else [
            Segment(f"T{i}", f"[T{i}] {t.speaker.upper()}: {t.text}", role=t.speaker)
            for i, t in enumerate(turns)
        ]
    )
    if slot is None:
        slot = text.slot_phrase(example.slot) if example.slot else ""
    if example.probe == "p1":
        question, answers = prompts.p1(), [example.goal]
    elif example.probe == "p2":
        question, answers = prompts.p2(slot), [example.value]
    else:
        question, answers = prompts.p3(slot), [f"{text.goal_label(example.goal)}; {slot}: {example.value}"]
    meta: dict[str, Any] = {
        "probe": example.probe,
        "corpus": corpus,
        "dialogue_id": example.dialogue.id,
        "origin": example.dialogue.origin,
        "example_sha256": example.digest(),
        "probe_set_sha256": probe_set,
        "goal": example.goal,
        "utterances": {f"T{i}": t.text for i, t in enumerate(turns)},
        **(extra or {}),
    }
    if example.probe != "p1":
        meta.update(
            slot=example.slot,
            slot_phrase=slot,
            value=example.value,
            old_value=example.old_value,
            previous=list(example.previous),
            goal_label=text.goal_label(example.goal),
            update_turn=f"T{example.update_turn}",
            update_position=example.update_turn / max(1, len(turns) - 1),
            answer_turns=[f"T{i}" for i in example.answer_turns],
            deletions={k: None if v is None else [f"T{i}" for i in v] for k, v in example.deletions.items()},
            # where the evidence lies (TPBench §6.3), as scalars the aggregate can count
            update_states_value=example.update_turn in example.answer_turns,
            evidence_turns=len({example.update_turn, *example.answer_turns}),
            system_states_value=any(turns[i].speaker == "system" for i in example.answer_turns),
        )
    return Source.from_segments(
        segments,
        "\n",
        id=example.id,
        question=question,
        answers=answers,
        metadata=meta,
        system=prompts.SYSTEM,
    )


@dataclass
class _TPBench(Task):
    """Fields: ``corpus`` (synthetic, sgd, multiwoz21, multiwoz22), ``path`` (the official files: a .json or
    .json.gz file, a folder or a zip), ``synthetic_dialogues`` (size of the generated corpus),
    ``first_fills`` (count a slot's first value as an update, not only revisions), ``probe_set``
    (``build``: kvx's construction; ``release``: the public release's probes from ``release_path``, a
    clone of github.com/kentech-sail/TPBench), ``saved_context`` (with ``release``: the method whose
    saved compressed context the reader gets, e.g. ``recency``; None: the whole dialogue),
    ``draw_then_filter`` (P2: the release's protocol, ``n_sources`` drawn and then filtered; else
    ``n_sources`` probes that pass, ``probes.draw_filtered``)."""

    corpus: str = "synthetic"
    path: str | None = None
    synthetic_dialogues: int = 400
    first_fills: bool = False
    probe_set: str = field(default="build", metadata=WHEN_SET)
    release_path: str | None = field(default=None, metadata=WHEN_SET)
    saved_context: str | None = field(default=None, metadata=WHEN_SET)
    #: P2 cells stored before the field drew then filtered: they keep their ids
    draw_then_filter: bool = field(default=False, metadata=when_set(True))

    probe: ClassVar[str]
    #: tpbench-3: the builder follows the release's update, reference, origin and draw rules
    #: (probes.py), so tpbench-2 probe sets and these are never one cell
    scorer_version: ClassVar[str] = "tpbench-3"
    max_new_tokens: ClassVar[int] = 96  # Appendix A: P1/P2 96 output tokens, P3 128

    def validate(self) -> None:
        if self.probe_set not in PROBE_SETS:
            raise ConfigError(f"task.probe_set={self.probe_set!r} is not one of {list(PROBE_SETS)}")
        if self.probe_set == "release":
            self._validate_release()
            return
        for key in ("release_path", "saved_context"):
            if getattr(self, key) is not None:
                raise ConfigError(
                    f"task.{key} is set but task.probe_set=build: it needs task.probe_set=release"
                )
        check_choice("task.corpus", self.corpus, CORPORA)
        if self.corpus == "synthetic":
            if self.synthetic_dialogues < 1:
                raise ConfigError(f"task.synthetic_dialogues={self.synthetic_dialogues} must be >= 1")
            return
        where = dialogue_corpora.PUBLIC[self.corpus]
        if not self.path:
            raise ConfigError(f"task.path is not set: give the {self.corpus} files (public data: {where})")
        if not Path(self.path).exists():
            raise ConfigError(f"task.path={self.path!r}: no such file or folder (public data: {where})")

    def _validate_release(self) -> None:
        """The release's files read and checked row by row, and the saved method named, before any
        model loads."""
        if self.corpus not in release.DATASETS:
            raise ConfigError(
                f"task.corpus={self.corpus!r} has no release probe set: one of {sorted(release.DATASETS)}"
            )
        if self.path is not None:
            raise ConfigError(
                "task.path is not read with task.probe_set=release (the dialogues are the release's)"
            )
        if not self.release_path:
            raise ConfigError("task.release_path is not set: give a clone of github.com/kentech-sail/TPBench")
        if not Path(self.release_path).is_dir():
            raise ConfigError(f"task.release_path={self.release_path!r}: no such folder")
        loaded = release.load(str(self.release_path), self.corpus)
        if self.saved_context is not None:
            release.check_method(loaded, self.saved_context)

    def examples(self, n: int, seed: int) -> tuple[list[Example], Counts]:
        """The probe set of one seed and the counts of its construction rules."""
        if self.probe_set == "release":
            pairs, counts = self._release_pairs(n, seed)
            return [e for e, _ in pairs], counts
        args = (self.probe, self.corpus, self.path, self.synthetic_dialogues, self.first_fills)
        return _probe_set(*args, self.draw_then_filter, n, seed)

    def _release_pairs(self, n: int, seed: int) -> tuple[list[tuple[Example, release.PoolRow]], Counts]:
        root = str(self.release_path)
        return release.probe_set(root, self.probe, self.corpus, n, seed, self.draw_then_filter)

    def sources(self, n: int, seed: int, context_tokens: int, count_tokens: CountTokens) -> list[Source]:
        if self.probe_set == "release":
            return self._release_sources(n, seed)
        examples, _ = self.examples(n, seed)
        digest = probe_set_digest(examples)
        return [to_source(e, self.corpus, digest) for e in examples]

    def _release_sources(self, n: int, seed: int) -> list[Source]:
        """The release's probes; with ``saved_context`` each context is that method's saved text,
        recorded with its sha256 and the pool file's."""
        loaded = release.load(str(self.release_path), self.corpus)
        pairs, _ = self._release_pairs(n, seed)
        digest = probe_set_digest([e for e, _ in pairs])
        out = []
        for example, row in pairs:
            extra: dict[str, Any] = {
                "release_id": row.dialogue_id,
                "release_file": loaded.pool_path,
                "release_sha256": loaded.pool_sha256,
            }
            context = None
            if self.saved_context is not None:
                saved = row.methods[self.saved_context]
                context, marked = release.saved_segments(saved)
                extra["saved_context"] = {
                    "method": self.saved_context,
                    "file": loaded.pool_path,
                    "line": row.line,
                    "sha256": hashlib.sha256(saved.encode()).hexdigest(),
                    "pool_sha256": loaded.pool_sha256,
                    "turn_marked": marked,
                    "ratio": 1.0 if self.saved_context == release.FULL else release.RATIO,
                }
            slot = loaded.labels[row.dialogue_id]["slot_human"] if self.probe != "p1" else ""
            out.append(to_source(example, self.corpus, digest, slot=slot, context=context, extra=extra))
        return out

    def manifest(self, n: int, seed: int) -> dict[str, Any]:
        """What a run's split is made of: the corpus files, the construction counts, the set's hash."""
        if self.probe_set == "release":
            return self._release_manifest(n, seed)
        examples, counts = self.examples(n, seed)
        corpus = dialogues(self.corpus, self.path, self.synthetic_dialogues)
        return {
            "probe": self.probe,
            "corpus": self.corpus,
            "files": sorted({d.origin for d in corpus}),
            "dialogues": len(corpus),
            "seed": seed,
            "counts": counts,
            "examples": len(examples),
            "probe_set_sha256": probe_set_digest(examples),
        }

    def _release_manifest(self, n: int, seed: int) -> dict[str, Any]:
        loaded = release.load(str(self.release_path), self.corpus)
        examples, counts = self.examples(n, seed)
        return {
            "probe": self.probe,
            "corpus": self.corpus,
            "probe_set": "release",
            "files": {loaded.pool_path: loaded.pool_sha256, loaded.labels_path: loaded.labels_sha256},
            "saved_context": self.saved_context,
            "seed": seed,
            "counts": counts,
            "examples": len(examples),
            "probe_set_sha256": probe_set_digest(examples),
        }

    def _score(self, reply: Reply, meta: dict[str, Any]) -> dict[str, float]:
        if self.probe == "p1":
            return scoring.score_p1(reply, meta["goal"])
        if self.probe == "p2":
            return scoring.score_p2(reply, meta["value"], meta["previous"], self.corpus)
        return scoring.score_p3(reply, meta["goal_label"], meta["value"], self.corpus)

    def evaluate(self, answer: str, source: Source) -> Score:
        meta = source.metadata
        reply = parse_reply(answer)
        metrics = self._score(reply, meta)
        # sensitivity for readers that ignore the JSON format (small models): the same rule on the
        # raw reply text; the paper's scores above stay primary
        raw = Reply(answer.strip(), "", not answer.strip(), False)
        lenient = metrics if reply.parsed else self._score(raw, meta)
        metrics.update(lenient_strict=lenient["strict"], lenient_loose=lenient["loose"])
        kept = {s.id for s in source.parts() if s.role in SPEAKERS}
        saved = meta.get("saved_context")
        plain = saved is not None and not saved["turn_marked"]
        details = {
            "value": reply.value,
            "dialogue_id": meta["dialogue_id"],
            "probe_set_sha256": meta["probe_set_sha256"],
            "turns_kept": len(kept),
            "turns_total": len(meta["utterances"]),
            # a plain-text saved context has no turn ids: what it holds is judged on its text
            **(
                scoring.text_retention(meta, source.context)
                if plain
                else scoring.retention(meta, kept, meta["utterances"])
            ),
        }
        if "release_id" in meta:
            details["release_id"] = meta["release_id"]
        if saved is not None:
            details.update(
                saved_context=saved["method"],
                saved_ratio=saved["ratio"],
                saved_file=saved["file"],
                saved_sha256=saved["sha256"],
            )
        if self.probe != "p1":
            details.update(
                update_turn=meta["update_turn"],
                answer_turns=meta["answer_turns"],
                update_position=meta["update_position"],
                first_fill=not meta["old_value"],
                # for the aggregate's slot-type, alias-exclusion and evidence tables (records only)
                slot=meta["slot"],
                old_value=meta["old_value"],
                current_value=meta["value"],
                update_states_value=meta["update_states_value"],
                evidence_turns=meta["evidence_turns"],
                system_states_value=meta["system_states_value"],
            )
        return Score.of(metrics["strict"], reply.value.lower(), metrics=metrics, details=details)


@functools.lru_cache(maxsize=32)
def _probe_set(
    probe: str,
    corpus: str,
    path: str | None,
    synthetic: int,
    first_fills: bool,
    draw_then_filter: bool,
    n: int,
    seed: int,
) -> tuple[list[Example], Counts]:
    return build(probe, dialogues(corpus, path, synthetic), corpus, n, seed, first_fills, draw_then_filter)


def probe_set_digest(examples: list[Example]) -> str:
    return hashlib.sha256(json.dumps([e.digest() for e in examples]).encode()).hexdigest()


@dataclass
class InitialGoal(_TPBench):
    """P1: the user's initial goal (first sentence of the first user turn)."""

    probe: ClassVar[str] = "p1"
    #: P1 has no filter after its draw: the field changes nothing, so it is no part of the identity
    draw_then_filter: bool = field(default=False, metadata=NEVER)


@dataclass
class CurrentValue(_TPBench):
    """P2: the current value of a slot after its final annotated update."""

    probe: ClassVar[str] = "p2"


@dataclass
class GoalAndLateUpdate(_TPBench):
    """P3: the initial goal and a late update in one ``task; slot: value`` answer."""

    probe: ClassVar[str] = "p3"
    max_new_tokens: ClassVar[int] = 128
    #: P3 filters its pool before sampling: the field changes nothing, so it is no part of the identity
    draw_then_filter: bool = field(default=False, metadata=NEVER)
