"""Keeps one runner pod's volumes filled and current, as kubelet's volume manager does.

Why a module of its own: the contents are pure (:mod:`bridge.sandbox.pod_volumes`) and so is the
token timing (:mod:`bridge.sandbox.service_account`); what is left is state and I/O for one pod: the
tokens it was issued and when each is due, the volume directories under ``<pod dir>/volumes``
(``0700``: only root, which the containers run as, reads the tokens there), the Memory emptyDirs, and
each container's mount plan for :mod:`bridge.sandbox.pod_init`. The process runner's pod worker calls
:meth:`PodVolumes.sync` before the first container starts (until it reports nothing missing: the pod
waits, as with kubelet, for a Secret or ConfigMap that is not there yet) and again whenever a Secret
or ConfigMap changes or a token is due.
"""

from __future__ import annotations

import json
import logging
import random
import shutil
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp

from bridge.runtime import ApiError, Client
from bridge.sandbox.pod_volumes import (
    ATOMIC_KINDS,
    Lookup,
    MissingSourceError,
    Mount,
    container_mounts,
    memory_dir,
    pod_memory_dir,
    token_sources,
    volume_files,
    volume_kind,
    write_atomically,
)
from bridge.sandbox.service_account import IssuedToken, request_token

__all__ = ["PodVolumes", "SyncResult", "remove_memory_dirs"]

log = logging.getLogger(__name__)

TOKEN_RETRY = 5.0
"""Seconds before a failed TokenRequest is tried again."""


@dataclass(frozen=True)
class SyncResult:
    """After a sync: what is still missing (None: every volume is complete) and when to sync again
    at the latest (seconds; None: only when a Secret or ConfigMap changes)."""

    missing: str | None
    again_in: float | None


def remove_memory_dirs(namespace: str) -> None:
    """Remove the Memory emptyDirs of the pod with network namespace ``namespace`` (with it)."""
    shutil.rmtree(pod_memory_dir(namespace), ignore_errors=True)


class PodVolumes:
    """One pod's volumes: where each lives, its contents kept current, the containers' mount plans."""

    def __init__(
        self,
        *,
        pod: Mapping[str, Any],
        pod_dir: Path,
        namespace: str,
        client: Client,
        secrets_of: Lookup,
        config_maps_of: Lookup,
        rng: random.Random | None = None,
    ) -> None:
        self.pod = pod
        self.root = pod_dir / "volumes"
        self.plans = pod_dir / "mounts"
        self.namespace = namespace
        self._client = client
        self._secrets_of = secrets_of
        self._config_maps_of = config_maps_of
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not secrets
        self._tokens: dict[tuple[str, str], tuple[IssuedToken, datetime]] = {}
        """Per (volume, path): the token issued last and when it is due for renewal."""
        self._retry_at: dict[tuple[str, str], datetime] = {}

    @property
    def volumes(self) -> list[Mapping[str, Any]]:
        return list(self.pod.get("spec", {}).get("volumes") or [])

    def path(self, volume: Mapping[str, Any]) -> Path:
        """The volume's directory on the host (a Memory emptyDir's is in ``/dev/shm``)."""
        if volume_kind(volume) == "emptyDir" and (volume["emptyDir"] or {}).get("medium") == "Memory":
            return memory_dir(self.namespace, str(volume["name"]))
        return self.root / str(volume["name"])

    def create(self) -> None:
        """Make the volume directories (emptyDirs world-writable, as kubelet makes them)."""
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.root.chmod(0o700)
        self.plans.mkdir(mode=0o700, exist_ok=True)
        for volume in self.volumes:
            path = self.path(volume)
            path.mkdir(parents=True, exist_ok=True)
            if volume_kind(volume) == "emptyDir":
                path.chmod(0o777)

    async def sync(self, *, now: datetime | None = None) -> SyncResult:
        """Request the tokens that are due, then write every atomic writer volume that changed."""
        moment = now or datetime.now(UTC)
        again = [await self._refresh_tokens(moment)]
        missing: list[str] = []
        for volume in self.volumes:
            if volume_kind(volume) not in ATOMIC_KINDS:
                continue
            name = str(volume["name"])
            tokens = {path: issued.token for (vol, path), (issued, _) in self._tokens.items() if vol == name}
            try:
                files = volume_files(
                    volume,
                    pod=self.pod,
                    secrets_of=self._secrets_of,
                    config_maps_of=self._config_maps_of,
                    tokens=tokens,
                )
            except MissingSourceError as error:
                missing.append(f"volume {name!r}: {error}")
                continue
            if write_atomically(self.path(volume), files):
                log.info("process runner: volume %s of pod %s written", name, self.pod["metadata"]["uid"])
        delays = [delay for delay in again if delay is not None]
        return SyncResult(missing="; ".join(missing) or None, again_in=min(delays) if delays else None)

    async def _refresh_tokens(self, now: datetime) -> float | None:
        """Request each token not issued yet or due (a failed request waits :data:`TOKEN_RETRY`, the
        token issued before, if any, staying in place); seconds until the next one is due."""
        due: list[float] = []
        for volume in self.volumes:
            for source in token_sources(volume):
                key = (str(volume["name"]), str(source["path"]))
                held = self._tokens.get(key)
                due_at = max(held[1] if held else now, self._retry_at.get(key, now))
                if due_at <= now:
                    if await self._request(key, source):
                        self._retry_at.pop(key, None)
                        due_at = self._tokens[key][1]
                    else:
                        due_at = self._retry_at[key] = now + timedelta(seconds=TOKEN_RETRY)
                due.append(max((due_at - now).total_seconds(), 0.0))
        return min(due) if due else None

    async def _request(self, key: tuple[str, str], source: Mapping[str, Any]) -> bool:
        try:
            self._tokens[key] = await request_token(self._client, self.pod, source, rng=self._rng)
        except (ApiError, OSError, aiohttp.ClientError, TimeoutError) as error:
            log.warning(
                "process runner: token for pod %s (%s) not issued, retrying: %s",
                self.pod["metadata"]["uid"], key[0], error,
            )  # fmt: skip
            return False
        log.info("process runner: token for pod %s (%s) issued", self.pod["metadata"]["uid"], key[0])
        return True

    def plan(self, container: Mapping[str, Any]) -> Path | None:
        """Write the container's mount plan (:mod:`bridge.sandbox.pod_init` reads it); None: no mounts."""
        mounts: list[Mount] = container_mounts(self.pod, container, volume_path=self.path)
        if not mounts:
            return None
        path = self.plans / f"{container['name']}.json"
        stage = self.plans / f"{container['name']}.root"
        stage.mkdir(exist_ok=True)
        path.write_text(json.dumps({"mounts": [asdict(mount) for mount in mounts], "stage": str(stage)}))
        return path
