"""A gateway whose calibration cannot apply to the answers its upstream gives (fit on another surface than
api "auto" reaches) says so as its own configuration error, a 500, never as the upstream's failure."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from jevper.calibration import Binding, Calibration, Calibrator, QuestionCalibration, prompt_digest
from jevper.serve import GatewayConfig, create_app
from jevper.testing.faults import FaultServer, running

QUESTIONS: dict[str, Any] = {"refund": {"type": "noul", "instructions": "Money back?"}}


@pytest.fixture(scope="module")
def upstream() -> Iterator[FaultServer]:
    with running(model="smollm2") as server:
        yield server


def test_a_calibration_for_another_surface_than_auto_reaches_is_a_500_configuration_error(
    upstream: FaultServer,
) -> None:
    # Fit on chat_completions; the fault server's model is asked on Responses under api "auto".
    binding = Binding(
        "llamacpp", "b11549", "smollm2", "grammar", "chat_completions", prompt_digest(QUESTIONS)
    )
    noul = QuestionCalibration("noul", ("true", "false"), Calibrator("platt", platt=(0.7, -0.4)), {})
    calibration = Calibration(binding, {"refund": noul}, folds=5, seed=0).with_layouts(QUESTIONS)
    config = GatewayConfig(upstream=upstream.base_url(), model="smollm2", calibration=calibration)
    body = {"model": "smollm2", "state": "I was charged twice.", "questions": QUESTIONS}
    with TestClient(create_app(config)) as app:
        replies = [app.post("/v1/systemone", json=body) for _ in range(2)]
        health = app.get("/health").json()
    for reply in replies:
        assert reply.status_code == 500, reply.text
        detail = reply.json()["detail"]
        assert detail["error_type"] == "configuration_error"
        assert "--calibration" in detail["message"] and "surface 'chat_completions'" in detail["message"]
        assert "upstream" not in detail["error_type"]
    assert "CalibrationMismatchError" not in str(health)
