"""jevper: typed questions answered with a real probability distribution from any OpenAI-style server."""

from typing import Any, TypeAlias

from jevper._errors import (
    CalibrationMismatchError,
    ClientCapabilityError,
    ConfigError,
    IncompleteAnswerError,
    InvalidDecisionError,
    InvalidQuestionError,
    JevperError,
    LabelReadoutError,
    MalformedAnswerError,
    ModelRefusalError,
    ProviderError,
    UnsupportedMethodError,
)
from jevper._escalate import Escalation
from jevper._failure import RetryPolicy
from jevper.async_client import AsyncDecisions, AsyncSystemOneClient
from jevper.client import Decisions, SystemOneClient
from jevper.decisions import (
    ChoiceProbability,
    DecisionAnswer,
    DecisionChoice,
    DecisionPredicate,
    DecisionRefusal,
    DecisionResponse,
    DecisionScore,
    DecisionUsage,
    LevelProbability,
)
from jevper.models import (
    Answer,
    Api,
    ChoiceAnswer,
    Example,
    Examples,
    Method,
    ModelMetadata,
    NoulAnswer,
    NoulCriteria,
    ReasoningConfig,
    ScoreAnswer,
    SystemOneResponse,
    Usage,
)
from jevper.questions import Choice, Noul, Question, Score

__version__ = "0.1.0"

# The documented API's names for values this package already has (docs/compatibility.md lists each).
#: A JSON value: a state, a criterion, an extra_body field.
JSONContent: TypeAlias = Any
#: The methods a client or a call may choose ("auto" among them): the documented API's name for ``Method``.
MethodSelection: TypeAlias = Method
Decision = DecisionResponse
DecisionChoiceAnswer = DecisionChoice
DecisionPredicateAnswer = DecisionPredicate
DecisionRefusalAnswer = DecisionRefusal
DecisionScoreAnswer = DecisionScore
DecisionChoiceProbability = ChoiceProbability
DecisionScoreProbability = LevelProbability

__all__ = [
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
]
