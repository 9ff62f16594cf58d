"""The answer cache: a call's answers kept in an SQLite file under a digest of everything that decides them.

The key (``key``) is a SHA-256 over the server (its URL without credentials or query values), the
model, the surface and method asked or actually used, the prompt (jevper's instructions, each
question's layout, the examples, option_orders and the settings that change a reading), the state, the
calibration's digest and ``FORMAT``, the version of what an entry holds. An entry is written only for a
call that answered, so a failure is asked again next time.

The file is in WAL mode, written one row per transaction: several processes and threads may read and
write it at once, and a process killed mid-write leaves the last committed answers readable (SQLite
rolls the torn transaction back when the file is next opened). Each thread opens its own connection.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Mapping
from typing import Any, Literal

from jevper._errors import ConfigError
from jevper.models import Answer, ChoiceAnswer, NoulAnswer, ScoreAnswer, SystemOneResponse, Usage

#: The version of the key's recipe and of an entry's shape: raised when either changes, so older entries
#: are never read as newer ones.
FORMAT = 1
CacheMode = Literal["read-write", "read", "write", "off"]
#: read-write: answer from the cache, write what was asked; read: answer from it, never write; write:
#: always ask, then write; off: neither.
MODES: tuple[CacheMode, ...] = ("read-write", "read", "write", "off")
#: How long a write waits for another process's before it is an error (SQLite's busy timeout).
BUSY_TIMEOUT_S = 30.0

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS answers (key TEXT PRIMARY KEY, entry TEXT NOT NULL, written REAL NOT NULL)"
)


def checked_mode(value: object) -> CacheMode:
    for mode in MODES:
        if value == mode:
            return mode
    raise ConfigError(
        f"cache_mode: expected one of {', '.join(repr(m) for m in MODES)}, got {value!r}; 'read' answers "
        "from the cache and never writes, 'write' always asks and writes, 'off' leaves the cache alone"
    )


def checked_path(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, str | os.PathLike):
        path = os.fspath(value)
        if isinstance(path, str) and path:
            return path
    raise ConfigError(f"cache: expected the path of an SQLite file (made if missing) or None, got {value!r}")


class AnswerCache:
    """One cache file, opened lazily by each thread that uses it."""

    def __init__(self, path: str, mode: str = "read-write") -> None:
        self.path = path
        self.mode = checked_mode(mode)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections: list[sqlite3.Connection] = []

    @property
    def reads(self) -> bool:
        return self.mode in ("read-write", "read")

    @property
    def writes(self) -> bool:
        return self.mode in ("read-write", "write")

    def _connection(self) -> sqlite3.Connection:
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is None:
            try:
                # Each thread uses its own connection; close() may run on any thread, hence check_same_thread.
                connection = sqlite3.connect(
                    self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
                )
                _in_wal_mode(connection)
                # NORMAL: a committed write survives the process being killed (not a power cut, which
                # may lose the last writes but never tears the file).
                connection.execute("PRAGMA synchronous=NORMAL")
                connection.execute(_SCHEMA)
            except sqlite3.Error as error:
                raise ConfigError(
                    f"cache={self.path!r}: expected an SQLite file jevper can open and write (or a path "
                    f"where one can be made), got {type(error).__name__}: {error}; pass another path, or "
                    "cache_mode='off'"
                ) from error
            self._local.connection = connection
            with self._lock:
                self._connections.append(connection)
        return connection

    def get(self, key: str) -> dict[str, Any] | None:
        """The entry kept under ``key``, or None."""
        row = self._connection().execute("SELECT entry FROM answers WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        entry: dict[str, Any] = json.loads(row[0])
        return entry if entry.get("format") == FORMAT else None

    def put(self, keys: set[str], entry: Mapping[str, Any]) -> None:
        """``entry`` under each of ``keys``, in one transaction."""
        text = json.dumps({**entry, "format": FORMAT}, ensure_ascii=False, separators=(",", ":"))
        connection = self._connection()
        now = time.time()
        with connection:  # BEGIN ... COMMIT, or ROLLBACK on an error
            connection.execute("BEGIN IMMEDIATE")
            connection.executemany(
                "INSERT OR REPLACE INTO answers (key, entry, written) VALUES (?, ?, ?)",
                [(key, text, now) for key in sorted(keys)],
            )

    def __len__(self) -> int:
        return int(self._connection().execute("SELECT count(*) FROM answers").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            connections, self._connections = self._connections, []
        for connection in connections:
            connection.close()
        self._local = threading.local()


def _in_wal_mode(connection: sqlite3.Connection) -> None:
    """The file in WAL mode. The mode is kept in the file, so a file made before is only read; switching
    it needs the file to itself and SQLite says "locked" at once (no busy wait) while another connection
    writes, so the switch is tried again until BUSY_TIMEOUT_S, as a write waits."""
    if str(connection.execute("PRAGMA journal_mode").fetchone()[0]).lower() == "wal":
        return
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            connection.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as locked:
            if "locked" not in str(locked) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def key(parts: Mapping[str, Any]) -> str:
    """The digest of ``parts`` (JSON values), with the format's version."""
    text = json.dumps({**parts, "format": FORMAT}, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def canonical(value: Any) -> str:
    """``value`` as one JSON text, keys sorted; what JSON cannot hold (an object in extra_body) as repr."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=repr)


def entry(response: SystemOneResponse) -> dict[str, Any]:
    """What a cache keeps of a call's response: its answers, the model that gave them, their reasoning
    and the call's trace."""
    return {
        "answers": {qid: _answer_value(answer) for qid, answer in response.answers.items()},
        "model": response.model,
        "reasoning": dict(response.reasoning),
        "debug": response.debug,
    }


def response(kept: Mapping[str, Any], trace: Mapping[str, Any]) -> SystemOneResponse:
    """A response made of a kept entry, at no cost: no request, no tokens; ``trace`` is said in
    ``debug["cache"]``."""
    answers = {qid: _answer(value) for qid, value in kept["answers"].items()}
    debug = {**kept.get("debug", {}), "cache": dict(trace)}
    return SystemOneResponse(
        answers=answers,
        usage=Usage(input_tokens=0, output_tokens=0, n_calls=0),
        reasoning=dict(kept.get("reasoning", {})),
        debug=debug,
        model=str(kept.get("model", "")),
    )


def _answer_value(answer: Answer) -> dict[str, Any]:
    common = {
        "type": answer.type,
        "confidence": answer.confidence,
        "method": answer.method,
        "surface": answer.surface,
        "reasoning": answer.reasoning,
    }
    if isinstance(answer, ChoiceAnswer):
        return {**common, "choice": answer.choice, "probabilities": answer.probabilities}
    if isinstance(answer, NoulAnswer):
        return {**common, "noul": answer.noul, "probabilities": answer.probabilities}
    # JSON keys are text: a score's levels are kept as pairs, so they come back as integers.
    return {
        **common,
        "score": answer.score,
        "probabilities": [[level, p] for level, p in answer.probabilities.items()],
        "legend": [[level, text] for level, text in answer.legend.items()],
    }


def _answer(value: Mapping[str, Any]) -> Answer:
    common = {
        "confidence": value["confidence"],
        "method": value["method"],
        "surface": value["surface"],
        "reasoning": value["reasoning"],
    }
    if value["type"] == "choice":
        return ChoiceAnswer(choice=value["choice"], probabilities=dict(value["probabilities"]), **common)
    if value["type"] == "noul":
        return NoulAnswer(noul=value["noul"], probabilities=dict(value["probabilities"]), **common)
    return ScoreAnswer(
        score=value["score"],
        probabilities={int(level): p for level, p in value["probabilities"]},
        legend={int(level): text for level, text in value["legend"]},
        **common,
    )


def used(response: SystemOneResponse) -> list[list[str]]:
    """Per question, in order, the method and surface its answer was actually read with."""
    return [[answer.method, answer.surface] for answer in response.answers.values()]
