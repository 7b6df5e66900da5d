"""The image build's pure parts: layer streams, SBOM parsing, lock files."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import stat
import tarfile
from pathlib import Path

import pytest
import yaml

from bridge.sandbox.build import REPO_ROOT
from bridge.sandbox.images.build import IMAGES
from bridge.sandbox.images.oci import image_config, tree_entries, write_layer, write_layout
from bridge.sandbox.images.sbom import dpkg_packages, python_packages, spdx_document
from bridge.sandbox.images.wheels import (
    BUILD_TOOLS_LOCK,
    REQUIREMENTS_LOCK,
    Pin,
    parse_lock,
    project_dependencies,
    project_version,
    render_lock,
)


def _tree(root: Path) -> Path:
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "opt" / "venv").mkdir(parents=True)
    (root / "usr" / "bin" / "tool").write_text("#!/bin/sh\n")
    (root / "usr" / "bin" / "tool").chmod(0o4755)
    os.link(root / "usr" / "bin" / "tool", root / "usr" / "bin" / "tool2")
    (root / "usr" / "bin" / "link").symlink_to("tool")
    (root / "opt" / "venv" / "a.py").write_text("x = 1\n")
    (root / "dev").mkdir()
    (root / "dev" / "junk").write_text("left out\n")
    return root


def _members(blob: Path) -> list[tarfile.TarInfo]:
    with gzip.open(blob) as raw, tarfile.open(fileobj=io.BytesIO(raw.read())) as tar:
        return tar.getmembers()


def test_tree_entries_are_sorted_depth_first_and_honour_include_and_exclude(tmp_path: Path) -> None:
    root = _tree(tmp_path / "root")
    assert list(tree_entries(root, exclude=["dev"])) == [
        "dev", "opt", "opt/venv", "opt/venv/a.py",
        "usr", "usr/bin", "usr/bin/link", "usr/bin/tool", "usr/bin/tool2",
    ]  # fmt: skip
    assert list(tree_entries(root, include=["/opt/venv"])) == ["opt", "opt/venv", "opt/venv/a.py"]


def test_a_layer_is_the_same_bytes_twice_with_fixed_times_no_names_and_no_set_id_bits(tmp_path: Path) -> None:
    root = _tree(tmp_path / "root")
    entries = list(tree_entries(root))
    first = write_layer(
        root, entries, epoch=1000, blobs=tmp_path / "a", gzip_cache=tmp_path / "ca", created_by="x"
    )
    os.utime(root / "opt" / "venv" / "a.py", (5, 5))  # an mtime change must not show
    second = write_layer(
        root, entries, epoch=1000, blobs=tmp_path / "b", gzip_cache=tmp_path / "cb", created_by="x"
    )
    assert (first.digest, first.diff_id, first.size) == (second.digest, second.diff_id, second.size)
    members = {m.name: m for m in _members(tmp_path / "a" / "sha256" / first.digest.removeprefix("sha256:"))}
    assert {m.mtime for m in members.values()} == {1000}
    assert {(m.uname, m.gname) for m in members.values()} == {("", "")}
    assert members["usr/bin/tool"].mode == 0o755
    assert members["usr/bin/tool2"].islnk()
    assert members["usr/bin/tool2"].linkname == "usr/bin/tool"
    assert members["usr/bin/link"].issym()
    assert members["usr/bin/link"].linkname == "tool"
    third = write_layer(
        root, entries, epoch=2000, blobs=tmp_path / "c", gzip_cache=tmp_path / "ca", created_by="x"
    )
    assert third.diff_id != first.diff_id


def test_a_changed_file_changes_the_layer(tmp_path: Path) -> None:
    root = _tree(tmp_path / "root")
    entries = list(tree_entries(root))
    first = write_layer(
        root, entries, epoch=0, blobs=tmp_path / "a", gzip_cache=tmp_path / "c", created_by="x"
    )
    (root / "opt" / "venv" / "a.py").write_text("x = 2\n")
    second = write_layer(
        root, entries, epoch=0, blobs=tmp_path / "b", gzip_cache=tmp_path / "c", created_by="x"
    )
    assert first.diff_id != second.diff_id
    assert first.digest != second.digest


def test_the_layout_names_the_tag_and_its_digest_is_the_manifests(tmp_path: Path) -> None:
    root = _tree(tmp_path / "root")
    layout = tmp_path / "oci"
    layer = write_layer(
        root,
        list(tree_entries(root)),
        epoch=0,
        blobs=layout / "blobs",
        gzip_cache=tmp_path / "c",
        created_by="x",
    )
    config = image_config(
        layers=[layer], epoch=0, user="65534:65534", env=["A=1"], entrypoint=["/x"], labels={}
    )
    digest = write_layout(layout, layers=[layer], config=config, ref="1.0", annotations={})
    index = json.loads((layout / "index.json").read_text())
    assert index["manifests"][0]["digest"] == digest
    assert index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"] == "1.0"
    manifest = (layout / "blobs" / "sha256" / digest.removeprefix("sha256:")).read_bytes()
    assert f"sha256:{hashlib.sha256(manifest).hexdigest()}" == digest
    assert config["config"]["User"] == "65534:65534"
    assert config["rootfs"]["diff_ids"] == [layer.diff_id]


STATUS = """\
Package: libc6
Status: install ok installed
Maintainer: GNU Libc Maintainers <debian-glibc@lists.debian.org>
Architecture: amd64
Source: glibc
Version: 2.36-9+deb12u14
Description: GNU C Library
 continuation line: ignored

Package: munge
Status: deinstall ok config-files
Version: 0.5.15-2

Package: slurm-client
Status: install ok installed
Architecture: amd64
Source: slurm-wlm (22.05.8-4)
Version: 22.05.8-4+deb12u3
"""


def test_dpkg_status_gives_installed_packages_only_with_sources() -> None:
    packages = dpkg_packages(STATUS)
    assert [(p.name, p.version) for p in packages] == [
        ("libc6", "2.36-9+deb12u14"),
        ("slurm-client", "22.05.8-4+deb12u3"),
    ]
    assert packages[0].source == "glibc@2.36-9+deb12u14"
    assert packages[1].source == "slurm-wlm@22.05.8-4"
    assert packages[0].purl == "pkg:deb/debian/libc6@2.36-9+deb12u14?arch=amd64&distro=debian-12"


def test_python_metadata_gives_name_version_and_only_spdx_licenses() -> None:
    packages = python_packages(
        [
            "Metadata-Version: 2.4\nName: Typing_Extensions\nVersion: 4.16.0\nLicense-Expression: PSF-2.0\n",
            "Metadata-Version: 2.1\nName: six\nVersion: 1.17.0\nLicense: MIT license, free text\n",
            "Metadata-Version: 2.1\nName: broken\n",
        ]
    )
    assert [(p.name, p.license) for p in packages] == [
        ("Typing_Extensions", "PSF-2.0"),
        ("six", "NOASSERTION"),
    ]
    assert packages[0].purl == "pkg:pypi/typing-extensions@4.16.0"


def test_the_spdx_document_describes_the_image_containing_every_package() -> None:
    packages = [*dpkg_packages(STATUS), *python_packages(["Name: six\nVersion: 1.17.0\n"])]
    document = spdx_document(
        name="k8s-bridge",
        reference="localhost/k8s-bridge:0.1.0",
        digest="sha256:ab",
        epoch=0,
        packages=packages,
    )
    assert document["creationInfo"]["created"] == "1970-01-01T00:00:00Z"
    ids = [p["SPDXID"] for p in document["packages"]]
    assert len(ids) == len(set(ids)) == 4
    assert all(re.fullmatch(r"SPDXRef-[A-Za-z0-9.-]+", i) for i in ids)
    contains = [r for r in document["relationships"] if r["relationshipType"] == "CONTAINS"]
    assert {r["relatedSpdxElement"] for r in contains} == set(ids[1:])


def test_a_lock_round_trips_and_refuses_unhashed_lines() -> None:
    pins = [Pin("b", "2", "1" * 64), Pin("a", "1", "0" * 64)]
    assert parse_lock(render_lock(pins, header="two\nlines")) == sorted(pins)
    with pytest.raises(ValueError, match="not a pinned"):
        parse_lock("requests>=2\n")


def test_the_committed_locks_pin_every_project_dependency_and_the_build_tools() -> None:
    locked = {re.sub(r"[-_.]+", "-", p.name) for p in parse_lock(REQUIREMENTS_LOCK.read_text())}
    for requirement in project_dependencies():
        name = re.split(r"[<>=!~\[ ;]", requirement, maxsplit=1)[0]
        assert re.sub(r"[-_.]+", "-", name.lower()) in locked, requirement
    tools = {p.name for p in parse_lock(BUILD_TOOLS_LOCK.read_text())}
    assert {"hatchling", "pip"} <= tools


def test_set_id_bits_are_cleared_for_files_only(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "tmp").mkdir(parents=True)
    (root / "tmp").chmod(0o1777)
    layer = write_layer(
        root,
        list(tree_entries(root)),
        epoch=0,
        blobs=tmp_path / "b",
        gzip_cache=tmp_path / "c",
        created_by="x",
    )
    (member,) = _members(tmp_path / "b" / "sha256" / layer.digest.removeprefix("sha256:"))
    assert member.isdir()
    assert stat.S_IMODE(member.mode) == 0o1777


def test_the_charts_default_images_are_what_the_build_makes() -> None:
    chart = REPO_ROOT / "charts" / "k8s-bridge"
    values = yaml.safe_load((chart / "values.yaml").read_text())
    app_version = yaml.safe_load((chart / "Chart.yaml").read_text())["appVersion"]
    assert app_version == project_version()
    for key, bridge in (("slurmBridge", "slurm"), ("rayBridge", "ray")):
        image = values[key]["image"]
        assert image["repository"] == f"localhost/{IMAGES[bridge].name}"
        assert image["tag"] in ("", project_version())
