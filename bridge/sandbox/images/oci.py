"""Layers and OCI image layouts written from directory trees, with no daemon, byte for byte reproducibly.

Why by hand rather than through ``podman build``: no base image can be pulled here and no daemon
runs, and a build tool's own choices (timestamps of its steps, tar entry order, gzip headers, the
ownership of the build user) are what make two builds differ. A layer here is a tar stream of a
tree's entries in sorted order, every mtime set to ``SOURCE_DATE_EPOCH``, owners numeric with no
names, set-user-ID and set-group-ID bits cleared (nothing in an image of a non-root program needs
them), hard links kept as links to the first name in that order; gzip with mtime 0 and no file
name. The same tree and epoch so always give the same diff ID and the same blob digest, and the
JSON documents (config, manifest, index) are written with sorted keys and no spaces.

Compressing is most of a layer's cost, so a blob is cached by the diff ID of its uncompressed
stream: each build still writes and hashes every layer's tar stream from the tree, and only the
gzip of a stream already compressed once is taken from the cache.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import stat
import tarfile
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

__all__ = [
    "LAYER_MEDIA_TYPE",
    "MANIFEST_MEDIA_TYPE",
    "Layer",
    "canonical_json",
    "image_config",
    "iso_time",
    "tree_entries",
    "write_layer",
    "write_layout",
]

LAYER_MEDIA_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"
MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_MEDIA_TYPE = "application/vnd.oci.image.config.v1+json"
INDEX_MEDIA_TYPE = "application/vnd.oci.image.index.v1+json"
_CHUNK = 1 << 20
_GZIP_LEVEL = 9


@dataclass(frozen=True)
class Layer:
    """A written layer: the gzip blob's digest and size, the uncompressed stream's digest and size."""

    digest: str
    size: int
    diff_id: str
    unpacked_size: int
    created_by: str


def canonical_json(document: Mapping[str, Any]) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def iso_time(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def tree_entries(tree: Path, *, include: Sequence[str] = (), exclude: Sequence[str] = ()) -> Iterator[str]:
    """Relative POSIX paths of ``tree`` in sorted depth-first order (the order the tar stream takes).

    ``include``: only those top-level paths (and what is below them) and their parent directories;
    ``exclude``: paths whose contents are left out (the directory itself is kept).
    """
    wanted = [p.strip("/") for p in include]
    emptied = {p.strip("/") for p in exclude}

    def selected(rel: str) -> bool:
        if not wanted:
            return True
        return any(rel == w or rel.startswith(w + "/") or w.startswith(rel + "/") for w in wanted)

    def walk(directory: Path, rel: str) -> Iterator[str]:
        for name in sorted(os.listdir(directory)):
            child_rel = f"{rel}/{name}" if rel else name
            if not selected(child_rel):
                continue
            yield child_rel
            child = directory / name
            if child_rel not in emptied and stat.S_ISDIR(os.lstat(child).st_mode):
                yield from walk(child, child_rel)

    yield from walk(tree, "")


class _Hashing:
    """A write-only file that hashes and counts what passes through to ``target`` (or nowhere)."""

    def __init__(self, target: BinaryIO | None) -> None:
        self.target = target
        self.sha = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes | bytearray | memoryview) -> int:
        self.sha.update(data)
        self.size += len(data)
        if self.target is not None:
            self.target.write(data)
        return len(data)

    def flush(self) -> None:
        if self.target is not None:
            self.target.flush()


def _tar_info(
    tree: Path, rel: str, *, epoch: int, links: dict[tuple[int, int], str]
) -> tarfile.TarInfo | None:
    st = os.lstat(tree / rel)
    info = tarfile.TarInfo(rel)
    info.mtime = epoch
    info.uid, info.gid = st.st_uid, st.st_gid
    info.uname = info.gname = ""
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISDIR(st.st_mode):
        info.type, info.mode = tarfile.DIRTYPE, mode
    elif stat.S_ISLNK(st.st_mode):
        info.type, info.mode, info.linkname = tarfile.SYMTYPE, 0o777, os.readlink(tree / rel)
    elif stat.S_ISREG(st.st_mode):
        info.mode = mode & ~(stat.S_ISUID | stat.S_ISGID)
        first = links.get((st.st_dev, st.st_ino)) if st.st_nlink > 1 else None
        if first is not None:
            info.type, info.linkname = tarfile.LNKTYPE, first
        else:
            if st.st_nlink > 1:
                links[(st.st_dev, st.st_ino)] = rel
            info.type, info.size = tarfile.REGTYPE, st.st_size
    else:
        return None  # device nodes, sockets, FIFOs: a runtime provides /dev, nothing else needs them
    return info


def _write_tar(tree: Path, entries: Sequence[str], *, epoch: int, out: _Hashing) -> None:
    links: dict[tuple[int, int], str] = {}
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT, encoding="utf-8") as archive:  # type: ignore[call-overload]
        for rel in entries:
            info = _tar_info(tree, rel, epoch=epoch, links=links)
            if info is None:
                continue
            if info.type == tarfile.REGTYPE:
                with (tree / rel).open("rb") as handle:
                    archive.addfile(info, handle)
            else:
                archive.addfile(info)


def write_layer(
    tree: Path,
    entries: Sequence[str],
    *,
    epoch: int,
    blobs: Path,
    gzip_cache: Path,
    created_by: str,
) -> Layer:
    """Write the layer of ``entries`` of ``tree`` into the layout's ``blobs`` folder (sha256/...)."""
    hashed = _Hashing(None)
    _write_tar(tree, entries, epoch=epoch, out=hashed)
    diff_id = f"sha256:{hashed.sha.hexdigest()}"
    gzip_cache.mkdir(parents=True, exist_ok=True)
    cached = gzip_cache / f"{hashed.sha.hexdigest()}.tar.gz"
    if not cached.exists():
        fd, partial_name = tempfile.mkstemp(dir=gzip_cache, prefix=".partial-")
        partial = Path(partial_name)
        try:
            with (
                os.fdopen(fd, "wb") as raw,
                gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=_GZIP_LEVEL, mtime=0) as gz,
            ):
                again = _Hashing(gz)  # type: ignore[arg-type]
                _write_tar(tree, entries, epoch=epoch, out=again)
            if f"sha256:{again.sha.hexdigest()}" != diff_id:
                raise RuntimeError(f"the tree under {tree} changed while its layer was written")
            os.replace(partial, cached)
        finally:
            partial.unlink(missing_ok=True)
    else:
        os.utime(cached)  # used now: kept by the cache's pruning
    digest = _file_sha256(cached)
    target = blobs / "sha256" / digest
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(cached, target)
    return Layer(
        digest=f"sha256:{digest}",
        size=target.stat().st_size,
        diff_id=diff_id,
        unpacked_size=hashed.size,
        created_by=created_by,
    )


def _file_sha256(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            sha.update(chunk)
    return sha.hexdigest()


def image_config(
    *,
    layers: Sequence[Layer],
    epoch: int,
    user: str,
    env: Sequence[str],
    entrypoint: Sequence[str],
    labels: Mapping[str, str],
) -> dict[str, Any]:
    """The OCI image configuration (linux/amd64) of ``layers``."""
    created = iso_time(epoch)
    return {
        "architecture": "amd64",
        "os": "linux",
        "created": created,
        "config": {
            "User": user,
            "Env": list(env),
            "Entrypoint": list(entrypoint),
            "WorkingDir": "/",
            "Labels": dict(labels),
        },
        "rootfs": {"type": "layers", "diff_ids": [layer.diff_id for layer in layers]},
        "history": [{"created": created, "created_by": layer.created_by} for layer in layers],
    }


def _put_blob(blobs: Path, data: bytes) -> tuple[str, int]:
    digest = hashlib.sha256(data).hexdigest()
    path = blobs / "sha256" / digest
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return f"sha256:{digest}", len(data)


def write_layout(
    layout: Path,
    *,
    layers: Sequence[Layer],
    config: Mapping[str, Any],
    ref: str,
    annotations: Mapping[str, str],
) -> str:
    """Finish an OCI image layout whose ``blobs`` hold ``layers``: config, manifest, index.json and
    oci-layout. Returns the manifest's digest, the image's digest."""
    blobs = layout / "blobs"
    config_digest, config_size = _put_blob(blobs, canonical_json(config))
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "config": {"mediaType": CONFIG_MEDIA_TYPE, "digest": config_digest, "size": config_size},
        "layers": [
            {"mediaType": LAYER_MEDIA_TYPE, "digest": layer.digest, "size": layer.size} for layer in layers
        ],
        "annotations": dict(annotations),
    }
    manifest_digest, manifest_size = _put_blob(blobs, canonical_json(manifest))
    index = {
        "schemaVersion": 2,
        "mediaType": INDEX_MEDIA_TYPE,
        "manifests": [
            {
                "mediaType": MANIFEST_MEDIA_TYPE,
                "digest": manifest_digest,
                "size": manifest_size,
                "annotations": {"org.opencontainers.image.ref.name": ref},
            }
        ],
    }
    (layout / "index.json").write_bytes(canonical_json(index))
    (layout / "oci-layout").write_bytes(canonical_json({"imageLayoutVersion": "1.0.0"}))
    return manifest_digest
