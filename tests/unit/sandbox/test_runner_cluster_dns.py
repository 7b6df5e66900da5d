"""The process runner's stand-ins for what a pod gets from its cluster and its image: Service names in
/etc/hosts (no cluster DNS, no kube-proxy here), a HOME whose .profile keeps PATH for login shells,
a TMPDIR of its own, the pinned Python's folder on PATH, and the env KubeRay's head pod asks for."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any

import pytest

from bridge.sandbox.netns import NetworkNamespace
from bridge.sandbox.runner import (
    CLUSTER_DNS_ENV,
    PID_NAMESPACE_ANNOTATION,
    ProcessRunner,
    container_command,
    container_env,
    hosts_file,
    login_profile,
    pod_argv,
    pod_tmp_dir,
    pods_path,
    service_hosts,
    wants_pid_namespace,
)


def endpoint_slice(
    service: str | None,
    namespace: str,
    endpoints: list[dict[str, Any]],
    *,
    address_type: str = "IPv4",
    name: str | None = None,
) -> dict[str, Any]:
    labels = {"kubernetes.io/service-name": service} if service else {}
    return {
        "metadata": {"name": name or f"{service}-abcde", "namespace": namespace, "labels": labels},
        "addressType": address_type,
        "endpoints": endpoints,
    }


def ready(*addresses: str, hostname: str | None = None, is_ready: bool | None = True) -> dict[str, Any]:
    endpoint: dict[str, Any] = {"addresses": list(addresses)}
    if is_ready is not None:
        endpoint["conditions"] = {"ready": is_ready}
    if hostname:
        endpoint["hostname"] = hostname
    return endpoint


class TestServiceHosts:
    def test_names_as_cluster_dns_gives_them_and_the_short_name_in_the_pods_namespace(self) -> None:
        slices = [endpoint_slice("head-svc", "ray", [ready("10.213.0.6")])]
        assert service_hosts(slices, namespace="ray") == [
            ("10.213.0.6", ["head-svc.ray.svc.cluster.local", "head-svc.ray.svc", "head-svc.ray", "head-svc"])
        ]
        # From another namespace the search path would not find the short name.
        assert service_hosts(slices, namespace="other") == [
            ("10.213.0.6", ["head-svc.ray.svc.cluster.local", "head-svc.ray.svc", "head-svc.ray"])
        ]

    def test_only_ready_endpoints_and_unknown_readiness_counts_as_ready(self) -> None:
        slices = [
            endpoint_slice(
                "web",
                "a",
                [ready("10.0.0.2"), ready("10.0.0.6", is_ready=False), ready("10.0.0.10", is_ready=None)],
            )
        ]
        assert [ip for ip, _ in service_hosts(slices, namespace="a")] == ["10.0.0.10", "10.0.0.2"]

    def test_endpoints_with_a_hostname_get_their_own_name(self) -> None:
        slices = [endpoint_slice("workers", "job", [ready("10.0.0.2", hostname="w-0")])]
        ((ip, names),) = service_hosts(slices, namespace="job", cluster_domain="example.org")
        assert ip == "10.0.0.2"
        assert names[0] == "w-0.workers.job.svc.example.org"
        assert "workers.job.svc.example.org" in names

    def test_slices_without_a_service_and_other_address_types_are_skipped(self) -> None:
        slices = [
            endpoint_slice(None, "a", [ready("10.0.0.2")], name="orphan"),
            endpoint_slice("v6", "a", [ready("fd00::2")], address_type="IPv6"),
            endpoint_slice("fqdn", "a", [ready("example.com")], address_type="FQDN"),
            endpoint_slice("empty", "a", []),
        ]
        assert service_hosts(slices, namespace="a") == []

    def test_order_is_stable_whatever_the_order_of_the_slices(self) -> None:
        slices = [
            endpoint_slice("b", "n2", [ready("10.0.0.9")]),
            endpoint_slice("a", "n2", [ready("10.0.0.5"), ready("10.0.0.1")], name="a-2"),
            endpoint_slice("z", "n1", [ready("10.0.0.7")]),
        ]
        first = service_hosts(slices, namespace="n1")
        assert first == service_hosts(list(reversed(slices)), namespace="n1")
        assert [(ip, names[0]) for ip, names in first] == [
            ("10.0.0.7", "z.n1.svc.cluster.local"),
            ("10.0.0.1", "a.n2.svc.cluster.local"),
            ("10.0.0.5", "a.n2.svc.cluster.local"),
            ("10.0.0.9", "b.n2.svc.cluster.local"),
        ]


def pod(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "client", "namespace": "ray", "uid": "u", "labels": {}},
        "spec": {"containers": [{"name": "main", "command": ["true"]}], **spec},
    }


class TestHostsFile:
    def test_services_come_last_after_the_pod_and_its_aliases(self) -> None:
        text = hosts_file(
            pod(hostAliases=[{"ip": "10.9.9.9", "hostnames": ["head-svc"]}]),
            pod_ip="10.0.0.2",
            services=[("10.0.0.6", ["head-svc.ray.svc.cluster.local", "head-svc"])],
        )
        lines = text.splitlines()
        assert lines.index("10.0.0.2\tclient") < lines.index("10.9.9.9\thead-svc")
        # The pod's own aliases win over the stand-in (first match counts in /etc/hosts).
        assert lines.index("10.9.9.9\thead-svc") < lines.index(
            "10.0.0.6\thead-svc.ray.svc.cluster.local\thead-svc"
        )
        assert text.endswith("\n")

    def test_without_services_the_file_is_kubelets(self) -> None:
        assert hosts_file(pod(), pod_ip="10.0.0.2") == hosts_file(pod(), pod_ip="10.0.0.2", services=())
        assert "Services" not in hosts_file(pod(), pod_ip="10.0.0.2")


class TestLoginShells:
    def test_the_profile_sets_path_back_quoted_for_sh(self) -> None:
        path = "/venv/bin:/odd dir/$HOME:/usr/bin"
        profile = login_profile(path)
        assignment = next(line for line in profile.splitlines() if line.startswith("PATH="))
        assert shlex.split(assignment.removeprefix("PATH=")) == [path]
        assert "export PATH" in profile

    def test_the_pythons_folder_comes_first_once(self) -> None:
        assert pods_path("/usr/bin:/bin", python="/venv/bin/python") == "/venv/bin:/usr/bin:/bin"
        assert pods_path("/usr/bin:/venv/bin", python="/venv/bin/python") == "/usr/bin:/venv/bin"
        assert pods_path("", python="/venv/bin/python") == "/venv/bin"

    def test_home_is_the_containers_unless_its_env_or_the_runner_names_one(self) -> None:
        base = {"PATH": "/usr/bin"}
        container = {"name": "main", "command": ["true"]}
        env = container_env(
            pod=pod(), container=container, pod_ip="1", host_ip="2", base_env=base, home="/p/h"
        )
        assert env["HOME"] == "/p/h"
        with_home = {**container, "env": [{"name": "HOME", "value": "/work"}]}
        env = container_env(
            pod=pod(), container=with_home, pod_ip="1", host_ip="2", base_env=base, home="/p/h"
        )
        assert env["HOME"] == "/work"
        env = container_env(
            pod=pod(),
            container=container,
            pod_ip="1",
            host_ip="2",
            base_env={**base, "HOME": "/r"},
            home="/p/h",
        )
        assert env["HOME"] == "/r"
        assert "HOME" not in container_env(
            pod=pod(), container=container, pod_ip="1", host_ip="2", base_env=base
        )


# What KubeRay v1.5.0 writes into a head pod's container (read from its BuildPod / setContainerEnvVars).
KUBERAY_HEAD_CONTAINER: dict[str, Any] = {
    "name": "ray-head",
    "image": "rayproject/ray:2.60.0",
    "command": ["/bin/bash", "-c", "--"],
    "args": ["ulimit -n 65536; ray start --head --block --dashboard-host=0.0.0.0 --num-cpus=1"],
    "env": [
        {"name": "RAY_JOB_START_TIMEOUT_SECONDS", "value": "604800"},
        {
            "name": "RAY_CLUSTER_NAME",
            "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['ray.io/cluster']"}},
        },
        {"name": "RAY_CLOUD_INSTANCE_ID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {
            "name": "RAY_NODE_TYPE_NAME",
            "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['ray.io/group']"}},
        },
        {"name": "KUBERAY_GEN_RAY_START_CMD", "value": "ray start --head --block --dashboard-host=0.0.0.0"},
        {"name": "RAY_PORT", "value": "6379"},
        {"name": "RAY_ADDRESS", "value": "127.0.0.1:6379"},
        {"name": "RAY_USAGE_STATS_KUBERAY_IN_USE", "value": "1"},
        {"name": "RAY_USAGE_STATS_EXTRA_TAGS", "value": "kuberay_version=v1.5.0;kuberay_crd=RayCluster"},
        {"name": "RAY_DASHBOARD_ENABLE_K8S_DISK_USAGE", "value": "1"},
    ],
}


@pytest.mark.parametrize("shell", [["/bin/bash", "-c", "--"], ["/bin/bash", "-lc", "--"]])
def test_kuberays_head_container_runs_as_written_with_its_field_refs(shell: list[str]) -> None:
    container = {**KUBERAY_HEAD_CONTAINER, "command": shell}
    head: dict[str, Any] = {
        "metadata": {
            "name": "shared-head-x7k2p",
            "namespace": "ray",
            "uid": "u",
            "labels": {"ray.io/cluster": "shared", "ray.io/group": "headgroup", "ray.io/node-type": "head"},
        },
        "spec": {"containers": [container]},
    }
    argv, env = container_command(
        pod=head,
        container=container,
        pod_ip="10.213.0.6",
        host_ip="10.0.0.1",
        base_env={"PATH": os.defpath},
        home="/w/pods/u/home/ray-head",
    )
    assert argv == [*shell, KUBERAY_HEAD_CONTAINER["args"][0]]
    assert env["RAY_CLUSTER_NAME"] == "shared"
    assert env["RAY_CLOUD_INSTANCE_ID"] == "shared-head-x7k2p"
    assert env["RAY_NODE_TYPE_NAME"] == "headgroup"
    assert env["HOSTNAME"] == "shared-head-x7k2p"
    assert env["HOME"] == "/w/pods/u/home/ray-head"


def test_pods_resolve_grpc_names_through_the_hosts_file_unless_told_otherwise(tmp_path: Path) -> None:
    # gRPC's default resolver (c-ares) never reads /etc/hosts, where the Services are.
    on = ProcessRunner(kubeconfig=tmp_path / "k", node_names=["n"], workdir=tmp_path / "a")
    assert on.base_env["GRPC_DNS_RESOLVER"] == CLUSTER_DNS_ENV["GRPC_DNS_RESOLVER"] == "native"
    off = ProcessRunner(
        kubeconfig=tmp_path / "k", node_names=["n"], workdir=tmp_path / "b", cluster_dns=False
    )
    assert "GRPC_DNS_RESOLVER" not in off.base_env
    mine = ProcessRunner(
        kubeconfig=tmp_path / "k", node_names=["n"], workdir=tmp_path / "c", env={"GRPC_DNS_RESOLVER": "ares"}
    )
    assert mine.base_env["GRPC_DNS_RESOLVER"] == "ares"


def test_a_pods_tmpdir_is_named_after_its_namespace_and_short_enough_for_rays_sockets() -> None:
    tmp = pod_tmp_dir("kb-0123456789")
    assert tmp == Path("/tmp/kb-pod-0123456789")
    # The longest socket path Ray makes below its temp dir (a 7-digit pid), within Linux's 107 bytes.
    socket = tmp / "ray" / "session_2026-12-02_06-07-18_744123_4194304" / "sockets" / "plasma_store"
    assert len(str(socket)) <= 107
    env = container_env(
        pod=pod(), container={"name": "main"}, pod_ip="1", host_ip="2", base_env={}, tmpdir=str(tmp)
    )
    assert env["TMPDIR"] == str(tmp)
    own = {"name": "main", "env": [{"name": "TMPDIR", "value": "/scratch"}]}
    assert (
        container_env(pod=pod(), container=own, pod_ip="1", host_ip="2", base_env={}, tmpdir="/t")["TMPDIR"]
        == "/scratch"
    )


@pytest.mark.parametrize(
    ("annotation", "default", "expected"),
    [
        (None, False, False),
        (None, True, True),
        ("true", False, True),
        ("False", True, False),
        ("bogus", True, True),
    ],
)
def test_a_pod_asks_for_a_pid_namespace_by_annotation(
    annotation: str | None, default: bool, expected: bool
) -> None:
    item = pod()
    if annotation is not None:
        item["metadata"]["annotations"] = {PID_NAMESPACE_ANNOTATION: annotation}
    assert wants_pid_namespace(item, default=default) is expected


def test_in_a_pid_namespace_the_runners_init_is_pid_1_and_dies_with_the_runner() -> None:
    namespace = NetworkNamespace(name="kb-1", address="10.0.0.2", gateway="10.0.0.1", host_interface="kbh1")
    argv = pod_argv(
        namespace, hostname="w", hosts=Path("/w/hosts"), argv=["ray", "start"], pid_namespace=True
    )
    unshare = argv[argv.index("unshare") :]
    assert argv[argv.index("setpriv") + 1] == "--pdeathsig=KILL"
    assert {"--pid", "--fork", "--mount-proc", "--kill-child=SIGKILL"} <= set(unshare[: unshare.index("--")])
    assert argv[-6:] == ["init", "w", "/w/hosts", "", "ray", "start"]
    plain = pod_argv(namespace, hostname="w", hosts=Path("/w/hosts"), argv=["ray", "start"])
    assert "--pid" not in plain
    assert plain[-6:] == ["exec", "w", "/w/hosts", "", "ray", "start"]
