"""The prompts the probes send: a labelled classification question over a short state, and variants.

The long prompt is laid out as examples, then the question, then the state, so that two requests
differing only in the state share everything before it — which is what the caching probes measure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from jevper._wire import prompt_record

SYSTEM = "You classify customer messages. Reply with the letter of exactly one option and nothing else."
LABELS = ("A", "B", "C")
#: The standard question's options, in the order the labels take them.
OPTIONS = (
    ("billing", "money, invoices, refunds, charges"),
    ("technical", "errors, crashes, login or performance problems"),
    ("sales", "pricing, plans, purchasing, upgrades"),
)


def rotated_options(turn: int) -> tuple[str, ...]:
    """The options' names in label order after rotating them `turn` places (0: the standard order)."""
    names = [name for name, _ in OPTIONS]
    return tuple(names[turn:] + names[:turn])


def _question(turn: int = 0) -> str:
    described = dict(OPTIONS)
    lines = [
        f"{label}: {name} ({described[name]})"
        for label, name in zip(LABELS, rotated_options(turn), strict=True)
    ]
    return "\n".join(["Question: what is the customer's intent?", *lines])


QUESTION = _question()
STATE = "I was charged twice for the same subscription this month."
VARIED_STATE = "The app crashes every time I open the settings page on my phone."
#: The prompt layouts that ask the standard question with its options rotated, by how many places.
ROTATIONS: Mapping[str, int] = {"standard": 0, "rotated-1": 1, "rotated-2": 2}

_SUBJECTS = (
    "my team account",
    "the family plan",
    "our office subscription",
    "the annual licence",
    "my student membership",
    "the shared workspace",
    "our small shop's account",
    "the trial I started last week",
    "my partner's profile",
    "the reseller account",
    "our school district plan",
    "my old archive account",
    "the nonprofit discount plan",
    "the mobile-only tier",
    "our agency's seat bundle",
)
_TEMPLATES = (
    (
        "A",
        "Hello, I looked at the invoice for {s} and there is a charge I do not recognise from the "
        "fourteenth; could you explain it and refund it if it was a mistake?",
    ),
    (
        "B",
        "Since yesterday {s} will not let me sign in: the page spins for a minute and then shows an "
        "error code that the help centre does not mention anywhere.",
    ),
    (
        "C",
        "We are thinking about moving {s} to a bigger plan next quarter; what would the price be for "
        "twenty more seats, and is there a discount for paying yearly?",
    ),
)


def long_examples() -> str:
    """Forty-five worked examples, about 2,000 tokens, always the same text."""
    lines = ["Here are examples of messages and the answer each one should get.", ""]
    for subject in _SUBJECTS:
        for label, template in _TEMPLATES:
            lines += [f"Message: {template.format(s=subject)}", f"Answer: {label}", ""]
    return "\n".join(lines)


def _user(state: str, *, examples: bool = False, turn: int = 0) -> str:
    head = f"{long_examples()}\n" if examples else ""
    return f"{head}{_question(turn)}\n\nState: {state}\n\nAnswer with A, B or C."


#: A prompt layout: an ordered list of (role, text) turns. A `system` turn first goes into the
#: Messages API's top-level `system` field unless the layout keeps it inline.
Turns = tuple[tuple[str, str], ...]

_LAYOUTS: Mapping[str, Callable[[], Turns]] = {
    "standard": lambda: (("system", SYSTEM), ("user", _user(STATE))),
    "long": lambda: (("system", SYSTEM), ("user", _user(STATE, examples=True))),
    "long-state-varied": lambda: (("system", SYSTEM), ("user", _user(VARIED_STATE, examples=True))),
    "explain": lambda: (
        ("system", "You answer questions in plain, complete sentences."),
        ("user", "In two or three sentences, explain why the sky looks blue during the day."),
    ),
    "one-sentence": lambda: (
        ("system", "You answer questions in plain, complete sentences."),
        (
            "user",
            "In one sentence of about twenty-five words, explain why the sky looks blue during the day.",
        ),
    ),
    "canary": lambda: (
        ("system", "You answer with one JSON object."),
        ("user", "Name one colour and one fruit."),
    ),
    "developer": lambda: (("developer", SYSTEM), ("user", _user(STATE))),
    "system-after-user": lambda: (
        ("system", SYSTEM),
        ("user", _user(STATE)),
        ("system", "Remember: one letter only."),
    ),
    "system-turn": lambda: (("system", SYSTEM), ("user", _user(STATE))),
    "input-text-parts": lambda: (("system", SYSTEM), ("user", _user(STATE))),
    "rotated-1": lambda: (("system", SYSTEM), ("user", _user(STATE, turn=1))),
    "rotated-2": lambda: (("system", SYSTEM), ("user", _user(STATE, turn=2))),
}

#: The System One probes' bodies: a state and the questions, in the API's own shape.
_S1_STANDARD: dict[str, Any] = {
    "topic": {
        "type": "choice",
        "instructions": "What is the customer's message about?",
        "criteria": {
            "billing": "money, invoices, refunds, charges",
            "shipping": "delivery, tracking, lost parcels",
            "technical": "errors, crashes, login or performance problems",
        },
    },
    "refund": {"type": "noul", "instructions": "Does the customer want money back?"},
    "urgency": {
        "type": "score",
        "instructions": "How urgent is this?",
        "criteria": ["can wait", "this week", "today"],
    },
}


def _s1(questions: Mapping[str, Any], state: Any = STATE) -> Callable[[], dict[str, Any]]:
    return lambda: {"state": state, "questions": dict(questions)}


def _levels(n: int) -> list[str]:
    return [f"level {i}" for i in range(n)]


_BODIES: Mapping[str, Callable[[], dict[str, Any]]] = {
    "s1-standard": _s1(_S1_STANDARD),
    "s1-json-state": _s1(_S1_STANDARD, {"customer": "Ann", "channel": "email", "message": STATE}),
    "s1-noul-criteria": _s1(
        {
            "angry": {
                "type": "noul",
                "instructions": "Is the customer angry?",
                "criteria": {"true": "the customer is angry", "false": "the customer is calm"},
            }
        }
    ),
    "s1-null-descriptions": _s1(
        {
            "topic": {
                "type": "choice",
                "instructions": "Which team?",
                "criteria": {"billing": None, "shipping": None},
            }
        }
    ),
    "s1-no-questions": _s1({}),
    "s1-unknown-type": _s1({"q": {"type": "rank", "instructions": "Rank it.", "criteria": ["a", "b"]}}),
    "s1-choice-no-options": _s1({"q": {"type": "choice", "instructions": "Which?", "criteria": {}}}),
    "s1-choice-256-options": _s1(
        {
            "q": {
                "type": "choice",
                "instructions": "Which?",
                "criteria": {f"option {i}": None for i in range(256)},
            }
        }
    ),
    "s1-score-one-level": _s1({"q": {"type": "score", "instructions": "How much?", "criteria": _levels(1)}}),
    "s1-score-eleven-levels": _s1(
        {"q": {"type": "score", "instructions": "How much?", "criteria": _levels(11)}}
    ),
    # The standard questions under other ids, with one more, and in another order: the same answers.
    "s1-renamed": _s1(dict(zip(("q1", "q2", "q3"), _S1_STANDARD.values(), strict=True))),
    "s1-added": _s1({**_S1_STANDARD, "angry": {"type": "noul", "instructions": "Is the customer angry?"}}),
    "s1-reordered": _s1({k: _S1_STANDARD[k] for k in ("urgency", "topic", "refund")}),
    # Ollama's dialect (docs.ollama.com/api/systemone): keep_alive, and a score of twelve levels
    # (Ollama's scores take 2 to 26, TypeSafe's 2 to 10).
    "s1-ollama": lambda: {
        "state": STATE,
        "questions": {
            **_S1_STANDARD,
            "urgency": {"type": "score", "instructions": "How urgent is this?", "criteria": _levels(12)},
        },
        "keep_alive": "5m",
    },
    # A choice of 27 options: within TypeSafe's 2 to 255, past Ollama's 26.
    "s1-27-options": _s1(
        {
            "q": {
                "type": "choice",
                "instructions": "Which?",
                "criteria": {f"option {i}": None for i in range(27)},
            }
        }
    ),
}

#: The Decisions probes' bodies (OpenAI's POST /v1/decisions): an input and a list of questions, written
#: from the openai SDK's types (openai/types/decision_create_params.py).
_D_REFUND: dict[str, Any] = {
    "type": "predicate",
    "name": "refund",
    "instructions": "The customer wants their money back.",
}
_D_TOPIC: dict[str, Any] = {
    "type": "choice",
    "name": "topic",
    "instructions": "What is the customer's message about?",
    "choices": [
        {"value": "billing", "description": "money, invoices, refunds, charges"},
        {"value": "shipping", "description": "delivery, tracking, lost parcels"},
        {"value": "technical", "description": "errors, crashes, login or performance problems"},
    ],
}
_D_ANGRY: dict[str, Any] = {
    "type": "choice",
    "name": "angry",
    "instructions": "Is the customer angry?",
    "choices": [
        {"value": True, "description": "the customer is angry"},
        {"value": False, "description": "the customer is calm"},
    ],
}
_D_URGENCY: dict[str, Any] = {
    "type": "score",
    "name": "urgency",
    "instructions": "How urgent is this?",
    "levels": [
        {"label": "low", "description": "it can wait"},
        {"label": "medium", "description": "this week"},
        {"label": "high", "description": "today"},
    ],
}
_D_STANDARD = (_D_REFUND, _D_TOPIC, _D_URGENCY)
#: A 2x2 red PNG, as the data URL an input_image part takes.
RED_PNG = (
    "data:image/png;base64,"
    "iVBORw0KGgoAAAANSUhEUgAAAAIAAAACCAIAAAD91JpzAAAAEElEQVR42mP4z8AARAwQCgAf7gP9Y167WwAAAABJRU5ErkJggg=="
)


def _d(questions: Any, input: Any = STATE) -> Callable[[], dict[str, Any]]:
    return lambda: {"input": input, "questions": [dict(q) for q in questions]}


def _unnamed(question: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in question.items() if k != "name"}


def _predicates(n: int) -> list[dict[str, Any]]:
    return [
        {"type": "predicate", "name": f"q{i}", "instructions": f"The message mentions the number {i}."}
        for i in range(n)
    ]


def _one_choice(values: list[Any]) -> list[dict[str, Any]]:
    return [{"type": "choice", "instructions": "Which team?", "choices": [{"value": v} for v in values]}]


def _user_parts(*parts: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [{"role": "user", "content": [dict(part) for part in parts]}]


_D_BODIES: Mapping[str, Callable[[], dict[str, Any]]] = {
    "d-standard": _d(_D_STANDARD),
    "d-predicate": _d([_D_REFUND]),
    "d-choice-strings": _d([_D_TOPIC]),
    "d-choice-booleans": _d([_D_ANGRY]),
    "d-score-levels": _d([_D_URGENCY]),
    "d-named-and-unnamed": _d([_D_REFUND, _unnamed(_D_TOPIC), _unnamed(_D_ANGRY), _D_URGENCY]),
    "d-input-messages": _d(
        _D_STANDARD,
        [
            {"role": "system", "content": "You triage the messages customers send to a support desk."},
            {"role": "developer", "content": "Judge from the customer's own words only."},
            {"role": "user", "content": STATE},
            {"role": "assistant", "content": "I am sorry to hear that. Which card was charged?"},
            {"role": "user", "content": "The one ending in 4242. Please fix it today."},
        ],
    ),
    "d-input-json-part": _d(
        _D_STANDARD,
        _user_parts(
            {"type": "input_text", "text": "The customer's message, as the ticket system holds it:"},
            {"type": "input_json", "data": {"customer": "Ann", "channel": "email", "message": STATE}},
        ),
    ),
    "d-input-image-part": _d(
        _D_STANDARD,
        _user_parts(
            {"type": "input_text", "text": f"{STATE} Here is a photo of my bank statement."},
            {"type": "input_image", "image_url": RED_PNG},
        ),
    ),
    "d-400-questions": _d(_predicates(400)),
    "d-401-questions": _d(_predicates(401)),
    "d-no-questions": _d([]),
    "d-unknown-type": _d(
        [{"type": "rank", "instructions": "Rank them.", "choices": [{"value": "a"}, {"value": "b"}]}]
    ),
    "d-one-option": _d(_one_choice(["billing"])),
    "d-duplicate-values": _d(_one_choice(["billing", "shipping", "billing"])),
    "d-256-options": _d(_one_choice([f"option {i}" for i in range(256)])),
    # The standard questions under other names, with one more, and in another order: the same answers.
    "d-renamed": _d([{**q, "name": f"q{i}"} for i, q in enumerate(_D_STANDARD, 1)]),
    "d-added": _d([*_D_STANDARD, _D_ANGRY]),
    "d-reordered": _d([_D_URGENCY, _D_REFUND, _D_TOPIC]),
    # SGLang's own body on POST /v1/decisions (docs.sglang.io supported-models/decision_models).
    "d-sglang": lambda: {
        "input": STATE,
        "questions": [
            {"id": "refund", "type": "yes_no", "question": "Does the customer want money back?"},
            {
                "id": "topic",
                "type": "choice",
                "question": "What is the customer's message about?",
                "options": [
                    {"name": c["value"], "description": c["description"]} for c in _D_TOPIC["choices"]
                ],
            },
            {
                "id": "urgency",
                "type": "score",
                "question": "How urgent is this?",
                "levels": [level["label"] for level in _D_URGENCY["levels"]],
            },
        ],
    },
    # System One's body (a state and a questions object) on POST /v1/decisions: Runware, LiteLLM's dev
    # builds, Ollaya.
    "d-systemone": _s1(_S1_STANDARD),
}

PROMPTS = (*_LAYOUTS, *_BODIES, *_D_BODIES)


def prompt_fields(layout: str, surface: str, opening: str | None = None) -> dict[str, Any]:
    """The body fields carrying the prompt on one surface: messages, input, or system + messages.

    `opening` becomes the first line of the first turn, so the whole prompt starts with text no other
    probe sends: a prefix cache then has nothing to reuse from earlier requests.
    """
    if layout in _BODIES or layout in _D_BODIES:
        body = (_BODIES.get(layout) or _D_BODIES[layout])()
        place = "state" if layout in _BODIES else "input"
        if opening is not None and isinstance(body.get(place), str):
            body[place] = f"{opening}\n{body[place]}"
        return body
    if layout not in _LAYOUTS:
        raise KeyError(f"expected a prompt layout among {PROMPTS}, got {layout!r}")
    turns = _LAYOUTS[layout]()
    if opening is not None:
        (role, text), *rest = turns
        turns = ((role, f"{opening}\n{text}"), *rest)
    return prompt_record(surface).conversation(
        turns, system_as_turn=layout == "system-turn", text_parts=layout == "input-text-parts"
    )
