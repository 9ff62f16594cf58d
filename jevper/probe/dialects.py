"""Dialects of the decision routes: which body a server speaks on POST /v1/decisions and POST
/v1/systemone, and the rules each is graded by (../shared/decisions.md, "Dialects").

A path does not say which body it speaks. Each route has a dialect probe (`PROBES`) that sends the
same questions in every body the route is documented to speak; the first body answered in its own
shape names the dialect. Grading then reads the route's other probes by that dialect's rules
(`reading`): a 4xx to an OpenAI-shaped body on a server that speaks SGLang's or System One's body on
/v1/decisions says "another shape", not a refusal of the feature; on Ollama's /v1/systemone a score of
up to 26 levels is a valid request, where TypeSafe's takes 10.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from jevper._wire import decisions, systemone
from jevper.probe.cassettes import Exchange
from jevper.probe.catalogue import Probe
from jevper.probe.text import words

OPENAI, SGLANG, SYSTEM_ONE = "OpenAI's", "SGLang's", "System One's"
TYPESAFE, OLLAMA = "TypeSafe's", "Ollama's"
#: The body each route's probes are written in.
NATIVE: Mapping[str, str] = {decisions.SURFACE: OPENAI, systemone.SURFACE: TYPESAFE}
#: Each route's dialect probe, whose cassette says which body the server speaks.
PROBES: Mapping[str, str] = {decisions.SURFACE: "decisions-dialect", systemone.SURFACE: "systemone-dialect"}
#: The dialect each of decisions-dialect's bodies is written in, in the order it sends them.
DECISIONS_BODIES: tuple[tuple[str, str], ...] = (
    ("d-standard", OPENAI),
    ("d-sglang", SGLANG),
    ("d-systemone", SYSTEM_ONE),
)
#: Ollama's limits where they are not TypeSafe's (docs.ollama.com/api/systemone): options and levels.
OLLAMA_OPTIONS = OLLAMA_LEVELS = (2, 26)

Reading = Literal["another shape", "valid in the dialect", "refused in the dialect"]


@dataclass(frozen=True)
class Found:
    """What a dialect probe found: the dialect (None: no body was answered in its own shape), and
    what each body got, in the order sent."""

    dialect: str | None
    told: tuple[str, ...]


def _told(name: str, exchange: Exchange) -> str:
    if exchange.status == 200:
        return f"{name}: 200"
    body = exchange.json()
    error = body.get("error") if isinstance(body, Mapping) else None
    message = error.get("message") if isinstance(error, Mapping) else None
    said = f" {words(str(message), 60)}" if message else ""
    return f"{name}: {exchange.status}{said}"


def decision_schema(body: Any) -> list[str]:
    """What keeps a body from validating as the openai SDK's `Decision`, one line per error. The SDK's
    types are imported here, when a Decisions answer is graded: importing them took half of the probe
    command's start (0.4 s of 0.9 s for `python -m jevper.probe --help`)."""
    import openai.types
    import pydantic

    try:
        openai.types.Decision.model_validate(body)
    except pydantic.ValidationError as exc:
        return [f"{'.'.join(map(str, e['loc'])) or 'the body'}: {e['msg']}" for e in exc.errors()]
    return []


def answered_as(dialect: str, body: Any) -> bool:
    """Does a 200's body have the shape of the dialect's answer?"""
    if not isinstance(body, Mapping):
        return False
    answers = body.get("answers")
    if dialect == OPENAI:
        return not decision_schema(body)
    if dialect == SGLANG:
        return body.get("object") == "decisions" and isinstance(answers, list)
    return isinstance(answers, Mapping)


def decisions_dialect(exchanges: Sequence[Exchange]) -> Found:
    """decisions-dialect's cassette: OpenAI's body, SGLang's, System One's, each once."""
    told, found = [], None
    for (_, dialect), exchange in zip(DECISIONS_BODIES, exchanges, strict=False):
        told.append(_told(dialect, exchange))
        if found is None and exchange.status == 200 and answered_as(dialect, exchange.json()):
            found = dialect
    return Found(found, tuple(told))


#: What each of systemone-dialect's bodies is, in the order it sends them.
SYSTEMONE_BODIES = (
    "TypeSafe's body",
    "Ollama's keep_alive and a score of 12 levels",
    "a choice of 27 options",
)


def systemone_dialect(exchanges: Sequence[Exchange]) -> Found:
    """systemone-dialect's cassette: TypeSafe's body; with Ollama's keep_alive and a score of twelve
    levels (Ollama's scores take 2 to 26 levels, TypeSafe's 2 to 10); a choice of 27 options (TypeSafe's
    take 2 to 255, Ollama's 26). Ollama's dialect takes the second and refuses the third; anything else
    that answers the first speaks TypeSafe's, a lenient server taking the second included."""
    told = tuple(_told(name, e) for name, e in zip(SYSTEMONE_BODIES, exchanges, strict=False))
    if len(exchanges) < 3 or exchanges[0].status != 200 or not answered_as(TYPESAFE, exchanges[0].json()):
        return Found(None, told)
    extras = exchanges[1].status == 200 and answered_as(OLLAMA, exchanges[1].json())
    capped = 400 <= exchanges[2].status < 500
    return Found(OLLAMA if extras and capped else TYPESAFE, told)


def found_in(surface: str, exchanges: Sequence[Exchange]) -> Found:
    return decisions_dialect(exchanges) if surface == decisions.SURFACE else systemone_dialect(exchanges)


def _within_ollama(body: Any) -> bool:
    """A System One request Ollama's dialect takes: a state, and questions within its limits."""
    if not isinstance(body, Mapping) or "state" not in body:
        return False
    questions = body.get("questions")
    if not isinstance(questions, Mapping) or not questions:
        return False
    for question in questions.values():
        kind = question.get("type") if isinstance(question, Mapping) else None
        criteria = question.get("criteria") if isinstance(question, Mapping) else None
        if kind == "noul":
            continue
        low, high = OLLAMA_OPTIONS if kind == "choice" else OLLAMA_LEVELS
        if kind not in ("choice", "score") or not isinstance(criteria, Mapping | list):
            return False
        if not low <= len(criteria) <= high:
            return False
    return True


def reading(dialect: str | None, probe: Probe, last: Exchange) -> Reading | None:
    """How the dialect reads a probe's last exchange where its own rules differ from the body the probe
    is written in: "another shape" (a 4xx to a body the server does not speak), "refused in the dialect"
    (a body that is no JSON refused, in the dialect's envelope, not OpenAI's), "valid in the dialect" (a
    request the probe calls invalid that the dialect takes), or None (read as written)."""
    if dialect is None or probe.id in PROBES.values() or dialect == NATIVE.get(probe.surface):
        return None
    refused = 400 <= last.status < 500 and last.status != 404
    if dialect in (SGLANG, SYSTEM_ONE) and refused:
        # A body that is no JSON is no shape: refused, as it should be, in the dialect's own envelope.
        return "refused in the dialect" if probe.raw_body is not None else "another shape"
    if dialect == OLLAMA and probe.classifier == "systemone_invalid" and _within_ollama(last.request_body):
        return "valid in the dialect"
    return None
