"""translators.ray: gated RayJobs -> worker JobSets, every refusal, and fuzzing for safety."""

from __future__ import annotations

import json
import re
import string
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge.api.mixing import QueueTarget, WorkloadMixingSpec
from tests.fixtures.mixing import slurm_spec, target
from tests.fixtures.ray_objects import (
    CLUSTER,
    MIXING,
    NAMESPACE,
    RAYJOB_UID,
    REQUEST_UID,
    gated,
    make_spec,
    ray_of,
    raycluster,
    rayjob,
    worker_container,
    worker_group,
)
from translators.ray import (
    ANNOTATION_GATE,
    ANNOTATION_GATED_BY,
    ANNOTATION_PRIORITY_CLASS,
    ANNOTATION_QUEUE_NAME,
    ANNOTATION_RAY_CLUSTER,
    ANNOTATION_RAY_JOB,
    ANNOTATION_WORKER_RESOURCES,
    ANNOTATION_WORKERS,
    LABEL_MANAGED_BY,
    LABEL_RAY_JOB_UID,
    MAX_JOBSET_NAME_LENGTH,
    REPLICATED_JOB,
    RefusedError,
    Translation,
    Untranslatable,
    UntranslatableCode,
    WorkerSize,
    check_entrypoint,
    escape_dollars,
    gate_of,
    gate_resource,
    gate_token,
    jobset_name,
    jobset_selector,
    requested_workers,
    target_queue,
    translate,
    worker_resources,
    worker_size,
)

DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
GATE = gate_resource(prefix="k8s-bridge-", request_uid=REQUEST_UID)
SPEC = make_spec(shared={"labels": {"site.example/owner": "ml", "ray.io/cluster": "forged"}})
RAY = ray_of(SPEC)


def served(
    job: dict[str, Any] | None = None, cluster: dict[str, Any] | None = None, **kwargs: Any
) -> Translation:
    result = translate(
        rayjob=gated(rayjob()) if job is None else job,
        raycluster=raycluster() if cluster is None else cluster,
        spec=kwargs.pop("spec", SPEC),
        mixing_name=kwargs.pop("mixing_name", MIXING),
        **kwargs,
    )
    assert isinstance(result, Translation), str(result)
    return result


def refused(job: dict[str, Any], cluster: dict[str, Any] | None = None, **kwargs: Any) -> Untranslatable:
    result = translate(
        rayjob=job,
        raycluster=raycluster() if cluster is None else cluster,
        spec=kwargs.pop("spec", SPEC),
        mixing_name=kwargs.pop("mixing_name", MIXING),
        **kwargs,
    )
    assert isinstance(result, Untranslatable), f"expected a refusal, got {result!r}"
    assert result.reason
    assert "\n" not in result.reason
    assert result.reason.isascii()
    return result


def annotated(**annotations: Any) -> dict[str, Any]:
    return gated(rayjob(annotations=annotations))


def rjob(manifest: dict[str, Any]) -> dict[str, Any]:
    (replicated,) = manifest["spec"]["replicatedJobs"]
    return replicated  # type: ignore[no-any-return]


def pod(manifest: dict[str, Any]) -> dict[str, Any]:
    return rjob(manifest)["template"]["spec"]["template"]  # type: ignore[no-any-return]


def ray_container(manifest: dict[str, Any]) -> dict[str, Any]:
    containers = pod(manifest)["spec"]["containers"]
    (main,) = [c for c in containers if c.get("command", [""])[0] == "ray"]
    return main  # type: ignore[no-any-return]


def flag(manifest: dict[str, Any], name: str) -> str | None:
    for arg in ray_container(manifest)["command"]:
        if arg.startswith(f"--{name}="):
            return arg.split("=", 1)[1]  # type: ignore[no-any-return]
    return None


# --- names and tokens ---------------------------------------------------------------------------


class TestNames:
    def test_the_token_is_the_request_uids_first_twelve_hex_digits(self) -> None:
        assert gate_token("0F8FAD5B-D9CB-469f-a165-70867728950e") == "0f8fad5bd9cb"
        assert gate_resource(prefix="k8s-bridge-", request_uid=REQUEST_UID) == "k8s-bridge-0f8fad5bd9cb"

    @given(uid=st.text(max_size=80))
    def test_any_uid_gives_twelve_lowercase_hex(self, uid: str) -> None:
        token = gate_token(uid)
        assert re.fullmatch(r"[0-9a-f]{12}", token)
        assert token == gate_token(uid)

    def test_a_non_hex_uid_is_hashed_not_cut(self) -> None:
        assert gate_token("not-a-uuid-at-all") != gate_token("not-a-uuid-at-all-either")

    def test_the_length_leaves_room_for_jobsets_pod_names(self) -> None:
        assert MAX_JOBSET_NAME_LENGTH == 39
        longest = f"{'x' * MAX_JOBSET_NAME_LENGTH}-{REPLICATED_JOB}-0-4095-abcde"
        assert len(longest) == 63

    @given(
        namespace=st.text(max_size=70),
        name=st.text(max_size=260),
        uid=st.text(max_size=40),
    )
    def test_any_identity_gives_a_short_dns_label(self, namespace: str, name: str, uid: str) -> None:
        got = jobset_name(namespace=namespace, name=name, uid=uid)
        assert DNS_1035.fullmatch(got), got
        assert len(got) <= MAX_JOBSET_NAME_LENGTH
        assert got == jobset_name(namespace=namespace, name=name, uid=uid)

    def test_namespace_name_and_uid_each_change_the_name(self) -> None:
        base = jobset_name(namespace="a", name="train", uid="u1")
        assert base.startswith("ray-train-")
        assert jobset_name(namespace="b", name="train", uid="u1") != base
        assert jobset_name(namespace="a", name="train", uid="u2") != base
        assert jobset_name(namespace="a", name="train2", uid="u1") != base

    def test_selector_names_the_uid(self) -> None:
        assert jobset_selector(RAYJOB_UID) == f"{LABEL_RAY_JOB_UID}={RAYJOB_UID}"

    def test_escaping_doubles_every_dollar(self) -> None:
        assert escape_dollars("a$(B)$$c$") == "a$$(B)$$$$c$$"


class TestGateOf:
    def test_key_and_annotation_agree(self) -> None:
        assert gate_of(gated(rayjob()), "k8s-bridge-") == GATE

    @pytest.mark.parametrize(
        ("resources", "annotation"),
        [
            (None, GATE),  # no key
            (f'{{"{GATE}": 1}}', None),  # no annotation
            (f'{{"{GATE}": 1}}', "k8s-bridge-000000000000"),  # disagree
            (f'{{"{GATE}": 1, "k8s-bridge-111111111111": 1}}', GATE),  # two gates
            (f'{{"{GATE}": 2}}', GATE),  # cannot fit on one worker
            (f'{{"{GATE}": 0}}', GATE),  # asks for nothing
            ('{"k8s-bridge-XYZ": 1}', "k8s-bridge-XYZ"),  # not a token
            ("not json", GATE),
        ],
    )
    def test_anything_else_is_no_gate(self, resources: str | None, annotation: str | None) -> None:
        job = rayjob(annotations={ANNOTATION_GATE: annotation} if annotation else None)
        if resources is not None:
            job["spec"]["entrypointResources"] = resources
        assert gate_of(job, "k8s-bridge-") is None


# --- the readers the webhook shares ----------------------------------------------------------


class TestWorkers:
    def test_default_from_the_spec(self) -> None:
        spec = make_spec(workerDefaults={"workers": 3})
        assert requested_workers(rayjob(), ray=ray_of(spec)) == 3

    def test_annotation(self) -> None:
        assert requested_workers(rayjob(annotations={ANNOTATION_WORKERS: "7"}), ray=RAY) == 7

    @pytest.mark.parametrize("value", ["0", "-1", "+3", "three", "1_0", "\u0663", "2.0", "", 5, "9" * 33])
    def test_malformed(self, value: Any) -> None:
        with pytest.raises(RefusedError) as caught:
            requested_workers(rayjob(annotations={ANNOTATION_WORKERS: value}), ray=RAY)
        assert caught.value.code is UntranslatableCode.INVALID_WORKER_COUNT
        assert "whole number from 1 to 64" in caught.value.reason

    @pytest.mark.parametrize("value", ["65", "1000000000000000000000"])
    def test_over_the_limit(self, value: str) -> None:
        with pytest.raises(RefusedError) as caught:
            requested_workers(rayjob(annotations={ANNOTATION_WORKERS: value}), ray=RAY)
        assert caught.value.code is UntranslatableCode.TOO_MANY_WORKERS

    def test_the_limit_itself_is_served(self) -> None:
        spec = make_spec(limits={"maxWorkersPerJob": 4096})
        assert requested_workers(rayjob(annotations={ANNOTATION_WORKERS: "4096"}), ray=ray_of(spec)) == 4096


class TestWorkerResources:
    def test_defaults_canonical(self) -> None:
        assert worker_resources(rayjob(), ray=RAY) == {"cpu": "1", "memory": "4Gi"}

    def test_annotation_with_a_gpu(self) -> None:
        job = rayjob(
            annotations={
                ANNOTATION_WORKER_RESOURCES: '{"cpu": "2500m", "memory": 8589934592, "nvidia.com/gpu": "1"}'
            }
        )
        got = worker_resources(job, ray=RAY)
        assert got == {"cpu": "2500m", "memory": "8Gi", "nvidia.com/gpu": "1"}
        assert worker_size(got) == WorkerSize(num_cpus=2, memory_bytes=8 * 2**30, num_gpus=1)

    def test_fractional_cpus_round_down_to_at_least_zero(self) -> None:
        assert worker_size({"cpu": "500m", "memory": "1Gi"}).num_cpus == 0
        assert worker_size({"cpu": "500m", "memory": "1Gi"}).num_gpus is None

    @pytest.mark.parametrize(
        ("raw", "code"),
        [
            ("cpu=2", UntranslatableCode.INVALID_WORKER_RESOURCES),
            ('["cpu", "2"]', UntranslatableCode.INVALID_WORKER_RESOURCES),
            ('"2"', UntranslatableCode.INVALID_WORKER_RESOURCES),
            ("[" * 3000 + "]" * 3000, UntranslatableCode.INVALID_WORKER_RESOURCES),
            (
                '{"cpu": "2", "memory": "1Gi", "x": "' + "9" * 5000 + '"}',
                UntranslatableCode.INVALID_WORKER_RESOURCES,
            ),
            ('{"cpu": "2 cores", "memory": "1Gi"}', UntranslatableCode.INVALID_WORKER_RESOURCES),
            ('{"cpu": "-1", "memory": "1Gi"}', UntranslatableCode.INVALID_WORKER_RESOURCES),
            ('{"cpu": "1e1000", "memory": "1Gi"}', UntranslatableCode.INVALID_WORKER_RESOURCES),
            ('{"cpu": "NaN", "memory": "1Gi"}', UntranslatableCode.INVALID_WORKER_RESOURCES),
            ('{"cpu": NaN, "memory": "1Gi"}', UntranslatableCode.INVALID_WORKER_RESOURCES),
            ('{"cpu": true, "memory": "1Gi"}', UntranslatableCode.INVALID_WORKER_RESOURCES),
            ('{"cpu": {"v": 1}, "memory": "1Gi"}', UntranslatableCode.INVALID_WORKER_RESOURCES),
            ('{"cpu": "2", "memory": "1Gi", "gpu": "1"}', UntranslatableCode.INVALID_WORKER_RESOURCES),
            (
                '{"cpu": "2", "memory": "1Gi", "kubernetes.io/x": "1"}',
                UntranslatableCode.INVALID_WORKER_RESOURCES,
            ),
            (
                '{"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "0.5"}',
                UntranslatableCode.INVALID_WORKER_RESOURCES,
            ),
            ('{"cpu": "2"}', UntranslatableCode.INVALID_WORKER_RESOURCES),
            ('{"cpu": "0", "memory": "1Gi"}', UntranslatableCode.INVALID_WORKER_RESOURCES),
            ('{"memory": "1Gi"}', UntranslatableCode.INVALID_WORKER_RESOURCES),
            (
                json.dumps({"cpu": "1", "memory": "1Gi", **{f"example.com/r{i}": "1" for i in range(15)}}),
                UntranslatableCode.INVALID_WORKER_RESOURCES,
            ),
            ('{"cpu": "1e100", "memory": "1Gi"}', UntranslatableCode.WORKER_TOO_LARGE),
            ('{"cpu": "1025", "memory": "1Gi"}', UntranslatableCode.WORKER_TOO_LARGE),
            ('{"cpu": "2", "memory": "5Ti"}', UntranslatableCode.WORKER_TOO_LARGE),
            (
                '{"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "100000"}',
                UntranslatableCode.WORKER_TOO_LARGE,
            ),
        ],
    )
    def test_malformed_or_huge(self, raw: str, code: UntranslatableCode) -> None:
        with pytest.raises(RefusedError) as caught:
            worker_resources(rayjob(annotations={ANNOTATION_WORKER_RESOURCES: raw}), ray=RAY)
        assert caught.value.code is code
        assert caught.value.reason.isascii()

    def test_bounds_themselves_are_served(self) -> None:
        raw = '{"cpu": "1024", "memory": "4Ti", "nvidia.com/gpu": "1024", "hugepages-2Mi": "1Gi"}'
        got = worker_resources(rayjob(annotations={ANNOTATION_WORKER_RESOURCES: raw}), ray=RAY)
        assert got == {"cpu": "1024", "hugepages-2Mi": "1Gi", "memory": "4Ti", "nvidia.com/gpu": "1024"}

    def test_defaults_without_memory_are_a_configuration_error(self) -> None:
        spec = make_spec(workerDefaults={"resources": {"cpu": "1"}})
        with pytest.raises(RefusedError) as caught:
            worker_resources(rayjob(), ray=ray_of(spec))
        assert caught.value.code is UntranslatableCode.INVALID_CONFIG


class TestQueue:
    def test_mapping_by_namespace(self) -> None:
        spec = make_spec(
            mapping={
                "rules": [{"namespaces": ["team-*"], "target": target("teams", priority="high")}],
                "default": target("ray"),
            }
        )
        assert target_queue(rayjob(), ray=ray_of(spec)) == QueueTarget(
            namespace=NAMESPACE, local_queue="teams", priority_class="high", rule=0
        )

    def test_annotations_override_queue_and_priority_not_namespace(self) -> None:
        spec = make_spec(mapping={"default": target("ray", namespace="ray-queues")})
        job = rayjob(annotations={ANNOTATION_QUEUE_NAME: "urgent", ANNOTATION_PRIORITY_CLASS: "low"})
        got = target_queue(job, ray=ray_of(spec))
        assert (got.namespace, got.local_queue, got.priority_class) == ("ray-queues", "urgent", "low")

    @pytest.mark.parametrize("value", ["Urgent", "a" * 64, "q\u00fc", "", "a/b", "$(X)", 3])
    def test_invalid_override(self, value: Any) -> None:
        for key in (ANNOTATION_QUEUE_NAME, ANNOTATION_PRIORITY_CLASS):
            with pytest.raises(RefusedError) as caught:
                target_queue(rayjob(annotations={key: value}), ray=RAY)
            assert caught.value.code is UntranslatableCode.INVALID_QUEUE


class TestEntrypoint:
    @pytest.mark.parametrize(
        ("fields", "ok"),
        [
            ({"entrypointNumCpus": 2}, True),
            ({"entrypointNumCpus": 2.5}, False),
            ({"entrypointNumGpus": 1}, False),
            ({"entrypointNumCpus": 0, "entrypointNumGpus": 0}, True),
        ],
    )
    def test_the_entrypoint_must_fit_one_worker(self, fields: dict[str, Any], ok: bool) -> None:
        size = WorkerSize(num_cpus=2, memory_bytes=2**30, num_gpus=None)
        if ok:
            check_entrypoint(rayjob(**fields), size=size)
            return
        with pytest.raises(RefusedError) as caught:
            check_entrypoint(rayjob(**fields), size=size)
        assert caught.value.code is UntranslatableCode.ENTRYPOINT_TOO_LARGE

    def test_translate_refuses_it_too(self) -> None:
        got = refused(gated(rayjob(entrypointNumCpus=8)))
        assert got.code is UntranslatableCode.ENTRYPOINT_TOO_LARGE
        assert ANNOTATION_WORKER_RESOURCES in got.reason


# --- the JobSet --------------------------------------------------------------------------------


class TestJobSet:
    def test_suspended_queued_owned(self) -> None:
        t = served()
        m = t.manifest
        assert (m["apiVersion"], m["kind"]) == ("jobset.x-k8s.io/v1alpha2", "JobSet")
        assert (
            m["metadata"]["name"] == t.name == jobset_name(namespace=NAMESPACE, name="train", uid=RAYJOB_UID)
        )
        assert m["metadata"]["namespace"] == t.namespace == NAMESPACE
        assert m["spec"]["suspend"] is True
        labels = m["metadata"]["labels"]
        assert labels["kueue.x-k8s.io/queue-name"] == "ray"
        assert "kueue.x-k8s.io/priority-class" not in labels
        assert labels[LABEL_RAY_JOB_UID] == RAYJOB_UID
        assert labels[LABEL_MANAGED_BY] == "k8s-bridge"
        assert labels["site.example/owner"] == "ml"
        assert m["metadata"]["annotations"] == {
            ANNOTATION_RAY_JOB: f"{NAMESPACE}/train",
            ANNOTATION_RAY_CLUSTER: CLUSTER,
            ANNOTATION_GATE: GATE,
        }
        (owner,) = m["metadata"]["ownerReferences"]
        assert owner == {
            "apiVersion": "ray.io/v1",
            "kind": "RayJob",
            "name": "train",
            "uid": RAYJOB_UID,
            "controller": False,
            "blockOwnerDeletion": False,
        }
        assert t.gate == GATE
        assert t.rayjob == f"{NAMESPACE}/train"

    def test_one_indexed_replicated_job_of_n_workers_that_never_restarts(self) -> None:
        t = served(gated(rayjob(annotations={ANNOTATION_WORKERS: "5"})))
        m = t.manifest
        assert m["spec"]["failurePolicy"] == {"maxRestarts": 0}
        assert m["spec"]["successPolicy"] == {"operator": "All"}
        assert m["spec"]["startupPolicy"] == {"startupPolicyOrder": "AnyOrder"}
        assert m["spec"]["network"] == {"enableDNSHostnames": True, "publishNotReadyAddresses": True}
        r = rjob(m)
        assert (r["name"], r["replicas"]) == (REPLICATED_JOB, 1)
        job = r["template"]["spec"]
        assert (job["parallelism"], job["completions"], job["completionMode"]) == (5, 5, "Indexed")
        assert job["backoffLimit"] == 0
        assert pod(m)["spec"]["restartPolicy"] == "Never"
        assert t.workers == 5

    def test_the_ray_start_command(self) -> None:
        t = served(gated(rayjob(annotations={ANNOTATION_WORKER_RESOURCES: '{"cpu": "2", "memory": "3Gi"}'})))
        main = ray_container(t.manifest)
        assert main["command"] == [
            "ray",
            "start",
            f"--address=shared-head-svc.{NAMESPACE}.svc.cluster.local:6379",
            f'--resources={{"{GATE}":1}}',
            "--num-cpus=2",
            f"--memory={3 * 2**30}",
            f'--labels={{"k8s-bridge.io/ray-gate":"{GATE}"}}',
            "--block",
        ]
        assert "args" not in main
        assert main["resources"] == {
            "requests": {"cpu": "2", "memory": "3Gi"},
            "limits": {"cpu": "2", "memory": "3Gi"},
        }
        assert t.head_address == f"shared-head-svc.{NAMESPACE}.svc.cluster.local:6379"

    def test_gpus_are_passed_only_when_asked_for(self) -> None:
        raw = '{"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "2"}'
        t = served(gated(rayjob(annotations={ANNOTATION_WORKER_RESOURCES: raw})))
        assert flag(t.manifest, "num-gpus") == "2"
        assert flag(served().manifest, "num-gpus") is None

    def test_head_service_port_and_domain(self) -> None:
        cluster = raycluster(port="6380", service=None)
        t = served(cluster=cluster, cluster_domain="corp.internal")
        assert flag(t.manifest, "address") == f"shared-head-svc.{NAMESPACE}.svc.corp.internal:6380"
        t = served(cluster=raycluster(port=7000, service="custom-svc"))
        assert flag(t.manifest, "address") == f"custom-svc.{NAMESPACE}.svc.cluster.local:7000"

    @pytest.mark.parametrize("port", ["0", "65536", "63$(X)", "abc", True, -1])
    def test_a_bad_port_is_refused(self, port: Any) -> None:
        got = refused(gated(rayjob()), raycluster(port=port))
        assert got.code is UntranslatableCode.INVALID_CLUSTER

    @pytest.mark.parametrize("service", ["Bad_Name", "svc$(X)", "a" * 64, 5])
    def test_a_bad_service_name_is_refused(self, service: Any) -> None:
        got = refused(gated(rayjob()), raycluster(service=service))
        assert got.code is UntranslatableCode.INVALID_CLUSTER

    def test_ray_start_args_are_appended_literally(self) -> None:
        spec = make_spec(workerTemplate={"rayStartArgs": ["--object-store-memory=1000000", "--x=$(SECRET)"]})
        command = ray_container(served(spec=spec).manifest)["command"]
        assert command[-3:] == ["--block", "--object-store-memory=1000000", "--x=$$(SECRET)"]

    def test_nothing_of_kuberays_stays_on_the_pod(self) -> None:
        t = served()
        meta = pod(t.manifest)["metadata"]
        assert not [k for k in meta["labels"] if k.startswith("ray.io/")]
        assert not [k for k in meta["annotations"] if k.startswith("ray.io/")]
        assert not [k for k in t.manifest["metadata"]["labels"] if k.startswith("ray.io/")]
        assert meta["labels"]["app"] == "ray"
        assert meta["labels"][LABEL_RAY_JOB_UID] == RAYJOB_UID
        assert meta["annotations"]["example.com/note"] == "from the cluster"
        assert meta["annotations"][ANNOTATION_GATE] == GATE
        assert meta["annotations"][ANNOTATION_RAY_CLUSTER] == CLUSTER
        main = ray_container(t.manifest)
        names = [e["name"] for e in main["env"]]
        assert "RAY_CLOUD_INSTANCE_ID" not in names
        assert {"name": "KEEP", "value": "$(MY_POD_IP):8080"} in main["env"]  # the template's own meaning
        spec = pod(t.manifest)["spec"]
        assert "nodeName" not in spec
        assert main["lifecycle"]["preStop"]["exec"]["command"][-1] == "ray stop"

    def test_forged_identity_and_queue_labels_in_the_template_are_dropped(self) -> None:
        group = worker_group("small")
        group["template"]["metadata"]["labels"].update(
            {
                LABEL_RAY_JOB_UID: "someone-else",
                "kueue.x-k8s.io/queue-name": "vip",
                "bad key!": "x",
                "u": "\u00e9t\u00e9",
            }
        )
        group["template"]["metadata"]["annotations"]["kueue.x-k8s.io/podset-required-topology"] = "rack"
        labels = pod(served(cluster=raycluster(groups=[group])).manifest)["metadata"]["labels"]
        assert labels[LABEL_RAY_JOB_UID] == RAYJOB_UID
        assert "kueue.x-k8s.io/queue-name" not in labels
        assert "bad key!" not in labels
        assert labels["u"] == "t"  # sanitized: ___t_ trimmed to an alphanumeric start and end

    def test_the_named_worker_group(self) -> None:
        spec = make_spec(workerTemplate={"workerGroup": "gpu"})
        t = served(spec=spec)
        assert t.worker_group == "gpu"
        assert ray_container(t.manifest)["image"] == "ray:gpu"

    def test_a_missing_named_group_is_refused(self) -> None:
        spec = make_spec(workerTemplate={"workerGroup": "huge"})
        got = refused(gated(rayjob()), spec=spec)
        assert got.code is UntranslatableCode.NO_WORKER_GROUP
        assert "small,gpu" in got.reason

    def test_the_first_group_by_default(self) -> None:
        t = served()
        assert t.worker_group == "small"
        assert ray_container(t.manifest)["image"] == "rayproject/ray:2.60.0"

    def test_a_head_only_cluster_lends_its_head_template(self) -> None:
        t = served(cluster=raycluster(groups=[]))
        assert t.worker_group is None
        assert any("head group" in n for n in t.notes)
        main = ray_container(t.manifest)
        assert main["name"] == "ray-head"
        assert "ray.io/node-type" not in pod(t.manifest)["metadata"]["labels"]

    def test_the_ray_container_is_the_named_one_else_the_first(self) -> None:
        sidecar = {"name": "logs", "image": "fluent-bit", "args": ["-c", "x"]}
        group = worker_group("small", containers=[sidecar, worker_container()])
        containers = pod(served(cluster=raycluster(groups=[group])).manifest)["spec"]["containers"]
        assert containers[0] == sidecar  # untouched
        assert containers[1]["command"][0] == "ray"
        group = worker_group("small", containers=[{"name": "main", "image": "x"}, dict(sidecar)])
        containers = pod(served(cluster=raycluster(groups=[group])).manifest)["spec"]["containers"]
        assert containers[0]["command"][0] == "ray"
        assert containers[1] == sidecar

    def test_a_template_without_containers_is_refused(self) -> None:
        got = refused(gated(rayjob()), raycluster(groups=[worker_group("small", containers=[])]))
        assert got.code is UntranslatableCode.NO_RAY_CONTAINER

    def test_overrides(self) -> None:
        spec = make_spec(
            workerTemplate={
                "image": "ray:site",
                "env": [{"name": "KEEP", "value": "site"}, {"name": "NEW", "value": "1"}],
                "volumes": [{"name": "data", "emptyDir": {}}],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                "nodeSelector": {"pool": "bridge", "zone": "a"},
                "tolerations": [{"key": "bridge", "operator": "Exists"}],
                "serviceAccountName": "ray-worker",
                "priorityClassName": "batch",
                "securityContext": {"runAsNonRoot": True},
            }
        )
        t = served(spec=spec)
        main = ray_container(t.manifest)
        assert main["image"] == "ray:site"
        assert [e for e in main["env"] if e["name"] in ("KEEP", "NEW")] == [
            {"name": "KEEP", "value": "site"},
            {"name": "NEW", "value": "1"},
        ]
        assert main["volumeMounts"] == [{"name": "data", "mountPath": "/data"}]
        assert main["securityContext"] == {"runAsNonRoot": True}
        spec_ = pod(t.manifest)["spec"]
        assert spec_["volumes"] == [{"name": "data", "emptyDir": {}}]
        assert spec_["nodeSelector"] == {"pool": "bridge", "zone": "a"}
        assert spec_["tolerations"] == [{"key": "bridge", "operator": "Exists"}]
        assert spec_["serviceAccountName"] == "ray-worker"
        assert spec_["priorityClassName"] == "batch"

    def test_the_cloud_instance_id_cannot_come_back_through_the_overrides(self) -> None:
        spec = make_spec(workerTemplate={"env": [{"name": "RAY_CLOUD_INSTANCE_ID", "value": "x"}]})
        names = [e["name"] for e in ray_container(served(spec=spec).manifest)["env"]]
        assert "RAY_CLOUD_INSTANCE_ID" not in names

    def test_queue_and_priority_annotations(self) -> None:
        t = served(annotated(**{ANNOTATION_QUEUE_NAME: "urgent", ANNOTATION_PRIORITY_CLASS: "high"}))
        labels = t.manifest["metadata"]["labels"]
        assert labels["kueue.x-k8s.io/queue-name"] == "urgent"
        assert labels["kueue.x-k8s.io/priority-class"] == "high"

    def test_another_target_namespace_has_no_owner_reference(self) -> None:
        spec = make_spec(mapping={"default": target("ray", namespace="ray-queues")})
        t = served(spec=spec)
        assert t.namespace == t.manifest["metadata"]["namespace"] == "ray-queues"
        assert "ownerReferences" not in t.manifest["metadata"]
        assert flag(t.manifest, "address") == f"shared-head-svc.{NAMESPACE}.svc.cluster.local:6379"

    def test_another_target_namespace_refuses_namespaced_references(self) -> None:
        spec = make_spec(mapping={"default": target("ray", namespace="ray-queues")})
        group = worker_group("small")
        group["template"]["spec"]["volumes"] = [{"name": "creds", "secret": {"secretName": "team-a-token"}}]
        got = refused(gated(rayjob()), raycluster(groups=[group]), spec=spec)
        assert got.code is UntranslatableCode.CROSS_NAMESPACE_REFERENCE
        assert "volumes[].secret" in got.reason
        # The same template in its own namespace is the cluster owner's business.
        assert served(cluster=raycluster(groups=[group])).manifest

    def test_another_target_namespace_drops_the_clusters_service_account(self) -> None:
        spec = make_spec(mapping={"default": target("ray", namespace="ray-queues")})
        group = worker_group("small")
        group["template"]["spec"]["serviceAccountName"] = "team-a-admin"
        assert (
            "serviceAccountName"
            not in pod(served(spec=spec, cluster=raycluster(groups=[group])).manifest)["spec"]
        )
        assert (
            pod(served(cluster=raycluster(groups=[group])).manifest)["spec"]["serviceAccountName"]
            == "team-a-admin"
        )

    def test_active_deadline_bounds_the_execution_time(self) -> None:
        labels = served(gated(rayjob(activeDeadlineSeconds=3600))).manifest["metadata"]["labels"]
        assert labels["kueue.x-k8s.io/max-exec-time-seconds"] == "3600"
        assert "kueue.x-k8s.io/max-exec-time-seconds" not in served().manifest["metadata"]["labels"]

    def test_deterministic(self) -> None:
        assert served() == served()


class TestRefusals:
    def test_no_ray_section(self) -> None:
        spec = WorkloadMixingSpec.model_validate({"slurm": slurm_spec()})
        assert refused(gated(rayjob()), spec=spec).code is UntranslatableCode.INVALID_CONFIG

    def test_a_bad_cluster_domain(self) -> None:
        got = refused(gated(rayjob()), cluster_domain="bad domain$(X)")
        assert got.code is UntranslatableCode.INVALID_CONFIG

    def test_no_cluster_selector(self) -> None:
        assert refused(gated(rayjob(cluster=None))).code is UntranslatableCode.NO_CLUSTER_SELECTOR
        job = gated(rayjob(cluster=None, clusterSelector={"app": "shared"}))
        assert refused(job).code is UntranslatableCode.NO_CLUSTER_SELECTOR

    def test_another_cluster(self) -> None:
        assert refused(gated(rayjob(cluster="other"))).code is UntranslatableCode.CLUSTER_MISMATCH
        elsewhere = raycluster(namespace="team-b")
        assert refused(gated(rayjob()), elsewhere).code is UntranslatableCode.CLUSTER_MISMATCH

    def test_no_gate(self) -> None:
        assert refused(rayjob()).code is UntranslatableCode.GATE_MISSING
        tampered = gated(rayjob())
        tampered["spec"]["entrypointResources"] = "{}"
        assert refused(tampered).code is UntranslatableCode.GATE_MISSING

    def test_gated_by_another_mixing(self) -> None:
        got = refused(gated(rayjob()), mixing_name="other-site")
        assert got.code is UntranslatableCode.GATED_BY_OTHER

    @pytest.mark.parametrize(
        ("field", "value"),
        [("uid", None), ("uid", "x" * 64), ("name", "Bad_Name"), ("namespace", "a" * 64), ("name", None)],
    )
    def test_identity(self, field: str, value: Any) -> None:
        job = gated(rayjob())
        if value is None:
            del job["metadata"][field]
        else:
            job["metadata"][field] = value
        assert refused(job).code is UntranslatableCode.INVALID_RAYJOB

    def test_annotation_refusals_carry_their_codes(self) -> None:
        assert refused(annotated(**{ANNOTATION_WORKERS: "65"})).code is UntranslatableCode.TOO_MANY_WORKERS
        assert refused(annotated(**{ANNOTATION_WORKERS: "x"})).code is UntranslatableCode.INVALID_WORKER_COUNT
        got = refused(annotated(**{ANNOTATION_WORKER_RESOURCES: "{"}))
        assert got.code is UntranslatableCode.INVALID_WORKER_RESOURCES
        assert refused(annotated(**{ANNOTATION_QUEUE_NAME: "Q"})).code is UntranslatableCode.INVALID_QUEUE

    def test_limits_at_the_names_limits(self) -> None:
        namespace, name = "n" * 63, "a" + "." * 0 + "b" * 252
        job = gated(rayjob(name=name, namespace=namespace))
        t = served(job, raycluster(namespace=namespace))
        assert len(t.name) <= MAX_JOBSET_NAME_LENGTH
        assert t.manifest["metadata"]["annotations"][ANNOTATION_RAY_JOB] == f"{namespace}/{name}"
        assert flag(t.manifest, "address") == f"shared-head-svc.{namespace}.svc.cluster.local:6379"


# --- fuzzing -----------------------------------------------------------------------------------

HOSTILE = st.sampled_from(
    ["$(SECRET)", "$$", "${X}", "`id`", "'", '"', "\n", "\\", "\u00e9", "\u202e", "\x00"]
)
TEXT = st.one_of(
    st.text(max_size=40),
    st.text(alphabet=string.ascii_lowercase + string.digits + "-.", max_size=70),
    st.lists(st.one_of(HOSTILE, st.text(max_size=4)), max_size=6).map("".join),
)
QUANTITY = st.one_of(
    st.sampled_from(["1", "500m", "2", "4Gi", "1e3", "0", "-1", "1e999", "1Ei", "10000", ".5", "1.", "+2"]),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    TEXT,
)
RESOURCES = st.one_of(
    TEXT,
    st.dictionaries(
        st.one_of(
            st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "ephemeral-storage", "hugepages-2Mi"]), TEXT
        ),
        QUANTITY,
        max_size=5,
    ).map(json.dumps),
    st.builds(
        lambda cpu, mem: json.dumps({"cpu": cpu, "memory": mem}),
        QUANTITY,
        QUANTITY,
    ),
)
ANNOTATIONS = st.fixed_dictionaries(
    {},
    optional={
        ANNOTATION_WORKERS: st.one_of(TEXT, st.integers(min_value=-5, max_value=10**30).map(str)),
        ANNOTATION_WORKER_RESOURCES: RESOURCES,
        ANNOTATION_QUEUE_NAME: st.one_of(TEXT, st.just("urgent")),
        ANNOTATION_PRIORITY_CLASS: TEXT,
        ANNOTATION_GATED_BY: st.one_of(st.just(MIXING), TEXT),
    },
)
METADATA_VALUES = st.dictionaries(TEXT, TEXT, max_size=4)
FUZZ_SPEC = make_spec(
    limits={"maxWorkersPerJob": 4096},
    workerTemplate={"rayStartArgs": ["--x=$(SECRET)", "--y=$$", "--z=`id`"]},
    shared={"labels": {"ray.io/cluster": "forged", "site.example/owner": "ml"}},
)


@st.composite
def inputs(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    namespace = draw(st.sampled_from([NAMESPACE, "n" * 63]))
    name = draw(st.sampled_from(["train", "a" * 253, "x.y-z"]))
    job = gated(rayjob(name=name, namespace=namespace, annotations=draw(ANNOTATIONS)))
    group = worker_group(draw(st.sampled_from(["small", "g" * 63])))
    group["template"]["metadata"]["labels"].update(draw(METADATA_VALUES))
    group["template"]["metadata"]["annotations"].update(draw(METADATA_VALUES))
    group["template"]["spec"]["containers"][0]["env"].append({"name": "HOSTILE", "value": draw(TEXT)})
    cluster = raycluster(
        namespace=namespace,
        groups=draw(st.sampled_from([[group], []])),
        port=draw(st.one_of(st.none(), st.integers(min_value=-1, max_value=70000), TEXT)),
        service=draw(st.one_of(st.none(), st.just("shared-head-svc"), TEXT)),
    )
    return job, cluster


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(value, list | tuple):
        return [s for item in value for s in _strings(item)]
    return []


SERVABLE_ANNOTATIONS = st.fixed_dictionaries(
    {},
    optional={
        ANNOTATION_WORKERS: st.integers(min_value=1, max_value=4096).map(str),
        ANNOTATION_WORKER_RESOURCES: st.builds(
            lambda cpu, mem, gpu: json.dumps(
                {"cpu": cpu, "memory": mem, **({"nvidia.com/gpu": gpu} if gpu else {})}
            ),
            st.sampled_from(["1", "250m", "1024", "7.5", 3]),
            st.sampled_from(["1", "4Ti", "1.5Gi", "1000000", 2**33]),
            st.sampled_from([None, "1", "8", 0]),
        ),
        ANNOTATION_QUEUE_NAME: st.sampled_from(["urgent", "q" * 63, "a.b-c"]),
    },
)


@st.composite
def servable(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    """Valid requests whose every free-text field of the cluster's template is hostile."""
    job, cluster = draw(inputs())
    job["metadata"]["annotations"] = {
        k: v for k, v in job["metadata"]["annotations"].items() if k in (ANNOTATION_GATE, ANNOTATION_GATED_BY)
    }
    job["metadata"]["annotations"].update(draw(SERVABLE_ANNOTATIONS))
    job["metadata"]["annotations"][ANNOTATION_GATED_BY] = MIXING
    cluster["spec"]["headGroupSpec"]["rayStartParams"].pop("port", None)
    cluster["status"]["head"] = {"serviceName": "shared-head-svc"}
    return job, cluster


def check_translation(job: dict[str, Any], cluster: dict[str, Any]) -> Translation | Untranslatable:
    """The safety properties every result must have; returns the result for further checks."""
    result = translate(rayjob=job, raycluster=cluster, spec=FUZZ_SPEC, mixing_name=MIXING)
    assert result == translate(rayjob=job, raycluster=cluster, spec=FUZZ_SPEC, mixing_name=MIXING)
    if isinstance(result, Untranslatable):
        assert result.reason.isascii()
        assert "\n" not in result.reason
        assert len(result.reason) < 600
        return result
    m = result.manifest
    json.dumps(m, allow_nan=False)  # plain JSON data
    assert DNS_1035.fullmatch(m["metadata"]["name"])
    assert len(m["metadata"]["name"]) <= MAX_JOBSET_NAME_LENGTH
    template = pod(m)
    for labels in (
        m["metadata"]["labels"],
        template["metadata"]["labels"],
        rjob(m)["template"]["metadata"]["labels"],
    ):
        for key, value in labels.items():
            assert LABEL_KEY.fullmatch(key), key
            assert len(key) <= 316
            assert len(value) <= 63, value
            assert LABEL_VALUE.fullmatch(value), value
            assert not key.startswith("ray.io/"), key
    main = ray_container(m)
    for arg in main["command"]:
        assert "$" not in arg.replace("$$", ""), arg  # every $ escaped: nothing for the kubelet to expand
    assert main["command"][-3:] == ["--x=$$(SECRET)", "--y=$$$$", "--z=`id`"]
    assert "args" not in main
    assert all(e["name"] != "RAY_CLOUD_INSTANCE_ID" for e in main.get("env", []))
    assert main["resources"]["requests"] == main["resources"]["limits"] == result.resources
    assert {"cpu", "memory"} <= set(result.resources)
    spec = rjob(m)["template"]["spec"]
    assert spec["parallelism"] == spec["completions"] == result.workers >= 1
    assert template["spec"]["restartPolicy"] == "Never"
    assert template["metadata"]["labels"][LABEL_RAY_JOB_UID] == RAYJOB_UID
    assert m["spec"]["suspend"] is True
    # Env values are the authors' (KubeRay's semantics), copied exactly.
    hostile = [e for e in main.get("env", []) if e["name"] == "HOSTILE"]
    expected = [e for e in job_env(cluster) if e["name"] == "HOSTILE"]
    assert hostile == expected
    return result


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=inputs())
def test_any_rayjob_gives_a_valid_jobset_or_a_reason(case: tuple[dict[str, Any], dict[str, Any]]) -> None:
    check_translation(*case)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=servable())
def test_hostile_template_text_never_refuses_nor_leaks(case: tuple[dict[str, Any], dict[str, Any]]) -> None:
    result = check_translation(*case)
    assert isinstance(result, Translation), str(result)


def job_env(cluster: dict[str, Any]) -> list[dict[str, Any]]:
    groups = cluster["spec"]["workerGroupSpecs"]
    if not groups:
        return []
    return groups[0]["template"]["spec"]["containers"][0]["env"]  # type: ignore[no-any-return]
