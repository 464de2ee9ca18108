"""What a service's answer means for delivery: one table per sink, one mechanism for all of them.

In the style of httpx's ``map_exceptions`` (a table from a library's exception classes to one's
own, the most specific class winning) and Vector's ``HttpStatusRetryLogic`` (an HTTP status to a
retry action), a sink declares its answers as data: HTTP statuses (one, or a range), the
service's error codes, exception classes. ``Table.meaning`` reads an ``Answer`` through it and
says what it means (``Meaning``); the meaning decides the verdict (``Verdict``: what the delivery
worker does), the same for every sink. The table only classifies: side effects (a new
credential, a rebuilt connection, a timer) belong to the sink, which reacts to the meaning, so
the classification can be tested against every sink's transport alone. What a sink says about a
meaning (the error's words, and the one line it logs when a person must act) is data too, in one
shape for every sink: its ``Reactions``, a ``Reaction`` per meaning beside the table.

``HTTP`` is the table every HTTP sink starts from, ``SOCKET`` (no answer at all) the one under
it; a sink extends one with its SDK's exceptions and its service's codes (``HTTP.extend({...})``).
This module imports no SDK: it is on the agent's
path whatever sinks are configured.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from .. import logs
from ..errors import DeliveryError, Verdict
from ..logs import one_line


class Meaning(StrEnum):
    """What an answer says, whichever protocol it came in (HTTP, AMQP, a socket)."""

    DELIVERED = "delivered"
    THROTTLED = "throttled"
    SERVER_ERROR = "server error"
    NOT_REACHED = "not reached"  # no connection, or it was reset before an answer
    NO_ANSWER = "no answer"  # timed out, or the connection dropped before the answer
    TOKEN_REFUSED = "token refused"  # 401: a new credential, then again at once
    NOT_AUTHORISED = "not authorised"  # 403: a role is missing (minutes to appear once granted)
    NO_TOKEN = "no token"  # the identity could not get one: the service was never asked
    NOT_FOUND = "not found"  # 404/410: the destination is missing (a configuration to fix)
    MISCONFIGURED = "misconfigured"  # the service names a setting of ours (a stream, a redirect)
    TOO_LARGE = "too large"
    REFUSED = "refused"  # this batch, as it is, is refused for good (a 400)
    GONE = "gone"  # the destination answered NOT_FOUND for long enough: it is gone for good

    @property
    def verdict(self) -> Verdict:
        return VERDICTS[self]

    @property
    def renews(self) -> bool:
        """The credential was refused: the sink gets a new one before the next attempt."""
        return self in (Meaning.TOKEN_REFUSED, Meaning.NOT_AUTHORISED)


VERDICTS: dict[Meaning, Verdict] = {
    Meaning.DELIVERED: Verdict.DELIVERED,
    Meaning.THROTTLED: Verdict.RETRY,
    Meaning.SERVER_ERROR: Verdict.RETRY,
    Meaning.NOT_REACHED: Verdict.RETRY,
    Meaning.NO_ANSWER: Verdict.RETRY,
    Meaning.TOKEN_REFUSED: Verdict.RETRY,  # with a new token; SLOW_RETRY when none can be had
    Meaning.NOT_AUTHORISED: Verdict.SLOW_RETRY,
    Meaning.NO_TOKEN: Verdict.SLOW_RETRY,
    Meaning.NOT_FOUND: Verdict.SLOW_RETRY,
    Meaning.MISCONFIGURED: Verdict.SLOW_RETRY,
    Meaning.TOO_LARGE: Verdict.SPLIT,
    Meaning.REFUSED: Verdict.REJECT,
    Meaning.GONE: Verdict.DEAD_LETTER,
}


def verdict(meaning: Meaning, *, renewed: bool = False) -> Verdict:
    """The meaning's verdict, after the sink's side effects: a refused credential that could not
    be replaced (a webhook URL, a connection string) is retried slowly: a person must fix it."""
    if meaning.renews and not renewed:
        return Verdict.SLOW_RETRY
    return meaning.verdict


@dataclass(frozen=True, slots=True)
class Answer:
    """One answer as a sink read it out of its SDK: the HTTP status (None when the service did
    not answer), the service's error code, the exception (None for a plain response)."""

    status: int | None = None
    code: str | None = None
    error: BaseException | None = None
    retry_after: float | None = None  # seconds, when the service said
    text: str = ""  # the service's own words, on one line

    @classmethod
    def of(cls, error: BaseException) -> Answer:
        """An exception that carries no status or code (a socket error, a timeout)."""
        return cls(error=error, text=one_line(str(error)))


Key = int | range | str | type[BaseException]


class Table:
    """Answers to meanings. An answer is looked up by its error code, then its exact status,
    then the status ranges, then its exception's classes from the most specific up (httpx's
    rule): the first entry found is its meaning. None: not an answer at all (a bug)."""

    def __init__(self, entries: Mapping[Key, Meaning]) -> None:
        self.entries: dict[Key, Meaning] = dict(entries)
        self._codes = {k: v for k, v in self.entries.items() if isinstance(k, str)}
        self._statuses = {
            k: v for k, v in self.entries.items() if isinstance(k, int) and not isinstance(k, bool)
        }
        self._ranges = [(k, v) for k, v in self.entries.items() if isinstance(k, range)]
        self._classes = {k: v for k, v in self.entries.items() if isinstance(k, type)}

    def extend(self, entries: Mapping[Key, Meaning]) -> Table:
        """This table with a sink's own entries over it."""
        return Table({**self.entries, **entries})

    def meaning(self, answer: Answer) -> Meaning | None:
        if answer.code is not None and answer.code in self._codes:
            return self._codes[answer.code]
        if answer.status is not None:
            if answer.status in self._statuses:
                return self._statuses[answer.status]
            for statuses, meaning in self._ranges:
                if answer.status in statuses:
                    return meaning
        if answer.error is not None:
            for cls in type(answer.error).__mro__:
                if cls in self._classes:
                    return self._classes[cls]
        return None

    @contextmanager
    def mapped(
        self, read: Callable[[Exception], Answer], react: Callable[[Answer, Meaning], DeliveryError]
    ) -> Iterator[None]:
        """Run an SDK call inside: an exception this table knows becomes the sink's
        ``DeliveryError`` (``read`` takes the answer out of it, ``react`` does the side effects
        and words it), raised from the original; an answer that means delivered (an SDK that
        expected another 2xx) is a success; any other exception (a bug) goes through as it is,
        with its traceback."""
        try:
            yield
        except DeliveryError:
            raise
        except Exception as exc:
            answer = read(exc)
            meaning = self.meaning(answer)
            if meaning is None:
                raise
            if meaning is not Meaning.DELIVERED:
                raise react(answer, meaning) from exc


@dataclass(frozen=True, slots=True)
class Reaction:
    """What a sink says about one meaning: ``says``, the error's words (a ``str.format`` template
    over the words the sink gives: what the service said, the sink's settings), and, when a person
    must act, ``log``: one line (level, message) with ``fields`` (log key -> word)."""

    says: str
    log: tuple[int, str] | None = None
    fields: Mapping[str, str] = field(default_factory=dict)


class Reactions:
    """A sink's reactions: one per meaning it words its own way (``unanswered_by_meaning`` first
    when the service gave no status: a timeout is not a 408), ``answered`` for any other answer of
    the service, ``unanswered`` for no answer at all (a socket error, a timeout)."""

    def __init__(
        self,
        by_meaning: Mapping[Meaning, Reaction],
        answered: Reaction,
        unanswered: Reaction,
        unanswered_by_meaning: Mapping[Meaning, Reaction] | None = None,
    ) -> None:
        self.by_meaning = dict(by_meaning)
        self.answered = answered
        self.unanswered = unanswered
        self.unanswered_by_meaning = dict(unanswered_by_meaning or {})

    def of(self, meaning: Meaning, answer: Answer) -> Reaction:
        if answer.status is None and meaning in self.unanswered_by_meaning:
            return self.unanswered_by_meaning[meaning]
        if meaning in self.by_meaning:
            return self.by_meaning[meaning]
        return self.answered if answer.status is not None else self.unanswered

    def say(
        self, meaning: Meaning, answer: Answer, words: Mapping[str, Any], log: logging.Logger
    ) -> str:
        """The error's words for this answer; its log line, when it has one, logged."""
        reaction = self.of(meaning, answer)
        message = reaction.says.format(**words)
        if reaction.log is not None:
            level, text = reaction.log
            said = {**words, "message": message}
            logs.event(log, level, text, **{k: said[w] for k, w in reaction.fields.items()})
        return message


# What a socket says when there is no answer at all; every sink's table starts from it.
SOCKET = Table(
    {
        TimeoutError: Meaning.NO_ANSWER,
        OSError: Meaning.NOT_REACHED,  # refused, reset, unreachable
    }
)

# The HTTP answers every HTTP sink starts from (Vector's HttpStatusRetryLogic, with our meanings).
HTTP = SOCKET.extend(
    {
        range(200, 300): Meaning.DELIVERED,
        range(300, 400): Meaning.MISCONFIGURED,  # redirects are not followed: fix the URL
        range(400, 500): Meaning.REFUSED,
        400: Meaning.REFUSED,
        401: Meaning.TOKEN_REFUSED,
        403: Meaning.NOT_AUTHORISED,
        404: Meaning.NOT_FOUND,
        408: Meaning.NO_ANSWER,
        410: Meaning.NOT_FOUND,
        413: Meaning.TOO_LARGE,
        429: Meaning.THROTTLED,
        range(500, 600): Meaning.SERVER_ERROR,
    }
)
