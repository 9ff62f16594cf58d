"""OpenAI's Decisions API (``client.decisions.create`` and the gateway's ``POST /v1/decisions``).

``rules`` is the one place a Decisions request's rules live (each refusal an ``InvalidDecisionError``
naming OpenAI's ``param``), made of the small checks in ``checks``, with the request's input and its
content parts in ``input``; ``answers`` is the answers' shape (``Decision``'s, with ``to_api()``); ``call``
runs a call on the client's own machinery, without I/O, for both clients.
"""

from jevper.decisions.answers import (
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
from jevper.decisions.checks import param
from jevper.decisions.rules import DecisionQuestion, DecisionRequest, decision_request

__all__ = [
    "ChoiceProbability",
    "DecisionAnswer",
    "DecisionChoice",
    "DecisionPredicate",
    "DecisionQuestion",
    "DecisionRefusal",
    "DecisionRequest",
    "DecisionResponse",
    "DecisionScore",
    "DecisionUsage",
    "LevelProbability",
    "decision_request",
    "param",
]
