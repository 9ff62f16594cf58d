"""What reaches a cassette: no noise that changes per call, no credential anywhere."""

from __future__ import annotations

import json
from pathlib import Path

from vcr.request import Request

from jevper.probe.cassettes import REDACTED, prune, request_hook, response_hook
from jevper.probe.cli import command_line
from jevper.probe.text import expected_actual


def test_pruning_drops_ids_timestamps_fingerprints_bytes_and_timings_but_cache_n() -> None:
    body = {
        "id": "chatcmpl-1",
        "created": 1,
        "system_fingerprint": "b1-x",
        "choices": [{"logprobs": {"content": [{"id": 49, "token": "A", "bytes": [65], "logprob": -0.1}]}}],
        "timings": {"cache_n": 12, "prompt_ms": 3.5},
        "usage": {"prompt_tokens": 5},
    }
    assert prune(body) == {
        "choices": [{"logprobs": {"content": [{"token": "A", "logprob": -0.1}]}}],
        "timings": {"cache_n": 12},
        "usage": {"prompt_tokens": 5},
    }


def test_a_recorded_request_keeps_only_content_type_drops_the_port_and_scrubs_the_key() -> None:
    key = "sk-jevper-secret-123"
    request = Request(
        "POST",
        f"http://127.0.0.1:43121/v1/chat/completions?key={key}",
        json.dumps({"model": "m", "note": f"Bearer {key}"}).encode(),
        {
            "Authorization": f"Bearer {key}",
            "X-Api-Key": key,
            "Cookie": "a=b",
            "Content-Type": "application/json",
        },
    )
    recorded = request_hook([key])(request)
    assert recorded.uri == f"http://127.0.0.1/v1/chat/completions?key={REDACTED}"
    assert dict(recorded.headers) == {"content-type": "application/json"}
    assert key not in recorded.body.decode()


def test_a_recorded_response_is_pruned_indented_and_scrubbed() -> None:
    key = "sk-jevper-secret-123"
    response = {
        "status": {"code": 401, "message": "Unauthorized"},
        "headers": {"Set-Cookie": ["s=1"], "Content-Type": ["application/json"], "Date": ["now"]},
        "body": {"string": json.dumps({"error": {"message": f"bad key {key}"}, "created": 5}).encode()},
    }
    recorded = response_hook([key])(response)
    text = recorded["body"]["string"].decode()
    assert key not in text and "created" not in text
    assert text.startswith("{\n")
    assert recorded["headers"] == {"content-type": ["application/json"]}


def test_a_verifier_states_what_was_expected_and_what_arrived() -> None:
    assert (
        expected_actual("one of A, B, C", '"A: billing"') == 'expected one of A, B, C / actual "A: billing"'
    )


def test_the_recorded_command_keeps_no_machine_path_and_no_key() -> None:
    argv = [
        "--server",
        "llamacpp",
        "--out",
        "/home/someone/runs/today",
        "--replay=/srv/x/rec/",
        "--api-key",
        "sk-123",
    ]
    shown = command_line(argv, "sk-123")
    assert shown == (
        "python -m jevper.probe --server llamacpp --out '<dir>/today' '--replay=<dir>/rec' "
        "--api-key '<redacted>'"
    )
    # A relative path says nothing about the machine and stays as typed.
    assert command_line(["--out", "artifacts/demo"], None).endswith("--out artifacts/demo")


def test_a_model_list_keeps_its_ids_where_an_answer_loses_its_own() -> None:
    listed = {"object": "list", "data": [{"id": "smollm2", "object": "model", "created": 1}]}
    answer = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "choices": []}
    assert prune(listed) == {"object": "list", "data": [{"id": "smollm2", "object": "model"}]}
    assert prune(answer) == {"object": "chat.completion", "choices": []}


def test_a_path_of_this_machine_in_a_body_is_recorded_as_a_placeholder() -> None:
    home = str(Path.home())
    listed = {"id": "smollm2", "object": "model", "root": f"{home}/.cache/jevper/vllm/m"}
    body = json.dumps({"data": [listed]})
    recorded = response_hook([])({"status": {"code": 200}, "headers": {}, "body": {"string": body.encode()}})
    text = recorded["body"]["string"].decode()
    assert home not in text and '"root": "<home>/.cache/jevper/vllm/m"' in text
