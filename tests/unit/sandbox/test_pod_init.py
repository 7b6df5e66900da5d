"""The in-namespace mount helper: where a missing mountPath begins, and when a directory is mirrored."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bridge.sandbox import pod_init
from bridge.sandbox.pod_init import Mounter, MountError, split_existing


def test_the_existing_part_of_a_path_is_resolved_through_symlinks(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "var").mkdir()
    (tmp_path / "var" / "run").symlink_to(tmp_path / "run")
    target = f"{tmp_path}/var/run/secrets/kubernetes.io/serviceaccount"
    assert split_existing(target) == (str(tmp_path / "run"), ["secrets", "kubernetes.io", "serviceaccount"])
    assert split_existing(str(tmp_path / "run")) == (str(tmp_path / "run"), [])


def test_only_root_exists_for_a_path_below_a_missing_top_directory() -> None:
    assert split_existing("/x/y", exists=lambda path: path == "/") == ("/", ["x", "y"])


@pytest.fixture
def mirrored(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record the directories a :class:`Mounter` mirrors instead of mounting a tmpfs on them."""
    calls: list[str] = []
    monkeypatch.setattr(pod_init, "mirror", calls.append)
    return calls


def test_a_missing_mount_point_mirrors_its_nearest_directory_once(
    tmp_path: Path, mirrored: list[str]
) -> None:
    (tmp_path / "etc").mkdir()
    mounter = Mounter()
    assert mounter.prepare(f"{tmp_path}/etc/bridge/certs", directory=True) == f"{tmp_path}/etc/bridge/certs"
    assert mirrored == [f"{tmp_path}/etc"]
    assert mounter.prepare(f"{tmp_path}/etc/bridge/config.yaml", directory=False).endswith("config.yaml")
    assert (tmp_path / "etc" / "bridge" / "config.yaml").is_file()
    assert mirrored == [f"{tmp_path}/etc"], "a directory made here needs no mirror"


def test_an_existing_mount_point_is_used_as_it_is(tmp_path: Path, mirrored: list[str]) -> None:
    assert Mounter().prepare(str(tmp_path), directory=True) == str(tmp_path)
    assert mirrored == []


def test_mount_points_inside_a_writable_volume_are_made_there(tmp_path: Path, mirrored: list[str]) -> None:
    (tmp_path / "data").mkdir()
    mounter = Mounter()
    mounter.volumes.append((str(tmp_path / "data"), True))
    mounter.prepare(f"{tmp_path}/data/sub/dir", directory=True)
    assert mirrored == []
    assert (tmp_path / "data" / "sub" / "dir").is_dir()


def test_no_mount_point_is_made_inside_a_read_only_volume(tmp_path: Path, mirrored: list[str]) -> None:
    mounter = Mounter()
    mounter.volumes.append((str(tmp_path), False))
    with pytest.raises(MountError, match="read-only"):
        mounter.prepare(f"{tmp_path}/new", directory=True)


def test_root_is_mirrored_only_onto_a_stage(mirrored: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(MountError, match="no stage"):
        Mounter().prepare("/k8s-bridge-test-absent/certs", directory=True)
    assert mirrored == []
    staged: list[str] = []
    monkeypatch.setattr(pod_init, "mirror_root", staged.append)
    made: list[str] = []
    monkeypatch.setattr(os, "mkdir", lambda path, mode: made.append(path))
    Mounter(stage="/w/pods/u/mounts/main.root").prepare("/k8s-bridge-test-absent/certs", directory=True)
    assert staged == ["/w/pods/u/mounts/main.root"]
    assert made == ["/k8s-bridge-test-absent", "/k8s-bridge-test-absent/certs"]
