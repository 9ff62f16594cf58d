"""What the offline Decisions tests ask, and the refusal a model answers with (transcribed from the
Chat Completions refusal shape in the openai SDK's types)."""

from __future__ import annotations

from typing import Any

#: A yes/no question and a two-way choice: what the cache and escalation tests ask.
QUESTIONS: list[dict[str, Any]] = [
    {"type": "predicate", "name": "refund", "instructions": "Does the customer want money back?"},
    {
        "type": "choice",
        "name": "topic",
        "instructions": "What is the message about?",
        "choices": [{"value": "billing"}, {"value": "shipping"}],
    },
]
INPUT = "I was charged twice for the same subscription this month."
#: A Chat Completions answer whose model refused.
REFUSAL: dict[str, Any] = {
    "choices": [
        {
            "index": 0,
            "finish_reason": "stop",
            "message": {"role": "assistant", "content": None, "refusal": "I cannot help with that."},
        }
    ],
    "usage": {"prompt_tokens": 20, "completion_tokens": 6},
}
