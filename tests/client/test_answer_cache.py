"""``cache=PATH`` on both clients, against the scripted loopback server (which counts what it is sent, and
answers a request nobody queued a reply for with a 599): a call asked before is answered from the file
with no request; anything that decides an answer (the model, the prompt, the state, the calibration)
misses; an error is never kept; the modes read, write and off do what they say."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest
from openai import AsyncOpenAI, OpenAI

from jevper import AsyncSystemOneClient, Choice, ConfigError, Example, ProviderError, SystemOneClient
from jevper._cache import AnswerCache
from jevper.calibration import Binding, Calibration, Calibrator, QuestionCalibration, prompt_digest

INTENT = Choice(criteria={"billing": "money", "technical": "errors"})
QUESTIONS = {"intent": INTENT}
STATE = "I was charged twice."


def chat(first: float = -0.2, second: float = -1.9) -> dict[str, Any]:
    """A chat completion whose answer token is A, with B as the runner-up."""
    top = [{"token": "A", "logprob": first}, {"token": "B", "logprob": second}]
    return {
        "object": "chat.completion",
        "model": "m",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": "A"},
                "logprobs": {"content": [{"token": "A", "logprob": first, "top_logprobs": top}]},
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 1},
    }


def client(loopback: Any, cache: Path, **options: Any) -> SystemOneClient:
    sdk = OpenAI(base_url=loopback.url, api_key="local", max_retries=0)
    options = {"model": "m", "api": "chat_completions", "method": "logprobs", **options}
    return SystemOneClient(sdk, cache=str(cache), **options)


def sent(loopback: Any) -> int:
    return len(loopback.bodies("/chat/completions"))


def test_a_call_asked_before_is_answered_from_the_cache_without_a_request(
    loopback: Any, tmp_path: Path
) -> None:
    path = tmp_path / "answers.sqlite"
    loopback.reply("/chat/completions", 200, chat())
    first = client(loopback, path).system_one(state=STATE, questions=QUESTIONS)
    assert sent(loopback) == 1 and first.usage.n_calls == 1
    assert first.debug["cache"]["hit"] is False and first.debug["cache"]["written"] is True
    # A new client (as a new process would make) over the same file: nothing queued, so a request fails.
    again = client(loopback, path).system_one(state=STATE, questions=QUESTIONS)
    assert sent(loopback) == 1
    assert again.answers == first.answers
    assert (again.usage.n_calls, again.usage.input_tokens, again.usage.output_tokens) == (0, 0, 0)
    assert again.debug["cache"] == {"hit": True, "file": str(path), "key": first.debug["cache"]["key"]}


def test_the_async_client_reads_what_the_blocking_one_wrote(loopback: Any, tmp_path: Path) -> None:
    path = tmp_path / "answers.sqlite"
    loopback.reply("/chat/completions", 200, chat())
    first = client(loopback, path).system_one(state=STATE, questions=QUESTIONS)

    async def asked() -> Any:
        sdk = AsyncOpenAI(base_url=loopback.url, api_key="local", max_retries=0)
        async with AsyncSystemOneClient(
            sdk, model="m", api="chat_completions", method="logprobs", cache=path
        ) as asking:
            return await asking.system_one(state=STATE, questions=QUESTIONS)

    again = asyncio.run(asked())
    assert sent(loopback) == 1 and again.usage.n_calls == 0 and again.answers == first.answers


def fit(prior: tuple[float, float]) -> Calibration:
    bound = Binding("llamacpp", "b11549", "m", "logprobs", "chat_completions", prompt_digest(QUESTIONS))
    maps = {"intent": QuestionCalibration("choice", INTENT.options, Calibrator("prior", prior=prior), {})}
    return Calibration(bound, maps, folds=5, seed=0).with_layouts(QUESTIONS)


#: Each a change to one thing that decides an answer, made on top of the first call's settings.
CHANGES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "the model": ({"model": "other"}, {}),
    "the state": ({}, {"state": "The app crashes on start."}),
    "an option's wording": (
        {},
        {"questions": {"intent": Choice(criteria={"billing": "a charge", "technical": "errors"})}},
    ),
    "the options' order": (
        {},
        {"questions": {"intent": Choice(criteria={"technical": "errors", "billing": "money"})}},
    ),
    "a question's id": ({}, {"questions": {"topic": INTENT}}),
    "the examples": ({"examples": [Example(state="Refund me", answers={"intent": "billing"})]}, {}),
    "the option orders": ({"option_orders": 2}, {}),
    "the temperature": ({"temperature": 0.7}, {}),
    "the method": ({"method": "grammar"}, {}),
    "structured outputs off": ({"structured_outputs": False}, {}),
    "the calibration": ({"calibration": fit((0.4, 0.6))}, {}),
}


@pytest.mark.parametrize("change", CHANGES)
def test_a_change_to_anything_that_decides_the_answer_misses(
    loopback: Any, tmp_path: Path, change: str
) -> None:
    path = tmp_path / "answers.sqlite"
    made, call = CHANGES[change]
    base: dict[str, Any] = {"calibration": fit((0.5, 0.5))} if change == "the calibration" else {}
    loopback.reply("/chat/completions", 200, chat())
    client(loopback, path, **base).system_one(state=STATE, questions=QUESTIONS)
    assert sent(loopback) == 1
    for _ in range(2):  # option_orders=2 asks twice; any other change once (the second reply is left)
        loopback.reply("/chat/completions", 200, chat())
    asked = {"state": STATE, "questions": QUESTIONS, **call}
    response = client(loopback, path, **{**base, **made}).system_one(**asked)
    assert response.debug["cache"]["hit"] is False
    assert response.usage.n_calls >= 1 and sent(loopback) >= 2


def test_an_error_is_never_kept_and_the_call_is_asked_again(loopback: Any, tmp_path: Path) -> None:
    path = tmp_path / "answers.sqlite"
    loopback.reply("/chat/completions", 400, {"error": {"message": "bad request", "type": "invalid_request"}})
    with pytest.raises(ProviderError):
        client(loopback, path).system_one(state=STATE, questions=QUESTIONS)
    assert len(AnswerCache(str(path))) == 0
    loopback.reply("/chat/completions", 200, chat())
    answered = client(loopback, path).system_one(state=STATE, questions=QUESTIONS)
    assert answered.usage.n_calls == 1 and sent(loopback) == 2


def test_read_mode_answers_from_the_cache_and_never_writes(loopback: Any, tmp_path: Path) -> None:
    path = tmp_path / "answers.sqlite"
    loopback.reply("/chat/completions", 200, chat())
    reading = client(loopback, path, cache_mode="read")
    assert reading.system_one(state=STATE, questions=QUESTIONS).debug["cache"]["written"] is False
    assert len(AnswerCache(str(path))) == 0
    loopback.reply("/chat/completions", 200, chat())
    client(loopback, path).system_one(state=STATE, questions=QUESTIONS)  # read-write: written
    assert reading.system_one(state=STATE, questions=QUESTIONS).usage.n_calls == 0
    assert sent(loopback) == 2


def test_write_mode_always_asks_and_writes_what_it_was_told(loopback: Any, tmp_path: Path) -> None:
    path = tmp_path / "answers.sqlite"
    writing = client(loopback, path, cache_mode="write")
    loopback.reply("/chat/completions", 200, chat(-0.2, -1.9))
    loopback.reply("/chat/completions", 200, chat(-0.9, -0.5))
    writing.system_one(state=STATE, questions=QUESTIONS)
    newer = writing.system_one(state=STATE, questions=QUESTIONS)
    assert sent(loopback) == 2 and newer.usage.n_calls == 1
    kept = client(loopback, path, cache_mode="read").system_one(state=STATE, questions=QUESTIONS)
    assert kept.usage.n_calls == 0 and kept.answers == newer.answers


def test_off_mode_leaves_the_file_alone(loopback: Any, tmp_path: Path) -> None:
    path = tmp_path / "answers.sqlite"
    loopback.reply("/chat/completions", 200, chat())
    response = client(loopback, path, cache_mode="off").system_one(state=STATE, questions=QUESTIONS)
    assert "cache" not in response.debug and not path.exists()


def test_the_server_s_credentials_are_not_part_of_the_key(loopback: Any, tmp_path: Path) -> None:
    path = tmp_path / "answers.sqlite"
    loopback.reply("/chat/completions", 200, chat())
    signed = loopback.url.replace("http://", "http://someone:secret-password@")
    one = SystemOneClient(
        OpenAI(base_url=signed, api_key="local", max_retries=0),
        model="m",
        api="chat_completions",
        method="logprobs",
        cache=path,
    )
    first = one.system_one(state=STATE, questions=QUESTIONS)
    again = client(loopback, path).system_one(state=STATE, questions=QUESTIONS)
    assert again.usage.n_calls == 0 and again.answers == first.answers
    assert b"secret-password" not in path.read_bytes()


def test_a_cache_mode_that_is_not_one_of_the_four_is_refused_naming_them(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match="cache_mode: expected one of 'read-write', 'read', 'write', 'off', got 'rw'"
    ):
        SystemOneClient(object(), model="m", cache=tmp_path / "a.sqlite", cache_mode="rw")


def test_a_score_and_a_noul_come_back_from_the_cache_as_they_went_in(tmp_path: Path) -> None:
    from jevper import _cache
    from jevper.models import NoulAnswer, ScoreAnswer, SystemOneResponse, Usage

    answers: dict[str, Any] = {
        "s": ScoreAnswer(
            1.2,
            {0: 0.1, 1: 0.6, 2: 0.3},
            {0: "calm", 1: "annoyed", 2: {"x": 1}},
            0.5,
            "logprobs",
            "chat_completions",
        ),
        "n": NoulAnswer(0.8, {"true": 0.8, "false": 0.2}, 0.6, "grammar", "responses", reasoning="because"),
    }
    response = SystemOneResponse(answers, Usage(n_calls=2), {"n": "because"}, {"questions": {}}, "m")
    store = _cache.AnswerCache(str(tmp_path / "a.sqlite"))
    store.put({"k"}, _cache.entry(response))
    kept = store.get("k")
    assert kept is not None
    back = _cache.response(kept, {"hit": True})
    assert back.answers == answers and back.reasoning == {"n": "because"} and back.model == "m"
    assert dataclasses.astuple(back.usage)[:2] == (0, 0)


def test_closing_the_client_closes_the_cache_file(loopback: Any, tmp_path: Path) -> None:
    path = tmp_path / "answers.sqlite"
    loopback.reply("/chat/completions", 200, chat())
    asking = client(loopback, path)
    asking.system_one(state=STATE, questions=QUESTIONS)
    assert path.with_name("answers.sqlite-wal").exists()  # open: the write-ahead log is there
    asking.close()
    # The last connection closed: SQLite folded the log into the file and removed it.
    assert not path.with_name("answers.sqlite-wal").exists()
    assert len(AnswerCache(str(path))) == 1  # asked with the method and surface it was read with: one key
