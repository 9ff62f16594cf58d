"""The client speaks the dialects of the decision routes (../shared/decisions.md, "Dialects"): SGLang's
own body and System One's shape on POST /v1/decisions, Ollama's System One found through POST /api/show
(with its images and keep_alive), and each route's own limits on a score's levels. The servers are
jevper.testing.dialects' transcribed ones, and a System One-shaped /v1/decisions of this module's own."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Iterator
from typing import Any

import pytest
from openai import AsyncOpenAI, OpenAI

from jevper import (
    AsyncSystemOneClient,
    ClientCapabilityError,
    InvalidQuestionError,
    Noul,
    ProviderError,
    Score,
    SystemOneClient,
)
from jevper.testing import dialects
from jevper.testing.loopback import LoopbackServer
from jevper.testing.systemone import SystemOneAnswer

MODEL = "dialect-model"
INPUT = "I was charged twice for the same subscription this month."
QUESTIONS = [
    {
        "type": "choice",
        "name": "team",
        "instructions": "Which team should answer?",
        "choices": [{"value": "billing", "description": "money"}, {"value": "technical"}],
    },
    {"type": "predicate", "instructions": "Is it urgent?"},
    {"type": "score", "instructions": "How angry?", "levels": [{"label": "calm"}, {"label": "angry"}]},
]
LABEL = {
    "object": "chat.completion",
    "model": MODEL,
    "choices": [
        {
            "index": 0,
            "finish_reason": "stop",
            "message": {"role": "assistant", "content": "A"},
            "logprobs": {
                "content": [
                    {
                        "token": "A",
                        "logprob": -0.2,
                        "top_logprobs": [{"token": "A", "logprob": -0.2}, {"token": "B", "logprob": -1.9}],
                    }
                ]
            },
        }
    ],
    "usage": {"prompt_tokens": 10, "completion_tokens": 1},
}
TWENTY = Score([f"level {i}" for i in range(20)])
#: The first bytes of a PNG and of a WebP image, which is all the client reads of an image.
PNG = b"\x89PNG\r\n\x1a\n" + bytes(24)
WEBP = b"RIFF\x10\x00\x00\x00WEBPVP8 " + bytes(8)


class Recorded(dialects.DialectServer):
    """A transcribed dialect server that keeps each request's method, path and body."""

    def __init__(self, dialect: dialects.Dialect, owned_by: str | None = None) -> None:
        super().__init__(dialect, MODEL, owned_by)
        self.requests: list[tuple[str, str, Any]] = []

    def _route(self, method: str, path: str, body: Any, size: int) -> tuple[int, Any]:
        self.requests.append((method, path.rstrip("/"), body))
        return super()._route(method, path, body, size)

    @property
    def paths(self) -> list[str]:
        return [f"{method} {path}" for method, path, _ in self.requests]


@pytest.fixture
def sglang() -> Iterator[Recorded]:
    server = Recorded("sglang")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def ollama() -> Iterator[Recorded]:
    server = Recorded("ollama")
    server.start()
    yield server
    server.stop()


def client(server: Any, **options: Any) -> SystemOneClient:
    return SystemOneClient(
        OpenAI(base_url=server.base_url, api_key="k", max_retries=0), model=MODEL, **options
    )


@pytest.mark.parametrize("api", ["decisions", "auto"])
def test_a_sglang_decisions_route_is_answered_in_its_own_body_and_remembered(
    sglang: Recorded, api: str
) -> None:
    jevper_client = client(sglang, api=api)
    first = jevper_client.decisions.create(input=INPUT, questions=QUESTIONS)
    second = jevper_client.decisions.create(input=INPUT, questions=QUESTIONS)
    assert first.to_api() == second.to_api()
    team, urgent, anger = first.answers
    assert (team.type, team.name, team.choice) == ("choice", "team", "billing")  # type: ignore[union-attr]
    assert [p.value for p in team.probabilities] == ["billing", "technical"]  # type: ignore[union-attr]
    assert urgent.probability == pytest.approx(dialects.YES)  # type: ignore[union-attr]
    assert [p.label for p in anger.probabilities] == ["calm", "angry"]  # type: ignore[union-attr]
    # OpenAI's body first (a 400 there: "another shape"), then SGLang's; the second call speaks it at once.
    assert sglang.paths == ["POST /v1/decisions"] * 3
    refused, spoken, again = (body for _, _, body in sglang.requests)
    assert isinstance(refused["questions"][0].get("choices"), list)
    assert spoken["questions"][0] == {
        "id": "q0",
        "type": "choice",
        "question": "Which team should answer?",
        "options": [{"name": "billing", "description": "money"}, {"name": "technical"}],
    }
    assert [q["type"] for q in spoken["questions"]] == ["choice", "yes_no", "score"]
    assert again == spoken
    assert "SGLang's" in first.debug["questions"]["questions[0]"]["why"][0]


def test_what_sglangs_body_cannot_carry_is_refused_naming_the_dialect(sglang: Recorded) -> None:
    jevper_client = client(sglang, api="decisions")
    jevper_client.decisions.create(input=INPUT, questions=QUESTIONS)
    asked = len(sglang.requests)
    boolean = [{"type": "choice", "instructions": "Refund?", "choices": [{"value": True}, {"value": False}]}]
    eleven = [{"type": "score", "instructions": "How?", "levels": [{"label": str(i)} for i in range(11)]}]
    for questions, words in ((boolean, "a boolean value"), (eleven, "11 levels")):
        with pytest.raises(ClientCapabilityError, match=f"speaks SGLang's body.*{words}"):
            jevper_client.decisions.create(input=INPUT, questions=questions)
    assert len(sglang.requests) == asked


def test_a_decisions_route_that_speaks_no_dialect_raises_the_servers_own_refusal() -> None:
    def refuses(method: str, path: str, body: Any, size: int) -> tuple[int, Any]:
        return 400, {"error": {"message": "bad request", "type": "invalid_request_error"}}

    server = LoopbackServer(refuses, "refusing")
    server.start()
    try:
        with pytest.raises(ProviderError, match="bad request"):
            client(server, api="decisions").decisions.create(input=INPUT, questions=QUESTIONS)
        # An image System One's shape cannot carry: that dialect is skipped, the server's refusal stands.
        image = [
            {"role": "user", "content": [{"type": "input_image", "image_url": "https://example.com/a.png"}]}
        ]
        with pytest.raises(ProviderError, match="bad request"):
            client(server, api="decisions").decisions.create(input=image, questions=QUESTIONS)
    finally:
        server.stop()


def test_a_decisions_route_in_system_ones_shape_is_answered_in_it() -> None:
    seen: list[Any] = []

    def system_one_shaped(method: str, path: str, body: Any, size: int) -> tuple[int, Any]:
        seen.append(body)
        if method == "POST" and path.endswith("/v1/decisions") and isinstance(body, dict) and "state" in body:
            return 200, SystemOneAnswer(body, MODEL).body()
        return 400, {"error": {"message": "state: field required", "type": "invalid_request_error"}}

    server = LoopbackServer(system_one_shaped, "system-one-shaped")
    server.start()
    try:
        jevper_client = client(server, api="decisions")
        first = jevper_client.decisions.create(input=INPUT, questions=QUESTIONS)
        jevper_client.decisions.create(input=INPUT, questions=QUESTIONS)
    finally:
        server.stop()
    assert [a.type for a in first.answers] == ["choice", "predicate", "score"]
    assert first.answers[0].name == "team"
    # OpenAI's body, SGLang's, System One's; then System One's alone.
    assert ["state" in body for body in seen] == [False, False, True, True]
    assert seen[2]["state"] == INPUT
    assert seen[2]["questions"]["questions[1]"]["type"] == "noul"


def test_auto_finds_an_ollama_decision_model_through_api_show_and_asks_26_levels_there(
    ollama: Recorded,
) -> None:
    jevper_client = client(ollama, keep_alive="5m")
    response = jevper_client.system_one(state=INPUT, questions={"anger": TWENTY})
    answer = response.answers["anger"]
    assert (answer.method, answer.surface) == ("native", "systemone")
    assert len(answer.probabilities) == 20  # type: ignore[union-attr]
    assert ollama.paths == ["GET /v1/models", "POST /api/show", "POST /v1/systemone"]
    assert ollama.requests[1][2] == {"model": MODEL}
    assert ollama.requests[2][2]["keep_alive"] == "5m"
    assert "decision" in response.debug["route"]["why"]


def test_the_async_client_finds_an_ollama_decision_model_too(ollama: Recorded) -> None:
    jevper_client = AsyncSystemOneClient(
        AsyncOpenAI(base_url=ollama.base_url, api_key="k", max_retries=0), model=MODEL
    )
    response = asyncio.run(jevper_client.system_one(state=INPUT, questions={"anger": TWENTY}))
    assert response.answers["anger"].method == "native"
    assert ollama.paths == ["GET /v1/models", "POST /api/show", "POST /v1/systemone"]


@pytest.mark.parametrize("owned_by", [None, "library", "someone"])
def test_an_ollama_decision_model_is_found_whatever_its_model_list_says_of_its_owner(
    owned_by: str | None,
) -> None:
    # Ollama documents a decision model in POST /api/show alone; no source says what its model list
    # says of a model, so the discovery cannot rest on that.
    server = Recorded("ollama", owned_by=owned_by).start()
    try:
        response = client(server).system_one(state=INPUT, questions={"anger": TWENTY})
    finally:
        server.stop()
    assert response.answers["anger"].surface == "systemone"
    assert server.paths == ["GET /v1/models", "POST /api/show", "POST /v1/systemone"]


def test_a_server_without_api_show_is_asked_it_once_not_once_per_model() -> None:
    # The SGLang server has no /api/show (a 404) and no System One; here it lists two models without
    # their outputs. The prompt surfaces are asked (a 404 on each), and the second model does not ask
    # /api/show again.
    class TwoModels(Recorded):
        def _route(self, method: str, path: str, body: Any, size: int) -> tuple[int, Any]:
            if method == "GET" and path.rstrip("/").endswith("/models"):
                self.requests.append((method, path.rstrip("/"), body))
                return 200, {"object": "list", "data": [{"id": MODEL}, {"id": "another-model"}]}
            return super()._route(method, path, body, size)

    server = TwoModels("sglang").start()
    try:
        jevper_client = client(server)
        for model in (MODEL, "another-model"):
            with pytest.raises(ProviderError):
                jevper_client.system_one(state=INPUT, questions={"anger": TWENTY}, model=model)
    finally:
        server.stop()
    assert server.paths.count("POST /api/show") == 1
    assert server.paths.count("GET /v1/models") == 2


def test_a_model_list_that_says_a_models_outputs_decides_without_api_show(loopback: Any) -> None:
    # llama.cpp's list says each model's output_modalities (documented): nothing else is asked.
    loopback.model_list(200, {"data": [{"id": MODEL, "architecture": {"output_modalities": ["text"]}}]})
    loopback.reply("/responses", 404, {"error": {"message": "File Not Found", "type": "not_found_error"}})
    loopback.reply("/chat/completions", 200, LABEL)
    jevper_client = SystemOneClient(OpenAI(base_url=loopback.url, api_key="k", max_retries=0), model=MODEL)
    jevper_client.system_one(state=INPUT, questions={"urgent": Noul(instructions="Is it urgent?")})
    assert [r.path for r in loopback.requests] == ["/responses", "/chat/completions"]


def test_typesafes_system_one_refuses_a_score_of_more_than_10_levels_before_sending(ollama: Recorded) -> None:
    with pytest.raises(InvalidQuestionError, match="expected 2 to 10 levels, got 20"):
        client(ollama, api="systemone").system_one(state=INPUT, questions={"anger": TWENTY})
    assert ollama.requests == []
    # With Ollama's keep_alive, the route is Ollama's dialect, which reads 26 levels.
    answered = client(ollama, api="systemone", keep_alive=0).system_one(
        state=INPUT, questions={"anger": TWENTY}
    )
    assert len(answered.answers["anger"].probabilities) == 20  # type: ignore[union-attr]
    assert ollama.paths == ["POST /v1/systemone"]


def test_a_score_of_26_levels_is_a_question_and_27_is_not() -> None:
    assert len(Score([str(i) for i in range(26)]).options) == 26
    with pytest.raises(InvalidQuestionError, match="expected 2 to 26 levels, got 27"):
        Score([str(i) for i in range(27)])


def test_auto_asks_a_score_wider_than_typesafes_system_one_on_the_prompt_surfaces(loopback: Any) -> None:
    listing = {"data": [{"id": MODEL, "architecture": {"output_modalities": ["decisions"]}}]}
    letters = [chr(ord("A") + i) for i in range(20)]
    top = [{"token": letter, "logprob": -1.0 - i / 10} for i, letter in enumerate(letters)]
    label = {
        "object": "chat.completion",
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": "A"},
                "logprobs": {"content": [{"token": "A", "logprob": -1.0, "top_logprobs": top}]},
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 1},
    }
    loopback.model_list(200, listing)
    loopback.reply("/responses", 404, {"error": {"message": "File Not Found", "type": "not_found_error"}})
    loopback.reply("/chat/completions", 200, label)
    loopback.reply(
        "/systemone",
        200,
        {
            "model": MODEL,
            "answers": {
                "anger": {
                    "type": "score",
                    "score": 1.0,
                    "probabilities": {"0": 0.25, "1": 0.5, "2": 0.25},
                    "legend": {"0": "calm", "1": "annoyed", "2": "angry"},
                    "confidence": 0.3,
                }
            },
            "usage": {"input_tokens": 3, "output_tokens": 0},
        },
    )
    jevper_client = SystemOneClient(OpenAI(base_url=loopback.url, api_key="k", max_retries=0), model=MODEL)
    response = jevper_client.system_one(state=INPUT, questions={"anger": TWENTY})
    answer = response.answers["anger"]
    assert answer.surface == "chat_completions"
    assert len(answer.probabilities) == 20  # type: ignore[union-attr]
    # A decision model (GET /models, which the loopback does not list among its requests), yet no
    # POST /systemone: TypeSafe's route takes 10 levels.
    assert [r.path for r in loopback.requests] == ["/responses", "/chat/completions"]
    three = jevper_client.system_one(state=INPUT, questions={"anger": Score(["calm", "annoyed", "angry"])})
    assert three.answers["anger"].surface == "systemone"


def test_auto_remembers_no_dialect_for_a_request_every_body_of_which_is_refused(loopback: Any) -> None:
    # A 400 to each dialect's body says this request is refused, not that the route is missing: the
    # call is asked on the prompt surfaces, and the next one tries the route again.
    refused = {"error": {"message": "too many questions", "type": "invalid_request_error"}}
    for _ in range(3):
        loopback.reply("/decisions", 400, refused)
    loopback.reply("/responses", 404, {"error": {"message": "File Not Found", "type": "not_found_error"}})
    loopback.reply("/chat/completions", 200, LABEL)
    jevper_client = SystemOneClient(OpenAI(base_url=loopback.url, api_key="k", max_retries=0), model=MODEL)
    jevper_client.decisions.create(input=INPUT, questions=[QUESTIONS[1]])
    assert [r.path for r in loopback.requests] == ["/decisions"] * 3 + ["/responses", "/chat/completions"]
    loopback.reply("/decisions", 404, {"error": {"message": "File Not Found", "type": "not_found_error"}})
    loopback.reply("/chat/completions", 200, LABEL)
    jevper_client.decisions.create(input=INPUT, questions=[QUESTIONS[1]])
    assert [r.path for r in loopback.requests][5:] == ["/decisions", "/chat/completions"]


def test_images_travel_on_ollamas_system_one_as_base64_the_calls_own_winning(ollama: Recorded) -> None:
    jevper_client = client(ollama, images=[PNG])
    jevper_client.system_one(state=INPUT, questions={"anger": TWENTY})
    jevper_client.system_one(
        state=INPUT, questions={"anger": TWENTY}, images=[base64.b64encode(WEBP).decode()]
    )
    sent = [body for method, path, body in ollama.requests if path == "/v1/systemone"]
    assert [body["images"] for body in sent] == [
        [base64.b64encode(PNG).decode()],
        [base64.b64encode(WEBP).decode()],
    ]


def test_images_make_api_systemone_speak_ollamas_dialect_and_its_26_levels(ollama: Recorded) -> None:
    answered = client(ollama, api="systemone").system_one(
        state=INPUT, questions={"anger": TWENTY}, images=[PNG]
    )
    assert len(answered.answers["anger"].probabilities) == 20  # type: ignore[union-attr]
    assert ollama.paths == ["POST /v1/systemone"]


@pytest.mark.parametrize("api", ["chat_completions", "responses", "messages"])
def test_images_on_a_prompt_surface_are_refused_before_sending_naming_the_route(
    ollama: Recorded, api: str
) -> None:
    with pytest.raises(ClientCapabilityError, match=f"api='{api}' with images=.*a prompt surface") as caught:
        client(ollama, api=api, images=[PNG])
    assert caught.value.loc == ("images",)
    jevper_client = client(ollama, api=api)
    with pytest.raises(ClientCapabilityError, match="cannot carry images"):
        jevper_client.system_one(state=INPUT, questions={"anger": TWENTY}, images=[PNG])
    assert ollama.requests == []


def test_images_are_refused_on_the_decisions_routes_before_sending(ollama: Recorded) -> None:
    with pytest.raises(ClientCapabilityError, match=r"api='decisions' with images=.*input_image part"):
        client(ollama, api="decisions", images=[PNG])
    with pytest.raises(ClientCapabilityError, match=r"decisions.create with images=.*input_image part"):
        client(ollama).decisions.create(input=INPUT, questions=QUESTIONS, images=[PNG])
    assert ollama.requests == []


def test_auto_refuses_images_where_the_model_is_not_ollamas_before_asking_it(sglang: Recorded) -> None:
    # No System One here: the prompt surfaces would answer, and they carry no images. Only the discovery
    # was asked.
    with pytest.raises(
        ClientCapabilityError, match=r"'auto' for 'dialect-model' with images=.*prompt surfaces"
    ):
        client(sglang, images=[PNG]).system_one(state=INPUT, questions={"anger": TWENTY})
    assert sglang.paths == ["GET /v1/models", "POST /api/show"]


def test_auto_refuses_images_for_a_decision_model_of_typesafes_system_one(loopback: Any) -> None:
    loopback.model_list(200, {"data": [{"id": MODEL, "architecture": {"output_modalities": ["decisions"]}}]})
    jevper_client = SystemOneClient(
        OpenAI(base_url=loopback.url, api_key="k", max_retries=0), model=MODEL, images=[PNG]
    )
    with pytest.raises(
        ClientCapabilityError, match=r"through System One .* TypeSafe's System One cannot carry"
    ):
        jevper_client.system_one(state=INPUT, questions={"urgent": Noul(instructions="Is it urgent?")})
    assert loopback.requests == []


@pytest.mark.parametrize(
    ("image", "said"),
    [
        ("https://example.com/cat.png", "got a URL"),
        ("data:image/png;base64,iVBORw0KGgo=", "got a URL"),
        ("not base64 at all!", "not base64"),
        (b"GIF89a" + bytes(8), "expected a PNG, JPEG, WebP image"),
        (7, "got int"),
    ],
)
def test_an_image_ollama_cannot_read_is_refused_when_given(image: Any, said: str) -> None:
    with pytest.raises(InvalidQuestionError, match=said) as caught:
        SystemOneClient(OpenAI(base_url="http://127.0.0.1:9/v1", api_key="k"), model=MODEL, images=[image])
    assert caught.value.loc == ("images", 0)


def test_a_body_over_ollamas_64_kib_is_refused_before_sending(ollama: Recorded) -> None:
    jevper_client = client(ollama, api="systemone")
    with pytest.raises(ClientCapabilityError, match=r"a body of 8.* bytes: expected at most 65536"):
        jevper_client.system_one(state=INPUT, questions={"anger": TWENTY}, images=[PNG + bytes(64 * 1024)])
    assert ollama.requests == []


def test_images_are_part_of_the_answer_caches_key(ollama: Recorded, tmp_path: Any) -> None:
    jevper_client = client(ollama, api="systemone", cache=tmp_path / "answers.sqlite")
    for image in (PNG, WEBP, PNG):
        jevper_client.system_one(state=INPUT, questions={"anger": TWENTY}, images=[image])
    # The third call is the first's again, answered from the cache; the second asked the server.
    assert ollama.paths == ["POST /v1/systemone"] * 2
