"""Live (marker `live`): a score of 20 levels, more than TypeSafe's System One takes, is asked where the
route reads 26 — the label readout of the prompt surfaces — on the embedded llama.cpp, through
``system_one`` and through ``decisions.create`` (llama.cpp has no /v1/decisions: api="auto" asks its own
surfaces)."""

from __future__ import annotations

import math

import pytest
from openai import OpenAI

from jevper import Score, SystemOneClient
from jevper.servers import SpawnedServer

pytestmark = pytest.mark.live

STATE = "The parcel arrived a week late and the box was crushed, but the vase inside was intact."
LEVELS = [f"{i * 5}% satisfied" for i in range(20)]


def test_a_score_of_20_levels_is_answered_on_the_embedded_llamacpp(llamacpp: SpawnedServer) -> None:
    client = SystemOneClient(
        OpenAI(base_url=llamacpp.base_url, api_key="local", max_retries=0),
        model=llamacpp.model,
        extra_body={"temperature": 0},
    )
    answer = client.system_one(state=STATE, questions={"satisfaction": Score(LEVELS)}).answers["satisfaction"]
    assert answer.method in ("logprobs", "grammar")  # the label readout: 26 labels
    assert sorted(answer.probabilities) == list(range(20))  # type: ignore[union-attr]
    assert math.isclose(sum(answer.probabilities.values()), 1.0, abs_tol=1e-6)  # type: ignore[union-attr]
    assert 0 <= answer.score <= 19  # type: ignore[union-attr]

    decided = client.decisions.create(
        input=STATE,
        questions=[
            {
                "type": "score",
                "instructions": "How satisfied is the customer?",
                "levels": [{"label": x} for x in LEVELS],
            }
        ],
    )
    (score,) = decided.answers
    assert score.type == "score"
    assert [p.label for p in score.probabilities] == LEVELS  # type: ignore[union-attr]
    assert math.isclose(sum(p.probability for p in score.probabilities), 1.0, abs_tol=1e-6)  # type: ignore[union-attr]
