"""`jevper.evaluate`: how often the answers are right, whether their top probability means what it says, and a
calibration that makes it.

``evaluate_files`` (and ``python -m jevper.evaluate``) scores a batch's answers against a labelled table;
``evaluate`` does the same from distributions in hand. With ``fit=True`` each question gets the
calibration chosen by held-out NLL, as a ``Calibration`` bound to the answers it was fit for
(``Binding``); ``Calibration.apply`` refuses others with a ``CalibrationMismatchError``. With ``risk``, each
question's guaranteed threshold (``choose_threshold``: Learn-then-Test over the top probability). The
metrics are plain functions of (distributions, gold indices). docs/calibration.md says more.
"""

from jevper.servers.console import extra_required

with extra_required("jevper.evaluate", "batch"):
    from jevper.evaluate._calibration import Binding, Calibration, QuestionCalibration, prompt_digest
    from jevper.evaluate._errors import CalibrationMismatchError, LabelError
    from jevper.evaluate._evaluation import Evaluation, Figures, evaluate, figures
    from jevper.evaluate._fit import Calibrator, fit, fit_platt, fit_temperature, mean_prior
    from jevper.evaluate._guarantee import Chosen, choose_threshold, lower_bound
    from jevper.evaluate._labels import Labelled
    from jevper.evaluate._metrics import (
        accuracy,
        brier,
        expected_level_mae,
        nll,
        reliability,
        selective,
    )
    from jevper.evaluate._position import Asked, PositionBias, position_bias, rotated
    from jevper.evaluate._run import evaluate_files


__all__ = [
    "Asked",
    "Binding",
    "Calibration",
    "CalibrationMismatchError",
    "Calibrator",
    "Chosen",
    "Evaluation",
    "Figures",
    "LabelError",
    "Labelled",
    "PositionBias",
    "QuestionCalibration",
    "accuracy",
    "brier",
    "choose_threshold",
    "evaluate",
    "evaluate_files",
    "expected_level_mae",
    "figures",
    "fit",
    "fit_platt",
    "fit_temperature",
    "lower_bound",
    "mean_prior",
    "nll",
    "position_bias",
    "prompt_digest",
    "reliability",
    "rotated",
    "selective",
]
