"""The Debian root of each image: made with debootstrap, then cut down to what the program runs on.

Why debootstrap: no base image can be pulled here, and Debian's mirror can be reached. One
``--variant=minbase`` bookworm root with the Python 3.11 interpreter, its standard library and the
CA certificates (the *stage*) is made and brought up to date from bookworm-updates and
bookworm-security once; each bridge's root is a copy of it with that bridge's Debian packages added
(the Slurm bridge: ``slurm-client`` for the ``scontrol`` fallback, ``slurm-wlm-jwt-plugin`` with
which it authenticates by the bridge's JWT, and ``libmunge2``, which the auth/munge plugin loads;
munge's daemon package, a dependency of ``slurm-client``, is purged again, and with it any key its
installation made), then cut down:

- packages that only install or configure software (apt and its libraries, the archive keyring,
  gpgv, e2fsprogs, adduser, debconf's perl) are purged with dpkg, so its status file stays the
  truth the SBOM is made from;
- apt's lists and caches, logs, manuals, info pages, translations and documentation other than the
  copyright files are deleted, as Debian's own slim images exclude them;
- what came from the build machine (resolv.conf, hosts) is deleted: a runtime provides both;
- every ``__pycache__`` is deleted and the standard library compiled again with
  ``--invalidation-mode unchecked-hash``: no source timestamp in any ``.pyc``, and a read-only root
  filesystem still imports from bytecode.

Both are cached outside the checkout (``<cache>/images/stage-<key>``, ``<cache>/images/root-<bridge>-
<key>``), keyed by what goes in them, built in a scratch folder and renamed into place; a warm build
reads them and runs no debootstrap and no apt. ``--no-cache`` builds them again (with whatever the
mirror serves by then: the SBOM names every version).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from bridge.sandbox.slurm_root import RootBuildError, remove_root, system_mounts

__all__ = [
    "BASE_PACKAGES",
    "MIRROR",
    "PURGED",
    "RELEASE",
    "SECURITY_MIRROR",
    "chroot_env",
    "ensure_root",
    "root_epoch",
    "run",
]

RELEASE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
SECURITY_MIRROR = "http://deb.debian.org/debian-security"
BASE_PACKAGES = ("python3-minimal", "libpython3.11-stdlib", "ca-certificates")
# Installers and configuration tools; nothing the program runs needs them.
PURGED = (
    "apt",
    "libapt-pkg6.0",
    "gpgv",
    "debian-archive-keyring",
    "e2fsprogs",
    "libext2fs2",
    "libss2",
    "logsave",
    "adduser",
    "perl-base",
    "libgnutls30",
    "libp11-kit0",
    "libtasn1-6",
    "libnettle8",
    "libhogweed6",
    "libidn2-0",
    "libunistring2",
    "libseccomp2",
    "libxxhash0",
)
# Bumped when how a stage or a root is made changes, so cached ones are made again.
_STAGE_RECIPE = "1"
_ROOT_RECIPE = "4"
_SLIM_GLOBS = (
    "var/cache/apt/*",
    "var/lib/apt/lists/*",
    "var/cache/debconf/*-old",
    "var/lib/dpkg/*-old",
    "var/cache/ldconfig/aux-cache",
    "var/log/*",
    "usr/share/man/*",
    "usr/share/info/*",
    "usr/share/locale/*",
    "usr/share/lintian/*",
    "usr/share/bash-completion/*",
    "usr/share/common-licenses/*",  # the copyright files say the same, per package
    "debootstrap",
    "tmp/*",
    "run/*",
    "etc/resolv.conf",
    "etc/hosts",
    "etc/hostname",
    "etc/machine-id",
    "usr/sbin/policy-rc.d",
)


def chroot_env() -> dict[str, str]:
    return {"DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}


def run(argv: Sequence[str], *, what: str, env: dict[str, str] | None = None) -> str:
    """Run ``argv`` (never a shell); its output, or a :class:`RootBuildError` with its last lines."""
    completed = subprocess.run(
        list(argv),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
        env=env if env is not None else {**os.environ},
    )
    if completed.returncode != 0:
        output = "\n".join((completed.stdout + completed.stderr).strip().splitlines()[-30:])
        raise RootBuildError(f"{what} failed (exit {completed.returncode}): {' '.join(argv)}\n{output}")
    return completed.stdout


def _key(*parts: str) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _cached(target: Path, build: Callable[[Path], None], *, rebuild: bool) -> Path:
    """``target`` if it exists (and ``rebuild`` is false); else ``build`` it in scratch, rename it in."""
    if target.exists() and not rebuild:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        build(scratch / "root")
        if target.exists():
            old = Path(tempfile.mkdtemp(prefix=f".old-{target.name}-", dir=target.parent))
            os.replace(target, old / "root")
            remove_root(old / "root")
            shutil.rmtree(old, ignore_errors=True)
        os.replace(scratch / "root", target)
        target.with_name(target.name + ".epoch").write_text(f"{int(time.time())}\n")
    finally:
        remove_root(scratch / "root")
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def _apt(root: Path, *args: str, what: str) -> None:
    run(
        ["chroot", str(root), "apt-get", "-q", "-y", "-o", "Dpkg::Use-Pty=0", *args],
        what=what,
        env=chroot_env(),
    )


def _make_stage(root: Path, *, cache: Path, mirror: str) -> None:
    debs = cache / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    run(
        [
            "debootstrap",
            "--variant=minbase",
            f"--include={','.join(BASE_PACKAGES)}",
            f"--cache-dir={debs}",
            RELEASE,
            str(root),
            mirror,
        ],
        what="debootstrap",
    )
    (root / "etc" / "apt" / "sources.list").write_text(
        f"deb {mirror} {RELEASE} main\n"
        f"deb {mirror} {RELEASE}-updates main\n"
        f"deb {SECURITY_MIRROR} {RELEASE}-security main\n"
    )
    policy = root / "usr" / "sbin" / "policy-rc.d"
    policy.write_text("#!/bin/sh\n# Never start daemons while installing.\nexit 101\n")
    policy.chmod(0o755)
    for name in ("hosts", "resolv.conf"):
        with contextlib.suppress(OSError):
            shutil.copyfile(Path("/etc") / name, root / "etc" / name)
    with system_mounts(root):
        _apt(root, "update", what="apt-get update in the stage")
        _apt(root, "upgrade", "--no-install-recommends", what="apt-get upgrade in the stage")
        _apt(root, "clean", what="apt-get clean in the stage")


def _installed(root: Path) -> set[str]:
    out = run(
        ["chroot", str(root), "dpkg-query", "-W", "-f", "${Package}\\n"], what="dpkg-query", env=chroot_env()
    )
    return set(out.split())


def _slim(root: Path) -> None:
    for pattern in _SLIM_GLOBS:
        for path in sorted(root.glob(pattern)):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
    doc = root / "usr" / "share" / "doc"
    for path in sorted(doc.rglob("*"), reverse=True):
        keep = path.name == "copyright" or (path.is_dir() and any(path.iterdir()))
        if not keep:
            if path.is_dir() and not path.is_symlink():
                path.rmdir()
            else:
                path.unlink()
    for cache_dir in sorted(root.rglob("__pycache__"), reverse=True):
        shutil.rmtree(cache_dir)


def compile_python(root: Path, *directories: str) -> None:
    """Byte-compile ``directories`` of ``root`` with its own interpreter, with no timestamps."""
    run(
        [
            "chroot",
            str(root),
            "python3",
            "-m",
            "compileall",
            "-q",
            "-f",
            "-j",
            "1",
            "--invalidation-mode",
            "unchecked-hash",
            "-x",
            r"/(test|tests|idle_test|lib2to3/tests)/",
            *directories,
        ],
        what="compiling Python bytecode",
        # Its own imports write no bytecode: a timestamped .pyc would make compileall skip that file.
        env={**chroot_env(), "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"},
    )


def _make_root(root: Path, *, stage: Path, packages: Sequence[str], purge: Sequence[str]) -> None:
    run(["cp", "-a", f"{stage}/.", str(root)], what="copying the stage")
    with system_mounts(root):
        if packages:
            _apt(
                root, "install", "--no-install-recommends", *packages, what=f"installing {' '.join(packages)}"
            )
        # The bridge's own purges first: their maintainer scripts may still need the installers.
        for names in (purge, PURGED):
            present = _installed(root)
            removed = [name for name in names if name in present]
            if removed:
                run(
                    [
                        "chroot",
                        str(root),
                        "dpkg",
                        "--purge",
                        "--force-depends",
                        "--force-remove-essential",
                        *removed,
                    ],
                    what=f"purging {' '.join(removed)}",
                    env=chroot_env(),
                )
    for key in (root / "etc" / "munge").glob("*.key"):
        key.unlink()
    _slim(root)
    compile_python(root, "/usr/lib/python3.11", "/usr/lib/python3", "/usr/share/python3")


def root_epoch(root: Path) -> int:
    """When ``root`` was made (recorded beside it): the time of its layer's entries, so that a new
    commit of the project does not change the layer of a root that did not change."""
    record = root.with_name(root.name + ".epoch")
    if not record.exists():
        record.write_text(f"{int(time.time())}\n")
    return int(record.read_text())


def ensure_root(
    *, cache: Path, bridge: str, packages: Sequence[str], purge: Sequence[str], mirror: str, rebuild: bool
) -> Path:
    """The cut-down root of ``bridge`` (with ``packages`` added, ``purge`` removed), made when missing."""
    stage_key = _key(_STAGE_RECIPE, RELEASE, mirror, *BASE_PACKAGES)
    stage = _cached(
        cache / f"stage-{stage_key}",
        lambda root: _make_stage(root, cache=cache, mirror=mirror),
        rebuild=rebuild,
    )
    root_key = _key(_ROOT_RECIPE, stage_key, *packages, "--", *purge, *PURGED)
    root = _cached(
        cache / f"root-{bridge}-{root_key}",
        lambda root: _make_root(root, stage=stage, packages=packages, purge=purge),
        rebuild=rebuild,
    )
    # Older recipes' folders are never read again: the cache keeps one stage and one root per bridge.
    for stale in (*cache.glob("stage-*"), *cache.glob(f"root-{bridge}-*")):
        if stale not in (stage, root) and stale.is_dir():
            remove_root(stale)
            stale.with_name(stale.name + ".epoch").unlink(missing_ok=True)
    return root
