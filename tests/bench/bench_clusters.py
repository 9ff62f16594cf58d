"""The batch on real clusters and the gateway as replicas, against the servers' ceiling.

Run inside a network namespace with loopback alone (``unshare -n``, so root), as scripts/cluster runs the
cluster tests: ``run`` starts this file again there with ``--inside FILE``, which measures and writes its
figures to FILE. The clusters, the kills and the replicas are the cluster tests' own (tests/cluster:
``_ray_nodes``, ``_spark_nodes``, ``_replicas``). On two embedded llama.cpp servers (SmolLM2, four slots
on one thread each, as the cluster tests start them), the same ROWS labelled tickets (the 240 of
tests/fixtures/labelled/tickets.csv, then more drawn by its make_tickets.py) with the ``team`` question:

- the servers' ceiling: the very request bodies jevper sends, posted straight to the two servers with
  every slot busy, measured right before each engine's run (the machine is shared);
- the command line on the local engine, on the Ray cluster (``ray start``: a head, two worker nodes of
  one CPU) and on the Spark standalone cluster (a master, two one-core workers): each run's rate, its
  share of the ceiling measured before it, and the seconds it took beyond the ceiling's time for the
  same rows (the engine's and the cluster's own overhead); the answers of the three asserted the same
  choice per row;
- a Ray job whose worker node is killed and a spark-submit job whose executor is killed, each after
  KILL_AT requests: rows lost, rows written twice, requests asked again, seconds from the kill to the end;
- three gateway replicas behind HAProxy, one SIGKILLed under load (``_replicas``: its scripted upstream):
  requests lost, upstream requests made twice, client retries, and how long the requests in flight at the
  kill waited after it;
- shadow mode's cost: the gateway over one llama.cpp without and with ``--shadow`` (the other llama.cpp,
  the candidate), SHADOW_REQUESTS requests by four clients per round, rounds alternating; p50 and p99.
"""

from __future__ import annotations

import asyncio
import csv
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT / "tests" / "cluster"), str(ROOT / "tests")]

from _report import Figure, Section, load_average  # noqa: E402

ROWS = 300
KILL_AT = 60
SHADOW_REQUESTS, SHADOW_ROUNDS, SHADOW_CLIENTS = 100, 2, 4
SLOTS = 4
TIMEOUT = 600.0
TICKETS = ROOT / "tests" / "fixtures" / "labelled" / "tickets.csv"
KEY = "sk-bench-clusters"
SECTION = ("clusters", "Clusters: Ray, Spark, gateway replicas and shadow traffic", "scripts/bench clusters")


def run() -> Section:
    """Measure inside ``unshare -n`` (loopback alone) and turn what came back into the report's section."""
    with tempfile.TemporaryDirectory(prefix="jevper-bench-clusters-") as scratch:
        out = Path(scratch) / "measured.json"
        inside = 'ip link set lo up && exec "$0" "$@"'
        command = ["unshare", "-n", "sh", "-c", inside, sys.executable, __file__, "--inside", str(out)]
        subprocess.run(command, check=True, timeout=3600)
        measured = json.loads(out.read_text())
    return section(measured)


# --- inside the namespace ---------------------------------------------------------------------------


def tickets(folder: Path) -> tuple[Path, dict[str, str]]:
    """ROWS labelled tickets as JSON Lines (id, state): the 240 of tickets.csv, then tickets drawn by the
    script that wrote it (another draw, its states not among those); their ``team`` labels by id."""
    with TICKETS.open(newline="", encoding="utf-8") as f:
        rows = [{"id": r["id"], "state": r["state"], "team": r["team"]} for r in csv.DictReader(f)]
    spec = importlib.util.spec_from_file_location("make_tickets", TICKETS.with_name("make_tickets.py"))
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    seen = {r["state"] for r in rows}
    more = [r for r in script.tickets(ROWS) if r["state"] not in seen]
    rows += [{"id": f"d{i:03}", "state": r["state"], "team": r["team"]} for i, r in enumerate(more, start=1)]
    rows = rows[:ROWS]
    assert len(rows) == ROWS and len({r["id"] for r in rows}) == ROWS, len(rows)
    path = folder / "tickets.jsonl"
    path.write_text("".join(json.dumps({"id": r["id"], "state": r["state"]}) + "\n" for r in rows))
    return path, {r["id"]: r["team"] for r in rows}


def team_question() -> dict[str, Any]:
    return {"team": json.loads(TICKETS.with_name("tickets.questions.json").read_text())["team"]}


#: The servers' ceiling measured now: {"ceiling": rows/s, "load": the load average just after}.
Ceiling = Callable[[], dict[str, Any]]


def ceiling(servers: list[Any], texts: list[str], question: dict[str, Any]) -> float:
    """Rows/s of jevper's own request bodies posted straight to the servers, SLOTS at a time on each."""
    import httpx
    import openai
    from bench_engines import bodies

    halves = [texts[i :: len(servers)] for i in range(len(servers))]
    sent = [bodies(s.base_url, s.model, half, question) for s, half in zip(servers, halves, strict=True)]

    async def go() -> float:
        sdks = [
            openai.AsyncOpenAI(base_url=s.base_url, api_key="bench", max_retries=0, timeout=TIMEOUT)
            for s in servers
        ]

        async def server(sdk: Any, posts: list[str]) -> None:
            gate = asyncio.Semaphore(SLOTS)

            async def post(body: str) -> None:
                async with gate:
                    await sdk.post("/chat/completions", cast_to=httpx.Response, body=json.loads(body))

            await asyncio.gather(*(post(b) for b in posts))

        started = time.perf_counter()
        await asyncio.gather(*(server(sdk, posts) for sdk, posts in zip(sdks, sent, strict=True)))
        wall = time.perf_counter() - started
        for sdk in sdks:
            await sdk.close()
        return len(texts) / wall

    return asyncio.run(go())


def command_line(
    source: Path, output: Path, questions: Path, servers: list[Any], env: dict[str, str], *engine: str
) -> float:
    """Seconds ``python -m jevper.batch`` took over every row (fails unless each was answered)."""
    command = [sys.executable, "-m", "jevper.batch", str(source), str(output), "--questions", str(questions)]
    for server in servers:
        command += ["--base-url", f"{server.base_url}={server.model}"]
    command += ["--concurrency", str(SLOTS), "--timeout", str(TIMEOUT), "--api", "chat_completions", *engine]
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800)
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"{ROWS} rows, {ROWS} answered" in done.stdout, done.stdout
    print(f"  {' '.join(engine) or 'local'}: {took:.1f} s; {done.stdout.strip()}", flush=True)
    return took


def answers(output: Path) -> dict[str, dict[str, Any]]:
    import pyarrow.parquet as pq

    return {row["id"]: row["team"] for row in pq.read_table(output).to_pylist()}


def compared(outputs: dict[str, Path], labels: dict[str, str]) -> dict[str, Any]:
    """The engines' answers row by row: the same choice on each (asserted), the largest difference of a
    probability, and the share matching the labels."""
    found = {engine: answers(path) for engine, path in outputs.items()}
    local = found["local"]
    assert sorted(local) == sorted(labels), "the local engine's rows are not the tickets"
    same, largest = 0, 0.0
    for qid, answer in local.items():
        choices = {engine: found[engine][qid]["choice"] for engine in found}
        if len(set(choices.values())) == 1:
            same += 1
        for engine in found:
            mine, theirs = dict(found[engine][qid]["probabilities"]), dict(answer["probabilities"])
            largest = max(largest, *(abs(mine[k] - theirs[k]) for k in theirs))
    right = sum(local[qid]["choice"] == labels[qid] for qid in local)
    return {"same": same, "largest_difference": largest, "accuracy": right / len(local)}


def killed_rows(rows: list[dict[str, Any]], ids: list[str], asked: int) -> dict[str, Any]:
    from _cluster import counted

    count = counted(rows, ids)
    return {
        "lost": count.lost,
        "duplicated": count.duplicated,
        "errors": len(count.errors),
        "requests": asked,
    }


@contextmanager
def llama_servers(n: int) -> Iterator[list[Any]]:
    from _llama import slots_one_thread

    from jevper.servers.llamacpp import spawn_llamacpp

    with ExitStack() as stack:
        yield [stack.enter_context(spawn_llamacpp(extra_args=slots_one_thread(SLOTS))) for _ in range(n)]


def on_ray(
    folder: Path, source: Path, questions: Path, servers: list[Any], labels: dict[str, str], top: Ceiling
) -> dict[str, Any]:
    import pyarrow.parquet as pq
    from _cluster import Requests
    from _ray_nodes import job_with_a_node_killed, ray_cluster

    found: dict[str, Any] = {}
    logs = folder / "ray-logs"
    logs.mkdir()
    with ray_cluster(logs) as cluster:
        found["start_s"] = cluster.started_s
        engine = ["--engine", "ray", "--engine-address", cluster.address, "--workers", "2"]
        found.update(
            top(),
            wall_s=command_line(source, folder / "ray.parquet", questions, servers, cluster.env, *engine),
        )
        asked = [Requests(s.log_path) for s in servers]
        killed = job_with_a_node_killed(
            cluster,
            lambda: sum(a() for a in asked),
            folder / "ray-kill",
            source,
            team_question(),
            [s.base_url for s in servers],
            servers[0].model,
            at=KILL_AT,
        )
        rows = [
            r
            for p in sorted((folder / "ray-kill" / "parts").glob("*.parquet"))
            for r in pq.read_table(p).to_pylist()
        ]
        found["kill"] = {
            **killed_rows(rows, list(labels), sum(a() for a in asked)),
            "statuses": killed.statuses,
            "at_requests": killed.kill.at_requests,
            "kill_to_end_s": killed.end_s - killed.kill_s,
            "end_s": killed.end_s,
        }
        print(f"  ray kill: {found['kill']}", flush=True)
    return found


def on_spark(
    folder: Path, source: Path, questions: Path, servers: list[Any], labels: dict[str, str], top: Ceiling
) -> dict[str, Any]:
    import pyarrow.parquet as pq
    from _cluster import Requests
    from _spark_nodes import command_line_env, job_with_an_executor_killed, spark_cluster

    found: dict[str, Any] = {}
    logs = folder / "spark-logs"
    logs.mkdir()
    with spark_cluster(logs) as cluster:
        found["start_s"] = cluster.started_s
        engine = ["--engine", "spark", "--engine-address", cluster.master, "--workers", "2"]
        env = command_line_env(cluster)
        found.update(
            top(), wall_s=command_line(source, folder / "spark.parquet", questions, servers, env, *engine)
        )
        asked = [Requests(s.log_path) for s in servers]
        kill_folder = folder / "spark-kill"
        kill_folder.mkdir()
        killed = job_with_an_executor_killed(
            cluster,
            lambda: sum(a() for a in asked),
            kill_folder,
            source,
            team_question(),
            [s.base_url for s in servers],
            servers[0].model,
            at=KILL_AT,
        )
        assert killed.status == 0, killed.said[-3000:]
        rows = [
            r for p in sorted((kill_folder / "out").glob("*.parquet")) for r in pq.read_table(p).to_pylist()
        ]
        found["kill"] = {
            **killed_rows(rows, list(labels), sum(a() for a in asked)),
            "executor_lost": "lost" in killed.said.lower(),
            "at_requests": killed.kill.at_requests,
            "kill_to_end_s": killed.end_s - killed.kill_s,
            "end_s": killed.end_s,
        }
        print(f"  spark kill: {found['kill']}", flush=True)
    return found


def on_replicas(folder: Path) -> dict[str, Any]:
    from _replicas import REQUESTS, kill_one_under_load, replicas

    with replicas(folder) as cluster:
        run = kill_one_under_load(cluster, "r2")
    statuses = Counter(r.status for r in run.results)
    found = {
        "requests": REQUESTS,
        "lost": REQUESTS - statuses[200],
        "duplicated": run.upstream_asked - REQUESTS,
        "retried": sum(r.attempts > 1 for r in run.results),
        "recovered_s": run.recovered_s(),
        "counted": sum(c["200"] for c in run.counted.values()),
        "by_survivors": sum(r.replica != "r2" and r.status == 200 for r in run.results),
    }
    print(f"  replicas: {found}", flush=True)
    return found


def gateway_latencies(
    llama: Any, shadow: Any | None, states: list[str], port: int
) -> tuple[list[float], dict[str, Any]]:
    """Each request's seconds through a gateway over ``llama`` (with ``shadow`` as its --shadow), and
    the gateway's shadow report (empty without one)."""
    import httpx
    from _cluster import wait_for

    command = [sys.executable, "-m", "jevper.serve", "--upstream", f"{llama.base_url}={llama.model}"]
    command += ["--api", "chat_completions", "--port", str(port), "--log-level", "warning"]
    command += ["--concurrency", str(SLOTS), "--timeout", str(TIMEOUT)]
    if shadow is not None:
        command += ["--shadow", f"{shadow.base_url}={shadow.model}"]
    env = {**os.environ, "JEVPER_SERVE_API_KEYS": KEY}
    base, headers = f"http://127.0.0.1:{port}", {"authorization": f"Bearer {KEY}"}
    gateway = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    question = team_question()
    try:

        def up() -> bool:
            try:
                return httpx.get(f"{base}/health", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for("the gateway's /health", up, 60, every=0.2)
        with httpx.Client(timeout=TIMEOUT, headers=headers) as http:

            def one(state: str) -> float:
                started = time.perf_counter()
                answer = http.post(f"{base}/v1/systemone", json={"state": state, "questions": question})
                assert answer.status_code == 200, answer.text[:500]
                return time.perf_counter() - started

            for state in states[:SHADOW_CLIENTS]:  # warm: the first requests find the client's method
                one(state)
            with ThreadPoolExecutor(SHADOW_CLIENTS) as pool:
                took = list(pool.map(one, states))
            report: dict[str, Any] = {}
            if shadow is not None:
                wait_for(
                    "the shadow's queue drained",
                    lambda: (
                        (r := http.get(f"{base}/v1/shadow").json()["requests"])["waiting"] + r["asking"] == 0
                    ),
                    600,
                )
                report = http.get(f"{base}/v1/shadow").json()
    finally:
        gateway.terminate()
        gateway.wait(timeout=60)
    return took, report


def on_shadow(servers: list[Any], states: list[str]) -> dict[str, Any]:
    from _cluster import free_port

    samples: dict[str, list[float]] = {"off": [], "on": []}
    reports = []
    for round_ in range(SHADOW_ROUNDS):
        asked = states[round_ * SHADOW_REQUESTS : (round_ + 1) * SHADOW_REQUESTS]
        for mode in ("off", "on"):
            took, report = gateway_latencies(
                servers[0], servers[1] if mode == "on" else None, asked, free_port()
            )
            samples[mode] += took
            if report:
                reports.append(report)
            print(
                f"  shadow {mode}, round {round_ + 1}: p50 {statistics.median(took) * 1000:.0f} ms",
                flush=True,
            )
    found: dict[str, Any] = {}
    for mode, took in samples.items():
        ordered = sorted(took)
        found[mode] = {
            "n": len(ordered),
            "p50_ms": statistics.median(ordered) * 1000,
            "p99_ms": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1000,
        }
    requests = [r["requests"] for r in reports]
    team = [r["questions"].get("team", {}) for r in reports]
    found["shadow"] = {
        "offered": sum(r["offered"] for r in requests),
        "answered": sum(r["answered"] for r in requests),
        "dropped": sum(r["dropped"] for r in requests),
        "failed": sum(r["failed"] for r in requests),
        "agreed": sum(t.get("agreed", 0) for t in team),
        "compared": sum(t.get("compared", 0) for t in team),
    }
    print(f"  shadow: {found}", flush=True)
    return found


def measure(out: Path) -> None:
    from _cluster import loopback_only

    loopback_only()
    found: dict[str, Any] = {"load_before": load_average()}
    with tempfile.TemporaryDirectory(prefix="jbc", dir="/tmp") as scratch, llama_servers(2) as servers:
        folder = Path(scratch)
        source, labels = tickets(folder)
        questions = folder / "questions.json"
        questions.write_text(json.dumps(team_question()))
        texts = [json.loads(line)["state"] for line in source.read_text().splitlines()]

        def top() -> dict[str, Any]:
            # Right before each engine's run: the machine is shared, and its load moves the ceiling.
            rate = ceiling(servers, texts, team_question())
            print(f"  ceiling: {rate:.2f} rows/s", flush=True)
            return {"ceiling": rate, "load": load_average()}

        found["local"] = top()
        found["local"]["wall_s"] = command_line(
            source, folder / "local.parquet", questions, servers, dict(os.environ)
        )
        found["ray"] = on_ray(folder, source, questions, servers, labels, top)
        found["spark"] = on_spark(folder, source, questions, servers, labels, top)
        outputs = {engine: folder / f"{engine}.parquet" for engine in ("local", "ray", "spark")}
        found["answers"] = compared(outputs, labels)
        print(f"  answers: {found['answers']}", flush=True)
        (folder / "replicas").mkdir()
        found["replicas"] = on_replicas(folder / "replicas")
        found["shadow"] = on_shadow(servers, texts)
    found["load_after"] = load_average()
    out.write_text(json.dumps(found, indent=1))
    assert found["answers"]["same"] == ROWS, f"{ROWS - found['answers']['same']} rows answered differently"


# --- the report's section ----------------------------------------------------------------------------


def section(m: dict[str, Any]) -> Section:
    load = load_average()
    engines = ("local", "ray", "spark")
    tops = [m[key]["ceiling"] for key in engines]
    figures = [
        Figure(
            "clusters: servers' ceiling (2 llama.cpp, 4 slots each, their own bodies posted), median",
            statistics.median(tops),
            "rows/s",
            "",
            None,
            m["local"]["load"],
            f"{ROWS} rows, measured right before each engine's run: "
            + ", ".join(f"{t:.2f}" for t in tops)
            + " rows/s",
        )
    ]
    for key, name in (
        ("local", "local engine"),
        ("ray", "Ray cluster (head + 2 worker nodes)"),
        ("spark", "Spark standalone (master + 2 workers)"),
    ):
        wall, ceiling_s = m[key]["wall_s"], ROWS / m[key]["ceiling"]
        started = (
            f"; the cluster took {m[key]['start_s']:.1f} s to start, apart" if "start_s" in m[key] else ""
        )
        figures.append(
            Figure(
                f"clusters: {name}, the command line",
                ROWS / wall,
                "rows/s",
                "",
                None,
                m[key]["load"],
                f"{wall:.1f} s for {ROWS} rows: {ceiling_s / wall:.2f} of the ceiling measured right before "
                f"it, {wall - ceiling_s:.1f} s beyond its {ceiling_s:.1f} s (the engine's start, its "
                f"scheduling and its workers' share of the two cores){started}",
            )
        )
    answers = m["answers"]
    figures.append(
        Figure(
            "clusters: rows with the same answer on the three engines",
            answers["same"],
            f"of {ROWS}",
            f"{ROWS} of {ROWS}",
            answers["same"] == ROWS,
            load,
            f"the same choice on each row (asserted); the largest difference of a probability "
            f"{answers['largest_difference']:.3g}; {answers['accuracy']:.3f} of the labels matched",
        )
    )
    for key, name, what in (
        ("ray", "Ray worker node killed", "worker node"),
        ("spark", "Spark executor killed", "executor"),
    ):
        kill = m[key]["kill"]
        figures.append(
            Figure(
                f"clusters: {name} mid-job, rows lost + written twice",
                kill["lost"] + kill["duplicated"],
                "rows",
                "0",
                kill["lost"] + kill["duplicated"] == 0,
                load,
                f"{kill['lost']} lost, {kill['duplicated']} written twice, {kill['errors']} errors; "
                f"the {what} killed at {kill['at_requests']} requests, {kill['requests']} requests for "
                f"{ROWS} rows ({kill['requests'] - ROWS} asked again)"
                + (f"; the job: {' then '.join(kill['statuses'])}" if "statuses" in kill else ""),
            )
        )
        figures.append(
            Figure(
                f"clusters: {name}, from the kill to the job's end",
                kill["kill_to_end_s"],
                "s",
                "",
                None,
                load,
                f"the whole job {kill['end_s']:.1f} s (the unkilled command line: {m[key]['wall_s']:.1f} s)",
            )
        )
    rep = m["replicas"]
    figures.append(
        Figure(
            "clusters: gateway replica killed under load, requests lost",
            rep["lost"],
            "requests",
            "0",
            rep["lost"] == 0,
            load,
            f"{rep['requests']} requests by 8 clients through HAProxy, one of three replicas SIGKILLed "
            f"after a third: {rep['lost']} lost, {rep['retried']} asked again by the client, the "
            f"upstream asked {rep['duplicated']} times beyond one per request; the survivors' "
            f"/metrics counted {rep['counted']} answers, the clients saw {rep['by_survivors']} from them",
        )
    )
    figures.append(
        Figure(
            "clusters: gateway replica killed, the requests in flight answered after",
            rep["recovered_s"],
            "s",
            "",
            None,
            load,
            "from the kill to the answer of the last request that was in flight at it",
        )
    )
    sh = m["shadow"]
    agreed = sh["shadow"]
    for q in ("p50", "p99"):
        off, on = sh["off"][f"{q}_ms"], sh["on"][f"{q}_ms"]
        figures.append(
            Figure(
                f"clusters: shadow's cost to the main path, {q} latency with / without",
                on / off,
                "x",
                "",
                None,
                load,
                f"{on:.0f} ms with a shadow, {off:.0f} ms without",
            )
        )
    table = [
        ["gateway over one llama.cpp", "requests", "p50 ms", "p99 ms"],
        ["no shadow", str(sh["off"]["n"]), f"{sh['off']['p50_ms']:.0f}", f"{sh['off']['p99_ms']:.0f}"],
        [
            "--shadow (the other llama.cpp)",
            str(sh["on"]["n"]),
            f"{sh['on']['p50_ms']:.0f}",
            f"{sh['on']['p99_ms']:.0f}",
        ],
    ]
    notes = [
        f"Shadow: {SHADOW_ROUNDS} rounds of {SHADOW_REQUESTS} requests by {SHADOW_CLIENTS} clients, "
        f"without and with a shadow alternating; the shadow answered {agreed['answered']} of "
        f"{agreed['offered']} offered ({agreed['dropped']} dropped, {agreed['failed']} failed) and "
        f"agreed on {agreed['agreed']} of {agreed['compared']} answers. The candidate is a second "
        "llama.cpp on the same two cores, so its work competes with the main server's: the cost "
        "shown is the machine's, not the gateway's alone.",
        f"Load average before the run {m['load_before']}, after {m['load_after']}. Everything ran inside "
        "`unshare -n` (loopback alone), as scripts/cluster runs the cluster tests.",
    ]
    key, title, command = SECTION
    return Section(key=key, title=title, command=command, figures=figures, notes=notes, table=table)


if __name__ == "__main__":
    if sys.argv[1:2] != ["--inside"]:
        sys.exit("usage: run by scripts/bench clusters (bench_clusters.py --inside FILE inside unshare -n)")
    measure(Path(sys.argv[2]))
