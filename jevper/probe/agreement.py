"""Agreement rules: which decisive fact of a probe's verdict is compared with the reference document.

A probe names its rule in the catalogue (`compare = "…"`), a reference entry may state the fact's
value (`fact = …` in probes/reference.toml), and a classifier reports the fact under the rule's name in
`Verdict.facts`. A recording agrees with the reference when the graded outcome is the same and, where
the reference states the fact, the fact is the same too: two 200s whose answers contradict each other
do not agree because both were "supported".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Rule name -> what it compares besides the outcome (the outcome is always compared).
RULES: Mapping[str, str] = {
    "outcome": "the graded outcome alone (honoured, ignored, refused, accepted)",
    "status": "the exact HTTP status",
    "status-class": "the HTTP status class (2xx, 4xx, 5xx)",
    "alternatives": "the number of alternatives on the first answer token",
    "choices": "the number of choices returned",
    "body-shape": "the shape of the error body (object, detail, string, text, embedded error)",
    "trace": "where the reasoning trace went (reasoning, reasoning_content, inline, none)",
    "trailing": "the entries after the answer text (e.g. an end-of-turn token)",
    "logprobs": "what the logprob field carried (real, empty, absent)",
    "cache-field": "the field path carrying the cached-token count (or unreported)",
    "cache-reuse": "whether cached tokens were reported as reused (some, none, unreported)",
    "blocks": "the content block types of the answer",
    "confidence": "which formula each question type's confidence matches (TypeSafe's, top probability, ...)",
    "dialect": "the body a decision route speaks (OpenAI's, SGLang's, System One's, TypeSafe's, Ollama's)",
    "stability": "the stability grade (identical, within noise, moves) against the server's repeat noise",
}


def agrees(
    rule: str, outcome: str, facts: Mapping[str, Any], expected_outcome: str, expected_fact: Any
) -> bool:
    """Same outcome and, when the reference states the rule's fact, the same fact."""
    if outcome != expected_outcome:
        return False
    if rule == "outcome" or expected_fact is None:
        return True
    return bool(_normal(facts.get(rule)) == _normal(expected_fact))


def _normal(value: Any) -> Any:
    # TOML gives lists where a classifier gives tuples.
    return list(value) if isinstance(value, tuple | list) else value
