"""``calibration=`` on both clients, against the fault server's steady answers: each question the file holds
is mapped (and still sums to 1), any other passes through, the trace names the file; a calibration fit
for another model, method, surface or question layout is refused, at construction when the client already
knows, else at the first answer."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai import AsyncOpenAI, OpenAI

from jevper import AsyncSystemOneClient, CalibrationMismatchError, ConfigError, SystemOneClient
from jevper.calibration import Binding, Calibration, Calibrator, QuestionCalibration, prompt_digest
from jevper.decisions import DecisionChoice, DecisionPredicate
from jevper.testing.faults import FaultServer, running

QUESTIONS: dict[str, Any] = {
    "topic": {
        "type": "choice",
        "criteria": {"billing": "a charge", "other": "anything else", "shipping": None},
    },
    "urgent": {"type": "noul", "instructions": "Does the writer need an answer today?"},
    "anger": {"type": "score", "criteria": ["calm", "annoyed", "furious"]},
}
FIT = {qid: QUESTIONS[qid] for qid in ("topic", "urgent")}  # "anger" has no map: passed through
BOUND = Binding("llamacpp", "b11549", "fault-model", "grammar", "chat_completions", prompt_digest(FIT))


def fit_on(fit: dict[str, Any]) -> Calibration:
    """A prior correction for "topic" and Platt scaling for "urgent", bound to ``fit``'s layouts."""
    return Calibration(
        dataclasses.replace(BOUND, prompt_digest=prompt_digest(fit)),
        {
            "topic": QuestionCalibration(
                "choice", ("billing", "other", "shipping"), Calibrator("prior", prior=(0.9, 0.05, 0.05)), {}
            ),
            "urgent": QuestionCalibration(
                "noul", ("true", "false"), Calibrator("platt", platt=(1.0, -2.0)), {}
            ),
        },
        folds=5,
        seed=0,
    ).with_layouts(fit)


CALIBRATION = fit_on(FIT)


@pytest.fixture(scope="module")
def faults() -> Iterator[FaultServer]:
    with running() as server:
        yield server


def client(server: FaultServer, **options: Any) -> SystemOneClient:
    options.setdefault("api", "chat_completions")
    return SystemOneClient(OpenAI(base_url=server.base_url(), api_key="none"), model="fault-model", **options)


def test_each_fitted_answer_is_mapped_sums_to_one_and_picks_from_the_calibrated_distribution(
    faults: FaultServer,
) -> None:
    raw = client(faults).system_one(state="charged twice", questions=QUESTIONS)
    done = client(faults, calibration=CALIBRATION).system_one(state="charged twice", questions=QUESTIONS)
    topic, urgent = raw.answers["topic"].probabilities, raw.answers["urgent"].probabilities
    # p / prior, renormalised: the prior leaned to billing so far that "other" now leads.
    divided = {k: topic[k] / q for k, q in zip(topic, (0.9, 0.05, 0.05), strict=True)}
    expected = {k: v / sum(divided.values()) for k, v in divided.items()}
    calibrated = done.answers["topic"]
    assert calibrated.probabilities == pytest.approx(expected)
    assert sum(calibrated.probabilities.values()) == pytest.approx(1.0)
    assert (raw.answers["topic"].choice, calibrated.choice) == ("billing", "other")
    top = max(expected.values())
    assert calibrated.confidence == pytest.approx((top - 1 / 3) / (1 - 1 / 3))
    yes = 1 / (1 + math.exp(-(math.log(urgent["yes"] / urgent["no"]) - 2.0)))
    assert done.answers["urgent"].noul == pytest.approx(yes)
    assert sum(done.answers["urgent"].probabilities.values()) == pytest.approx(1.0)
    assert done.answers["anger"] == raw.answers["anger"]
    assert done.debug["calibration"] == {
        "file": None,
        "calibrated": {"topic": "prior", "urgent": "platt"},
        "passed_through": ["anger"],
        "unchecked": ["server_kind", "server_release"],
    }
    assert "calibration" not in raw.debug


def test_the_async_client_gives_the_same_calibrated_answers_and_the_trace_names_the_file(
    faults: FaultServer, tmp_path: Path
) -> None:
    path = tmp_path / "calibration.json"
    CALIBRATION.save(path)

    async def ask() -> Any:
        sdk = AsyncOpenAI(base_url=faults.base_url(), api_key="none")
        async with AsyncSystemOneClient(
            sdk, model="fault-model", api="chat_completions", calibration=path
        ) as calibrated:
            return await calibrated.system_one(state="charged twice", questions=QUESTIONS)

    answered = asyncio.run(ask())
    blocking = client(faults, calibration=str(path)).system_one(state="charged twice", questions=QUESTIONS)
    assert answered.answers == blocking.answers
    assert answered.debug["calibration"]["file"] == str(path)
    assert blocking.debug["calibration"]["file"] == str(path)


def test_the_native_surface_is_refused_at_construction_for_a_calibration_fit_on_chat_completions(
    faults: FaultServer,
) -> None:
    with pytest.raises(CalibrationMismatchError) as refused:
        client(faults, api="systemone", calibration=CALIBRATION)
    assert (refused.value.field, refused.value.expected, refused.value.got) == (
        "surface",
        "chat_completions",
        "systemone",
    )


@pytest.mark.parametrize(
    ("options", "field", "got"),
    [
        ({"model": "another-model"}, "model", "another-model"),
        ({"method": "logprobs"}, "method", "logprobs"),
        ({"api": "responses"}, "surface", "responses"),
    ],
)
def test_a_calibration_fit_for_another_model_method_or_surface_is_refused_when_the_client_is_made(
    faults: FaultServer, options: dict[str, Any], field: str, got: str
) -> None:
    model = options.pop("model", "fault-model")
    sdk = OpenAI(base_url=faults.base_url(), api_key="none")
    with pytest.raises(CalibrationMismatchError) as refused:
        SystemOneClient(sdk, model=model, **{"api": "chat_completions", **options}, calibration=CALIBRATION)
    assert (refused.value.field, refused.value.expected, refused.value.got) == (
        field,
        getattr(BOUND, field),
        got,
    )
    assert f"{field} {getattr(BOUND, field)!r}, got {got!r}" in str(refused.value)


def test_under_api_auto_the_surface_an_answer_came_on_is_checked_at_the_first_answer(
    faults: FaultServer,
) -> None:
    auto = client(faults, api="auto", calibration=CALIBRATION)  # the fault server is asked on Responses
    with pytest.raises(CalibrationMismatchError) as refused:
        auto.system_one(state="charged twice", questions=QUESTIONS)
    assert (refused.value.field, refused.value.got) == ("surface", "responses")
    fit_there = dataclasses.replace(CALIBRATION, bound_to=dataclasses.replace(BOUND, surface="responses"))
    answered = client(faults, api="auto", calibration=fit_there).system_one(state="x", questions=QUESTIONS)
    assert answered.debug["calibration"]["calibrated"] == {"topic": "prior", "urgent": "platt"}


def test_a_fitted_question_asked_with_other_options_or_wording_is_refused_naming_its_layout(
    faults: FaultServer,
) -> None:
    reordered = {**QUESTIONS, "topic": {**QUESTIONS["topic"], "criteria": {"other": None, "billing": None}}}
    with pytest.raises(CalibrationMismatchError, match=r"calibration of 'topic': expected the question as"):
        client(faults, calibration=CALIBRATION).system_one(state="x", questions=reordered)
    reworded = {**QUESTIONS, "urgent": {"type": "noul", "instructions": "Is it urgent?"}}
    with pytest.raises(CalibrationMismatchError) as refused:
        client(faults, calibration=CALIBRATION).system_one(state="x", questions=reworded)
    assert refused.value.field == "prompt_digest"


def test_a_file_without_each_questions_layout_is_held_to_the_whole_layout_it_was_fit_on(
    faults: FaultServer,
) -> None:
    older = dataclasses.replace(
        CALIBRATION,
        questions={
            qid: dataclasses.replace(q, prompt_digest=None) for qid, q in CALIBRATION.questions.items()
        },
    )
    as_fit = client(faults, calibration=older).system_one(state="x", questions=FIT)
    assert set(as_fit.debug["calibration"]["calibrated"]) == {"topic", "urgent"}
    with pytest.raises(CalibrationMismatchError) as refused:
        client(faults, calibration=older).system_one(state="x", questions=QUESTIONS)
    assert refused.value.field == "prompt_digest"


def test_a_call_asking_none_of_the_fitted_questions_passes_every_answer_through(faults: FaultServer) -> None:
    only = {"anger": QUESTIONS["anger"]}
    raw = client(faults).system_one(state="x", questions=only)
    done = client(faults, calibration=CALIBRATION).system_one(state="x", questions=only)
    assert done.answers == raw.answers
    assert done.debug["calibration"]["passed_through"] == ["anger"]


def test_a_calibration_path_that_is_not_a_calibration_is_a_config_error_naming_it(
    faults: FaultServer, tmp_path: Path
) -> None:
    bad = tmp_path / "metrics.json"
    bad.write_text(json.dumps({"kind": "jevper.metrics", "version": 1}))
    with pytest.raises(ConfigError, match=r"calibration .*metrics.json: expected a calibration"):
        client(faults, calibration=bad)
    with pytest.raises(ConfigError, match=r"expected a Calibration or the path"):
        client(faults, calibration=3)


#: The fitted questions in the Decisions API's shape (whose choices need instructions), named as the
#: calibration knows them, and one unnamed.
WHICH = "Which team handles it?"
DECIDED_FIT = {"topic": {**QUESTIONS["topic"], "instructions": WHICH}, "urgent": QUESTIONS["urgent"]}
DECIDED: list[dict[str, Any]] = [
    {
        "type": "choice",
        "name": "topic",
        "instructions": WHICH,
        "choices": [
            {"value": "billing", "description": "a charge"},
            {"value": "other", "description": "anything else"},
            {"value": "shipping"},
        ],
    },
    {"type": "predicate", "name": "urgent", "instructions": "Does the writer need an answer today?"},
    {"type": "predicate", "instructions": "Does the writer need an answer today?"},
]


def test_decisions_create_calibrates_each_question_named_as_a_fitted_one_as_system_one_does(
    faults: FaultServer,
) -> None:
    calibration = fit_on(DECIDED_FIT)
    asked = client(faults, calibration=calibration).system_one
    expected = asked(state="charged twice", questions=DECIDED_FIT)
    raw = client(faults).decisions.create(input="charged twice", questions=DECIDED)
    done = client(faults, calibration=calibration).decisions.create(input="charged twice", questions=DECIDED)
    topic, urgent, unnamed = done.answers
    assert isinstance(topic, DecisionChoice) and isinstance(urgent, DecisionPredicate)
    assert {p.value: p.probability for p in topic.probabilities} == pytest.approx(
        expected.answers["topic"].probabilities
    )
    assert topic.choice == expected.answers["topic"].choice == "other" != raw.answers[0].choice  # type: ignore[union-attr]
    assert urgent.probability == pytest.approx(expected.answers["urgent"].noul)
    assert unnamed == raw.answers[2]
    assert done.debug["calibration"]["calibrated"] == {"topic": "prior", "urgent": "platt"}
    assert done.debug["calibration"]["passed_through"] == ["questions[2]"]
    assert raw.to_api() != done.to_api()
    openai_types = pytest.importorskip("openai.types")
    openai_types.Decision.model_validate(done.to_api())


def test_decisions_create_refuses_a_question_named_as_a_fitted_one_but_asked_otherwise(
    faults: FaultServer,
) -> None:
    reworded = [{**DECIDED[1], "instructions": "Is it urgent?"}]
    with pytest.raises(CalibrationMismatchError, match="urgent"):
        client(faults, calibration=fit_on(DECIDED_FIT)).decisions.create(
            input="charged twice", questions=reworded
        )


def test_the_async_decisions_create_calibrates_alike(faults: FaultServer) -> None:
    calibration = fit_on(DECIDED_FIT)
    blocking = client(faults, calibration=calibration).decisions.create(
        input="charged twice", questions=DECIDED
    )
    assert blocking.debug["calibration"]["calibrated"] == {"topic": "prior", "urgent": "platt"}

    async def asked() -> Any:
        sdk = AsyncOpenAI(base_url=faults.base_url(), api_key="none")
        made = AsyncSystemOneClient(sdk, model="fault-model", api="chat_completions", calibration=calibration)
        try:
            return await made.decisions.create(input="charged twice", questions=DECIDED)
        finally:
            await sdk.close()

    assert asyncio.run(asked()).to_api()["answers"] == blocking.to_api()["answers"]


def test_under_api_auto_a_calibrated_client_does_not_take_the_servers_own_decisions_route(
    faults: FaultServer,
) -> None:
    fitted = fit_on(DECIDED_FIT)
    # Fit on what api="auto" reads on the fault server: its Responses surface.
    calibration = dataclasses.replace(
        fitted, bound_to=dataclasses.replace(fitted.bound_to, surface="responses")
    )
    plain = client(faults, api="auto").decisions.create(input="charged twice", questions=DECIDED)
    assert plain.debug["questions"]["questions[0]"]["surface"] == "decisions"  # the server's own answer
    done = client(faults, api="auto", calibration=calibration).decisions.create(
        input="charged twice", questions=DECIDED
    )
    assert done.debug["calibration"]["calibrated"] == {"topic": "prior", "urgent": "platt"}
    assert done.debug["route"]["decisions"] == "POST /v1/decisions not asked"
