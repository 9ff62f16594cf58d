"""The evaluation's errors: both are ``ConfigError``s (the command line exits 2 on them): the questions may
be fine; the files and the calibration around them are not.

``LabelError``: the labelled table, the questions or the answers do not fit together (a missing gold
column, a gold value that is not an option, ids that do not match). ``CalibrationMismatchError``: a
calibration applied to answers it was not fit for; ``field`` names what differs.
"""

from __future__ import annotations

from jevper import ConfigError


class LabelError(ConfigError):
    """The labels, the questions and the answers do not fit together; says what was expected and what
    arrived."""


class CalibrationMismatchError(ConfigError):
    """A calibration was fit for other answers than these: ``field`` differs (``expected`` is what it was
    fit for, ``got`` what it is applied to)."""

    def __init__(self, message: str, *, field: str, expected: object, got: object) -> None:
        super().__init__(message)
        self.field = field
        self.expected = expected
        self.got = got
