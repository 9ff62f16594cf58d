"""``--compare``: the same labelled rows under several settings, side by side.

A setting is written ``key=value,...`` with the keys ``name``, ``base-url``, ``model``, ``method``,
``api`` and ``option-orders``; ``base-url=spawn`` starts the embedded llama.cpp serving ``model``. A key
left out takes the value of the command line's own flag. Each setting's evaluation is written to a
folder of its own; the comparison (``DIR/metrics.json``, kind ``jevper.comparison``) holds, per setting,
each question's accuracy and ECE before (and held out after, with ``--fit``), its position flip rate
(with ``--rotations``), the requests sent and the seconds spent asking: the frontier a user picks from.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

from jevper import ConfigError

COMPARISON_VERSION = 1
KEYS = ("name", "base-url", "model", "method", "api", "option-orders")
SPAWN = "spawn"
_STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; }
td, th { border: 1px solid #ccc; padding: 2px 8px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
"""


@dataclass(frozen=True)
class Setting:
    """One setting as written: the keys it gives (the others come from the command line)."""

    text: str
    name: str
    base_url: str | None = None  # a base URL, or SPAWN
    model: str | None = None
    method: str | None = None
    api: str | None = None
    option_orders: int | None = None

    @property
    def folder(self) -> str:
        """The setting's folder under DIR/settings: its name, in characters any file system takes."""
        return re.sub(r"[^A-Za-z0-9._-]+", "-", self.name).strip("-") or "setting"


def parse_setting(text: str) -> Setting:
    """``method=logprobs,api=chat_completions`` as a Setting; a key not in KEYS, or given twice, refused."""
    given: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or key not in KEYS or not value:
            raise ConfigError(
                f"--compare {text!r}: expected key=value pairs separated by commas, the keys among "
                f"{list(KEYS)}, got {part!r}"
            )
        if key in given:
            raise ConfigError(f"--compare {text!r}: expected each key once, got {key!r} twice")
        given[key] = value
    named = given.pop("name", None)
    # A name is a folder under DIR/settings: as a path ("..", "a/b") it would put the setting's files
    # elsewhere, into DIR itself for "..", where the comparison's overwrite them.
    if named is not None and (named in (".", "..") or any(sep in named for sep in ("/", "\\", "\0"))):
        raise ConfigError(
            f"--compare {text!r}: expected a name that is a folder's, got {named!r}; its files go to "
            "DIR/settings/<name>/: name it without '/' or '\\', and not '.' or '..'"
        )
    name = text if named is None else named
    orders = given.pop("option-orders", None)
    if orders is not None and not (orders.isdigit() and int(orders) >= 1):
        raise ConfigError(
            f"--compare {text!r}: expected option-orders to be a whole number of at least 1, got {orders!r}"
        )
    return Setting(
        text=text,
        name=name,
        option_orders=None if orders is None else int(orders),
        **{k.replace("-", "_"): v for k, v in given.items()},
    )


def check_settings(settings: Sequence[Setting]) -> None:
    """Two settings or more, each with a name (and so a folder) of its own."""
    if len(settings) < 2:
        raise ConfigError(f"--compare: expected two settings or more to compare, got {len(settings)}")
    folders = [s.folder for s in settings]
    twice = sorted({f for f in folders if folders.count(f) > 1})
    if twice:
        raise ConfigError(
            f"--compare: expected a name of its own for each setting, got {twice} more than once"
        )


@dataclass(frozen=True)
class Compared:
    """One setting's run: what was asked, how much it cost, and its evaluation's metrics."""

    setting: Setting
    asked: Mapping[str, Any]  # base_url, model, method, api and option_orders as run
    rows: int
    requests: int
    seconds: float
    metrics: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.setting.name,
            "setting": self.setting.text,
            "asked": dict(self.asked),
            "folder": f"settings/{self.setting.folder}",
            "rows": self.rows,
            "requests": self.requests,
            "seconds": self.seconds,
            "rows_per_second": self.rows / self.seconds if self.seconds > 0 else None,
            "questions": {qid: _figures(q) for qid, q in self.metrics["questions"].items()},
        }


def _figures(q: Mapping[str, Any]) -> dict[str, Any]:
    before, after = q["before"], q.get("after")
    found = {"n": before["n"], "accuracy": before["accuracy"], "ece": before["ece"]["equal_width"]["value"]}
    if isinstance(after, Mapping):
        found |= {"after_accuracy": after["accuracy"], "after_ece": after["ece"]["equal_width"]["value"]}
    bias = q.get("position_bias")
    if isinstance(bias, Mapping):
        found["flips"] = bias["changed"]
    return found


def comparison(labelled: str, runs: Sequence[Compared]) -> dict[str, Any]:
    """DIR/metrics.json of a comparison."""
    return {
        "version": COMPARISON_VERSION,
        "kind": "jevper.comparison",
        "labelled": labelled,
        "definitions": {
            "ece": "top-label ECE over 15 equal-width bins (each setting's own metrics.json has the rest)",
            "after": "held out, as in each setting's metrics.json (with --fit only)",
            "requests": "the HTTP requests the batch core sent for the setting, retries included",
            "flips": "the share of answers under a rotation of a choice's options that differ from the "
            "answer in the order given (with --rotations)",
            "seconds": "wall time spent asking the setting's rows (a spawned server's start not counted)",
        },
        "settings": [run.to_json() for run in runs],
    }


def columns(doc: Mapping[str, Any]) -> list[str]:
    """The table's header: the setting, its cost, then each question's figures."""
    head = ["setting", "rows", "requests", "seconds"]
    settings = doc["settings"]
    for qid, q in settings[0]["questions"].items() if settings else ():
        head += [f"{qid} accuracy", f"{qid} ECE"]
        if "after_ece" in q:
            head += [f"{qid} accuracy after", f"{qid} ECE after"]
        if "flips" in q:
            head += [f"{qid} flips"]
    return head


def rows(doc: Mapping[str, Any]) -> list[list[str]]:
    """The table's rows, one per setting, as text."""
    found = []
    for s in doc["settings"]:
        row = [s["name"], str(s["rows"]), str(s["requests"]), f"{s['seconds']:.1f}"]
        for q in s["questions"].values():
            keys = (
                ("accuracy", "ece", "after_accuracy", "after_ece")
                if "after_ece" in q
                else ("accuracy", "ece")
            )
            row += [_number(q.get(k)) for k in keys]
            row += [_number(q["flips"])] if "flips" in q else []
        found.append(row)
    return found


def text_table(doc: Mapping[str, Any]) -> str:
    """The table as printed: columns aligned."""
    table = [columns(doc), *rows(doc)]
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in table
    )


def html(doc: Mapping[str, Any]) -> str:
    """DIR/report.html of a comparison: one self-contained table linking each setting's own report."""
    head = "".join(f"<th>{escape(c)}</th>" for c in columns(doc))
    body = ""
    for s, row in zip(doc["settings"], rows(doc), strict=True):
        link = f'<a href="{escape(s["folder"])}/report.html">{escape(row[0])}</a>'
        body += f'<tr data-setting="{escape(s["name"])}"><td>{link}</td>'
        body += "".join(f"<td>{escape(cell)}</td>" for cell in row[1:]) + "</tr>"
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>jevper comparison</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n"
        f"<h1>Settings compared on {escape(doc['labelled'])}</h1>\n"
        f"<table><tr>{head}</tr>{body}</table>\n<p>ECE: top-label, 15 equal-width bins; seconds: time "
        "spent asking. Generated by python -m jevper.evaluate --compare from metrics.json (version "
        f"{escape(str(doc['version']))}).</p>\n</body>\n</html>\n"
    )


def _number(value: Any) -> str:
    return "-" if value is None else f"{value:.3f}"
