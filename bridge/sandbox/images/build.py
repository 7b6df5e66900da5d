"""One image per bridge: its Debian root, a virtualenv of the locked wheels and the project's, OCI.

What an image is made of, in three layers:

1. the bridge's cut-down Debian root (:mod:`.rootfs`), taken from the cache as it is;
2. ``/opt/k8s-bridge``: a virtualenv made in a hard-linked copy of that root with ``python3 -m venv
   --without-pip``, into which pip (run from its locked wheel, never installed) installs the locked
   wheels with ``--no-index --require-hashes``; compiled with ``--invalidation-mode unchecked-hash``;
3. the project's wheel installed into it (what pip added, compiled the same way). Its console
   script is the entrypoint: ``k8s-bridge`` or ``ray-bridge`` (pyproject.toml's ``[project.scripts]``).

The first two change only with the root and the lock, so their entries take the root's time
(:func:`.rootfs.root_epoch`) and the third alone ``SOURCE_DATE_EPOCH`` (by default the last
commit's time): a new commit gives a new small top layer and the same two below it. An explicit
``SOURCE_DATE_EPOCH`` is used for all three.

Run as user and group 65534 (nobody), ``PATH`` starting with the virtualenv's ``bin``. The layout,
the SBOM (:mod:`.sbom`) and ``image.json`` (digest, sizes) land in ``<out>/<image>/``; every layer
is written again from its tree on every build (:mod:`.oci`), so a second build's digest is a real
check of reproducibility.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bridge.sandbox.build import REPO_ROOT

from . import oci, rootfs, sbom, wheels

__all__ = ["IMAGES", "BuiltImage", "ImageSpec", "build_image", "source_date_epoch"]

VENV = "/opt/k8s-bridge"
SITE_PACKAGES = f"{VENV}/lib/python3.11/site-packages"
INCOMING = "/tmp/wheels"  # noqa: S108 (inside the image's root, a folder of the build's own)
USER = "65534:65534"
# A runtime mounts its own over these: their contents in a root are never seen.
_RUNTIME_MOUNTS = ("dev", "proc", "sys")
_IMAGE_PATH = f"{VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True, kw_only=True)
class ImageSpec:
    """What differs between the two images."""

    bridge: str
    name: str
    program: str
    description: str
    packages: tuple[str, ...] = ()
    purge: tuple[str, ...] = ()


IMAGES: Mapping[str, ImageSpec] = {
    "slurm": ImageSpec(
        bridge="slurm",
        name="k8s-bridge",
        program="k8s-bridge",
        description="The Slurm bridge of k8s-bridge: Kueue admits held Slurm jobs as JobSets of slurmd pods",
        packages=("slurm-client", "slurm-wlm-jwt-plugin", "libmunge2"),
        purge=("munge",),
    ),
    "ray": ImageSpec(
        bridge="ray",
        name="ray-bridge",
        program="ray-bridge",
        description="The Ray bridge of k8s-bridge: Kueue admits RayJobs of a shared RayCluster",
    ),
}


@dataclass(frozen=True)
class BuiltImage:
    name: str
    reference: str
    digest: str
    layout: str
    sbom: str
    unpacked_bytes: int
    compressed_bytes: int
    seconds: float
    layers: list[dict[str, Any]] = field(default_factory=list)
    debian_packages: int = 0
    python_packages: int = 0


def source_date_epoch() -> int:
    """``SOURCE_DATE_EPOCH``, else the checkout's last commit time, else 0."""
    configured = os.environ.get("SOURCE_DATE_EPOCH")
    if configured:
        return int(configured)
    completed = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "log", "-1", "--format=%ct"],
        capture_output=True,
        text=True,
        check=False,
    )
    text = completed.stdout.strip()
    return int(text) if completed.returncode == 0 and text.isdigit() else 0


def _chroot(tree: Path, argv: Sequence[str], *, what: str) -> None:
    env = {**rootfs.chroot_env(), "PYTHONDONTWRITEBYTECODE": "1", "PIP_NO_CACHE_DIR": "1"}
    rootfs.run(["chroot", str(tree), *argv], what=what, env=env)


def _pip_argv(pip_wheel: Path) -> list[str]:
    return [
        f"{VENV}/bin/python", f"{INCOMING}/{pip_wheel.name}/pip", "install", "--no-index",
        "--find-links", INCOMING, "--no-compile", "--no-deps", "--disable-pip-version-check", "--quiet",
    ]  # fmt: skip


def _install_dependencies(
    tree: Path, *, requirement_wheels: Sequence[Path], pip_wheel: Path, project_wheel: Path
) -> None:
    """The virtualenv with the locked wheels, compiled; the wheels left in /tmp/wheels for the next step."""
    incoming = tree / "tmp" / "wheels"
    incoming.mkdir(parents=True)
    for wheel in (*requirement_wheels, pip_wheel, project_wheel):
        shutil.copyfile(wheel, incoming / wheel.name)
    shutil.copyfile(wheels.REQUIREMENTS_LOCK, incoming / "requirements.lock")
    _chroot(tree, ["python3", "-m", "venv", "--without-pip", VENV], what="making the virtualenv")
    argv = [*_pip_argv(pip_wheel), "--require-hashes", "-r", f"{INCOMING}/requirements.lock"]
    _chroot(tree, argv, what="installing the locked wheels")
    rootfs.compile_python(tree, VENV)


def _install_project(tree: Path, *, pip_wheel: Path) -> None:
    """The project's wheel into the virtualenv; only its own new folders compiled."""
    site_packages = tree / SITE_PACKAGES.lstrip("/")
    before = set(os.listdir(site_packages))
    version = wheels.project_version()
    _chroot(tree, [*_pip_argv(pip_wheel), f"k8s-bridge=={version}"], what="installing the project's wheel")
    added = sorted(set(os.listdir(site_packages)) - before)
    packages = [f"{SITE_PACKAGES}/{name}" for name in added if (site_packages / name).is_dir()]
    rootfs.compile_python(tree, *packages)
    shutil.rmtree(tree / "tmp" / "wheels")


def _added_entries(entries: Sequence[str], before: set[str]) -> list[str]:
    """``entries`` not in ``before``, with the folders above each (in the same sorted order)."""
    wanted: set[str] = set()
    for entry in entries:
        if entry not in before:
            parts = entry.split("/")
            wanted.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))
    return [entry for entry in entries if entry in wanted]


def _labels(spec: ImageSpec, *, version: str, epoch: int, slurm: str | None) -> dict[str, str]:
    labels = {
        "org.opencontainers.image.title": spec.name,
        "org.opencontainers.image.description": spec.description,
        "org.opencontainers.image.version": version,
        "org.opencontainers.image.licenses": "Apache-2.0",
        "org.opencontainers.image.created": oci.iso_time(epoch),
        "org.opencontainers.image.base.name": f"debian:{rootfs.RELEASE} (debootstrap minbase)",
    }
    if slurm:
        labels["io.k8s-bridge.slurm-client"] = slurm
    return labels


def build_image(
    spec: ImageSpec,
    *,
    cache: Path,
    out: Path,
    wheelhouse: Mapping[str, Path],
    project_wheel: Path,
    epoch: int,
    mirror: str = rootfs.MIRROR,
    rebuild: bool = False,
) -> BuiltImage:
    """Build ``spec``'s image into ``out/<name>/`` (replacing what was there); see the module docstring."""
    started = time.monotonic()
    root = rootfs.ensure_root(
        cache=cache,
        bridge=spec.bridge,
        packages=spec.packages,
        purge=spec.purge,
        mirror=mirror,
        rebuild=rebuild,
    )
    version = wheels.project_version()
    reference = f"localhost/{spec.name}:{version}"
    work = cache / "work"
    work.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f"{spec.name}-", dir=work))
    try:
        tree = scratch / "tree"
        rootfs.run(["cp", "-al", str(root), str(tree)], what="linking the root")
        tools = wheels.locked_wheels(wheels.BUILD_TOOLS_LOCK, wheelhouse)
        pip_wheel = next(w for w in tools if w.name.startswith("pip-"))
        _install_dependencies(
            tree,
            requirement_wheels=wheels.locked_wheels(wheels.REQUIREMENTS_LOCK, wheelhouse),
            pip_wheel=pip_wheel,
            project_wheel=project_wheel,
        )
        dependency_entries = list(oci.tree_entries(tree, include=[VENV]))
        _install_project(tree, pip_wheel=pip_wheel)
        project_entries = _added_entries(
            list(oci.tree_entries(tree, include=[VENV])), set(dependency_entries)
        )
        target = scratch / spec.name
        layout = target / "oci"
        blobs = layout / "blobs"
        gzip_cache = cache / "gzip"
        # The root and the dependencies change with the root and the lock only: their entries take
        # the root's time, so a new commit recompresses only the project's own layer.
        base_epoch = epoch if os.environ.get("SOURCE_DATE_EPOCH") else rootfs.root_epoch(root)
        layers = [
            oci.write_layer(
                root,
                list(oci.tree_entries(root, exclude=_RUNTIME_MOUNTS)),
                epoch=base_epoch,
                blobs=blobs,
                gzip_cache=gzip_cache,
                created_by=f"debootstrap --variant=minbase {rootfs.RELEASE}; "
                f"apt-get install {' '.join((*rootfs.BASE_PACKAGES, *spec.packages))}; cut down",
            ),
            oci.write_layer(
                tree,
                dependency_entries,
                epoch=base_epoch,
                blobs=blobs,
                gzip_cache=gzip_cache,
                created_by=f"python3 -m venv {VENV}; "
                "pip install --no-index --require-hashes -r requirements.lock",
            ),
            oci.write_layer(
                tree,
                project_entries,
                epoch=epoch,
                blobs=blobs,
                gzip_cache=gzip_cache,
                created_by=f"pip install --no-index k8s-bridge=={version}",
            ),
        ]
        debs = sbom.dpkg_packages((root / "var" / "lib" / "dpkg" / "status").read_text())
        slurm = next((p.version for p in debs if p.name == "slurm-client"), None)
        config = oci.image_config(
            layers=layers,
            epoch=epoch,
            user=USER,
            env=[f"PATH={_IMAGE_PATH}", "LANG=C.UTF-8", "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1"],
            entrypoint=[f"{VENV}/bin/{spec.program}"],
            labels=_labels(spec, version=version, epoch=epoch, slurm=slurm),
        )
        digest = oci.write_layout(
            layout,
            layers=layers,
            config=config,
            ref=version,
            annotations={
                "org.opencontainers.image.created": oci.iso_time(epoch),
                "org.opencontainers.image.version": version,
            },
        )
        site_packages = tree / SITE_PACKAGES.lstrip("/")
        pys = sbom.read_python_packages(site_packages)
        document = sbom.spdx_document(
            name=spec.name, reference=reference, digest=digest, epoch=epoch, packages=[*debs, *pys]
        )
        (target / "sbom.spdx.json").write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
        final = out / spec.name
        built = BuiltImage(
            name=spec.name,
            reference=reference,
            digest=digest,
            layout=str(final / "oci"),
            sbom=str(final / "sbom.spdx.json"),
            unpacked_bytes=sum(layer.unpacked_size for layer in layers),
            compressed_bytes=sum(layer.size for layer in layers),
            seconds=round(time.monotonic() - started, 1),
            layers=[asdict(layer) for layer in layers],
            debian_packages=len(debs),
            python_packages=len(pys),
        )
        (target / "image.json").write_text(json.dumps(asdict(built), indent=2, sort_keys=True) + "\n")
        out.mkdir(parents=True, exist_ok=True)
        if final.exists():
            old = scratch / "old"
            os.replace(final, old)
        os.replace(target, final)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return built
