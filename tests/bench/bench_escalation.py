"""Escalation on real models: Qwen2.5-Coder-0.5B first, 1.5B second, on the project's labelled tickets.

Both served by the embedded llama.cpp b11549 (two slots each, on this machine's cores together), every
question asked by logprobs over Chat Completions. The 240 tickets are split in two: the even rows fit
each model's calibration (``python -m jevper.evaluate --fit``, with guaranteed thresholds at a target
accuracy TARGET and risk RISK, per label), the odd rows are scored. Each model first answers every ticket
alone (its accuracy, requests and time); the curve then holds, for each threshold P, what escalation
gives on the scored rows: a question whose calibrated top probability on the 0.5B is below P takes the
1.5B's calibrated answer. Each question is one request of its own on these surfaces, the same request
whether asked alone or with the others, so the curve's answers are those both models gave; its cost is
the 0.5B's requests for every question plus one 1.5B request per question escalated, and its time each
model's measured time per question. At CHECKED, the batch is run for real with ``escalate=`` on the
scored rows, and its accuracy, share, requests and time stand beside the curve's. Files in
artifacts/escalation/; ``JEVPER_BENCH_ESCALATION_RENDER=1`` renders the section again from the last run's
bench.json there, asking nothing.
"""

from __future__ import annotations

import asyncio
import csv
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _report import ROOT, Figure, Section, load_average, now

from jevper import Escalation
from jevper._atomic import write_atomically
from jevper._escalate import AUTO, Below, Verdict
from jevper.batch import BatchClassifier, Server
from jevper.batch._answers import probabilities_of
from jevper.batch._files import Input
from jevper.batch._local import run as run_local
from jevper.calibration import Calibration, threshold_for
from jevper.servers.llamacpp import slot_args, spawn_llamacpp

TICKETS = ROOT / "tests" / "fixtures" / "labelled" / "tickets.csv"
QUESTIONS = TICKETS.with_name("tickets.questions.json")
ARTIFACTS = ROOT / "artifacts" / "escalation"
SECTION = ("escalation", "Escalation: Qwen2.5-Coder-0.5B first, 1.5B second", "scripts/bench escalation")
FIRST, SECOND = "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"
SLOTS = 2
METHOD, API = "logprobs", "chat_completions"
#: The thresholds of the curve, and the one the batch is run at for real.
BELOW: tuple[Below, ...] = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, "auto")
CHECKED: Below = 0.8
#: The guaranteed thresholds' target (``auto``), fit on the even rows.
TARGET, RISK = 0.8, 0.1
#: The labels' columns, by question.
GOLD = {"team": "team", "angry": "angry", "urgency": "urgency"}


def run() -> Section:
    if os.environ.get("JEVPER_BENCH_ESCALATION_RENDER"):
        kept = json.loads((ARTIFACTS / "bench.json").read_text())
        kept["checked"].update(_compared(list(json.loads(QUESTIONS.read_text()))))
        return _section(kept)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    questions = json.loads(QUESTIONS.read_text())
    with TICKETS.open(newline="", encoding="utf-8") as f:
        table = list(csv.DictReader(f))
    fit, scored = table[0::2], table[1::2]
    for name, rows in (("fit", fit), ("scored", scored), ("all", table)):
        _write_csv(ARTIFACTS / f"{name}.csv", rows)
    alone: dict[str, dict[str, Any]] = {}
    with (
        spawn_llamacpp(extra_args=slot_args(SLOTS), model_alias=FIRST) as small,
        spawn_llamacpp(extra_args=slot_args(SLOTS), model_alias=SECOND) as large,
    ):
        spawned = {FIRST: small, SECOND: large}
        for model, server in spawned.items():
            print(f"  {model} alone, {len(table)} tickets ...", flush=True)
            alone[model] = _alone(model, server, questions)
            _fit(model)
        print(f"  escalation at {CHECKED}, {len(scored)} tickets, for real ...", flush=True)
        checked = _escalated(small, large, questions)
    checked.update(_compared(list(questions)))
    result = {
        "measured": now(),
        "load": load_average(),
        "alone": alone,
        "curve": _curve(questions, scored, alone),
        "checked": checked,
        "scored_rows": len(scored),
        "fit_rows": len(fit),
    }
    write_atomically(ARTIFACTS / "bench.json", json.dumps(result, indent=1) + "\n")
    return _section(result)


def _write_csv(path: Path, rows: list[dict[str, str]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _classifier(server: Any, questions: dict[str, Any], **settings: Any) -> BatchClassifier:
    return BatchClassifier(
        questions, [Server(server.base_url, server.model, SLOTS)], api=API, method=METHOD, **settings
    )


def _alone(model: str, server: Any, questions: dict[str, Any]) -> dict[str, Any]:
    """Every ticket asked of ``model`` alone: the answers' file (with its provenance), requests, time."""
    output = ARTIFACTS / f"{model}.parquet"
    output.unlink(missing_ok=True)
    classifier = _classifier(server, questions)
    stated = {"server_kind": server.server, "server_release": server.version}
    started = time.perf_counter()
    tally = asyncio.run(run_local(classifier, Input(ARTIFACTS / "all.csv"), output, server=stated))
    seconds = time.perf_counter() - started
    asked = tally.done * len(questions)
    return {
        "rows": tally.done,
        "errors": sum(tally.errors.values()),
        "requests": classifier.requests_sent,
        "seconds": seconds,
        "seconds_per_question": seconds / asked,
        "requests_per_question": classifier.requests_sent / asked,
    }


def _fit(model: str) -> None:
    """The model's calibration, fit on the even rows, with guaranteed thresholds per label."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "jevper.evaluate",
            str(ARTIFACTS / "fit.csv"),
            "--questions",
            str(QUESTIONS),
            "--answers",
            str(ARTIFACTS / f"{model}.parquet"),
            "--out",
            str(ARTIFACTS / f"fit-{model}"),
            "--replace",
            "--fit",
            "--server",
            "llamacpp",
            "--release",
            "b11549",
            "--target-accuracy",
            str(TARGET),
            "--risk",
            str(RISK),
            "--per-label",
        ],
        check=True,
        cwd=ROOT,
    )


def _calibration(model: str) -> Calibration:
    return Calibration.load(ARTIFACTS / f"fit-{model}" / "calibration.json")


def _answers(model: str, qids: list[str]) -> dict[str, dict[str, dict[str, float] | None]]:
    """Each row's calibrated distribution per question (None where it has no answer), by id."""
    import pyarrow.parquet as pq

    calibration = _calibration(model)
    found: dict[str, dict[str, dict[str, float] | None]] = {}
    for row in pq.read_table(ARTIFACTS / f"{model}.parquet").to_pylist():
        found[str(row["id"])] = {}
        for qid in qids:
            given = probabilities_of(row, qid)
            found[str(row["id"])][qid] = None if given is None else calibration.mapped(qid, given)
    return found


def _top(p: dict[str, float]) -> tuple[str, float]:
    label = max(p, key=lambda option: p[option])
    return label, p[label] / math.fsum(p.values())


def _verdict(calibration: Calibration, qid: str, p: dict[str, float], below: Below) -> Verdict:
    """The rule of ``jevper._escalate.verdict`` on a distribution read back from a file (a yes/no
    answer's options "true" and "false", a score's levels "0", "1", ...)."""
    label, confidence = _top(p)
    return Verdict(confidence, threshold_for(calibration, qid, label) if below == AUTO else float(below))


def _given(
    first: dict[str, float] | None,
    second: dict[str, float] | None,
    calibration: Calibration,
    qid: str,
    below: Below | str | None,
) -> tuple[str | None, bool]:
    """The label given for one question and whether it was escalated (None: never; "all": always)."""
    if below == "all":
        up = True
    elif below is None or first is None:
        up = False
    else:
        up = _verdict(calibration, qid, first, below).escalated  # type: ignore[arg-type]
    given = second if up and second is not None else first
    return (None if given is None else _top(given)[0]), up


def _curve(
    questions: dict[str, Any], scored: list[dict[str, str]], alone: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    qids = list(questions)
    small, large = _answers(FIRST, qids), _answers(SECOND, qids)
    calibration = _calibration(FIRST)
    n = len(scored) * len(qids)
    points = []
    # Each point: its label and what escalates (None: nothing, the 0.5B alone; "all": the 1.5B alone).
    plan: list[tuple[str, Below | str | None]] = [
        ("0.5B alone", None),
        *((str(b) if b == AUTO else f"{b:g}", b) for b in BELOW),
        ("1.5B alone", "all"),
    ]
    a, b = alone[FIRST], alone[SECOND]
    for label, below in plan:
        right = escalated = 0
        per_question = dict.fromkeys(qids, 0)
        for row in scored:
            for qid in qids:
                given, up = _given(small[row["id"]][qid], large[row["id"]][qid], calibration, qid, below)
                escalated += up
                hit = given == row[GOLD[qid]]
                right += hit
                per_question[qid] += hit
        first_cost = 0.0 if below == "all" else 1.0
        points.append(
            {
                "below": label,
                "accuracy": right / n,
                "per_question": {qid: per_question[qid] / len(scored) for qid in qids},
                "share": escalated / n,
                "requests": first_cost * n * a["requests_per_question"]
                + escalated * b["requests_per_question"],
                "seconds": first_cost * n * a["seconds_per_question"] + escalated * b["seconds_per_question"],
            }
        )
    return points


def _escalated(small: Any, large: Any, questions: dict[str, Any]) -> dict[str, Any]:
    """The scored rows through the batch with ``escalate=`` at CHECKED, for real: accuracy, share of
    questions asked again, requests and time."""
    import pyarrow.parquet as pq

    output = ARTIFACTS / f"escalated-{CHECKED}.parquet"
    output.unlink(missing_ok=True)
    target = Server(large.base_url, large.model, SLOTS)
    second = ARTIFACTS / f"fit-{SECOND}" / "calibration.json"
    classifier = _classifier(
        small,
        questions,
        calibration=ARTIFACTS / f"fit-{FIRST}" / "calibration.json",
        escalate=Escalation(target, CHECKED, second),
    )
    stated = {"server_kind": small.server, "server_release": small.version}
    started = time.perf_counter()
    tally = asyncio.run(run_local(classifier, Input(ARTIFACTS / "scored.csv"), output, server=stated))
    seconds = time.perf_counter() - started
    with (ARTIFACTS / "scored.csv").open(newline="", encoding="utf-8") as f:
        gold = {row["id"]: row for row in csv.DictReader(f)}
    # The answers the curve takes at CHECKED, to hold the real run's to.
    qids = list(questions)
    small, large, calibration = _answers(FIRST, qids), _answers(SECOND, qids), _calibration(FIRST)
    right = asked = same = 0
    for row in pq.read_table(output).to_pylist():
        rid = str(row["id"])
        for qid in qids:
            asked += 1
            given = probabilities_of(row, qid)
            label = None if given is None else _top(given)[0]
            right += label == gold[rid][GOLD[qid]]
            same += label == _given(small[rid][qid], large[rid][qid], calibration, qid, CHECKED)[0]
    return {
        "below": CHECKED,
        "rows": tally.done,
        "errors": sum(tally.errors.values()),
        "accuracy": right / asked,
        "same_as_curve": same,
        "answers": asked,
        "share": classifier.escalated / asked,
        "escalation_failures": classifier.escalation_failures,
        "requests": classifier.requests_sent,
        "second_requests": classifier.escalation_requests_sent,
        "seconds": seconds,
    }


def _compared(qids: list[str]) -> dict[str, int]:
    """How the run for real's two answers to each question compare with each model's alone: how many
    differ by more than 1e-6 in some probability, and how many escalation verdicts fell the other way."""
    import pyarrow.parquet as pq

    small, large = _answers(FIRST, qids), _answers(SECOND, qids)
    first_moved = second_moved = turned = 0
    for row in pq.read_table(ARTIFACTS / f"escalated-{CHECKED}.parquet").to_pylist():
        rid = str(row["id"])
        for qid in qids:
            route = row["escalation"][qid]
            first, alone = probabilities_of({qid: route["first"]}, qid), small[rid][qid]
            if first is None or alone is None:
                first_moved += 1
                continue
            first_moved += max(abs(first[k] - alone[k]) for k in alone) > 1e-6
            turned += (route["confidence"] < float(CHECKED)) != (_top(alone)[1] < float(CHECKED))
            second, by_itself = probabilities_of({qid: route["second"]}, qid), large[rid][qid]
            if second is not None and by_itself is not None:
                second_moved += max(abs(second[k] - by_itself[k]) for k in by_itself) > 1e-6
    return {"first_moved": first_moved, "second_moved": second_moved, "turned": turned}


def _section(result: dict[str, Any]) -> Section:
    table = [["P (escalate below)", "Accuracy", "team / angry / urgency", "Escalated", "Requests", "Time"]]
    figures = []
    load = result["load"]
    for point in result["curve"]:
        label = point["below"]
        per = " / ".join(f"{v:.3f}" for v in point["per_question"].values())
        table.append(
            [
                label,
                f"{point['accuracy']:.3f}",
                per,
                "—" if label.endswith("alone") else f"{point['share']:.1%}",
                f"{point['requests']:.0f}",
                f"{point['seconds']:.0f} s",
            ]
        )
        cost = f"{point['requests']:.0f} requests, {point['seconds']:.0f} s"
        detail = (
            f"the {label.removesuffix(' alone')} alone: {cost} at its measured time per question"
            if label.endswith("alone")
            else f"{point['share']:.1%} of the questions escalated, {cost} at each model's measured time "
            "per question"
        )
        figures.append(Figure(f"escalation {label}: accuracy", point["accuracy"], "", "", None, load, detail))
    c = result["checked"]
    figures.append(
        Figure(
            f"escalation {c['below']:g}, run for real: accuracy",
            c["accuracy"],
            "",
            "",
            None,
            load,
            f"{c['share']:.1%} of the questions escalated, {c['requests']} requests "
            f"({c['second_requests']} to the 1.5B, {c['escalation_failures']} failed there), "
            f"{c['seconds']:.0f} s, {c['rows']} rows, {c['errors']} row errors; {c['same_as_curve']} of its "
            f"{c['answers']} answers the curve's at {c['below']:g}",
        )
    )
    table.append(
        [
            f"{c['below']:g}, run for real",
            f"{c['accuracy']:.3f}",
            "",
            f"{c['share']:.1%}",
            str(c["requests"]),
            f"{c['seconds']:.0f} s",
        ]
    )
    a, b = result["alone"][FIRST], result["alone"][SECOND]
    notes = [
        f"The {result['scored_rows']} odd rows of tests/fixtures/labelled/tickets.csv scored, each with its "
        f"three questions (accuracy over all {3 * result['scored_rows']} answers, and per question); the "
        f"{result['fit_rows']} even rows fit each model's calibration (python -m jevper.evaluate --fit, "
        f"guaranteed thresholds at --target-accuracy {TARGET} --risk {RISK} --per-label, which 'auto' "
        "uses). Both models answer calibrated; a question is escalated when the 0.5B's calibrated top "
        "probability is below P. Logprobs over Chat Completions, llama.cpp b11549, two slots per server, "
        "both servers on the machine's two cores.",
        f"Each model alone asked all {a['rows']} tickets: the 0.5B {a['requests']} requests in "
        f"{a['seconds']:.0f} s, the 1.5B {b['requests']} in {b['seconds']:.0f} s. A curve point's requests "
        "and time are the 0.5B's per question for every question plus the 1.5B's per question for each one "
        "escalated (each question is its own request, the same asked alone or with the others, so the "
        "curve's answers are those both models gave). The row 'run for real' is the batch with escalate= on "
        "the scored rows (the two servers then busy at once on two cores), its answers read back from its "
        "output.",
        f"Row errors: the 0.5B alone left {a['errors']} of its {a['rows']} rows unanswered (each such row's "
        "three answers count as wrong and are never escalated in the curve), the 1.5B alone "
        f"{b['errors']}, the run for real {c['errors']}. The run for real gave "
        f"{c['same_as_curve']} of its {c['answers']} answers as the curve does at {c['below']:g}: the same "
        "requests asked again were not answered with the same numbers (its 0.5B answers differ from the "
        f"0.5B alone's in {c.get('first_moved', '?')} of {c['answers']} by more than 1e-6 in some "
        f"probability, its 1.5B answers from the 1.5B alone's in {c.get('second_moved', '?')} of "
        f"{c['second_requests']} asked again), which put {c.get('turned', '?')} answers on the other side "
        "of the threshold and some near-ties on the other label, and read the rows the 0.5B alone could "
        "not. Its time is above the curve's estimate because its two "
        "servers shared the two cores; on two machines, each model's time per question holds.",
    ]
    return Section(
        key=SECTION[0],
        title=SECTION[1],
        command=SECTION[2],
        figures=figures,
        notes=notes,
        table=table,
        measured_at=result["measured"],
    )
