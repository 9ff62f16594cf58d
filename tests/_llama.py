"""How the tests start the embedded llama.cpp: on one thread (a plain module, imported by test folders).

The tests share two cores with their own process, the other servers they start, Ray and Spark.
llama.cpp's default here is two threads, and a thread of it then waits for a descheduled peer at every
step: on the shared two-core machine, 30 batch rows ran at 0.57 rows/s with two threads and 4.0-4.9
with one (load 5), and one Messages call of 96 tokens took 16-25 s with two and 2.4-3.1 s with one
(load 2-3). A 255-option question through the gateway on a two-slot server took 46-49 s with one thread
and 124-141 s with two, alternating, twice each (load 3.3-4.0). llama-server takes the last --threads
given. The servers a test kills after a fixed sleep keep the default, so their requests are still in
flight at the kill.
"""

from __future__ import annotations

from jevper.servers.llamacpp import RECIPE_ARGS, slot_args

ONE_THREAD = ("--threads", "1")
#: The reference recipe (one slot of 4,096 tokens, the model's template) on one thread.
RECIPE_ONE_THREAD = (*RECIPE_ARGS, *ONE_THREAD)


def slots_one_thread(slots: int) -> tuple[str, ...]:
    """``slots`` slots of 4,096 tokens each, with the template, on one thread."""
    return (*slot_args(slots), *ONE_THREAD)
