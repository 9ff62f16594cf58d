"""Offline suite time: the whole replay suite as scripts/test runs it (``pytest -m "not live" -n 4``)."""

from __future__ import annotations

import re
import subprocess
import sys
import time

from _report import ROOT, Figure, Section, load_average

TARGET_S = 60.0


def run() -> Section:
    load_before = load_average()
    command = [sys.executable, "-m", "pytest", "-m", "not live", "-n", "4", "-q", "-p", "no:cacheprovider"]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - started
    lines = done.stdout.strip().splitlines()
    summary = lines[-1].strip("= ") if lines else "no output"
    # pytest's own count of collected-but-deselected live tests is in the summary line.
    outcome = "passed" if done.returncode == 0 else f"exit status {done.returncode}"
    counted = re.sub(r" in [0-9.]+s.*", "", summary)
    failed = [line.split()[1] for line in lines if line.startswith(("FAILED ", "ERROR "))]
    return Section(
        key="suite",
        title="Offline suite time",
        command="scripts/bench suite",
        figures=[
            Figure(
                "offline suite: wall time",
                wall,
                "s",
                f"≤ {TARGET_S:.0f} s",
                wall <= TARGET_S,
                load_average(),
                f'`pytest -m "not live" -n 4`: {counted} ({outcome}'
                + (f"; failing: {', '.join(failed)}" if failed else "")
                + f"); load average {' / '.join(map(str, load_before))} before the run",
            )
        ],
        notes=[
            'Wall time of one `python -m pytest -m "not live" -n 4 -q` in the checkout (4 workers, as '
            "scripts/test runs it: the suite waits on timeouts and Retry-After more than it computes), "
            "interpreter start and collection included: every replay of recorded fixtures, the "
            "report-drift tests and the browser test of the capability page."
        ],
    )


if __name__ == "__main__":
    section = run()
    for figure in section.figures:
        print(figure.name, figure.shown(), figure.detail)
