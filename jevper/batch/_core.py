"""The batch core: a record batch of states in, a record batch of answers or typed errors out.

Every row of a batch is asked every question through ``AsyncSystemOneClient.system_one`` on the server
with the most room (``jevper._upstreams``); a row whose call fails comes back with its ``error`` set,
so no row's failure ever costs the batch. Making a classifier does no I/O and it pickles: the servers'
clients are made on first use, in the event loop that uses them.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

import pyarrow as pa

from jevper import AsyncSystemOneClient, ConfigError, Escalation, InvalidQuestionError, __version__
from jevper._http import HTTPClient, check_api_key
from jevper._upstreams import Upstream, Upstreams, blame
from jevper.batch._schema import ESCALATION_COLUMN, RESERVED, Row, result_columns, result_fields
from jevper.calibration import Calibration, loaded, threshold_for
from jevper.models import APIS, METHODS, sdk_for
from jevper.questions import Question, as_question

Server = Upstream
#: What a classifier is given for each server: a Server, or a mapping of its fields.
ServerSpec = Upstream | Mapping[str, Any]
#: Called with each row's position in the batch and its outcome as soon as it has one.
OnRow = Callable[[int, Row], None]

#: Rows asked again on another server when the one asked failed (refused, timed out, 5xx, 429).
DEFAULT_MAX_RETRIES = 3
DEFAULT_TIMEOUT = 60.0
#: A server's restart is ridden out: for this long after servers start failing for a reason that may
#: pass (refused connections, then 503s while the model loads) rows wait for them instead of failing,
#: and a server that is out is tried again at least every RESTART_COOL_DOWN_S, so its return is
#: noticed soon after.
RESTART_PATIENCE_S = 30.0
RESTART_COOL_DOWN_S = 4.0
#: How long a server that failed is out before it is asked again, doubled with each failure in a row (up
#: to RESTART_COOL_DOWN_S).
COOL_DOWN_S = 1.0
#: The answered states a classifier keeps in memory (their digests and answers), for the rows that carry
#: them again: beyond them, the least lately answered is forgotten and, seen again, asked again, which
#: the answer cache answers with no request.
DUPLICATES_KEPT = 10_000
#: How long ``close()`` waits for the connections of a loop running on another thread to close.
CLOSE_TIMEOUT_S = 5.0

B = TypeVar("B", pa.RecordBatch, pa.Table)


def as_server(spec: ServerSpec) -> Upstream:
    if isinstance(spec, Upstream):
        return spec
    if isinstance(spec, Mapping):
        try:
            return Upstream(**spec)
        except TypeError as exc:
            raise ConfigError(
                f"servers: expected base_url, model and optionally slots and api_key, got {sorted(spec)}"
            ) from exc
    raise ConfigError(
        f"servers: expected a Server or a mapping with base_url and model, got {type(spec).__name__}"
    )


def unwrapped(value: Any) -> Any:
    """The questions a System One request's body (or its ``{"questions": ...}`` part) wraps, or ``value``
    itself: a ``questions`` key is a question's id when what it holds is one question (its ``type`` a
    string), so a question may be called "questions"."""
    if isinstance(value, Mapping) and "questions" in value:
        inner = value["questions"]
        if not (isinstance(inner, Mapping) and isinstance(inner.get("type"), str)):
            return inner
    return value


def as_questions(questions: Mapping[str, Any]) -> tuple[tuple[str, Question], ...]:
    """The questions in order, each checked as the client checks it (the API's shape or a question)."""
    if isinstance(questions, Mapping) and set(questions) == {"questions"}:
        questions = unwrapped(questions)  # a System One request's questions object, whole
    if not isinstance(questions, Mapping) or not questions:
        raise InvalidQuestionError(
            f"questions: expected a non-empty mapping of question id to question, got {questions!r:.80}"
        )
    return tuple((str(qid), as_question(str(qid), q)) for qid, q in questions.items())


class BatchClassifier:
    """Ask every question about the state of every row of a batch; answers or an error for each row.

    ``servers``: one or more servers (``Server(base_url, model, slots)``); rows go to the one with the
    most room. ``keep_columns``: False (the id column only), True (every input column), or the names of
    the input columns to keep. ``concurrency``: rows in flight at once (default: every server's slots).
    ``max_retries``: how many times a row is asked again, elsewhere, after a server failed it (and past
    them for up to ``patience`` seconds, default RESTART_PATIENCE_S, while the failure may pass: a
    restart; 0 gives up as soon as the retries are spent). ``cool_down``: how many seconds a server that
    failed is out before it is asked again (default COOL_DOWN_S), doubled with each failure in a row up to
    RESTART_COOL_DOWN_S. ``api``, ``method``, ``extra_body``,
    ``timeout``, ``calibration`` (a ``Calibration`` or its file, loaded once, here) and ``option_orders`` (a
    choice asked in that many orders of its options, averaged) are the client's; with a calibration,
    ``api`` and ``method`` left "auto" ask as the calibration was fit (its surface and method), so that
    it applies to every answer. ``answered`` holds, per question, the (method, surface) pairs its answers
    were read with in this process: what the output's provenance records. ``cache`` (an SQLite file) and
    ``cache_mode`` (read-write, read, write, off) are the clients' answer cache: a row asked before is
    answered from it without a request (``cache_hits`` counts them). Each distinct state is asked once
    per run, on every engine: the rows that carry it again get its answers (``duplicates`` counts them);
    memory holds the ``duplicates_kept`` states answered most lately (DUPLICATES_KEPT), and one answered
    before them is asked again, which the cache answers without a request.
    ``escalate`` (a ``jevper.Escalation`` whose ``to`` is a ``Server`` or its mapping, and whose
    ``calibration`` is that server's) asks the questions whose calibrated top probability is below its
    ``below`` again of that server; the output's ``escalation`` column holds each question's route and
    both answers (``escalated`` counts the questions asked again, ``escalation_failures`` those the
    second server failed, whose first answers stand).
    """

    def __init__(
        self,
        questions: Mapping[str, Any],
        servers: Sequence[ServerSpec],
        *,
        id_column: str = "id",
        state_column: str = "state",
        keep_columns: bool | Sequence[str] = False,
        concurrency: int | None = None,
        api: str = "auto",
        method: str = "auto",
        extra_body: Mapping[str, Any] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        max_retries: int = DEFAULT_MAX_RETRIES,
        patience: float = RESTART_PATIENCE_S,
        cool_down: float = COOL_DOWN_S,
        calibration: Calibration | str | os.PathLike[str] | None = None,
        option_orders: int = 1,
        cache: str | os.PathLike[str] | None = None,
        cache_mode: str = "read-write",
        escalate: Escalation | Mapping[str, Any] | None = None,
    ) -> None:
        self.questions = as_questions(questions)
        self._asked = dict(self.questions)
        if isinstance(servers, str | Mapping | Upstream) or not servers:
            raise ConfigError(f"servers: expected a list of one or more servers, got {servers!r:.80}")
        self.servers = tuple(as_server(s) for s in servers)
        self.id_column, self.state_column = id_column, state_column
        self.keep_columns = keep_columns if isinstance(keep_columns, bool) else tuple(keep_columns)
        for qid, _ in self.questions:
            if qid in (*RESERVED, id_column):
                raise InvalidQuestionError(
                    f"questions[{qid!r}]: expected a question id other than {id_column!r}, 'error' and "
                    "'usage', which name output columns; rename the question"
                )
        if concurrency is not None and (
            isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1
        ):
            raise ConfigError(f"concurrency: expected a positive integer, got {concurrency!r}")
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ConfigError(f"max_retries: expected an integer of at least 0, got {max_retries!r}")
        if isinstance(patience, bool) or not isinstance(patience, int | float) or not 0 <= patience < 1e6:
            raise ConfigError(f"patience: expected seconds from 0 to 1e6, got {patience!r}")
        if (
            isinstance(cool_down, bool)
            or not isinstance(cool_down, int | float)
            or not 0 < cool_down <= RESTART_COOL_DOWN_S
        ):
            raise ConfigError(
                f"cool_down: expected seconds above 0 and at most {RESTART_COOL_DOWN_S:g}, got {cool_down!r}"
            )
        self.concurrency = concurrency or sum(s.slots for s in self.servers)
        self.max_retries = max_retries
        self.patience = float(patience)
        self.cool_down = float(cool_down)
        self.client_options: dict[str, Any] = {
            "api": api,
            "method": method,
            "extra_body": dict(extra_body or {}),
            "timeout": timeout,
        }
        if option_orders != 1:
            self.client_options["option_orders"] = option_orders
        if cache is not None:
            self.client_options.update(cache=os.fspath(cache), cache_mode=cache_mode)
        given = dict(self.client_options)
        if calibration is not None:
            self.client_options = calibrated_options(given, loaded(calibration))
        self.escalation = escalation_of(escalate)
        #: The escalation server's client options: the same as the first's, with its own calibration.
        self.escalation_options: dict[str, Any] = {}
        if self.escalation is not None:
            target = self.escalation.calibration
            self.escalation_options = given if target is None else calibrated_options(given, loaded(target))
            if ESCALATION_COLUMN in self._asked:
                raise InvalidQuestionError(
                    f"questions[{ESCALATION_COLUMN!r}]: expected a question id other than "
                    f"{ESCALATION_COLUMN!r}, which names the output's column of the routes when escalating; "
                    "rename the question"
                )
        self.answered: dict[str, set[tuple[str, str]]] = {qid: set() for qid, _ in self.questions}
        #: Rows answered from the cache, and rows whose state an earlier row of the run carried (answered
        #: with that row's answer, not asked), in this process.
        self.cache_hits = 0
        self.duplicates = 0
        #: Questions asked again of the escalation server, and those it failed (their first answers kept).
        self.escalated = 0
        self.escalation_failures = 0
        #: The answered states kept for the rows that carry them again, the most lately answered: a
        #: million rows' states would not fit; one answered before them is answered from the cache.
        self.duplicates_kept = DUPLICATES_KEPT
        # The answered states (by digest), least lately answered first; the asks in flight (on _once_loop).
        self._once: OrderedDict[bytes, Row] = OrderedDict()
        self._asking: dict[bytes, asyncio.Future[Row]] = {}
        self._once_loop: asyncio.AbstractEventLoop | None = None
        # The client's own checks of these options, once, now (a client of nothing does no I/O).
        for server in self.servers:
            AsyncSystemOneClient(object(), model=server.model, **self.client_options)
            check_api_key(server.base_url, server.api_key)
        if self.escalation is not None:
            target = self.escalation.to
            second = AsyncSystemOneClient(object(), model=target.model, **self.escalation_options)
            check_api_key(target.base_url, target.api_key)
            # "auto" needs the first calibration, with a threshold for every question (None: all escalate).
            escalating = Escalation(second, self.escalation.below)
            AsyncSystemOneClient(
                object(), model=self.servers[0].model, **self.client_options, escalate=escalating
            )
            if self.escalation.below == "auto":
                for qid, _ in self.questions:
                    threshold_for(self.client_options["calibration"], qid)
        self._pool: Upstreams | None = None
        self._sdks: list[Any] = []  # each server's HTTP client, by pool: what ``requests_sent`` adds up
        self._second: AsyncSystemOneClient | None = None  # the escalation server's, on _pool_loop
        self._second_sdks: list[Any] = []
        self._pool_loop: asyncio.AbstractEventLoop | None = None
        self._runner: _LoopThread | None = None
        self._closing: asyncio.Task[None] | None = None

    # --- pickling: the settings travel, the connections do not -------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(
            _pool=None,
            _pool_loop=None,
            _runner=None,
            _closing=None,
            _sdks=[],
            _once=OrderedDict(),
            _asking={},
            _once_loop=None,
            _second=None,
            _second_sdks=[],
        )
        return state

    # --- the schema ----------------------------------------------------------------------------------

    def kept(self, input_schema: pa.Schema) -> list[str]:
        """The input columns the output carries after the id column."""
        self._check_columns(input_schema)
        if self.keep_columns is True:
            return [n for n in input_schema.names if n != self.id_column]
        if self.keep_columns is False:
            return []
        return [n for n in self.keep_columns if n != self.id_column]

    def output_schema(self, input_schema: pa.Schema) -> pa.Schema:
        """The schema of what ``classify`` returns for a batch of ``input_schema``."""
        kept = self.kept(input_schema)
        fields = [input_schema.field(self.id_column), *(input_schema.field(n) for n in kept)]
        return pa.schema([*fields, *result_fields(self.questions, self.escalation is not None)])

    def _check_columns(self, schema: pa.Schema) -> None:
        names = schema.names
        for role, name in (("id", self.id_column), ("state", self.state_column)):
            if name not in names:
                raise ConfigError(
                    f"{role}_column: expected a column {name!r} holding each row's {role}, got columns "
                    f"{names}; pass {role}_column= (--{role}-column) naming one of them"
                )
        if not isinstance(self.keep_columns, bool):
            missing = [n for n in self.keep_columns if n not in names]
            if missing:
                raise ConfigError(
                    f"keep_columns: expected columns of the input, got {missing} (the input has {names})"
                )
            kept = set(self.keep_columns)
        else:
            kept = set(names) if self.keep_columns else set()
        reserved = {*RESERVED, *([ESCALATION_COLUMN] if self.escalation is not None else [])}
        clash = sorted(kept & ({qid for qid, _ in self.questions} | reserved))
        if clash:
            raise ConfigError(
                f"keep_columns: expected kept columns to differ from the output's own columns (the question "
                f"ids, 'error', 'usage'), got {clash} in both; rename them or keep fewer columns"
            )

    # --- classifying -------------------------------------------------------------------------------

    async def classify(self, batch: B) -> B:
        """Every row of ``batch`` (a RecordBatch or a Table) with its answers or its error."""
        if isinstance(batch, pa.Table):
            parts = [await self.classify_rows(b) for b in batch.to_batches()]
            return pa.Table.from_batches(parts, schema=self.output_schema(batch.schema))
        return await self.classify_rows(batch)

    def classify_sync(self, batch: B) -> B:
        """``classify`` for a caller without an event loop (a Spark UDF): run on the classifier's own
        loop thread, so the servers' connections outlive the call."""
        if self._runner is None:
            self._runner = _LoopThread()
        return self._runner.run(self.classify(batch))

    def classify_pandas(self, frame: Any) -> Any:
        """A pandas DataFrame in, one out (the blocking ``classify_sync``; needs pandas)."""
        batch = pa.RecordBatch.from_pandas(frame, preserve_index=False)
        return self.classify_sync(batch).to_pandas()

    async def classify_rows(
        self,
        batch: pa.RecordBatch,
        *,
        known: Mapping[int, Row] | None = None,
        on_row: OnRow | None = None,
    ) -> pa.RecordBatch:
        """``classify`` for one batch; ``known`` rows (by position) are taken as they are, not asked, and
        ``on_row`` hears of every other row as soon as it is done (the local engine's journal)."""
        schema = self.output_schema(batch.schema)
        states = state_values(batch.column(self.state_column))
        rows: list[Row | None] = [None] * batch.num_rows
        if known:
            for i, row in known.items():
                rows[i] = row
        todo = iter([i for i, row in enumerate(rows) if row is None])
        pool = self._upstreams()

        async def work() -> None:
            for i in todo:
                row = await self.ask_once(pool, states[i])
                rows[i] = row
                if on_row is not None:
                    on_row(i, row)

        workers = [asyncio.ensure_future(work()) for _ in range(min(self.concurrency, batch.num_rows))]
        try:
            await asyncio.gather(*workers)
        except BaseException:
            for worker in workers:
                worker.cancel()
            raise
        done = [row for row in rows if row is not None]
        kept = [valid_text(batch.column(name)) for name in self.kept(batch.schema)]
        escalating = self.escalation is not None
        columns = [batch.column(self.id_column), *kept, *result_columns(self.questions, done, escalating)]
        return pa.RecordBatch.from_arrays(columns, schema=schema)

    async def ask_once(self, pool: Upstreams, state: Any) -> Row:
        """``ask``, once per distinct state of the run: a row whose state an earlier row carried gets that
        row's answers (and no tokens: nothing was sent for it). A failure is shared by the rows waiting
        for it, and asked again by a later one. Only the ``duplicates_kept`` states answered most lately
        are kept: a state answered before them is asked again, which the cache (``cache=``) answers."""
        loop = asyncio.get_running_loop()
        if self._once_loop is not loop:  # an ask in flight belongs to its loop; answered rows carry over
            self._asking = {}
            self._once_loop = loop
        key = _digest(state)
        known = self._once.get(key)
        if known is not None:
            self._once.move_to_end(key)
            self.duplicates += 1
            return Row(known.answers, 0, 0, escalation=known.escalation)
        waiting = self._asking.get(key)
        if waiting is not None:
            self.duplicates += 1
            first = await asyncio.shield(waiting)
            if first.error is not None:
                return first
            return Row(first.answers, 0, 0, escalation=first.escalation)
        asking: asyncio.Future[Row] = loop.create_future()
        self._asking[key] = asking
        try:
            row = await self.ask(pool, state)
        except BaseException:
            del self._asking[key]
            asking.cancel()
            raise
        del self._asking[key]
        if row.error is None:
            self._once[key] = row
            while len(self._once) > self.duplicates_kept:
                self._once.popitem(last=False)
        asking.set_result(row)
        return row

    async def ask(self, pool: Upstreams, state: Any) -> Row:
        """One row's outcome; never raises for the row's failure."""
        questions = self._asked

        async def call(client: AsyncSystemOneClient) -> Any:
            return await client.system_one(state=state, questions=questions)

        try:
            answered = await pool.ask(call, attempts=1 + self.max_retries)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # a row's failure is data; even a bug's, with its type named
            # Any lone surrogate quoted in the message is escaped: the column holds UTF-8 text.
            said = str(error).encode("utf-8", "backslashreplace").decode("utf-8")
            return Row(error=(type(error).__name__, said), server_failed=blame(error) is not None)
        for qid, trace in answered.debug.get("questions", {}).items():
            if qid in self.answered and isinstance(trace, Mapping):
                self.answered[qid].add((str(trace.get("method")), str(trace.get("surface"))))
        if answered.debug.get("cache", {}).get("hit"):
            self.cache_hits += 1
        body = answered.to_api()
        routes = answered.debug.get("escalation", {}).get("questions")
        if routes is not None:
            asked_again = [route for route in routes.values() if route["escalated"]]
            self.escalated += len(asked_again)
            self.escalation_failures += sum(route["failure"] is not None for route in asked_again)
        usage = answered.usage
        return Row(body["answers"], usage.input_tokens, usage.output_tokens, escalation=routes)

    def _upstreams(self) -> Upstreams:
        loop = asyncio.get_running_loop()
        if self._pool is None or self._pool_loop is not loop:
            # A pool per event loop: an SDK's connections belong to the loop that opened them.
            if self.escalation is not None:
                target = self.escalation.to
                self._second = self._client(target, self.escalation_options, self._second_sdks)
            self._pool = Upstreams(
                self.servers,
                self._connect,
                cool_down=self.cool_down,
                max_cool_down=RESTART_COOL_DOWN_S,
                patience=self.patience,
            )
            self._pool_loop = loop
        return self._pool

    @property
    def requests_sent(self) -> int:
        """The HTTP requests this classifier's clients sent, in this process, retries included (the
        escalation server's too)."""
        return sum(sdk.sent for sdk in (*self._sdks, *self._second_sdks))

    @property
    def escalation_requests_sent(self) -> int:
        """The HTTP requests sent to the escalation server, in this process, retries included."""
        return sum(sdk.sent for sdk in self._second_sdks)

    @property
    def upstreams(self) -> Upstreams | None:
        """The servers' pool of the last loop that classified (None before first use)."""
        return self._pool

    def _connect(self, server: Upstream) -> AsyncSystemOneClient:
        options = self.client_options
        if self.escalation is not None and self._second is not None:
            options = {**options, "escalate": Escalation(self._second, self.escalation.below)}
        return self._client(server, options, self._sdks)

    def _client(self, server: Upstream, options: Mapping[str, Any], sdks: list[Any]) -> AsyncSystemOneClient:
        sdk: object
        if sdk_for(options["api"]) == "anthropic":
            from anthropic import AsyncAnthropic, DefaultAsyncHttpxClient

            root = server.base_url.removesuffix("/v1")
            counted = _Sent()
            sdks.append(counted)
            sdk = AsyncAnthropic(
                base_url=root,
                api_key=server.api_key or "none",
                max_retries=0,
                http_client=DefaultAsyncHttpxClient(event_hooks={"request": [counted.one]}),
            )
        else:
            # Not the openai SDK: its work per request bounded a batch's rate (jevper._http).
            sdk = HTTPClient(server.base_url, server.api_key, user_agent=f"jevper/{__version__}")
            sdks.append(sdk)
        # No retries by the SDK: a failed call moves to another server instead (Upstreams.ask).
        return AsyncSystemOneClient(sdk, model=server.model, max_concurrency=server.slots, **options)

    async def aclose(self) -> None:
        if self._pool is not None:
            await self._pool.aclose()
            self._pool = None
        if self._second is not None:
            closing = getattr(self._second._client, "close", None)
            self._second = None
            if callable(closing):
                done = closing()
                if asyncio.iscoroutine(done):
                    await done

    def close(self) -> None:
        """Close the servers' connections from outside their event loop: the classifier's own loop
        thread, a loop that is not running, or one running on another thread (a Ray actor's, whose
        teardown calls this from its own thread)."""
        if self._runner is not None:
            self._runner.run(self.aclose())
            self._runner.stop()
            self._runner = None
            return
        loop = self._pool_loop
        if self._pool is None or loop is None or loop.is_closed():
            return
        if not loop.is_running():
            loop.run_until_complete(self.aclose())
        elif _running_loop() is loop:
            # Called on the loop itself, synchronously: closed as soon as the caller yields.
            self._closing = loop.create_task(self.aclose())
        else:
            asyncio.run_coroutine_threadsafe(self.aclose(), loop).result(CLOSE_TIMEOUT_S)
        self._pool = None


def calibrated_options(options: Mapping[str, Any], fit: Calibration) -> dict[str, Any]:
    """The client options with ``fit`` applied to every answer; "auto" could read an answer otherwise than
    the calibration was fit for (grammar where it was fit on logprobs), and every such row would fail:
    the surface and method left "auto" are those it was fit on."""
    chosen = {**options, "calibration": fit}
    if options["api"] == "auto" and fit.bound_to.surface in APIS:
        chosen["api"] = fit.bound_to.surface
    if options["method"] == "auto" and fit.bound_to.method in METHODS:
        chosen["method"] = fit.bound_to.method
    return chosen


def escalation_of(given: Escalation | Mapping[str, Any] | None) -> Escalation | None:
    """``escalate=`` checked: an ``Escalation`` (or its mapping) whose ``to`` is a server."""
    if given is None:
        return None
    if isinstance(given, Mapping):
        names = sorted(given)
        try:
            given = Escalation(**given)
        except TypeError:
            raise ConfigError(
                f"escalate: expected to, below and optionally calibration, got {names}"
            ) from None
    if not isinstance(given, Escalation):
        raise ConfigError(
            f"escalate: expected a jevper.Escalation(to=Server(...), below=...), got {type(given).__name__}"
        )
    if not isinstance(given.to, Upstream | Mapping):
        raise ConfigError(
            f"escalate: expected to= a Server (or a mapping with base_url and model) on BatchClassifier, got "
            f"{type(given.to).__name__}; the batch makes the server's client itself"
        )
    return Escalation(as_server(given.to), given.below, given.calibration)


def _digest(state: Any) -> bytes:
    """A state's SHA-256, for telling rows apart in 32 bytes whatever the state's size."""
    return hashlib.sha256(_json_key(state).encode("utf-8", "surrogatepass")).digest()


def _json_key(state: Any) -> str:
    """A state as one text, for telling rows apart: equal for equal states, in their own key order."""
    return json.dumps(state, ensure_ascii=False, separators=(",", ":"), default=repr)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def state_values(column: pa.Array | pa.ChunkedArray) -> list[Any]:
    """Each row's state as the client takes it: text, or the JSON value a nested column holds.

    A string column whose bytes are not UTF-8 (a lone surrogate written out by a lenient encoder) is
    read row by row, so that only those rows fail, with the client's own words for what is wrong.
    """
    values: list[Any]
    try:
        values = column.to_pylist()
    except UnicodeDecodeError:
        values = [_decoded(v) for v in column.cast(pa.binary()).to_pylist()]
    kind = column.type
    if pa.types.is_struct(kind) or pa.types.is_list(kind) or pa.types.is_large_list(kind):
        values = [_without_nulls(v) for v in values]
    return values


def valid_text(column: pa.Array) -> pa.Array:
    """A kept text column as valid UTF-8: bytes that are not (a lone surrogate) written as escapes."""
    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        return column
    try:
        column.validate(full=True)
    except pa.ArrowInvalid:
        values = [_decoded(v) for v in column.cast(pa.binary()).to_pylist()]
        escaped = [None if v is None else v.encode("utf-8", "backslashreplace").decode() for v in values]
        return pa.array(escaped, type=column.type)
    return column


def _decoded(raw: bytes | None) -> str | None:
    if raw is None:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        # Lone surrogates come back as they were, other bad bytes as escapes: the client names the
        # first one and that row fails.
        try:
            return raw.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            return raw.decode("utf-8", "surrogateescape")


def _without_nulls(value: Any) -> Any:
    """A struct's absent keys come back from Arrow as nulls: a state has them absent, as it was given."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


T = TypeVar("T")


class _LoopThread:
    """An event loop on a thread of its own, for blocking callers."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="jevper-batch", daemon=True)
        self._thread.start()

    def run(self, coroutine: Any) -> Any:
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        return future.result()

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


class _Sent:
    """The requests an SDK's HTTP client sent, counted by its request hook."""

    def __init__(self) -> None:
        self.sent = 0

    async def one(self, request: object) -> None:
        self.sent += 1
