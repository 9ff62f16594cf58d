"""Cassettes: vcrpy configured to keep what a verdict or a client reads and nothing else, and read back.

Before an exchange is written, opaque noise is pruned (ids, timestamps, `system_fingerprint`, logprob
`bytes` and token ids, every timing except `cache_n`), headers are cut down to `content-type`, the
port is dropped from the URI, and any API key is scrubbed wherever it appears. Response bodies are
re-serialized as indented JSON so that fixtures diff cleanly.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import vcr
import yaml
from vcr.persisters.filesystem import FilesystemPersister
from vcr.request import Request

CASSETTE_SUFFIX = ".yaml"
SERIALIZER = "jevper-yaml"
_NOISE_KEYS = frozenset({"id", "created", "created_at", "completed_at", "system_fingerprint", "bytes"})
_KEPT_TIMINGS = frozenset({"cache_n"})
_KEPT_HEADERS = ("content-type",)
REDACTED = "<redacted>"


def prune(value: Any) -> Any:
    """A copy of a parsed JSON body without the fields that change on every call."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        # A model list's ids are what it says, not noise (its creation time still changes every start).
        noise = _NOISE_KEYS - {"id"} if value.get("object") == "model" else _NOISE_KEYS
        for key, item in value.items():
            if key in noise:
                continue
            if key == "timings" and isinstance(item, dict):
                out[key] = {k: v for k, v in item.items() if k in _KEPT_TIMINGS}
                continue
            out[key] = prune(item)
        return out
    if isinstance(value, list):
        return [prune(item) for item in value]
    return value


def machine_paths() -> tuple[tuple[str, str], ...]:
    """This machine's own folders and what a recording says in their place, longest first: a server
    that names a file (vLLM's model list names its model folder) must not name where it lives here."""
    here = Path(__file__).resolve().parents[2]
    named = {
        str(here): "<repo>",
        str(Path(tempfile.gettempdir()).resolve()): "<tmp>",
        str(Path.home()): "<home>",
    }
    kept = ((path, shown) for path, shown in named.items() if len(path) > 1)
    return tuple(sorted(kept, key=lambda pair: -len(pair[0])))


_MACHINE_PATHS = machine_paths()


def _scrub(text: str, secrets: Sequence[str]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)
    for path, shown in _MACHINE_PATHS:
        text = text.replace(path, shown)
    return text


#: A body above this is not kept: no answer to a probe is that long, and a 50 MB one cost a minute
#: of YAML per cassette. The cassette keeps a line saying so, which no reader takes for an answer.
MAX_RECORDED_BYTES = 8 * 1024 * 1024


def _body_text(body: bytes | str | None, secrets: Sequence[str], *, indent: bool) -> str | None:
    if body is None:
        return None
    if len(body) > MAX_RECORDED_BYTES:
        return f"<a body of {len(body)} bytes, above the {MAX_RECORDED_BYTES} recorded, was not kept>"
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        return _scrub(text, secrets)
    shown = json.dumps(prune(parsed) if indent else parsed, indent=2 if indent else None, ensure_ascii=False)
    return _scrub(shown, secrets)


def _portless(uri: str, secrets: Sequence[str]) -> str:
    parts = urlsplit(_scrub(uri, secrets))
    return urlunsplit((parts.scheme, parts.hostname or "", parts.path, parts.query, ""))


def _keep_headers(headers: Any, secrets: Sequence[str]) -> dict[str, Any]:
    kept = {}
    for name in _KEPT_HEADERS:
        for key, value in dict(headers).items():
            if key.lower() == name:
                values = value if isinstance(value, list) else [value]
                kept[name] = [_scrub(str(v), secrets) for v in values]
    return kept


def request_hook(secrets: Sequence[str]) -> Any:
    def before_record_request(request: Request) -> Request:
        body = _body_text(request.body, secrets, indent=False)
        headers = {k: v[0] for k, v in _keep_headers(request.headers, secrets).items()}
        return Request(request.method, _portless(request.uri, secrets), body, headers)

    return before_record_request


def response_hook(secrets: Sequence[str]) -> Any:
    def before_record_response(response: dict[str, Any]) -> dict[str, Any]:
        body = _body_text(response["body"]["string"], secrets, indent=True)
        return {
            "status": response["status"],
            "headers": _keep_headers(response["headers"], secrets),
            # Bytes, as vcrpy hands them to httpx on replay (this hook also runs on loaded cassettes).
            "body": {"string": (body or "").encode("utf-8")},
        }

    return before_record_response


#: libyaml's emitter where PyYAML was built with it: the 960 committed fixtures dump in 0.18 s against
#: 3.45 s by the pure-Python emitter, byte for byte the same files (tests/probe/test_cassette_reads.py).
_SAFE_DUMPER: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _LiteralDumper(_SAFE_DUMPER):  # type: ignore[misc]
    """Multi-line strings as literal blocks, so a pretty-printed body reads as it was written."""


def _represent_str(dumper: Any, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data else None
    node: yaml.ScalarNode = dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)
    return node


_LiteralDumper.add_representer(str, _represent_str)


#: libyaml's safe loader where PyYAML was built with it (its wheels are): the 424 committed fixtures read
#: in 0.16 s against 2.25 s by the pure-Python loader, into the same documents. Every test worker reads
#: them all as it collects the fuzz tests.
_SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class CassetteSerializer:
    """vcrpy's YAML layout, written with literal blocks; the on-disk format carries its version."""

    @staticmethod
    def serialize(cassette_dict: dict[str, Any]) -> str:
        return str(
            yaml.dump(cassette_dict, Dumper=_LiteralDumper, allow_unicode=True, sort_keys=False, width=4096)
        )

    @staticmethod
    def deserialize(cassette_string: str) -> dict[str, Any]:
        loaded = yaml.load(cassette_string, Loader=_SAFE_LOADER)
        return dict(loaded) if isinstance(loaded, dict) else {}


def make_vcr(*, record: bool, secrets: Sequence[str] = ()) -> vcr.VCR:
    recorder = vcr.VCR(
        record_mode="all" if record else "none",
        match_on=("method", "path", "query", "body"),
        before_record_request=request_hook(secrets),
        before_record_response=response_hook(secrets),
        decode_compressed_response=True,
    )
    recorder.register_serializer(SERIALIZER, CassetteSerializer)
    return recorder


@contextlib.contextmanager
def cassette(recorder: vcr.VCR, path: Path) -> Iterator[Any]:
    with recorder.use_cassette(str(path), serializer=SERIALIZER) as active:
        yield active


@dataclass(frozen=True, eq=False)
class Exchange:
    """One recorded request and what came back, as the classifiers see it.

    Compared and hashed as the record it is (by identity): a parsed version of a cassette is shared
    (``load_exchanges``), so what a reader makes of one exchange can be kept for it."""

    method: str
    path: str
    request_body: Any  # parsed JSON, or the raw text when it was not JSON
    status: int
    content_type: str
    text: str  # the response body as recorded
    uri: str = ""
    request_headers: Mapping[str, Any] = field(default_factory=dict)  # as recorded (lower-case names)

    def json(self) -> Any:
        """The parsed body, or None when it is not JSON."""
        try:
            return json.loads(self.text)
        except json.JSONDecodeError:
            return None


class CassetteError(ValueError):
    """A cassette file that vcrpy cannot read; the message names the file and what was wrong."""


def load_exchanges(path: Path) -> tuple[Exchange, ...]:
    """The exchanges of one cassette file, in the order they were sent, read by vcrpy's own persister
    and serializer (the one place a cassette is parsed).

    A version of a file (its inode, size and modification time) is parsed once per process: a report
    reads the same cassette for its grades, its gate and its page. The exchanges are shared, so they
    are read, never changed; a file written again is a new version and is parsed again."""
    try:
        stat = os.stat(path)
    except OSError as exc:
        raise CassetteError(f"{path}: expected a vcrpy cassette, could not read it ({exc})") from exc
    return _parsed_version(str(path), stat.st_ino, stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=2048)
def _parsed_version(path: str, inode: int, size: int, mtime_ns: int) -> tuple[Exchange, ...]:
    try:
        requests, responses = FilesystemPersister.load_cassette(path, CassetteSerializer)
    except (OSError, ValueError, KeyError, TypeError, yaml.YAMLError) as exc:
        raise CassetteError(f"{path}: expected a vcrpy cassette, could not read it ({exc})") from exc
    exchanges = []
    for request, response in zip(requests, responses, strict=True):
        raw = request.body.decode("utf-8", "replace") if isinstance(request.body, bytes) else request.body
        try:
            body: Any = json.loads(raw) if raw else None
        except json.JSONDecodeError:
            body = raw
        text = response["body"]["string"]
        headers = response.get("headers", {})
        exchanges.append(
            Exchange(
                method=request.method,
                uri=request.uri,
                request_headers={k.lower(): v for k, v in request.headers.items()},
                path=urlsplit(request.uri).path,
                request_body=body,
                status=int(response["status"]["code"]),
                content_type=(headers.get("content-type") or [""])[0],
                text=text.decode("utf-8", "replace") if isinstance(text, bytes) else (text or ""),
            )
        )
    return tuple(exchanges)
