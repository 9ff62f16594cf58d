"""``Calibration`` and its binding, as the clients apply them: defined in ``jevper.calibration`` (the client
layer, which the clients, the batch and the gateway use), named here for the evaluation's modules."""

from jevper.calibration import (
    KIND,
    VERSION,
    Binding,
    Calibration,
    QuestionCalibration,
    prompt_digest,
)

__all__ = [
    "KIND",
    "VERSION",
    "Binding",
    "Calibration",
    "QuestionCalibration",
    "prompt_digest",
]
