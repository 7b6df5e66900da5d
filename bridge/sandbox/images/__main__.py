"""``python3 -m bridge.sandbox.images``: build the images, or lock their Python wheels again.

    build [--bridge slurm|ray|all] [--no-cache] [--load] [--out DIR]
    lock

``build`` prints one JSON object per image (reference, digest, layout, SBOM, sizes, seconds);
``--load`` copies each into the local containers-storage with skopeo, under its reference.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from bridge.sandbox.build import MissingPrerequisiteError, cache_root
from bridge.sandbox.slurm_root import RootBuildError

from . import rootfs, wheels
from .build import IMAGES, build_image, source_date_epoch


def images_cache() -> Path:
    return cache_root() / "images"


def _check_prerequisites() -> None:
    if os.geteuid() != 0:
        raise MissingPrerequisiteError("building the images needs root (debootstrap, chroot)")
    for tool, package in (("debootstrap", "debootstrap"), ("chroot", "coreutils"), ("cp", "coreutils")):
        if shutil.which(tool) is None:
            raise MissingPrerequisiteError(f"'{tool}' is not installed: `apt-get install {package}`")


def _load(layout: str, reference: str) -> None:
    if shutil.which("skopeo") is None:
        raise MissingPrerequisiteError("'skopeo' is not installed: `apt-get install skopeo` (for --load)")
    tag = reference.rsplit(":", 1)[1]
    subprocess.run(
        ["skopeo", "copy", "--quiet", f"oci:{layout}:{tag}", f"containers-storage:{reference}"], check=True
    )


def _prune_gzip_cache(folder: Path, *, keep: set[str], max_age: float = 7 * 86400) -> None:
    """Drop compressed layers this build did not use and no build used for ``max_age`` seconds
    (every commit adds a project layer; other checkouts may still use recent ones)."""
    now = time.time()
    for path in folder.glob("*.tar.gz"):
        if path.name.removesuffix(".tar.gz") not in keep and now - path.stat().st_mtime > max_age:
            path.unlink(missing_ok=True)


def build(options: argparse.Namespace) -> int:
    _check_prerequisites()
    started = time.monotonic()
    cache = images_cache()
    cache.mkdir(parents=True, exist_ok=True)
    epoch = source_date_epoch()
    wheelhouse = wheels.ensure_wheelhouse(cache / "wheelhouse")
    with_project = cache / "work" / "project-wheel"
    shutil.rmtree(with_project, ignore_errors=True)
    project_wheel = wheels.build_project_wheel(cache=cache, wheels=wheelhouse, out=with_project, epoch=epoch)
    out = Path(options.out) if options.out else cache / "out"
    names = list(IMAGES) if options.bridge == "all" else [options.bridge]
    used: set[str] = set()
    for name in names:
        built = build_image(
            IMAGES[name],
            cache=cache,
            out=out,
            wheelhouse=wheelhouse,
            project_wheel=project_wheel,
            epoch=epoch,
            mirror=options.mirror,
            rebuild=options.no_cache,
        )
        used.update(layer["diff_id"].removeprefix("sha256:") for layer in built.layers)
        if options.load:
            _load(built.layout, built.reference)
        summary = {k: v for k, v in asdict(built).items() if k != "layers"}
        summary["unpacked_mb"] = round(built.unpacked_bytes / 1e6, 1)
        summary["compressed_mb"] = round(built.compressed_bytes / 1e6, 1)
        print(json.dumps(summary, sort_keys=True), flush=True)
    shutil.rmtree(with_project, ignore_errors=True)
    _prune_gzip_cache(cache / "gzip", keep=used)
    print(f"images: built {', '.join(names)} in {time.monotonic() - started:.1f}s", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m bridge.sandbox.images", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    build_parser = sub.add_parser("build", help="build the images (OCI layouts and SBOMs)")
    build_parser.add_argument("--bridge", choices=[*IMAGES, "all"], default="all")
    build_parser.add_argument("--no-cache", action="store_true", help="make the Debian roots again")
    build_parser.add_argument("--load", action="store_true", help="copy into containers-storage (skopeo)")
    build_parser.add_argument("--out", help="where the images go (default: <cache>/images/out)")
    build_parser.add_argument("--mirror", default=rootfs.MIRROR, help="the Debian mirror")
    sub.add_parser("lock", help="write requirements.lock and build-tools.lock again (needs PyPI)")
    options = parser.parse_args(argv)
    try:
        if options.command == "lock":
            for path in wheels.lock():
                print(path)
            return 0
        return build(options)
    except (MissingPrerequisiteError, RootBuildError) as error:
        print(f"images: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
