"""The evaluation and its calibration on real models: the project's labelled tickets, 5-fold held out.

For each model the embedded llama.cpp b11549 serves (SmolLM2-135M, and Qwen2.5-Coder-0.5B and -1.5B,
fetched on first use), started with two slots: every row asked the three questions (logprobs over Chat
Completions), each choice asked again under every rotation of its options, and the content-free states
asked; then ``evaluate_files`` with ``fit``: accuracy, top-label ECE (15 equal-width bins) and NLL before
and held out after, and the position flip rate raw and after the label-free prior correction (and
the lowest any correction by answer position reaches on the same answers). The
evaluation's own cost: its rows/s against the server's ceiling, raw concurrent SDK calls of the very
bodies the batch core sent for a sample of rows (captured on a first pass, so both sides meet a warm
prompt cache), in alternating rounds, the faster of each kept.

Rows (ROWS): all 240 of tickets.csv for the 0.5B, every third for SmolLM2, and 720 drawn by the script
that wrote tickets.csv for the 1.5B, whose ECE has a target, the first 240 of them rotated.
``JEVPER_BENCH_CALIBRATION_MODELS=a,b`` runs those models alone and keeps the others' last runs
(artifacts/calibration/<model>/bench.json); set and empty, it renders the section from those alone.
Each model's metrics.json and report.html stay in artifacts/calibration/<model>/.
"""

from __future__ import annotations

import asyncio
import csv
import importlib.util
import json
import os
import random
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from _capturing import Capturing
from _report import ROOT, Figure, Section, load_average
from openai import OpenAI

from jevper import SystemOneClient
from jevper._atomic import write_atomically
from jevper._distribution import choice_confidence
from jevper.batch import BatchClassifier, Server
from jevper.evaluate._ask import ask, content_free, content_free_prior, rotations
from jevper.evaluate._report import html
from jevper.evaluate._run import evaluate_files, read_questions
from jevper.servers.llamacpp import SERVED_MODELS, slot_args, spawn_llamacpp

TICKETS = ROOT / "tests" / "fixtures" / "labelled" / "tickets.csv"
QUESTIONS = TICKETS.with_name("tickets.questions.json")
ARTIFACTS = ROOT / "artifacts" / "calibration"
SECTION = ("calibration", "Evaluation and calibration on real models", "scripts/bench calibration")
#: Rows asked of each model: all 240 of the 0.5B; every third one of SmolLM2, whose answers by logprobs
#: run to hundreds of tokens at times. The 1.5B, whose held-out ECE has a target, gets 720 tickets drawn
#: by the same script (make_tickets.tickets(720)): over 240 rows, a perfectly calibrated model's ECE in
#: 15 bins is itself above the target (the floor each ECE figure shows beside it).
ROWS = {"smollm2": 80, "qwen2.5-coder-0.5b": 240, "qwen2.5-coder-1.5b": 720}
#: Rows asked again under each rotation of a choice's options (the first ones; all where not named).
ROTATED_ROWS = {"qwen2.5-coder-1.5b": 240}
TARGETED = "qwen2.5-coder-1.5b"
SLOTS = 2
FOLDS = 5
METHOD, API = "logprobs", "chat_completions"
#: Rows of the ceiling's sample, and rounds of each side.
SAMPLE = {"smollm2": 24, "qwen2.5-coder-0.5b": 12, "qwen2.5-coder-1.5b": 8}
ROUNDS = 2
MAX_ECE, MAX_FLIP_SHARE, MIN_RATIO = 0.05, 0.5, 0.9
#: The option orders a choice is also scored under (option_orders=2), from the rotated runs' answers.
ORDERS = 2


def run() -> Section:
    wanted = os.environ.get("JEVPER_BENCH_CALIBRATION_MODELS")
    # Set but empty: the section rendered again from the runs kept, nothing asked.
    models = [m for m in wanted.split(",") if m] if wanted is not None else list(ROWS)
    unknown = [m for m in models if m not in ROWS]
    if unknown:
        raise ValueError(f"JEVPER_BENCH_CALIBRATION_MODELS: expected some of {list(ROWS)}, got {unknown}")
    again = [m for m in os.environ.get("JEVPER_BENCH_CALIBRATION_RESCORE", "").split(",") if m]
    for model in models:
        print(f"  {model} ...", flush=True)
        result = _rescored(model) if model in again else _model(model)
        write_atomically(ARTIFACTS / model / "bench.json", json.dumps(result, indent=1) + "\n")
    for model in [m for m in os.environ.get("JEVPER_BENCH_CALIBRATION_ORDERS_COST", "").split(",") if m]:
        print(f"  {model}: the cost of option_orders={ORDERS} ...", flush=True)
        cost = _orders_cost(model)
        write_atomically(ARTIFACTS / model / "orders-cost.json", json.dumps(cost, indent=1) + "\n")
    results = {}
    for model in ROWS:
        path = ARTIFACTS / model / "bench.json"
        if path.exists():
            results[model] = json.loads(path.read_text())
            # The figures are read from the run's metrics.json again, so a figure added since is there too.
            metrics = _metrics(ARTIFACTS / model)
            results[model]["questions"] = {qid: _figures(q) for qid, q in metrics["questions"].items()}
            for qid, q in results[model]["questions"].items():
                if q["flip"] is not None:
                    q["flip_by_position"] = _best_by_position(ARTIFACTS / model, qid)
            ordered = _in_orders(ARTIFACTS / model, ORDERS)
            if ordered is not None:
                results[model]["option_orders"] = {"orders": ORDERS, **ordered}
            live = ARTIFACTS / model / f"option-orders-{ORDERS}-live" / "metrics.json"
            if live.exists():
                asked = json.loads(live.read_text())
                choices = [
                    qid for qid, q in json.loads(QUESTIONS.read_text()).items() if q["type"] == "choice"
                ]
                results[model]["option_orders_asked"] = {
                    "orders": ORDERS,
                    "rows": asked["questions"][choices[0]]["before"]["n"] if choices else 0,
                    "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(live.stat().st_mtime)),
                    "questions": {qid: _figures(asked["questions"][qid]) for qid in choices},
                }
            cost = ARTIFACTS / model / "orders-cost.json"
            if cost.exists():
                results[model]["orders_cost"] = json.loads(cost.read_text())
    return _section(results)


def _orders_cost(model: str, rows: int = 16, rounds: int = 2) -> dict[str, Any]:
    """Seconds per row of the choice asked once and with option_orders=ORDERS: through the batch core on a
    server of SLOTS slots (every slot busy), and one call at a time through the client (the slots
    otherwise free: a caller's wait). Alternating, each round on rows no run asked before (the prompt
    cache helps within a row, as in use, not across runs), the faster round of each kept."""
    given = {"team": json.loads(QUESTIONS.read_text())["team"]}
    with (ARTIFACTS / model / "labelled.csv").open(newline="", encoding="utf-8") as f:
        table = list(csv.DictReader(f))
    need = rows * 4 * rounds
    if len(table) < need:
        raise ValueError(f"orders cost: expected {need} labelled rows of {model}, got {len(table)}")
    took: dict[int, list[float]] = {1: [], ORDERS: []}
    with spawn_llamacpp(extra_args=slot_args(SLOTS), model_alias=model) as server:
        servers = [Server(server.base_url, server.model, SLOTS)]
        chunks = iter(range(0, need, rows))
        for turn in range(rounds):
            for orders in (1, ORDERS) if turn % 2 == 0 else (ORDERS, 1):
                start = next(chunks)
                part = table[start : start + rows]
                batch = pa.record_batch({"id": [r["id"] for r in part], "state": [r["state"] for r in part]})
                core = BatchClassifier(given, servers, api=API, method=METHOD, option_orders=orders)
                t0 = time.perf_counter()
                out = core.classify_sync(batch)
                took[orders].append((time.perf_counter() - t0) / rows)
                core.close()
                if out.column("error").null_count != rows:
                    raise _Unanswered(f"option_orders={orders} left rows of the cost sample unanswered")
        # One call at a time, the server's slots otherwise free: the latency a caller sees.
        waited: dict[int, list[float]] = {1: [], ORDERS: []}
        sdk = OpenAI(base_url=server.base_url, api_key="none", max_retries=0)
        for turn in range(rounds):
            for orders in (1, ORDERS) if turn % 2 == 0 else (ORDERS, 1):
                start = next(chunks)
                client = SystemOneClient(
                    sdk, model=server.model, api=API, method=METHOD, option_orders=orders
                )
                t0 = time.perf_counter()
                for row in table[start : start + rows]:
                    client.system_one(state=row["state"], questions=given)
                waited[orders].append((time.perf_counter() - t0) / rows)
                client.close()
    once, ordered = min(took[1]), min(took[ORDERS])
    return {
        "call_seconds_once": min(waited[1]),
        "call_seconds_orders": min(waited[ORDERS]),
        "rows": rows,
        "rounds": rounds,
        "slots": SLOTS,
        "seconds_per_row_once": once,
        "seconds_per_row_orders": ordered,
        "orders": ORDERS,
        "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load": load_average(),
    }


def _in_orders(folder: Path, orders: int) -> dict[str, Any] | None:
    """The evaluation of the rotated rows as ``option_orders=orders`` answers them: each choice's answer in
    each order the mean of that order's and the next ``orders - 1`` rotations' answers (what the client
    asks and averages; tests/client/test_live_option_orders.py checks it against the client), the other
    questions as asked once; scored and fit as the run was, into ``folder/option-orders-<orders>/``.
    None where the run left no rotated answers."""
    import pyarrow.parquet as pq

    given = json.loads(QUESTIONS.read_text())
    count = len(rotations(given, read_questions(QUESTIONS)[1]))
    files = [folder / "answers.parquet"] + [
        folder / f"answers.rotated-{by}.parquet" for by in range(1, count + 1)
    ]
    if count == 0 or not all(path.exists() for path in files):
        return None
    out = folder / f"option-orders-{orders}"
    out.mkdir(exist_ok=True)
    labelled = folder / "labelled.rotated.csv"
    labelled = labelled if labelled.exists() else folder / "labelled.csv"
    with labelled.open(newline="", encoding="utf-8") as f:
        kept = {row["id"] for row in csv.DictReader(f)}
    tables = [pq.read_table(path) for path in files]
    rows = [{r["id"]: r for r in table.to_pylist() if r["id"] in kept} for table in tables]
    choices = [qid for qid, q in given.items() if q["type"] == "choice"]
    turned = []
    for start, table in enumerate(tables):
        averaged = []
        for rid, row in rows[start].items():
            row = dict(row)
            for qid in choices:
                asked = [rows[(start + k) % len(rows)][rid].get(qid) for k in range(orders)]
                if row.get(qid) is None or any(a is None for a in asked):
                    continue
                each = [dict(a["probabilities"]) for a in asked]
                mean = {o: sum(p[o] for p in each) / orders for o in each[0]}
                row[qid] = {
                    **row[qid],
                    "choice": max(mean, key=lambda o: mean[o]),
                    "probabilities": list(mean.items()),
                    "confidence": choice_confidence(list(mean.values())),
                }
            averaged.append(row)
        path = out / ("answers.parquet" if start == 0 else f"answers.rotated-{start}.parquet")
        pq.write_table(pa.Table.from_pylist(averaged, schema=table.schema), path)
        if start:
            turned.append((folder / f"questions.rotated-{start}.json", path))
    evaluation = evaluate_files(
        labelled, QUESTIONS, out / "answers.parquet", rotated=turned, fit=True, folds=FOLDS
    )
    metrics = evaluation.to_json({"labelled": str(labelled.relative_to(ROOT)), "option_orders": orders})
    write_atomically(out / "metrics.json", json.dumps(metrics, indent=2) + "\n")
    write_atomically(out / "report.html", html(metrics))
    return {"rows": len(rows[0]), "questions": {qid: _figures(metrics["questions"][qid]) for qid in choices}}


def _orders_and_answers(folder: Path, qid: str) -> list[tuple[list[str], dict[str, dict[str, float]]]]:
    """Each order a choice was asked in (the original first, then each rotation's questions file) with
    every row's distribution over its options, from the answer files the run left."""
    import pyarrow.parquet as pq

    files = [(json.loads(QUESTIONS.read_text())[qid]["criteria"], folder / "answers.parquet")]
    for by in range(1, len(files[0][0])):
        asked = json.loads((folder / f"questions.rotated-{by}.json").read_text())
        files.append((asked[qid]["criteria"], folder / f"answers.rotated-{by}.parquet"))
    out = []
    for criteria, path in files:
        rows = pq.read_table(path, columns=["id", qid]).to_pylist()
        answered = {r["id"]: dict(r[qid]["probabilities"]) for r in rows if r[qid]}
        out.append((list(criteria), answered))
    return out


def _best_by_position(folder: Path, qid: str, samples: int = 20_000, restarts: int = 12) -> float | None:
    """The lowest flip rate found for any one correction by answer position: a weight per position
    (the first fixed at 1) that every order's distribution is divided by, sought by coordinate descent
    over a grid of log-weights from the best of many random weights. Where the bias is the position's,
    the prior corrections are of this kind: a target under this rate is out of their reach. (A weight
    per option could make every answer the same one, with no flips and no use; a weight per position
    cannot, as the options move between positions.)"""
    try:
        asked = _orders_and_answers(folder, qid)
    except (OSError, KeyError):
        return None
    import numpy as np

    opts = asked[0][0]
    ids = sorted(set.intersection(*(set(answers) for _, answers in asked)))
    if not ids:
        return None
    # logp[o, i, j]: order o, row i, option j (in the original order); at[o, j]: option j's position.
    logp = np.log(np.clip([[[a[r][x] for x in opts] for r in ids] for _, a in asked], 1e-12, None))
    at = np.array([[order.index(x) for x in opts] for order, _ in asked])

    def flips(weights: Any) -> float:
        chosen = (logp - weights[at][:, None, :]).argmax(-1)
        return float((chosen[1:] != chosen[0]).mean())

    grid = np.arange(-8.0, 8.0001, 0.05)
    rng = np.random.default_rng(0)
    # Starts: no correction, and the best of many random weights (the rate is a step function of them).
    drawn = np.concatenate([np.zeros((samples, 1)), rng.normal(0, 1.5, (samples, len(opts) - 1))], axis=1)
    ranked = sorted(drawn, key=flips)
    best = flips(np.zeros(len(opts)))
    for w in [np.zeros(len(opts)), *ranked[:restarts]]:
        current = flips(w)
        improved = True
        while improved:
            improved = False
            for k in range(1, len(opts)):
                trials = np.repeat(w[None, :], len(grid), 0)
                trials[:, k] = grid
                values = [flips(t) for t in trials]
                pick = int(np.argmin(values))
                if values[pick] < current:
                    w, current, improved = trials[pick], values[pick], True
        best = min(best, current)
    return best


def _subset(model: str, folder: Path) -> Path:
    """The labelled rows asked of ``model``: every one of tickets.csv, every n-th one, or more drawn by
    the script that wrote it."""
    with TICKETS.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    if ROWS[model] > len(rows):
        rows = _script().tickets(ROWS[model])
    step = len(rows) // ROWS[model]
    return _write(folder / "labelled.csv", rows[::step][: ROWS[model]])


def _described(model: str) -> str:
    """Where ``model``'s rows came from, and which were asked again under rotations."""
    with TICKETS.open(newline="", encoding="utf-8") as f:
        kept = sum(1 for _ in csv.DictReader(f))
    n = ROWS[model]
    if n > kept:
        told = f"{n} tickets drawn by {TICKETS.with_name('make_tickets.py').relative_to(ROOT)}"
    else:
        told = f"{n} of the {kept} rows of {TICKETS.relative_to(ROOT)}"
    rotated = ROTATED_ROWS.get(model)
    return told + (f", the first {rotated} of them rotated" if rotated else ", every one rotated")


def _write(path: Path, rows: list[dict[str, str]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def _script() -> Any:
    """tests/fixtures/labelled/make_tickets.py, which wrote tickets.csv."""
    spec = importlib.util.spec_from_file_location("make_tickets", TICKETS.with_name("make_tickets.py"))
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def _model(model: str) -> dict[str, Any]:
    assert model in SERVED_MODELS
    folder = ARTIFACTS / model
    folder.mkdir(parents=True, exist_ok=True)
    labelled = _subset(model, folder)
    given, asked = read_questions(QUESTIONS)
    options = {"api": API, "method": METHOD}
    begun = time.perf_counter()
    with spawn_llamacpp(extra_args=slot_args(SLOTS), model_alias=model) as server:
        started = time.perf_counter() - begun
        servers = [Server(server.base_url, server.model, SLOTS)]
        t0 = time.perf_counter()
        asyncio.run(ask(labelled, given, servers, folder / "answers.parquet", **options))
        asking = time.perf_counter() - t0
        turned = []
        t0 = time.perf_counter()
        again = labelled
        if model in ROTATED_ROWS:
            with labelled.open(newline="", encoding="utf-8") as f:
                first = list(csv.DictReader(f))[: ROTATED_ROWS[model]]
            again = _write(folder / "labelled.rotated.csv", first)
        for by, questions in enumerate(rotations(given, asked), 1):
            path = folder / f"questions.rotated-{by}.json"
            write_atomically(path, json.dumps(questions, indent=2) + "\n")
            out = folder / f"answers.rotated-{by}.parquet"
            turned.append((path, asyncio.run(ask(again, questions, servers, out, **options))))
        rotating = time.perf_counter() - t0
        priors = asyncio.run(content_free(given, servers, folder, **options))
        try:
            core, raw, unmeasured = *_ceiling(servers, labelled, given, SAMPLE[model]), ""
        except _Unanswered as failed:
            core, raw, unmeasured = None, None, str(failed)
        provenance = {"model_name": server.model_name, "release": server.version, **server.extra}
    scoring = _score(model, folder, turned, priors)
    return {
        "model": model,
        "model_name": provenance["model_name"],
        "release": provenance["release"],
        "rows": ROWS[model],
        "labelled": _described(model),
        "wall_s": time.perf_counter() - begun,
        "start_s": started,
        "asking_s": asking,
        "rotations_s": rotating,
        "scoring_s": scoring,
        "rows_per_s": ROWS[model] / asking,
        "core_rows_per_s": core,
        "raw_rows_per_s": raw,
        "ceiling_not_measured": unmeasured,
        "sample_rows": SAMPLE[model],
        "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load": load_average(),
        "questions": {qid: _figures(q) for qid, q in _metrics(folder)["questions"].items()},
    }


def _score(model: str, folder: Path, turned: list[tuple[Path, Path]], priors: dict[str, Any]) -> float:
    """Evaluate and fit the answers kept in ``folder``; write metrics.json and report.html; the seconds
    it took."""
    t0 = time.perf_counter()
    evaluation = evaluate_files(
        folder / "labelled.csv",
        QUESTIONS,
        folder / "answers.parquet",
        rotated=turned,
        fit=True,
        folds=FOLDS,
        content_free=priors,
    )
    metrics = evaluation.to_json({"labelled": _described(model), "model": model})
    took = time.perf_counter() - t0
    write_atomically(folder / "metrics.json", json.dumps(metrics, indent=2) + "\n")
    write_atomically(folder / "report.html", html(metrics))
    return took


def _rescored(model: str) -> dict[str, Any]:
    """The kept run of ``model`` scored and fit again from the answers it left (no server): what a
    change of the evaluation or of the fits gives on the same answers."""
    folder = ARTIFACTS / model
    result: dict[str, Any] = json.loads((folder / "bench.json").read_text())
    given = json.loads(QUESTIONS.read_text())
    turned = [
        (folder / f"questions.rotated-{by}.json", folder / f"answers.rotated-{by}.parquet")
        for by in range(1, len(rotations(given, read_questions(QUESTIONS)[1])) + 1)
    ]
    priors = content_free_prior(given, folder / "content-free.answers.parquet")
    result["scoring_s"] = _score(model, folder, turned, priors)
    result["rescored"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return result


def _metrics(folder: Path) -> dict[str, Any]:
    value: dict[str, Any] = json.loads((folder / "metrics.json").read_text())
    return value


def _figures(q: dict[str, Any]) -> dict[str, Any]:
    def of(side: dict[str, Any] | None) -> dict[str, float | None]:
        if not isinstance(side, dict):
            return {"accuracy": None, "ece": None, "nll": None}
        return {"accuracy": side["accuracy"], "ece": side["ece"]["equal_width"]["value"], "nll": side["nll"]}

    bias = q.get("position_bias") or {}
    corrected = bias.get("prior_corrected") or {}
    after = q.get("after")
    return {
        "n": q["before"]["n"],
        "before": of(q["before"]),
        "after": of(after),
        "after_ece_floor": _ece_floor(after["ece"]["equal_width"]["bins"])
        if isinstance(after, dict)
        else None,
        "method": (q.get("calibration") or {}).get("method"),
        "flip": bias.get("changed"),
        "flip_corrected": corrected.get("changed"),
    }


def _ece_floor(bins: list[dict[str, Any]], draws: int = 2000) -> float:
    """The mean ECE a perfectly calibrated model would show with these bins' rows and top probabilities:
    each bin's accuracy drawn as its count of Bernoulli(top probability) answers. ECE over few rows is
    biased up. A metrics.json of version 1 named the bins' mean ``confidence``."""
    rng = random.Random(0)
    filled = [(b["count"], b.get("top_probability", b.get("confidence"))) for b in bins if b["count"]]
    n = sum(count for count, _ in filled)
    total = 0.0
    for _ in range(draws):
        for count, top in filled:
            right = sum(rng.random() < top for _ in range(count))
            total += abs(right / count - top) * count / n
    return total / draws


class _Unanswered(Exception):
    """The core's sample run left rows unanswered: its rate is not the server's work."""


def _ceiling(servers: list[Server], labelled: Path, given: dict[str, Any], rows: int) -> tuple[float, float]:
    """Rows/s of the batch core and of raw SDK calls of the same bodies, on the first ``rows`` rows."""
    with labelled.open(newline="", encoding="utf-8") as f:
        sample = list(csv.DictReader(f))[:rows]
    batch = pa.record_batch({"id": [r["id"] for r in sample], "state": [r["state"] for r in sample]})
    capturing = Capturing(given, servers, api=API, method=METHOD)
    capturing.sent = []
    capturing.classify_sync(batch)
    capturing.close()
    bodies = [json.loads(body) for body in capturing.sent]
    core_runs, raw_runs = [], []
    for _ in range(ROUNDS):
        core = BatchClassifier(given, servers, api=API, method=METHOD)
        t0 = time.perf_counter()
        out = core.classify_sync(batch)
        core_runs.append(rows / (time.perf_counter() - t0))
        core.close()
        if out.column("error").null_count != rows:
            failed = rows - out.column("error").null_count
            raise _Unanswered(
                f"the core left {failed} of the {rows} sample rows unanswered, so no rate compares"
            )
        raw_runs.append(_raw_rate(servers[0], bodies, rows))
    return max(core_runs), max(raw_runs)


def _raw_rate(server: Server, bodies: list[dict[str, Any]], rows: int) -> float:
    from openai import AsyncOpenAI

    async def main() -> float:
        sdk = AsyncOpenAI(base_url=server.base_url, api_key="none", max_retries=0)
        queue = iter(bodies)

        async def work() -> None:
            for body in queue:
                await sdk.post("/chat/completions", body=body, cast_to=object)

        t0 = time.perf_counter()
        await asyncio.gather(*(work() for _ in range(server.slots)))
        took = time.perf_counter() - t0
        await sdk.close()
        return rows / took

    return asyncio.run(main())


def _seconds(found: dict[str, Any], key: str) -> str:
    return f"{found[key]:.2f} s" if key in found else "not measured"


def _f(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def _section(results: dict[str, dict[str, Any]]) -> Section:
    table = [
        [
            "Model",
            "Rows answered of asked",
            "Question",
            "Accuracy before → after",
            "ECE before → after",
            "NLL before → after",
            "Chosen",
            "Flip rate raw → corrected",
            "Measured",
        ]
    ]
    figures = []
    for model, r in results.items():
        measured = r["measured"] + (f" (fit again {r['rescored']})" if r.get("rescored") else "")
        table += [_row(model, r["rows"], qid, q, measured) for qid, q in r["questions"].items()]
        for key, suffix, how in (
            ("option_orders", "", "derived from its rotated runs"),
            ("option_orders_asked", ", asked", "asked"),
        ):
            ordered = r.get(key)
            if ordered is None:
                continue
            label = f"{model}, option_orders={ordered['orders']}{suffix}"
            when = f"{ordered.get('measured', r['measured'])} ({how})"
            table += [_row(label, ordered["rows"], qid, q, when) for qid, q in ordered["questions"].items()]
        figures += _model_figures(model, r)
    notes = [
        "Every row asked the three questions of tests/fixtures/labelled/tickets.questions.json by logprobs "
        f"over Chat Completions on llama.cpp b11549 ({SLOTS} slots); 'after' is held out ({FOLDS}-fold: "
        "each fold calibrated by the method an inner cross-validation chose on the other folds); 'Chosen' "
        "is the method fit on all rows. The flip rate is the share of answers to the team question that "
        "change when its four options are rotated, raw and after the label-free prior correction; beside "
        "it, the lowest rate any one correction by answer position was found to reach on the same answers "
        "(sought on those very answers, so a correction fit elsewhere is not expected to do better). "
        f"Rows: {'; '.join(f'{m}: {_rows_of(r)}' for m, r in results.items())}. A row with an answer that "
        "could not be read is left out of the figures ('Rows answered of asked'): under logprobs SmolLM2 "
        "often began with prose ('The answer ...'), a LabelReadoutError. Each model's metrics.json "
        "and report.html are in artifacts/calibration/<model>/. 'fit again': the answers of that run "
        "scored and calibrated anew, no server asked (JEVPER_BENCH_CALIBRATION_RESCORE=<model>).",
        f"'option_orders={ORDERS}': the rotated rows as a client with option_orders={ORDERS} answers them, "
        f"{ORDERS} requests per choice where one was asked: each order's answer the mean of that order's and "
        "the next rotation's answers, taken from the rotated runs, which asked each order once "
        "(tests/client/test_live_option_orders.py checks the client's answer against that mean on the "
        "embedded server); the yes/no and the score are asked once either way, so only the choice's rows "
        "are shown. Its figures are in artifacts/calibration/<model>/option-orders-2/. 'option_orders=2, "
        "asked': the same rows asked so by python -m jevper.evaluate --spawn --option-orders 2 --rotations "
        "--fit (each rotation of the options itself asked in two orders), in option-orders-2-live/.",
    ]
    return Section(
        key=SECTION[0], title=SECTION[1], command=SECTION[2], figures=figures, notes=notes, table=table
    )


def _row(label: str, rows: int, qid: str, q: dict[str, Any], measured: str) -> list[str]:
    """One line of the section's table: a question's figures before and after."""
    b, a = q["before"], q["after"]
    flip = "—" if q["flip"] is None else f"{_f(q['flip'])} → {_f(q['flip_corrected'])}"
    return [
        label,
        f"{q['n']} of {rows}",
        qid,
        f"{_f(b['accuracy'])} → {_f(a['accuracy'])}",
        f"{_f(b['ece'])} → {_f(a['ece'])}",
        f"{_f(b['nll'])} → {_f(a['nll'])}",
        str(q["method"]),
        flip,
        measured,
    ]


def _rows_of(r: dict[str, Any]) -> str:
    """What a kept run says of its rows (a run from before it said so: its count of tickets.csv's)."""
    return str(r.get("labelled") or f"{r['rows']} rows of {TICKETS.relative_to(ROOT)}, every one rotated")


def _model_figures(model: str, r: dict[str, Any]) -> list[Figure]:
    load = r["load"]
    rest = r["wall_s"] - r["start_s"] - r["asking_s"] - r["rotations_s"] - r["scoring_s"]
    asked = f"the whole evaluation asked {r['rows']} rows at {r['rows_per_s']:.2f} rows/s"
    if r["core_rows_per_s"] is None:
        ceiling = Figure(
            f"calibration {model}: evaluation rows/s vs the server's ceiling",
            None,
            "x",
            f">= {MIN_RATIO}",
            None,
            load,
            f"{r['ceiling_not_measured']}; {asked}",
            r["measured"],
        )
    else:
        ratio = r["core_rows_per_s"] / r["raw_rows_per_s"]
        ceiling = Figure(
            f"calibration {model}: evaluation rows/s vs the server's ceiling",
            ratio,
            "x",
            f">= {MIN_RATIO}",
            ratio >= MIN_RATIO,
            load,
            f"core {r['core_rows_per_s']:.2f} rows/s, raw SDK calls of the same bodies "
            f"{r['raw_rows_per_s']:.2f} rows/s, on {r['sample_rows']} rows, best of {ROUNDS} rounds each; "
            f"{asked}",
            r["measured"],
        )
    figures = [
        ceiling,
        Figure(
            f"calibration {model}: wall time",
            r["wall_s"],
            "s",
            "",
            None,
            load,
            f"start {r['start_s']:.0f} s, {r['rows']} rows asked {r['asking_s']:.0f} s, rotations "
            f"{r['rotations_s']:.0f} s, the content-free states and the ceiling's sample {rest:.0f} s, "
            f"scoring and the 5-fold fit {r['scoring_s']:.1f} s",
            r["measured"],
        ),
    ]
    if model != TARGETED:
        return figures
    for qid, q in r["questions"].items():
        ece = q["after"]["ece"]
        figures.append(
            Figure(
                f"calibration {model}: {qid} held-out ECE",
                ece,
                "",
                f"<= {MAX_ECE}",
                None if ece is None else ece <= MAX_ECE,
                load,
                f"before {_f(q['before']['ece'])}, {q['n']} rows; a perfectly calibrated model with the "
                f"same bins' rows and confidences would show {_f(q.get('after_ece_floor'))} at this size "
                "(the mean of 2,000 draws)",
                r["measured"],
            )
        )
        if q["flip"]:
            share = (q["flip_corrected"] or 0.0) / q["flip"]
            figures.append(
                Figure(
                    f"calibration {model}: {qid} flip rate corrected / raw",
                    share,
                    "x",
                    f"<= {MAX_FLIP_SHARE}",
                    share <= MAX_FLIP_SHARE,
                    load,
                    f"{_f(q['flip'])} raw, {_f(q['flip_corrected'])} after the prior correction; the "
                    "lowest any one correction by answer position was found to reach on the same answers "
                    f"{_f(q.get('flip_by_position'))} (a search over a weight per position)",
                    r["measured"],
                )
            )
        cost = r.get("orders_cost")
        if cost and qid == "team":
            ratio = cost["seconds_per_row_orders"] / cost["seconds_per_row_once"]
            figures.append(
                Figure(
                    f"calibration {model}: {qid} seconds with option_orders={cost['orders']} / asked once",
                    ratio,
                    "x",
                    "",
                    None,
                    cost["load"],
                    f"{cost['seconds_per_row_orders']:.2f} s against {cost['seconds_per_row_once']:.2f} s "
                    f"per row of the choice alone, through the batch core on {cost['slots']} slots; one "
                    f"call at a time, {_seconds(cost, 'call_seconds_orders')} against "
                    f"{_seconds(cost, 'call_seconds_once')} per call; "
                    f"{cost['rows']} rows a run, each run on rows not asked before, the faster of "
                    f"{cost['rounds']} alternating runs each (JEVPER_BENCH_CALIBRATION_ORDERS_COST={model})",
                    cost["measured"],
                )
            )
        # Asked with option_orders where that run was made; else derived from the rotated runs.
        source = r.get("option_orders_asked") or r.get("option_orders") or {}
        ordered = source.get("questions", {}).get(qid)
        how = "asked so" if "option_orders_asked" in r else "derived from the rotated runs"
        if q["flip"] and ordered and ordered["flip_corrected"] is not None:
            share = ordered["flip_corrected"] / q["flip"]
            figures.append(
                Figure(
                    f"calibration {model}: {qid} flip rate with option_orders={ORDERS} corrected / raw",
                    share,
                    "x",
                    f"<= {MAX_FLIP_SHARE}",
                    share <= MAX_FLIP_SHARE,
                    load,
                    f"{_f(q['flip'])} raw, asked once; with option_orders={ORDERS} ({ORDERS} requests for "
                    f"the choice where one), {_f(ordered['flip'])} raw and {_f(ordered['flip_corrected'])} "
                    f"after the prior correction; accuracy {_f(ordered['before']['accuracy'])} before, "
                    f"{_f(ordered['after']['accuracy'])} held out after, on the "
                    f"{source['rows']} rotated rows ({how})",
                    source.get("measured", r["measured"]),
                )
            )
    return figures
