"""A user's script written only against the documented jevper 0.7.12 API's names (docs/compatibility.md).

tests/client/test_documented_api.py runs it, unchanged, on this package and (opted in) on the published
library in an environment of its own, against loopback servers it starts, and compares what each prints:
one JSON line per step.
"""

import json
import os

from openai import OpenAI

from jevper import (
    Choice,
    Example,
    JevperError,
    ModelRefusalError,
    Noul,
    ProviderError,
    ReasoningConfig,
    RetryPolicy,
    SystemOneClient,
)

SCRIPTED = os.environ["DOCUMENTED_API_SCRIPTED_URL"]  # replies queued by the test
BUSY = os.environ["DOCUMENTED_API_BUSY_URL"]  # a 429 with Retry-After: 1, then an answer, in turn
ALWAYS_BUSY = os.environ["DOCUMENTED_API_ALWAYS_BUSY_URL"]  # a 429 with Retry-After: 1, every time
MODEL = "fault-model"
QUESTIONS = {
    "team": Choice(
        instructions="Which team should answer?", criteria={"billing": "money", "technical": "errors"}
    ),
}


def out(step: str, **facts: object) -> None:
    print(json.dumps({"step": step, **facts}, sort_keys=True), flush=True)


def sdk(base_url: str) -> OpenAI:
    return OpenAI(base_url=base_url, api_key="local", max_retries=0)


def made(base_url: str, **options: object) -> SystemOneClient:
    every = dict(
        model=MODEL,
        method="auto",
        api="chat_completions",
        reasoning=None,
        examples=[Example(state="The app crashes on start.", answer="technical")],
        structured_outputs=True,
        normalize_probabilities=True,
        top_logprobs=20,
        max_concurrency=8,
        n_retry_malformed=1,
        retry=RetryPolicy(n_retries=2, base_delay=0.1, max_delay=1.0, respect_retry_after=True),
        temperature=0.2,
        extra_body=None,
        extra_headers={"X-Team": "docs"},
        prompt_cache_key=None,
        native=False,
        noul_requires_question=True,
    )
    every.update(options)
    return SystemOneClient(sdk(base_url), **every)


# A 429 with Retry-After, then the answer: asked with the call's own model and temperature.
response = made(BUSY).system_one(
    state="I was charged twice this month.", questions=QUESTIONS, model=MODEL, temperature=0
)
usage = response.usage
out(
    "retried-429",
    choice=response.answers["team"].choice,
    views=[sorted(response.choices), sorted(response.nouls), sorted(response.scores)],
    n_calls=usage.n_calls,
    n_retries=usage.n_retries,
    waited_retry_after=usage.latency >= 1.0,
    input_tokens_counted=isinstance(usage.input_tokens, int) and usage.input_tokens > 0,
    decision=[answer.type for answer in response.to_decision().answers],
)

# No retries: the first 429 is the caller's.
try:
    made(ALWAYS_BUSY, retry=RetryPolicy(n_retries=0)).system_one(state="Hello.", questions=QUESTIONS)
    out("no-retries", raised=None)
except ProviderError as error:
    out("no-retries", raised="ProviderError", status_code=error.status_code)

# The model declines: a content filter.
try:
    made(SCRIPTED).system_one(state="Something the filter stops.", questions=QUESTIONS)
    out("content-filter", raised=None)
except ModelRefusalError as error:
    out("content-filter", raised="ModelRefusalError", provider_error=isinstance(error, ProviderError))

# A noul without its question, where the client requires one.
try:
    made(SCRIPTED).system_one(state="Hello.", questions={"angry": Noul()})
    out("noul-without-question", raised=None)
except JevperError:
    out("noul-without-question", raised="JevperError")

# A header that cannot travel, refused when the client is made.
try:
    made(SCRIPTED, extra_headers={"X-Team": "docs\r\nX-Injected: 1"})
    out("bad-header", raised=None)
except JevperError:
    out("bad-header", raised="JevperError")

# A question with its own examples, and every reasoning setting, as the documented API spells them.
own = Choice(
    type="choice",
    criteria={"billing": "money", "technical": "errors"},
    examples=(Example(state="My invoice is wrong.", answer="billing"),),
)
thinking = ReasoningConfig(effort="low", summary="auto", context="auto", mode="auto", budget_tokens=None)
made(SCRIPTED, reasoning=thinking)
out("question-examples-and-reasoning", type=own.type, examples=len(own.examples), summary=thinking.summary)

# A System One deployment's model list.
models = made(SCRIPTED).list_models()
out("list-models", models=[[m.name, m.description, m.release_date] for m in models])
