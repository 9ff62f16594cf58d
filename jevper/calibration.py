"""``Calibration``: each question's calibration map, bound to the answers it was fit for.

``python -m jevper.evaluate ... --fit`` writes one (``calibration.json``, versioned); the clients, the batch
and the gateway apply it (``calibration=``, ``--calibration FILE``). A ``Calibrator`` takes a distribution
over a question's options to another that sums to 1:

- ``identity``: the distribution as it came;
- ``temperature``: ``p_k ** (1 / T)``, renormalised (softmax of the log-probabilities over T);
- ``prior``, ``content_free``: ``p_k / prior_k``, renormalised (the batch-mean prior of Batch Calibration,
  or the model's mean answer to content-free states from "Calibrate Before Use");
- ``prior_temperature``, ``content_free_temperature``: the prior correction, then a temperature;
- ``platt`` (a yes/no question): ``sigmoid(a * logit(p_true) + b)``;
- ``beta`` (a yes/no question): ``sigmoid(a * ln p_true - b * ln(1 - p_true) + c)``, the beta
  calibration of Kull, Silva Filho and Flach, which Platt's is with a = b: it also fits answers whose
  odds are not a straight line in the model's log-odds;
- any of these then ``top``: the top option's probability c mapped to ``sigmoid(a * logit(c) + b)``, the
  other options sharing the rest in proportion (Platt scaling of the top label, for a model whose top
  answer is right more or less often than the map before it says; the top stays the top).

A map fit on labelled rows records how many (``rows``), and never gives an option less than
``1 / (rows + options)``: Laplace's rule of succession, the rarest chance that many rows can show.

The binding is what the map depends on: the server kind and its release, the model, the method and the
surface the answers were read with, the orders each choice was asked in (``option_orders``), and a digest of
the prompt layout (every question's type, instructions and options in their order; since the client
applies it, each question's own digest too).
Applied to anything else it is refused with a ``CalibrationMismatchError`` naming what differs.

A question's map may carry a ``Threshold`` (``--target-accuracy A --risk D``): the calibrated top probability
at or above which its answers are right at least A of the time, with probability at least 1 - D over the
labelled rows it was chosen on, and optionally one per label (the answer's top option). ``threshold_for``
gives it for a question and label: the batch's ``--review-below auto`` reads it, and so should any other
use of the figure (an escalation's ``--escalate-below auto``).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal, get_args

from jevper._atomic import write_atomically
from jevper._distribution import clamped, renormalised
from jevper._errors import CalibrationMismatchError, ConfigError
from jevper.questions import Choice, Noul, Question, as_question, described

VERSION = 4
#: The versions read: version 1 files hold no top-label map, version 2 files no option_orders (so 1),
#: version 3 files no thresholds.
READ_VERSIONS = (1, 2, 3, 4)
KIND = "jevper.calibration"
#: A distribution over a question's options, in their order (a yes/no question's: true, false).
Distribution = tuple[float, ...]
#: Probabilities are floored here before a logarithm: an option the server gave no mass costs 27.6 nats.
FLOOR = 1e-12

Method = Literal[
    "identity",
    "temperature",
    "prior",
    "prior_temperature",
    "content_free",
    "content_free_temperature",
    "platt",
    "beta",
]
METHODS: tuple[Method, ...] = get_args(Method)
#: The question types a calibration maps (a yes/no question's options are "true" and "false").
TYPES = ("choice", "noul", "score")
#: The methods that divide by a prior, and those that then apply a temperature.
_DIVIDING = ("prior", "prior_temperature", "content_free", "content_free_temperature")
_TEMPERED = ("temperature", "prior_temperature", "content_free_temperature")


@dataclass(frozen=True)
class Calibrator:
    """One question's calibration map: its method and the parameters that method uses."""

    method: Method = "identity"
    temperature: float = 1.0
    prior: tuple[float, ...] | None = None
    platt: tuple[float, float] | None = None
    beta: tuple[float, float, float] | None = None
    #: the labelled rows it was fit on, which bound its output (``bounded``); None for a map not fit to
    #: labels, or read from a file written before maps were bounded
    rows: int | None = None
    #: Platt's (a, b) for the top label's probability, applied after the method's map; None: no such step
    top: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        """A map that cannot apply is refused when it is made (so when its file is loaded), naming the
        field: applied, it would raise on every answer or answer with what is no distribution."""
        if self.method not in METHODS:
            raise ConfigError(f"method: expected one of {list(METHODS)}, got {self.method!r}")
        _check_number("temperature", self.temperature, positive=True)
        if self.prior is None and self.method in _DIVIDING:
            raise ConfigError(f"prior: expected the prior method {self.method!r} divides by, got none")
        for part in ("platt", "beta"):
            if self.method == part and getattr(self, part) is None:
                raise ConfigError(f"{part}: expected the parameters of method {part!r}, got none")
        if self.prior is not None:
            _check_numbers("prior", self.prior, positive=True)
        for part in ("platt", "beta", "top"):
            if getattr(self, part) is not None:
                _check_numbers(part, getattr(self, part))
        if self.rows is not None and (type(self.rows) is not int or self.rows < 1):
            raise ConfigError(f"rows: expected a whole number of labelled rows, 1 or more, got {self.rows!r}")

    @property
    def name(self) -> str:
        """The method, with ``+top`` when the top-label map follows it (as the evaluation names it)."""
        return f"{self.method}+top" if self.top is not None else self.method

    def apply(self, p: Distribution) -> Distribution:
        mapped = self._mapped(p)
        return bounded(top_label(mapped, *self.top) if self.top is not None else mapped, self.rows)

    def _mapped(self, p: Distribution) -> Distribution:
        if self.method == "identity":
            return renormalised(p)
        if self.method == "platt":
            a, b = self.platt or (1.0, 0.0)
            yes = sigmoid(a * logit(yes_share(p)) + b)
            return (yes, 1.0 - yes)
        if self.method == "beta":
            a, b, c = self.beta or (1.0, 1.0, 0.0)
            log_yes, log_no = beta_terms(p)
            yes = sigmoid(a * log_yes + b * log_no + c)
            return (yes, 1.0 - yes)
        if self.method in _DIVIDING:
            p = divided(p, self.prior or ())
        return tempered(p, self.temperature) if self.method in _TEMPERED else p

    def to_json(self) -> dict[str, Any]:
        value: dict[str, Any] = {"method": self.method}
        if self.method in _TEMPERED:
            value["temperature"] = self.temperature
        if self.prior is not None:
            value["prior"] = list(self.prior)
        if self.platt is not None:
            value["platt"] = {"a": self.platt[0], "b": self.platt[1]}
        if self.beta is not None:
            value["beta"] = {"a": self.beta[0], "b": self.beta[1], "c": self.beta[2]}
        if self.rows is not None:
            value["rows"] = self.rows
        if self.top is not None:
            value["top"] = {"a": self.top[0], "b": self.top[1]}
        return value

    @classmethod
    def of_json(cls, value: Mapping[str, Any]) -> Calibrator:
        """The map a question's entry in a calibration file describes; a ConfigError names the field
        (relative to the entry) that is missing, mistyped, or cannot apply."""
        rows = value.get("rows")
        if rows is not None and (type(rows) is not int or rows < 1):
            raise ConfigError(f"rows: expected a whole number of labelled rows, 1 or more, got {rows!r}")
        return cls(
            value.get("method"),  # type: ignore[arg-type]  # checked as it is made
            _check_number("temperature", value.get("temperature", 1.0), positive=True),
            _optional(value, "prior", lambda given: _check_numbers("prior", given, positive=True)),
            _optional(value, "platt", lambda given: _named_numbers("platt", given, "ab")),
            _optional(value, "beta", lambda given: _named_numbers("beta", given, "abc")),
            rows,
            _optional(value, "top", lambda given: _named_numbers("top", given, "ab")),
        )


def _check_number(name: str, value: Any, *, positive: bool = False) -> float:
    """``value`` as a float, if it is a finite number (and above 0 when ``positive``); else refused."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or (positive and value <= 0)
    ):
        said = "a positive finite number" if positive else "a finite number"
        raise ConfigError(f"{name}: expected {said}, got {value!r}")
    return float(value)


def _check_numbers(name: str, values: Any, *, positive: bool = False) -> tuple[float, ...]:
    if not isinstance(values, list | tuple):
        raise ConfigError(f"{name}: expected a list of numbers, got {values!r}")
    try:
        return tuple(_check_number(name, x, positive=positive) for x in values)
    except ConfigError:
        said = "positive finite numbers" if positive else "finite numbers"
        raise ConfigError(f"{name}: expected {said}, got {list(values)!r}") from None


def _named_numbers(name: str, value: Any, keys: str) -> tuple[float, ...]:
    """``{"a": .., "b": ..}`` as (a, b): each key present, each a finite number."""
    if not isinstance(value, Mapping) or sorted(value) != sorted(keys):
        shown = sorted(value) if isinstance(value, Mapping) else value
        raise ConfigError(f"{name}: expected an object of the numbers {list(keys)}, got {shown!r}")
    return _check_numbers(name, [value[k] for k in keys])


def _optional(value: Mapping[str, Any], name: str, read: Any) -> Any:
    given = value.get(name)
    return None if given is None else read(given)


def bounded(p: Distribution, rows: int | None) -> Distribution:
    """p mixed with the uniform distribution just enough that no option has less than
    ``1 / (rows + len(p))`` (nor, so, more than ``(rows + 1) / (rows + len(p))``); p itself if none has,
    or if ``rows`` is None."""
    if rows is None:
        return p
    floor, low, uniform = 1.0 / (rows + len(p)), min(p), 1.0 / len(p)
    if low >= floor:
        return p
    share = (floor - low) / (uniform - low)
    return tuple((1.0 - share) * x + share * uniform for x in p)


def yes_share(p: Distribution) -> float:
    """A yes/no answer's probability of true, its two sides renormalised."""
    return renormalised(p[:2])[0]


def beta_terms(p: Distribution) -> tuple[float, float]:
    """What beta calibration weighs, ``ln p_true`` and ``-ln(1 - p_true)``, p_true (``yes_share``) kept
    FLOOR away from 0 and 1: the map applies and the fit fits the same two terms."""
    true = clamped(yes_share(p), FLOOR, 1 - FLOOR)
    return math.log(true), -math.log(1 - true)


def top_label(p: Distribution, a: float, b: float) -> Distribution:
    """p with its top option's probability c mapped to ``sigmoid(a * logit(c) + b)`` and the other
    options sharing the rest in proportion to what they had (evenly, if they had none). The top option
    stays the top: its new probability is held no lower than the next option's."""
    top = max(range(len(p)), key=p.__getitem__)
    c, rest = p[top], 1.0 - p[top]
    mapped = sigmoid(a * logit(c) + b)
    if rest <= 0:
        share = (1.0 - mapped) / (len(p) - 1) if len(p) > 1 else 0.0
        return tuple(mapped if i == top else share for i in range(len(p)))
    second = max(x for i, x in enumerate(p) if i != top)
    # The next option, scaled by (1 - mapped) / rest, stays at most the top's mapped value.
    mapped = max(mapped, second / (rest + second))
    scale = (1.0 - mapped) / rest
    # min(): held level, the next option must not pass the top by a rounding.
    return tuple(mapped if i == top else min(x * scale, mapped) for i, x in enumerate(p))


def tempered(p: Distribution, temperature: float) -> Distribution:
    """softmax(log p / T), each probability floored at FLOOR first (so an option with none can gain)."""
    logs = [math.log(max(x, FLOOR)) / temperature for x in p]
    top = max(logs)
    return renormalised([math.exp(x - top) for x in logs])


def divided(p: Distribution, prior: Sequence[float]) -> Distribution:
    """p divided by the prior (each floored at FLOOR), renormalised."""
    return renormalised([x / max(q, FLOOR) for x, q in zip(p, prior, strict=True)])


def logit(p: float) -> float:
    p = clamped(p, FLOOR, 1 - FLOOR)
    return math.log(p / (1 - p))


def sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


@dataclass(frozen=True)
class Binding:
    """What a calibration was fit for, or what answers to calibrate come from."""

    server_kind: str
    server_release: str
    model: str
    method: str
    surface: str
    #: ``prompt_digest(questions)`` of the questions asked
    prompt_digest: str
    #: the orders each choice was asked in, its answers averaged (the client's ``option_orders``)
    option_orders: int = 1


def prompt_digest(questions: Mapping[str, Any]) -> str:
    """A digest of what the model is shown of the questions: ids, types, instructions and options, in
    order. Any change of wording or option order changes it."""
    layout = [[str(qid), _layout(as_question(str(qid), q))] for qid, q in questions.items()]
    text = json.dumps(layout, ensure_ascii=False, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def _layout(question: Question) -> list[Any]:
    criteria: Any
    if isinstance(question, Choice):
        criteria = [[option, described(text)] for option, text in question.criteria.items()]
    elif isinstance(question, Noul):
        given = question.criteria
        criteria = (
            [[side, described(given[side])] for side in Noul.SIDES if side in given]
            if isinstance(given, Mapping)
            else described(given)
        )
    else:
        criteria = [described(level) for level in question.criteria]
    return [question.type, described(question.instructions), criteria]


@dataclass(frozen=True)
class Threshold:
    """A question's guaranteed threshold on the calibrated top probability: the answers at or above it were
    shown right at least ``target_accuracy`` of the time with probability at least ``1 - risk`` over the
    ``rows`` labelled answers it was chosen on. ``top_probability`` None: no threshold met the target, so
    every answer is below it. ``per_label``: the same per label (the answer's top option), where chosen."""

    target_accuracy: float
    risk: float
    rows: int
    top_probability: float | None
    per_label: Mapping[str, float | None] | None = None

    def __post_init__(self) -> None:
        if not 0 < _check_number("target_accuracy", self.target_accuracy) <= 1:
            raise ConfigError(
                f"target_accuracy: expected an accuracy in (0, 1], got {self.target_accuracy!r}"
            )
        if not 0 < _check_number("risk", self.risk) < 1:
            raise ConfigError(f"risk: expected a probability in (0, 1), got {self.risk!r}")
        if type(self.rows) is not int or self.rows < 0:
            raise ConfigError(f"rows: expected a whole number of labelled rows, got {self.rows!r}")
        _check_threshold("top_probability", self.top_probability)
        if self.per_label is not None:
            if not isinstance(self.per_label, Mapping):
                raise ConfigError(
                    f"per_label: expected an object of each label's threshold, got {self.per_label!r}"
                )
            for label, value in self.per_label.items():
                _check_threshold(f"per_label.{label}", value)

    def below(self, label: str | None = None) -> float | None:
        """The threshold for an answer whose top option is ``label``: that label's where it has one, else
        the question's; None when none met the target (every answer is below it)."""
        if label is not None and self.per_label is not None and label in self.per_label:
            return self.per_label[label]
        return self.top_probability

    def to_json(self) -> dict[str, Any]:
        value: dict[str, Any] = {
            "target_accuracy": self.target_accuracy,
            "risk": self.risk,
            "rows": self.rows,
            "top_probability": self.top_probability,
        }
        if self.per_label is not None:
            value["per_label"] = dict(self.per_label)
        return value

    @classmethod
    def of_json(cls, value: Any) -> Threshold:
        if not isinstance(value, Mapping):
            raise ConfigError(f"expected an object of the guaranteed threshold, got {value!r}")
        names = ("target_accuracy", "risk", "rows", "top_probability", "per_label")
        strays = sorted(set(value) - set(names))
        if strays:
            raise ConfigError(f"{strays[0]}: expected only the fields {list(names)}, got {strays}")
        for name in names[:4]:
            if name not in value:
                raise ConfigError(f"{name}: expected it (null for no threshold), got nothing")
        return cls(
            value["target_accuracy"],
            value["risk"],
            value["rows"],
            value["top_probability"],
            value.get("per_label"),
        )


def _check_threshold(name: str, value: Any) -> None:
    if value is not None and not 0 <= _check_number(name, value) <= 1:
        raise ConfigError(
            f"{name}: expected a top probability in [0, 1] or null (none met the target), got {value!r}"
        )


@dataclass(frozen=True)
class QuestionCalibration:
    """One question's map: its type and options (in order), the calibrator, each method's out-of-fold NLL
    that chose it, and the digest of this question's own layout (``prompt_digest({qid: question})``;
    None in a file written before the clients applied calibrations); and its guaranteed threshold, if one
    was chosen."""

    type: str
    options: tuple[str, ...]
    calibrator: Calibrator
    scores: Mapping[str, float]
    prompt_digest: str | None = None
    threshold: Threshold | None = None

    def __post_init__(self) -> None:
        if self.type not in TYPES:
            raise ConfigError(f"type: expected one of {list(TYPES)}, got {self.type!r}")
        options = self.options
        if (
            len(options) < 2
            or len(set(options)) != len(options)
            or not all(isinstance(o, str) for o in options)
        ):
            raise ConfigError(f"options: expected two or more distinct option names, got {list(options)}")
        if self.type == "noul" and tuple(options) != ("true", "false"):
            raise ConfigError(
                f"options: expected ['true', 'false'] for a yes/no question, got {list(options)}"
            )
        prior = self.calibrator.prior
        if prior is not None and len(prior) != len(options):
            raise ConfigError(
                f"prior: expected {len(options)} probabilities, one per option {list(options)}, got "
                f"{len(prior)}"
            )
        if self.calibrator.method in ("platt", "beta") and self.type != "noul":
            raise ConfigError(
                f"method: expected a map of {len(options)} options for a {self.type} question, got "
                f"{self.calibrator.method!r}, which maps a yes/no answer"
            )
        for score in self.scores.values():
            _check_number("held_out_nll", score)
        if self.prompt_digest is not None and not isinstance(self.prompt_digest, str):
            raise ConfigError(f"prompt_digest: expected a digest's text, got {self.prompt_digest!r}")
        labels = self.threshold.per_label if self.threshold is not None else None
        strays = sorted(set(labels or ()) - set(options))
        if strays:
            raise ConfigError(
                f"threshold.per_label: expected labels among the options {list(options)}, got {strays}"
            )

    @classmethod
    def of_json(cls, value: Any) -> QuestionCalibration:
        if not isinstance(value, Mapping):
            raise ConfigError(f"expected an object with the question's map, got {value!r}")
        options, scores = value.get("options"), value.get("held_out_nll", {})
        if not isinstance(options, list):
            raise ConfigError(f"options: expected a list of the question's options, got {options!r}")
        if not isinstance(scores, Mapping):
            raise ConfigError(f"held_out_nll: expected an object of each method's figure, got {scores!r}")
        return cls(
            value.get("type"),  # type: ignore[arg-type]  # checked as it is made
            tuple(options),
            Calibrator.of_json(value),
            {str(k): _check_number("held_out_nll", v) for k, v in scores.items()},
            value.get("prompt_digest"),
            _threshold(value.get("threshold")),
        )


def _threshold(value: Any) -> Threshold | None:
    if value is None:
        return None
    try:
        return Threshold.of_json(value)
    except ConfigError as bad:
        raise ConfigError(f"threshold.{bad}") from None


def _binding(value: Any) -> Binding:
    """``bound_to`` read and checked: each field of Binding, the text ones text, option_orders 1 or more."""
    if not isinstance(value, Mapping):
        raise ConfigError(f"bound_to: expected an object of what the answers came from, got {value!r}")
    names = [f.name for f in fields(Binding)]
    strays = sorted(set(value) - set(names))
    if strays:
        raise ConfigError(f"bound_to.{strays[0]}: expected only the fields {names}, got {strays}")
    for name in names:
        given = value.get(name, 1 if name == "option_orders" else None)
        if name == "option_orders" and (type(given) is not int or given < 1):
            raise ConfigError(f"bound_to.{name}: expected a whole number, 1 or more, got {given!r}")
        if name != "option_orders" and not isinstance(given, str):
            raise ConfigError(f"bound_to.{name}: expected text, got {given!r}")
    return Binding(**value)


@dataclass(frozen=True)
class Calibration:
    """Per question, the calibration map chosen by held-out NLL; bound to what it was fit for.
    ``source``: the file it was loaded from, if any (the answers' trace names it)."""

    bound_to: Binding
    questions: Mapping[str, QuestionCalibration]
    folds: int
    seed: int
    source: str | None = field(default=None, compare=False)

    def check(self, bound: Binding) -> None:
        """Refuse answers bound to anything but what this was fit for, naming each field that differs."""
        self.check_fields(**asdict(bound))

    def check_fields(self, **given: str | int) -> None:
        """``check`` of the binding's fields given (the others unknown here, so not compared)."""
        unknown = sorted(set(given) - {f.name for f in fields(Binding)})
        if unknown:
            raise TypeError(f"check_fields: expected fields of Binding, got {unknown}")
        differ = [name for name, value in given.items() if value != getattr(self.bound_to, name)]
        if differ:
            first = differ[0]
            said = "; ".join(
                f"{name} {getattr(self.bound_to, name)!r}, got {given[name]!r}" for name in differ
            )
            raise CalibrationMismatchError(
                f"calibration: expected answers from what it was fit for: {said}; fit a calibration "
                "for these answers (python -m jevper.evaluate ... --fit)",
                field=first,
                expected=getattr(self.bound_to, first),
                got=given[first],
            )

    def check_layout(self, qid: str, question: Question | Mapping[str, Any]) -> None:
        """Refuse a question asked with another layout (type, wording, options or their order) than the
        one this calibration was fit for it; a file without per-question digests cannot tell, so this
        is left to the whole layout's digest (``check_fields(prompt_digest=...)``)."""
        own = self.questions[qid].prompt_digest
        got = prompt_digest({qid: question})
        if own is not None and own != got:
            raise CalibrationMismatchError(
                f"calibration of {qid!r}: expected the question as it was fit (prompt layout {own}), got "
                f"another type, wording or option order ({got}); ask it as fit, or fit a calibration for "
                "it as asked",
                field="prompt_digest",
                expected=own,
                got=got,
            )

    def apply(self, qid: str, probabilities: Mapping[str, float], bound: Binding) -> dict[str, float]:
        """``probabilities`` (option -> probability; a yes/no question's options are "true" and
        "false") calibrated; the result sums to 1, in the question's option order."""
        self.check(bound)
        return self.mapped(qid, probabilities)

    def mapped(self, qid: str, probabilities: Mapping[str, float]) -> dict[str, float]:
        """``apply`` without the binding's check (the caller has made it)."""
        question = self.questions.get(qid)
        if question is None:
            raise CalibrationMismatchError(
                f"calibration: expected one of the questions it was fit for, {sorted(self.questions)}, "
                f"got {qid!r}",
                field="question",
                expected=sorted(self.questions),
                got=qid,
            )
        if set(probabilities) != set(question.options):
            raise CalibrationMismatchError(
                f"calibration of {qid!r}: expected probabilities for the options {list(question.options)}, "
                f"got {sorted(probabilities)}",
                field="options",
                expected=list(question.options),
                got=sorted(probabilities),
            )
        calibrated = question.calibrator.apply(tuple(float(probabilities[o]) for o in question.options))
        return dict(zip(question.options, calibrated, strict=True))

    def digest(self) -> str:
        """A digest of the file's content (not of where it was loaded from): a resumed run is held to it."""
        text = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))
        return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()

    def with_layouts(self, questions: Mapping[str, Any]) -> Calibration:
        """This calibration with each question's own layout digest, from the questions it was fit on."""
        given = {str(qid): q for qid, q in questions.items()}
        return replace(
            self,
            questions={
                qid: replace(q, prompt_digest=prompt_digest({qid: given[qid]})) if qid in given else q
                for qid, q in self.questions.items()
            },
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "version": VERSION,
            "kind": KIND,
            "bound_to": asdict(self.bound_to),
            "folds": self.folds,
            "seed": self.seed,
            "questions": {
                qid: {
                    "type": q.type,
                    "options": list(q.options),
                    **q.calibrator.to_json(),
                    "held_out_nll": dict(q.scores),
                    **({"prompt_digest": q.prompt_digest} if q.prompt_digest is not None else {}),
                    **({"threshold": q.threshold.to_json()} if q.threshold is not None else {}),
                }
                for qid, q in self.questions.items()
            },
        }

    @classmethod
    def of_json(cls, value: Any, where: str = "calibration") -> Calibration:
        if (
            not isinstance(value, dict)
            or value.get("kind") != KIND
            or value.get("version") not in READ_VERSIONS
        ):
            shown = (
                {"kind": value.get("kind"), "version": value.get("version")}
                if isinstance(value, dict)
                else type(value).__name__
            )
            raise ConfigError(
                f"{where}: expected a calibration ({{'kind': {KIND!r}, 'version': one of "
                f"{list(READ_VERSIONS)}}}), got {shown}"
            )
        try:
            return cls._read(value)
        except ConfigError as bad:
            raise ConfigError(f"{where}: {bad}") from None

    @classmethod
    def _read(cls, value: Mapping[str, Any]) -> Calibration:
        """A checked file's calibration; a ConfigError names the field, as a path from the top."""
        questions = value.get("questions")
        if not isinstance(questions, Mapping) or not questions:
            raise ConfigError(f"questions: expected an object of each question's map, got {questions!r}")
        read: dict[str, QuestionCalibration] = {}
        for qid, q in questions.items():
            try:
                read[str(qid)] = QuestionCalibration.of_json(q)
            except ConfigError as bad:
                raise ConfigError(f"questions.{qid}.{bad}") from None
        folds, seed = value.get("folds"), value.get("seed")
        if type(folds) is not int or folds < 2:
            raise ConfigError(f"folds: expected a whole number, 2 or more, got {folds!r}")
        if type(seed) is not int:
            raise ConfigError(f"seed: expected a whole number, got {seed!r}")
        return cls(_binding(value.get("bound_to")), read, folds, seed)

    def save(self, path: Path) -> None:
        """Written whole or not at all (a temporary file, then one rename)."""
        write_atomically(path, json.dumps(self.to_json(), indent=2, ensure_ascii=False) + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Calibration:
        try:
            value = json.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"calibration {path}: expected a readable file, got {exc}") from None
        except ValueError as exc:
            raise ConfigError(f"calibration {path}: expected JSON, got {exc}") from None
        return replace(cls.of_json(value, f"calibration {path}"), source=str(path))


def threshold_for(calibration: Calibration, qid: str, label: str | None = None) -> float | None:
    """The guaranteed threshold of question ``qid`` for an answer whose top option is ``label``: the
    label's own where the calibration has one, else the question's. None: no threshold met the target,
    so every answer is below it. An answer below it is one to review (``--review-below auto``) or to ask
    again of a stronger model. A calibration without a threshold for ``qid`` is a ConfigError."""
    question = calibration.questions.get(qid)
    if question is None or question.threshold is None:
        where = f" ({calibration.source})" if calibration.source else ""
        raise ConfigError(
            f"calibration{where}: expected a guaranteed threshold for question {qid!r}, got "
            f"{'no map for it' if question is None else 'none'}; fit with python -m jevper.evaluate ... "
            "--fit --target-accuracy A --risk D, or give the threshold as a number"
        )
    return question.threshold.below(label)


def loaded(given: Calibration | str | os.PathLike[str]) -> Calibration:
    """A calibration as a client option takes it: a ``Calibration``, or the path of its file."""
    if isinstance(given, Calibration):
        return given
    if isinstance(given, str | os.PathLike):
        return Calibration.load(given)
    raise ConfigError(
        f"calibration: expected a Calibration or the path of a calibration.json, got {type(given).__name__}"
    )
