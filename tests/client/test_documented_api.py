"""Acceptance: a script written only against the documented jevper 0.7.12 API (documented_api_user.py) runs
unchanged on this package, against the loopback fault server (a 429 with Retry-After, a content filter, a
System One model list), with the outcomes the documented API promises.

The published library's side is opt in: ``JEVPER_DOCUMENTED_PYTHON`` names the python of an environment
holding it (``python3 -m venv /tmp/anchor-venv && /tmp/anchor-venv/bin/pip install jevper==0.7.12
openai``); the same script then runs there as a black box and must print the same lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from jevper.testing.faults import Script, running

USER_SCRIPT = Path(__file__).with_name("documented_api_user.py")
MODELS = {
    "models": [{"name": "fault-model", "description": "a loopback model", "release_date": "2026-12-01"}]
}

#: What the documented API promises for each step of the script.
EXPECTED = [
    {
        "step": "retried-429",
        "choice": "billing",
        "views": [["team"], [], []],
        "n_calls": 1,
        "n_retries": 1,
        "waited_retry_after": True,
        "input_tokens_counted": True,
        "decision": ["choice"],
    },
    {"step": "no-retries", "raised": "ProviderError", "status_code": 429},
    {"step": "content-filter", "raised": "ModelRefusalError", "provider_error": True},
    {"step": "noul-without-question", "raised": "JevperError"},
    {"step": "bad-header", "raised": "JevperError"},
    {"step": "question-examples-and-reasoning", "type": "choice", "examples": 1, "summary": "auto"},
    {"step": "list-models", "models": [["fault-model", "a loopback model", "2026-12-01"]]},
]


def content_filter() -> dict[str, Any]:
    message = {"role": "assistant", "content": None}
    return {
        "object": "chat.completion",
        "model": "fault-model",
        "choices": [{"index": 0, "finish_reason": "content_filter", "message": message}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 0},
    }


def run(python: str) -> tuple[list[dict[str, Any]], Script]:
    """The script's lines under ``python`` (isolated: it imports the jevper installed there), and what
    the scripted server saw."""
    script = Script()
    script.reply("/chat/completions", 200, content_filter())
    script.model_list(200, MODELS)
    with running(script=script) as server:
        env = {
            **os.environ,
            "DOCUMENTED_API_SCRIPTED_URL": server.base_url(),
            "DOCUMENTED_API_BUSY_URL": server.base_url("429-retry-after", "ok"),
            "DOCUMENTED_API_ALWAYS_BUSY_URL": server.base_url("429-retry-after"),
        }
        done = subprocess.run(
            [python, "-I", str(USER_SCRIPT)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert done.returncode == 0, done.stderr[-2000:]
    return [json.loads(line) for line in done.stdout.splitlines()], script


def test_the_documented_users_script_runs_unchanged_with_the_documented_outcomes() -> None:
    lines, script = run(sys.executable)
    assert lines == EXPECTED
    # The content filter was answered once, never asked again; the client's temperature and headers
    # travelled with it, and the model list carried the headers too.
    asked = [r for r in script.requests if r.path == "/chat/completions"]
    assert len(asked) == 1 and json.loads(asked[0].body)["temperature"] == 0.2
    assert asked[0].headers.get("x-team") == "docs"
    assert [r.headers.get("x-team") for r in script.listed] == ["docs"]


@pytest.mark.skipif(
    not os.environ.get("JEVPER_DOCUMENTED_PYTHON"),
    reason="opt in: JEVPER_DOCUMENTED_PYTHON=<python of a venv>",
)
def test_the_published_library_prints_the_same_lines() -> None:
    published, _ = run(os.environ["JEVPER_DOCUMENTED_PYTHON"])
    ours, _ = run(sys.executable)
    assert published == ours
