"""How the tests start the embedded llama.cpp: its default two threads, or one beside busy neighbours
(a plain module, imported by test folders).

On a quiet two-core machine, as CI's is, two threads are faster. Alternating, twice each (2026-12-01,
load 0.9-1.8): 20 sampled Messages runs, four at a time, took 30.2 and 32.8 s on two threads against
44.6 and 55.1 s on one; a 255-option question through the gateway 25.9 and 26.6 s against 45.4 and 47.9.
Beside other busy processes a thread waits for a descheduled peer at every step: 30 batch rows ran at
0.57 rows/s with two threads and 4.0-4.9 with one (load 5). So the servers that share the cores with
work of the test itself, two llama.cpp servers at once or Ray's and Spark's workers, run on one thread.
The servers a test kills after a fixed sleep keep the default, so their requests are still in flight at
the kill. llama-server takes the last --threads given.
"""

from __future__ import annotations

from jevper.servers.llamacpp import RECIPE_ARGS, slot_args

ONE_THREAD = ("--threads", "1")
#: The reference recipe (one slot of 4,096 tokens, the model's template) on one thread.
RECIPE_ONE_THREAD = (*RECIPE_ARGS, *ONE_THREAD)


def slots_one_thread(slots: int) -> tuple[str, ...]:
    """``slots`` slots of 4,096 tokens each, with the template, on one thread."""
    return (*slot_args(slots), *ONE_THREAD)
