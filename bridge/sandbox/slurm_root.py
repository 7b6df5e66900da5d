"""Build, cache and restore the Debian trixie root that runs Slurm 24.11 next to the host's 22.05.

Why a root filesystem at all: the bridge must speak both REST generations (v0.0.38 of Slurm 22.05,
v0.0.40 .. v0.0.42 of Slurm 24.11), and only 22.05 is packaged for the host (bookworm). Debian trixie
packages 24.11, reachable through the same Debian mirror, so a ``debootstrap --variant=minbase`` root
with trixie's Slurm packages runs the newer daemons under ``chroot`` on the same kernel and network.

Why a cached tarball: building the root takes about half a minute and needs the network; restoring a
zstd tarball takes about a second. The tarball is keyed by the Slurm version in ``versions.toml``
(``<cache>/slurm-root/trixie-<version>.tar.zst``), so changing the pinned version builds a new one.
Each stack restores a fresh copy into its own temporary directory, so no run sees another's state.

Standard library only: ``scripts/dev setup`` runs ``python3 -m bridge.sandbox.slurm_root`` before the
project's virtualenv exists. It prints the tarball's path (building it when missing).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from bridge.sandbox.build import MissingPrerequisiteError, cache_root, load_versions

MIRROR = "http://deb.debian.org/debian"
ROOT_PACKAGES = ("munge", "slurmctld", "slurmd", "slurmrestd", "slurm-client", "slurm-wlm-jwt-plugin")


class RootBuildError(RuntimeError):
    """Building or restoring the Slurm root failed; the message says which step and why."""


def _slurm_versions(versions: Mapping[str, Any] | None) -> Mapping[str, Any]:
    section = (versions or load_versions())["slurm"]
    assert isinstance(section, Mapping)
    return section


def tarball_path(*, versions: Mapping[str, Any] | None = None) -> Path:
    """Where the cached root for the pinned version lives (whether or not it exists yet)."""
    slurm = _slurm_versions(versions)
    return cache_root() / "slurm-root" / f"{slurm['root_release']}-{slurm['root_version']}.tar.zst"


def _require(tool: str, how: str) -> str:
    found = shutil.which(tool)
    if found is None:
        raise MissingPrerequisiteError(f"'{tool}' is not installed: {how}")
    return found


def _check_prerequisites() -> None:
    if os.geteuid() != 0:
        raise MissingPrerequisiteError("building the Slurm root needs root (debootstrap, chroot, mount)")
    _require("debootstrap", "install it with `apt-get install debootstrap` (it builds the trixie root)")
    _require("zstd", "install it with `apt-get install zstd` (the root is cached as a .tar.zst)")
    _require("tar", "install GNU tar (`apt-get install tar`)")


def _run(argv: Sequence[str], *, what: str, env: Mapping[str, str] | None = None) -> None:
    completed = subprocess.run(
        list(argv),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **(env or {})},
    )
    if completed.returncode != 0:
        output = "\n".join((completed.stdout + completed.stderr).strip().splitlines()[-30:])
        raise RootBuildError(f"{what} failed (exit {completed.returncode}): {' '.join(argv)}\n{output}")


def mounts_under(root: Path) -> list[Path]:
    """Mount points at or below ``root`` (deepest first), read from the kernel's mount table."""
    prefix = str(root.resolve())
    found: list[Path] = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) < 2:
            continue
        point = fields[1].replace("\\040", " ")
        if point == prefix or point.startswith(prefix + "/"):
            found.append(Path(point))
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def unmount_all(root: Path) -> None:
    """Unmount everything below ``root``; lazily when busy. Raises if anything is still mounted."""
    for point in mounts_under(root):
        if subprocess.run(["umount", str(point)], capture_output=True, check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(point)], capture_output=True, check=False)
    left = mounts_under(root)
    if left:
        raise RootBuildError(f"could not unmount {', '.join(map(str, left))}")


def mount_system(root: Path) -> None:
    """Mount what daemons and apt need in a chroot: proc, sysfs, /dev, /dev/pts and a private /run."""
    steps: list[tuple[list[str], Path]] = [
        (["mount", "-t", "proc", "proc"], root / "proc"),
        (["mount", "-t", "sysfs", "sysfs"], root / "sys"),
        (["mount", "--bind", "/dev"], root / "dev"),
        (["mount", "--bind", "/dev/pts"], root / "dev" / "pts"),
        (["mount", "-t", "tmpfs", "-o", "mode=755", "tmpfs"], root / "run"),
    ]
    try:
        for argv, target in steps:
            target.mkdir(parents=True, exist_ok=True)
            _run([*argv, str(target)], what=f"mounting {target}")
            # A private mount: a later unmount in the chroot never propagates to the host's /dev.
            _run(["mount", "--make-private", str(target)], what=f"making {target} private")
    except RootBuildError:
        unmount_all(root)
        raise


@contextlib.contextmanager
def system_mounts(root: Path) -> Iterator[None]:
    mount_system(root)
    try:
        yield
    finally:
        unmount_all(root)


def remove_root(root: Path) -> None:
    """Delete a root directory, but never while something (a bind of /dev!) is mounted inside it."""
    if not root.exists():
        return
    unmount_all(root)
    shutil.rmtree(root)


def build_root(root: Path, *, release: str, mirror: str = MIRROR, log: Path | None = None) -> None:
    """Make ``root`` a minimal ``release`` system with the Slurm packages installed and apt cleaned."""
    _check_prerequisites()
    started = time.monotonic()
    _run(["debootstrap", "--variant=minbase", release, str(root), mirror], what="debootstrap")
    policy = root / "usr" / "sbin" / "policy-rc.d"
    policy.write_text(
        "#!/bin/sh\n# Never start daemons while installing: the stack starts its own.\nexit 101\n"
    )
    policy.chmod(0o755)
    for name in ("hosts", "resolv.conf"):
        with contextlib.suppress(OSError):
            shutil.copyfile(Path("/etc") / name, root / "etc" / name)
    env = {"DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    with system_mounts(root):
        _run(["chroot", str(root), "apt-get", "update", "-q"], what="apt-get update in the root", env=env)
        _run(
            [
                "chroot",
                str(root),
                "apt-get",
                "install",
                "-y",
                "-q",
                "--no-install-recommends",
                *ROOT_PACKAGES,
            ],
            what="installing Slurm in the root",
            env=env,
        )
        _run(["chroot", str(root), "apt-get", "clean"], what="apt-get clean in the root", env=env)
    # Package lists are stale by the next run and a third of the size: the root never runs apt again.
    for entry in (root / "var" / "lib" / "apt" / "lists").glob("*"):
        if entry.is_file() and entry.name != "lock":
            entry.unlink()
    if log is not None:
        log.write_text(f"built {release} root in {time.monotonic() - started:.1f}s\n")


def ensure_tarball(*, versions: Mapping[str, Any] | None = None, mirror: str = MIRROR) -> Path:
    """Return the cached root tarball for the pinned version, building it first when missing."""
    target = tarball_path(versions=versions)
    if target.exists():
        return target
    _check_prerequisites()
    slurm = _slurm_versions(versions)
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="build-", dir=target.parent))
    try:
        root = scratch / "root"
        build_root(root, release=str(slurm["root_release"]), mirror=mirror)
        partial = scratch / target.name
        _run(
            ["tar", "--zstd", "--numeric-owner", "--xattrs", "-cpf", str(partial), "-C", str(root), "."],
            what="packing the root",
        )
        os.replace(partial, target)  # atomic: a concurrent reader sees no tarball or a whole one
    finally:
        remove_root(scratch / "root")
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def restore(root: Path, *, versions: Mapping[str, Any] | None = None) -> Path:
    """Unpack the cached root (building it when missing) into ``root``, which must be empty or absent."""
    tarball = ensure_tarball(versions=versions)
    root.mkdir(parents=True, exist_ok=True)
    if any(root.iterdir()):
        raise RootBuildError(f"{root} is not empty; restore needs a fresh directory")
    _run(
        ["tar", "--zstd", "--numeric-owner", "--xattrs", "-xpf", str(tarball), "-C", str(root)],
        what=f"restoring {tarball}",
    )
    return root


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m bridge.sandbox.slurm_root",
        description="Build (when missing) the cached Debian trixie root with Slurm 24.11; print its path.",
    )
    parser.add_argument("--mirror", default=MIRROR, help="Debian mirror for debootstrap and apt")
    options = parser.parse_args(argv)
    try:
        print(ensure_tarball(mirror=options.mirror))
    except (MissingPrerequisiteError, RootBuildError) as error:
        print(f"slurm_root: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
