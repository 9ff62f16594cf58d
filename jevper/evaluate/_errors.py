"""The evaluation's errors: both are ``ConfigError``s (the command line exits 2 on them): the questions may
be fine; the files and the calibration around them are not.

``LabelError``: the labelled table, the questions or the answers do not fit together (a missing gold
column, a gold value that is not an option, ids that do not match). ``CalibrationMismatchError``: a
calibration applied to answers it was not fit for; ``field`` names what differs (defined with the
client's errors, since the clients apply calibrations too).
"""

from __future__ import annotations

from jevper import ConfigError
from jevper._errors import CalibrationMismatchError

__all__ = ["CalibrationMismatchError", "LabelError"]


class LabelError(ConfigError):
    """The labels, the questions and the answers do not fit together; says what was expected and what
    arrived."""
