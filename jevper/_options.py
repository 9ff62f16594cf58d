"""Every setting a client is built with, declared once: one frozen value, validated when made.

A call's overrides are a ``replace`` of that value (``Options.overridden``), so a new option is one
field here (and one line in ``Overrides`` when a call may change it, or in ``ClientOptions`` when only
the constructor may).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, TypedDict

from jevper import _json
from jevper._errors import InvalidQuestionError
from jevper._prompt import checked_cache_key, state_turns
from jevper._wire import PROMPT_SURFACES, decisions, systemone
from jevper.calibration import Calibration, loaded
from jevper.models import APIS, METHODS, ClientApi, Example, Method, ReasoningConfig

DEFAULT_TIMEOUT = 60.0


class Overrides(TypedDict, total=False):
    """What one ``system_one`` call may set for itself; ``None`` (or leaving it out) keeps the client's."""

    examples: Sequence[Example | Mapping[str, Any]] | None
    method: str | None
    api: str | None
    extra_body: Mapping[str, Any] | None  # merged over the client's
    normalize_probabilities: bool | None
    prompt_cache_key: str | None
    reasoning: ReasoningConfig | None
    prefill: bool | None
    option_orders: int | None


class ClientOptions(Overrides, total=False):
    """What a client is built with besides the model: every override, and these for the client's life."""

    top_logprobs: int
    max_concurrency: int
    timeout: float
    calibration: Calibration | str | os.PathLike[str] | None


@dataclass(frozen=True)
class Options:
    """Everything a call is asked with, validated; see the getting-started page for each field."""

    model: str
    method: Method = "auto"
    api: ClientApi = "auto"
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    top_logprobs: int = 20
    max_concurrency: int = 8
    normalize_probabilities: bool = True
    examples: tuple[Example, ...] = ()
    prompt_cache_key: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    reasoning: ReasoningConfig | None = None
    prefill: bool = True  # Messages surface: open the JSON answer in a last assistant turn
    #: Applied to every answer of a question it holds (``jevper.calibration``; a path is loaded once)
    calibration: Calibration | None = None
    #: A choice asked with its options in this many orders, its answers averaged (``jevper._orders``)
    option_orders: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model:
            raise InvalidQuestionError(f"model: expected the server's model id, got {self.model!r}")
        _json.text("model", self.model)
        checked = {
            "method": _one_of("method", self.method, METHODS),
            "api": _one_of("api", self.api, (*APIS, decisions.SURFACE)),
            "extra_body": checked_extra_body(self.extra_body),
            "top_logprobs": checked_positive("top_logprobs", self.top_logprobs, minimum=2),
            "max_concurrency": checked_positive("max_concurrency", self.max_concurrency),
            "normalize_probabilities": bool(self.normalize_probabilities),
            "examples": checked_examples(self.examples),
            "prompt_cache_key": checked_cache_key(self.prompt_cache_key),
            "timeout": checked_timeout(self.timeout),
            "prefill": bool(self.prefill),
            "calibration": None if self.calibration is None else loaded(self.calibration),
            "option_orders": checked_positive("option_orders", self.option_orders),
        }
        for name, value in checked.items():
            object.__setattr__(self, name, value)
        if self.calibration is not None:
            checked_calibration(self, self.calibration)
        if self.api == systemone.SURFACE:
            native_only(self)
        elif self.api == decisions.SURFACE:
            native_only(self, f"api={decisions.SURFACE!r}", "OpenAI's Decisions API")

    @classmethod
    def of(cls, model: str, options: ClientOptions) -> Options:
        """The options a client is built with; unknown names are refused, as a keyword would be."""
        _known(options)
        given: dict[str, Any] = dict(options)
        return cls(model=model, **given)

    def overridden(self, overrides: Overrides) -> Options:
        """These options with a call's overrides; ``extra_body`` is merged over the client's."""
        if not overrides:
            return self
        _known(overrides, Overrides.__annotations__)
        given: dict[str, Any] = {k: v for k, v in overrides.items() if v is not None}
        if "extra_body" in given:
            given["extra_body"] = {**self.extra_body, **checked_extra_body(given["extra_body"])}
        return replace(self, **given) if given else self


def native_only(
    options: Options, asked: str = f"api={systemone.SURFACE!r}", api: str = "the System One API"
) -> None:
    """What a native API (System One, ``api``) cannot carry is refused: a method, examples, a thinking
    budget. ``asked`` says how the call came to it."""
    if options.method != "auto":
        raise InvalidQuestionError(
            f"{asked} with method={options.method!r}: expected method='auto', because {api} "
            f"reads its answers itself and takes no method; drop method=, or choose a chat surface "
            f"(api={_either(PROMPT_SURFACES)}) to pick one"
        )
    if options.examples:
        raise InvalidQuestionError(
            f"{asked} with {len(options.examples)} example(s): expected none, because {api} "
            "has no field for worked examples; drop examples=, or choose a chat surface"
        )
    if options.reasoning is not None:
        raise InvalidQuestionError(
            f"{asked} with reasoning=: expected none, because {api} has no thinking budget; "
            "drop reasoning=, or choose a chat surface"
        )
    if options.option_orders != 1:
        raise InvalidQuestionError(
            f"{asked} with option_orders={options.option_orders}: expected 1, because {api} asks each "
            "question once, in the order given; drop option_orders=, or choose a chat surface"
        )


def checked_calibration(options: Options, calibration: Calibration) -> None:
    """What a client knows before any answer is checked against what the calibration was fit for: the
    model and the orders of a choice's options, and the method and surface when they are not "auto" (then
    each answer's own are checked). The server's kind and release are not known to a client, so not
    checked here."""
    known: dict[str, str | int] = {"model": options.model, "option_orders": options.option_orders}
    if options.method != "auto":
        known["method"] = options.method
    if options.api != "auto":
        known["surface"] = options.api
    calibration.check_fields(**known)


def _either(names: Sequence[str]) -> str:
    """'a', 'b' or 'c'."""
    quoted = [repr(name) for name in names]
    return f"{', '.join(quoted[:-1])} or {quoted[-1]}" if len(quoted) > 1 else "".join(quoted)


def _known(given: Mapping[str, object], allowed: Mapping[str, object] | None = None) -> None:
    names = allowed if allowed is not None else {f.name for f in fields(Options)} - {"model"}
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise TypeError(f"unexpected keyword argument(s) {', '.join(map(repr, unknown))}")


def _one_of(name: str, value: object, known: Sequence[str]) -> Any:
    if value in known:
        return value
    raise InvalidQuestionError(f"{name}: expected one of {list(known)}, got {value!r}")


def checked_extra_body(extra_body: Mapping[str, Any] | None) -> dict[str, Any]:
    if extra_body is None:
        return {}
    if not isinstance(extra_body, Mapping):
        raise InvalidQuestionError(
            f"extra_body: expected a mapping of request fields, got {type(extra_body).__name__}"
        )
    if extra_body.get("stream"):
        raise InvalidQuestionError(
            f"extra_body: expected stream to be absent or false, got {extra_body['stream']!r}; "
            "jevper reads one whole response — omit the field"
        )
    _json.checked("extra_body", extra_body)
    return dict(extra_body)


def checked_positive(name: str, value: object, *, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidQuestionError(f"{name}: expected an integer of at least {minimum}, got {value!r}")
    return value


def checked_timeout(value: object) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise InvalidQuestionError(
            f"timeout: expected a positive number of seconds, got {value!r}; every request is bounded"
        )
    return float(value)


def checked_examples(examples: object) -> tuple[Example, ...]:
    if examples is None:
        return ()
    if not isinstance(examples, Sequence) or isinstance(examples, str | bytes):
        raise InvalidQuestionError(f"examples: expected a list of Example, got {examples!r:.80}")
    checked = []
    for i, example in enumerate(examples):
        if isinstance(example, Mapping):
            example = Example(state=example.get("state", ""), answers=example.get("answers", {}))
        if not isinstance(example, Example):
            raise InvalidQuestionError(
                f"examples[{i}]: expected an Example or a mapping, got {example!r:.80}"
            )
        state_turns(example.state, f"examples[{i}].state")
        _json.checked(f"examples[{i}].answers", example.answers)
        checked.append(example)
    return tuple(checked)
