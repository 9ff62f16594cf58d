"""The public surface: what `import jevper` offers, and how questions validate."""

from __future__ import annotations

import pytest

import jevper
from jevper import Choice, InvalidQuestionError, JevperError, Noul, ReasoningConfig, Score, SystemOneClient

PUBLIC = {
    "Answer",
    "Api",
    "AsyncDecisions",
    "AsyncSystemOneClient",
    "CalibrationMismatchError",
    "Choice",
    "ChoiceAnswer",
    "ClientCapabilityError",
    "ConfigError",
    "Decision",
    "DecisionAnswer",
    "DecisionChoiceAnswer",
    "DecisionChoiceProbability",
    "DecisionPredicateAnswer",
    "DecisionRefusalAnswer",
    "DecisionResponse",
    "DecisionScoreAnswer",
    "DecisionScoreProbability",
    "DecisionUsage",
    "Decisions",
    "Escalation",
    "Example",
    "Examples",
    "IncompleteAnswerError",
    "InvalidDecisionError",
    "InvalidQuestionError",
    "JSONContent",
    "JevperError",
    "LabelReadoutError",
    "MalformedAnswerError",
    "Method",
    "MethodSelection",
    "ModelMetadata",
    "ModelRefusalError",
    "Noul",
    "NoulAnswer",
    "NoulCriteria",
    "ProviderError",
    "Question",
    "ReasoningConfig",
    "RetryPolicy",
    "Score",
    "ScoreAnswer",
    "SystemOneClient",
    "SystemOneResponse",
    "UnsupportedMethodError",
    "Usage",
    "__version__",
}


def test_the_public_names_are_exactly_the_documented_ones_and_sorted() -> None:
    assert set(jevper.__all__) == PUBLIC
    assert jevper.__all__ == sorted(jevper.__all__)
    for name in jevper.__all__:
        assert getattr(jevper, name) is not None


def test_every_public_error_is_a_jevper_error() -> None:
    errors = [getattr(jevper, n) for n in jevper.__all__ if n.endswith("Error")]
    assert "ConfigError" in jevper.__all__ and "ProviderError" in jevper.__all__
    assert all(issubclass(e, JevperError) for e in errors)


def test_the_error_tree_is_drawn_in_the_errors_module_docstring() -> None:
    from jevper import _errors

    for name in (n for n in jevper.__all__ if n.endswith("Error")):
        assert name in (_errors.__doc__ or "").split()


def test_a_bad_setting_of_the_run_is_a_config_error_and_not_a_wrong_question() -> None:
    from jevper._upstreams import Upstream

    with pytest.raises(jevper.ConfigError, match="expected the model id it serves") as refused:
        Upstream("http://127.0.0.1:1/v1", "")
    assert not isinstance(refused.value, InvalidQuestionError)
    assert isinstance(refused.value, ValueError)


@pytest.mark.parametrize(
    ("build", "words"),
    [
        (lambda: Choice(criteria={}), "expected 2 to 255 options, got 0"),
        (lambda: Choice(criteria={"a": "x"}), "expected 2 to 255 options, got 1"),
        (lambda: Choice(criteria={f"o{i}": "x" for i in range(256)}), "got 256"),
        (lambda: Choice(criteria={"a": "", "b": None}), "description of 'a'"),
        (lambda: Choice(criteria=["a", "b"]), "expected criteria to be a mapping"),  # type: ignore[arg-type]
        (lambda: Score(["only one"]), "expected 2 to 26 levels, got 1"),
        (lambda: Score([str(i) for i in range(27)]), "got 27"),
        (lambda: Score("low high"), "expected criteria to be a list"),
        (lambda: Noul(""), "expected instructions to be a non-empty string"),
        (lambda: ReasoningConfig(budget_tokens=0), "positive integer"),
    ],
)
def test_invalid_questions_say_what_was_expected_and_what_arrived(build: object, words: str) -> None:
    with pytest.raises(InvalidQuestionError, match=words.replace("(", r"\(").replace(")", r"\)")):
        build()  # type: ignore[operator]


def test_a_choice_is_detached_from_the_callers_mapping() -> None:
    criteria = {"a": "x", "b": "y"}
    question = Choice(criteria=criteria)
    criteria["c"] = "z"
    assert question.options == ("a", "b")


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"method": "magic"}, "method: expected one of"),
        ({"api": "grpc"}, "api: expected one of"),
        ({"top_logprobs": 1}, "top_logprobs: expected an integer of at least 2"),
        ({"max_concurrency": 0}, "max_concurrency"),
        ({"timeout": None}, "timeout: expected a positive number of seconds"),
        ({"model": ""}, "model: expected the server's model id"),
    ],
)
def test_client_settings_are_validated_before_any_request(settings: dict[str, object], words: str) -> None:
    arguments: dict[str, object] = {"model": "m", **settings}
    with pytest.raises(InvalidQuestionError, match=words):
        SystemOneClient(object(), **arguments)  # type: ignore[arg-type]
