"""Pod volumes: which are refused, what each holds, where each container mounts it, the atomic writer."""

from __future__ import annotations

import base64
import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from bridge.runtime.errors import error_from_status
from bridge.sandbox import volume_keeper
from bridge.sandbox.pod_volumes import (
    File,
    MissingSourceError,
    Mount,
    UnsupportedVolumeError,
    check_volumes,
    container_mounts,
    memory_dir,
    read_payload,
    referenced_objects,
    token_sources,
    volume_files,
    write_atomically,
)
from bridge.sandbox.runner import UnrunnableError, check_runnable
from bridge.sandbox.service_account import IssuedToken, refresh_at
from bridge.sandbox.volume_keeper import PodVolumes


def make_pod(volumes: list[dict[str, Any]], mounts: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "bridge-0",
            "namespace": "team-a",
            "uid": "u-1",
            "labels": {"app": "bridge", "tier": "x"},
            "annotations": {"note": 'a "quoted" one'},
        },
        "spec": {
            "volumes": volumes,
            "containers": [{"name": "main", "command": ["true"], "volumeMounts": mounts or []}],
        },
    }


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


SECRETS = {("team-a", "tls"): {"data": {"tls.crt": b64("CERT"), "tls.key": b64("KEY")}}}
CONFIG_MAPS = {
    ("team-a", "settings"): {"data": {"config.yaml": "a: 1\n"}, "binaryData": {"blob": b64("\x00\x01")}},
    ("team-a", "kube-root-ca.crt"): {"data": {"ca.crt": "CA"}},
}


def files(volume: dict[str, Any], *, tokens: dict[str, str] | None = None) -> dict[str, File]:
    return volume_files(
        volume,
        pod=make_pod([volume]),
        secrets_of=lambda ns, name: SECRETS.get((ns, name)),
        config_maps_of=lambda ns, name: CONFIG_MAPS.get((ns, name)),
        tokens=tokens or {},
    )


# -- what is refused -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("volume", "message"),
    [
        ({"name": "v", "hostPath": {"path": "/"}}, "hostPath volumes are not supported"),
        ({"name": "v", "persistentVolumeClaim": {"claimName": "c"}}, "persistentVolumeClaim volumes"),
        ({"name": "v", "projected": {"sources": [{"clusterTrustBundle": {}}]}}, "clusterTrustBundle"),
        (
            {"name": "v", "downwardAPI": {"items": [{"path": "cpu", "resourceFieldRef": {"resource": "x"}}]}},
            "resourceFieldRef",
        ),
        (
            {"name": "v", "secret": {"secretName": "s", "items": [{"key": "k", "path": "../up"}]}},
            "without '..'",
        ),
    ],
)
def test_unsupported_volumes_fail_the_pod_with_a_message(volume: dict[str, Any], message: str) -> None:
    with pytest.raises(UnsupportedVolumeError, match=message):
        check_volumes(make_pod([volume]))
    with pytest.raises(UnrunnableError, match=message):
        check_runnable(make_pod([volume]), base_env={})


@pytest.mark.parametrize(
    ("mount", "message"),
    [
        ({"name": "v", "mountPath": "/x", "subPathExpr": "$(POD)"}, "subPathExpr"),
        ({"name": "other", "mountPath": "/x"}, "no such volume"),
        ({"name": "v", "mountPath": "relative"}, "must be absolute"),
        ({"name": "v", "mountPath": "/"}, "must be absolute, not /"),
    ],
)
def test_unsupported_mounts_fail_the_pod_with_a_message(mount: dict[str, Any], message: str) -> None:
    with pytest.raises(UnsupportedVolumeError, match=message):
        check_volumes(make_pod([{"name": "v", "emptyDir": {}}], [mount]))


def test_the_service_account_volume_admission_adds_is_accepted() -> None:
    check_volumes(make_pod([KUBE_API_ACCESS], [{"name": KUBE_API_ACCESS["name"], "mountPath": SA_PATH}]))


# -- contents ------------------------------------------------------------------------------------------

SA_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
KUBE_API_ACCESS: dict[str, Any] = {
    "name": "kube-api-access-x1",
    "projected": {
        "defaultMode": 420,
        "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {
                "downwardAPI": {
                    "items": [
                        {
                            "path": "namespace",
                            "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                        }
                    ]
                }
            },
        ],
    },
}


def test_the_service_account_volume_holds_token_ca_and_namespace() -> None:
    assert files(KUBE_API_ACCESS, tokens={"token": "a.b.c"}) == {
        "token": File(b"a.b.c", 0o644),
        "ca.crt": File(b"CA", 0o644),
        "namespace": File(b"team-a", 0o644),
    }
    assert token_sources(KUBE_API_ACCESS) == [{"expirationSeconds": 3607, "path": "token"}]


def test_a_projected_token_not_issued_yet_is_missing() -> None:
    with pytest.raises(MissingSourceError, match="token"):
        files(KUBE_API_ACCESS)


def test_a_secret_volume_holds_every_key_or_its_items_with_their_modes() -> None:
    whole = {"name": "tls", "secret": {"secretName": "tls", "defaultMode": 0o400}}
    assert files(whole) == {"tls.crt": File(b"CERT", 0o400), "tls.key": File(b"KEY", 0o400)}
    items = {
        "name": "tls",
        "secret": {
            "secretName": "tls",
            "items": [{"key": "tls.key", "path": "private/key.pem", "mode": 0o600}],
        },
    }
    assert files(items) == {"private/key.pem": File(b"KEY", 0o600)}


def test_a_missing_secret_or_key_waits_unless_optional() -> None:
    with pytest.raises(MissingSourceError, match="Secret team-a/absent not found"):
        files({"name": "s", "secret": {"secretName": "absent"}})
    assert files({"name": "s", "secret": {"secretName": "absent", "optional": True}}) == {}
    keyed = {"secretName": "tls", "items": [{"key": "ca.crt", "path": "ca.crt"}]}
    with pytest.raises(MissingSourceError, match=r"no key 'ca\.crt'"):
        files({"name": "s", "secret": keyed})
    assert files({"name": "s", "secret": {**keyed, "optional": True}}) == {}


def test_a_config_map_volume_holds_data_and_binary_data() -> None:
    assert files({"name": "c", "configMap": {"name": "settings"}}) == {
        "blob": File(b"\x00\x01", 0o644),
        "config.yaml": File(b"a: 1\n", 0o644),
    }


def test_downward_api_files_are_the_pods_metadata_as_kubelet_writes_it() -> None:
    items = [
        {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
        {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
        {"path": "note", "fieldRef": {"fieldPath": "metadata.annotations['note']"}},
        {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}},
    ]
    got = files({"name": "d", "downwardAPI": {"items": items}})
    assert got["name"].data == b"bridge-0"
    assert got["labels"].data == b'app="bridge"\ntier="x"'
    assert got["note"].data == b'a "quoted" one'
    assert got["annotations"].data == b'note="a \\"quoted\\" one"'


def test_the_secrets_and_config_maps_a_pod_reads() -> None:
    pod = make_pod(
        [KUBE_API_ACCESS, {"name": "tls", "secret": {"secretName": "tls"}}, {"name": "e", "emptyDir": {}}]
    )
    assert referenced_objects(pod) == {
        ("ConfigMap", "team-a", "kube-root-ca.crt"),
        ("Secret", "team-a", "tls"),
    }


# -- mounts --------------------------------------------------------------------------------------------


def test_mounts_go_parents_first_and_atomic_writer_volumes_read_only() -> None:
    volumes = [
        {"name": "data", "emptyDir": {}},
        {"name": "tls", "secret": {"secretName": "tls"}},
        KUBE_API_ACCESS,
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "tls", "mountPath": "/data/certs/"},
        {"name": "data", "mountPath": "/data"},
        {"name": "kube-api-access-x1", "mountPath": SA_PATH},
        {"name": "data", "mountPath": "/etc/config.yaml", "subPath": "conf/config.yaml", "readOnly": True},
    ]
    pod = make_pod(volumes, mounts)
    got = container_mounts(
        pod, pod["spec"]["containers"][0], volume_path=lambda v: Path("/w/volumes") / v["name"]
    )
    assert got == [
        Mount(source="/w/volumes/data", target="/data", read_only=False),
        Mount(source="/w/volumes/tls", target="/data/certs", read_only=True),
        Mount(source="/w/volumes/data/conf/config.yaml", target="/etc/config.yaml", read_only=True),
        Mount(source="/w/volumes/kube-api-access-x1", target=SA_PATH, read_only=True),
    ]


def test_a_memory_empty_dir_lives_in_shared_memory_named_after_the_pods_namespace() -> None:
    assert memory_dir("kb-0123456789", "shared-mem") == Path("/dev/shm/kb-pod-0123456789/shared-mem")


# -- the atomic writer ---------------------------------------------------------------------------------


def test_the_atomic_writer_lays_volumes_out_as_kubelet_does(tmp_path: Path) -> None:
    volume = tmp_path / "tls"
    first = {"tls.crt": File(b"ONE", 0o644), "dir/nested": File(b"N", 0o600)}
    assert write_atomically(volume, first, now=0)
    data = volume / "..data"
    assert data.is_symlink()
    assert os.readlink(data).startswith("..1970_01_01_00_00_00.")
    assert os.readlink(volume / "tls.crt") == "..data/tls.crt"
    assert (volume / "dir" / "nested").read_bytes() == b"N"
    assert (volume / "dir" / "nested").stat().st_mode & 0o777 == 0o600
    assert read_payload(volume) == first
    assert not write_atomically(volume, first), "nothing changed: nothing written"


def test_an_update_swaps_data_at_once_and_removes_what_went(tmp_path: Path) -> None:
    volume = tmp_path / "tls"
    write_atomically(volume, {"tls.crt": File(b"ONE", 0o644), "old": File(b"O", 0o644)})
    before = os.readlink(volume / "..data")
    assert write_atomically(volume, {"tls.crt": File(b"TWO", 0o644)})
    after = os.readlink(volume / "..data")
    assert after != before
    assert (volume / "tls.crt").read_bytes() == b"TWO"
    assert not (volume / "old").is_symlink()
    assert not (volume / before).exists()
    assert sorted(entry.name for entry in volume.iterdir()) == sorted(["..data", after, "tls.crt"])


# -- one pod's volumes kept current --------------------------------------------------------------------


class FakeTokens:
    """Stands in for the TokenRequest API: each call issues the next token, valid ``seconds``."""

    def __init__(self, seconds: int) -> None:
        self.seconds = seconds
        self.issued: list[datetime] = []

    async def __call__(
        self, client: object, pod: object, source: object, *, rng: object
    ) -> tuple[Any, datetime]:
        now = self.now
        self.issued.append(now)
        token = IssuedToken(
            token=f"jwt-{len(self.issued)}",
            expiration=now + timedelta(seconds=self.seconds),
            expiration_seconds=self.seconds,
        )
        return token, refresh_at(token)

    now = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


async def test_a_pods_token_is_renewed_once_due_and_written_atomically(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeTokens(seconds=3607)
    monkeypatch.setattr(volume_keeper, "request_token", fake)
    pod = make_pod([KUBE_API_ACCESS])
    volumes = PodVolumes(
        pod=pod,
        pod_dir=tmp_path,
        namespace="kb-0123456789",
        client=None,  # type: ignore[arg-type]  # the fake needs none
        secrets_of=lambda ns, name: SECRETS.get((ns, name)),
        config_maps_of=lambda ns, name: CONFIG_MAPS.get((ns, name)),
    )
    volumes.create()
    start = fake.now
    first = await volumes.sync(now=start)
    token = tmp_path / "volumes" / KUBE_API_ACCESS["name"] / "token"
    assert first.missing is None
    assert token.read_text() == "jwt-1"
    assert first.again_in == pytest.approx(3607 * 0.8)
    assert (tmp_path / "volumes").stat().st_mode & 0o777 == 0o700
    early = await volumes.sync(now=start + timedelta(seconds=2000))
    assert len(fake.issued) == 1, "not due yet"
    assert early.again_in == pytest.approx(3607 * 0.8 - 2000)
    fake.now = start + timedelta(seconds=2900)
    await volumes.sync(now=fake.now)
    assert len(fake.issued) == 2
    assert token.read_text() == "jwt-2"


async def test_a_pod_waits_for_a_missing_secret(tmp_path: Path) -> None:
    pod = make_pod([{"name": "tls", "secret": {"secretName": "absent"}}])
    found: dict[tuple[str, str], Any] = {}
    volumes = PodVolumes(
        pod=pod,
        pod_dir=tmp_path,
        namespace="kb-0123456789",
        client=None,  # type: ignore[arg-type]  # no token source
        secrets_of=lambda ns, name: found.get((ns, name)),
        config_maps_of=lambda ns, name: None,
    )
    volumes.create()
    waiting = await volumes.sync()
    assert waiting.missing is not None
    assert "Secret team-a/absent not found" in waiting.missing
    found[("team-a", "absent")] = {"data": {"k": b64("v")}}
    assert (await volumes.sync()).missing is None
    assert (tmp_path / "volumes" / "tls" / "k").read_text() == "v"


async def test_a_failed_token_request_keeps_the_old_token_and_waits_before_trying_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeTokens(seconds=3607)
    failing = False

    async def issue(client: object, pod: object, source: object, *, rng: object) -> tuple[Any, datetime]:
        if failing:
            raise error_from_status(404, {"kind": "Status", "reason": "NotFound", "message": "gone"})
        return await fake(client, pod, source, rng=rng)

    monkeypatch.setattr(volume_keeper, "request_token", issue)
    volumes = PodVolumes(
        pod=make_pod([KUBE_API_ACCESS]),
        pod_dir=tmp_path,
        namespace="kb-0123456789",
        client=None,  # type: ignore[arg-type]  # the fake needs none
        secrets_of=lambda ns, name: SECRETS.get((ns, name)),
        config_maps_of=lambda ns, name: CONFIG_MAPS.get((ns, name)),
    )
    volumes.create()
    await volumes.sync(now=fake.now)
    failing = True
    due = fake.now + timedelta(seconds=3000)
    result = await volumes.sync(now=due)
    assert result.missing is None, "the old token stays"
    assert result.again_in == volume_keeper.TOKEN_RETRY
    assert (await volumes.sync(now=due + timedelta(seconds=1))).again_in == pytest.approx(
        volume_keeper.TOKEN_RETRY - 1
    )
    assert len(fake.issued) == 1
    failing = False
    fake.now = due + timedelta(seconds=volume_keeper.TOKEN_RETRY)
    await volumes.sync(now=fake.now)
    assert len(fake.issued) == 2


def test_a_containers_mount_plan_names_its_mounts_and_a_stage_of_its_own(tmp_path: Path) -> None:
    pod = make_pod([KUBE_API_ACCESS], [{"name": KUBE_API_ACCESS["name"], "mountPath": SA_PATH}])
    volumes = PodVolumes(
        pod=pod,
        pod_dir=tmp_path,
        namespace="kb-0123456789",
        client=None,  # type: ignore[arg-type]  # no request is made
        secrets_of=lambda ns, name: None,
        config_maps_of=lambda ns, name: None,
    )
    volumes.create()
    plan = volumes.plan(pod["spec"]["containers"][0])
    assert plan is not None
    written = json.loads(plan.read_text())
    assert written["mounts"] == [
        {"source": str(tmp_path / "volumes" / KUBE_API_ACCESS["name"]), "target": SA_PATH, "read_only": True}
    ]
    assert Path(written["stage"]).is_dir()
    assert written["stage"].startswith(str(tmp_path))
    assert volumes.plan({"name": "bare", "command": ["true"]}) is None
