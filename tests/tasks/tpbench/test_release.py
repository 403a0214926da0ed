"""``task.probe_set=release``: the public TPBench release's probes and saved contexts, on a hand-made
miniature written in the release's published layout (``data/construction/sgd_compressed_r30.jsonl``,
``results/diagnostics/update_evidence/sgd_goal_labels.jsonl``).

Each rule pinned here is one of the release's ``scripts/builders/build_probes.py``: P1/P2 shuffle the
pool in file order with ``random.Random(seed)`` and keep the first n, P2 then filters; P3 samples the
sorted eligible ids and keeps them sorted.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import pytest

from kvx.core.errors import ConfigError
from kvx.core.identity import component, digest, fields_of
from kvx.tasks.tpbench.release import saved_segments, split_turns
from kvx.tasks.tpbench.task import CurrentValue, GoalAndLateUpdate, InitialGoal

U, S = "USER", "SYSTEM"


def _turns(*texts: str) -> list[tuple[str, str]]:
    return [(U if i % 2 == 0 else S, t) for i, t in enumerate(texts)]


def _filler(n: int) -> list[str]:
    return [f"Filler line number {i} here." for i in range(n)]


# (dialogue id, turns, label overrides); every dialogue's first turn states the goal
DIALOGUES = {
    # a kept P2 probe and P3-eligible: 12 turns, the update at T8 (8/11 >= 0.5); "Italian" at T8, T9
    "v20_sgd_1_00001__qa_00": (
        _turns(
            "I want to eat out. Find a restaurant.",
            "Which cuisine?",
            "Something Chinese please.",
            "Golden Wok is Chinese.",
            *_filler(4),
            "Actually make it Italian instead.",
            "Da Vinci serves Italian food.",
            "Great, thanks.",
            "Goodbye.",
        ),
        {
            "slot": "cuisine",
            "slot_human": "cuisine",
            "old_value": "Chinese",
            "new_value": "Italian",
            "origin": 8,
        },
    ),
    # not the final update of its slot: P2 drops it; P3 does not take it
    "v20_sgd_2_00002__qa_01": (
        _turns("Book me a bus to Fresno.", "For when?", "Tomorrow.", "Done.", *_filler(8)),
        {"slot": "to_city", "slot_human": "to city", "old_value": "LA", "new_value": "Fresno", "origin": 8},
        {"is_final_slot_update": False},
    ),
    # alias pair (equal before the comma): P2 drops it, P3 (no alias filter) may draw it
    "v20_sgd_3_00003__qa_00": (
        _turns("Find flights from Atlanta, GA.", "When?", *_filler(7), "Atlanta it is.", "OK.", "Bye."),
        {
            "slot": "origin_city",
            "slot_human": "origin city",
            "old_value": "Atlanta, GA",
            "new_value": "Atlanta",
        },
        {"origin_turn_id": 10},
    ),
    # the new value is never said: P2 drops it; the update at T4 is too early for P3
    "v20_sgd_4_00004__qa_00": (
        _turns("Get me a cab.", "Where to?", "The airport.", "Pool or shared?", "Pool.", *_filler(7)),
        {
            "slot": "ride_type",
            "slot_human": "ride type",
            "old_value": "Pool",
            "new_value": "Luxury",
            "origin": 4,
        },
    ),
    # kept by P2: "12 pm" is said as "12:00" (normalized times); P3-eligible at T6 (6/11)
    "v20_sgd_5_00005__qa_00": (
        _turns(
            "Reserve a table for dinner.",
            "What time?",
            "At 7 pm.",
            "Booked for 7 pm.",
            "I need a change.",
            "Sure.",
            "Make it 12:00 instead.",
            "Changed to noon.",
            *_filler(4),
        ),
        {"slot": "time", "slot_human": "time", "old_value": "7 pm", "new_value": "12 pm", "origin": 6},
    ),
    # P3: an unresolved origin is never eligible, whatever its position
    "v20_sgd_6_00006__qa_00": (
        _turns("Play some music.", "Which song?", *_filler(8), "Play Tennis court now.", "Playing."),
        {
            "slot": "song",
            "slot_human": "song name",
            "old_value": "team",
            "new_value": "Tennis court",
            "origin": 10,
        },
        {"origin_status": "ambiguous"},
    ),
}


def _render(turns: list[tuple[str, str]], keep: list[int] | None = None) -> str:
    keep = list(range(len(turns))) if keep is None else keep
    return "\n".join(f"[T{i}] {turns[i][0]}: {turns[i][1]}" for i in keep)


def _pool_row(did: str, turns: list[tuple[str, str]]) -> dict:
    n = len(turns)
    return {
        "dialogue_id": did,
        "dataset": "sgd",
        "n_turns": n,
        "ratio": 0.3,
        "k_turns": round(0.3 * n),
        "methods": {
            "full_context": _render(turns),
            "recency": _render(turns, list(range(n - round(0.3 * n), n))),
            "llmlingua2_cache": " ".join(t for _, t in turns[:3]),
        },
    }


def _label(did: str, turns: list[tuple[str, str]], spec: dict, extra: dict) -> dict:
    row = {
        "dialogue_id": did,
        "dataset": "sgd",
        "slot": spec["slot"],
        "slot_human": spec["slot_human"],
        "old_value": spec["old_value"],
        "new_value": spec["new_value"],
        "n_turns": len(turns),
        "goal_text": turns[0][1],
        "goal_first_sentence": turns[0][1].split(".")[0],
        "origin_turn_id": spec.get("origin", 0),
        "origin_status": "resolved",
        "final_slot_update_turn_id": spec.get("origin", 0),
        "is_final_slot_update": True,
    }
    return row | extra


def write_release(root: Path, pool: list[dict] | None = None, labels: list[dict] | None = None) -> Path:
    """The miniature in the release's layout; ``pool``/``labels`` replace the default rows."""
    if pool is None or labels is None:
        pool_rows, label_rows = [], []
        for did, (turns, spec, *extra) in DIALOGUES.items():
            pool_rows.append(_pool_row(did, turns))
            label_rows.append(_label(did, turns, spec, extra[0] if extra else {}))
        pool = pool_rows if pool is None else pool
        labels = label_rows if labels is None else labels
    for rel, rows in (
        ("data/construction/sgd_compressed_r30.jsonl", pool),
        ("results/diagnostics/update_evidence/sgd_goal_labels.jsonl", labels),
    ):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


IDS = list(DIALOGUES)


def _task(cls, root: Path, **kw):
    task = cls(corpus="sgd", probe_set="release", release_path=str(root), **kw)
    task.validate()
    return task


def _ids(task, n: int, seed: int) -> list[str]:
    return [s.metadata["release_id"] for s in task.sources(n, seed, 0, len)]


def _fisher_yates(n: int, seed: int) -> list[int]:
    """``random.Random(seed).shuffle(list(range(n)))`` spelled out: from the last position down, swap
    with a position below ``i + 1`` drawn by rejection from ``getrandbits`` (CPython's ``_randbelow``)."""
    rng, out = random.Random(seed), list(range(n))
    for i in reversed(range(1, n)):
        j = rng.getrandbits((i + 1).bit_length())
        while j >= i + 1:
            j = rng.getrandbits((i + 1).bit_length())
        out[i], out[j] = out[j], out[i]
    return out


def test_p1_is_the_seeded_shuffle_of_the_pool_in_file_order(tmp_path):
    root = write_release(tmp_path)
    order = _fisher_yates(len(IDS), 42)
    assert order == [3, 1, 2, 4, 0, 5]
    assert _ids(_task(InitialGoal, root), 4, 42) == [IDS[i] for i in order[:4]]
    sources = _task(InitialGoal, root).sources(6, 7, 0, len)
    first = next(s for s in sources if s.metadata["release_id"] == IDS[0])
    assert first.answers == ["I want to eat out"]  # the label's goal_first_sentence, as published
    assert first.metadata["release_file"].endswith("data/construction/sgd_compressed_r30.jsonl")


def test_p2_filters_the_shuffled_draw_in_order(tmp_path):
    root = write_release(tmp_path)
    task = _task(CurrentValue, root, draw_then_filter=True)  # the release's protocol, the presets'
    order = _fisher_yates(len(IDS), 42)
    # final, not alias, value said (IDS[4]: "12 pm" said as "12:00"); P2 reads no origin status (IDS[5])
    kept = {IDS[0], IDS[4], IDS[5]}
    assert _ids(task, 6, 42) == [IDS[i] for i in order if IDS[i] in kept] == [IDS[4], IDS[0], IDS[5]]
    _, counts = task.examples(6, 42)
    assert (counts["drawn"], counts["final_update"], counts["not_alias"], counts["occurs"]) == (6, 5, 4, 3)
    # n cuts the shuffled pool before filtering: the first 3 positions [3, 1, 2] keep none, 4 keep IDS[4]
    assert _ids(task, 3, 42) == []
    assert _ids(task, 4, 42) == [IDS[4]]
    # by default n is the probes wanted: the same shuffled order, read until n pass
    wanted = _task(CurrentValue, root)
    assert [_ids(wanted, n, 42) for n in (1, 2, 3)] == [[IDS[4]], [IDS[4], IDS[0]], [IDS[4], IDS[0], IDS[5]]]
    _, counts = wanted.examples(2, 42)
    assert (counts["drawn"], counts["final_update"], counts["not_alias"], counts["occurs"]) == (5, 4, 3, 2)


def test_p2_probe_fields_match_the_release_rows(tmp_path):
    root = write_release(tmp_path)
    source = next(
        s for s in _task(CurrentValue, root).sources(6, 42, 0, len) if s.metadata["release_id"] == IDS[0]
    )
    meta = source.metadata
    assert source.answers == ["Italian"]  # gold = new_value
    assert meta["slot"] == "cuisine" and "CURRENT value for cuisine?" in source.question  # slot_human
    assert meta["update_turn"] == "T8"  # origin_turn_id
    assert meta["answer_turns"] == ["T8", "T9"]  # evidence_turns: the whole value at phrase boundaries
    assert meta["previous"] == ["Chinese"]
    # controls: T8 (6 words) -> the user turn closest in length stating neither value: the fillers
    # at T4/T6 (5 words); T6 is nearer. T9 (system, 5 words) -> T5 ("Filler line number 1 here.")
    assert meta["deletions"] == {
        "update": ["T8"],
        "update_control": ["T6"],
        "answers": ["T8", "T9"],
        "answers_control": ["T6", "T7"],
    }
    # the dialogue as kvx renders it is the release's full_context byte for byte
    assert source.context == "Context:\n" + _render(DIALOGUES[IDS[0]][0])


def test_p3_samples_the_sorted_eligible_ids_and_keeps_them_sorted(tmp_path):
    root = write_release(tmp_path)
    task = _task(GoalAndLateUpdate, root)
    eligible = sorted([IDS[0], IDS[2], IDS[4]])  # not: not final, too early, unresolved
    expected = sorted(random.Random(42).sample(eligible, 2))
    assert _ids(task, 2, 42) == expected
    assert _ids(task, 10, 42) == eligible  # n beyond the pool: every eligible id
    source = next(s for s in task.sources(10, 42, 0, len) if s.metadata["release_id"] == IDS[2])
    # the release's gold: normalize_task(goal_first_sentence); slot_human: new_value
    assert source.answers == ["find flights from atlanta, ga; origin city: Atlanta"]


def test_saved_contexts_replay_the_pool_text_with_their_hashes(tmp_path):
    root = write_release(tmp_path)
    turns = DIALOGUES[IDS[0]][0]
    pool_sha = hashlib.sha256((root / "data/construction/sgd_compressed_r30.jsonl").read_bytes()).hexdigest()
    for method in ("recency", "llmlingua2_cache", "full_context"):
        task = _task(CurrentValue, root, saved_context=method)
        source = next(s for s in task.sources(6, 42, 0, len) if s.metadata["release_id"] == IDS[0])
        saved = _pool_row(IDS[0], turns)["methods"][method]
        assert source.context == "Context:\n" + saved
        info = source.metadata["saved_context"]
        assert info["sha256"] == hashlib.sha256(saved.encode()).hexdigest()
        assert info["pool_sha256"] == pool_sha and info["method"] == method
        assert info["turn_marked"] is (method != "llmlingua2_cache")
        score = task.evaluate('{"value": "Italian", "support": "", "abstain": false}', source)
        assert score.correct and score.details["saved_context"] == method
        assert score.details["saved_sha256"] == info["sha256"]
    # recency keeps T8..T11 (4 of 12): the update turn and its answer turns are kept
    recency = _task(CurrentValue, root, saved_context="recency")
    source = next(s for s in recency.sources(6, 42, 0, len) if s.metadata["release_id"] == IDS[0])
    details = recency.evaluate("{}", source).details
    assert (details["update_kept"], details["answer_turns_kept"], details["answer_retained"]) == (
        True,
        2,
        True,
    )
    assert details["saved_ratio"] == 0.3
    # the plain text (first three utterances) has no turn ids: retention by text only
    plain = _task(CurrentValue, root, saved_context="llmlingua2_cache")
    source = next(s for s in plain.sources(6, 42, 0, len) if s.metadata["release_id"] == IDS[0])
    details = plain.evaluate("{}", source).details
    assert details["answer_retained"] is False and "update_kept" not in details


def test_saved_segments_keep_marked_turns_and_plain_text():
    segments, marked = saved_segments("[T3] SYSTEM: Hi.\n[T7] USER: Bye.")
    assert marked and [(s.id, s.role) for s in segments] == [("T3", "system"), ("T7", "user")]
    segments, marked = saved_segments("Hi. Bye.")
    assert not marked and [s.text for s in segments] == ["Hi. Bye."]
    assert split_turns("[T0] USER: a\n\n[T1] SYSTEM: b\n") == [(0, "user", "a"), (1, "system", "b")]
    with pytest.raises(ValueError, match="not 0, 1, 2"):
        split_turns("[T0] USER: a\n[T2] SYSTEM: b", contiguous=True)


def test_cell_identity_unchanged_by_default_and_one_cell_per_saved_method(tmp_path):
    # the release's draw-then-filter is what P2 cells stored before ``draw_then_filter`` meant: their
    # ids are unchanged; n probes wanted (the new default) is a cell of its own
    old = {"corpus", "path", "synthetic_dialogues", "first_fills"}
    assert set(fields_of(CurrentValue(draw_then_filter=True))) == old
    assert fields_of(CurrentValue())["draw_then_filter"] is False
    for cls in (InitialGoal, GoalAndLateUpdate):  # no filter after their draw: no part of their identity
        assert set(fields_of(cls())) == set(fields_of(cls(draw_then_filter=True))) == old
    root = str(write_release(tmp_path))
    cells = {
        digest(
            component("tpbench_p2", CurrentValue(corpus="sgd", probe_set="release", release_path=root, **kw))
        )
        for kw in ({}, {"saved_context": "recency"}, {"saved_context": "llmlingua2_cache"})
    }
    assert len(cells) == 3


def _error(root: Path, match: str, **kw) -> None:
    with pytest.raises(ConfigError, match=match):
        CurrentValue(**({"corpus": "sgd", "probe_set": "release", "release_path": str(root)} | kw)).validate()


def test_missing_and_malformed_release_files_fail_naming_file_and_field(tmp_path):
    _error(tmp_path / "nowhere", "no such folder")
    _error(tmp_path, r"no release file .*sgd_compressed_r30\.jsonl")
    good = write_release(tmp_path / "good")
    pool = [_pool_row(d, t) for d, (t, *_) in DIALOGUES.items()]
    labels = [
        json.loads(x) for x in (good / "results/diagnostics/update_evidence/sgd_goal_labels.jsonl").open()
    ]
    no_methods = [dict(pool[0])] + pool[1:]
    del no_methods[0]["methods"]
    _error(
        write_release(tmp_path / "a", no_methods, labels),
        r"sgd_compressed_r30\.jsonl:1: field 'methods' is missing",
    )
    bad_flag = labels[:2] + [labels[2] | {"is_final_slot_update": "yes"}] + labels[3:]
    _error(
        write_release(tmp_path / "b", pool, bad_flag), r"goal_labels\.jsonl:3: field 'is_final_slot_update'"
    )
    _error(write_release(tmp_path / "c", pool, labels[1:]), r":1: field 'dialogue_id' .* has no row in")
    _error(write_release(tmp_path / "f", pool + pool[:1], labels), r":7: field 'dialogue_id' .* repeats")
    _error(
        write_release(tmp_path / "g", pool, labels + labels[:1]),
        r"labels\.jsonl:7: field 'dialogue_id' .* repeats",
    )
    unmarked = [pool[0] | {"methods": {**pool[0]["methods"], "full_context": "no turns"}}] + pool[1:]
    _error(write_release(tmp_path / "d", unmarked, labels), r":1: field 'methods.full_context': no \[Tn\]")
    (tmp_path / "e").mkdir()
    write_release(tmp_path / "e", pool, labels)
    path = tmp_path / "e/data/construction/sgd_compressed_r30.jsonl"
    path.write_text(path.read_text() + "{not json\n")
    _error(tmp_path / "e", r"sgd_compressed_r30\.jsonl:7: invalid JSON")


def test_bad_settings_fail_before_any_model_loads(tmp_path):
    root = write_release(tmp_path)
    _error(root, "did you mean 'recency'", saved_context="recncy")
    _error(root, "has no release probe set", corpus="synthetic")
    _error(root, "task.path is not read", path="somewhere")
    with pytest.raises(ConfigError, match="task.probe_set='releas' is not one of"):
        CurrentValue(probe_set="releas").validate()
    with pytest.raises(ConfigError, match="task.saved_context is set but task.probe_set=build"):
        CurrentValue(saved_context="recency").validate()


def _saved_record(method: str, dialogue: str, full: int, comp: int, press: str = "none") -> dict:
    """A record of a saved-context cell: the task field names the method (so the cell id), and both
    answers carry the ``saved_context`` details the task writes."""
    from kvx.testing.tpbench import record

    r = record(
        dialogue=dialogue,
        selector=None,
        full=full,
        comp=comp,
        press=press,
        ratio=0.7 if press != "none" else None,
    )
    r["cell"]["fields"]["task.saved_context"] = method
    r["cell"]["id"] = digest(r["cell"]["fields"])
    r["split"] += f"|{method}"
    for side in ("full", "compressed"):
        r[side]["details"] |= {
            "saved_context": method,
            "saved_ratio": 1.0 if method == "full_context" else 0.3,
        }
    return r


def test_saved_contexts_are_methods_and_their_controls_no_full_context():
    import pandas as pd

    from kvx.aggregate.read.rows import project
    from kvx.aggregate.tpbench.probes import tpbench_rows

    records = [
        # the control of a saved cell reads the saved text: it must not become full context (1 here)
        _saved_record("recency", "d0", full=1, comp=0),
        _saved_record("recency", "d1", full=1, comp=1),
        _saved_record("llmlingua2_cache", "d0", full=1, comp=1, press="snapkv"),
        # the release's full_context read whole: the full-context row (0 and 1, not the controls' 1s)
        _saved_record("full_context", "d0", full=0, comp=0),
        _saved_record("full_context", "d1", full=1, comp=1),
    ]
    rows = pd.DataFrame([project(r, "o", "s", {}, set()) for r in records])
    # the aggregate labels the task by its varying fields; the saved method is no task of its own
    methods = [r["cell"]["fields"]["task.saved_context"] for r in records]
    rows["task"] = [f"tpbench_p2[n_sources=4, saved_context={m}]" for m in methods]
    tp = tpbench_rows(rows)
    assert set(tp["task"]) == {"tpbench_p2[n_sources=4]"}
    got = {
        (m, b, d): s for m, b, d, s in zip(tp["method"], tp["budget"], tp["d.dialogue_id"], tp["m.strict"])
    }
    assert got == {
        ("saved:recency", "turns 0.3", "d0"): 0.0,
        ("saved:recency", "turns 0.3", "d1"): 1.0,
        ("saved:llmlingua2_cache+snapkv", "turns 0.3, cache 0.3", "d0"): 1.0,
        ("full context", "full", "d0"): 0.0,
        ("full context", "full", "d1"): 1.0,
    }
    assert set(tp.loc[tp["method"] == "saved:recency", "family"]) == {"saved"}


def test_the_counts_command_reads_the_release(tmp_path, capsys):
    """``python -m kvx.tasks.tpbench --release DIR`` counts the release's probe sets per seed, as
    the run's ``task_manifest.json`` does, and refuses ``--pool-out`` (kvx's own candidates) with it."""
    from kvx.tasks.tpbench.__main__ import main

    root = write_release(tmp_path)
    args = ["--corpus", "sgd", "--release", str(root), "--probes", "p2", "--seeds", "42", "--n", "6"]
    assert main([*args, "--json"]) == 0
    [manifest] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert manifest["probe_set"] == "release" and manifest["seed"] == 42
    assert (manifest["counts"]["drawn"], manifest["examples"]) == (6, 3)  # as the filter test above
    assert main([*args, "--pool-out", str(tmp_path / "pool.jsonl")]) == 2
    assert "does not go with --release" in capsys.readouterr().err
