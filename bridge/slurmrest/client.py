"""The asyncio slurmrestd client the bridge talks to Slurm with.

One object per slurmrestd. It finds the newest REST version both sides speak (from
``/openapi/v3``, else by pinging each version newest-first) and keeps it; every call then goes
through that version's adapter, so callers only see ``SlurmJob``/``SlurmNode`` views and the typed
errors of ``bridge.slurmrest.errors``. What a version cannot do over REST (node drain/down/delete on
v0.0.38, requeue-hold before v0.0.45) goes through the optional ``ScontrolCli``.

Polling is cheap by design: ``list_jobs(update_time=t)`` raises ``NotModified`` when nothing
changed (22.05 answers 304; 24.11's data_parser answers 200 with no jobs, ``last_update`` 0 and a
"No job changes since" warning), and each page carries the ``update_time`` to pass next (the
controller's ``last_update``, its clock when it packed the list, where the version reports it;
otherwise the server's ``Date`` or our own clock, minus a safety margin).
Every request reports ``(method, path template, status, seconds)`` to an optional observer, so
metrics can be added without this module importing a metrics library.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from email.utils import parsedate_to_datetime
from types import TracebackType
from typing import Any, Self, TypeVar

import aiohttp
import orjson
from multidict import CIMultiDictProxy

from bridge.api.slurm_job import SlurmJob
from bridge.api.slurm_node import SlurmNode
from bridge.api.slurm_reservation import SlurmReservation

from .auth import JwtAuth
from .cli import ScontrolCli
from .errors import (
    InvalidJobId,
    InvalidNodeName,
    NodesBusy,
    NotModified,
    PartitionConfigUnavailable,
    SlurmAPIError,
    SlurmAuthError,
    SlurmError,
    SlurmResponseError,
    SlurmServerError,
    SlurmUnavailable,
    SlurmUnsupported,
    SlurmVersionError,
    api_error,
)
from .known_jobs import KnownJobs, split_job_list
from .versions import (
    ADAPTERS,
    SUPPORTED_VERSIONS,
    ControllerPing,
    JobsPage,
    NodesPage,
    RestAdapter,
    adapter_for,
)

__all__ = ["RequestObserver", "SlurmClient"]

log = logging.getLogger(__name__)

_Page = TypeVar("_Page", JobsPage, NodesPage)

RequestObserver = Callable[[str, str, int | None, float], None]
"""Called after every request: (method, path template, HTTP status or None if no answer, seconds)."""

_VERSION_IN_PATH = re.compile(r"^/slurm/(v\d+\.\d+\.\d+)/")
_Headers = CIMultiDictProxy[str]
# data_parser answers "nothing changed" with 200, no jobs, last_update 0 and this warning (24.11)
_UNCHANGED = ("No job changes since", "No node changes since")


def _parse_body(raw: bytes, decode: Callable[[bytes], Any] | None) -> Any:
    """The body as ``decode`` reads it, else as JSON (orjson, and the standard library's for what
    orjson refuses), else as text (an error page); None if empty."""
    if not raw:
        return None
    for read in (decode, orjson.loads, json.loads) if decode is not None else (orjson.loads, json.loads):
        try:
            return read(raw)
        except ValueError:
            continue
    return raw.decode(errors="replace")


class SlurmClient:
    """A slurmrestd client. Use as ``async with SlurmClient(url, auth=...) as slurm: ...``."""

    def __init__(
        self,
        base_url: str,
        *,
        auth: JwtAuth | None = None,
        version: str | None = None,
        session: aiohttp.ClientSession | None = None,
        timeout: float = 30.0,
        observer: RequestObserver | None = None,
        scontrol: ScontrolCli | None = None,
        clock_margin: float = 2.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.auth = auth
        self.timeout = timeout
        self.observer = observer
        self.scontrol = scontrol
        self.clock_margin = clock_margin
        self._session = session
        self._owns_session = session is None
        self._adapter: RestAdapter | None = adapter_for(version) if version else None
        self._detect_lock = asyncio.Lock()
        self._jobs_update_time: int | None = None
        self.known_jobs = KnownJobs()
        """The last job list's parsed jobs: a list parses only the jobs that changed."""

    def __repr__(self) -> str:
        return f"SlurmClient({self.base_url!r}, version={self.rest_version!r}, auth={self.auth!r})"

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._owns_session and self._session is not None:
            await self._session.close()
            self._session = None

    # --- version --------------------------------------------------------------------------

    @property
    def rest_version(self) -> str | None:
        """The REST version in use, once known."""
        return self._adapter.version if self._adapter else None

    async def adapter(self) -> RestAdapter:
        """The adapter of the version in use, detecting it on first use."""
        if self._adapter is None:
            async with self._detect_lock:
                if self._adapter is None:
                    self._adapter = await self._detect()
                    log.info("slurmrestd at %s: using REST %s", self.base_url, self._adapter.version)
        return self._adapter

    async def _detect(self) -> RestAdapter:
        status, body, _ = await self._send("GET", "/openapi/v3", "/openapi/v3")
        if status in (401, 511):
            raise SlurmAuthError("slurmrestd refused the credentials", status=status)
        if status == 200 and isinstance(body, Mapping) and isinstance(body.get("paths"), Mapping):
            served = {m.group(1) for p in body["paths"] if (m := _VERSION_IN_PATH.match(p))}
            for version in SUPPORTED_VERSIONS:
                if version in served:
                    return ADAPTERS[version]
            raise SlurmVersionError(f"slurmrestd serves {sorted(served)}, none of {list(SUPPORTED_VERSIONS)}")
        for version in SUPPORTED_VERSIONS:  # no OpenAPI document: ask each version's ping
            ping = ADAPTERS[version].endpoints["ping"]
            status, _, _ = await self._send(ping.method, ping.template, ping.template)
            if status == 200:
                return ADAPTERS[version]
            if status in (401, 511):
                raise SlurmAuthError("slurmrestd refused the credentials", status=status)
        raise SlurmVersionError(f"slurmrestd at {self.base_url} answers none of {list(SUPPORTED_VERSIONS)}")

    # --- transport ------------------------------------------------------------------------

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout))
        return self._session

    async def _send(
        self,
        method: str,
        path: str,
        template: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Mapping[str, Any] | None = None,
        decode: Callable[[bytes], Any] | None = None,
    ) -> tuple[int, Any, _Headers | None]:
        """One HTTP exchange: (status, parsed JSON or text, headers). Connection trouble raises.

        ``decode`` reads the body first (the job list's splitter); where it fails, plain JSON."""
        headers = {"Accept": "application/json"}
        if self.auth is not None:
            headers.update(await self.auth.headers())
        session = self._get_session()
        started = time.monotonic()
        status: int | None = None
        try:
            async with session.request(
                method,
                self.base_url + path,
                params=query,
                json=body,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=self.timeout),
            ) as resp:
                status = resp.status
                raw = await resp.read()
                resp_headers = resp.headers
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, TimeoutError) as exc:
            raise SlurmUnavailable(f"{method} {template}: {type(exc).__name__}: {exc}") from exc
        finally:
            elapsed = time.monotonic() - started
            log.debug("%s %s -> %s in %.3fs", method, path, status, elapsed)
            if self.observer is not None:
                try:
                    self.observer(method, template, status, elapsed)
                except Exception:
                    log.exception("request observer failed")
        return status, _parse_body(raw, decode), resp_headers

    async def _call(
        self,
        operation: str,
        *,
        params: Mapping[str, str | int] | None = None,
        query: Mapping[str, str] | None = None,
        body: Mapping[str, Any] | None = None,
        not_modified_ok: bool = False,
        decode: Callable[[bytes], Any] | None = None,
    ) -> tuple[int, Mapping[str, Any], _Headers | None]:
        adapter = await self.adapter()
        endpoint = adapter.endpoints.get(operation)
        if endpoint is None:
            raise SlurmUnsupported(f"REST {adapter.version} has no {operation}")
        path = endpoint.path(**(params or {}))
        status, data, headers = await self._send(
            endpoint.method, path, endpoint.template, query=query, body=body, decode=decode
        )
        if status == 304 and not_modified_ok:
            return status, {}, headers
        if isinstance(data, Mapping):
            errors, warnings = adapter.parse_problems(data)
            for w in warnings:
                level = logging.DEBUG if w.description.startswith(_UNCHANGED) else logging.WARNING
                log.log(
                    level,
                    "slurmrestd warning on %s %s: %s (%s)",
                    endpoint.method,
                    path,
                    w.description,
                    w.source,
                )
            if errors:
                raise api_error(errors, status=status)
        if status in (401, 511) or (status >= 500 and isinstance(data, str) and "auth" in data.lower()):
            raise SlurmAuthError(f"{endpoint.method} {path}: authentication failed", status=status)
        if status >= 300:
            raise SlurmServerError(f"{endpoint.method} {path}: {str(data or '')[:200]}", status=status)
        if not isinstance(data, Mapping):
            raise SlurmResponseError(f"{endpoint.method} {path}: expected a JSON object", status=status)
        return status, data, headers

    def _server_time(self, headers: _Headers | None, started: float) -> int:
        """An ``update_time`` for versions whose answer has no ``last_update``: early, never late."""
        stamp = started
        date = headers.get("Date") if headers is not None else None
        if date:
            with contextlib.suppress(TypeError, ValueError):
                stamp = min(stamp, parsedate_to_datetime(date).timestamp())
        return int(stamp - self.clock_margin)

    # --- jobs -----------------------------------------------------------------------------

    async def ping(self) -> tuple[ControllerPing, ...]:
        """The controllers' ping results. Not a token check: a bad token still answers 200."""
        adapter = await self.adapter()
        _, data, _ = await self._call("ping")
        return adapter.parse_pings(data)

    async def list_jobs(self, *, update_time: int | None = None) -> JobsPage:
        """All jobs; with ``update_time``, raises NotModified if nothing changed since then."""
        adapter = await self.adapter()
        return await self._conditional_list(
            "list_jobs",
            update_time=update_time,
            parse=lambda body: adapter.parse_jobs(body, known=self.known_jobs),
            has_last_update="last_update" in adapter.jobs_response_fields,
            is_empty=lambda page: not page.jobs,
            decode=split_job_list,  # each job left as its JSON: only the changed ones are decoded
        )

    async def _conditional_list(
        self,
        operation: str,
        *,
        update_time: int | None,
        parse: Callable[[Any], _Page],
        has_last_update: bool,
        is_empty: Callable[[_Page], bool],
        decode: Callable[[bytes], Any] | None = None,
    ) -> _Page:
        """A list with optional ``update_time``: NotModified on 304, or on the 200 with no items and no
        ``last_update`` that v0.0.40+ answers when nothing changed; else the page, its ``update_time``
        taken from the server's clock when the version reports none."""
        started = time.time()
        query = {"update_time": str(update_time)} if update_time is not None else None
        status, data, headers = await self._call(
            operation, query=query, not_modified_ok=update_time is not None, decode=decode
        )
        page = parse(data)
        unchanged = update_time is not None and has_last_update
        if status == 304 or (unchanged and page.update_time is None and is_empty(page)):
            raise NotModified(update_time or 0)
        if page.update_time is None:
            page = replace(page, update_time=self._server_time(headers, started))
        return page

    async def poll_jobs(self) -> JobsPage | None:
        """``list_jobs`` that remembers the last ``update_time`` itself; None when nothing changed."""
        try:
            page = await self.list_jobs(update_time=self._jobs_update_time)
        except NotModified:
            return None
        self._jobs_update_time = page.update_time
        return page

    async def get_job(self, job_id: int) -> SlurmJob:
        adapter = await self.adapter()
        _, data, _ = await self._call("get_job", params={"job_id": job_id})
        jobs = adapter.parse_jobs(data, known=self.known_jobs, read_alone=True).jobs
        for job in jobs:
            if job.job_id == job_id:
                return job
        if jobs:
            return jobs[0]
        raise InvalidJobId(f"job {job_id} not found", error_number=2017)

    async def update_job(
        self,
        job_id: int,
        *,
        required_nodes: Sequence[str] | None = None,
        constraints: str | None = None,
        hold: bool | None = None,
        begin_time: int | None = None,
        comment: str | None = None,
        admin_comment: str | None = None,
        updated: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """One POST with the given fields, in this version's shape; ``updated`` is awaited as soon as
        it has landed (before an admin comment that follows by scontrol).

        ``admin_comment`` rides in the same body where the version takes it (v0.0.40+); v0.0.38 has
        no such field, so it is written by ``scontrol update`` after the POST (or alone). An answer
        of 2015 alone (the job does not fit its partition now) means the update was applied: it is
        not an error here (``PartitionConfigUnavailable``).
        """
        adapter = await self.adapter()
        in_body = admin_comment if adapter.can_set_admin_comment else None
        body = adapter.job_update_body(
            required_nodes=required_nodes,
            constraints=constraints,
            hold=hold,
            begin_time=begin_time,
            comment=comment,
            admin_comment=in_body,
        )
        by_scontrol = admin_comment if admin_comment is not None and in_body is None else None
        if not body and by_scontrol is None:
            raise ValueError("update_job needs at least one field")
        # By scontrol, a mark is written before the update and a clear after it: whatever fails in
        # between, an admin hold of the bridge's never lacks its mark (which would make it look like
        # an administrator's).
        if by_scontrol:
            await self._set_admin_comment_by_scontrol(job_id, by_scontrol)
        if body:
            try:
                await self._call("update_job", params={"job_id": job_id}, body=body)
            except PartitionConfigUnavailable as landed:
                log.debug("job %s updated; Slurm adds: %s", job_id, landed.description)
            if updated is not None:
                await updated()
        if by_scontrol == "":
            await self._set_admin_comment_by_scontrol(job_id, by_scontrol)

    async def _set_admin_comment_by_scontrol(self, job_id: int, text: str) -> None:
        if self.scontrol is None:
            adapter = await self.adapter()
            raise SlurmUnsupported(
                f"REST {adapter.version} cannot set an admin comment; configure ScontrolCli"
            )
        try:
            await self.scontrol.set_admin_comment(job_id, text)
        except PartitionConfigUnavailable as landed:
            log.debug("job %s admin comment written; Slurm adds: %s", job_id, landed.description)

    async def pin_and_release(
        self,
        job_id: int,
        *,
        nodes: Sequence[str],
        constraints: str,
        begin_time: int | None = None,
        comment: str | None = None,
        admin_comment: str | None = None,
        released: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Pin to exactly ``nodes`` and the job's feature, and release, in one call.

        Pass ``begin_time`` (now) when releasing a job that was requeue-held, or it waits about two
        minutes with reason BeginTime. ``comment``/``admin_comment`` (usually "" to clear the
        bridge's own) go with it. ``released`` is awaited once the job is released: on v0.0.38 the
        admin comment is cleared by an ``scontrol`` subprocess after that, which the release itself
        does not wait for. Raises InvalidNodeName/InvalidFeature if the nodes are not all
        registered yet.
        """
        if not nodes:
            raise ValueError("pin_and_release needs the node names")
        await self.update_job(
            job_id,
            required_nodes=nodes,
            constraints=constraints,
            hold=False,
            begin_time=begin_time,
            comment=comment,
            admin_comment=admin_comment,
            updated=released,
        )

    async def hold_job(
        self,
        job_id: int,
        *,
        unpin: Sequence[str] = (),
        comment: str | None = None,
        admin_comment: str | None = None,
    ) -> None:
        """Hold a pending job (an admin hold when the token is SlurmUser's).

        ``unpin``: the bridge's own node names the job is pinned to (its release). The same update
        clears that required node list; the constraints stay. Slurm 24.11 resolves a job's stored
        required node list before it reads any field of an update, and refuses every update (this
        hold, a clear of the list, a comment) with 2018 once one of those nodes has been deleted;
        22.05 applies the hold over such a list (both verified on the local stack). So on 2018, with
        ``unpin`` and scontrol, each of those names slurmctld does not know is created as a FUTURE
        node, the update is sent again, and the placeholders are deleted whatever the outcome.
        ``comment`` and ``admin_comment`` (the bridge's mark on its holds) go with the hold.
        """
        fields: dict[str, Any] = {"comment": comment, "admin_comment": admin_comment}
        try:
            await self.update_job(job_id, hold=True, required_nodes=() if unpin else None, **fields)
        except InvalidNodeName as refused:
            if not unpin or self.scontrol is None:
                raise
            await self._hold_through_placeholders(
                job_id, unpin, refused, scontrol=self.scontrol, fields=fields
            )

    async def _hold_through_placeholders(
        self,
        job_id: int,
        names: Sequence[str],
        refused: InvalidNodeName,
        *,
        scontrol: ScontrolCli,
        fields: Mapping[str, Any],
    ) -> None:
        """Hold and unpin a job pinned to deleted nodes (24.11): FUTURE nodes stand in for the missing
        names during the update. Only names slurmctld does not know are created (a create of a known
        name, FUTURE ones included, makes 24.11.5 lose that node), and only those are deleted."""
        missing = [name for name in names if not await self._node_known(name)]
        if not missing:
            raise refused  # not the stale pin: nothing to stand in for
        log.warning(
            "job %s is pinned to deleted nodes %s: holding it through FUTURE placeholders",
            job_id,
            ",".join(missing),
        )
        created: list[str] = []
        try:
            for name in missing:
                await scontrol.create_future_node(name)
                created.append(name)
            await self.update_job(job_id, hold=True, required_nodes=(), **fields)
        finally:
            for name in created:
                try:
                    await self._delete_node_once(name)
                except InvalidNodeName:
                    pass
                except SlurmError as exc:
                    # A slurmd registering this name later would take the FUTURE node over without
                    # its own features: say which node to delete.
                    log.warning(
                        "placeholder node %s of job %s left behind (scontrol delete nodename=%s): %s",
                        name,
                        job_id,
                        name,
                        exc,
                    )

    async def _node_known(self, name: str) -> bool:
        try:
            await self.get_node(name, future=True)
        except InvalidNodeName:
            return False
        return True

    async def release_job(self, job_id: int) -> None:
        await self.update_job(job_id, hold=False)

    async def set_comment(self, job_id: int, comment: str) -> None:
        """Write ``comment`` on the job: where the user reads why the bridge keeps it held."""
        await self.update_job(job_id, comment=comment)

    async def set_admin_comment(self, job_id: int, admin_comment: str) -> None:
        """Write the job's admin comment, which only administrators can (the bridge marks its holds)."""
        await self.update_job(job_id, admin_comment=admin_comment)

    async def requeue_hold(self, job_id: int) -> None:
        """Requeue a running job and keep it held (REST from v0.0.45, else ``scontrol requeuehold``)."""
        adapter = await self.adapter()
        if adapter.can_requeue_hold:
            await self._call("requeue_job", params={"job_id": job_id}, query={"Hold": ""})
        elif self.scontrol is not None:
            await self.scontrol.requeue_hold(job_id)
        else:
            raise SlurmUnsupported(f"REST {adapter.version} cannot requeue-hold; configure ScontrolCli")

    async def cancel_job(self, job_id: int, *, signal: str | None = None) -> None:
        await self._call(
            "cancel_job", params={"job_id": job_id}, query={"signal": signal} if signal else None
        )

    # --- reservations ---------------------------------------------------------------------

    async def list_reservations(self) -> tuple[SlurmReservation, ...]:
        """Every advanced reservation slurmctld knows (ended ones are purged by Slurm)."""
        adapter = await self.adapter()
        _, data, _ = await self._call("list_reservations")
        return adapter.parse_reservations(data)

    # --- nodes ----------------------------------------------------------------------------

    async def list_nodes(self, *, update_time: int | None = None) -> NodesPage:
        adapter = await self.adapter()
        return await self._conditional_list(
            "list_nodes",
            update_time=update_time,
            parse=adapter.parse_nodes,
            has_last_update="last_update" in adapter.nodes_response_fields,
            is_empty=lambda page: not page.nodes,
        )

    async def get_node(self, name: str, *, future: bool = False) -> SlurmNode:
        """The node; InvalidNodeName when it does not exist (also after a delete).

        ``future``: FUTURE nodes too, which v0.0.40+ hides unless asked (v0.0.38 has no such flag).
        """
        adapter = await self.adapter()
        wants_flags = future and "flags" in adapter.endpoints["get_node"].query
        try:
            _, data, _ = await self._call(
                "get_node", params={"node_name": name}, query={"flags": "FUTURE"} if wants_flags else None
            )
        except SlurmAPIError as exc:
            # 24.11 after a delete: 200, error 0 "Failure to query node <name>" (source _dump_nodes)
            if type(exc) is SlurmAPIError and not exc.error_number:
                raise InvalidNodeName(
                    exc.description, status=exc.status, error_number=0, source=exc.source, errors=exc.errors
                ) from exc
            raise
        for node in adapter.parse_nodes(data).nodes:
            if node.name == name:
                return node
        raise InvalidNodeName(f"node {name} not found", error_number=2018)

    async def _set_node_state(self, name: str, state: str, reason: str | None) -> None:
        adapter = await self.adapter()
        if adapter.can_update_nodes:
            await self._call(
                "update_node",
                params={"node_name": name},
                body=adapter.node_update_body(state=state, reason=reason),
            )
        elif self.scontrol is not None:
            await self.scontrol.set_node_state(name, state, reason=reason)
        else:
            raise SlurmUnsupported(f"REST {adapter.version} cannot update nodes; configure ScontrolCli")

    async def drain_node(self, name: str, *, reason: str) -> None:
        """Let the running job finish, take no new one."""
        await self._set_node_state(name, "DRAIN", reason)

    async def down_node(self, name: str, *, reason: str) -> None:
        """Mark the node DOWN (its pod is gone): a COMPLETING job on it can then finish."""
        await self._set_node_state(name, "DOWN", reason)

    async def resume_node(self, name: str) -> None:
        """Take a DOWN (or drained) node back into service; its slurmd's registration makes it IDLE."""
        await self._set_node_state(name, "RESUME", None)

    async def delete_node(
        self, name: str, *, down_if_busy: bool = True, reason: str = "k8s-bridge: delete"
    ) -> None:
        """Delete a dynamic node; if Slurm says it is busy, set it DOWN and delete again."""
        try:
            await self._delete_node_once(name)
        except NodesBusy:
            if not down_if_busy:
                raise
            await self.down_node(name, reason=reason)
            await self._delete_node_once(name)

    async def _delete_node_once(self, name: str) -> None:
        adapter = await self.adapter()
        if adapter.can_delete_nodes:
            await self._call("delete_node", params={"node_name": name})
        elif self.scontrol is not None:
            await self.scontrol.delete_node(name)
        else:
            raise SlurmUnsupported(f"REST {adapter.version} cannot delete nodes; configure ScontrolCli")
