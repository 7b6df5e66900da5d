"""The exceptions of the slurmrestd client, in one visible tree.

slurmrestd reports most failures as HTTP 200 with a non-empty ``errors`` array, some as HTTP 500
(a bad token, a busy node on delete), a few as 401/511. Callers should not care which: every
failure becomes one of the classes below, chosen by the Slurm error number when there is one,
so a reconciler can write ``except NodesBusy`` instead of parsing strings.

    SlurmError                      base: status, error_number, description, source
    ├── SlurmUnavailable            slurmrestd unreachable (refused, reset, timeout): retry later
    ├── SlurmAuthError              401/511, HTTP 500 "Authentication failure", error 1007
    ├── SlurmServerError            any other non-2xx answer without a Slurm error entry
    ├── SlurmResponseError          the answer was not the JSON shape the version promises
    ├── SlurmVersionError           no REST version this client speaks is served
    ├── SlurmUnsupported            the operation needs the scontrol fallback, and none was given
    ├── ScontrolError               the scontrol fallback failed (exit status, stderr)
    └── SlurmAPIError               an entry of ``errors[]`` (or an scontrol message we recognise)
        ├── AccessDenied            2002
        ├── PartitionConfigUnavailable 2015 (on a job update: applied, but the job does not fit now)
        ├── NodesBusy               2016 (delete of a busy node: set it DOWN first)
        ├── InvalidJobId            2017
        ├── InvalidNodeName         2018
        ├── JobAlreadyDone          2021, 2084
        ├── InvalidFeature          2029
        └── JobHeld                 2042

``NotModified`` is not an error: ``list_jobs(update_time=...)`` raises it when slurmctld answers
304, which is the cheap path of polling.
"""

# ruff: noqa: N818 - names say what happened (NodesBusy, SlurmUnavailable), as in the design
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "AccessDenied",
    "ErrorEntry",
    "InvalidFeature",
    "InvalidJobId",
    "InvalidNodeName",
    "JobAlreadyDone",
    "JobHeld",
    "NodesBusy",
    "NotModified",
    "PartitionConfigUnavailable",
    "ScontrolError",
    "SlurmAPIError",
    "SlurmAuthError",
    "SlurmError",
    "SlurmResponseError",
    "SlurmServerError",
    "SlurmUnavailable",
    "SlurmUnsupported",
    "SlurmVersionError",
    "api_error",
]

AUTH_ERROR_NUMBERS = frozenset({1007, 9008})  # SLURM_PROTOCOL_AUTHENTICATION_ERROR, ESLURM_REST_AUTH_FAIL


@dataclass(frozen=True)
class ErrorEntry:
    """One element of a response's ``errors`` (or ``warnings``) array, version-independent."""

    error_number: int
    description: str
    source: str = ""


class SlurmError(Exception):
    """Base of every failure of the client. All attributes are safe to log (never a token)."""

    def __init__(
        self,
        description: str,
        *,
        status: int | None = None,
        error_number: int | None = None,
        source: str = "",
        errors: Sequence[ErrorEntry] = (),
    ) -> None:
        super().__init__(description)
        self.description = description
        self.status = status
        self.error_number = error_number
        self.source = source
        self.errors: tuple[ErrorEntry, ...] = tuple(errors)

    def __str__(self) -> str:
        parts = [self.description]
        if self.error_number is not None:
            parts.append(f"error {self.error_number}")
        if self.source:
            parts.append(f"source {self.source}")
        if self.status is not None:
            parts.append(f"HTTP {self.status}")
        return " | ".join(parts)


class SlurmUnavailable(SlurmError):
    """slurmrestd could not be reached or did not answer in time."""


class SlurmAuthError(SlurmError):
    """The token was missing, wrong or expired."""


class SlurmServerError(SlurmError):
    """A non-2xx answer that carried no Slurm error entry."""


class SlurmResponseError(SlurmError):
    """The body was not the JSON document this REST version promises."""


class SlurmVersionError(SlurmError):
    """slurmrestd serves no REST version this client speaks."""


class SlurmUnsupported(SlurmError):
    """This REST version cannot do the operation and no scontrol fallback was configured."""


class ScontrolError(SlurmError):
    """``scontrol`` exited non-zero with a message we do not map to a typed error."""


class SlurmAPIError(SlurmError):
    """slurmctld refused the request: an entry of ``errors[]``."""


class AccessDenied(SlurmAPIError):
    """2002: the token's user may not do this (e.g. release an admin hold as a plain user)."""


class PartitionConfigUnavailable(SlurmAPIError):
    """2015: the job does not fit its partition now (e.g. the bridge partition before its nodes exist).

    On a job update slurmctld answers it from ``job_limits_check`` after every field of the update
    has been applied (``_update_job`` in job_mgr.c, 22.05 and 24.11): the update landed."""


class NodesBusy(SlurmAPIError):
    """2016: the node runs (or is completing) a job; set it DOWN before deleting it."""


class InvalidJobId(SlurmAPIError):
    """2017: no such job in slurmctld's active queue (finished long ago, or never existed)."""


class InvalidNodeName(SlurmAPIError):
    """2018: no such node (pinning before the dynamic node registered, or already deleted)."""


class JobAlreadyDone(SlurmAPIError):
    """2021 or 2084 ("Job has already finished"): the job already finished. 22.05 answers 2084 to an
    update (a hold, a comment) of a job cancelled since the bridge's last poll: in a mass cancel, one
    for each queued job whose hold conversion or comment was still under way."""


class InvalidFeature(SlurmAPIError):
    """2029: no node has the requested feature (pinning before the nodes registered)."""


class JobHeld(SlurmAPIError):
    """2042: the job is held (e.g. raising its priority does not release it)."""


_BY_NUMBER: dict[int, type[SlurmError]] = {
    1007: SlurmAuthError,
    9008: SlurmAuthError,
    2002: AccessDenied,
    2015: PartitionConfigUnavailable,
    2016: NodesBusy,
    2017: InvalidJobId,
    2018: InvalidNodeName,
    2021: JobAlreadyDone,
    2029: InvalidFeature,
    2084: JobAlreadyDone,
    2042: JobHeld,
}


# slurm_strerror() texts: v0.0.38 sometimes reports only the text, with error_number 0
# (seen on 22.05: GET /node/<deleted> -> HTTP 500, "Invalid node name specified", 0).
_BY_TEXT: dict[str, int] = {
    "protocol authentication error": 1007,
    "access/permission denied": 2002,
    "requested partition configuration not available now": 2015,
    "requested nodes are busy": 2016,
    "invalid job id specified": 2017,
    "invalid node name specified": 2018,
    "job/step already completing or completed": 2021,
    "job has already finished": 2084,
    "invalid feature specification": 2029,
}


def _number(entry: ErrorEntry) -> int:
    if entry.error_number in _BY_NUMBER:
        return entry.error_number
    text = entry.description.lower()
    return next((n for t, n in _BY_TEXT.items() if t in text), entry.error_number)


def api_error(entries: Sequence[ErrorEntry], *, status: int | None = None) -> SlurmError:
    """The typed exception for a non-empty ``errors[]``; the first entry we recognise wins.

    An entry is recognised by its error number, or, when the number is 0 (v0.0.38), by Slurm's
    text for that number.
    """
    if not entries:
        raise ValueError("api_error needs at least one entry")
    chosen = next((e for e in entries if _number(e) in _BY_NUMBER), entries[0])
    number = _number(chosen)
    return _BY_NUMBER.get(number, SlurmAPIError)(
        chosen.description or f"Slurm error {number}",
        status=status,
        error_number=number,
        source=chosen.source,
        errors=entries,
    )


class NotModified(Exception):
    """Nothing changed since ``update_time`` (HTTP 304): keep the previous list."""

    def __init__(self, update_time: int) -> None:
        super().__init__(f"not modified since {update_time}")
        self.update_time = update_time
