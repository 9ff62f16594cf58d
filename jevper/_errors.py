"""The one error tree of jevper.

Every error the library raises on purpose is a ``JevperError``; the tree is shallow on purpose::

    JevperError
     ├── ConfigError             a setting of the run (a server, a file, a command-line option) cannot
     │    │                      work as given; nothing was asked yet
     │    └── CalibrationMismatchError   a calibration applied to answers it was not fit for; names
     │                                   the field that differs
     ├── InvalidQuestionError    the question, or a setting it is asked with, cannot be sent as given
     │    ├── InvalidDecisionError    a Decisions request (OpenAI's schema) breaks its rules; names the param
     │    ├── UnsupportedMethodError  a method the chosen surface cannot read an answer with
     │    └── ClientCapabilityError   a field the chosen route cannot carry (examples on System One)
     ├── LabelReadoutError       the model answered prose where a label was asked for (after one retry),
     │                           or the server returned no distribution to read a label from
     ├── MalformedAnswerError    a body or an answer that does not fit what was asked for
     └── ProviderError           the server (or the connection to it) refused; carries the HTTP status
          │                      (``status_code``) and the server's own words
          ├── ModelRefusalError       the model declined to answer (a refusal, a content filter); never
          │                           asked again as if the answer were malformed
          └── IncompleteAnswerError   the server says the answer was cut off; names the budget field to raise

Each message says what was expected, what arrived, and what to do about it.
"""

from __future__ import annotations

from typing import TypeAlias

__all__ = [
    "CalibrationMismatchError",
    "ClientCapabilityError",
    "ConfigError",
    "IncompleteAnswerError",
    "InvalidDecisionError",
    "InvalidQuestionError",
    "JevperError",
    "LabelReadoutError",
    "MalformedAnswerError",
    "ModelRefusalError",
    "ProviderError",
    "UnsupportedMethodError",
]


class JevperError(Exception):
    """The root of every error jevper raises on purpose."""


class ConfigError(JevperError, ValueError):
    """A setting of the run cannot work as given: a server (its URL, model, slots or key), an input or
    output file, a resumed run's settings, or a command-line option. The message names the setting.

    Not an ``InvalidQuestionError``: the questions may be fine; what is around them is not.
    """


class CalibrationMismatchError(ConfigError):
    """A calibration was fit for other answers than these: ``field`` differs (``expected`` is what it was
    fit for, ``got`` what it is applied to)."""

    def __init__(self, message: str, *, field: str, expected: object, got: object) -> None:
        super().__init__(message)
        self.field = field
        self.expected = expected
        self.got = got


#: Where a problem sits in a System One request, as its 422 names it: ``("questions", "route", "criteria")``.
Loc: TypeAlias = tuple[str | int, ...]


class InvalidQuestionError(JevperError, ValueError):
    """A question, or a setting it is asked with, cannot be sent as given.

    ``loc`` says where the problem sits when it is in a question (``("questions", "route", "criteria")``;
    ``("criteria",)`` for a question built directly, ``()`` when it is not in a question) and ``problem``
    what it is, without the place.
    """

    def __init__(self, message: str, *, loc: Loc = (), problem: str | None = None) -> None:
        super().__init__(message)
        self.loc = loc
        self.problem = message if problem is None else problem


class InvalidDecisionError(InvalidQuestionError):
    """A Decisions request that breaks the schema of OpenAI's Decisions API, or asks what the surface in use
    cannot carry.

    ``param`` names the field as OpenAI's errors do (``questions[3].choices[1].value``; ``loc`` is the same
    path as a tuple) and ``code`` says what is wrong, in OpenAI's words (``missing_required_parameter``,
    ``invalid_type``, ``invalid_value``, ``unknown_parameter``, ``empty_array``, ``array_above_max_length``,
    ``array_below_min_length``, ``unsupported_value``).
    """

    def __init__(self, message: str, *, param: str | None, code: str, loc: Loc = ()) -> None:
        super().__init__(message, loc=loc)
        self.param = param
        self.code = code

    def to_api(self) -> dict[str, dict[str, str | None]]:
        """The error in OpenAI's envelope, as a 400's body carries it."""
        return {
            "error": {
                "message": str(self),
                "type": "invalid_request_error",
                "param": self.param,
                "code": self.code,
            }
        }


class UnsupportedMethodError(InvalidQuestionError):
    """A ``method`` the chosen surface cannot read an answer with (``logprobs`` where no logprobs travel;
    any method on a native route, which reads its answers itself). Names the methods that would work."""


class ClientCapabilityError(InvalidQuestionError):
    """A field the chosen route cannot carry (examples, a thinking budget or several option orders on
    System One). Names the field to drop, or the route that carries it."""


class LabelReadoutError(JevperError):
    """No label could be read at the answer token: prose, a missing distribution, or no anchor."""


class MalformedAnswerError(JevperError):
    """A response body, or the answer inside it, does not have the shape that was asked for."""


class ProviderError(JevperError):
    """The server refused the request, or could not be reached.

    ``status`` is the HTTP status (``None`` for a connection failure) and ``server_message`` the server's
    own words, unedited. ``status_code`` is the status of the failure itself: the HTTP status, or, for a
    200 whose body carries an upstream's error (as routers send), the code that error names when it names
    one. ``retry_after`` is the wait in seconds the server asked for (its ``Retry-After``), when it asked
    for one.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None,
        server_message: str,
        kind: str = "other",
        field: str | None = None,
        retry_after: float | None = None,
        param: str | None = None,
        status_code: int | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.server_message = server_message
        #: how the wording table classified the refusal, e.g. "missing_route", "unknown_model"
        self.kind = kind
        #: the request field the server named, when it named one
        self.field = field
        #: seconds the server asked to wait before asking again (Retry-After), when it said
        self.retry_after = retry_after
        #: the ``param`` of OpenAI's error envelope, as the server sent it (``questions[3].levels``)
        self.param = param
        #: the failure's status: ``status``, or the code a 200 body's embedded error names
        self.status_code = status if status_code is None else status_code
        #: the server's ``x-should-retry`` header: True or False when it sent one
        self.should_retry: bool | None = None


class ModelRefusalError(ProviderError):
    """The model declined to answer: the response carries a ``refusal``, a ``content_filter`` finish
    (Chat Completions) or a ``refusal`` stop reason (Messages). The request was answered, so it is
    never retried, nor asked again as if the answer were malformed; ``server_message`` holds the model's
    own words when it gave some, ``finish`` the finish or stop reason."""

    def __init__(self, message: str, *, server_message: str, finish: str | None = None) -> None:
        super().__init__(message, status=200, server_message=server_message, kind="refusal")
        self.finish = finish


class IncompleteAnswerError(ProviderError):
    """The server reports that the answer was cut off by a budget.

    ``field`` names the request field to raise (``max_tokens``, ``max_output_tokens``); ``finish`` is
    the finish or stop reason the server gave. Answered, not failed: never retried as "not now".
    """

    def __init__(self, message: str, *, field: str | None = None, finish: str | None = None) -> None:
        super().__init__(message, status=200, server_message=finish or "", kind="incomplete", field=field)
        self.finish = finish
