"""The wheelhouse the images install from: pinned, hash-checked wheels, and the project's own wheel.

Why lock files with hashes: an image must hold the same Python distributions on every build, and a
wheel is checked against the hash the lock names before it is installed. ``requirements.lock`` pins
the program's run-time dependencies (``[project].dependencies`` of pyproject.toml, resolved for the
images' interpreter: CPython 3.11 on glibc 2.36, x86_64, wheels only); ``build-tools.lock`` pins
hatchling (which builds the project's wheel) and pip (run from its wheel inside the image's root to
install, never installed into it). ``python3 -m bridge.sandbox.images lock`` writes both again from
PyPI (``pip install --dry-run --report``): the only step that resolves anything.

The wheels are downloaded into ``<cache>/images/wheelhouse`` once; a build whose locked hashes are
all there already reaches no index. The project's wheel is built by the pinned hatchling with
``SOURCE_DATE_EPOCH`` set, in a tools virtualenv made from the wheelhouse, so it too is the same on
every build of the same sources.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bridge.sandbox.build import REPO_ROOT
from bridge.sandbox.slurm_root import RootBuildError

__all__ = [
    "BUILD_TOOLS",
    "BUILD_TOOLS_LOCK",
    "REQUIREMENTS_LOCK",
    "Pin",
    "build_project_wheel",
    "ensure_wheelhouse",
    "lock",
    "parse_lock",
    "project_dependencies",
    "render_lock",
]

HERE = Path(__file__).resolve().parent
REQUIREMENTS_LOCK = HERE / "requirements.lock"
BUILD_TOOLS_LOCK = HERE / "build-tools.lock"
BUILD_TOOLS = ("hatchling>=1.25", "pip>=24")
PYTHON_VERSION = "3.11"
# bookworm's glibc is 2.36: every manylinux tag up to it is installable.
PLATFORMS = (
    *(f"manylinux_2_{minor}_x86_64" for minor in range(36, 16, -1)),
    "manylinux2014_x86_64",
    "manylinux2010_x86_64",
    "manylinux1_x86_64",
)
_PIN = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>\S+)\s+--hash=sha256:(?P<sha>[0-9a-f]{64})$"
)


@dataclass(frozen=True, order=True)
class Pin:
    name: str
    version: str
    sha256: str


def project_dependencies(pyproject: Path = REPO_ROOT / "pyproject.toml") -> list[str]:
    with pyproject.open("rb") as handle:
        return list(tomllib.load(handle)["project"]["dependencies"])


def project_version(pyproject: Path = REPO_ROOT / "pyproject.toml") -> str:
    with pyproject.open("rb") as handle:
        return str(tomllib.load(handle)["project"]["version"])


def render_lock(pins: Iterable[Pin], *, header: str) -> str:
    lines = [f"# {line}".rstrip() for line in header.splitlines()]
    lines += [f"{p.name}=={p.version} --hash=sha256:{p.sha256}" for p in sorted(pins)]
    return "\n".join(lines) + "\n"


def parse_lock(text: str) -> list[Pin]:
    pins: list[Pin] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _PIN.match(line)
        if match is None:
            raise ValueError(f"not a pinned, hashed requirement: {line!r}")
        pins.append(Pin(match["name"].lower(), match["version"], match["sha"]))
    return pins


def _platform_args() -> list[str]:
    args = ["--only-binary=:all:", "--python-version", PYTHON_VERSION, "--implementation", "cp"]
    for platform in PLATFORMS:
        args += ["--platform", platform]
    return args


def _pip(args: Sequence[str], *, what: str) -> str:
    completed = subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )
    if completed.returncode != 0:
        tail = "\n".join((completed.stdout + completed.stderr).strip().splitlines()[-20:])
        raise RootBuildError(f"{what} failed (exit {completed.returncode})\n{tail}")
    return completed.stdout


def _resolve(requirements: Sequence[str], *, for_image: bool) -> list[Pin]:
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.json"
        _pip(
            [
                "install",
                "--dry-run",
                "--ignore-installed",
                "--quiet",
                "--report",
                str(report),
                "--target",
                str(Path(scratch) / "target"),
                *(_platform_args() if for_image else ["--only-binary=:all:"]),
                *requirements,
            ],
            what=f"resolving {' '.join(requirements)}",
        )
        installs = json.loads(report.read_text())["install"]
    pins: list[Pin] = []
    for item in installs:
        sha = item["download_info"]["archive_info"]["hashes"]["sha256"]
        pins.append(Pin(item["metadata"]["name"].lower(), item["metadata"]["version"], sha))
    return pins


def lock() -> tuple[Path, Path]:
    """Resolve and write both lock files (needs PyPI); returns their paths."""
    dependencies = project_dependencies()
    REQUIREMENTS_LOCK.write_text(
        render_lock(
            _resolve(dependencies, for_image=True),
            header=(
                "The images' run-time Python dependencies: pyproject.toml's [project].dependencies\n"
                f"resolved for CPython {PYTHON_VERSION}, manylinux x86_64 (glibc 2.36), wheels only.\n"
                "Written by `python3 -m bridge.sandbox.images lock`; do not edit by hand."
            ),
        )
    )
    BUILD_TOOLS_LOCK.write_text(
        render_lock(
            _resolve(BUILD_TOOLS, for_image=False),
            header=(
                "What builds the images' Python part: hatchling (the project's wheel) and pip (run\n"
                "from its wheel inside the image's root, never installed there).\n"
                "Written by `python3 -m bridge.sandbox.images lock`; do not edit by hand."
            ),
        )
    )
    return REQUIREMENTS_LOCK, BUILD_TOOLS_LOCK


def _sha256(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            sha.update(chunk)
    return sha.hexdigest()


def _wheels_by_hash(folder: Path) -> dict[str, Path]:
    return {_sha256(path): path for path in sorted(folder.glob("*.whl"))}


def ensure_wheelhouse(wheelhouse: Path) -> dict[str, Path]:
    """Every locked wheel in ``wheelhouse`` (downloading what is missing); ``{sha256: path}``."""
    wheelhouse.mkdir(parents=True, exist_ok=True)
    locks: Mapping[Path, bool] = {REQUIREMENTS_LOCK: True, BUILD_TOOLS_LOCK: False}
    found = _wheels_by_hash(wheelhouse)
    for lock_file, for_image in locks.items():
        pins = parse_lock(lock_file.read_text())
        if all(pin.sha256 in found for pin in pins):
            continue
        _pip(
            [
                "download",
                "--no-deps",
                "--require-hashes",
                "--quiet",
                "--dest",
                str(wheelhouse),
                *(_platform_args() if for_image else ["--only-binary=:all:"]),
                "-r",
                str(lock_file),
            ],
            what=f"downloading the wheels of {lock_file.name}",
        )
        found = _wheels_by_hash(wheelhouse)
        missing = [f"{p.name}=={p.version}" for p in pins if p.sha256 not in found]
        if missing:
            raise RootBuildError(f"the wheelhouse lacks {', '.join(missing)} after downloading")
    return found


def locked_wheels(lock_file: Path, wheels: Mapping[str, Path]) -> list[Path]:
    return [wheels[pin.sha256] for pin in parse_lock(lock_file.read_text())]


def _tools_python(cache: Path, wheels: Mapping[str, Path]) -> Path:
    key = hashlib.sha256(BUILD_TOOLS_LOCK.read_bytes()).hexdigest()[:16]
    venv = cache / f"tools-{key}"
    python = venv / "bin" / "python"
    if python.exists():
        return python
    scratch = Path(tempfile.mkdtemp(prefix=".tools-", dir=cache))
    try:
        subprocess.run([sys.executable, "-m", "venv", str(scratch / "venv")], check=True, capture_output=True)
        subprocess.run(
            [
                str(scratch / "venv" / "bin" / "python"),
                "-m",
                "pip",
                "install",
                "--quiet",
                "--no-index",
                "--require-hashes",
                "--disable-pip-version-check",
                "--find-links",
                str(next(iter(wheels.values())).parent),
                "-r",
                str(BUILD_TOOLS_LOCK),
            ],
            check=True,
            capture_output=True,
        )
        # Only bin/python is used, which finds its site-packages wherever the folder is.
        shutil.rmtree(venv, ignore_errors=True)
        os.replace(scratch / "venv", venv)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return python


def build_project_wheel(*, cache: Path, wheels: Mapping[str, Path], out: Path, epoch: int) -> Path:
    """The project's wheel, built by the pinned hatchling from this checkout into ``out``."""
    python = _tools_python(cache, wheels)
    out.mkdir(parents=True, exist_ok=True)
    completed = subprocess.run(
        [
            str(python),
            "-c",
            "import sys; from hatchling.build import build_wheel; print(build_wheel(sys.argv[1]))",
            str(out),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "SOURCE_DATE_EPOCH": str(epoch), "PYTHONDONTWRITEBYTECODE": "1"},
    )
    if completed.returncode != 0:
        raise RootBuildError(f"building the project's wheel failed\n{completed.stderr[-2000:]}")
    return out / completed.stdout.strip().splitlines()[-1]
