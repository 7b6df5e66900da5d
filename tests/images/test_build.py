"""The images as built: reproducible, non-root, only run-time contents, an SBOM that tells the truth."""

from __future__ import annotations

import gzip
import json
import re
import stat
import tarfile
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bridge.sandbox.images.build import VENV
from bridge.sandbox.images.wheels import REQUIREMENTS_LOCK, parse_lock, project_version
from tests.fixtures.images import Built, blob, build_images

NAMES = ["k8s-bridge", "ray-bridge"]


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_a_second_build_gives_the_same_digests_and_bytes(
    built_images: dict[str, Built], tmp_path: Path
) -> None:
    again = build_images(tmp_path / "second")
    for name, first in built_images.items():
        second = again[name]
        assert second.layout != first.layout
        assert second.digest == first.digest, f"{name}: the digest changed between two builds"
        for path in sorted((first.layout / "blobs" / "sha256").iterdir()):
            assert (second.layout / "blobs" / "sha256" / path.name).read_bytes() == path.read_bytes()
        assert second.sbom.read_bytes() == first.sbom.read_bytes()


@pytest.mark.parametrize("name", NAMES)
def test_the_layers_have_fixed_times_no_owner_names_and_no_set_id_bits(
    built_images: dict[str, Built], name: str
) -> None:
    image = built_images[name]
    layers = image.manifest()["layers"]
    epochs = []
    for layer in layers:
        times = set()
        with (
            gzip.open(blob(image.layout, layer["digest"])) as raw,
            tarfile.open(fileobj=raw, mode="r|") as tar,
        ):
            for info in tar:
                times.add(info.mtime)
                assert info.uname == "", info.name
                assert info.gname == "", info.name
                if info.isfile():
                    assert not info.mode & (stat.S_ISUID | stat.S_ISGID), f"{info.name} is set-user/group-ID"
        assert len(times) == 1, f"{layer['digest']}: more than one mtime"
        epochs.append(times.pop())
    # The root and the dependencies share the root's time; the project's layer is the image's time.
    assert len(layers) == 3
    assert epochs[0] == epochs[1]
    created = datetime.strptime(image.config()["created"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert epochs[2] == int(created.timestamp())


@pytest.mark.parametrize("name", NAMES)
def test_the_image_runs_its_console_script_as_nobody(built_images: dict[str, Built], name: str) -> None:
    config = built_images[name].config()["config"]
    assert config["User"] == "65534:65534"
    assert config["Entrypoint"] == [f"{VENV}/bin/{name}"]
    assert config["Env"][0].startswith(f"PATH={VENV}/bin:")
    members = built_images[name].members()
    script = members[f"{VENV.lstrip('/')}/bin/{name}"]
    assert script.isfile()
    assert script.mode & 0o111


@pytest.mark.parametrize("name", NAMES)
def test_only_run_time_contents(built_images: dict[str, Built], name: str) -> None:
    members = built_images[name].members()
    venv = VENV.lstrip("/")
    for absent in (
        "usr/bin/apt",
        "usr/bin/apt-get",
        "usr/bin/perl",
        "usr/sbin/munged",
        "etc/munge/munge.key",
        f"{venv}/bin/pip",
        "usr/share/man/man1/ls.1.gz",
    ):
        assert absent not in members, f"{absent} is in {name}"
    assert not [n for n in members if n.startswith("var/lib/apt/lists/") and n.endswith("_Packages")]
    assert not [n for n in members if "/site-packages/pip/" in n]
    assert not [
        n for n in members if n.startswith("dev/") and not members[n].isdir() and not members[n].issym()
    ]
    assert "usr/bin/python3.11" in members
    assert "usr/share/doc/libc6/copyright" in members
    # Every .pyc is hash-based and unchecked: flags 0b01 in the header's second word, no timestamp.
    pycs = [n for n in members if n.endswith(".pyc")]
    assert len(pycs) > 500
    layout = built_images[name].layout
    for layer in built_images[name].manifest()["layers"]:
        with gzip.open(blob(layout, layer["digest"])) as raw, tarfile.open(fileobj=raw, mode="r|") as tar:
            for info in tar:
                if info.name.endswith(".pyc"):
                    handle = tar.extractfile(info)
                    assert handle is not None
                    header = handle.read(8)
                    assert int.from_bytes(header[4:8], "little") == 0b01, info.name
    slurm = [n for n in members if n == "usr/bin/scontrol"]
    assert bool(slurm) == (name == "k8s-bridge")
    munge_library = [n for n in members if re.fullmatch(r"usr/lib/x86_64-linux-gnu/libmunge\.so\.2.*", n)]
    assert bool(munge_library) == (name == "k8s-bridge")


@pytest.mark.parametrize("name", NAMES)
def test_the_sbom_lists_what_is_installed(built_images: dict[str, Built], name: str) -> None:
    image = built_images[name]
    document = json.loads(image.sbom.read_text())
    assert document["spdxVersion"] == "SPDX-2.3"
    packages = document["packages"]
    root = packages[0]
    assert root["versionInfo"] == image.digest
    purls = {ref["referenceLocator"] for p in packages[1:] for ref in p["externalRefs"]}
    pypi = {
        p.split("@")[0].removeprefix("pkg:pypi/"): p.split("@")[1] for p in purls if p.startswith("pkg:pypi/")
    }
    expected = {_normalized(pin.name): pin.version for pin in parse_lock(REQUIREMENTS_LOCK.read_text())}
    expected["k8s-bridge"] = project_version()
    assert pypi == expected
    debs = {p.split("@")[0].removeprefix("pkg:deb/debian/") for p in purls if p.startswith("pkg:deb/")}
    assert {"python3.11-minimal", "libpython3.11-stdlib", "libc6", "ca-certificates"} <= debs
    assert "apt" not in debs
    assert "munge" not in debs
    assert ({"slurm-client", "libmunge2"} <= debs) == (name == "k8s-bridge")
    # Every Debian package named is really installed in the image: its dpkg list file is there.
    members = image.members()
    for deb in debs:
        assert any(
            n.startswith(f"var/lib/dpkg/info/{deb}.") or n.startswith(f"var/lib/dpkg/info/{deb}:")
            for n in members
        ), deb
    contained = {
        r["relatedSpdxElement"] for r in document["relationships"] if r["relationshipType"] == "CONTAINS"
    }
    assert contained == {p["SPDXID"] for p in packages[1:]}
