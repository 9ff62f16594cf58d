"""The one error tree of jevper.

Every error the library raises on purpose is a ``JevperError``; the tree is shallow on purpose::

    JevperError
     ├── ConfigError             a setting of the run (a server, a file, a command-line option) cannot
     │                           work as given; nothing was asked yet
     ├── InvalidQuestionError    the question, or a setting it is asked with, cannot be sent as given
     ├── LabelReadoutError       the model answered prose where a label was asked for (after one retry),
     │                           or the server returned no distribution to read a label from
     ├── IncompleteAnswerError   the server says the answer was cut off; names the budget field to raise
     ├── MalformedAnswerError    a body or an answer that does not fit what was asked for
     └── ProviderError           the server (or the connection to it) refused; carries the HTTP status
                                 and the server's own words

Each message says what was expected, what arrived, and what to do about it.
"""

from __future__ import annotations

from typing import TypeAlias

__all__ = [
    "ConfigError",
    "IncompleteAnswerError",
    "InvalidQuestionError",
    "JevperError",
    "LabelReadoutError",
    "MalformedAnswerError",
    "ProviderError",
]


class JevperError(Exception):
    """The root of every error jevper raises on purpose."""


class ConfigError(JevperError, ValueError):
    """A setting of the run cannot work as given: a server (its URL, model, slots or key), an input or
    output file, a resumed run's settings, or a command-line option. The message names the setting.

    Not an ``InvalidQuestionError``: the questions may be fine; what is around them is not.
    """


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


class LabelReadoutError(JevperError):
    """No label could be read at the answer token: prose, a missing distribution, or no anchor."""


class IncompleteAnswerError(JevperError):
    """The server reports that the answer was cut off by a budget.

    ``field`` names the request field to raise (``max_tokens``, ``max_output_tokens``).
    """

    def __init__(self, message: str, *, field: str | None = None, finish: str | None = None) -> None:
        super().__init__(message)
        self.field = field
        self.finish = finish


class MalformedAnswerError(JevperError):
    """A response body, or the answer inside it, does not have the shape that was asked for."""


class ProviderError(JevperError):
    """The server refused the request, or could not be reached.

    ``status`` is the HTTP status (``None`` for a connection failure or a 200 carrying an error) and
    ``server_message`` the server's own words, unedited. ``retry_after`` is the wait in seconds the
    server asked for (its ``Retry-After``), when it asked for one.
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
