"""Reading an option distribution out of a normalized result: at the answer token, or from JSON.

A result that cannot be read raises ``Unreadable``; the engine decides whether that earns the one
corrective retry, moves the question elsewhere, or becomes the caller's error.
"""

from __future__ import annotations

import json
import math
import re
from typing import Literal

from jevper._ask import Ask
from jevper._errors import IncompleteAnswerError, MalformedAnswerError
from jevper._wire import TokenLogprob, WireResult

Why = Literal["no_distribution", "prose", "no_anchor", "malformed"]
#: Up to this many trailing tokens that cannot be answer text (an end-of-turn marker) are dropped.
MAX_TRAILING_DROPPED = 2
_WORD_MARKERS = str.maketrans({"Ġ": " ", "▁": " "})
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


class Unreadable(Exception):
    def __init__(self, why: Why, message: str) -> None:
        super().__init__(message)
        self.why = why


def incomplete(result: WireResult) -> IncompleteAnswerError:
    field = result.truncated_by or "max_tokens"
    return IncompleteAnswerError(
        f"{result.surface}: expected a complete answer, got one cut off by the output budget "
        f"(the server said {result.finish!r}); raise {field} with extra_body={{{field!r}: ...}}, "
        "or turn thinking off",
        field=field,
        finish=result.finish,
    )


def no_text(result: WireResult) -> MalformedAnswerError:
    seen = ", ".join(result.content_types) or "nothing"
    return MalformedAnswerError(
        f"{result.surface}: expected answer text, got {seen} and no text (stop reason {result.finish!r}); "
        "the server returned no answer — disable thinking for this model, or use another api= surface"
    )


def no_answer(result: WireResult) -> MalformedAnswerError:
    seen = ", ".join(result.content_types) or "an empty output"
    return MalformedAnswerError(
        f"{result.surface}: expected an answer message, got none ({seen}, status {result.finish!r}); "
        "the server returned no answer — ask again, or check the server's log"
    )


def read_labels(result: WireResult, ask: Ask) -> dict[str, float]:
    """The model's own probability of each option's label at the answer token (not rescaled)."""
    if result.choices == 0:
        # No answer at all says nothing about the surface's logprobs: it must not move the readout.
        raise incomplete(result) if result.truncated_by else no_answer(result)
    tokens = result.logprobs
    if not tokens:
        raise Unreadable(
            "no_distribution",
            f"{result.surface}: expected token logprobs, got "
            f"{'no logprob field' if tokens is None else 'an empty logprob list'}",
        )
    text = result.text or ""
    if result.reasoning is not None:
        if result.truncated_by is not None or not text.strip():
            raise incomplete(result) if result.truncated_by else no_text(result)
        index = anchored_index(tokens, text)
        if index is None:
            raise Unreadable(
                "no_anchor",
                f"{result.surface}: expected the token stream to end with the answer text {text[:40]!r}, "
                "got a stream that does not; the answer token cannot be found",
            )
    else:
        index = next((i for i, t in enumerate(tokens) if t.token.strip()), None)
        if index is None:
            raise incomplete(result) if result.truncated_by else no_text(result)
    entry = tokens[index]
    if len(entry.top) < 2:
        raise Unreadable(
            "no_distribution",
            f"{result.surface}: expected at least two alternatives at the answer token, "
            f"got {len(entry.top)}; "
            "fewer than two is not a distribution",
        )
    labels = dict(zip(ask.labels, ask.options, strict=True))
    first = label_of(entry.token)
    if first not in labels:
        listed = sum(label_of(token) in labels for token, _ in entry.top)
        among = (
            f"; none of the {len(entry.top)} alternatives was among the options"
            if not listed
            else f"; {listed} of the {len(entry.top)} alternatives were labels"
        )
        raise Unreadable(
            "prose",
            f"expected the first answer token to be one of the labels {', '.join(ask.labels)}, "
            f"got {entry.token!r} (answer {text[:60]!r}){among}",
        )
    alternatives = list(entry.top)
    if all(token != entry.token for token, _ in alternatives):
        alternatives.append((entry.token, entry.logprob))
    mass: dict[str, list[float]] = {}
    for token, logprob in alternatives:
        label = label_of(token)
        if label in labels:
            mass.setdefault(labels[label], []).append(logprob)
    # Labels absent from the alternatives had less mass than the last one listed: they get none.
    return {option: math.exp(_logsumexp(mass[option])) if option in mass else 0.0 for option in ask.options}


def label_of(token: str) -> str:
    return token.translate(_WORD_MARKERS).strip()


def anchored_index(tokens: tuple[TokenLogprob, ...], text: str) -> int | None:
    """The index of the answer's first token, found by matching the answer text against the stream's
    tail, after dropping at most two trailing tokens that cannot be answer text."""
    target = text.strip()
    for dropped in range(MAX_TRAILING_DROPPED + 1):
        end = len(tokens) - dropped
        if end <= 0:
            return None
        if dropped and not _cannot_be_answer(tokens[end].token, target):
            return None
        tail = ""
        for i in range(end - 1, -1, -1):
            tail = tokens[i].token + tail
            shown = tail.strip()
            if shown == target:
                return i
            if shown and not target.endswith(shown):
                break
    return None


def _cannot_be_answer(token: str, target: str) -> bool:
    stripped = token.strip()
    return not stripped or stripped not in target


def _logsumexp(values: list[float]) -> float:
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values))


def read_json(result: WireResult, ask: Ask, *, opened: bool = False) -> dict[str, float]:
    """The model's own numbers per option from a JSON answer (a one-hot for ``discrete``).

    ``opened``: jevper opened the answer's object itself (a prefill), so the object the text starts
    with is the answer, whole, whatever the model wrote after it, even past the output budget.
    """
    text = (result.text or "").strip()
    value = leading_object(text) if opened else None
    if value is None:
        if result.truncated_by is not None:
            raise incomplete(result)
        if not text:
            raise no_text(result)
        value = json_object(text)
    return _structured(value, ask) if ask.kind == "structured" else _discrete(value, ask)


def leading_object(text: str) -> dict[str, object] | None:
    """The JSON object the text opens with, when it is closed; None otherwise."""
    if not text.startswith("{"):
        return None
    try:
        value, _ = json.JSONDecoder(object_pairs_hook=_unique_keys).raw_decode(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def json_object(text: str) -> dict[str, object]:
    """The one JSON object of an answer: the whole text, a fenced block, or the only object in the text.

    A weak model often says "The answer is: {...}"; the object is the answer and is validated as such,
    but two objects in one reply are ambiguous and read as malformed.
    """
    fenced = _FENCE.match(text)
    candidate = fenced.group(1) if fenced else text
    try:
        value = json.loads(candidate, object_pairs_hook=_unique_keys)
    except ValueError:
        found = _objects_in(candidate)
        if len(found) != 1:
            what = "no JSON object" if not found else f"{len(found)} JSON objects"
            raise Unreadable("malformed", f"expected one JSON object, got {what} in {text[:80]!r}") from None
        value = found[0]
    if not isinstance(value, dict):
        raise Unreadable("malformed", f"expected a JSON object, got {text[:80]!r}")
    return value


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """An object whose keys are distinct; json.loads alone would keep the last of two values silently."""
    value = dict(pairs)
    if len(value) < len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise Unreadable("malformed", f"expected each key once in the JSON answer, got {key!r} twice")
            seen.add(key)
    return value


def _objects_in(text: str) -> list[dict[str, object]]:
    decoder = json.JSONDecoder(object_pairs_hook=_unique_keys)
    found: list[dict[str, object]] = []
    index = text.find("{")
    while index >= 0:
        try:
            value, end = decoder.raw_decode(text, index)
        except ValueError:
            index = text.find("{", index + 1)
            continue
        if isinstance(value, dict):
            found.append(value)
        index = text.find("{", end)
    return found


def _structured(value: dict[str, object], ask: Ask) -> dict[str, float]:
    if ask.question_type == "noul":
        number = _number(value, "noul")
        if not 0.0 <= number <= 1.0:
            raise Unreadable("malformed", f"'noul' must be in [0, 1.0], got {number}")
        return {"yes": number, "no": 1.0 - number}
    expected, arrived = set(ask.options), set(value)
    if expected != arrived:
        missing = sorted(expected - arrived)[:5]
        extra = sorted(arrived - expected)[:5]
        raise Unreadable(
            "malformed", f"expected the keys of every option, got missing {missing}, extra {extra}"
        )
    numbers = {option: _number(value, option) for option in ask.options}
    if any(n < 0 for n in numbers.values()) or sum(numbers.values()) <= 0:
        raise Unreadable(
            "malformed", f"expected non-negative probabilities with a positive sum, got {numbers}"
        )
    return numbers


def _number(value: dict[str, object], key: str) -> float:
    number = value.get(key)
    if isinstance(number, bool) or not isinstance(number, int | float) or not math.isfinite(number):
        raise Unreadable("malformed", f"expected {key!r} to be a number, got {number!r}")
    return float(number)


def _discrete(value: dict[str, object], ask: Ask) -> dict[str, float]:
    if ask.question_type == "noul":
        picked = value.get("noul")
        if not isinstance(picked, bool):
            raise Unreadable("malformed", f"expected 'noul' to be true or false, got {picked!r}")
        index = 0 if picked else 1
    elif ask.question_type == "choice":
        picked = value.get("choice")
        if picked not in ask.options:
            raise Unreadable("malformed", f"expected 'choice' to be one of the options, got {picked!r}")
        index = ask.options.index(str(picked))
    else:
        picked = value.get("score")
        if isinstance(picked, bool) or not isinstance(picked, int) or not 0 <= picked < len(ask.options):
            raise Unreadable("malformed", f"expected 'score' to be a level index, got {picked!r}")
        index = picked
    return {option: 1.0 if i == index else 0.0 for i, option in enumerate(ask.options)}
