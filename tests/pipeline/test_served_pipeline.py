"""The served path (``kvx.pipeline.served``) in process, with a chat model that answers from a table:
what each record holds, what is asked once, what is unsupported, and the fingerprint note."""

from __future__ import annotations

from kvx.compressors.none import NoCompression
from kvx.compressors.presets import SnapKV
from kvx.core.records import served_metrics, validate
from kvx.diagnostics.decoding import Decoding
from kvx.modeling.chat import ChatReply, ChatRequest
from kvx.pipeline.cell import Cell
from kvx.pipeline.engine import Engine
from kvx.pipeline.served import ServedReader, messages
from kvx.tasks.tpbench.task import InitialGoal
from kvx.transforms.turns import selection
from kvx.turn_selectors.positional import Recency


class Table:
    """Answers every request with its last message's first word; a new fingerprint every 3 requests."""

    identity = {"endpoint": "http://127.0.0.1:1/v1", "model": "table"}

    def __init__(self, fail_on: str = "\0") -> None:
        self.asked: list[ChatRequest] = []
        self.fail_on = fail_on  # a request whose last message holds this fails

    def complete(self, requests, desc="", progress=True):
        out = []
        for request in requests:
            self.asked.append(request)
            n = len(self.asked)
            if self.fail_on in request.messages[-1][1]:
                out.append(RuntimeError("the server said no"))
                continue
            served = {**self.identity, "system_fingerprint": f"fp{(n - 1) // 3}", "prompt_tokens": n,
                      "completion_tokens": 1, "price": None, "cached": False, "retries": 0}  # fmt: skip
            out.append(ChatReply("Nothing", "eos", served))
        return out


def reader(chat: Table) -> ServedReader:
    identity = {"name": "openai", "fields": {"model": "table"}, "base_url": chat.identity["endpoint"]}
    return ServedReader("openai", identity, "openai:table", "table", "table", chat, lambda t: len(t.split()))


def cell(press: str = "none", selector: bool = True) -> Cell:
    transform = selection("recency", Recency(), 0.3, True)
    kw = {"transform_name": "turns:recency", "transform": transform} if selector else {}
    return Cell(
        task_name="tpbench_p1", task=InitialGoal(synthetic_dialogues=20), reader_name="openai",
        press_name=press, compressor=NoCompression() if press == "none" else SnapKV(), ratio=0.5, seed=0,
        n_sources=3, context_tokens=1024, max_new_tokens=4, diagnostics=[("decoding", Decoding())], **kw,
    )  # fmt: skip


def test_a_served_split_asks_each_prompt_once_and_records_what_cannot_run(tmp_path) -> None:
    chat = Table()
    engine = Engine(tmp_path / "outputs", 2**20)
    selected, plain, press = engine.run_served([cell(), cell(selector=False), cell("snapkv")], reader(chat))
    # 3 controls + 3 selected contexts; the plain press=none cell is the control itself; snapkv asks nothing
    assert len(chat.asked) == 6
    for record in selected + plain + press:
        validate(record.to_dict())
    assert all(r.status == "supported" for r in selected + plain)
    assert [r.full.output for r in plain] == [r.compressed.output for r in plain]
    assert all(r.status == "unsupported" and "only an in-process reader" in r.reason for r in press)
    first = selected[0]
    assert first.full.token_ids is None and first.full.served["model"] == "table"
    assert first.prompt_hash != first.compressed_text_sha256
    assert first.diagnostics["decoding"]["status"] == "not_applicable"
    assert first.transform["retained_token_share"] < 1
    # the messages a source becomes: its system prompt, then context + question (+ answer prefix)
    source = engine.sources(cell(), reader(chat))[0]
    assert chat.asked[0].as_messages() == messages(source)
    # 6 answers from fingerprints fp0 (3) and fp1 (3): every answer of each cell says so
    assert first.full.served["cell_fingerprints"] == ["fp0", "fp1"]
    metrics = served_metrics([r.to_dict() for r in selected])
    assert metrics["n_system_fingerprints"] == 2 and metrics["answers_requested"] == 3
    assert metrics["prompt_tokens"] == sum(r.compressed.served["prompt_tokens"] for r in selected)
    # a fresh engine on the same outputs: the controls come from the control store, nothing re-asked
    # but the selected contexts (the response cache lives in the endpoint, not in this table)
    again = Table()
    Engine(tmp_path / "outputs", 2**20).run_served([cell()], reader(again))
    assert len(again.asked) == 3


def test_a_failed_control_is_an_error_record_and_the_others_go_on(tmp_path) -> None:
    engine = Engine(tmp_path / "outputs", 2**20)
    sources = engine.sources(cell(), reader(Table()))
    chat = Table(fail_on=messages(sources[1])[-1]["content"])  # source 1's full prompt only
    (records,) = engine.run_served([cell()], reader(chat))
    assert [r.status for r in records] == ["supported", "error", "supported"]
    assert records[1].reason == "FullCache control: the server said no" and records[1].full is None
