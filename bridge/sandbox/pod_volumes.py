"""Pod volumes for the process runner: what each volume holds and where each container mounts it.

Why: a bridge installed by its Helm chart reads its ServiceAccount token, its webhook certificate
(a Secret) and its configuration (a ConfigMap) from files at the ``mountPath`` its chart names. The
runner gives each pod the volume kinds such a chart uses, laid out as kubelet lays them out:

- ``secret``, ``configMap``, ``downwardAPI`` and ``projected`` (``secret``, ``configMap``,
  ``downwardAPI`` and ``serviceAccountToken`` sources) are kubelet's *atomic writer* volumes: a
  directory ``<pod dir>/volumes/<name>`` holding the files in a timestamped directory
  ``..<time>.<random>``, a symlink ``..data`` to it, and for each top-level name a symlink
  ``<name> -> ..data/<name>``. An update writes a new timestamped directory and renames a new
  ``..data`` symlink over the old one (:func:`write_atomically`), so a reader sees either every old
  file or every new one (a certificate and its key together), and one that watches the directory
  sees one change. Contents follow ``items`` (key to path, each with its ``mode``), ``defaultMode``
  and ``optional`` as kubelet's (a missing object or key of a non-optional source keeps the pod
  waiting: :class:`MissingSourceError`). They are always mounted read-only, as kubelet mounts them;
- ``emptyDir`` is a directory of the pod's own, shared by its containers: ``<pod dir>/volumes/<name>``
  on disk, or, with ``medium: Memory``, a directory in the host's ``/dev/shm`` named after the pod's
  network namespace (:func:`memory_dir`, removed with it), so that Ray's object store in
  ``/dev/shm`` stays in memory. ``sizeLimit`` is not enforced.

Every other kind (hostPath, persistentVolumeClaim, ...), ``subPathExpr`` and downward API
``resourceFieldRef`` fail the pod with a message saying so (:func:`check_volumes`).

:func:`container_mounts` gives each container's mounts (parents before children); the container's
mount namespace makes them (:mod:`bridge.sandbox.pod_init`). Everything here is pure except
:func:`write_atomically` and :func:`read_payload`, which touch only the volume's own directory.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

__all__ = [
    "ATOMIC_KINDS",
    "DATA_LINK",
    "SUPPORTED_KINDS",
    "File",
    "MissingSourceError",
    "Mount",
    "UnsupportedVolumeError",
    "check_volumes",
    "config_map_files",
    "container_mounts",
    "downward_files",
    "memory_dir",
    "pod_memory_dir",
    "projected_files",
    "read_payload",
    "referenced_objects",
    "secret_files",
    "token_sources",
    "volume_files",
    "volume_kind",
    "write_atomically",
]

ATOMIC_KINDS = ("secret", "configMap", "downwardAPI", "projected")
"""Volume kinds written by the atomic writer (always mounted read-only)."""
SUPPORTED_KINDS = (*ATOMIC_KINDS, "emptyDir")
DATA_LINK = "..data"
DEFAULT_MODE = 0o644
MEMORY_ROOT = Path("/dev/shm")  # noqa: S108 - the host's shared memory, as a Memory emptyDir wants

Pod = Mapping[str, Any]
Lookup = Callable[[str, str], Mapping[str, Any] | None]
"""``(namespace, name)`` to the object (a Secret or a ConfigMap), or None when there is none."""


class UnsupportedVolumeError(ValueError):
    """A volume (or a mount of one) the runner cannot give; the message says which and why."""


class MissingSourceError(LookupError):
    """A non-optional Secret, ConfigMap, key or token is not there (yet): the pod waits for it."""


@dataclass(frozen=True)
class File:
    """One file of an atomic writer volume."""

    data: bytes
    mode: int


@dataclass(frozen=True)
class Mount:
    """One bind mount into a container: ``source`` on the host at ``target`` inside."""

    source: str
    target: str
    read_only: bool


def volume_kind(volume: Mapping[str, Any]) -> str:
    """The volume's kind: the one key besides ``name`` (``secret``, ``emptyDir``, ...)."""
    kinds = [key for key in volume if key != "name"]
    return kinds[0] if len(kinds) == 1 else "+".join(sorted(kinds)) or "?"


# -- validation --------------------------------------------------------------------------------------


def _check_items(where: str, items: Sequence[Mapping[str, Any]]) -> None:
    for item in items:
        _relative(where, str(item.get("path", "")))
        if "resourceFieldRef" in item:
            raise UnsupportedVolumeError(
                f"{where}: downward API resourceFieldRef is not supported by the process runner"
            )


def _relative(where: str, path: str) -> PurePosixPath:
    relative = PurePosixPath(path)
    if not path or relative.is_absolute() or ".." in relative.parts or path.startswith(".."):
        raise UnsupportedVolumeError(f"{where}: path {path!r} must be relative, without '..'")
    return relative


_PROJECTED_SOURCES = ("secret", "configMap", "downwardAPI", "serviceAccountToken")


def _check_volume(volume: Mapping[str, Any]) -> None:
    name, kind = volume.get("name", "?"), volume_kind(volume)
    where = f"volume {name!r}"
    if kind not in SUPPORTED_KINDS:
        raise UnsupportedVolumeError(
            f"{where}: {kind} volumes are not supported by the process runner "
            f"(it supports {', '.join(SUPPORTED_KINDS)})"
        )
    body = volume[kind] or {}
    if kind in ("secret", "configMap", "downwardAPI"):
        _check_items(where, body.get("items") or [])
    if kind == "projected":
        for source in body.get("sources") or []:
            found = [key for key in source if key in _PROJECTED_SOURCES]
            if len(found) != 1:
                raise UnsupportedVolumeError(
                    f"{where}: projected source {'+'.join(sorted(source)) or '?'} is not supported by the "
                    f"process runner (it supports {', '.join(_PROJECTED_SOURCES)})"
                )
            inner = source[found[0]] or {}
            if found[0] == "serviceAccountToken":
                _relative(where, str(inner.get("path", "")))
            else:
                _check_items(where, inner.get("items") or [])


def check_volumes(pod: Pod) -> None:
    """Raise :class:`UnsupportedVolumeError` unless the runner can give every volume and mount of ``pod``."""
    spec = pod.get("spec", {})
    names = set()
    for volume in spec.get("volumes") or []:
        _check_volume(volume)
        names.add(volume.get("name"))
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        cname = container.get("name", "?")
        if container.get("volumeDevices"):
            raise UnsupportedVolumeError(f"container {cname!r}: volumeDevices are not supported")
        for mount in container.get("volumeMounts") or []:
            where = f"container {cname!r}: mount of {mount.get('name')!r} at {mount.get('mountPath')!r}"
            if mount.get("name") not in names:
                raise UnsupportedVolumeError(f"{where}: no such volume")
            if mount.get("subPathExpr"):
                raise UnsupportedVolumeError(f"{where}: subPathExpr is not supported by the process runner")
            if mount.get("subPath"):
                _relative(where, str(mount["subPath"]))
            target = PurePosixPath(str(mount.get("mountPath", "")))
            if not target.is_absolute() or ".." in target.parts or target == PurePosixPath("/"):
                raise UnsupportedVolumeError(f"{where}: mountPath must be absolute, not /, without '..'")


# -- contents ----------------------------------------------------------------------------------------


def _mode(item: Mapping[str, Any], default: int) -> int:
    mode = item.get("mode")
    return int(mode) & 0o7777 if mode is not None else default


def _keyed_files(
    *,
    where: str,
    values: Mapping[str, bytes] | None,
    items: Sequence[Mapping[str, Any]],
    optional: bool,
    default_mode: int,
) -> dict[str, File]:
    """Files of a Secret or ConfigMap (``values``: key to bytes; None: the object is missing)."""
    if values is None:
        if optional:
            return {}
        raise MissingSourceError(f"{where} not found")
    if not items:
        return {key: File(data, default_mode) for key, data in sorted(values.items())}
    files: dict[str, File] = {}
    for item in items:
        key = str(item["key"])
        if key not in values:
            if optional:
                continue
            raise MissingSourceError(f"{where} has no key {key!r}")
        files[str(item["path"])] = File(values[key], _mode(item, default_mode))
    return files


def secret_files(
    source: Mapping[str, Any], *, namespace: str, secrets_of: Lookup, default_mode: int
) -> dict[str, File]:
    """A ``secret`` volume's (or projected source's) files; ``secretName`` or ``name`` names it."""
    name = str(source.get("secretName") or source.get("name") or "")
    found = secrets_of(namespace, name)
    values = (
        None
        if found is None
        else {key: base64.b64decode(value) for key, value in (found.get("data") or {}).items()}
    )
    return _keyed_files(
        where=f"Secret {namespace}/{name}",
        values=values,
        items=source.get("items") or [],
        optional=bool(source.get("optional")),
        default_mode=default_mode,
    )


def config_map_files(
    source: Mapping[str, Any], *, namespace: str, config_maps_of: Lookup, default_mode: int
) -> dict[str, File]:
    """A ``configMap`` volume's (or projected source's) files: ``data`` as UTF-8 and ``binaryData``."""
    name = str(source.get("name") or "")
    found = config_maps_of(namespace, name)
    values: dict[str, bytes] | None = None
    if found is not None:
        values = {key: str(value).encode() for key, value in (found.get("data") or {}).items()}
        values.update({key: base64.b64decode(v) for key, v in (found.get("binaryData") or {}).items()})
    return _keyed_files(
        where=f"ConfigMap {namespace}/{name}",
        values=values,
        items=source.get("items") or [],
        optional=bool(source.get("optional")),
        default_mode=default_mode,
    )


def _format_map(values: Mapping[str, Any]) -> str:
    """Labels or annotations as kubelet writes them: ``key="value"`` lines, sorted by key."""
    return "\n".join(f"{key}={json.dumps(str(value))}" for key, value in sorted(values.items()))


def _field(pod: Pod, path: str) -> str:
    metadata = pod.get("metadata", {})
    simple = {"metadata.name", "metadata.namespace", "metadata.uid"}
    if path in simple:
        return str(metadata.get(path.removeprefix("metadata."), ""))
    for kind in ("labels", "annotations"):
        if path == f"metadata.{kind}":
            return _format_map(metadata.get(kind) or {})
        prefix = f"metadata.{kind}['"
        if path.startswith(prefix) and path.endswith("']"):
            return str((metadata.get(kind) or {}).get(path[len(prefix) : -2], ""))
    raise UnsupportedVolumeError(f"downward API fieldRef {path!r} is not supported by the process runner")


def downward_files(source: Mapping[str, Any], *, pod: Pod, default_mode: int) -> dict[str, File]:
    """A ``downwardAPI`` volume's (or projected source's) files from the pod's metadata."""
    return {
        str(item["path"]): File(
            _field(pod, item["fieldRef"]["fieldPath"]).encode(), _mode(item, default_mode)
        )
        for item in source.get("items") or []
    }


def projected_files(
    volume: Mapping[str, Any],
    *,
    pod: Pod,
    secrets_of: Lookup,
    config_maps_of: Lookup,
    tokens: Mapping[str, str],
) -> dict[str, File]:
    """A ``projected`` volume's files, every source merged in order; ``tokens`` maps each
    ``serviceAccountToken`` source's path to the token (a missing one: :class:`MissingSourceError`)."""
    body = volume["projected"] or {}
    mode = int(body.get("defaultMode", DEFAULT_MODE)) & 0o7777
    namespace = str(pod["metadata"]["namespace"])
    files: dict[str, File] = {}
    for source in body.get("sources") or []:
        if "secret" in source:
            files.update(
                secret_files(source["secret"], namespace=namespace, secrets_of=secrets_of, default_mode=mode)
            )
        elif "configMap" in source:
            files.update(
                config_map_files(
                    source["configMap"], namespace=namespace, config_maps_of=config_maps_of, default_mode=mode
                )
            )
        elif "downwardAPI" in source:
            files.update(downward_files(source["downwardAPI"], pod=pod, default_mode=mode))
        elif "serviceAccountToken" in source:
            path = str(source["serviceAccountToken"]["path"])
            if path not in tokens:
                raise MissingSourceError(f"no token yet for {path!r}")
            files[path] = File(tokens[path].encode(), mode)
    return files


def volume_files(
    volume: Mapping[str, Any],
    *,
    pod: Pod,
    secrets_of: Lookup,
    config_maps_of: Lookup,
    tokens: Mapping[str, str],
) -> dict[str, File]:
    """The files of one atomic writer volume (:data:`ATOMIC_KINDS`), relative path to file."""
    kind = volume_kind(volume)
    body = volume[kind] or {}
    mode = int(body.get("defaultMode", DEFAULT_MODE)) & 0o7777
    namespace = str(pod["metadata"]["namespace"])
    if kind == "secret":
        return secret_files(body, namespace=namespace, secrets_of=secrets_of, default_mode=mode)
    if kind == "configMap":
        return config_map_files(body, namespace=namespace, config_maps_of=config_maps_of, default_mode=mode)
    if kind == "downwardAPI":
        return downward_files(body, pod=pod, default_mode=mode)
    if kind == "projected":
        return projected_files(
            volume, pod=pod, secrets_of=secrets_of, config_maps_of=config_maps_of, tokens=tokens
        )
    raise UnsupportedVolumeError(f"volume {volume.get('name')!r}: {kind} is not an atomic writer volume")


def token_sources(volume: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The ``serviceAccountToken`` sources of a projected volume (none for other kinds)."""
    if volume_kind(volume) != "projected":
        return []
    sources = (volume["projected"] or {}).get("sources") or []
    return [source["serviceAccountToken"] for source in sources if "serviceAccountToken" in source]


def referenced_objects(pod: Pod) -> set[tuple[str, str, str]]:
    """``(kind, namespace, name)`` of every Secret and ConfigMap the pod's volumes read."""
    namespace = str(pod.get("metadata", {}).get("namespace", ""))
    found: set[tuple[str, str, str]] = set()
    for volume in pod.get("spec", {}).get("volumes") or []:
        kind = volume_kind(volume)
        body = volume.get(kind) or {}
        if kind == "secret":
            found.add(("Secret", namespace, str(body.get("secretName", ""))))
        elif kind == "configMap":
            found.add(("ConfigMap", namespace, str(body.get("name", ""))))
        elif kind == "projected":
            for source in body.get("sources") or []:
                if "secret" in source:
                    found.add(("Secret", namespace, str(source["secret"].get("name", ""))))
                if "configMap" in source:
                    found.add(("ConfigMap", namespace, str(source["configMap"].get("name", ""))))
    return found


# -- where volumes are, and where containers mount them ----------------------------------------------


def pod_memory_dir(namespace: str, *, root: Path = MEMORY_ROOT) -> Path:
    """The folder of the Memory emptyDirs of the pod with network namespace ``namespace``
    (``kb-<token>`` gives ``/dev/shm/kb-pod-<token>``), removed with the namespace."""
    return root / f"kb-pod-{namespace.removeprefix('kb-')}"


def memory_dir(namespace: str, volume: str, *, root: Path = MEMORY_ROOT) -> Path:
    """Where a ``medium: Memory`` emptyDir lives: ``<pod memory dir>/<volume>`` (:func:`pod_memory_dir`)."""
    return pod_memory_dir(namespace, root=root) / volume


def container_mounts(
    pod: Pod, container: Mapping[str, Any], *, volume_path: Callable[[Mapping[str, Any]], Path]
) -> list[Mount]:
    """The container's mounts, parents before children (by the depth of ``mountPath``, then in order).

    ``volume_path`` gives each volume's directory on the host. A ``subPath`` mounts that entry of the
    volume (for an atomic writer volume, the file as it is then: kubelet does not update a subPath
    mount either). Atomic writer volumes are read-only whatever the mount says, as kubelet mounts them.
    """
    volumes = {v["name"]: v for v in pod.get("spec", {}).get("volumes") or []}
    mounts: list[Mount] = []
    for entry in container.get("volumeMounts") or []:
        volume = volumes[entry["name"]]
        source = volume_path(volume)
        if entry.get("subPath"):
            source = source / str(entry["subPath"])
        read_only = bool(entry.get("readOnly")) or volume_kind(volume) in ATOMIC_KINDS
        target = os.path.normpath(str(entry["mountPath"]))
        mounts.append(Mount(source=str(source), target=target, read_only=read_only))
    return sorted(mounts, key=lambda mount: len(PurePosixPath(mount.target).parts))


# -- the atomic writer -------------------------------------------------------------------------------


def read_payload(directory: Path) -> dict[str, File] | None:
    """What the volume's ``..data`` holds now (path to file), or None when it was never written."""
    data = directory / DATA_LINK
    if not data.is_dir():
        return None
    files: dict[str, File] = {}
    for path in sorted(data.rglob("*")):
        if path.is_file() and not path.is_symlink():
            files[str(path.relative_to(data))] = File(path.read_bytes(), path.stat().st_mode & 0o7777)
    return files


def write_atomically(directory: Path, files: Mapping[str, File], *, now: float | None = None) -> bool:
    """Make the volume ``directory`` hold exactly ``files`` (kubelet's atomic writer); True if it changed.

    The new files go into a new timestamped directory, then a symlink to it is renamed over
    ``..data`` (one atomic step for every file), then the top-level symlinks are added or removed and
    the previous timestamped directory is deleted.
    """
    directory.mkdir(parents=True, exist_ok=True)
    if read_payload(directory) == dict(files):
        return False
    stamp = time.strftime("%Y_%m_%d_%H_%M_%S", time.gmtime(now))
    fresh = directory / f"..{stamp}.{secrets.token_hex(4)}"
    fresh.mkdir(mode=0o755)
    for relative, file in files.items():
        path = fresh / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(file.data)
        path.chmod(file.mode)
    link = directory / f"{DATA_LINK}_tmp"
    with contextlib.suppress(FileNotFoundError):
        link.unlink()
    link.symlink_to(fresh.name)
    link.replace(directory / DATA_LINK)
    tops = {PurePosixPath(relative).parts[0] for relative in files}
    for top in sorted(tops):
        if not (directory / top).is_symlink():
            (directory / top).symlink_to(f"{DATA_LINK}/{top}")
    for entry in directory.iterdir():
        if entry.name.startswith(".."):
            stale = entry.name not in (fresh.name, DATA_LINK)
            if stale and entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
        elif entry.name not in tops and entry.is_symlink():
            entry.unlink()
    return True
