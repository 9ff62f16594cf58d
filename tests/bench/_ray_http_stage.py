"""Ray Data's own HTTP stage (``ray.data.llm``, ``HttpRequestProcessorConfig``), as a black box in an
environment of its own: ``python _ray_http_stage.py URL BODIES_JSONL ACTORS [ROWS,ROWS...]``. Sends each
body as it is and prints one JSON line: Ray's start-up, the first map's wall time (a 8-row warm-up), then
a run of each ROWS (default: every body), each with its own actor pool; ``rows_per_s`` is the last
run's, and with two runs or more ``steady_rows_per_s`` is the rows of the last beyond the first over the
time they added (the actors' start apart). Imports nothing of jevper.
"""

from __future__ import annotations

import json
import sys
import time


def main() -> None:
    url, bodies_path, actors = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with open(bodies_path, encoding="utf-8") as handle:
        bodies = [line for line in handle.read().splitlines() if line]
    sizes = [int(n) for n in sys.argv[4].split(",")] if len(sys.argv) > 4 else [len(bodies)]
    started = time.perf_counter()
    import ray
    import ray.data
    from ray.data.llm import HttpRequestProcessorConfig, build_processor

    ray.init(
        num_cpus=4,
        object_store_memory=256 * 1024 * 1024,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
    )
    start_s = time.perf_counter() - started
    config = HttpRequestProcessorConfig(url=url, concurrency=actors, batch_size=64, qps=None)
    processor = build_processor(
        config,
        preprocess=lambda row: {"payload": json.loads(row["body"])},
        postprocess=lambda row: {"status": "choices" in row["http_response"]},
    )

    def timed(n: int) -> tuple[float, int]:
        ds = ray.data.from_items([{"body": b} for b in bodies[:n]]).repartition(max(1, n // 64))
        t = time.perf_counter()
        done = processor(ds).take_all()
        return time.perf_counter() - t, sum(1 for r in done if r["status"])

    first_s, _ = timed(8)
    runs = []
    for n in sizes:
        wall_s, answered = timed(n)
        runs.append({"rows": n, "wall_s": wall_s, "answered": answered})
    last = runs[-1]
    found = {
        "start_s": start_s,
        "first_map_s": first_s,
        "runs": runs,
        "rows": last["rows"],
        "answered": last["answered"],
        "wall_s": last["wall_s"],
        "rows_per_s": last["rows"] / last["wall_s"],
    }
    if len(runs) > 1:
        found["steady_rows_per_s"] = (last["rows"] - runs[0]["rows"]) / (last["wall_s"] - runs[0]["wall_s"])
    print(json.dumps(found), flush=True)
    ray.shutdown()


if __name__ == "__main__":
    main()
