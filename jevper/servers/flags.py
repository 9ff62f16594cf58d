"""Command-line flags shared by the programs that talk to servers (the probe, the gateway, the batch and
the evaluation): one vocabulary, the same parsing, the same refusals."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def json_object(text: str) -> dict[str, Any]:
    """An argparse ``type``: the flag's text as a JSON object, or an error naming what arrived."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r} ({exc})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {type(value).__name__}")
    return value


class HelpFormatter(argparse.HelpFormatter):
    """Every option's help ends with its default, unless it has none or the help already says it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if not action.option_strings or "default" in text or _no_default(default):
            return text
        return f"{text} (default: %(default)s)"


def _no_default(default: object) -> bool:
    # A flag that is off, an option left unset or a repeatable one given no value has no default to show.
    empty = isinstance(default, list | tuple | dict) and not default
    return default is None or default is False or default is argparse.SUPPRESS or empty


def add_option_orders_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--option-orders N``: each choice asked with its options in N cyclic orders, its answer their mean."""
    parser.add_argument(
        "--option-orders",
        type=_at_least_one,
        default=1,
        metavar="N",
        help="ask each choice with its options in N orders (as given, then from the second option, ...) "
        "and answer with the mean: less of an option's place in the answer, at N requests per choice; "
        "a calibration is fit for one N (docs/calibration.md)",
    )


#: What ``--cache-mode`` takes: the clients' ``cache_mode`` values.
CACHE_MODES = ("read-write", "read", "write", "off")


def add_cache_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup, cache_help: str) -> None:
    """``--cache FILE`` (the answer cache, jevper._cache; ``cache_help`` says what it answers in this
    command) and ``--cache-mode``: one spelling and one set of modes for every command that has one."""
    parser.add_argument("--cache", type=Path, metavar="FILE", help=f"{cache_help} (default: none)")
    parser.add_argument(
        "--cache-mode",
        choices=CACHE_MODES,
        default="read-write",
        help="read: answer from --cache, never write; write: always ask, then write; off: leave it alone",
    )


def _at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return value


def url_and_model(text: str) -> tuple[str, str | None]:
    """``URL`` or ``URL=MODEL``, split at the first '=': a base URL's scheme, host, port and path hold
    none, while a model id may hold '/' and '=' (vLLM's ``org/name``). A URL with a query string keeps
    every '=' (its model comes from --model)."""
    url, sep, model = text.partition("=")
    if sep and model and "?" not in url:
        return url.rstrip("/"), model
    return text.rstrip("/"), None


#: The environment variable a client's key is read from when --api-key is not given.
API_KEY_ENV = "JEVPER_API_KEY"
API_KEY_HELP = (
    "the key sent to the server, as a bearer token (default: $JEVPER_API_KEY; the variable keeps it out "
    "of the process list)"
)


def api_key(given: str | None) -> str | None:
    """The key a client sends: --api-key, else $JEVPER_API_KEY, else none."""
    return given or os.environ.get(API_KEY_ENV) or None


@dataclass(frozen=True)
class Renamed:
    """An option's old spelling, still read for one release with a warning naming the new one.

    ``when``, if set, is asked about the value given with the old spelling: the old spelling is read
    as the new one only when it says yes (``--server URL`` was a base URL; ``--server KIND`` is not).
    """

    old: str
    new: str
    when: Callable[[str], bool] | None = None


def renamed(prog: str, argv: Sequence[str], renames: Sequence[Renamed]) -> list[str]:
    """``argv`` with every old spelling written the new way, and one warning on stderr for each."""
    out: list[str] = []
    args = list(argv)
    for i, arg in enumerate(args):
        if "--" in args[:i]:
            out.append(arg)
            continue
        flag, equals, value = arg.partition("=")
        nxt = value if equals else (args[i + 1] if i + 1 < len(args) else "")
        rename = next((r for r in renames if r.old == flag and (r.when is None or r.when(nxt))), None)
        if rename is None:
            out.append(arg)
            continue
        print(
            f"{prog}: DeprecationWarning: {rename.old} is now spelled {rename.new}; "
            f"the old spelling is read as {rename.new} until the next release",
            file=sys.stderr,
        )
        out.append(f"{rename.new}{equals}{value}")
    return out


#: What ``--escalate-below`` takes besides a number: each question's guaranteed threshold in --calibration.
ESCALATE_AUTO = "auto"


def escalate_to(text: str) -> tuple[str, str]:
    """``--escalate-to URL=MODEL``: the stronger server's base URL and the model it serves, both needed
    (the model is another than --model's, so it is never taken from there)."""
    url, model = url_and_model(text)
    if model is None or not url.startswith(("http://", "https://")):
        shown = re.sub(r"//[^/@]*@", "//***@", text)  # a URL's credentials are never echoed
        raise argparse.ArgumentTypeError(
            "expected URL=MODEL, the stronger server's base URL (http:// or https://, ending in /v1) and "
            f"the model it serves, split at the first '=' (http://127.0.0.1:8081/v1=qwen-1.5b), got {shown!r}"
        )
    return url, model


def escalate_below(text: str) -> float | str:
    """``--escalate-below P``: a top probability in (0, 1], or auto."""
    if text == ESCALATE_AUTO:
        return ESCALATE_AUTO
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(
            f"expected a top probability in (0, 1] or {ESCALATE_AUTO}, got {text!r}"
        )
    return value


def add_escalation_arguments(parser: argparse.ArgumentParser) -> None:
    """``--escalate-to URL=MODEL --escalate-below P`` (and the second server's calibration and slots): the
    questions the first servers are unsure of asked again of a stronger one (jevper._escalate)."""
    parser.add_argument(
        "--escalate-to",
        type=escalate_to,
        metavar="URL=MODEL",
        help="a stronger server (base URL ending in /v1, and its model) that the questions whose calibrated "
        "top probability is below --escalate-below are asked again of; each answer keeps its route and "
        "both answers, and a question it fails keeps the first answer, its failure noted (default: none)",
    )
    parser.add_argument(
        "--escalate-below",
        type=escalate_below,
        metavar="P",
        help="the threshold of --escalate-to: a top probability in (0, 1] (an answer at or above it is "
        "kept), or auto: each question's guaranteed threshold in --calibration, per label where it has "
        "one (python -m jevper.evaluate --fit --target-accuracy A --risk D) (default: none)",
    )
    parser.add_argument(
        "--escalate-calibration",
        type=Path,
        metavar="FILE",
        help="a calibration.json fit for the --escalate-to server's answers, applied to them (--calibration "
        "applies to the first servers' only) (default: none)",
    )
    parser.add_argument(
        "--escalate-concurrency",
        type=_at_least_one,
        default=4,
        metavar="N",
        help="requests in flight to the --escalate-to server at once",
    )


def check_escalation(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--escalate-to and --escalate-below come together (and --escalate-calibration only with them); an
    error otherwise (exit 2, naming what is missing)."""
    given = [args.escalate_to is not None, args.escalate_below is not None]
    if any(given) and not all(given):
        missing = "--escalate-below P" if given[0] else "--escalate-to URL=MODEL"
        parser.error(
            f"{missing}: expected with {'--escalate-to' if given[0] else '--escalate-below'}, got none"
        )
    if args.escalate_calibration is not None and not all(given):
        parser.error("--escalate-calibration: expected with --escalate-to and --escalate-below, got neither")
