"""The batch core against the fault server: every row back in the documented schema, errors as data,
bad input refused before any request, and a classifier that pickles before its first use."""

from __future__ import annotations

import asyncio
import pickle
import threading
from typing import Any

import pyarrow as pa
import pytest
from _batch_data import QUESTIONS, posts
from openai import AsyncOpenAI

from jevper import AsyncSystemOneClient, ConfigError, InvalidQuestionError
from jevper._http import HTTPClient
from jevper.batch import BatchClassifier, Server
from jevper.testing.faults import FaultServer, Script, running
from jevper.testing.systemone import SystemOneAnswer


def states(n: int) -> pa.RecordBatch:
    return pa.record_batch(
        {"id": list(range(n)), "state": [f"ticket {i}: my card was charged twice" for i in range(n)]}
    )


def classifier(server: FaultServer, **options: Any) -> BatchClassifier:
    slots = options.pop("slots", 2)
    return BatchClassifier(QUESTIONS, [Server(server.base_url(), "fault-model", slots=slots)], **options)


@pytest.mark.parametrize("api", ["systemone", "chat_completions"])
def test_every_row_comes_back_in_the_output_schema_with_the_answers_the_client_gives(
    faults: FaultServer, api: str
) -> None:
    batch = states(7)
    batcher = classifier(faults, api=api)
    try:
        out = batcher.classify_sync(batch)
    finally:
        batcher.close()
    assert out.schema == batcher.output_schema(batch.schema)
    assert out.column("id").to_pylist() == list(range(7))
    assert out.column("error").null_count == 7

    async def direct() -> dict[str, Any]:
        sdk = AsyncOpenAI(base_url=faults.base_url(), api_key="none")
        client = AsyncSystemOneClient(sdk, model="fault-model", api=api)
        answered = await client.system_one(state=batch.column("state")[0].as_py(), questions=QUESTIONS)
        await sdk.close()
        return answered.to_api()

    expected = asyncio.run(direct())
    row = out.to_pylist()[0]
    topic = expected["answers"]["topic"]
    assert row["topic"]["choice"] == topic["choice"]
    assert dict(row["topic"]["probabilities"]) == topic["probabilities"]
    assert row["urgent"] == expected["answers"]["urgent"]
    anger = expected["answers"]["anger"]
    assert dict(row["anger"]["legend"]) == anger["legend"]
    assert row["anger"]["score"] == anger["score"]
    assert row["usage"] == expected["usage"]


def test_a_lone_surrogate_a_400_and_an_unreadable_answer_each_carry_their_typed_error() -> None:
    script = Script()
    healthy = SystemOneAnswer({"questions": QUESTIONS}, "fault-model").body()
    # One server with one slot asks the rows in order: the surrogate row sends nothing.
    script.reply("/systemone", 200, healthy)  # id 0
    script.reply(
        "/systemone", 400, {"error": {"message": "state: too long", "type": "invalid_request_error"}}
    )
    script.reply("/systemone", 200, b"Model is loading", "application/json")  # id 3
    script.reply("/systemone", 200, healthy)  # id 4
    texts = [
        b"fine",
        "bad \ud800 text".encode("utf-8", "surrogatepass"),
        b"refused",
        b"unread",
        b"fine too",  # another state: a row carrying an earlier row's state is not asked again
    ]
    # Arrow takes the bytes unchecked; they are what a lenient JSON encoder writes for a lone surrogate.
    column = pa.array(texts, pa.binary()).view(pa.string())
    batch = pa.record_batch({"id": ["a", "b", "c", "d", "e"], "state": column})
    with running(script=script) as server:
        batcher = classifier(server, api="systemone", slots=1, max_retries=0)
        try:
            out = batcher.classify_sync(batch).to_pylist()
        finally:
            batcher.close()
    errors = {row["id"]: row["error"] and row["error"]["type"] for row in out}
    assert errors == {
        "a": None,
        "b": "InvalidQuestionError",
        "c": "ProviderError",
        "d": "MalformedAnswerError",
        "e": None,
    }
    assert "lone surrogate" in out[1]["error"]["message"]
    assert "400" in out[2]["error"]["message"]
    for row in out:
        answered = row["error"] is None
        assert (row["topic"] is not None) is answered and (row["usage"] is not None) is answered
    assert len(script.requests) == 4


def test_a_failed_row_carries_no_answers_and_the_batch_keeps_its_other_rows(faults: FaultServer) -> None:
    # Every second request fails to parse: each row of the pair alternates, with no retry for a bad body.
    server = Server(faults.base_url("ok", "truncated-json"), "fault-model", slots=1)
    batcher = BatchClassifier(QUESTIONS, [server], api="systemone", max_retries=0)
    try:
        out = batcher.classify_sync(states(6)).to_pylist()
    finally:
        batcher.close()
    assert [row["error"] is None for row in out] == [True, False] * 3
    assert {row["error"]["type"] for row in out[1::2]} == {"MalformedAnswerError"}


def test_kept_columns_follow_the_id_and_a_table_comes_back_as_a_table(faults: FaultServer) -> None:
    table = pa.table({"state": ["a", "b", "c"], "id": [3, 1, 2], "source": ["mail", "chat", "mail"]})
    batcher = classifier(faults, api="systemone", keep_columns=["source"])
    try:
        out = batcher.classify_sync(table)
    finally:
        batcher.close()
    assert isinstance(out, pa.Table)
    assert out.schema.names[:2] == ["id", "source"]
    assert out.column("source").to_pylist() == ["mail", "chat", "mail"]
    every = classifier(faults, keep_columns=True).output_schema(table.schema)
    assert every.names[:3] == ["id", "state", "source"]


@pytest.mark.parametrize(
    ("options", "columns", "said"),
    [
        ({}, {"text": ["x"], "id": [1]}, "state_column: expected a column 'state'"),
        ({"id_column": "key"}, {"state": ["x"], "id": [1]}, "id_column: expected a column 'key'"),
        (
            {"keep_columns": ["nope"]},
            {"state": ["x"], "id": [1]},
            "keep_columns: expected columns of the input",
        ),
        ({"keep_columns": True}, {"state": ["x"], "id": [1], "topic": [1]}, "got ['topic'] in both"),
    ],
)
def test_a_batch_without_the_columns_asked_for_is_refused_before_any_request(
    faults: FaultServer, options: dict[str, Any], columns: dict[str, Any], said: str
) -> None:
    before = posts(faults)
    batcher = classifier(faults, **options)
    with pytest.raises(ConfigError, match=said.replace("[", r"\[").replace("]", r"\]")):
        batcher.classify_sync(pa.record_batch(columns))
    batcher.close()
    assert posts(faults) == before


@pytest.mark.parametrize(
    ("questions", "servers", "options", "error", "said"),
    [
        (
            {},
            [Server("http://127.0.0.1:9/v1", "m")],
            {},
            InvalidQuestionError,
            "questions: expected a non-empty",
        ),
        (
            {"q": {"type": "choise"}},
            [Server("http://127.0.0.1:9/v1", "m")],
            {},
            InvalidQuestionError,
            "expected 'type' to be one of",
        ),
        (QUESTIONS, [], {}, ConfigError, "servers: expected a list of one or more servers"),
        (
            QUESTIONS,
            [{"base_url": "127.0.0.1:9", "model": "m"}],
            {},
            ConfigError,
            "expected an http:// or https:// URL",
        ),
        (
            QUESTIONS,
            [Server("http://127.0.0.1:9/v1", "m")],
            {"api": "grpc"},
            InvalidQuestionError,
            "api: expected one of",
        ),
        (
            {"error": QUESTIONS["urgent"]},
            [Server("http://127.0.0.1:9/v1", "m")],
            {},
            InvalidQuestionError,
            "name output columns",
        ),
        (
            QUESTIONS,
            [Server("http://127.0.0.1:9/v1", "m", api_key="sk-read-from-a-file\n")],
            {},
            ConfigError,
            "expected an api_key of printable ASCII characters",
        ),
        (QUESTIONS, [Server("http://127.0.0.1:9/v1", "m")], {"concurrency": 0}, ConfigError, "concurrency"),
        (
            QUESTIONS,
            [Server("http://127.0.0.1:9/v1", "m")],
            {"patience": -1},
            ConfigError,
            "patience: expected seconds from 0 to 1e6, got -1",
        ),
    ],
)
def test_bad_settings_are_refused_when_the_classifier_is_made(
    questions: Any, servers: Any, options: dict[str, Any], error: type[Exception], said: str
) -> None:
    with pytest.raises(error, match=said) as refused:
        BatchClassifier(questions, servers, **options)
    # A server or a setting of the run is not a wrong question, nor the other way round.
    assert isinstance(refused.value, ConfigError) == (error is ConfigError)


def test_a_classifier_pickles_before_and_after_use_and_answers_after_unpickling(faults: FaultServer) -> None:
    batcher = classifier(faults, api="systemone")
    copy = pickle.loads(pickle.dumps(batcher))
    first = copy.classify_sync(states(3))
    again = pickle.loads(pickle.dumps(copy))
    copy.close()
    assert again.classify_sync(states(3)).equals(first)
    again.close()


def test_the_async_classify_runs_in_the_callers_loop(faults: FaultServer) -> None:
    batcher = classifier(faults, api="systemone")

    async def both() -> list[pa.RecordBatch]:
        try:
            return list(await asyncio.gather(batcher.classify(states(4)), batcher.classify(states(5))))
        finally:
            await batcher.aclose()

    four, five = asyncio.run(both())
    assert (four.num_rows, five.num_rows) == (4, 5)
    assert four.column("error").null_count + five.column("error").null_count == 9


def test_a_pandas_frame_comes_back_as_a_frame_with_the_same_rows(faults: FaultServer) -> None:
    # pandas is no dependency of the batch extra; the ray and spark extras (in `test`) bring it.
    pd = pytest.importorskip("pandas", reason="pandas comes with the ray and spark extras")
    frame = pd.DataFrame({"id": [10, 11], "state": ["a charge", "a crash"]})
    batcher = classifier(faults, api="systemone")
    try:
        out = batcher.classify_pandas(frame)
    finally:
        batcher.close()
    assert list(out["id"]) == [10, 11]
    assert out["error"].isna().all()
    assert out["topic"][0]["choice"] == "billing"


class _Keeping(BatchClassifier):
    """The core, keeping each server's connection it made."""

    made: list[HTTPClient]

    def _connect(self, server: Server) -> AsyncSystemOneClient:
        made = HTTPClient(server.base_url, server.api_key)
        self.made.append(made)
        return AsyncSystemOneClient(
            made, model=server.model, max_concurrency=server.slots, **self.client_options
        )


def test_closing_from_another_thread_closes_the_connections_of_a_loop_that_still_runs(
    faults: FaultServer,
) -> None:
    # A Ray actor's loop runs on a thread of its own, and its teardown closes the class from another.
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        batcher = _Keeping(QUESTIONS, [Server(faults.base_url(), "fault-model", slots=2)], api="systemone")
        batcher.made = []
        out = asyncio.run_coroutine_threadsafe(batcher.classify(states(5)), loop).result(30)
        assert out.column("error").null_count == 5
        assert [made.closed for made in batcher.made] == [False]
        batcher.close()
        assert [made.closed for made in batcher.made] == [True]
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


@pytest.mark.parametrize(
    ("api", "fault"),
    [("systemone", "ok"), ("chat_completions", "ok"), ("messages", "ok"), ("systemone", "503-retry-after")],
)
def test_requests_sent_counts_every_request_the_servers_saw_retries_included(api: str, fault: str) -> None:
    # A busy answer asks for no wait (Retry-After: 0): the count is the point here.
    with running(retry_after=0) as faults:
        server = Server(faults.base_url(*[fault] * 2, "ok"), "fault-model", slots=2)
        batcher = BatchClassifier(QUESTIONS, [server], api=api, max_retries=3)
        try:
            out = batcher.classify_sync(states(3))
        finally:
            batcher.close()
        assert out.column("error").null_count == 3
        assert batcher.requests_sent == posts(faults) >= 3
