"""Judges (kvx.judges): the released templates byte for byte, the parsers on the releases' replies, the
judging stage with a fake chat model, Cohen's kappa by hand, the aggregate's judged columns and agreement
table, and one CLI run with an in-process judge."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from kvx.aggregate.paired.judges import cohen_kappa
from kvx.core.errors import ConfigError
from kvx.core.records import Answer, Record, validate
from kvx.core.replies import json_object
from kvx.core.source import Source
from kvx.judges.base import Judgment, sha256
from kvx.judges.fmts_containment import FMTSContainment
from kvx.judges.longmemeval import TEMPLATES, LongMemEval
from kvx.judges.tpbench_p1 import PROMPT, SCHEMA, TPBenchP1
from kvx.modeling.chat import ChatReply, ChatRequest
from kvx.modeling.endpoint import Endpoint
from kvx.pipeline.judge import judge_metrics, judge_records
from kvx.testing import cli
from kvx.testing.cli import kvx_env
from kvx.testing.synthetic import ratio_record

# ----------------------------------------------------------------------------------- templates


def test_tpbench_prompt_and_schema_are_the_releases() -> None:
    """sha256 values from the release's results/semantic_evaluation/p1/model_record.json."""
    assert sha256(PROMPT) == "7dfe9b83e54b42437396438188962735f73c6b8efe4661a640116efc5211b440"
    assert sha256(json.dumps(SCHEMA, sort_keys=True)) == (
        "9f4ee86880e56f5bfba9788346e62fcfb6dbdd4a4f6087ff16a06e519851d66a"
    )


def p1_source(goal: str = "I want to visit some colleges", sid: str = "s0") -> Source:
    return Source(sid, "ctx", "q", [goal], metadata={"probe": "p1", "goal": goal})


def test_tpbench_request_is_the_releases_row_with_its_decoding() -> None:
    # the release's data/semantic_evaluation/p1_inputs.jsonl row of this pair, with kvx's content id
    release = (
        '{"id": "00990bbf8787b12e3557", "question": "What did the user initially want?", '
        '"reference": "I want to visit some colleges", "candidate": "visit some colleges"}'
    )
    request = TPBenchP1(reader="tiny").request(p1_source(), "visit some colleges")
    assert request.messages == (
        ("system", PROMPT),
        ("user", release.replace("00990bbf8787b12e3557", "142c04c07c1ebc538be6")),
    )
    assert request.max_tokens == 512
    options = request.body_options()
    assert options["reasoning_effort"] == "none"
    assert options["response_format"]["json_schema"] == {
        "name": "semantic_judgment",
        "strict": True,
        "schema": SCHEMA,
    }
    bare = TPBenchP1(reader="tiny", structured_output=False, reasoning_effort=None).request(p1_source(), "x")
    assert bare.options == ()


#: sha256 of each template string of get_anscheck_prompt in LongMemEval's src/evaluation/evaluate_qa.py
LONGMEMEVAL_SHA256 = {
    "general": "fba020ba3d57982efdc9a937c1c01f897b789a608c7f88e60244121f6505e5bc",
    "temporal-reasoning": "8d33a5fdd83afeeb4592454a965eab43d1fcb2dedc042d1d3892f4254be6c273",
    "knowledge-update": "183a9b3a6197ec620940f610cdc1207201ec98c1113dd633ea685cfc322fafac",
    "single-session-preference": "741ee3bcbea7ff5e8ed359acef61d2f8ded3de021bbcff6ee13de455f2e2aa9b",
    "abstention": "5c0b365a1e1d06db36377c735432b56e122ca3c428f89faf61d43a0d5a7e050b",
}


def test_longmemeval_templates_are_the_releases() -> None:
    assert {name: sha256(text) for name, text in TEMPLATES.items()} == LONGMEMEVAL_SHA256


def lme_source(kind: str, sid: str = "q1", **meta: object) -> Source:
    return Source(sid, "ctx", "When? Answer briefly.", ["3"], metadata={"question_type": kind, **meta})


def test_longmemeval_fills_the_question_types_template() -> None:
    judge = LongMemEval(reader="tiny")
    source = lme_source("knowledge-update", question="How many bikes do I own now?", answer="3")
    request = judge.request(source, "You own 3 bikes.")
    assert request.max_tokens == 10 and request.options == ()
    assert request.messages == (
        (
            "user",
            "I will give you a question, a correct answer, and a response from a model. Please answer yes if "
            "the response contains the correct answer. Otherwise, answer no. If the response contains some "
            "previous information along with an updated answer, the response should be considered as correct "
            "as long as the updated answer is the required answer.\n\nQuestion: How many bikes do I own now?"
            "\n\nCorrect Answer: 3\n\nModel Response: You own 3 bikes.\n\nIs the model response correct? "
            "Answer yes or no only.",
        ),
    )
    kinds = {
        "single-session-user": "general",
        "multi-session": "general",
        "temporal-reasoning": "temporal-reasoning",
        "single-session-preference": "single-session-preference",
    }
    for kind, template in kinds.items():
        assert judge.template(lme_source(kind)) == TEMPLATES[template]
    assert judge.template(lme_source("multi-session", sid="q7_abs")) == TEMPLATES["abstention"]
    assert judge.template(lme_source("multi-session", abstention=True)) == TEMPLATES["abstention"]
    assert (
        judge.request(lme_source("temporal-reasoning"), "r").messages[0][1].count("When? Answer briefly.")
        == 1
    )
    assert "not a LongMemEval question type" in judge.applies(p1_source())


# ------------------------------------------------------------------------------------- parsers

#: the release's raw output text for pair 0013ebb35f5c0f733c79 (results/semantic_evaluation/p1/raw_responses)
RELEASE_NO = (
    '{"id":"0013ebb35f5c0f733c79","equivalent":false,"core_goal":"partial","reference_type":"explicit_goal",'
    '"reason":"The reference asks for a place to eat moderate-priced Austrian food; the candidate only says '
    "'find information,' which omits the specific target and action.\"}"
)
#: the release's judgment of pair 00990bbf8787b12e3557 (results/semantic_evaluation/p1/judgments.jsonl)
RELEASE_YES = (
    '{"id": "00990bbf8787b12e3557", "equivalent": true, "core_goal": "correct", "reference_type": '
    '"explicit_goal", "reason": "Candidate preserves the initial action and target: visiting some colleges."}'
)


def test_tpbench_parser_on_the_releases_replies() -> None:
    judge = TPBenchP1(reader="tiny")
    no = judge.parse(RELEASE_NO)
    assert (no.status, no.correct, no.score, no.verdict) == ("judged", False, 0.0, "not_equivalent")
    assert no.details == {"core_goal": "partial", "reference_type": "explicit_goal"}
    assert no.explanation.startswith("The reference asks for a place to eat")
    yes = judge.parse(f"```json\n{RELEASE_YES}\n```")  # fenced, despite structured output
    assert (yes.status, yes.correct, yes.score, yes.verdict) == ("judged", True, 1.0, "equivalent")
    unsure = judge.parse('{"equivalent": null, "core_goal": "uncertain", "reason": "ambiguous"}')
    assert (unsure.status, unsure.correct, unsure.score, unsure.verdict) == (
        "judged",
        False,
        0.0,
        "uncertain",
    )
    assert judge.parse('Sure! {"equivalent": true, "core_goal": "maybe"}').details == {}  # outside the enum
    for malformed in ("", "equivalent: yes", '{"equivalent": "true"}', '{"reason": "x"}', "[true]"):
        bad = judge.parse(malformed)
        assert bad.status == "error" and bad.correct is None and bad.score is None and bad.reason, malformed


@pytest.mark.parametrize(
    ("reply", "correct"),
    [
        ("yes", True),
        ("Yes.", True),
        (" YES, it is correct", True),
        ("no", False),
        ("No.", False),
        ("", False),
    ],
)
def test_longmemeval_parser_is_yes_in_the_reply(reply: str, correct: bool) -> None:
    judgment = LongMemEval(reader="tiny").parse(reply)
    assert (judgment.status, judgment.correct, judgment.score) == ("judged", correct, float(correct))
    assert judgment.verdict == ("yes" if correct else "no")


def test_fmts_containment_either_way_case_insensitive() -> None:
    judge = FMTSContainment()
    source = Source("f", "ctx", "q", ["Cheap"])
    decide = lambda text: judge.decide(source, text)  # noqa: E731
    assert decide("The user chose something CHEAP.").correct  # reference in the answer
    assert decide("ch").correct  # the answer in the reference (partial answers get credit)
    assert not decide("expensive").correct
    assert decide("  ").verdict == "empty" and not decide("").correct
    reversal = Source("f", "ctx", "q", ["4 people"], metadata={"qa_type": "reversal_combined"} | {
        "old_value": "2", "new_value": "4"})  # fmt: skip
    assert judge.decide(reversal, "from 2 to 4").correct and not judge.decide(reversal, "4 people").correct
    assert "dep" in judge.applies(Source("f", "c", "q", ["x"], metadata={"qa_type": "dep"}))
    assert judge.applies(Source("f", "c", "q", [" "])) == "the source has no non-empty reference answer"
    assert judge.applies(source) is None and not judge.uses_model


def test_json_object_reads_the_last_block() -> None:
    assert json_object('text {"a": 1} more {"b": 2}') == {"b": 2}
    assert json_object("no json") is None


# -------------------------------------------------------------------------------------- config


def test_judge_config_errors_name_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        TPBenchP1().validate()  # the paper's model by default: its key must be set
    with pytest.raises(ConfigError, match="Did you mean 'tiny'"):
        TPBenchP1(reader="tinyy").validate()
    with pytest.raises(ConfigError, match="judge.reader_fields.modle.*did you mean 'model'"):
        TPBenchP1(reader_fields={"modle": "x"}).validate()
    with pytest.raises(ConfigError, match="judge.max_tokens=0"):
        LongMemEval(reader="tiny", max_tokens=0).validate()
    TPBenchP1(reader="tiny").validate()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-test")
    config = TPBenchP1().model_config()  # the papers' judge models, unless reader_fields say otherwise
    assert (config.model, config.base_url, config.temperature) == (
        "gpt-5.4-mini-2026-03-17", "https://api.openai.com/v1", 0.0)  # fmt: skip
    assert TPBenchP1(reader_fields={"model": "local"}).model_config().model == "local"
    config = LongMemEval().model_config()
    assert (config.model, config.base_url) == (
        "deepseek/deepseek-chat-v3-0324",
        "https://openrouter.ai/api/v1",
    )


def test_label_shows_fields_away_from_defaults_without_credentials() -> None:
    assert TPBenchP1().label("tpbench_p1") == "tpbench_p1"
    assert (
        TPBenchP1(reader="tiny", max_tokens=8).label("tpbench_p1") == "tpbench_p1(max_tokens=8,reader=tiny)"
    )
    fields = {"base_url": "http://user:pw@host:8000/v1?key=s", "model": "m"}
    assert (
        TPBenchP1(reader_fields=fields).label("p")
        == "p(reader_fields={base_url:http://host:8000/v1,model:m})"
    )
    assert FMTSContainment().label("fmts_containment") == "fmts_containment"


# ------------------------------------------------------------------------------------- the stage


class FakeChat:
    """Canned replies by the answer a request asks about; an Exception reply is a failed request."""

    identity = {"fake": "judge"}

    def __init__(self, replies: dict[str, str | Exception]) -> None:
        self.replies, self.calls = replies, []

    def complete(self, requests: list[ChatRequest], desc: str = "", progress: bool = True) -> list:
        self.calls.append(list(requests))
        out = []
        for request in requests:
            reply = self.replies[json.loads(request.messages[-1][1])["candidate"]]
            out.append(
                reply if isinstance(reply, Exception) else ChatReply(reply, "eos", {"prompt_tokens": 1})
            )
        return out


def answer(value: str, correct: bool) -> Answer:
    return Answer(
        json.dumps({"value": value}), value, float(correct), correct, [1], "eos", details={"value": value}
    )


def record(source: str, full: str, comp: str | None, status: str = "supported", ratio: float = 0.5) -> Record:
    r = ratio_record("tpbench_p1", source, "tiny", "snapkv", ratio, references=["x"], prompt_hash="0" * 64,
                     n_context_tokens=1, n_question_tokens=1, config_hash="h", versions={},
                     full=answer(full, True))  # fmt: skip
    if comp is None:
        r.fail(status, "why")
    else:
        r.pair(r.full, answer(comp, False))
    return r


TRUE = '{"equivalent": true, "core_goal": "correct", "reference_type": "explicit_goal", "reason": "same"}'
NULL = '{"equivalent": null, "core_goal": "uncertain", "reference_type": "uncertain", "reason": "ambiguous"}'


def test_stage_dedupes_records_errors_and_leaves_unsupported_alone() -> None:
    sources = {s.id: s for s in [p1_source(sid="s0"), p1_source("I need a rental car", "s1")]}
    sources["s2"] = Source("s2", "ctx", "q", ["x"])  # not a P1 probe: not applicable
    records = [
        record("s0", "visit some colleges", "visit some colleges"),  # one request for both answers
        record("s0", "visit some colleges", "visit some colleges", ratio=0.25),  # another cell: same request
        record("s1", "rent a car", "book a hotel"),
        record("s2", "a", "b"),
        record("s1", "rent a car", None, status="unsupported"),
        record("s1", "rent a car", None, status="error"),
    ]
    chat = FakeChat(
        {"visit some colleges": TRUE, "rent a car": RuntimeError("503 busy"), "book a hotel": NULL}
    )
    judge = TPBenchP1(reader="tiny")
    judge_records(records, sources, "tpbench_p1", judge, chat, progress=False)
    assert len(chat.calls) == 1 and len(chat.calls[0]) == 3  # one call, three distinct requests

    def get(r: Record, side: str) -> dict:
        return getattr(r, side).judgments["tpbench_p1"]

    for r in records[:2]:
        for side in ("full", "compressed"):
            assert (get(r, side)["status"], get(r, side)["correct"], get(r, side)["verdict"]) == (
                "judged", True, "equivalent")  # fmt: skip
    assert get(records[2], "full")["status"] == "error" and get(records[2], "full")["reason"] == (
        "RuntimeError: 503 busy"
    )
    unsure = get(records[2], "compressed")
    assert (unsure["correct"], unsure["score"], unsure["verdict"]) == (False, 0.0, "uncertain")
    assert get(records[3], "full")["status"] == get(records[3], "compressed")["status"] == "not_applicable"
    assert records[4].full.judgments is None and records[5].full.judgments is None  # left alone
    identity = get(records[0], "full")["judge"]
    assert identity["template_sha256"] == sha256(PROMPT) and identity["model"] == {"fake": "judge"}
    assert identity["name"] == "tpbench_p1" and identity["version"] == TPBenchP1.version
    assert "served" not in get(records[0], "full")  # an in-process reply has no endpoint facts
    for r in records:
        validate(r.to_dict())
    metrics = judge_metrics([r.to_dict() for r in records], "tpbench_p1")
    assert metrics == {
        "judge.tpbench_p1.n_judged": 3,  # s0 twice and the uncertain s1
        "judge.tpbench_p1.n_uncertain": 1,
        "judge.tpbench_p1.n_error": 0,
        "judge.tpbench_p1.n_not_applicable": 1,
        "judge.tpbench_p1.accuracy": 2 / 3,
        "full_judge.tpbench_p1.n_judged": 2,
        "full_judge.tpbench_p1.n_uncertain": 0,
        "full_judge.tpbench_p1.n_error": 1,
        "full_judge.tpbench_p1.n_not_applicable": 1,
        "full_judge.tpbench_p1.accuracy": 1.0,
    }
    assert judge_metrics([r.to_dict() for r in records], "none") == {}


def test_a_rule_judge_asks_no_model() -> None:
    records = [record("s0", "visit some colleges", "hotel")]  # outputs are the reader's JSON replies
    source = Source("s0", "ctx", "q", ["visit some colleges"])
    judge_records(records, {"s0": source}, "fmts_containment", FMTSContainment(), None, progress=False)
    assert records[0].full.judgments["fmts_containment"]["correct"] is True
    assert records[0].compressed.judgments["fmts_containment"]["correct"] is False
    assert records[0].full.judgments["fmts_containment"]["judge"]["template_sha256"] is None


def test_an_endpoint_judge_sends_the_options_and_records_what_the_server_said() -> None:
    sent = []

    class Raw:
        retries_taken = 0

        def parse(self) -> SimpleNamespace:
            message = SimpleNamespace(content=TRUE)
            choice = SimpleNamespace(message=message, finish_reason="stop")
            return SimpleNamespace(choices=[choice], usage=None, model="served-m", system_fingerprint="fp")

    def create(**body: object) -> Raw:
        sent.append(body)
        return Raw()

    endpoint = Endpoint(base_url="http://127.0.0.1:9/v1", model="m")
    endpoint._client = SimpleNamespace(chat=SimpleNamespace(completions=SimpleNamespace(
        with_raw_response=SimpleNamespace(create=create))))  # fmt: skip
    records = [record("s0", "visit some colleges", "visit some colleges")]
    judge_records(records, {"s0": p1_source()}, "tpbench_p1", TPBenchP1(reader="tiny"), endpoint, False)
    (body,) = sent
    assert body["extra_body"]["reasoning_effort"] == "none" and "response_format" not in body
    assert body["extra_body"]["response_format"]["json_schema"]["name"] == "semantic_judgment"
    request = TPBenchP1(reader="tiny").request(p1_source(), "visit some colleges")
    assert endpoint.params(request)["reasoning_effort"] == "none"  # in the cache key too
    plain = ChatRequest.of([{"role": "user", "content": "hi"}], 4)
    assert set(endpoint.params(plain)) == {"model", "messages", "max_tokens", "temperature"}  # keys unchanged
    judgment = records[0].full.judgments["tpbench_p1"]
    assert judgment["correct"] is True and judgment["served"]["served_model"] == "served-m"
    assert judgment["served"]["endpoint"] == "http://127.0.0.1:9/v1"
    validate(records[0].to_dict())


def test_judgment_refuses_a_score_without_a_decision() -> None:
    with pytest.raises(ValueError, match="says why"):
        Judgment("error")
    with pytest.raises(ValueError, match="correct or not"):
        Judgment("judged")
    assert dataclasses.asdict(Judgment.not_applicable("n/a"))["score"] is None


# ------------------------------------------------------------------------------------- kappa


def test_cohen_kappa_by_hand() -> None:
    # 20 yes/correct, 5 yes/incorrect, 10 no/correct, 15 no/incorrect: p_o = 35/50 = 0.7; the judge says yes
    # 25 times and the scorer correct 30: p_e = (25*30 + 25*20) / 50^2 = 0.5; kappa = 0.2 / 0.5 = 0.4
    assert cohen_kappa(20, 5, 10, 15) == pytest.approx(0.4)
    # TPBench's AE test confusion (201 TP, 64 FP, 33 FN, 297 TN): agreement 498/595 = 0.837 as published;
    # p_e = (265*234 + 330*361) / 595^2 = 181140/354025, kappa = (498*595 - 181140) / (595^2 - 181140)
    assert cohen_kappa(201, 64, 33, 297) == pytest.approx(115170 / 172885)
    assert math.isnan(cohen_kappa(5, 0, 0, 0))  # p_e = 1: both constant, kappa undefined
    assert math.isnan(cohen_kappa(0, 0, 0, 0))
    assert cohen_kappa(0, 3, 3, 0) == pytest.approx(-1.0)  # p_o = 0, p_e = 0.5


# ---------------------------------------------------------------------------------- aggregate


def judged(correct: bool | None, verdict: str | None = None) -> dict:
    if correct is None:
        return Judgment.failed("503").to_dict() | {"judge": {"name": "tpbench_p1"}}
    made = Judgment.of(correct, verdict or ("equivalent" if correct else "not_equivalent"))
    return made.to_dict() | {"judge": {"name": "tpbench_p1"}}


def test_matrix_and_agreement_table_by_hand(tmp_path: Path) -> None:
    from kvx.aggregate.publish.report import write_html
    from kvx.testing.crafted import FAST, rec, run, write

    # source: (full correct, comp correct, full judgment, comp judgment)
    plan = {
        "s0": (True, True, judged(True), judged(True)),
        "s1": (True, False, judged(True), judged(True)),
        "s2": (False, True, judged(False, "uncertain"), judged(False)),
        "s3": (True, False, judged(None), judged(False)),
    }
    records = []
    for source, (full, ok, jf, jc) in plan.items():
        r = rec(task="tpbench_p1", source=source, full=full, ok=ok)
        r["full"]["judgments"], r["compressed"]["judgments"] = {"tpbench_p1": jf}, {"tpbench_p1": jc}
        records.append(r)
    result = run(write(tmp_path / "records", records), dataclasses.replace(FAST, workers=1))
    m = result.tables["matrix"].set_index("compressor")
    assert m.loc["snapkv", "judge.tpbench_p1.accuracy"] == pytest.approx(2 / 4)
    assert m.loc["snapkv", "judge.tpbench_p1.n_judged"] == 4
    assert m.loc["FullCache", "judge.tpbench_p1.accuracy"] == pytest.approx(2 / 3)  # s3's error left out
    assert m.loc["FullCache", "judge.tpbench_p1.n_judged"] == 3
    columns = list(result.tables["matrix"].columns)
    assert columns.index("judge.tpbench_p1.accuracy") == columns.index("accuracy") + 1
    table = result.tables["judge_agreement"].set_index("answers")
    full, comp, both = table.loc["FullCache"], table.loc["compressed"], table.loc["all"]
    # FullCache: s0, s1 yes/correct; s2 uncertain (a no)/incorrect; s3 an error
    assert (full.yes_correct, full.yes_incorrect, full.no_correct, full.no_incorrect) == (2, 0, 0, 1)
    assert (full.n_answers, full.n_judged, full.n_error) == (4, 3, 1)
    assert (full.n_uncertain, full.uncertain_incorrect) == (1, 1)
    # p_o = 1, p_e = (2*2 + 1*1)/9 = 5/9: kappa = 1
    assert full.agreement == pytest.approx(1.0) and full.kappa == pytest.approx(1.0)
    # compressed: s0 yes/correct, s1 yes/incorrect, s2 no/correct, s3 no/incorrect: p_o = p_e = 0.5
    assert (comp.yes_correct, comp.yes_incorrect, comp.no_correct, comp.no_incorrect) == (1, 1, 1, 1)
    assert comp.agreement == pytest.approx(0.5) and comp.kappa == pytest.approx(0.0)
    # all 7 judged: p_o = 5/7, yes 4 and correct 4 of 7: p_e = (16 + 9)/49, kappa = (35 - 25)/(49 - 25) = 5/12
    assert (both.n_judged, both.yes_correct, both.no_incorrect) == (7, 3, 2)
    assert both.kappa == pytest.approx(5 / 12) and both.judge_accuracy == pytest.approx(4 / 7)
    html = write_html(result.tables, {}, tmp_path / "out", "t", {}).read_text()
    assert 'id="judges"' in html and "judge_agreement" in html


# ----------------------------------------------------------------------------------------- CLI


@pytest.mark.slow  # two prestarted processes: a TPBench sweep judged by an in-process tiny judge, aggregated
def test_cli_judges_a_tpbench_sweep_and_the_report_shows_the_kappa_table(tmp_path: Path, blank_store) -> None:
    blank_store(tmp_path)
    env = kvx_env()
    args = [
        "task=tpbench_p1", "reader=tiny", "turn_selector=recency", "turn_fraction=0.3", "press=none",
        "n_sources=4", "judge=tpbench_p1", "judge.reader=tiny", "judge.max_tokens=8", "progress=false",
        "max_new_tokens=8", "diagnostics=[]",
    ]  # fmt: skip
    done = cli.run("kvx", args, tmp_path, env)
    assert done.returncode == 0, done.stderr[-3000:]
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}")
    (run,) = [r for r in client.search_runs(["0", "1"]) if r.data.tags.get("kvx.role") == "cell"]
    assert run.data.tags["kvx.judge"] == "tpbench_p1(max_tokens=8,reader=tiny)"
    metrics = run.data.metrics
    for prefix in ("judge.tpbench_p1.", "full_judge.tpbench_p1."):  # every supported answer accounted for
        assert metrics[f"{prefix}n_judged"] + metrics[f"{prefix}n_error"] == metrics["n_supported"] == 4
    path = client.download_artifacts(run.info.run_id, "records.jsonl", str(tmp_path))
    for line in Path(path).read_text().splitlines():
        r = json.loads(line)
        for side in ("full", "compressed"):
            j = r[side]["judgments"]["tpbench_p1"]
            assert j["judge"]["template_sha256"] == sha256(PROMPT) and j["judge"]["model"]["name"] == "tiny"
    # few resamples: the judge tables count answers and never draw
    aggregate = ["--quiet", "--no-plots", "--boot", "20", "--splits", "20", "--null-draws", "2"]
    done = cli.run("kvx.aggregate", aggregate, tmp_path, env)
    assert done.returncode == 0, done.stderr[-3000:]
    (report,) = (tmp_path / "outputs" / "aggregate").glob("*/report.html")
    html = report.read_text()
    assert 'id="judges"' in html and "kappa" in html
    table = (report.parent / "judge_agreement.csv").read_text().splitlines()
    assert table[0].startswith("task,reader,judge,answers,n_answers,n_judged,n_error")
    assert [line.split(",")[3] for line in table[1:]] == ["FullCache", "compressed", "all"]
