"""Live (marker `live`): ``option_orders=2`` on the embedded llama.cpp. The client's answer is the mean of
the two orders asked one by one (so the evaluation's rotated runs, asked once per order, give the
figures an averaged ask would); the batch's ``--option-orders 2`` and the gateway's give the same
answers.

Tolerance: 0.01 per probability (the same request to the same one-slot server gives the same logprobs;
the slack is for llama.cpp's float noise between calls).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from openai import OpenAI
from starlette.testclient import TestClient

from jevper import Choice, SystemOneClient
from jevper.batch.cli import main as batch
from jevper.serve import GatewayConfig, create_app
from jevper.servers import SpawnedServer

pytestmark = pytest.mark.live

ASKED: dict[str, Any] = {
    "type": "choice",
    "instructions": "Which team should handle this support ticket?",
    "criteria": {
        "billing": "charges, invoices, refunds",
        "technical": "crashes, errors, bugs",
        "shipping": "parcels and deliveries",
        "account": "logging in, passwords",
    },
}
TEAM = Choice(instructions=ASKED["instructions"], criteria=ASKED["criteria"])
STATES = {"t1": "I was charged twice for my order last week.", "t2": "The app crashes when I log in."}
HOW: dict[str, Any] = {"api": "chat_completions", "method": "grammar"}
TOLERANCE = 0.01


def test_two_orders_answer_with_the_mean_of_each_order_asked_alone_in_the_client_batch_and_gateway(
    llamacpp: SpawnedServer, tmp_path: Path
) -> None:
    sdk = OpenAI(base_url=llamacpp.base_url, api_key="none")
    averaged = SystemOneClient(sdk, model=llamacpp.model, **HOW, option_orders=2)
    alone = SystemOneClient(sdk, model=llamacpp.model, **HOW)
    by_client = {}
    for rid, state in STATES.items():
        answer: Any = averaged.system_one(state=state, questions={"team": TEAM}).answers["team"]
        first: Any = alone.system_one(state=state, questions={"team": TEAM}).answers["team"]
        second: Any = alone.system_one(state=state, questions={"team": TEAM.rotated(1)}).answers["team"]
        mean = {o: (first.probabilities[o] + second.probabilities[o]) / 2 for o in TEAM.options}
        # The orders disagree (SmolLM2 leans on the position), so the mean is neither order's answer.
        assert max(abs(first.probabilities[o] - second.probabilities[o]) for o in TEAM.options) > 0.05
        assert answer.probabilities == pytest.approx(mean, abs=TOLERANCE), rid
        assert list(answer.probabilities) == list(TEAM.options)
        assert answer.choice == max(mean, key=lambda o: mean[o]), rid
        by_client[rid] = answer.probabilities

    questions = tmp_path / "questions.json"
    questions.write_text(json.dumps({"team": ASKED}))
    states = tmp_path / "states.csv"
    with states.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "state"])
        writer.writerows(STATES.items())
    output = tmp_path / "out.parquet"
    flags = ["--questions", str(questions), "--base-url", llamacpp.base_url, "--model", llamacpp.model,
             "--api", HOW["api"], "--method", HOW["method"], "--concurrency", "1"]  # fmt: skip
    assert batch([str(states), str(output), *flags, "--option-orders", "2"]) == 0
    for row in pq.read_table(output).to_pylist():
        given = dict(row["team"]["probabilities"])
        assert given == pytest.approx(by_client[row["id"]], abs=TOLERANCE), row["id"]

    config = GatewayConfig(upstream=llamacpp.base_url, model=llamacpp.model, pool=1, option_orders=2, **HOW)
    with TestClient(create_app(config)) as gateway:
        for rid, state in STATES.items():
            body = {"model": llamacpp.model, "state": state, "questions": {"team": ASKED}}
            reply = gateway.post("/v1/systemone", json=body)
            assert reply.status_code == 200, reply.text
            given = reply.json()["answers"]["team"]["probabilities"]
            assert given == pytest.approx(by_client[rid], abs=TOLERANCE), rid
