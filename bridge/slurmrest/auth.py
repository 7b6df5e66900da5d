"""JWT authentication for slurmrestd: ``X-SLURM-USER-NAME`` + ``X-SLURM-USER-TOKEN``.

The bridge must act for other users (release their held jobs), which ``rest_auth/local`` cannot
do, so it uses a SlurmUser token (``scontrol token username=slurm lifespan=N``). Tokens expire
and get rotated, so the token is looked up on every request: from a file that is re-read when its
mtime changes (a mounted Kubernetes Secret is updated in place), or from any callable (a Secret
watcher plugs in here). The token never appears in a repr, a log line or an exception.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Protocol, runtime_checkable

from .errors import SlurmAuthError

__all__ = ["CallableToken", "FileToken", "JwtAuth", "StaticToken", "TokenSource"]

_PREFIX = "SLURM_JWT="


@runtime_checkable
class TokenSource(Protocol):
    """Anything that can give the current token."""

    async def get(self) -> str: ...


def _clean(raw: str) -> str:
    token = raw.strip()
    if token.startswith(_PREFIX):  # the output of `scontrol token` as is
        token = token[len(_PREFIX) :].strip()
    return token


class StaticToken:
    """A fixed token (tests, short-lived tools)."""

    def __init__(self, token: str) -> None:
        self._token = _clean(token)

    async def get(self) -> str:
        return self._token

    def __repr__(self) -> str:
        return "StaticToken(<redacted>)"


class FileToken:
    """A token in a file, re-read whenever the file's mtime (or size, or inode) changes."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._stamp: tuple[int, int, int] | None = None
        self._token = ""

    async def get(self) -> str:
        try:
            st = self.path.stat()
            stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
            if stamp != self._stamp:
                self._token = _clean(self.path.read_text(encoding="utf-8"))
                self._stamp = stamp
        except OSError as exc:
            raise SlurmAuthError(
                f"cannot read the token file {str(self.path)!r}: {exc.strerror or exc}"
            ) from None
        return self._token

    def __repr__(self) -> str:
        return f"FileToken(path={str(self.path)!r})"


class CallableToken:
    """A token from a callable, plain or async (e.g. the latest value seen by a Secret watcher)."""

    def __init__(self, func: Callable[[], str | Awaitable[str]]) -> None:
        self._func = func

    async def get(self) -> str:
        value = self._func()
        if inspect.isawaitable(value):
            value = await value
        return _clean(value)

    def __repr__(self) -> str:
        return f"CallableToken({getattr(self._func, '__qualname__', 'callable')})"


class JwtAuth:
    """The user name and token source for slurmrestd's ``rest_auth/jwt``."""

    def __init__(self, *, user_name: str, token: TokenSource) -> None:
        self.user_name = user_name
        self.token = token

    async def headers(self) -> dict[str, str]:
        return {"X-SLURM-USER-NAME": self.user_name, "X-SLURM-USER-TOKEN": await self.token.get()}

    async def env(self) -> dict[str, str]:
        """The environment that makes ``scontrol`` authenticate with the same token."""
        return {"SLURM_JWT": await self.token.get()}

    def __repr__(self) -> str:
        return f"JwtAuth(user_name={self.user_name!r}, token={self.token!r})"
