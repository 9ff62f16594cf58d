"""The probe catalogue: declarative requests loaded from the TOML files of `jevper.probes`, and from
a user's own files (`--catalogue PATH`) in the same format.

A probe is data. How its request is composed lives in `compose.py`; how its answer becomes a verdict
lives in `classifiers.py`, under the name the probe gives. The canonical probes (`canonical = true`)
are the contract every server is recorded against; a probe added since is shown as "not recorded"
for a recording made before it. Every name a probe gives (classifier, agreement rule, prompt
layout, topic) is checked when the catalogue loads, and an error names the file and line of what it
refuses. A user's probes are checked by the same code as the built-in ones; their ids must be their own.
"""

from __future__ import annotations

import fnmatch
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, cast

from jevper._wire import RECORDS, Surface
from jevper._wire import decisions as decisions_route
from jevper.probe.agreement import RULES

#: A surface a probe is written for: one the client asks through (jevper._wire.RECORDS), or OpenAI's
#: Decisions API, which the harness probes and the client asks only natively.
ProbeSurface = Surface | decisions_route.DecisionsRoute
#: Every probed surface and its title, in the order the docs, the catalogue and the capability page list them.
SURFACE_TITLES: Mapping[ProbeSurface, str] = {
    **{name: record.title for name, record in RECORDS.items()},
    decisions_route.SURFACE: "Decisions",
}
SURFACES: tuple[ProbeSurface, ...] = tuple(SURFACE_TITLES)

#: The probe files, in the order the runner sends them (the catalogue's order).
PROBE_FILES = ("chat.toml", "responses.toml", "messages.toml", "systemone.toml", "decisions.toml")
#: The other data files of the package, which hold no probes.
DATA_FILES = ("presets.toml", "topics.toml", "reference.toml")

_PROBE_KEYS = {
    "id",
    "topic",
    "asks",
    "decides",
    "classifier",
    "deterministic",
    "path",
    "method",
    "prompt",
    "thinking_off",
    "model",
    "body",
    "drop",
    "raw_body",
    "prime_with",
    "request_of",
    "sampling",
    "opening",
    "compare",
    "canonical",
    "reproducible",
    "stability",
    "variant",
    "tolerance",
    "sends",
}
#: What a probe file may set for all its probes, above its first `[[probe]]`.
_DEFAULT_KEYS = {"surface", "path", "prompt", "thinking_off", "canonical", "reproducible"}
_TEXT_KEYS = ("id", "topic", "asks", "decides", "classifier", "compare")


class CatalogueError(ValueError):
    """A catalogue file does not say what a probe needs; the message names the file, line and field."""


@dataclass(frozen=True)
class Origin:
    """Where a probe is written: its file (as the user named it, or `probes/<name>`), the line of its
    `[[probe]]` header and of each of its keys, and whether it ships with jevper."""

    file: str
    line: int
    keys: Mapping[str, int] = field(default_factory=dict)
    builtin: bool = True

    def at(self, key: str | None = None) -> str:
        """`file:line` of the key (of the probe's header when the key is not written)."""
        return f"{self.file}:{self.keys.get(key or '', self.line)}"


@dataclass(frozen=True)
class Probe:
    """One canonical request and the name of the classifier that turns its answer into a verdict."""

    id: str
    surface: ProbeSurface
    topic: str
    method: str
    path: str  # relative to the base URL, which ends in /v1
    asks: str
    decides: str
    classifier: str
    deterministic: bool  # the verdict does not depend on what the model chose to say
    prompt: str = "standard"
    thinking_off: bool = True
    model: str | None = None  # a literal model id instead of the preset's
    body: Mapping[str, Any] = field(default_factory=dict)
    drop: tuple[str, ...] = ()
    raw_body: str | None = None  # sent as-is instead of a composed JSON body
    prime_with: str | None = None  # send this probe's request first, in the same cassette
    request_of: str | None = None  # send that probe's request instead of composing one
    # Overrides of the reproducible fields (temperature, seed) for a probe whose question needs
    # sampling, e.g. n: 2, which a server may refuse under greedy decoding.
    sampling: Mapping[str, Any] = field(default_factory=dict)
    opening: str | None = None  # the prompt's first line, unique to a cold-cache probe
    compare: str = "outcome"  # the agreement rule (agreement.RULES) that compares it with the reference
    canonical: bool = False  # one of the canonical probes every recording is made against
    # Send temperature 0 and the fixed seed; false for an API without those fields (System One).
    reproducible: bool = True
    # A stability probe: the plan it sends (stability.KINDS) and, for a variant, the prompt layout of
    # the request its answers are compared with; `tolerance` overrides probes/presets.toml's.
    stability: str | None = None
    variant: str | None = None
    tolerance: float | None = None
    # Several bodies on one route, one request each in this order (prompt layouts): a dialect probe.
    sends: tuple[str, ...] = ()


@dataclass(frozen=True)
class Topic:
    id: str
    title: str


@dataclass(frozen=True)
class Catalogue:
    probes: tuple[Probe, ...]
    topics: tuple[Topic, ...]
    #: probe id -> where it is written.
    origins: Mapping[str, Origin] = field(default_factory=dict)
    #: The user's catalogue files, as named, in the order read (none: the built-in catalogue alone).
    user_files: tuple[str, ...] = ()

    @property
    def user_probes(self) -> tuple[Probe, ...]:
        """The probes read from the user's files (`--catalogue`)."""
        return tuple(p for p in self.probes if p.id in self.origins and not self.origins[p.id].builtin)

    def __len__(self) -> int:
        return len(self.probes)

    @property
    def canonical(self) -> tuple[Probe, ...]:
        return tuple(p for p in self.probes if p.canonical)

    def get(self, probe_id: str) -> Probe:
        for probe in self.probes:
            if probe.id == probe_id:
                return probe
        raise KeyError(f"no probe named {probe_id!r}; `python -m jevper.probe --list` shows the ids")

    def select(self, patterns: Sequence[str] | None) -> tuple[Probe, ...]:
        """The probes whose id matches any glob, in catalogue order (all of them for no pattern)."""
        if not patterns:
            return self.probes
        return tuple(p for p in self.probes if any(fnmatch.fnmatchcase(p.id, g) for g in patterns))

    def topic(self, topic_id: str) -> Topic:
        for topic in self.topics:
            if topic.id == topic_id:
                return topic
        raise KeyError(topic_id)


def read_data(name: str) -> dict[str, Any]:
    """Parse one TOML file shipped in `jevper.probes`."""
    text = resources.files("jevper.probes").joinpath(name).read_text(encoding="utf-8")
    return _parse(text, f"probes/{name}")


_TOML_LINE = re.compile(r"\(at line (\d+), column \d+\)")
_PROBE_HEADER = re.compile(r"^\s*\[\[\s*probe\s*\]\]")
_ANY_ARRAY_HEADER = re.compile(r"^\s*\[\[")
_KEY_LINE = re.compile(r"^\s*(?:\[\s*probe\.)?\"?([A-Za-z0-9_-]+)\"?\s*(?:=|\])")


def _parse(text: str, source: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        found = _TOML_LINE.search(str(exc))
        where = f"{source}:{found[1]}" if found else source
        raise CatalogueError(f"{where}: expected valid TOML, got: {exc}") from exc


def _origins(text: str, source: str, count: int, *, builtin: bool) -> list[Origin]:
    """The origin of each of the file's `count` probes: the line of its `[[probe]]` header and of the
    first line that sets each key inside its block (1-based)."""
    lines = text.splitlines()
    headers = [i for i, line in enumerate(lines) if _PROBE_HEADER.match(line)]
    if len(headers) != count:  # written as an inline array: only the file can be named
        return [Origin(source, 1, builtin=builtin) for _ in range(count)]
    found = []
    for start in headers:
        end = next((i for i in range(start + 1, len(lines)) if _ANY_ARRAY_HEADER.match(lines[i])), len(lines))
        keys: dict[str, int] = {}
        for i in range(start + 1, end):
            key = _KEY_LINE.match(lines[i])
            if key is not None:
                keys.setdefault(key[1], i + 1)
        found.append(Origin(source, start + 1, keys, builtin))
    return found


def _text(raw: Mapping[str, Any], key: str, where: Origin) -> str:
    value = raw[key]
    if not isinstance(value, str) or not value:
        raise CatalogueError(
            f"{where.at(key)}: probe {raw.get('id')!r}: expected {key} to be a non-empty string, "
            f"got {value!r}"
        )
    return value


def _probe(raw: Mapping[str, Any], defaults: Mapping[str, Any], where: Origin) -> Probe:
    unknown = sorted(set(raw) - _PROBE_KEYS, key=lambda k: where.keys.get(k, 0))
    if unknown:
        raise CatalogueError(
            f"{where.at(unknown[0])}: probe {raw.get('id')!r} has unknown keys {unknown}; "
            f"expected keys among {sorted(_PROBE_KEYS)}"
        )
    for key in (*_TEXT_KEYS, "deterministic"):
        if key not in raw:
            raise CatalogueError(f"{where.at()}: probe {raw.get('id')!r} needs {key!r}")
    for key in _TEXT_KEYS:
        _text(raw, key, where)
    if not isinstance(raw["deterministic"], bool):
        raise CatalogueError(
            f"{where.at('deterministic')}: probe {raw['id']!r}: expected deterministic = true or false, "
            f"got {raw['deterministic']!r}"
        )
    surface = defaults.get("surface")
    if surface not in SURFACES:
        raise CatalogueError(f"{where.file}: expected surface one of {SURFACES}, got {surface!r}")
    canonical = bool(raw.get("canonical", defaults.get("canonical", False)))
    if canonical and not where.builtin:
        raise CatalogueError(
            f"{where.at('canonical')}: probe {raw['id']!r}: the canonical probes are jevper's contract; "
            "a probe of one's own is not canonical (remove `canonical`)"
        )
    return Probe(
        id=raw["id"],
        surface=cast(ProbeSurface, surface),
        topic=raw["topic"],
        method=raw.get("method", "POST"),
        path=raw.get("path", defaults.get("path", "")),
        asks=raw["asks"],
        decides=raw["decides"],
        classifier=raw["classifier"],
        deterministic=raw["deterministic"],
        prompt=raw.get("prompt", defaults.get("prompt", "standard")),
        thinking_off=bool(raw.get("thinking_off", defaults.get("thinking_off", True))),
        model=raw.get("model"),
        body=dict(raw.get("body", {})),
        drop=tuple(raw.get("drop", ())),
        raw_body=raw.get("raw_body"),
        prime_with=raw.get("prime_with"),
        request_of=raw.get("request_of"),
        sampling=dict(raw.get("sampling", {})),
        opening=raw.get("opening"),
        compare=raw["compare"],
        canonical=canonical,
        reproducible=bool(raw.get("reproducible", defaults.get("reproducible", True))),
        stability=raw.get("stability"),
        variant=raw.get("variant"),
        tolerance=_tolerance(raw, where),
        sends=tuple(raw.get("sends", ())),
    )


def _tolerance(raw: Mapping[str, Any], where: Origin) -> float | None:
    value = raw.get("tolerance")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise CatalogueError(
            f"{where.at('tolerance')}: probe {raw.get('id')!r}: expected tolerance to be a probability "
            f"between 0 and 1, got {value!r}"
        )
    return float(value)


def _read_probes(
    text: str, source: str, *, builtin: bool
) -> tuple[list[Probe], dict[str, Origin], list[Topic]]:
    """One probe file: its probes, where each is written, and the topics it adds (a user's file may
    add topics with `[[topic]]` entries: `id` and `title`)."""
    data = _parse(text, source)
    raws = data.get("probe", [])
    if not isinstance(raws, list):
        raise CatalogueError(f"{source}: expected [[probe]] entries, got probe = {type(raws).__name__}")
    defaults = {k: v for k, v in data.items() if k not in ("probe", "topic")}
    strange = sorted(set(defaults) - _DEFAULT_KEYS)
    if strange:
        line = next((i + 1 for i, ln in enumerate(text.splitlines()) if ln.strip().startswith(strange[0])), 1)
        raise CatalogueError(
            f"{source}:{line}: unknown file-wide keys {strange}; expected keys among {sorted(_DEFAULT_KEYS)}"
        )
    origins = _origins(text, source, len(raws), builtin=builtin)
    probes = [_probe(raw, defaults, where) for raw, where in zip(raws, origins, strict=True)]
    topics = [] if builtin else [_topic(t, source) for t in data.get("topic", [])]
    return probes, {p.id: where for p, where in zip(probes, origins, strict=True)}, topics


def _topic(raw: Any, source: str) -> Topic:
    if not isinstance(raw, Mapping) or set(raw) != {"id", "title"}:
        raise CatalogueError(
            f"{source}: expected each [[topic]] to have exactly an id and a title, got {raw!r}"
        )
    return Topic(id=str(raw["id"]), title=str(raw["title"]))


def user_files(paths: Iterable[Path]) -> list[Path]:
    """The TOML files a `--catalogue` names: a file as is, a folder's `*.toml` in name order."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(path.glob("*.toml"))
            if not found:
                raise CatalogueError(f"{path}: expected a folder of TOML probe files, found no *.toml in it")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise CatalogueError(f"{path}: expected a TOML probe file or a folder of them; it does not exist")
    return files


def load_catalogue(paths: Iterable[Path | str] = ()) -> Catalogue:
    """Every probe in catalogue order, with the topics their matrices are drawn in; checked whole.

    `paths` are a user's probe files or folders (`--catalogue`): their probes come after the built-in
    ones, checked exactly as those are; an id a built-in probe has is refused.
    """
    return _load(tuple(Path(p) for p in paths))


@cache
def _load(paths: tuple[Path, ...]) -> Catalogue:
    probes: list[Probe] = []
    origins: dict[str, Origin] = {}
    for name in PROBE_FILES:
        text = resources.files("jevper.probes").joinpath(name).read_text(encoding="utf-8")
        found, where, _ = _read_probes(text, f"probes/{name}", builtin=True)
        probes.extend(found)
        origins.update(where)
    topics = [Topic(id=t["id"], title=t["title"]) for t in read_data("topics.toml")["topic"]]
    files = user_files(paths)
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CatalogueError(f"{path}: expected a UTF-8 TOML file, could not read it ({exc})") from exc
        found, where, added = _read_probes(text, str(path), builtin=False)
        for probe in found:
            if probe.id in origins:
                raise CatalogueError(
                    f"{where[probe.id].at('id')}: probe id {probe.id!r} is taken by "
                    f"{'a built-in probe' if origins[probe.id].builtin else 'another probe'} "
                    f"({origins[probe.id].at()}); give yours an id of its own"
                )
            origins[probe.id] = where[probe.id]
        known = {t.id for t in topics}
        topics.extend(t for t in added if t.id not in known)
        probes.extend(found)
    check_catalogue(probes, topics, origins)
    return Catalogue(
        probes=tuple(probes), topics=tuple(topics), origins=origins, user_files=tuple(map(str, files))
    )


def check_catalogue(
    probes: Sequence[Probe], topics: Sequence[Topic], origins: Mapping[str, Origin] | None = None
) -> None:
    """Unique ids; every classifier, agreement rule, prompt layout and topic a probe names exists;
    sampling overrides of reproducible fields only; references to earlier probes. An error names
    the file and line of the offending key when `origins` says where the probe is written."""
    # Imported here: both modules read probes, so they load after this one.
    from jevper.probe.classifiers import CLASSIFIERS
    from jevper.probe.prompts import PROMPTS

    def at(probe: Probe, key: str) -> str:
        where = (origins or {}).get(probe.id)
        return f"{where.at(key)}: {probe.id}" if where else probe.id

    ids = [p.id for p in probes]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise CatalogueError(f"probe ids must be unique; repeated: {duplicates}")
    topic_ids = {t.id for t in topics}
    reproducible = set(read_data("presets.toml")["reproducible"])
    for index, probe in enumerate(probes):
        if probe.classifier not in CLASSIFIERS:
            raise CatalogueError(
                f"{at(probe, 'classifier')}: classifier must name one in jevper/probe/classifiers.py among "
                f"{sorted(CLASSIFIERS)}, got {probe.classifier!r}"
            )
        if probe.prompt not in PROMPTS:
            raise CatalogueError(
                f"{at(probe, 'prompt')}: prompt must be a layout among {PROMPTS}, got {probe.prompt!r}"
            )
        if probe.compare not in RULES:
            raise CatalogueError(
                f"{at(probe, 'compare')}: compare must name a rule among {sorted(RULES)}, "
                f"got {probe.compare!r}"
            )
        if not set(probe.sampling) <= reproducible:
            raise CatalogueError(
                f"{at(probe, 'sampling')}: sampling may override only {sorted(reproducible)}, "
                f"got {sorted(set(probe.sampling) - reproducible)}"
            )
        if probe.topic not in topic_ids:
            raise CatalogueError(
                f"{at(probe, 'topic')}: topic {probe.topic!r} is not one of {sorted(topic_ids)}"
            )
        _check_stability(probe, at)
        strange = [layout for layout in probe.sends if layout not in PROMPTS]
        if strange:
            raise CatalogueError(
                f"{at(probe, 'sends')}: sends names prompt layouts among {PROMPTS}, got {strange}"
            )
        for key, ref in (("prime_with", probe.prime_with), ("request_of", probe.request_of)):
            # A referenced request must come earlier, so a full run sends it first anyway.
            if ref is not None and ref not in ids[:index]:
                raise CatalogueError(f"{at(probe, key)}: refers to {ref!r}, which is not an earlier probe")


def _check_stability(probe: Probe, at: Callable[[Probe, str], str]) -> None:
    """A stability probe names a plan, uses the classifier that reads it, and a variant exactly when its
    plan compares one; no other probe names either."""
    from jevper.probe.prompts import PROMPTS
    from jevper.probe.stability import KINDS, STABILITY_CLASSIFIER

    if probe.stability is None:
        if probe.classifier == STABILITY_CLASSIFIER or probe.variant is not None:
            raise CatalogueError(
                f"{at(probe, 'stability')}: the {STABILITY_CLASSIFIER!r} classifier and `variant` belong "
                f"to a stability probe: set stability to one of {sorted(KINDS)}"
            )
        return
    if probe.stability not in KINDS:
        raise CatalogueError(
            f"{at(probe, 'stability')}: stability must name a plan among {sorted(KINDS)}, "
            f"got {probe.stability!r}"
        )
    if probe.classifier != STABILITY_CLASSIFIER:
        raise CatalogueError(
            f"{at(probe, 'classifier')}: a stability probe is graded by the {STABILITY_CLASSIFIER!r} "
            f"classifier, got {probe.classifier!r}"
        )
    if (probe.variant is not None) != (probe.stability == "variant"):
        raise CatalogueError(
            f"{at(probe, 'variant')}: a variant names the prompt layout its answers are compared with; "
            'set it exactly when stability = "variant"'
        )
    if probe.variant is not None and probe.variant not in PROMPTS:
        raise CatalogueError(
            f"{at(probe, 'variant')}: variant must be a prompt layout among {PROMPTS}, got {probe.variant!r}"
        )
    if probe.prime_with is not None or probe.request_of is not None:
        raise CatalogueError(
            f"{at(probe, 'prime_with')}: a stability probe sends its own plan; drop prime_with and request_of"
        )
