"""Every setting a client is built with, declared once: one frozen value, validated when made.

A call's overrides are a ``replace`` of that value (``Options.overridden``), so a new option is one
field here (and one line in ``Overrides`` when a call may change it, or in ``ClientOptions`` when only
the constructor may).
"""

from __future__ import annotations

import base64
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, TypedDict

from jevper import _cache, _json
from jevper._errors import ClientCapabilityError, ConfigError, InvalidQuestionError, UnsupportedMethodError
from jevper._escalate import Escalation, check_thresholds
from jevper._failure import RetryPolicy
from jevper._prompt import checked_cache_key, state_turns
from jevper._transport import PLAIN, Sending
from jevper._wire import PROMPT_SURFACES, decisions, systemone
from jevper.calibration import Calibration, loaded
from jevper.models import APIS, METHODS, ClientApi, Example, Method, ReasoningConfig

DEFAULT_TIMEOUT = 60.0


class Overrides(TypedDict, total=False):
    """What one ``system_one`` call may set for itself; ``None`` (or leaving it out) keeps the client's."""

    examples: Sequence[Example | Mapping[str, Any]] | Mapping[str, Sequence[Example]] | None
    method: str | None
    api: str | None
    extra_body: Mapping[str, Any] | None  # merged over the client's
    normalize_probabilities: bool | None
    prompt_cache_key: str | None
    reasoning: ReasoningConfig | None
    prefill: bool | None
    option_orders: int | None
    temperature: float | None
    keep_alive: str | int | None  # System One: how long the server keeps the model loaded (Ollama)
    images: Sequence[bytes | str] | None  # System One, Ollama's dialect: images every question sees
    extras: Sequence[str] | None


class ClientOptions(Overrides, total=False):
    """What a client is built with besides the model: every override, and these for the client's life."""

    top_logprobs: int
    max_concurrency: int
    timeout: float
    calibration: Calibration | str | os.PathLike[str] | None
    extra_headers: Mapping[str, str] | None
    retry: RetryPolicy | None
    n_retry_malformed: int
    structured_outputs: bool
    noul_requires_question: bool | None
    native: bool
    cache: str | os.PathLike[str] | None
    cache_mode: str
    escalate: Escalation | None


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
    #: Sent as the request's temperature on every prompt surface and on System One; None sends none
    temperature: float | None = None
    #: Sent on every request (the model list and System One too); checked when made, never shown
    extra_headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    #: How often and how patiently a transient failure is retried (None: the SDK client's max_retries)
    retry: RetryPolicy | None = None
    #: How many corrective re-asks an unreadable answer (label or JSON) gets: 0 for none
    n_retry_malformed: int = 1
    #: False: never a schema or a grammar in a request (the methods that need one are refused)
    structured_outputs: bool = True
    #: True: a Noul without instructions is refused (None, the default, and False allow one)
    noul_requires_question: bool | None = None
    #: True: every call through the server's own System One route, as api="systemone"
    native: bool = False
    #: System One only: how long the server keeps the model loaded (Ollama's keep_alive)
    keep_alive: str | int | None = None
    #: System One only, Ollama's dialect: PNG, JPEG or WebP images all questions see, as base64 text
    images: tuple[str, ...] = ()
    #: The native route's extra answer fields (another server's idea; no route of ours carries one)
    extras: tuple[str, ...] = ()
    #: An SQLite file of answers (``jevper._cache``): a call asked before is answered from it, no request
    cache: str | None = None
    #: read-write (the default), read (answer from the cache, never write), write (always ask, then
    #: write) or off
    cache_mode: str = "read-write"
    #: The questions whose calibrated top probability is below a threshold asked again of another client
    #: (``jevper._escalate``); None: none are
    escalate: Escalation | None = None
    #: What travels with every request (headers, temperature, policy), made once from the fields above
    sending: Sending = field(default=PLAIN, init=False, repr=False, compare=False)

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
            "temperature": checked_temperature(self.temperature),
            "extra_headers": checked_headers(self.extra_headers),
            "retry": checked_policy(self.retry),
            "n_retry_malformed": checked_malformed_retries(self.n_retry_malformed),
            "structured_outputs": checked_structured_outputs(self.structured_outputs),
            "noul_requires_question": None
            if self.noul_requires_question is None
            else bool(self.noul_requires_question),
            "native": bool(self.native),
            "keep_alive": checked_keep_alive(self.keep_alive),
            "images": checked_images(self.images),
            "extras": checked_extras(self.extras),
            "cache": _cache.checked_path(self.cache),
            "cache_mode": _cache.checked_mode(self.cache_mode),
            "escalate": checked_escalation(self.escalate),
        }
        for name, value in checked.items():
            object.__setattr__(self, name, value)
        if self.native:
            if self.api not in ("auto", systemone.SURFACE):
                raise ConfigError(
                    f"native=True with api={self.api!r}: expected api='auto' or {systemone.SURFACE!r}, "
                    "because native=True asks through the server's own System One route; drop one of them"
                )
            object.__setattr__(self, "api", systemone.SURFACE)
        checked_structure(self)
        object.__setattr__(self, "sending", Sending(self.extra_headers, self.temperature, self.retry))
        if self.calibration is not None:
            checked_calibration(self, self.calibration)
        if self.escalate is not None:
            check_thresholds(self.escalate.below, self.calibration, ())
        if self.api in PROMPT_SURFACES:
            prompt_only(self)
        if self.api == systemone.SURFACE:
            native_only(self)
        elif self.api == decisions.SURFACE:
            native_only(self, f"api={decisions.SURFACE!r}", "OpenAI's Decisions API")
            if self.images:
                raise no_images(f"api={decisions.SURFACE!r}", "POST /v1/decisions", DECISIONS_IMAGES)

    @classmethod
    def of(cls, model: str, options: ClientOptions) -> Options:
        """The options a client is built with; unknown names are refused, as a keyword would be."""
        _known(options)
        given: dict[str, Any] = dict(options)
        return cls(model=model, **given)

    def overridden(self, overrides: Overrides, model: str | None = None) -> Options:
        """These options with a call's overrides (and its own ``model``); ``extra_body`` is merged over
        the client's."""
        if not overrides and model is None:
            return self
        _known(overrides, Overrides.__annotations__)
        given: dict[str, Any] = {k: v for k, v in overrides.items() if v is not None}
        if model is not None:
            given["model"] = model
        if "extra_body" in given:
            given["extra_body"] = {**self.extra_body, **checked_extra_body(given["extra_body"])}
        return replace(self, **given) if given else self


def native_only(
    options: Options, asked: str = f"api={systemone.SURFACE!r}", api: str = "the System One API"
) -> None:
    """What a native API (System One, ``api``) cannot carry is refused: a method, examples, a thinking
    budget. ``asked`` says how the call came to it."""
    if options.method != "auto":
        raise UnsupportedMethodError(
            f"{asked} with method={options.method!r}: expected method='auto', because {api} "
            f"reads its answers itself and takes no method; drop method=, or choose a chat surface "
            f"(api={_either(PROMPT_SURFACES)}) to pick one"
        )
    if options.examples:
        raise ClientCapabilityError(
            f"{asked} with {len(options.examples)} example(s): expected none, because {api} "
            "has no field for worked examples; drop examples=, or choose a chat surface"
        )
    if options.reasoning is not None:
        raise ClientCapabilityError(
            f"{asked} with reasoning=: expected none, because {api} has no thinking budget; "
            "drop reasoning=, or choose a chat surface"
        )
    if options.option_orders != 1:
        raise ClientCapabilityError(
            f"{asked} with option_orders={options.option_orders}: expected 1, because {api} asks each "
            "question once, in the order given; drop option_orders=, or choose a chat surface"
        )


def prompt_only(options: Options) -> None:
    """What a prompt surface cannot carry is refused: ``keep_alive`` and ``images`` (System One's, in
    Ollama's dialect; its OpenAI-style routes ignore the one, and no prompt of ours carries the other)."""
    if options.images:
        raise no_images(f"api={options.api!r}", "a prompt surface")
    if options.keep_alive is not None:
        raise ClientCapabilityError(
            f"api={options.api!r} with keep_alive={options.keep_alive!r}: expected none, because only the "
            "System One route carries keep_alive (Ollama's OpenAI-style routes ignore it); drop "
            f"keep_alive=, or ask with api={systemone.SURFACE!r}",
            loc=("keep_alive",),
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
    """A list of examples, or a mapping of question id to that question's examples (each example's
    ``answer`` then answers that question)."""
    if examples is None:
        return ()
    if isinstance(examples, Mapping):
        given: list[tuple[str, object, str | None]] = []
        for qid, listed in examples.items():
            if not isinstance(listed, Sequence) or isinstance(listed, str | bytes):
                raise InvalidQuestionError(
                    f"examples[{qid!r}]: expected a list of Example for question {qid!r}, got {listed!r:.80}"
                )
            given.extend((f"examples[{qid!r}][{i}]", example, str(qid)) for i, example in enumerate(listed))
    elif isinstance(examples, Sequence) and not isinstance(examples, str | bytes):
        given = [(f"examples[{i}]", example, None) for i, example in enumerate(examples)]
    else:
        raise InvalidQuestionError(f"examples: expected a list of Example, got {examples!r:.80}")
    return tuple(_example(at, example, qid) for at, example, qid in given)


def _example(at: str, example: object, qid: str | None) -> Example:
    if isinstance(example, Mapping):
        example = Example(
            state=example.get("state", ""),
            answers=example.get("answers") or {},
            answer=example.get("answer"),
            probabilities=example.get("probabilities"),
        )
    if not isinstance(example, Example):
        raise InvalidQuestionError(f"{at}: expected an Example or a mapping, got {example!r:.80}")
    if qid is not None and example.answer is not None:
        example = replace(example, answers={**example.answers, qid: example.answer}, answer=None)
    if not example.answers and example.answer is None:
        raise InvalidQuestionError(
            f"{at}: expected an answer (answer=, or answers={{question id: answer}}), got none; an "
            "example without its right answer teaches nothing"
        )
    state_turns(example.state, f"{at}.state")
    _json.checked(f"{at}.answers", example.answers)
    if example.answer is not None:
        _json.checked(f"{at}.answer", example.answer)
    return example


def checked_temperature(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
        raise InvalidQuestionError(
            f"temperature: expected a number >= 0 (0 for the most probable tokens) or None, got {value!r}"
        )
    return value


#: A header name: an HTTP token (RFC 9110).
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
#: What a header value may hold: printable ASCII and horizontal tabs (the SDKs send values as ASCII).
_VALUE = re.compile(r"[\t\x20-\x7e]*")


def checked_headers(headers: object) -> Mapping[str, str]:
    """The caller's headers, each name a token and each value printable ASCII; a refusal never quotes a
    value (it may be a key), only where in it the first bad character sits."""
    if headers is None:
        return {}
    if not isinstance(headers, Mapping):
        raise ConfigError(
            f"extra_headers: expected a mapping of header name to value, got {type(headers).__name__}"
        )
    checked: dict[str, str] = {}
    for name, value in headers.items():
        if not isinstance(name, str) or not _TOKEN.fullmatch(name):
            raise ConfigError(
                f"extra_headers: expected header names made of letters, digits and !#$%&'*+-.^_`|~, got "
                f"{name!r}; a header by that name cannot be sent"
            )
        if not isinstance(value, str):
            raise ConfigError(
                f"extra_headers[{name!r}]: expected a string value, got {type(value).__name__}; "
                "pass str(value)"
            )
        bad = _VALUE.match(value)
        if bad is None or bad.end() != len(value):
            at = 0 if bad is None else bad.end()
            raise ConfigError(
                f"extra_headers[{name!r}]: expected printable ASCII and tabs only, got a value with "
                f"character {ord(value[at]):#x} at position {at} (the value is not shown: it may be a key); "
                "a header cannot carry it — remove the line break or encode the value"
            )
        checked[name] = value
    return checked


def checked_policy(policy: object) -> RetryPolicy | None:
    if policy is None or isinstance(policy, RetryPolicy):
        return policy
    raise ConfigError(
        f"retry: expected a jevper.RetryPolicy, got {type(policy).__name__}; pass "
        "retry=RetryPolicy(n_retries=..., base_delay=..., max_delay=...)"
    )


def checked_keep_alive(value: object) -> str | int | None:
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    if isinstance(value, str) and value.strip():
        return value
    raise InvalidQuestionError(
        "keep_alive: expected a duration ('5m', '1h') or a number of seconds (-1: keep loaded), "
        f"got {value!r}"
    )


#: What an image's first bytes are in each format Ollama's System One reads (docs.ollama.com/api/systemone).
_IMAGE_FORMATS = (("PNG", b"\x89PNG\r\n\x1a\n", 0), ("JPEG", b"\xff\xd8\xff", 0), ("WebP", b"WEBP", 8))


def checked_images(value: object) -> tuple[str, ...]:
    """The images as the base64 text Ollama's System One takes: bytes are encoded, text must be base64
    already; each a PNG, JPEG or WebP image (its first bytes say which). A URL is refused: the route
    takes none."""
    if value is None:
        return ()
    if not isinstance(value, Sequence) or isinstance(value, str | bytes | bytearray):
        raise InvalidQuestionError(
            f"images: expected a list of images (each the file's bytes, or its base64 text), got "
            f"{type(value).__name__}; wrap one image in a list",
            loc=("images",),
        )
    return tuple(_image(i, image) for i, image in enumerate(value))


def _image(index: int, image: object) -> str:
    at = f"images[{index}]"
    if isinstance(image, bytes | bytearray):
        raw = bytes(image)
        text = base64.b64encode(raw).decode("ascii")
    elif isinstance(image, str):
        if re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:", image):
            raise InvalidQuestionError(
                f"{at}: expected the image itself (its bytes, or base64 text), got a URL "
                f"({image[:40]!r}); Ollama's System One refuses URLs: read the file and pass its bytes",
                loc=("images", index),
            )
        text = "".join(image.split())
        try:
            raw = base64.b64decode(text, validate=True)
        except ValueError:
            raise InvalidQuestionError(
                f"{at}: expected base64 text (or the image's bytes), got text that is not base64; pass "
                "the file's bytes and jevper encodes them",
                loc=("images", index),
            ) from None
    else:
        raise InvalidQuestionError(
            f"{at}: expected the image's bytes or its base64 text, got {type(image).__name__}",
            loc=("images", index),
        )
    if not any(raw[offset : offset + len(magic)] == magic for _, magic, offset in _IMAGE_FORMATS):
        raise InvalidQuestionError(
            f"{at}: expected a {', '.join(name for name, _, _ in _IMAGE_FORMATS)} image, got "
            f"{len(raw)} bytes starting {raw[:8]!r}; convert it to one of those",
            loc=("images", index),
        )
    return text


#: Where an image goes in a Decisions request instead of ``images=``.
DECISIONS_IMAGES = "give the image as an input_image part of input"


def no_images(asked: str, route: str, instead: str | None = None) -> ClientCapabilityError:
    """``images`` on a route that cannot carry them: only Ollama's dialect of POST /v1/systemone does."""
    instead = instead or f"ask an Ollama decision model with api={systemone.SURFACE!r}"
    return ClientCapabilityError(
        f"{asked} with images=: expected none, because {route} cannot carry images (only Ollama's dialect "
        f"of POST /v1/systemone does); drop images=, or {instead}",
        loc=("images",),
    )


def checked_extras(value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, Sequence) or isinstance(value, str | bytes):
        raise InvalidQuestionError(f"extras: expected a list of names, got {value!r:.80}")
    if value:
        raise ClientCapabilityError(
            f"extras={list(value)!r}: expected none, because no route jevper speaks carries the native "
            "/api/decide's extra answer fields (laya-serve's LayaExtras); drop extras=, and read a "
            "choice's confidence and probabilities from its answer",
            loc=("extras",),
        )
    return ()


def checked_malformed_retries(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(
            f"n_retry_malformed: expected how many corrective re-asks an unreadable answer gets, an integer "
            f"of 0 or more (1, the default), got {value!r}"
        )
    return value


def checked_escalation(value: object) -> Escalation | None:
    if value is None:
        return None
    if not isinstance(value, Escalation):
        raise ConfigError(
            f"escalate: expected a jevper.Escalation, got {type(value).__name__}; pass "
            "escalate=Escalation(to=<a client of the same kind>, below=0.8 or 'auto')"
        )
    if value.calibration is not None:
        raise ConfigError(
            "escalate: expected no calibration= on a client's Escalation, got one; give it to the client "
            "asked again (its own calibration= applies to its own answers)"
        )
    return value


def checked_structured_outputs(value: object) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(
            f"structured_outputs: expected True (schemas and grammars sent where a method uses them) or "
            f"False (never), got {value!r}"
        )
    return value


#: What each method that cannot do without one sends: under structured_outputs=False it is refused.
NEEDS_STRUCTURE = {"grammar": "a GBNF grammar", "structured": "a JSON schema", "discrete": "a JSON schema"}


def checked_structure(options: Options) -> None:
    """structured_outputs=False with a method that needs a schema or a grammar is refused, naming it;
    method="auto" asks without them."""
    needed = NEEDS_STRUCTURE.get(options.method)
    if not options.structured_outputs and needed is not None:
        raise UnsupportedMethodError(
            f"method={options.method!r} with structured_outputs=False: expected a method that sends no "
            f"schema or grammar, because {options.method!r} sends {needed}; use method='logprobs' or "
            "'auto' (which then asks without either), or structured_outputs=True"
        )
