"""Status bodies become typed errors."""

from __future__ import annotations

import json

import pytest

from bridge.runtime import errors
from bridge.runtime.errors import error_from_status


def status(code: int, reason: str, message: str = "m", **extra: object) -> bytes:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason}
    body["message"] = message
    body.update(extra)
    return json.dumps(body).encode()


@pytest.mark.parametrize(
    ("code", "reason", "cls"),
    [
        (400, "BadRequest", errors.BadRequest),
        (401, "Unauthorized", errors.Unauthorized),
        (403, "Forbidden", errors.Forbidden),
        (404, "NotFound", errors.NotFound),
        (409, "Conflict", errors.Conflict),
        (409, "AlreadyExists", errors.AlreadyExists),
        (410, "Expired", errors.Gone),
        (410, "Gone", errors.Gone),
        (422, "Invalid", errors.Invalid),
        (429, "TooManyRequests", errors.TooManyRequests),
        (500, "InternalError", errors.ServerError),
        (503, "ServiceUnavailable", errors.ServerError),
        (418, "Teapot", errors.ApiError),
    ],
)
def test_status_maps_to_class(code: int, reason: str, cls: type[errors.ApiError]) -> None:
    error = error_from_status(code, status(code, reason, "details here"))
    assert type(error) is cls
    assert isinstance(error, errors.ApiError)
    assert (error.status, error.reason, error.message) == (code, reason, "details here")
    assert error.body is not None
    assert error.body["code"] == code


def test_already_exists_is_not_a_conflict() -> None:
    # `except Conflict` around an optimistic update must not swallow a create's AlreadyExists.
    assert not issubclass(errors.AlreadyExists, errors.Conflict)


def test_status_code_in_body_wins_over_http_status() -> None:
    # Watch ERROR events carry the Status in a 200 stream.
    assert isinstance(error_from_status(200, status(410, "Expired")), errors.Gone)


def test_retry_after_from_details_or_header() -> None:
    body = status(429, "TooManyRequests", details={"retryAfterSeconds": 3})
    error = error_from_status(429, body)
    assert isinstance(error, errors.TooManyRequests)
    assert error.retry_after == 3.0
    header = error_from_status(429, b"", retry_after=7.0)
    assert isinstance(header, errors.TooManyRequests)
    assert header.retry_after == 7.0


def test_non_status_bodies() -> None:
    error = error_from_status(502, b"<html>bad gateway</html>")
    assert isinstance(error, errors.ServerError)
    assert error.body is None
    assert "bad gateway" in error.message
    assert error_from_status(404, None).reason == "NotFound"
    assert isinstance(
        error_from_status(404, {"kind": "Status", "code": 404, "reason": "NotFound"}), errors.NotFound
    )
