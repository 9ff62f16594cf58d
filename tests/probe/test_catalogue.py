"""The catalogue is data: the canonical ids (and more), each naming a classifier, a rule, a layout and a topic
that exist, each request reproducible."""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import replace
from importlib import resources
from pathlib import Path

import pytest

from jevper.probe.catalogue import DATA_FILES, PROBE_FILES, load_catalogue
from jevper.probe.classifiers import CLASSIFIERS
from jevper.probe.cli import main
from jevper.probe.compose import requests_for
from jevper.probe.presets import get_preset, load_presets
from jevper.probe.prompts import prompt_fields
from jevper.probe.reference import load_reference

#: The contract: exactly these ids, in this order.
CANONICAL_IDS = [
    "chat-logprobs",
    "chat-logprobs-1-top",
    "chat-logprobs-5-tops",
    "chat-logprobs-no-tops",
    "chat-logprobs-21-tops",
    "chat-tops-without-logprobs",
    "chat-logprobs-long",
    "chat-thinking-off-logprobs",
    "chat-thinking-on-logprobs",
    "chat-bad-model",
    "chat-bad-path",
    "chat-bad-json-body",
    "chat-missing-messages",
    "chat-n-two",
    "chat-developer-role",
    "chat-system-after-user",
    "chat-stream-zero",
    "chat-unknown-field",
    "chat-grammar",
    "chat-json-schema-strict",
    "chat-max-completion-tokens",
    "chat-reasoning-effort-none",
    "chat-reasoning-effort-xhigh",
    "chat-cache-key",
    "chat-cache-warm",
    "chat-cache-state-varied",
    "chat-cache-key-256",
    "chat-cache-salt",
    "responses-logprobs",
    "responses-thinking-off-logprobs",
    "responses-openresponses-items",
    "responses-input-text-parts",
    "responses-strict-schema",
    "responses-budget-truncated",
    "responses-bad-model",
    "responses-encrypted-reasoning",
    "responses-cache-cold",
    "responses-cache-warm",
    "messages-plain",
    "messages-system-turn",
    "messages-thinking",
    "messages-warm",
    "messages-output-config",
    "messages-output-config-bad-type",
    "messages-no-max-tokens",
]

CATALOGUE = load_catalogue()
ROOT = Path(__file__).resolve().parents[2]


def test_list_prints_exactly_the_canonical_ids_with_their_surface(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["list"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if not line.endswith("not canonical")]
    assert [line.split("\t")[0] for line in lines] == CANONICAL_IDS
    assert len(lines) == len(CATALOGUE.canonical)
    surfaces = {line.split("\t")[1] for line in lines}
    assert surfaces == {"chat_completions", "responses", "messages"}


def test_the_canonical_probes_are_those_the_probe_files_mark_and_the_only_ones_the_docs_count() -> None:
    marked = []
    for path in sorted(ROOT.glob("probes/*.toml")):
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        marked += [p["id"] for p in data.get("probe", []) if p.get("canonical", data.get("canonical", False))]
    assert sorted(marked) == sorted(p.id for p in CATALOGUE.canonical) == sorted(CANONICAL_IDS)
    # Prose that counts them says the catalogue's number (nothing in the code or the tests spells it).
    counts = re.compile(
        r"the (\d+) canonical probes|the same (\d+) probes|the canonical (\d+)\b|all (\d+) probes"
    )
    for doc in [ROOT / "README.md", ROOT / "ARCHITECTURE.md", *sorted(ROOT.glob("docs/*.md"))]:
        text = " ".join(doc.read_text(encoding="utf-8").split())
        for said in counts.finditer(text):
            number = int(next(group for group in said.groups() if group))
            assert number == len(CATALOGUE.canonical), f"{doc.name} says {said.group(0)!r}"


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("classifier", "telepathy", "classifier must name one in jevper/probe/classifiers.py"),
        ("compare", "vibes", "compare must name a rule among"),
        ("prompt", "haiku", "prompt must be a layout among"),
        ("topic", "gossip", "topic 'gossip' is not one of"),
    ],
)
def test_a_probe_naming_a_registry_entry_that_does_not_exist_is_refused_when_the_catalogue_loads(
    field: str, value: str, words: str
) -> None:
    from jevper.probe.catalogue import CatalogueError, check_catalogue

    probe = replace(CATALOGUE.get("chat-logprobs"), **{field: value})
    with pytest.raises(CatalogueError, match=words):
        check_catalogue([probe], CATALOGUE.topics)


def test_every_probe_names_a_classifier_that_exists_and_every_classifier_is_used() -> None:
    named = {probe.classifier for probe in CATALOGUE.probes}
    assert named - set(CLASSIFIERS) == set(), "probes name classifiers that do not exist"
    assert set(CLASSIFIERS) - named == set(), "classifiers no probe uses"


def test_every_toml_file_shipped_with_the_catalogue_is_read() -> None:
    shipped = {p.name for p in resources.files("jevper.probes").iterdir() if p.name.endswith(".toml")}
    assert shipped == set(PROBE_FILES) | set(DATA_FILES)


def test_every_topic_has_probes_and_every_probe_has_a_topic() -> None:
    used = {probe.topic for probe in CATALOGUE.probes}
    assert used == {topic.id for topic in CATALOGUE.topics}


def test_presets_carry_the_catalogue_base_urls_and_thinking_off_fields() -> None:
    # The five servers of the probe catalogue, at their documented defaults (other kinds may be added).
    urls = {name: preset.base_url for name, preset in load_presets().items()}
    assert {
        "ollama": "http://127.0.0.1:11434/v1",
        "llamacpp": "http://127.0.0.1:8080/v1",
        "vllm": "http://127.0.0.1:8000/v1",
        "sglang": "http://127.0.0.1:30000/v1",
        "lmstudio": "http://127.0.0.1:1234/v1",
    }.items() <= urls.items()
    ollama = get_preset("ollama").thinking_off
    assert ollama["chat_completions"] == {"reasoning_effort": "none"}
    assert ollama["responses"] == {"reasoning": {"effort": "none"}}
    for name in ("llamacpp", "vllm", "sglang"):
        assert get_preset(name).thinking_off["chat_completions"] == {
            "chat_template_kwargs": {"enable_thinking": False}
        }
    assert all(not fields for fields in get_preset("lmstudio").thinking_off.values())


@pytest.mark.parametrize("server", sorted(load_presets()))
def test_every_json_request_sends_temperature_zero_a_fixed_seed_and_the_preset_model(server: str) -> None:
    preset = get_preset(server)
    for probe in CATALOGUE.probes:
        for request in requests_for(probe, CATALOGUE, preset):
            if request.json_body is None:
                assert probe.raw_body is not None or probe.method == "GET"
                continue
            if not probe.reproducible:  # System One and Decisions: the APIs have no such fields
                assert probe.surface in ("systemone", "decisions")
                assert "temperature" not in request.json_body and "seed" not in request.json_body
                continue
            assert request.json_body["temperature"] == probe.sampling.get("temperature", 0)
            assert isinstance(request.json_body["seed"], int)
            assert request.json_body["model"] in (preset.model, probe.model)
            assert json.loads(request.content) == request.json_body


def test_n_two_is_asked_under_sampling_with_the_fixed_seed_and_only_n_two_samples() -> None:
    body = requests_for(CATALOGUE.get("chat-n-two"), CATALOGUE, get_preset("vllm"))[-1].json_body
    assert body["n"] == 2 and body["temperature"] > 0 and body["seed"] == 7
    sampled = [p.id for p in CATALOGUE.probes if p.sampling]
    assert sampled == ["chat-n-two"]


def test_a_sampling_override_of_a_field_that_is_not_reproducible_is_refused() -> None:
    from jevper.probe.catalogue import CatalogueError, check_catalogue

    probe = replace(CATALOGUE.get("chat-n-two"), sampling={"top_k": 5})
    with pytest.raises(
        CatalogueError, match=r"chat-n-two: sampling may override only \['seed', 'temperature'\]"
    ):
        check_catalogue([probe], CATALOGUE.topics)


def test_thinking_probes_leave_the_thinking_off_field_out_and_the_others_send_it() -> None:
    preset = get_preset("llamacpp")
    for probe in CATALOGUE.probes:
        body = requests_for(probe, CATALOGUE, preset)[-1].json_body
        if body is None:
            continue
        assert ("chat_template_kwargs" in body) == probe.thinking_off, probe.id


def test_the_long_prompt_puts_examples_then_question_then_state_and_varies_only_the_state() -> None:
    long = prompt_fields("long", "chat_completions")["messages"][-1]["content"]
    varied = prompt_fields("long-state-varied", "chat_completions")["messages"][-1]["content"]
    assert long.index("Message:") < long.index("Question:") < long.index("State:")
    shared = len(long[: long.index("State:")])
    assert long[:shared] == varied[:shared] and long != varied
    assert 7000 < len(long) < 11000  # about 2,000 tokens of English


def test_each_cold_cache_probe_opens_with_a_line_no_other_probe_sends() -> None:
    preset = get_preset("llamacpp")

    def opening(probe_id: str) -> str:
        body = requests_for(CATALOGUE.get(probe_id), CATALOGUE, preset)[-1].json_body
        turns = body.get("messages") or body.get("input") or [{"content": ""}]
        return str(body.get("system") or turns[0]["content"]).split("\n", 1)[0]

    cold = {probe_id: opening(probe_id) for probe_id in ("chat-cache-key", "responses-cache-cold")}
    assert cold["chat-cache-key"] != cold["responses-cache-cold"]
    assert opening("chat-cache-state-varied") == cold["chat-cache-key"]
    others = [
        p.id
        for p in CATALOGUE.probes
        if p.raw_body is None
        and p.opening is None
        and not p.request_of
        and p.surface not in ("systemone", "decisions")
    ]
    for probe_id in others:
        assert opening(probe_id) not in cold.values(), probe_id


def test_warm_probes_send_the_identical_request_twice() -> None:
    preset = get_preset("llamacpp")
    for probe_id in ("chat-cache-warm", "responses-cache-warm", "messages-warm"):
        first, second = requests_for(CATALOGUE.get(probe_id), CATALOGUE, preset)
        assert first.content == second.content


def test_dry_run_prints_every_request_without_touching_the_network(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--server", "vllm", "--dry-run", "--only", "messages-*"]) == 0
    out = capsys.readouterr().out
    # Seven canonical probes, messages-warm primes with one more, and each stability probe's plan.
    sent = [requests_for(p, CATALOGUE, get_preset("vllm")) for p in CATALOGUE.select(["messages-*"])]
    assert out.count("POST /messages") == sum(map(len, sent)) > 8
    assert '"model": "qwen3.5-9b"' in out


def test_only_with_a_glob_that_matches_nothing_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "--only", "nothing-*"]) == 2
    assert "no probe id matches" in capsys.readouterr().err


def test_the_reference_names_only_probes_of_the_catalogue_for_each_transcribed_server() -> None:
    reference = load_reference()
    assert {"ollama", "llamacpp", "vllm", "sglang", "lmstudio"} <= set(reference)
    ids = set(CANONICAL_IDS)
    for server in reference.values():
        assert set(server.probes) <= ids


def test_listing_into_a_reader_that_stops_early_ends_quietly() -> None:
    import subprocess
    import sys

    listing = subprocess.run(
        f"{sys.executable} -m jevper.probe list | head -1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listing.stdout.startswith("chat-logprobs\t")
    assert "Traceback" not in listing.stderr


def test_the_probes_base_url_names_the_model_split_at_the_first_equals_sign(
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = ["--base-url", "http://h:1/v1=org/m=x"]
    assert main(["--server", "vllm", "--dry-run", "--only", "chat-logprobs", *url]) == 0
    said = capsys.readouterr().out
    assert "# chat-logprobs -> http://h:1/v1/chat/completions" in said
    assert '"model": "org/m=x"' in said
