"""jevper: typed questions answered with a real probability distribution from any OpenAI-style server."""

from jevper._errors import (
    CalibrationMismatchError,
    ConfigError,
    IncompleteAnswerError,
    InvalidDecisionError,
    InvalidQuestionError,
    JevperError,
    LabelReadoutError,
    MalformedAnswerError,
    ProviderError,
)
from jevper.async_client import AsyncSystemOneClient
from jevper.client import SystemOneClient
from jevper.decisions import DecisionResponse
from jevper.models import (
    ChoiceAnswer,
    Example,
    NoulAnswer,
    ReasoningConfig,
    ScoreAnswer,
    SystemOneResponse,
    Usage,
)
from jevper.questions import Choice, Noul, Score

__version__ = "0.1.0"

__all__ = [
    "AsyncSystemOneClient",
    "CalibrationMismatchError",
    "Choice",
    "ChoiceAnswer",
    "ConfigError",
    "DecisionResponse",
    "Example",
    "IncompleteAnswerError",
    "InvalidDecisionError",
    "InvalidQuestionError",
    "JevperError",
    "LabelReadoutError",
    "MalformedAnswerError",
    "Noul",
    "NoulAnswer",
    "ProviderError",
    "ReasoningConfig",
    "Score",
    "ScoreAnswer",
    "SystemOneClient",
    "SystemOneResponse",
    "Usage",
    "__version__",
]
