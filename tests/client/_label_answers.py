"""A Chat Completions label answer written for a test: the loopback server replies with it."""

from __future__ import annotations

import math
from typing import Any


def label(answer: str, alternatives: dict[str, float]) -> dict[str, Any]:
    """A Chat Completions label answer whose answer token lists ``alternatives`` (label: probability)."""
    top = [{"token": t, "logprob": math.log(p)} for t, p in alternatives.items()]
    entry = {"token": answer, "logprob": math.log(alternatives[answer]), "top_logprobs": top}
    return {
        "object": "chat.completion",
        "model": "smollm2",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": answer},
                "logprobs": {"content": [entry]},
            }
        ],
        "usage": {"prompt_tokens": 100, "completion_tokens": 1, "total_tokens": 101},
    }
