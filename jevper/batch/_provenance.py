"""What answered a batch's rows, kept with its output: the provenance the evaluation binds a calibration to.

A Parquet output holds it in its schema's metadata (key ``jevper.provenance``); a CSV or JSON Lines output
in a file beside it, ``<OUTPUT>.provenance.json``. Either holds one JSON object:

- ``server_kind``, ``server_release``: as the server stated them (the one ``--spawn`` started, or a
  llama.cpp that names its build); null when no server said, or the servers said different things;
- ``model``: the one model asked (null when several), and ``models``, each of them;
- ``asked``: the ``method`` and ``api`` the run was given (``auto`` lets the client choose);
- ``answered``: per question, the methods and surfaces its answers were actually read with, and
  ``method`` and ``surface``: the one each question shares (null when they differ or none answered);
- ``prompt_digest`` of the questions asked, ``option_orders``, ``calibration`` (the digest of the one
  applied, or null) and ``jevper``, the version that wrote the output;
- with ``--escalate-to``, ``escalation``: the second model, the threshold and its calibration's digest
  (``model`` is then null and ``models`` holds both: the answers are not one model's).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from jevper import ConfigError, __version__
from jevper._atomic import write_atomically
from jevper.batch._files import Writer, format_of
from jevper.calibration import Calibration, prompt_digest

KEY = b"jevper.provenance"
VERSION = 1


def sidecar(output: Path) -> Path:
    """Where a CSV or JSON Lines output keeps its provenance."""
    return output.with_name(output.name + ".provenance.json")


def described(
    questions: Mapping[str, Any],
    models: Iterable[str],
    options: Mapping[str, Any],
    answered: Mapping[str, Iterable[tuple[str, str]]],
    server: Mapping[str, str | None] | None = None,
) -> dict[str, Any]:
    """The provenance of a run that asked ``questions`` of ``models`` with the client ``options``, whose
    answers were read as ``answered`` says (question id -> its (method, surface) pairs)."""
    names = sorted(set(models))
    calibration = options.get("calibration")
    per_question = {}
    for qid in questions:
        pairs = sorted(set(answered.get(qid, ())))
        per_question[qid] = {
            "methods": sorted({m for m, _ in pairs}),
            "surfaces": sorted({s for _, s in pairs}),
        }
    methods = {m for q in per_question.values() for m in q["methods"]}
    surfaces = {s for q in per_question.values() for s in q["surfaces"]}
    uniform = all(len(q["methods"]) == 1 and len(q["surfaces"]) == 1 for q in per_question.values())
    server = server or {}
    return {
        "version": VERSION,
        "server_kind": server.get("server_kind"),
        "server_release": server.get("server_release"),
        "model": names[0] if len(names) == 1 else None,
        "models": names,
        "asked": {"method": options.get("method", "auto"), "api": options.get("api", "auto")},
        "answered": {
            "method": methods.pop() if uniform and len(methods) == 1 else None,
            "surface": surfaces.pop() if uniform and len(surfaces) == 1 else None,
            "questions": per_question,
        },
        "prompt_digest": prompt_digest(questions),
        "option_orders": int(options.get("option_orders", 1)),
        "calibration": calibration.digest() if isinstance(calibration, Calibration) else None,
        "jevper": __version__,
    }


def record(writer: Writer, output: Path, provenance: Mapping[str, Any]) -> None:
    """``provenance`` kept with ``output``, before ``writer`` (writing it) is closed: in a Parquet file's
    metadata, else in the file beside it (written first, so an output is never in place without it)."""
    if writer.format == "parquet":
        writer.metadata({KEY.decode(): json.dumps(provenance, sort_keys=True)})
    else:
        write_atomically(sidecar(output), json.dumps(provenance, indent=1, sort_keys=True) + "\n")


def read_provenance(output: Path) -> dict[str, Any] | None:
    """What the batch recorded with ``output``, or None for an output written before it recorded any."""
    where = f"--answers {output}"
    if format_of(output, "--answers") == "parquet":
        try:
            metadata = pq.ParquetFile(output).metadata.metadata or {}
        except (OSError, pa.ArrowException) as exc:
            raise ConfigError(f"{where}: expected a Parquet file, could not read it: {exc}") from None
        text: str | bytes | None = metadata.get(KEY)
        where += f" (its metadata {KEY.decode()})"
    else:
        path = sidecar(output)
        text = path.read_text(encoding="utf-8") if path.is_file() else None
        where = f"{path}"
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{where}: expected the batch's provenance as JSON, got {exc}") from None
    if not isinstance(value, dict) or value.get("version") != VERSION:
        raise ConfigError(
            f"{where}: expected the batch's provenance, version {VERSION}, got "
            f"{value.get('version') if isinstance(value, dict) else type(value).__name__}; an output of "
            "another jevper: give the flags it records instead"
        )
    return value
