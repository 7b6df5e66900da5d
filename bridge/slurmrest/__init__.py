"""slurmrestd client for the Slurm bridge: every REST version behind one small API.

Public surface (the modules behind it are private by convention):

- ``SlurmClient``: list/get/update/cancel jobs, pin-and-release, hold and requeue-hold, comments,
  node drain/down/delete, ping; version detected automatically.
- ``JwtAuth`` with ``FileToken`` / ``CallableToken`` / ``StaticToken``: the token, never logged.
- ``ScontrolCli``: the ``scontrol`` fallback for what a REST version lacks.
- ``hostlist.expand`` / ``hostlist.compress``: Slurm hostlist expressions.
- the exception tree of ``bridge.slurmrest.errors`` (``SlurmError`` and below, plus ``NotModified``).
"""

from . import hostlist
from .auth import CallableToken, FileToken, JwtAuth, StaticToken, TokenSource
from .cli import ScontrolCli
from .client import RequestObserver, SlurmClient
from .errors import (
    AccessDenied,
    ErrorEntry,
    InvalidFeature,
    InvalidJobId,
    InvalidNodeName,
    JobAlreadyDone,
    JobHeld,
    NodesBusy,
    NotModified,
    PartitionConfigUnavailable,
    ScontrolError,
    SlurmAPIError,
    SlurmAuthError,
    SlurmError,
    SlurmResponseError,
    SlurmServerError,
    SlurmUnavailable,
    SlurmUnsupported,
    SlurmVersionError,
)
from .versions import SUPPORTED_VERSIONS, ControllerPing, JobsPage, NodesPage

__all__ = [
    "SUPPORTED_VERSIONS",
    "AccessDenied",
    "CallableToken",
    "ControllerPing",
    "ErrorEntry",
    "FileToken",
    "InvalidFeature",
    "InvalidJobId",
    "InvalidNodeName",
    "JobAlreadyDone",
    "JobHeld",
    "JobsPage",
    "JwtAuth",
    "NodesBusy",
    "NodesPage",
    "NotModified",
    "PartitionConfigUnavailable",
    "RequestObserver",
    "ScontrolCli",
    "ScontrolError",
    "SlurmAPIError",
    "SlurmAuthError",
    "SlurmClient",
    "SlurmError",
    "SlurmResponseError",
    "SlurmServerError",
    "SlurmUnavailable",
    "SlurmUnsupported",
    "SlurmVersionError",
    "StaticToken",
    "TokenSource",
    "hostlist",
]
