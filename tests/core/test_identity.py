"""One identity per cell, fixed token budgets, text transforms and bounded memos, in-process."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from kvx.compressors.presets import TOVA, SnapKV
from kvx.core.identity import SettingSpec, varying
from kvx.core.lru import ByteLRU, nbytes
from kvx.core.records import as_dicts
from kvx.core.registry import canonical, registry
from kvx.core.setting import n_kept, ratio_for_budget
from kvx.core.source import Segment, Source
from kvx.pipeline.cell import Cell
from kvx.pipeline.compress import compress
from kvx.pipeline.transform import transform_source
from kvx.tasks.ruler import NiahSingle
from kvx.transforms.base import Transform

READER = {"name": "tiny", "fields": {"seed": 0}, "revision": "random-seed-0"}


def cell(compressor=None, **kw) -> Cell:
    base = dict(
        task_name="ruler_niah_single",
        task=NiahSingle(),
        reader_name="tiny",
        press_name="snapkv",
        compressor=compressor or SnapKV(),
        ratio=0.5,
        seed=0,
        n_sources=3,
        context_tokens=400,
        max_new_tokens=6,
    )
    return Cell(**{**base, **kw})


def test_every_semantic_field_makes_a_different_cell():
    base = cell().identity(READER)
    variants = {
        "press field": cell(SnapKV(window_size=16)).identity(READER),
        "ratio": cell(ratio=0.25).identity(READER),
        "budget": cell(budget_tokens=64).identity(READER),
        "other budget": cell(budget_tokens=128).identity(READER),
        "query aware": cell(query_aware=True).identity(READER),
        "decoding budget": cell(max_new_tokens=8).identity(READER),
        "split size": cell(n_sources=4).identity(READER),
        "context size": cell(context_tokens=800).identity(READER),
        "seed": cell(seed=1).identity(READER),
        "task field": cell(task=NiahSingle(**_other_field(NiahSingle()))).identity(READER),
        "reader": cell().identity({**READER, "fields": {"seed": 1}}),
        "precision": cell().identity({**READER, "fields": {"seed": 0, "precision": "bf16-true"}}),
        "compressor": cell(TOVA(), press_name="tova").identity(READER),
    }
    ids = {name: v.id for name, v in variants.items()}
    assert base.id not in ids.values() and len(set(ids.values())) == len(ids), ids
    # the control group ignores what only the compressed side sees
    for name in ("press field", "ratio", "budget", "query aware", "compressor"):
        assert variants[name].split == base.split, name
    for name in ("decoding budget", "split size", "seed", "reader", "precision"):
        assert variants[name].split != base.split, name


def _other_field(task) -> dict:
    """Some integer field of the task set to another valid value."""
    for f in dataclasses.fields(task):
        value = getattr(task, f.name)
        if isinstance(value, int) and not isinstance(value, bool):
            return {f.name: value + 1}
    pytest.skip("NiahSingle has no integer field")


def test_one_setting_is_one_cell():
    none = registry("compressor").get("none")()
    a = cell(none, press_name="none", ratio=0.25).identity(READER)
    b = cell(none, press_name="none", ratio=0.5).identity(READER)
    assert a.id == b.id and a.setting == SettingSpec("none", None)
    hqq = registry("compressor").get("hqq")
    assert cell(hqq(bits=4), press_name="hqq").identity(READER).id == (
        cell(hqq(bits=4), press_name="hqq", ratio=0.25).identity(READER).id
    )
    assert cell(hqq(), press_name="hqq", ratio=0.25).identity(READER).id != (
        cell(hqq(), press_name="hqq", ratio=0.5).identity(READER).id
    )
    # a name typed qualified is the built-in: one identity
    assert canonical("compressor", "kvx:snapkv") == canonical("compressor", "snapkv") == "snapkv"


def test_flat_fields_and_what_varies():
    a = cell(SnapKV(window_size=16)).identity(READER).flat()
    b = cell(SnapKV(window_size=32)).identity(READER).flat()
    assert a["press"] == "snapkv" and a["press.window_size"] == 16 and a["setting.kind"] == "ratio"
    assert a["reader.revision"] == "random-seed-0" and a["task.scorer_version"] == "1"
    assert varying({"a": a, "b": b}) == ["press.window_size"]
    c = cell(budget_tokens=100).identity(READER).flat()
    assert varying({"a": a, "c": c}) == ["press.window_size"]  # setting.* is the matrix's own column


def _changed(value):
    """Another value of a field's type, or None when the test cannot make one."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "_other"
    return 1 if value is None else None


def test_two_cells_of_the_registry_never_share_a_label():
    """Every registered compressor at its defaults and with each field changed alone, at two
    ratios, a budget and both query-aware modes: labels differ wherever cell identities do."""
    cells = []
    for name in registry("compressor").names():
        kind = registry("compressor").get(name)
        variants = [kind()]
        for f in dataclasses.fields(kind):
            other = _changed(getattr(kind(), f.name))
            if other is not None and not f.name.startswith("_"):
                variants.append(kind(**{f.name: other}))
        for comp in variants:
            modes = ({"query_aware": "prompt"}, {"query_aware": "question"})
            for kw in ({"ratio": 0.5}, {"ratio": 0.25}, {"budget_tokens": 64}, *modes):
                cells.append(cell(comp, press_name=name, **kw))
    by_label: dict[str, set[str]] = {}
    for c in cells:
        by_label.setdefault(c.label(), set()).add(c.identity(READER).id)
    assert {label: ids for label, ids in by_label.items() if len(ids) > 1} == {}
    assert len(by_label) > 4 * len(registry("compressor").names())


def test_labels_show_only_what_differs_from_the_defaults():
    hqq = registry("compressor").get("hqq")
    assert cell().label() == "snapkv@0.5" and cell(budget_tokens=64).label() == "snapkv@64 tok"
    assert cell(SnapKV(window_size=64, kernel_size=5)).label() == "snapkv@0.5"
    assert cell(SnapKV(window_size=32)).label() == "snapkv[window_size=32]@0.5"
    assert cell(hqq(), press_name="hqq").label() == "hqq@0.5"
    labels = [cell(hqq(bits=b, group_size=16), press_name="hqq").label() for b in (8, 4, 2)]
    assert labels == [f"hqq[bits={b},group_size=16]@-" for b in (8, 4, 2)]
    assert cell(query_aware=True).label() == "snapkv[query_aware=prompt]@0.5"
    assert cell(query_aware="question").label() == "snapkv[query_aware=question]@0.5"


@pytest.mark.parametrize(
    ("budget", "n", "ratio"), [(128, 1000, 0.8715), (1, 10, 0.85), (300, 301, 0.5 / 301)]
)
def test_ratio_for_budget_by_hand(budget, n, ratio):
    assert ratio_for_budget(budget, n) == pytest.approx(ratio)
    assert n_kept(n, ratio_for_budget(budget, n)) == budget


def test_ratio_for_budget_keeps_exactly_the_budget_everywhere():
    assert ratio_for_budget(500, 500) == 0.0 and ratio_for_budget(900, 500) == 0.0
    for n in range(1, 3000, 7):
        for budget in {1, n // 3, n // 2, n - 1} - {0}:
            if budget < n:
                assert n_kept(n, ratio_for_budget(budget, n)) == budget, (budget, n)


BUDGET = 60
SMALL = {"snapkv": {"window_size": 8}, "pyramidkv": {"window_size": 8}}
#: presses that need a field set to be valid at all
REQUIRED = {
    "per_layer": {"compression_ratios": [0.5, 0.5, 0.5]},
    "dms": {"threshold": 0.5},
    "quantized": {"group_size": 32},  # the tiny reader's 2 x 16 elements a token
}


def _press(name: str):
    comp = registry("compressor").get(name)(**SMALL.get(name, REQUIRED.get(name, {})))
    if name in ("adakv", "critical_adakv", "critical", "entropy_gated_chunkkv", "quantized"):
        comp.base = registry("compressor").get("snapkv")(window_size=8)
    if name == "chunkkv":  # K-norm scores: whole chunks, none favoured by a window
        comp.base = registry("compressor").get("knorm")()
    return comp


FAST_PATH = sorted(
    name for name in registry("compressor").names() if ":" not in name and _press(name).fast_path
)
#: what a token budget cannot mean for them (each says why in its reason)
NO_BUDGET = ("think", "hqq", "composed", "decoding", "cam", "compression_ratio_decoding", "per_layer", "dms")


@pytest.fixture(scope="module")
def long_prompt(tiny):
    return tiny.encode("The grass is green. The sky is blue. " * 8, "What colour is the sky?", "It is")


@pytest.mark.parametrize("name", FAST_PATH)
def test_budget_tokens_on_every_fast_path_press(tiny, engine, long_prompt, name):
    comp = _press(name)
    n = long_prompt.context_ids.shape[1]
    setting = comp.resolve(comp.setting_spec(0.5, BUDGET), n, tiny.model)
    if name in NO_BUDGET:
        assert not setting.supported and "budget" in setting.reason
        return
    if name == "none":  # keeps everything whatever is asked
        assert setting.supported and setting.kind == "none"
        return
    assert setting.supported and setting.kind == "budget_tokens" and setting.value == BUDGET
    with torch.inference_mode():
        cache, run = compress(engine.caches, tiny, comp, setting.ratio, long_prompt, False)
    lengths = [cache.get_seq_length(i) for i in range(len(cache.layers))]
    if name in ("adakv", "critical_adakv"):  # masks keys per head: BUDGET kept per head on average
        assert lengths == [n] * len(lengths)
        kept = run.retained.mask.sum(-1).float().mean().item()
        assert kept == pytest.approx(BUDGET, abs=1)
    elif name == "pyramidkv":  # per-layer budgets around BUDGET
        budgets = setting.method_parameter["kept_tokens_per_layer"]
        assert lengths == budgets and abs(sum(budgets) / len(budgets) - BUDGET) <= 8
    elif name == "chunkkv":  # whole chunks: BUDGET // chunk_length of them
        assert lengths[0] == BUDGET // comp.chunk_length * comp.chunk_length
    elif name == "entropy_gated_chunkkv":  # chunks of two lengths: within one long chunk of BUDGET
        assert all(abs(length - BUDGET) <= comp.chunk_length for length in lengths), lengths
    else:
        assert lengths == [BUDGET] * len(lengths), lengths


def test_budget_is_unsupported_for_hqq_and_think_records(tiny, engine):
    for name in ("hqq", "think"):
        comp = registry("compressor").get(name)()
        records = as_dicts(engine.run_cells([cell(comp, press_name=name, budget_tokens=64)], tiny, False)[0])
        assert all(r["status"] == "unsupported" and "budget" in r["reason"] for r in records)
        assert all(r["setting"]["kind"] == "budget_tokens" and r["setting"]["value"] == 64 for r in records)


def test_budget_cell_records_kind_value_and_the_ratio_it_ran_with(tiny, engine):
    records = as_dicts(engine.run_cells([cell(SnapKV(window_size=16), budget_tokens=100)], tiny, False)[0])
    for r in records:
        s = r["setting"]
        assert r["status"] == "supported" and s["kind"] == "budget_tokens" and s["value"] == 100
        assert (
            s["method_parameter"]["kept_tokens_per_head"] == 100
            and s["method_parameter"]["budget_tokens"] == 100
        )
        assert n_kept(r["n_context_tokens"], s["ratio"]) == 100
        assert "/budget_tokens=100/" in r["key"]


@dataclasses.dataclass
class DropSecond(Transform):
    def apply(self, source):
        return [p for i, p in enumerate(source.parts()) if i != 1]


@dataclasses.dataclass
class Rewrite(Transform):
    def apply(self, source):
        first, *rest = source.parts()
        return [Segment(first.id, first.text.upper()), *rest]


def test_transform_moves_evidence_with_kept_segments_and_drops_the_rest():
    source = Source.from_segments(
        [Segment("a", "Alpha says one."), Segment("b", "Beta says two."), Segment("c", "Gamma says three.")],
        "\n",
        id="s",
        question="q",
        answers=["three"],
        evidence=[(6, 10), (21, 25), (42, 47)],  # "says" in a and b, "three" in c
    )
    assert [source.context[s:e] for s, e in source.evidence] == ["says", "says", "three"]
    out = transform_source(DropSecond(), "drop_second", source)
    assert out.source.context == "Alpha says one.\nGamma says three."
    assert [out.source.context[s:e] for s, e in out.source.evidence] == ["says", "three"]
    assert out.info["kept_segment_ids"] == ["a", "c"] and out.info["evidence_kept"] == 2
    assert out.info["evidence_total"] == 3 and out.info["n_segments"] == 3
    rewritten = transform_source(Rewrite(), "rewrite", source)  # evidence in a rewritten segment is lost
    assert [rewritten.source.context[s:e] for s, e in rewritten.source.evidence] == ["says", "three"]
    assert transform_source(registry("transform").get("none")(), "none", source) is None


def test_reader_reports_segment_token_spans(tiny):
    source = Source.from_segments(
        [Segment("a", "Alpha says one."), Segment("b", "Beta says two.")],
        "\n",
        id="s",
        question="q",
        answers=["x"],
    )
    prompt = tiny.render(source)
    (a0, a1), (b0, b1) = prompt.segment_spans
    ids = prompt.context_ids[0]
    assert tiny.tokenizer.decode(ids[a0:a1]) == "Alpha says one."
    assert tiny.tokenizer.decode(ids[b0:b1]) == "Beta says two."


def test_byte_lru_is_bounded_by_bytes_not_count():
    lru: ByteLRU[torch.Tensor] = ByteLRU(max_bytes=3 * 400)
    for i in range(5):
        lru.put(i, torch.zeros(100))  # 400 bytes each
    assert len(lru) == 3 and 0 not in lru and 4 in lru and lru.total == 1200
    lru.put("big", torch.zeros(1000))  # larger than the whole budget: not kept, nothing evicted
    assert "big" not in lru and len(lru) == 3
    assert nbytes({"a": torch.zeros(10), "b": [torch.zeros(5, dtype=torch.float64)]}) == 40 + 40 + 64 + 64
    assert lru.memo("new", lambda: torch.zeros(100)).numel() == 100 and 1 not in lru


def _save_tiny(folder, seed: int) -> str:
    from kvx.readers.tiny import TinyLlama

    model, tok, _ = TinyLlama(seed=seed, num_hidden_layers=1).load_model()
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)


def test_hf_reader_identity_hashes_local_folders_and_resolves_revisions(tmp_path, monkeypatch):
    from huggingface_hub import constants

    from kvx.modeling.reader import reader_identity
    from kvx.readers.hf import HFReader, resolve_revision

    monkeypatch.setenv("KVX_CACHE_DIR", str(tmp_path / "cache"))
    a, b = _save_tiny(tmp_path / "a", 0), _save_tiny(tmp_path / "b", 1)
    ida, idb = reader_identity("hf", HFReader(model_id=a)), reader_identity("hf", HFReader(model_id=b))
    assert ida["weights_sha256"] != idb["weights_sha256"] and len(ida["weights_sha256"]) == 64
    assert ida["chat_template_sha256"] == idb["chat_template_sha256"]  # same tokenizer, same template
    assert "revision" not in ida  # a folder has no revision: its content is the identity
    assert (tmp_path / "cache" / "folder-hashes.json").is_file()  # multi-GB folders are hashed once
    again = reader_identity("hf", HFReader(model_id=a, precision="16-true"))
    assert again["weights_sha256"] == ida["weights_sha256"] and again["fields"]["precision"] == "16-true"
    # a branch resolves to its commit through the local hub cache, offline
    refs = tmp_path / "hub" / "models--org--model" / "refs"
    refs.mkdir(parents=True)
    (refs / "main").write_text("a" * 40)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert resolve_revision("org/model", "main") == "a" * 40
    assert resolve_revision("org/model", "b" * 40) == "b" * 40
    from kvx.core.errors import ConfigError

    with pytest.raises(ConfigError, match="reader.revision='v2'.*40-hex commit"):
        resolve_revision("org/model", "v2")


@dataclasses.dataclass
class Fails(Transform):
    def apply(self, source):
        raise RuntimeError("cannot select")


def test_a_failing_transform_is_an_error_record_never_a_wrong_answer(tiny, engine):
    records = as_dicts(engine.run_cells([cell(transform_name="fails", transform=Fails())], tiny, False)[0])
    assert all(
        r["status"] == "error" and r["reason"] == "transform fails: RuntimeError: cannot select"
        for r in records
    )
    assert all(r["compressed"] is None and r["transition"] is None for r in records)
    assert engine.prefills == 0  # nothing ran for it


def test_coverage_reports_each_segments_retained_share(tiny, engine):
    class Pool(NiahSingle):
        """The RULER source cut into three equal segments (byte tokenizer: equal token counts too)."""

        def sources(self, n, seed, context_tokens, count_tokens):
            out = []
            for s in super().sources(n, seed, context_tokens, count_tokens):
                third = len(s.context) // 3
                texts = [s.context[:third], s.context[third : 2 * third], s.context[2 * third :]]
                segments = [Segment(f"p{i}", t) for i, t in enumerate(texts)]
                out.append(
                    Source.from_segments(
                        segments,
                        "",
                        id=s.id,
                        question=s.question,
                        answers=s.answers,
                        evidence=s.evidence,
                        answer_prefix=s.answer_prefix,
                    )
                )
            return out

    c = cell(
        TOVA(),
        press_name="tova",
        task=Pool(),
        diagnostics=[("coverage", registry("diagnostic").get("coverage")())],
    )
    for r in as_dicts(engine.run_cells([c], tiny, False)[0]):
        shares = r["diagnostics"]["coverage"]["values"]["segments"]
        assert set(shares) == {"p0", "p1", "p2"} and all(0 <= v <= 1 for v in shares.values())
        # TOVA keeps half of every layer: the segments' shares average to about half
        assert sum(shares.values()) / 3 == pytest.approx(0.5, abs=0.05)


def test_task_defaults_vary_only_within_a_task():
    p2 = {"task": "tpbench_p2", "max_new_tokens": 96, "n_sources": 10}
    p3 = {"task": "tpbench_p3", "max_new_tokens": 128, "n_sources": 10}
    assert varying({"a": p2, "b": p3}) == []  # each task's own budget: no sweep
    assert varying({"a": p2, "b": {**p2, "max_new_tokens": 48}}) == ["max_new_tokens"]


def _wrapped(name: str, base: str, base_fields: dict | None = None, **fields):
    comp = registry("compressor").get(name)(**fields)
    comp.base = registry("compressor").get(base)(**(base_fields or {}))
    return comp


@pytest.mark.parametrize(
    ("name", "build", "stored_id"),
    [  # ids kvx 38ac256 (before kvpress's names and open bases) gave these settings
        ("adakv", lambda: _wrapped("adakv", "snapkv"), "4c3eadb8d3348a87"),
        (
            "adakv",
            lambda: _wrapped("adakv", "snapkv", {"window_size": 32}, alpha_safeguard=0.1),
            "3eae4bf8ff0912ee",
        ),
        ("chunkkv", lambda: _wrapped("chunkkv", "knorm"), "f4d4dd55a8842ede"),
        ("chunkkv", lambda: _wrapped("chunkkv", "knorm", chunk_length=10), "a50c40b8e1d195b5"),
        ("block", lambda: _wrapped("block", "knorm"), "f73875e6e760dd18"),
        ("key_rerotation", lambda: _wrapped("key_rerotation", "knorm"), "3f6e7e563b025ca0"),
        (
            "expected_attention_plain",
            lambda: registry("compressor").get("expected_attention_plain")(),
            "d275a23597586389",
        ),
        (
            "expected_attention_plain",
            lambda: registry("compressor").get("expected_attention_plain")(n_sink=8),
            "8f8784a15db8d37a",
        ),
    ],
)
def test_a_setting_stored_before_kvpress_names_keeps_its_cell_id(name, build, stored_id):
    """A store written before presses took kvpress's names and wrappers any base keeps its cells: the
    same setting hashes to the id it had, while its flat fields name today's press and its base."""
    c = cell(build(), press_name=name)
    identity = c.identity(READER)
    assert identity.id == stored_id
    assert identity.flat()["press"] == name


def test_a_wrapper_over_another_base_is_another_cell_and_says_so():
    snap, tova = _wrapped("chunkkv", "snapkv"), _wrapped("chunkkv", "tova")
    ids = {
        cell(c, press_name="chunkkv").identity(READER).id for c in (snap, tova, _wrapped("chunkkv", "knorm"))
    }
    assert len(ids) == 3
    flat = cell(snap, press_name="chunkkv").identity(READER).flat()
    assert flat["press.base"] == "snapkv" and flat["press.base.window_size"] == 64
    assert cell(tova, press_name="chunkkv").label() == "chunkkv(tova)@0.5"
    assert cell(snap, press_name="chunkkv").label() == "chunkkv@0.5"  # the default base goes unsaid
