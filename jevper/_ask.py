"""What each method asks for: labels and a grammar, or a strict JSON schema; and the words of the ask.

A label readout (``logprobs``, ``grammar``) labels the options A, B, C… and reads the distribution at
the answer token; ``structured`` asks for a probability per option, ``discrete`` for one option.
"""

from __future__ import annotations

import json
import string
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from jevper._errors import InvalidQuestionError
from jevper._wire import SchemaFormat
from jevper.questions import Choice, Noul, Question, QuestionType, Score, described

Kind = Literal["label", "structured", "discrete"]
LABELS = string.ascii_uppercase
MAX_LABELS = len(LABELS)

_LABEL_SYSTEM = (
    "You answer one question about a state. The question lists options, each with a capital-letter "
    "label. Reply with the label of the option that fits the state best: a single letter, nothing else."
)
_JSON_SYSTEM = (
    "You answer one question about a state. Reply with one JSON object that follows the schema given "
    "with the question, and nothing else."
)


@dataclass(frozen=True)
class Ask:
    """How one question is put to the model under one method."""

    kind: Kind
    question_type: QuestionType
    options: tuple[str, ...]
    labels: tuple[str, ...]  # one per option for a label readout, else ()
    system: str
    question: str
    schema: SchemaFormat | None
    grammar: str | None  # the GBNF restricting the answer to a label


#: The asks made so far, by question identity (the question is kept, so its id is not reused meanwhile):
#: an ask depends on its question alone, and a batch asks the same question once for every row.
_MADE: dict[tuple[int, Kind, bool], tuple[Question, Ask]] = {}
_KEPT = 256


def ask(question: Question, kind: Kind, *, grammar: bool = False) -> Ask:
    key = (id(question), kind, grammar)
    made = _MADE.get(key)
    if made is not None and made[0] is question:
        return made[1]
    fresh = _made(question, kind, grammar)
    if len(_MADE) >= _KEPT:
        _MADE.clear()
    _MADE[key] = (question, fresh)
    return fresh


def _made(question: Question, kind: Kind, grammar: bool) -> Ask:
    options = question.options
    qtype = question.type
    if kind == "label":
        if len(options) > MAX_LABELS:
            raise InvalidQuestionError(
                f"a label readout expected at most {MAX_LABELS} options (one letter each), got "
                f"{len(options)}; ask through a client, which reads a wider choice in rounds of readouts"
            )
        labels = tuple(LABELS[: len(options)])
        return Ask(
            kind,
            qtype,
            options,
            labels,
            _LABEL_SYSTEM,
            _label_question(question, labels),
            None,
            label_grammar(labels) if grammar else None,
        )
    schema = structured_schema(question) if kind == "structured" else discrete_schema(question)
    text = f"{_header(question)}\n\n{_json_instruction(question, kind)}\nJSON schema: {json.dumps(schema)}"
    return Ask(kind, qtype, options, (), _JSON_SYSTEM, text, SchemaFormat("answer", schema), None)


def json_prefill(a: Ask) -> str:
    """The opening of the JSON answer, up to where the model's own judgement starts.

    Structured opens the first option's key, discrete the answer's key (and, for a Choice, the string
    holding the option). It never ends in whitespace: Anthropic's API refuses a prefill that does.
    """
    if a.question_type == "noul":
        return '{"noul":'
    if a.kind == "structured":
        return "{" + json.dumps(a.options[0]) + ":"
    return '{"choice": "' if a.question_type == "choice" else '{"score":'


def answer_budget(a: Ask) -> int:
    """Output tokens enough for the JSON answer with room to spare: its widest spelling at two
    characters a token, plus 32. What a prefilled reply needs: it holds the answer and nothing else."""
    if a.question_type == "noul":
        widest: dict[str, object] = {"noul": 0.123456789 if a.kind == "structured" else False}
    elif a.kind == "structured":
        widest = dict.fromkeys(a.options, 0.123456789)
    else:
        key = "choice" if a.question_type == "choice" else "score"
        widest = {key: max(a.options, key=len) if key == "choice" else len(a.options)}
    return 32 + len(json.dumps(widest, indent=1)) // 2


def label_grammar(labels: tuple[str, ...]) -> str:
    return "root ::= " + " | ".join(f'"{label}"' for label in labels)


def instructions(question: Question) -> str:
    """The question's instructions as the model reads them, or the default for its type."""
    return described(question.instructions) or question.DEFAULT_INSTRUCTIONS


def _option_line(name: str, description: object) -> str:
    text = described(description)
    return name if text is None else f"{name}: {text}"


def _noul_criteria(question: Noul) -> list[str]:
    """What yes and no mean: one line for text criteria, a line per answer for {"true", "false"}."""
    criteria = question.criteria
    if criteria is None:
        return []
    if isinstance(criteria, str):
        return [f"Criteria: {criteria}"]
    meanings = (("Yes", criteria.get("true")), ("No", criteria.get("false")))
    return [f"{answer} means: {described(text)}" for answer, text in meanings if text is not None]


def _header(question: Question) -> str:
    lines = [instructions(question)]
    if isinstance(question, Choice):
        lines.append("Options:")
        lines += [f"- {_option_line(name, description)}" for name, description in question.criteria.items()]
    elif isinstance(question, Noul):
        lines += _noul_criteria(question)
    else:
        lines.append("Levels, lowest first:")
        lines += [f"- {i}: {described(level)}" for i, level in enumerate(question.criteria)]
    return "\n".join(lines)


def _label_question(question: Question, labels: tuple[str, ...]) -> str:
    if isinstance(question, Choice):
        head = instructions(question)
        rows = [
            f"{label}: {name}" + ("" if desc is None else f" — {described(desc)}")
            for label, (name, desc) in zip(labels, question.criteria.items(), strict=True)
        ]
    elif isinstance(question, Noul):
        head = "\n".join([instructions(question), *_noul_criteria(question)])
        rows = ["A: yes", "B: no"]
    else:
        head = instructions(question) + " Levels go from lowest to highest."
        rows = [
            f"{label}: {described(level)}" for label, level in zip(labels, question.criteria, strict=True)
        ]
    spelled = ", ".join(labels[:-1]) + f" or {labels[-1]}" if len(labels) > 1 else labels[0]
    return "\n".join([head, "Options:", *rows, f"Answer with one letter: {spelled}."])


def _json_instruction(question: Question, kind: Kind) -> str:
    # A template with nulls: a model that copies it verbatim produces an answer that fails validation
    # rather than a plausible-looking one.
    if isinstance(question, Noul):
        what = "the probability (0 to 1) that the answer is yes" if kind == "structured" else "true or false"
        return f'Reply with this JSON object, null replaced by {what}:\n{{"noul": null}}'
    if kind == "structured":
        what = "option" if isinstance(question, Choice) else "level"
        template = json.dumps(dict.fromkeys(question.options))
        return (
            f"Reply with this JSON object, each null replaced by the probability (0 to 1) of that {what}:\n"
            f"{template}"
        )
    if isinstance(question, Choice):
        keys = ", ".join(json.dumps(o) for o in question.options)
        return f'Reply with this JSON object, null replaced by one of {keys}:\n{{"choice": null}}'
    levels = ", ".join(question.options)
    return f'Reply with this JSON object, null replaced by the level number ({levels}):\n{{"score": null}}'


def structured_schema(question: Question) -> dict[str, Any]:
    if isinstance(question, Noul):
        return _object({"noul": _probability("the probability of yes")})
    if isinstance(question, Choice):
        return _object({name: _probability(desc) for name, desc in question.criteria.items()})
    return _object({str(i): _probability(level) for i, level in enumerate(question.criteria)})


def discrete_schema(question: Question) -> dict[str, Any]:
    if isinstance(question, Noul):
        return _object({"noul": {"type": "boolean", "description": "true for yes, false for no"}})
    if isinstance(question, Choice):
        return _object({"choice": {"type": "string", "enum": list(question.options)}})
    assert isinstance(question, Score)
    return _object({"score": {"type": "integer", "enum": list(range(len(question.criteria)))}})


def _probability(description: object) -> dict[str, Any]:
    probability: dict[str, Any] = {"type": "number", "minimum": 0, "maximum": 1}
    text = described(description)
    if text is not None:
        probability["description"] = text
    return probability


def _object(properties: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": dict(properties),
        "required": list(properties),
        "additionalProperties": False,
    }


def render_example(question: Question, kind: Kind, answer: object, labels: tuple[str, ...]) -> str:
    """The right answer of an example, spelled the way this method asks the model to answer."""
    options = question.options
    if isinstance(question, Noul):
        if not isinstance(answer, bool):
            raise InvalidQuestionError(f"example answer: expected True or False for a Noul, got {answer!r}")
        index = 0 if answer else 1
    elif isinstance(question, Choice):
        if answer not in question.criteria:
            raise InvalidQuestionError(f"example answer: expected one of {list(options)}, got {answer!r}")
        index = options.index(str(answer))
    else:
        if isinstance(answer, bool) or not isinstance(answer, int) or not 0 <= answer < len(options):
            raise InvalidQuestionError(
                f"example answer: expected a level index from 0 to {len(options) - 1}, got {answer!r}"
            )
        index = answer
    if kind == "label":
        return labels[index]
    if kind == "structured":
        return (
            json.dumps({o: 1.0 if i == index else 0.0 for i, o in enumerate(options)})
            if not isinstance(question, Noul)
            else json.dumps({"noul": 1.0 if index == 0 else 0.0})
        )
    if isinstance(question, Noul):
        return json.dumps({"noul": index == 0})
    if isinstance(question, Choice):
        return json.dumps({"choice": options[index]})
    return json.dumps({"score": index})
