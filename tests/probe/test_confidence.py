"""Which `confidence` a server means: its figure against the five formulas, per question type; and the
SDK versions a recording was graded with, in results.json and on the page."""

from __future__ import annotations

import importlib.metadata
import math

import markupsafe
import pytest

from jevper.probe import confidence
from jevper.probe.cassettes import load_exchanges
from jevper.probe.recording import Layout
from jevper.probe.reports import generate

LAYOUT = Layout.repository()
SHARES = [0.7, 0.2, 0.1]
ENTROPY = 1 + sum(p * math.log(p) for p in SHARES) / math.log(3)
FIGURES = {
    confidence.TYPESAFE: (0.7 - 1 / 3) / (1 - 1 / 3),
    confidence.TOP: 0.7,
    confidence.VOCABULARY: 0.7 * 0.9,
    confidence.ENTROPY: ENTROPY,
    confidence.MARGIN: 0.5,
}


def choice(figure: float) -> dict[str, object]:
    probabilities = dict(zip(("billing", "shipping", "technical"), SHARES, strict=True))
    return {"type": "choice", "probabilities": probabilities, "confidence": figure, "label_mass": 0.9}


@pytest.mark.parametrize("formula", confidence.FORMULAS)
def test_a_figure_made_by_one_formula_matches_that_formula_alone(formula: str) -> None:
    assert confidence.matches([choice(FIGURES[formula])]) == {"choice": [formula]}


def test_a_figure_no_formula_makes_matches_none_and_a_type_keeps_what_all_its_answers_match() -> None:
    assert confidence.matches([choice(0.42)]) == {"choice": []}
    both = [choice(FIGURES[confidence.TOP]), choice(FIGURES[confidence.MARGIN])]
    assert confidence.matches(both) == {"choice": []}
    assert "none of the five formulas" in confidence.describe({"choice": []})


def test_the_vocabulary_formula_needs_the_label_mass_the_answer_reports() -> None:
    answer = {k: v for k, v in choice(FIGURES[confidence.VOCABULARY]).items() if k != "label_mass"}
    assert confidence.matches([answer]) == {"choice": []}
    answer["diagnostics"] = {"label_mass": 0.9}
    assert confidence.matches([answer]) == {"choice": [confidence.VOCABULARY]}


def test_the_gateways_recorded_answers_use_typesafes_confidence_for_choices_and_scores() -> None:
    exchanges = load_exchanges(LAYOUT.load("jevper-0.1.0").cassette("systemone-route"))
    answers = exchanges[-1].json()["answers"]
    assert confidence.matches(list(answers.values())) == {
        "choice": [confidence.TYPESAFE],
        "score": [confidence.TYPESAFE],
    }


def test_results_and_the_page_name_the_sdk_versions_that_graded_the_answers() -> None:
    openai = importlib.metadata.version("openai")
    files = generate(LAYOUT)
    page = files[LAYOUT.reports_dir / "index.html"]
    for recording in LAYOUT.recordings():
        assert recording.graded_with["openai"] == openai, recording.key
        assert recording.to_json()["graded_with"] == dict(recording.graded_with)
    assert str(markupsafe.escape(f"graded with openai {openai}")) in page
    assert f"graded with openai {openai}" in files[LAYOUT.reports_dir / "capabilities.md"]
