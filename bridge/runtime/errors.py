"""Typed errors for answers of the Kubernetes API server.

The API server explains every failure with a ``Status`` body (``reason``, ``message``, ``code``).
Callers branch on the kind of failure (a missing object, a stale resourceVersion, an expired watch),
never on numbers, so each reason gets a class::

    ApiError(status, reason, message, body)
    ├── BadRequest          400
    ├── Unauthorized        401
    ├── Forbidden           403
    ├── NotFound            404
    ├── Conflict            409 (reason Conflict: a stale resourceVersion or precondition)
    ├── AlreadyExists       409 (reason AlreadyExists)
    ├── Gone                410 (reason Expired or Gone: the resourceVersion is too old)
    ├── Invalid             422
    ├── TooManyRequests     429 (``retry_after`` in seconds when the server gave one)
    └── ServerError         5xx
"""

# The classes are named after the API's Status reasons (NotFound, Conflict, ...), as in client-go.
# ruff: noqa: N818

from __future__ import annotations

import json
from typing import Any

__all__ = [
    "AlreadyExists",
    "ApiError",
    "BadRequest",
    "Conflict",
    "Forbidden",
    "Gone",
    "Invalid",
    "NotFound",
    "ServerError",
    "TooManyRequests",
    "Unauthorized",
    "error_from_status",
]


class ApiError(Exception):
    """The API server answered with a failure; ``body`` is the decoded ``Status`` when there was one."""

    def __init__(self, status: int, reason: str, message: str, body: dict[str, Any] | None = None) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body


class BadRequest(ApiError):
    """400: the request itself is malformed."""


class Unauthorized(ApiError):
    """401: the credentials are missing or expired."""


class Forbidden(ApiError):
    """403: RBAC denies the request (or an admission webhook refused it)."""


class NotFound(ApiError):
    """404: no such object, or no such resource type."""


class Conflict(ApiError):
    """409: the object changed since it was read (resourceVersion or uid precondition failed)."""


class AlreadyExists(ApiError):
    """409 with reason AlreadyExists: ``create`` of a name that is taken."""


class Gone(ApiError):
    """410: the requested resourceVersion has been compacted away; list again."""


class Invalid(ApiError):
    """422: the object fails validation; ``body["details"]["causes"]`` says which fields."""


class TooManyRequests(ApiError):
    """429: the server is throttling; wait ``retry_after`` seconds when given."""

    def __init__(
        self,
        status: int,
        reason: str,
        message: str,
        body: dict[str, Any] | None = None,
        *,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(status, reason, message, body)
        self.retry_after = retry_after


class ServerError(ApiError):
    """5xx: the server (or something in front of it) failed; usually worth a retry with backoff."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: TooManyRequests,
}


def error_from_status(
    status: int, body: bytes | str | dict[str, Any] | None, *, retry_after: float | None = None
) -> ApiError:
    """Build the typed error for an HTTP ``status`` and its body (a ``Status`` object, or anything)."""
    decoded: dict[str, Any] | None = None
    if isinstance(body, dict):
        decoded = body
    elif body:
        try:
            value = json.loads(body)
        except ValueError:
            value = None
        if isinstance(value, dict):
            decoded = value
    if decoded is not None and decoded.get("kind") == "Status":
        code = decoded.get("code")
        if isinstance(code, int) and code >= 400:
            status = code
        reason = str(decoded.get("reason") or "")
        message = str(decoded.get("message") or "")
        details = decoded.get("details")
        if retry_after is None and isinstance(details, dict):
            seconds = details.get("retryAfterSeconds")
            if isinstance(seconds, int | float):
                retry_after = float(seconds)
    else:
        reason = ""
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body or "")
        message = text[:500]
    if not reason:
        reason = _DEFAULT_REASON.get(status, "Unknown")
    cls: type[ApiError]
    if status == 409 and reason == "AlreadyExists":
        cls = AlreadyExists
    elif status >= 500:
        cls = ServerError
    else:
        cls = _BY_STATUS.get(status, ApiError)
    if cls is TooManyRequests:
        return TooManyRequests(status, reason, message, decoded, retry_after=retry_after)
    return cls(status, reason, message, decoded)


_DEFAULT_REASON = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}
