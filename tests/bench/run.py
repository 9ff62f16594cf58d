"""Run benchmarks and regenerate reports/performance.md: ``python tests/bench/run.py [NAME ...]``.

Names: client, throughput, cache, probe, suite (default: all, in that order), and ``profile``, which
prints a cProfile of the client-overhead benchmark instead of measuring. Sections not run keep their
last committed numbers (reports/performance.json), each with its own date.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Callable

import bench_answers
import bench_batch
import bench_cache
import bench_calibration
import bench_client
import bench_clusters
import bench_engines
import bench_escalation
import bench_gateway
import bench_probe
import bench_suite
import bench_throughput
from _report import ORDER, REPORT, ROOT, Figure, Section, load_average, load_sections, render, save_sections

BENCHES: dict[str, Callable[[], Section]] = {
    "client": bench_client.run,
    "throughput": bench_throughput.run,
    "cache": bench_cache.run,
    "probe": bench_probe.run,
    "suite": bench_suite.run,
    "gateway": bench_gateway.run,
    "batch": bench_batch.run,
    "engines": bench_engines.run,
    "calibration": bench_calibration.run,
    "answers": bench_answers.run,
    "clusters": bench_clusters.run,
    "escalation": bench_escalation.run,
}


def main(argv: list[str]) -> int:
    if "--rows" in argv:
        # scripts/bench batch --rows 1000000: the batch benchmark's row count.
        at = argv.index("--rows")
        os.environ["JEVPER_BENCH_ROWS"] = str(int(argv[at + 1]))
        argv = argv[:at] + argv[at + 2 :]
    names = argv or ["all"]
    if names == ["profile"]:
        print(bench_client.profile())
        return 0
    if "all" in names:
        names = list(ORDER)
    unknown = [n for n in names if n not in BENCHES]
    if unknown:
        print(f"unknown benchmark {unknown}; expected some of {[*ORDER, 'all', 'profile']}", file=sys.stderr)
        return 2
    sections = load_sections()
    failed = []
    for name in names:
        started = time.perf_counter()
        print(f"scripts/bench: {name} ...", flush=True)
        try:
            section = BENCHES[name]()
        except Exception as exc:
            # One broken benchmark (a server that will not start, a tree mid-change) does not cost
            # the others their numbers; the report says what went wrong in its place.
            traceback.print_exc()
            failed.append(name)
            section = _failure(name, exc)
        sections[name] = section
        for figure in section.figures:
            mark = {True: "met", False: "MISSED", None: ""}[figure.met]
            print(f"  {figure.name}: {figure.shown()} (target {figure.target or '—'}) {mark}")
        print(f"  ({time.perf_counter() - started:.1f} s)", flush=True)
        save_sections(sections)
        REPORT.write_text(render(sections))
    print(f"scripts/bench: wrote {REPORT.relative_to(ROOT)}")
    if failed:
        print(f"scripts/bench: could not measure {', '.join(failed)} (see above)", file=sys.stderr)
        return 1
    return 0


def _failure(name: str, exc: Exception) -> Section:
    text = f"{type(exc).__name__}: {exc}".splitlines()[0]
    figure = Figure(
        f"{name}: not measured", None, "", "", None, load_average(), f"the benchmark failed: {text}"
    )
    return Section(key=name, title=f"{name} (failed)", command=f"scripts/bench {name}", figures=[figure])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
