"""An answer read back from the batch's output, as any of its formats holds it: a struct per question
(Parquet, JSON Lines) or its flattened ``question.field`` columns (CSV, every cell text).

The one reader of an answer cell: the review (``--review-below``) and the evaluation ask it. A cell that
is no distribution (a probability outside [0, 1], NaN, a list that is not of pairs, a number where a
mapping belongs) is a ``ValueError`` saying what was expected and what arrived; the caller names the row.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

#: A yes/no answer's two options, as its probabilities are read back here.
NOUL_OPTIONS = ("true", "false")


def probabilities_of(row: Mapping[str, Any], qid: str) -> dict[str, float] | None:
    """The row's answer to ``qid`` as each option's probability (a yes/no answer's ``true`` and
    ``false``), None when the row has no answer to it (a failed row)."""
    cell = row.get(qid)
    if isinstance(cell, Mapping):
        probabilities, noul = cell.get("probabilities"), cell.get("noul")
    elif cell is None and qid in row:
        return None
    else:
        probabilities, noul = row.get(f"{qid}.probabilities"), row.get(f"{qid}.noul")
    if noul not in (None, ""):
        yes = _probability(noul, "the yes/no answer's probability of true", str(noul))
        return {"true": yes, "false": 1.0 - yes}
    if probabilities in (None, ""):
        return None
    if isinstance(probabilities, str):
        try:
            probabilities = json.loads(probabilities)
        except ValueError as exc:
            raise ValueError(f"expected the probabilities as JSON, got {probabilities!r} ({exc})") from None
    found = {
        str(k): _probability(v, "each option's probability", f"{k!r}: {v!r}")
        for k, v in _pairs(probabilities)
        if v is not None
    }
    if not math.fsum(found.values()) > 0:
        raise ValueError(f"expected probabilities with a positive sum, got {found}")
    return found


def _pairs(value: Any) -> list[tuple[Any, Any]]:
    """A mapping's items, or Arrow's list of (key, value) pairs as they are."""
    if isinstance(value, Mapping):
        return list(value.items())
    if isinstance(value, list) and all(isinstance(p, list | tuple) and len(p) == 2 for p in value):
        return [(k, v) for k, v in value]
    raise ValueError(
        f"expected a mapping of each option to its probability (or a list of [option, probability] "
        f"pairs), got {value!r}"
    )


def _probability(value: Any, what: str, shown: str) -> float:
    """A finite number in [0, 1] (text, as a CSV holds it, read as a number)."""
    try:
        number = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        number = math.nan
    if not (math.isfinite(number) and 0.0 <= number <= 1.0):
        raise ValueError(f"expected {what} in [0, 1], got {shown}")
    return number
