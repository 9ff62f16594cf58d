"""OpenAI's Decisions request, validated as the ``openai`` SDK's types say, and mapped onto jevper's
questions and state: the one place that says what a Decisions request may be, for the client's
``decisions.create`` and the gateway's ``POST /v1/decisions`` alike.

``predicate`` becomes a ``Noul``, ``choice`` a ``Choice`` (its values typed: a string and a boolean with the
same text are two values, spelled apart for the model), ``score`` a ``Score`` whose levels read "label:
description". ``input`` (text, or messages, function and custom tool calls and their outputs) becomes the
state: a chat list whose system and developer messages lead, each call and output a turn holding it as
JSON text. A refusal is an ``InvalidDecisionError``: ``param`` names the field as OpenAI's errors do
(``questions[3].choices``), ``code`` says what is wrong, and ``to_api()`` is OpenAI's error envelope.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from jevper._errors import InvalidQuestionError
from jevper._prompt import MAX_CACHE_KEY
from jevper.decisions import input as _input
from jevper.decisions.checks import (
    Path,
    checked_text,
    invalid,
    obj,
    one_of,
    only,
    required,
    seq,
    string,
)
from jevper.questions import Choice, Noul, Question, Score

__all__ = ["DecisionQuestion", "DecisionRequest", "decision_request"]

DecisionType = Literal["predicate", "choice", "score"]
MIN_QUESTIONS, MAX_QUESTIONS = 1, 400


@dataclass(frozen=True)
class DecisionQuestion:
    """One question as the request asked it (``body``, normalized) and as jevper asks it (``question``).

    ``values`` are a choice's values in order, each spelled as ``question``'s option at the same position;
    ``labels`` a score's level labels."""

    name: str | None
    type: DecisionType
    question: Question
    body: Mapping[str, Any]
    values: tuple[str | bool, ...] = ()
    labels: tuple[str, ...] = ()


@dataclass(frozen=True)
class DecisionRequest:
    """A Decisions request that follows the schema, normalized (plain JSON copies, nothing left unchecked).

    ``input`` holds the caller's instructions, when given, as a leading developer message; ``images`` the
    paths of the image parts, which a surface that reads none refuses (``state``)."""

    model: str
    questions: tuple[DecisionQuestion, ...]
    input: str | tuple[Mapping[str, Any], ...]
    images: tuple[Path, ...] = ()
    prompt_cache_key: str | None = None
    prompt_cache_options: Mapping[str, Any] | None = None
    safety_identifier: str | None = None

    def body(self) -> dict[str, Any]:
        """The request in OpenAI's shape, as POST /v1/decisions takes it; fields not given are left out."""
        body: dict[str, Any] = {
            "model": self.model,
            "input": self.input if isinstance(self.input, str) else [dict(item) for item in self.input],
            "questions": [dict(q.body) for q in self.questions],
        }
        for name in ("prompt_cache_key", "prompt_cache_options", "safety_identifier"):
            value = getattr(self, name)
            if value is not None:
                body[name] = value
        return body

    def state(self, surface: str) -> str | list[dict[str, str]]:
        """The input as the state jevper asks about on ``surface``, which reads text alone: the text, or
        a chat list of {role, content} turns. An image anywhere in the request is refused here, before
        any request, naming the part."""
        if self.images:
            raise invalid(
                self.images[0],
                "unsupported_value",
                f"expected text and JSON parts, because the {surface} surface reads no images, got an "
                f"input_image ({len(self.images)} image part(s) in the request); drop the image, or ask a "
                "server that answers POST /v1/decisions itself with api='decisions'",
            )
        if isinstance(self.input, str):
            return self.input
        turns = [_input.turn(item) for item in self.input]
        if all(turn["role"] in ("system", "developer") for turn in turns):
            raise invalid(
                ("input",),
                "invalid_value",
                "expected at least one user or assistant message, call or output to decide about, got "
                "only system and developer messages",
            )
        return turns


def decision_request(body: Mapping[str, Any], *, instructions: object = None) -> DecisionRequest:
    """The request ``body`` (OpenAI's ``DecisionCreateParams``) checked and normalized, or the
    ``InvalidDecisionError`` of its first problem. ``instructions`` (text or input_text parts, this
    client's addition) lead the input as a developer message."""
    if not isinstance(body, Mapping):
        raise invalid((), "invalid_type", f"expected a JSON object, got {type(body).__name__}")
    only(
        (),
        body,
        ("input", "model", "questions", "prompt_cache_key", "prompt_cache_options", "safety_identifier"),
    )
    model = string(("model",), required((), body, "model"), nonempty=True)
    images: list[Path] = []
    given_input = _input.input_items(required((), body, "input"), images)
    if instructions is not None:
        developer = {"role": "developer", "content": instructions}
        lead = _input.message(("instructions",), developer, images)
        rest = [{"type": "message", "role": "user", "content": given_input}]
        given_input = (lead, *(rest if isinstance(given_input, str) else given_input))
    questions = _questions(required((), body, "questions"), images)
    cache_key = _cache_key(body.get("prompt_cache_key"))
    return DecisionRequest(
        model=model,
        questions=questions,
        input=given_input,
        images=tuple(images),
        prompt_cache_key=cache_key,
        prompt_cache_options=_cache_options(body.get("prompt_cache_options")),
        safety_identifier=_optional_string(body, "safety_identifier"),
    )


def _questions(value: object, images: list[Path]) -> tuple[DecisionQuestion, ...]:
    items = seq(("questions",), value, "questions")
    if len(items) < MIN_QUESTIONS:
        raise invalid(
            ("questions",), "empty_array", "expected 1 to 400 questions, got none; ask at least one"
        )
    if len(items) > MAX_QUESTIONS:
        raise invalid(
            ("questions",),
            "array_above_max_length",
            f"expected 1 to {MAX_QUESTIONS} questions, got {len(items)}; split them over several requests",
        )
    return tuple(_question(("questions", i), item, images) for i, item in enumerate(items))


def _question(at: Path, value: object, images: list[Path]) -> DecisionQuestion:
    item = obj(at, value)
    kind = required(at, item, "type")
    if kind not in _BUILDERS:
        raise invalid(
            (*at, "type"),
            "invalid_value",
            f"expected 'predicate', 'choice' or 'score', got {kind!r:.80}",
        )
    fields = _QUESTION_FIELDS[kind]
    only(at, item, ("type", "name", "instructions", *fields))
    name = item.get("name")
    if name is not None:
        name = string((*at, "name"), name)
    body: dict[str, Any] = {"type": kind}
    if name is not None:
        body["name"] = name
    instructions, body["instructions"] = _instructions(
        (*at, "instructions"), required(at, item, "instructions"), images
    )
    return _BUILDERS[kind](at, item, name, instructions, body)


def _predicate(
    at: Path, item: Mapping[str, Any], name: str | None, text: str, body: dict[str, Any]
) -> DecisionQuestion:
    return DecisionQuestion(name, "predicate", _built(at, lambda: Noul(instructions=text)), body)


@dataclass(frozen=True)
class _Size:
    """How many items a question's list takes, and what a refusal says when it holds too few or many."""

    least: int
    most: int
    named: str
    too_few: str
    too_many: str

    def check(self, where: Path, items: Sequence[Any]) -> None:
        if not self.least <= len(items) <= self.most:
            few = len(items) < self.least
            raise invalid(
                where,
                "array_below_min_length" if few else "array_above_max_length",
                f"expected {self.least} to {self.most} {self.named}, got {len(items)}; "
                + (self.too_few if few else self.too_many),
            )


_CHOICES = _Size(
    Choice.MIN_OPTIONS,
    Choice.MAX_OPTIONS,
    "choices",
    too_few="name every value the answer may take",
    too_many="split the question",
)
_LEVELS = _Size(
    Score.MIN_LEVELS,
    Score.MAX_LEVELS,
    "levels (lowest first)",
    too_few="name every level",
    too_many="merge levels",
)


def _choice(
    at: Path, item: Mapping[str, Any], name: str | None, text: str, body: dict[str, Any]
) -> DecisionQuestion:
    where = (*at, "choices")
    choices = seq(where, required(at, item, "choices"), "choices")
    _CHOICES.check(where, choices)
    values: list[str | bool] = []
    described: list[str | None] = []
    seen: dict[tuple[bool, str | bool], int] = {}
    listed = []
    for j, choice in enumerate(choices):
        there = (*where, j)
        entry = obj(there, choice)
        only(there, entry, ("value", "description"))
        value = required(there, entry, "value")
        if not isinstance(value, str | bool) or (isinstance(value, str) and not value.strip()):
            raise invalid(
                (*there, "value"),
                "invalid_type" if not isinstance(value, str) else "invalid_value",
                f"expected a non-empty string or a boolean, got {value!r:.80}",
            )
        key = (isinstance(value, bool), value)
        if key in seen:
            raise invalid(
                (*there, "value"),
                "invalid_value",
                f"expected each value once, got {value!r:.80} again (first at choices[{seen[key]}]); "
                "a string and a boolean with the same text are distinct, the same value twice is not",
            )
        seen[key] = j
        description = _description(there, entry)
        values.append(checked_text((*there, "value"), value) if isinstance(value, str) else value)
        described.append(description)
        listed.append({"value": value, **({} if description is None else {"description": description})})
    body["choices"] = listed
    options = _spelled(values)
    question = _built(at, lambda: Choice(dict(zip(options, described, strict=True)), instructions=text))
    return DecisionQuestion(name, "choice", question, body, values=tuple(values))


def _score(
    at: Path, item: Mapping[str, Any], name: str | None, text: str, body: dict[str, Any]
) -> DecisionQuestion:
    where = (*at, "levels")
    levels = seq(where, required(at, item, "levels"), "levels")
    _LEVELS.check(where, levels)
    labels: list[str] = []
    shown: list[str] = []
    listed = []
    for j, level in enumerate(levels):
        there = (*where, j)
        entry = obj(there, level)
        only(there, entry, ("label", "description"))
        label = string((*there, "label"), required(there, entry, "label"), nonempty=True)
        description = _description(there, entry)
        labels.append(label)
        shown.append(label if description is None else f"{label}: {description}")
        listed.append({"label": label, **({} if description is None else {"description": description})})
    body["levels"] = listed
    question = _built(at, lambda: Score(shown, instructions=text))
    return DecisionQuestion(name, "score", question, body, labels=tuple(labels))


_Builder = Callable[[Path, Mapping[str, Any], "str | None", str, dict[str, Any]], DecisionQuestion]
_BUILDERS: dict[object, _Builder] = {"predicate": _predicate, "choice": _choice, "score": _score}
_QUESTION_FIELDS: dict[object, tuple[str, ...]] = {
    "predicate": (),
    "choice": ("choices",),
    "score": ("levels",),
}


def _description(at: Path, entry: Mapping[str, Any]) -> str | None:
    """A choice's or a level's description: absent, or text that says something (an empty one would
    show the model an option with nothing after it)."""
    description = entry.get("description")
    return None if description is None else string((*at, "description"), description, nonempty=True)


def _spelled(values: Sequence[str | bool]) -> list[str]:
    """How the model reads each value: a string as it is, a boolean as JSON spells it, unless a string of
    the question already reads so (then "true (boolean)", and so on until the spelling is free)."""
    taken = {value for value in values if isinstance(value, str)}
    spelled = []
    for value in values:
        if isinstance(value, str):
            spelled.append(value)
            continue
        word, suffix = json.dumps(value), 0
        candidate = word
        while candidate in taken:
            suffix += 1
            candidate = f"{word} (boolean)" if suffix == 1 else f"{word} (boolean {suffix})"
        spelled.append(candidate)
    return spelled


def _built(at: Path, make: Callable[[], Question]) -> Question:
    """A question built by jevper's own rules; a refusal there (text that cannot be sent) is located, down
    to the instructions when they are what it names."""
    try:
        return make()
    except InvalidQuestionError as error:
        where = (*at, "instructions") if error.loc[:1] == ("instructions",) else at
        raise invalid(where, "invalid_value", error.problem) from None


def _instructions(at: Path, value: object, images: list[Path]) -> tuple[str, Any]:
    """A question's instructions as the model reads them, and as the request gave them."""
    if isinstance(value, str):
        return string(at, value, nonempty=True), value
    parts = seq(at, value, "instructions")
    if not parts:
        raise invalid(at, "empty_array", "expected text or at least one part, got an empty list")
    allowed = _input.QUESTION_PARTS
    checked = [_input.content_part((*at, i), part, allowed, images) for i, part in enumerate(parts)]
    return "\n".join(text for text, _ in checked), [body for _, body in checked]


def _cache_options(value: object) -> Mapping[str, Any] | None:
    if value is None:
        return None
    at: Path = ("prompt_cache_options",)
    entry = obj(at, value)
    only(at, entry, ("mode", "ttl"))
    checked: dict[str, Any] = {}
    if entry.get("mode") is not None:
        checked["mode"] = one_of((*at, "mode"), entry["mode"], ("implicit", "explicit"))
    if "ttl" in entry:
        checked["ttl"] = one_of((*at, "ttl"), entry["ttl"], ("30m",))
    return checked


def _cache_key(value: object) -> str | None:
    """The request's prompt_cache_key, which the client also sends as its own: within the client's
    limit for one (``_prompt.MAX_CACHE_KEY``), so it is refused here, naming the param, and never later."""
    if value is None:
        return None
    at: Path = ("prompt_cache_key",)
    key = string(at, value, nonempty=True)
    if len(key) > MAX_CACHE_KEY:
        raise invalid(
            at,
            "string_above_max_length",
            f"expected at most {MAX_CACHE_KEY} characters, got {len(key)}; shorten it, or leave it unset "
            "for the key the client derives",
        )
    return key


def _optional_string(body: Mapping[str, Any], name: str) -> str | None:
    value = body.get(name)
    return None if value is None else string((name,), value)
