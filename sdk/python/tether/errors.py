"""The errors the client and worker raise."""

from __future__ import annotations

import re
from typing import Any, Dict, Optional

from . import _codes


class TetherError(Exception):
    """A request the server refused, or one that got no answer.

    ``code`` is the server's stable error code (``QUOTA_EXCEEDED``, ``JOB_NOT_FOUND``, ...;
    ``HTTP_502`` for an answer that is not tether's, ``UNREACHABLE`` when none came),
    ``status`` its HTTP status (0 without an answer), ``details`` the server's details,
    ``request_id`` the id that finds the request in the server's log, and ``retryable``
    whether the same request may succeed later unchanged (with backoff).
    """

    def __init__(self, code: str, message: str, status: int = 0,
                 details: Optional[Dict[str, Any]] = None, request_id: str = ""):
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message
        self.status = status
        self.details = details or {}
        self.request_id = request_id

    @property
    def retryable(self) -> bool:
        return retryable(self.code, self.status)


def retryable(code: str, status: int) -> bool:
    """Whether a refusal may pass if sent again unchanged: the code's entry in the server's
    table of codes, or, for a code that is not tether's (a proxy's answer), a 5xx or 429."""
    if code == UNREACHABLE:
        return True
    known = _codes.CODES.get(code)
    if known is not None:
        return known[1]
    return status >= 500 or status == 429


#: The code of a request that got no answer: the connection failed or timed out.
UNREACHABLE = "UNREACHABLE"

#: The code of a TLS handshake that failed (a certificate not trusted, https to a plain-HTTP
#: server): sending again will not help.
TLS_ERROR = "TLS_ERROR"


class Failure(Exception):
    """Raise from a handler to fail the attempt with a code. ``retryable=False`` sends the job
    to the dead letters at once; any other exception fails it with code ``error``, retryable."""

    def __init__(self, code: str, message: str = "", retryable: bool = True):
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message
        self.retryable = retryable


class Release(Exception):
    """Raise from a handler for a job it could not even try through no fault of the job: the
    job goes back to the queue with no attempt spent, its history shows ``reason`` (a short
    code, ``released`` unless given) and ``message``, and the worker takes no new job for a
    while (1 s, twice as long each time in a row, up to 5 minutes, until a job completes): the
    job goes back to its place in its queue, and the server spends an attempt on a job released
    eleven times in a row."""

    def __init__(self, message: str = "", reason: str = "released"):
        if not _REASON.fullmatch(reason) or reason in _codes.SERVER_RELEASE_REASONS:
            raise ValueError(f"tether: a release's reason must be 1..64 of [A-Za-z0-9_.:/-], and not one of the server's own "
                             f"{', '.join(_codes.SERVER_RELEASE_REASONS)}; got {reason!r}")
        super().__init__(f"{reason}: {message}" if message else reason)
        self.reason = reason
        self.message = message


#: A release's reason, as the server takes it.
_REASON = re.compile(r"[A-Za-z0-9_.:/-]{1,64}")


class Cancelled(Exception):
    """Raised by ``ctx.check_cancelled()`` once the job should stop; a handler lets it
    propagate. ``reason`` is ``cancelled`` (the server asked), ``lost`` (the lease is no longer
    the worker's) or ``stopping`` (the worker stops)."""

    def __init__(self, reason: str):
        super().__init__(f"the job should stop: {reason}")
        self.reason = reason
