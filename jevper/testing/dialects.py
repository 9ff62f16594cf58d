"""Loopback servers that speak another dialect of a decision route, transcribed from documentation.

Nothing here was recorded from the servers named: each speaks the body ../shared/decisions.md
("Dialects") reports from their documentation, so the probe can be seen naming a dialect and grading by
its rules. A recording made against one is labelled transcribed, never recorded. Where the documents
say nothing (an error's wording, a field of an answer they do not list), the choice is ours and says so.

- ``sglang``: ``POST /v1/decisions`` in SGLang's own body (docs.sglang.io supported-models/
  decision_models): ``input`` and ``questions: [{id, type: choice|score|yes_no, question, options:
  [{name, description}] | levels}]``, 2-26 options and 2-10 levels; the answer has ``object:
  "decisions"``, an answer per question with its ``label_mass``, and ``usage.prompt_tokens``. Any other
  body is a 400 naming the field it misses (our wording). No ``/v1/systemone``.
- ``ollama``: ``POST /v1/systemone`` in Ollama's dialect (docs.ollama.com/api/systemone): TypeSafe's
  body plus ``images`` and ``keep_alive``; a choice of 2-26 options and a score of 2-26 levels; a body of
  at most 64 KiB; ``POST /api/show`` lists ``"decision"`` among the model's capabilities. No
  ``/v1/decisions``.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import sys
import threading
from collections.abc import Iterator, Mapping
from typing import Any, Literal

from jevper.testing.loopback import LoopbackServer
from jevper.testing.systemone import SystemOneAnswer, confidence, halving

Dialect = Literal["sglang", "ollama"]
DIALECTS: tuple[Dialect, ...] = ("sglang", "ollama")
#: The documented limits.
SGLANG_OPTIONS, SGLANG_LEVELS = (2, 26), (2, 10)
OLLAMA_OPTIONS, OLLAMA_LEVELS = (2, 26), (2, 26)
OLLAMA_MAX_BODY = 64 * 1024
#: Our choice where SGLang's documents give no figure: a yes/no answer's probability of yes.
YES = 0.7


class DialectServer:
    """A server speaking `dialect` on its decision route (and listing `model` on GET /v1/models, as owned
    by `owned_by` when given, with no architecture: what Ollama's list says is not documented, so the
    client's discovery must not depend on it). Ollama's dialect answers POST /api/show with the
    "decision" capability, its one documented sign of a decision model."""

    def __init__(self, dialect: Dialect, model: str = "dialect-model", owned_by: str | None = None) -> None:
        if dialect not in DIALECTS:
            raise ValueError(f"expected a dialect among {DIALECTS}, got {dialect!r}")
        self.dialect = dialect
        self.model = model
        self.owned_by = owned_by
        self._http = LoopbackServer(self._route, f"{dialect}-dialect-server")

    @property
    def base_url(self) -> str:
        return self._http.base_url

    def start(self) -> DialectServer:
        self._http.start()
        return self

    def stop(self) -> None:
        self._http.stop()

    def _route(self, method: str, path: str, body: Any, size: int) -> tuple[int, Any]:
        path = path.rstrip("/")
        if method == "GET" and path.endswith("/models"):
            owner = {} if self.owned_by is None else {"owned_by": self.owned_by}
            return 200, {"object": "list", "data": [{"id": self.model, "object": "model", **owner}]}
        if method == "POST" and self.dialect == "sglang" and path.endswith("/v1/decisions"):
            return sglang(body, self.model)
        if method == "POST" and self.dialect == "ollama" and path == "/api/show":
            # Ollama marks a decision model in /api/show's capabilities, not in its model list.
            known = isinstance(body, Mapping) and body.get("model") == self.model
            if not known:
                return 404, {"error": "model not found"}
            return 200, {"capabilities": ["completion", "decision"], "details": {"format": "gguf"}}
        if method == "POST" and self.dialect == "ollama" and path.endswith("/v1/systemone"):
            return ollama(body, size, self.model)
        return 404, {
            "error": {"message": f"no route {method} {path}", "type": "not_found_error", "code": 404}
        }


def _refusal(message: str) -> tuple[int, Any]:
    return 400, {"error": {"message": message, "type": "invalid_request_error", "code": 400}}


def sglang(body: Any, model: str) -> tuple[int, Any]:
    """SGLang's body in, SGLang's answer out; anything else a 400 naming what it misses."""
    if not isinstance(body, Mapping):
        return _refusal("the body must be a JSON object")
    questions = body.get("questions")
    if not isinstance(questions, list) or not questions:
        return _refusal("questions: expected a non-empty list of {id, type, question, options | levels}")
    if "input" not in body:
        return _refusal("input: field required")
    answers = []
    for index, question in enumerate(questions):
        if not isinstance(question, Mapping) or "id" not in question or "question" not in question:
            return _refusal(f"questions.{index}: expected the fields id, type and question")
        kind = question.get("type")
        if kind == "yes_no":
            answers.append({"id": question["id"], "type": kind, "probability": YES, "label_mass": 0.97})
            continue
        listed = question.get("options" if kind == "choice" else "levels")
        low, high = SGLANG_OPTIONS if kind == "choice" else SGLANG_LEVELS
        if kind not in ("choice", "score") or not isinstance(listed, list) or not low <= len(listed) <= high:
            return _refusal(f"questions.{index}: a {kind} takes {low} to {high} options or levels")
        names = [o.get("name") if isinstance(o, Mapping) else str(o) for o in listed]
        shares = halving(len(names))
        answer: dict[str, Any] = {
            "id": question["id"],
            "type": kind,
            "probabilities": dict(zip(map(str, names), shares, strict=True)),
            "confidence": confidence(shares),
            "label_mass": 0.97,
        }
        answer["choice" if kind == "choice" else "score"] = (
            names[0] if kind == "choice" else sum(i * p for i, p in enumerate(shares))
        )
        answers.append(answer)
    return 200, {"object": "decisions", "model": model, "answers": answers, "usage": {"prompt_tokens": 40}}


def ollama(body: Any, size: int, model: str) -> tuple[int, Any]:
    """Ollama's dialect of System One: TypeSafe's answers within Ollama's own limits."""
    if size > OLLAMA_MAX_BODY:
        return _refusal(f"request body too large: {size} bytes, at most {OLLAMA_MAX_BODY}")
    if not isinstance(body, Mapping) or "state" not in body:
        return _refusal("state: field required")
    questions = body.get("questions")
    if not isinstance(questions, Mapping) or not questions:
        return _refusal("questions: expected at least one question")
    images = body.get("images", [])
    if not isinstance(images, list) or not all(isinstance(i, str) and _base64(i) for i in images):
        # Documented: base64 PNG, JPEG or WebP, no URLs; the wording is ours.
        return _refusal("images: expected a list of base64-encoded images (URLs are not supported)")
    for qid, question in questions.items():
        if not isinstance(question, Mapping) or question.get("type") not in ("choice", "noul", "score"):
            return _refusal(f"questions.{qid}: type must be choice, noul or score")
        criteria = question.get("criteria")
        if question["type"] in ("choice", "score"):
            low, high = OLLAMA_OPTIONS if question["type"] == "choice" else OLLAMA_LEVELS
            count = len(criteria) if isinstance(criteria, Mapping | list) else 0
            if not low <= count <= high:
                return _refusal(
                    f"questions.{qid}: a {question['type']} takes {low} to {high} options or levels"
                )
    return 200, SystemOneAnswer(body, model).body()


def _base64(text: str) -> bool:
    try:
        base64.b64decode(text, validate=True)
    except ValueError:
        return False
    return bool(text)


@contextlib.contextmanager
def running(
    dialect: Dialect, model: str = "dialect-model", owned_by: str | None = None
) -> Iterator[DialectServer]:
    server = DialectServer(dialect, model, owned_by).start()
    try:
        yield server
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m jevper.testing.dialects",
        description="Serve a decision route in another dialect, transcribed from its documentation.",
    )
    parser.add_argument("dialect", choices=DIALECTS)
    parser.add_argument("--model", default="dialect-model", help="the model GET /v1/models lists")
    args = parser.parse_args(argv)
    server = DialectServer(args.dialect, args.model).start()
    print(f"{args.dialect} dialect on {server.base_url}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        threading.Event().wait()
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
