"""Hypothesis strategies that break a JSON body the way servers do: drop keys, change types, put NaN,
infinities or positive numbers where logprobs go, truncate or repeat lists, insert unicode garbage.

Needs the test extra (hypothesis); nothing else in jevper imports this module.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from typing import Any

from hypothesis import strategies as st

#: Values a sloppy server writes where something else belongs.
ODD_NUMBERS = st.sampled_from([math.nan, math.inf, -math.inf, 0.7, 1e-7, 1.0, 2.0, -1e308, 1e308, 0, -0.0])
GARBAGE_TEXT = st.one_of(
    st.text(max_size=12),
    st.sampled_from(
        ["\ud800", "\ufffd\x00", "\u202e", "Ġ", "▁A", " A", "A", "B", "<think>", "</think>", "{", ""]
    ),
)
ODD_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    ODD_NUMBERS,
    st.integers(min_value=-(2**70), max_value=2**70),
    GARBAGE_TEXT,
    st.just([]),
    st.just({}),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(GARBAGE_TEXT, st.none(), max_size=2),
)


def _slots(value: Any) -> Iterator[tuple[Any, Any]]:
    """Every (container, key) in the tree, parents before children."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield value, key
            yield from _slots(item)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield value, index
            yield from _slots(item)


@st.composite
def _mutate(draw: st.DrawFn, body: Any) -> Any:
    body = copy.deepcopy(body)
    # Mostly one mutation, so that a mutant often still carries an answer to read.
    for _ in range(draw(st.sampled_from([1, 1, 1, 2, 3, 4]))):
        slots = list(_slots(body))
        if not slots:
            break
        container, key = draw(st.sampled_from(slots))
        current = container[key]
        operation = draw(st.sampled_from(["drop", "replace", "number", "truncate", "repeat", "garble"]))
        if operation == "drop":
            del container[key]
        elif operation == "replace":
            container[key] = draw(ODD_VALUES)
        elif operation == "number" or (operation == "garble" and not isinstance(current, str)):
            container[key] = draw(ODD_NUMBERS)
        elif operation == "garble":
            cut = draw(st.integers(min_value=0, max_value=len(current)))
            container[key] = current[:cut] + draw(GARBAGE_TEXT) + current[cut:]
        elif isinstance(current, list):
            if operation == "truncate":
                container[key] = current[: draw(st.integers(min_value=0, max_value=max(0, len(current) - 1)))]
            elif current:
                container[key] = [*current, copy.deepcopy(draw(st.sampled_from(current)))]
        else:
            container[key] = draw(ODD_VALUES)
    return body


def mutated_bodies(corpus: list[tuple[str, str, Any]]) -> st.SearchStrategy[tuple[str, str, Any]]:
    """A corpus entry (source, surface, body) with one to four mutations applied to its body."""
    return st.sampled_from(corpus).flatmap(
        lambda entry: _mutate(entry[2]).map(lambda body: (entry[0], entry[1], body))
    )
