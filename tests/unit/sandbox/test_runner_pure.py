"""The process runner's pure parts: pod spec -> argv/env/hosts, process state -> pod status, nodes."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from bridge.sandbox.netns import NetworkNamespace
from bridge.sandbox.runner import (
    RUNNER_LABEL,
    ContainerRun,
    NodeResources,
    ProcessRunner,
    Termination,
    UnrunnableError,
    check_runnable,
    container_command,
    container_env,
    exit_code_of,
    expand,
    hosts_file,
    lease_manifest,
    node_label_options,
    node_manifest,
    pod_argv,
    pod_hostname,
    pod_phase,
    pod_status,
    should_restart,
    terminal_phase,
)

BASE = {"PATH": "/usr/bin:/bin", "HOME": "/root"}
NOW = "2030-01-01T00:00:00Z"
LATER = "2030-01-01T00:01:00Z"


def make_pod(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "worker-0",
            "namespace": "team-a",
            "uid": "uid-1",
            "labels": {"app": "slurm"},
            "annotations": {"batch.kubernetes.io/job-completion-index": "3"},
        },
        "spec": {
            "nodeName": "runner-0",
            "serviceAccountName": "default",
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "ignored:latest", "command": ["sleep"], "args": ["1"]}],
            **spec,
        },
        "status": {"phase": "Pending"},
    }


def ended(code: int) -> Termination:
    return Termination(exit_code=code, started_at=NOW, finished_at=LATER, pid=42)


# -- argv and environment --------------------------------------------------------------------------


class TestExpand:
    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ("$(A)", "1"),
            ("x$(A)y$(B)z", "x1y2z"),
            ("$(MISSING)", "$(MISSING)"),
            ("$$(A)", "$(A)"),
            ("$$", "$"),
            ("$A", "$A"),
            ("$(A", "$(A"),
            ("cost: 5$", "cost: 5$"),
            ("", ""),
        ],
    )
    def test_kubernetes_rules(self, text: str, expected: str) -> None:
        assert expand(text, {"A": "1", "B": "2"}) == expected


class TestCommand:
    def test_argv_is_command_then_args_expanded_against_the_containers_env(self) -> None:
        container = {
            "name": "main",
            "command": ["slurmd", "-Z"],
            "args": ["--conf", "Feature=$(FEATURE)", "$(PATH)"],
            "env": [{"name": "FEATURE", "value": "job-7"}],
        }
        argv, env = container_command(
            pod=make_pod(), container=container, pod_ip="10.0.0.2", host_ip="127.0.0.1", base_env=BASE
        )
        # $(PATH) is not one of the container's variables, so it stays as written (as in Kubernetes)
        assert argv == ["slurmd", "-Z", "--conf", "Feature=job-7", "$(PATH)"]
        assert env["FEATURE"] == "job-7"
        assert env["PATH"] == "/usr/bin:/bin"

    def test_a_container_without_command_is_refused(self) -> None:
        with pytest.raises(UnrunnableError, match="no command"):
            container_command(
                pod=make_pod(), container={"name": "c", "image": "x"}, pod_ip="1", host_ip="2", base_env=BASE
            )


class TestEnv:
    def test_values_field_refs_and_hostname(self) -> None:
        container = {
            "name": "main",
            "command": ["true"],
            "env": [
                {"name": "A", "value": "a"},
                {"name": "AB", "value": "$(A)b"},
                {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
                {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                {"name": "UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
                {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
                {
                    "name": "INDEX",
                    "valueFrom": {
                        "fieldRef": {
                            "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"
                        }
                    },
                },
                {"name": "HOME", "value": "/work"},
            ],
        }
        env = container_env(
            pod=make_pod(), container=container, pod_ip="10.0.0.2", host_ip="127.0.0.1", base_env=BASE
        )
        assert env == {
            "PATH": "/usr/bin:/bin",
            "HOME": "/work",
            "HOSTNAME": "worker-0",
            "A": "a",
            "AB": "ab",
            "POD": "worker-0",
            "NS": "team-a",
            "IP": "10.0.0.2",
            "HOST_IP": "127.0.0.1",
            "NODE": "runner-0",
            "UID": "uid-1",
            "APP": "slurm",
            "INDEX": "3",
        }

    @pytest.mark.parametrize(
        ("container", "match"),
        [
            ({"name": "c", "envFrom": [{"configMapRef": {"name": "x"}}]}, "envFrom"),
            (
                {
                    "name": "c",
                    "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
                },
                "secretKeyRef",
            ),
            (
                {"name": "c", "env": [{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "spec.weird"}}}]},
                "spec.weird",
            ),
        ],
    )
    def test_unsupported_sources_are_refused_by_name(self, container: dict[str, Any], match: str) -> None:
        with pytest.raises(UnrunnableError, match=match):
            container_env(pod=make_pod(), container=container, pod_ip="1", host_ip="2", base_env=BASE)


class TestRunnable:
    def test_a_plain_pod_is_runnable(self) -> None:
        check_runnable(make_pod(), base_env=BASE)

    def test_refusals(self) -> None:
        with pytest.raises(UnrunnableError, match="hostNetwork"):
            check_runnable(make_pod(hostNetwork=True), base_env=BASE)
        sidecar = [{"name": "proxy", "command": ["x"], "restartPolicy": "Always"}]
        with pytest.raises(UnrunnableError, match="sidecar"):
            check_runnable(make_pod(initContainers=sidecar), base_env=BASE)
        with pytest.raises(UnrunnableError, match="'init' has no command"):
            check_runnable(make_pod(initContainers=[{"name": "init", "image": "x"}]), base_env=BASE)


class TestHostname:
    def test_name_is_the_default(self) -> None:
        assert pod_hostname(make_pod()) == ("worker-0", None)

    def test_hostname_and_subdomain_give_an_fqdn(self) -> None:
        pod = make_pod(hostname="node-3", subdomain="workers")
        assert pod_hostname(pod) == ("node-3", "node-3.workers.team-a.svc.cluster.local")
        pod["spec"]["setHostnameAsFQDN"] = True
        assert pod_hostname(pod)[0] == "node-3.workers.team-a.svc.cluster.local"

    def test_long_names_are_cut_to_63(self) -> None:
        pod = make_pod()
        pod["metadata"]["name"] = "a" * 62 + "-b"
        assert pod_hostname(pod)[0] == "a" * 62

    def test_hosts_file_maps_the_pod_ip_to_its_names(self) -> None:
        pod = make_pod(
            hostname="node-3",
            subdomain="workers",
            hostAliases=[{"ip": "10.9.9.9", "hostnames": ["ctld", "ctld.x"]}],
        )
        lines = hosts_file(pod, pod_ip="10.0.0.2").splitlines()
        assert "127.0.0.1\tlocalhost" in lines
        assert "10.0.0.2\tnode-3.workers.team-a.svc.cluster.local\tnode-3" in lines
        assert lines[-1] == "10.9.9.9\tctld\tctld.x"
        assert "10.0.0.2\tworker-0" in hosts_file(make_pod(), pod_ip="10.0.0.2").splitlines()


def test_pod_argv_enters_the_namespace_and_ends_with_the_command() -> None:
    namespace = NetworkNamespace(name="kb-1", address="10.0.0.2", gateway="10.0.0.1", host_interface="kbh1")
    argv = pod_argv(namespace, hostname="worker-0", hosts=Path("/w/hosts"), argv=["sleep", "5"])
    assert argv[:2] == ["nsenter", "--net=/run/netns/kb-1"]
    assert argv[2:7] == ["unshare", "--uts", "--mount", "--propagation=private", "--"]
    assert argv[7] == sys.executable
    assert argv[-5:] == ["worker-0", "/w/hosts", "", "sleep", "5"]
    with_mounts = pod_argv(
        namespace, hostname="worker-0", hosts=Path("/w/hosts"), argv=["sleep", "5"], mounts=Path("/w/m.json")
    )
    assert with_mounts[-5:] == ["worker-0", "/w/hosts", "/w/m.json", "sleep", "5"]


# -- restarts and phases ---------------------------------------------------------------------------


class TestRestart:
    @pytest.mark.parametrize(
        ("policy", "code", "init", "expected"),
        [
            ("Never", 1, False, False),
            ("Never", 0, False, False),
            ("OnFailure", 1, False, True),
            ("OnFailure", 0, False, False),
            ("Always", 0, False, True),
            ("Always", 1, False, True),
            ("Always", 0, True, False),
            ("OnFailure", 2, True, True),
            ("Never", 2, True, False),
        ],
    )
    def test_policy(self, policy: str, code: int, init: bool, expected: bool) -> None:
        assert should_restart(policy, code, restarts=0, max_restarts=3, init=init) is expected

    def test_bounded(self) -> None:
        assert not should_restart("OnFailure", 1, restarts=3, max_restarts=3, init=False)

    def test_exit_codes_of_signals(self) -> None:
        assert exit_code_of(0) == 0
        assert exit_code_of(3) == 3
        assert exit_code_of(-15) == 143
        assert exit_code_of(-9) == 137


def run(state: str, *, code: int | None = None, last: int | None = None, name: str = "c") -> ContainerRun:
    container = ContainerRun(name=name, image="img")
    container.state = state  # type: ignore[assignment]
    if state == "running":
        container.pid, container.started_at = 42, NOW
    if code is not None:
        container.termination = ended(code)
    if last is not None:
        container.last_termination = ended(last)
    return container


class TestPhase:
    def test_waiting_is_pending(self) -> None:
        assert pod_phase(init_containers=[], containers=[run("waiting")]) == "Pending"

    def test_running(self) -> None:
        assert pod_phase(init_containers=[], containers=[run("running"), run("waiting")]) == "Running"

    def test_waiting_for_a_restart_is_running(self) -> None:
        assert pod_phase(init_containers=[], containers=[run("waiting", last=1)]) == "Running"

    def test_all_zero_is_succeeded_else_failed(self) -> None:
        assert pod_phase(init_containers=[], containers=[run("terminated", code=0)]) == "Succeeded"
        both = [run("terminated", code=0), run("terminated", code=1)]
        assert pod_phase(init_containers=[], containers=both) == "Failed"

    def test_init_containers_gate_the_pod(self) -> None:
        assert pod_phase(init_containers=[run("running")], containers=[run("waiting")]) == "Pending"
        assert (
            pod_phase(init_containers=[run("terminated", code=0)], containers=[run("running")]) == "Running"
        )
        assert pod_phase(init_containers=[run("terminated", code=2)], containers=[run("waiting")]) == "Failed"

    def test_terminal_phase_of_a_deleted_pod(self) -> None:
        assert terminal_phase([run("terminated", code=0)]) == "Succeeded"
        assert terminal_phase([run("terminated", code=143)]) == "Failed"
        assert terminal_phase([run("waiting", last=1)]) == "Failed"


# -- status ----------------------------------------------------------------------------------------


def conditions(status: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in status["conditions"]}


class TestStatus:
    def test_running_pod(self) -> None:
        status = pod_status(
            pod=make_pod(),
            init_containers=[],
            containers=[run("running", name="main")],
            phase="Running",
            pod_ip="10.0.0.2",
            host_ip="127.0.0.1",
            start_time=NOW,
            now=NOW,
        )
        assert status["phase"] == "Running"
        assert status["podIP"] == "10.0.0.2"
        assert status["podIPs"] == [{"ip": "10.0.0.2"}]
        assert status["hostIPs"] == [{"ip": "127.0.0.1"}]
        assert status["startTime"] == NOW
        assert conditions(status) == {
            "PodScheduled": "True",
            "PodReadyToStartContainers": "True",
            "Initialized": "True",
            "ContainersReady": "True",
            "Ready": "True",
        }
        (main,) = status["containerStatuses"]
        assert main["state"] == {"running": {"startedAt": NOW}}
        assert main["ready"] is True
        assert main["containerID"] == "process://42"
        assert "initContainerStatuses" not in status

    def test_not_ready_until_every_container_runs(self) -> None:
        status = pod_status(
            pod=make_pod(),
            init_containers=[],
            containers=[run("running"), run("waiting", name="d")],
            phase="Running",
            pod_ip="10.0.0.2",
            host_ip="127.0.0.1",
            start_time=NOW,
            now=NOW,
        )
        assert conditions(status)["Ready"] == "False"
        assert status["containerStatuses"][1]["state"] == {"waiting": {"reason": "ContainerCreating"}}

    def test_terminated_pod(self) -> None:
        restarted = run("terminated", code=1, last=1)
        restarted.restart_count = 1
        status = pod_status(
            pod=make_pod(),
            init_containers=[run("terminated", code=0, name="init")],
            containers=[restarted],
            phase="Failed",
            pod_ip="10.0.0.2",
            host_ip="127.0.0.1",
            start_time=NOW,
            now=LATER,
        )
        assert conditions(status)["Ready"] == "False"
        assert conditions(status)["Initialized"] == "True"
        assert conditions(status)["PodReadyToStartContainers"] == "False"
        (main,) = status["containerStatuses"]
        assert main["state"]["terminated"]["exitCode"] == 1
        assert main["state"]["terminated"]["reason"] == "Error"
        assert main["lastState"]["terminated"]["exitCode"] == 1
        assert main["restartCount"] == 1
        assert status["initContainerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"

    def test_transition_times_are_kept_and_foreign_conditions_too(self) -> None:
        pod = make_pod()
        pod["status"]["conditions"] = [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2029-12-31T00:00:00Z"},
            {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"},
        ]
        first = pod_status(
            pod=pod,
            init_containers=[],
            containers=[run("running")],
            phase="Running",
            pod_ip="10.0.0.2",
            host_ip="127.0.0.1",
            start_time=NOW,
            now=NOW,
        )
        again = pod_status(
            pod=pod,
            init_containers=[],
            containers=[run("running")],
            phase="Running",
            pod_ip="10.0.0.2",
            host_ip="127.0.0.1",
            start_time=NOW,
            now=LATER,
            previous=first,
        )
        assert again == first  # nothing changed, so nothing to write
        times = {c["type"]: c.get("lastTransitionTime") for c in again["conditions"]}
        assert times["PodScheduled"] == "2029-12-31T00:00:00Z"
        assert times["Ready"] == NOW
        assert conditions(again)["DisruptionTarget"] == "True"

    def test_reason_and_message(self) -> None:
        status = pod_status(
            pod=make_pod(),
            init_containers=[],
            containers=[run("waiting")],
            phase="Failed",
            pod_ip=None,
            host_ip="127.0.0.1",
            start_time=NOW,
            now=NOW,
            reason="Unrunnable",
            message="no command",
        )
        assert "podIP" not in status
        assert (status["reason"], status["message"]) == ("Unrunnable", "no command")


# -- nodes -----------------------------------------------------------------------------------------


class TestNode:
    def test_manifest(self) -> None:
        node = node_manifest(
            name="runner-0",
            resources=NodeResources(cpu="4", memory="8Gi", extended={"nvidia.com/gpu": "2"}),
            labels={"type": "runner"},
            host_ip="127.0.0.1",
            now=NOW,
        )
        labels = node["metadata"]["labels"]
        assert labels["kubernetes.io/hostname"] == "runner-0"
        assert labels[RUNNER_LABEL] == "true"
        assert labels["type"] == "runner"
        assert not any("kwok" in key for key in [*labels, *node["metadata"].get("annotations", {})])
        status = node["status"]
        assert status["capacity"] == status["allocatable"]
        assert status["capacity"]["nvidia.com/gpu"] == "2"
        assert status["capacity"]["cpu"] == "4"
        ready = {c["type"]: c["status"] for c in status["conditions"]}
        assert ready == {
            "Ready": "True",
            "MemoryPressure": "False",
            "DiskPressure": "False",
            "PIDPressure": "False",
        }
        assert node["spec"] == {}

    def test_node_label_options_group_by_node(self) -> None:
        got = node_label_options(
            ["n-0:example.com/rack=r0", "n-0:example.com/block=b0", "n-1:example.com/rack=r1"]
        )
        assert got == {
            "n-0": {"example.com/rack": "r0", "example.com/block": "b0"},
            "n-1": {"example.com/rack": "r1"},
        }

    @pytest.mark.parametrize("bad", ["example.com/rack=r0", ":a=b", "n-0:rack"])
    def test_node_label_options_refuse_other_shapes(self, bad: str) -> None:
        with pytest.raises(SystemExit, match=r"NODE:KEY=VALUE|KEY=VALUE"):
            node_label_options([bad])

    def test_labels_for_a_node_not_served_are_refused(self, tmp_path: Path) -> None:
        with pytest.raises(ValueError, match="n-9"):
            ProcessRunner(
                kubeconfig=tmp_path / "kubeconfig",
                node_names=["n-0"],
                workdir=tmp_path,
                node_labels={"n-9": {"example.com/rack": "r0"}},
            )

    def test_lease_is_owned_by_the_node(self) -> None:
        lease = lease_manifest(
            node="runner-0", node_uid="n-1", duration=40, renew_time="2030-01-01T00:00:00.000000Z"
        )
        assert lease["metadata"]["namespace"] == "kube-node-lease"
        assert lease["metadata"]["ownerReferences"][0]["uid"] == "n-1"
        assert lease["spec"]["holderIdentity"] == "runner-0"
