"""``Calibration``: each question's calibration map, bound to the answers it was fit for.

The binding is what the map depends on: the server kind and its release, the model, the method and the
surface the answers were read with, and a digest of the prompt layout (every question's type,
instructions and options in their order). ``apply`` refuses answers bound to anything else, naming what
differs. ``calibration.json`` holds it, versioned.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from jevper import ConfigError
from jevper.evaluate._errors import CalibrationMismatchError
from jevper.evaluate._fit import Calibrator
from jevper.questions import Choice, Noul, Question, as_question, described

VERSION = 1
KIND = "jevper.calibration"


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
class QuestionCalibration:
    """One question's map: its type and options (in order), the calibrator, and each method's
    out-of-fold NLL that chose it."""

    type: str
    options: tuple[str, ...]
    calibrator: Calibrator
    scores: Mapping[str, float]


@dataclass(frozen=True)
class Calibration:
    """Per question, the calibration map chosen by held-out NLL; bound to what it was fit for."""

    bound_to: Binding
    questions: Mapping[str, QuestionCalibration]
    folds: int
    seed: int

    def check(self, bound: Binding) -> None:
        """Refuse answers bound to anything but what this was fit for, naming each field that differs."""
        differ = [f.name for f in fields(Binding) if getattr(bound, f.name) != getattr(self.bound_to, f.name)]
        if differ:
            first = differ[0]
            said = "; ".join(
                f"{name} {getattr(self.bound_to, name)!r}, got {getattr(bound, name)!r}" for name in differ
            )
            raise CalibrationMismatchError(
                f"calibration: expected answers from what it was fit for: {said}; fit a calibration "
                "for these answers (python -m jevper.evaluate ... --fit)",
                field=first,
                expected=getattr(self.bound_to, first),
                got=getattr(bound, first),
            )

    def apply(self, qid: str, probabilities: Mapping[str, float], bound: Binding) -> dict[str, float]:
        """``probabilities`` (option -> probability; a yes/no question's options are "true" and
        "false") calibrated; the result sums to 1, in the question's option order."""
        self.check(bound)
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
                }
                for qid, q in self.questions.items()
            },
        }

    @classmethod
    def of_json(cls, value: Any, where: str = "calibration") -> Calibration:
        if not isinstance(value, dict) or value.get("kind") != KIND or value.get("version") != VERSION:
            shown = (
                {"kind": value.get("kind"), "version": value.get("version")}
                if isinstance(value, dict)
                else type(value).__name__
            )
            raise ConfigError(
                f"{where}: expected a calibration ({{'kind': {KIND!r}, 'version': {VERSION}}}), got {shown}"
            )
        try:
            questions = {
                str(qid): QuestionCalibration(
                    q["type"],
                    tuple(q["options"]),
                    Calibrator.of_json(q),
                    {str(k): float(v) for k, v in q.get("held_out_nll", {}).items()},
                )
                for qid, q in value["questions"].items()
            }
            return cls(Binding(**value["bound_to"]), questions, int(value["folds"]), int(value["seed"]))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ConfigError(
                f"{where}: expected every field of a version {VERSION} calibration, got a file that "
                f"lacks or mistypes one ({type(exc).__name__}: {exc})"
            ) from None

    def save(self, path: Path) -> None:
        """Written whole or not at all (a temporary file, then one rename)."""
        write_atomically(path, json.dumps(self.to_json(), indent=2, ensure_ascii=False) + "\n")

    @classmethod
    def load(cls, path: Path) -> Calibration:
        try:
            value = json.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"calibration {path}: expected a readable file, got {exc}") from None
        except ValueError as exc:
            raise ConfigError(f"calibration {path}: expected JSON, got {exc}") from None
        return cls.of_json(value, f"calibration {path}")


def write_atomically(path: Path, text: str) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)
