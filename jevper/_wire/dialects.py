"""The dialects of the decision routes: a path does not say which body it speaks (../shared/decisions.md,
"Dialects"). ``POST /v1/decisions`` speaks OpenAI's shape, SGLang's own body, or System One's shape;
``POST /v1/systemone`` TypeSafe's or Ollama's. Here: each dialect's name and limits, SGLang's body built
from OpenAI's request and its answer read back into OpenAI's shape, and which shape a 200 body has.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from jevper._errors import ClientCapabilityError
from jevper._wire._read import is_mapping

OPENAI: Final = "OpenAI's"
SGLANG: Final = "SGLang's"
SYSTEM_ONE: Final = "System One's"
TYPESAFE: Final = "TypeSafe's"
OLLAMA: Final = "Ollama's"
#: What POST /v1/decisions may speak, in the order the client tries them (its own request's shape first).
DECISIONS_DIALECTS: Final = (OPENAI, SGLANG, SYSTEM_ONE)
#: The levels a score may have on each dialect, where it is not the question's own 26: TypeSafe's System
#: One (and System One's shape wherever it is served) 10, SGLang's 10 (docs.sglang.io); Ollama's 26.
MAX_LEVELS: Final[Mapping[str, int]] = {TYPESAFE: 10, SYSTEM_ONE: 10, SGLANG: 10, OLLAMA: 26, OPENAI: 26}
#: The options a choice may have on SGLang's /v1/decisions and Ollama's /v1/systemone.
SGLANG_OPTIONS: Final = (2, 26)
OLLAMA_OPTIONS: Final = (2, 26)
#: The largest body Ollama's /v1/systemone reads, in bytes (docs.ollama.com/api/systemone: 64 KiB).
OLLAMA_MAX_BODY: Final = 64 * 1024
#: Ollama's model information route and the capability that marks a decision model there, the one place
#: Ollama documents it (docs.ollama.com/api/systemone; no source shows its GET /v1/models marking one).
OLLAMA_SHOW: Final = "/api/show"
OLLAMA_CAPABILITY: Final = "decision"
_SGLANG_TYPES: Final = {"predicate": "yes_no", "choice": "choice", "score": "score"}


def _cannot(what: str, do: str) -> ClientCapabilityError:
    return ClientCapabilityError(
        f"the server speaks {SGLANG} body on POST /v1/decisions, which cannot carry {what}; {do}"
    )


def sglang_body(request: Mapping[str, Any], extra_body: Mapping[str, Any]) -> dict[str, Any]:
    """OpenAI's Decisions request (as validated) in SGLang's body: ``input`` and ``questions: [{id, type:
    choice|score|yes_no, question, options: [{name, description}] | levels}]``, the ids ``q0``, ``q1``...
    What SGLang's body cannot carry (a non-text instruction, a boolean value, more options or levels than
    it takes) is a ClientCapabilityError naming the dialect, before sending."""
    questions = []
    for i, question in enumerate(request["questions"]):
        kind = question["type"]
        text = question.get("instructions")
        if not isinstance(text, str):
            raise _cannot(f"questions[{i}].instructions as parts", "give the instructions as one text")
        asked: dict[str, Any] = {"id": f"q{i}", "type": _SGLANG_TYPES[kind], "question": text}
        if kind == "choice":
            choices = question["choices"]
            if any(not isinstance(c["value"], str) for c in choices):
                raise _cannot(f"questions[{i}]: a boolean value", "spell each value as a string")
            low, high = SGLANG_OPTIONS
            if not low <= len(choices) <= high:
                raise _cannot(
                    f"questions[{i}]: {len(choices)} choices (it takes {low} to {high})",
                    "split the question, or ask with api='auto'",
                )
            asked["options"] = [_named(c["value"], c.get("description")) for c in choices]
        elif kind == "score":
            levels = question["levels"]
            if len(levels) > MAX_LEVELS[SGLANG]:
                raise _cannot(
                    f"questions[{i}]: {len(levels)} levels (it takes 2 to {MAX_LEVELS[SGLANG]})",
                    "merge levels, or ask with api='auto'",
                )
            asked["levels"] = [_named(level["label"], level.get("description")) for level in levels]
        questions.append(asked)
    body: dict[str, Any] = {"model": request["model"], "input": request["input"], "questions": questions}
    body.update(extra_body)
    return body


def _named(name: str, description: object) -> dict[str, Any]:
    return {"name": name, **({} if description is None else {"description": description})}


def answered_as(dialect: str, body: object) -> bool:
    """Does a 200's body have the shape of the dialect's answer (SGLang's: ``object: "decisions"`` and a
    list of answers; System One's: answers by question id)?"""
    if not is_mapping(body):
        return False
    answers = body.get("answers")
    if dialect == SGLANG:
        return body.get("object") == "decisions" and isinstance(answers, list)
    if dialect == SYSTEM_ONE:
        return is_mapping(answers)
    return isinstance(answers, list) and body.get("object") != "decisions"


def sglang_answers(body: Mapping[str, Any], request: Mapping[str, Any]) -> dict[str, Any]:
    """SGLang's answer read into OpenAI's Decision shape, each answer found by its id, so OpenAI's rules
    (jevper._wire.decisions.read) then hold it: a question without its answer, or an answer that does
    not fit, is named there."""
    given = {a.get("id"): a for a in body.get("answers") or () if is_mapping(a)}
    answers = [_openai(question, given.get(f"q{i}")) for i, question in enumerate(request["questions"])]
    given_usage = body.get("usage")
    usage: Mapping[str, Any] = given_usage if is_mapping(given_usage) else {}
    prompt = usage.get("prompt_tokens", 0)
    output = usage.get("completion_tokens", 0)
    return {
        "object": "decision",
        "model": body.get("model") or request["model"],
        "answers": answers,
        "usage": {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": output,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + output
            if isinstance(prompt, int) and isinstance(output, int)
            else prompt,
        },
    }


def _openai(question: Mapping[str, Any], answer: Mapping[str, Any] | None) -> Any:
    if answer is None:
        return None
    kind = question["type"]
    named = {"name": question["name"]} if "name" in question else {}
    if kind == "predicate":
        return {"type": kind, **named, "probability": answer.get("probability")}
    shares = answer.get("probabilities")
    shares = shares if is_mapping(shares) else {}
    if kind == "choice":
        values = [c["value"] for c in question["choices"]]
        return {
            "type": kind,
            **named,
            "choice": answer.get("choice"),
            "confidence": answer.get("confidence"),
            "probabilities": [{"value": v, "probability": shares.get(v)} for v in values],
        }
    labels = [level["label"] for level in question["levels"]]
    return {
        "type": kind,
        **named,
        "score": answer.get("score"),
        "confidence": answer.get("confidence"),
        "probabilities": [
            {"value": i, "label": label, "probability": shares.get(label)} for i, label in enumerate(labels)
        ],
    }


def ollama_decision_model(body: object) -> bool:
    """Does POST /api/show's body list ``"decision"`` among the model's capabilities?"""
    capabilities = body.get("capabilities") if is_mapping(body) else None
    return isinstance(capabilities, list) and OLLAMA_CAPABILITY in capabilities
