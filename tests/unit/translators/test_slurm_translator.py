"""translators.slurm: real REST jobs -> JobSets, every unservable case, and fuzzing for safety."""

from __future__ import annotations

import json
import re
import string
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge.api.mixing import WorkloadMixingSpec
from bridge.api.slurm_job import Gres, JobState, SlurmJob
from bridge.sandbox.runner import container_command
from bridge.slurmrest.versions import adapter_for
from tests.fixtures.mixing import example_mixing, slurm_spec, target
from translators.slurm import (
    ANNOTATION_NODES,
    ANNOTATION_SHAPE,
    ENV_NODE_NAME,
    FINALIZER,
    LABEL_CLUSTER,
    LABEL_JOB_ID,
    LABEL_RUN,
    MAX_JOBSET_NAME_LENGTH,
    REPLICATED_JOB,
    SHAPE_PREFIX,
    SLURMD_ENTRY,
    SLURMD_ENTRY_NAME,
    Translation,
    TranslationOptions,
    Untranslatable,
    UntranslatableCode,
    is_own_node_name,
    job_feature,
    job_selector,
    jobset_name,
    node_name,
    node_name_job_id,
    node_names,
    shape_fingerprint,
    translate,
)

DATA = Path(__file__).parents[1] / "slurm" / "data"
DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


def load_job(name: str, version: str) -> SlurmJob:
    body = json.loads((DATA / name).read_text(encoding="utf-8"))
    (job,) = adapter_for(version).parse_jobs(body).jobs
    return job


def make_spec(**overrides: Any) -> WorkloadMixingSpec:
    shared = overrides.pop("shared", None)
    document: dict[str, Any] = {"slurm": slurm_spec(**overrides)}
    if shared is not None:
        document["shared"] = shared
    return WorkloadMixingSpec.model_validate(document)


SPEC = make_spec(podTemplate={"image": "slurmd:24.11", "overhead": {"cpu": "100m", "memory": "256Mi"}})


def served(job: SlurmJob, spec: WorkloadMixingSpec = SPEC, **kwargs: Any) -> Translation:
    result = translate(job, spec, **kwargs)
    assert isinstance(result, Translation), str(result)
    return result


def refused(job: SlurmJob, spec: WorkloadMixingSpec = SPEC, **kwargs: Any) -> Untranslatable:
    result = translate(job, spec, **kwargs)
    assert isinstance(result, Untranslatable), f"expected a refusal, got {result!r}"
    assert result.reason
    assert "\n" not in result.reason
    assert result.reason.isascii()
    return result


def held(**fields: Any) -> SlurmJob:
    """A held 1-node job in the bridged partition; keyword arguments replace fields."""
    base: dict[str, Any] = {
        "job_id": 42,
        "name": "demo",
        "partition": "bridge",
        "state": JobState.PENDING,
        "hold": True,
        "state_reason": "JobHeldUser",
        "node_count": 1,
        "cpus": 1,
        "memory_per_node_mb": 1000,
    }
    base.update(fields)
    return SlurmJob(**base)


def rjob(manifest: dict[str, Any]) -> dict[str, Any]:
    (replicated,) = manifest["spec"]["replicatedJobs"]
    return replicated  # type: ignore[no-any-return]


def container(manifest: dict[str, Any]) -> dict[str, Any]:
    (main,) = rjob(manifest)["template"]["spec"]["template"]["spec"]["containers"]
    return main  # type: ignore[no-any-return]


def conf(manifest: dict[str, Any]) -> str:
    args: list[str] = container(manifest)["args"]
    return args[args.index("--conf") + 1]


# --- the real REST jobs of the reference ------------------------------------------------------


class TestRealJobs:
    def test_job17_one_node_gpu_mem_per_cpu(self) -> None:
        # sbatch --hold -N1 -n2 -c1 --mem-per-cpu=200 --gres=gpu:1 -t 1:30:00
        t = served(load_job("rest-v0.0.38-job17.json", "v0.0.38"))
        assert t.name == "slurm-hpc-17"
        assert t.namespace == "k8s-bridge"
        assert t.node_names == ("b17-0",)
        assert conf(t.manifest) == "CPUs=2 RealMemory=400 Gres=gpu:1 Feature=k8sbridge,bridge-job-17"
        assert t.requests == {"cpu": "2100m", "memory": "656Mi", "nvidia.com/gpu": "1"}
        assert container(t.manifest)["resources"] == {"requests": t.requests, "limits": t.requests}
        assert t.max_exec_time_seconds == 90 * 60 + 300
        assert t.manifest["metadata"]["labels"]["kueue.x-k8s.io/max-exec-time-seconds"] == "5700"

    def test_job18_two_nodes_gpus_per_node(self) -> None:
        # -N2 --ntasks-per-node=1 --gpus-per-node=1 --mem=300
        t = served(load_job("rest-v0.0.38-job18.json", "v0.0.38"))
        assert t.node_names == ("b18-0", "b18-1")
        assert conf(t.manifest) == "CPUs=1 RealMemory=300 Gres=gpu:1 Feature=k8sbridge,bridge-job-18"
        spec = rjob(t.manifest)["template"]["spec"]
        assert (spec["parallelism"], spec["completions"], spec["completionMode"]) == (2, 2, "Indexed")

    def test_job19_gpus_per_job_cpus_and_memory_per_gpu(self) -> None:
        # -N1 -n1 --gpus=1 --cpus-per-gpu=2 --mem-per-gpu=100
        t = served(load_job("rest-v0.0.38-job19.json", "v0.0.38"))
        assert conf(t.manifest) == "CPUs=2 RealMemory=100 Gres=gpu:1 Feature=k8sbridge,bridge-job-19"

    def test_job20_exclusive_whole_node_memory(self) -> None:
        # -N2 --ntasks-per-node=2 -c2 --mem=0 --exclusive
        t = served(load_job("rest-v0.0.38-job20.json", "v0.0.38"))
        assert t.node.cpus == 4
        assert t.node.memory_mb == 4 * 1024  # default_memory_mb_per_cpu x CPUs
        assert any("--exclusive" in note for note in t.notes)
        small = served(
            load_job("rest-v0.0.38-job20.json", "v0.0.38"),
            options=TranslationOptions(default_memory_mb_per_cpu=500),
        )
        assert small.node.memory_mb == 2000

    def test_same_job_in_every_data_parser_version_gives_the_same_jobset(self) -> None:
        manifests = [
            served(load_job(f"rest-24.11-jobs-held-{v}.json", v)).manifest
            for v in ("v0.0.40", "v0.0.41", "v0.0.42")
        ]
        assert manifests[0] == manifests[1] == manifests[2]
        assert "kueue.x-k8s.io/max-exec-time-seconds" not in manifests[0]["metadata"]["labels"]  # no limit

    def test_requeue_held_job_translates_like_the_fresh_one(self) -> None:
        job = load_job("rest-24.11-job2-requeuehold-v0.0.42.json", "v0.0.42")
        # the reference run pinned to a hand-made node "dyn1": not a node the bridge made
        assert refused(job).code is UntranslatableCode.REQUIRED_NODES
        # after the bridge's own pin (of the run before) and a requeue-hold, required nodes and
        # constraint are its own: the job translates as if never pinned
        assert job.restart_count == 1
        first_run = tuple(node_name(2, i) for i in range(job.node_count or 0))
        fresh = job.model_copy(update={"required_nodes": (), "features": ""})
        again = job.model_copy(update={"required_nodes": first_run, "features": job_feature(2)})
        assert served(again).manifest == served(fresh).manifest

    def test_a_later_run_gets_a_jobset_and_nodes_of_other_names(self) -> None:
        """What slurmctld still sends a requeued job's previous nodes (their run's termination) must
        not reach the next run's, nor MultiKueue take a worker's stale copy for the new JobSet."""
        first = served(held(node_count=2))
        later = served(held(node_count=2, restart_count=3))
        assert (first.name, first.node_names) == ("slurm-hpc-42", ("b42-0", "b42-1"))
        assert (later.name, later.node_names) == ("slurm-hpc-42-r3", ("b42r3-0", "b42r3-1"))
        pod = later.manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        assert env["K8S_BRIDGE_NODE_NAME"] == "b42r3-$(K8S_BRIDGE_NODE_INDEX)"
        assert pod["metadata"]["labels"][LABEL_RUN] == "3"
        assert later.manifest["metadata"]["annotations"][ANNOTATION_NODES] == "b42r3-0,b42r3-1"
        assert (
            LABEL_RUN
            not in first.manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"][
                "labels"
            ]
        )
        assert all(is_own_node_name(42, n) for n in (*first.node_names, *later.node_names))
        assert not any(is_own_node_name(4, n) or is_own_node_name(421, n) for n in later.node_names)
        assert [node_name_job_id(n) for n in ("b42r3-1", "b42-0", "b42r-0", "b42-r3-0", "c42-0")] == [
            42, 42, None, None, None,
        ]  # fmt: skip

    def test_the_site_example_configuration(self) -> None:
        spec = WorkloadMixingSpec.model_validate(example_mixing()["spec"])
        t = served(load_job("rest-v0.0.38-job18.json", "v0.0.38"), spec)
        pod = rjob(t.manifest)["template"]["spec"]["template"]
        assert t.namespace == t.manifest["metadata"]["namespace"] == t.queue.namespace
        assert pod["spec"]["volumes"]
        assert container(t.manifest)["volumeMounts"]
        for key, value in spec.shared.labels.items():
            assert t.manifest["metadata"]["labels"][key] == value
            assert pod["metadata"]["labels"][key] == value


# --- the JobSet's shape -----------------------------------------------------------------------


class TestManifest:
    def test_kueue_counts_one_pod_per_node(self) -> None:
        t = served(held(node_count=3, cpus=3))
        replicated = rjob(t.manifest)
        spec = replicated["template"]["spec"]
        assert replicated["name"] == REPLICATED_JOB
        assert replicated["replicas"] * min(spec["parallelism"], spec["completions"]) == 3

    def test_jobset_defaults_written_out_and_suspended(self) -> None:
        m = served(held()).manifest
        assert (m["apiVersion"], m["kind"]) == ("jobset.x-k8s.io/v1alpha2", "JobSet")
        assert m["spec"]["suspend"] is True
        assert m["spec"]["network"] == {"enableDNSHostnames": True, "publishNotReadyAddresses": True}
        assert m["spec"]["successPolicy"] == {"operator": "All"}
        assert m["spec"]["startupPolicy"] == {"startupPolicyOrder": "AnyOrder"}
        assert m["spec"]["failurePolicy"] == {"maxRestarts": 0}
        assert rjob(m)["template"]["spec"]["template"]["spec"]["restartPolicy"] == "OnFailure"
        assert m["metadata"]["finalizers"] == [FINALIZER]

    def test_labels_tie_the_jobset_to_cluster_and_job(self) -> None:
        m = served(held(job_id=7)).manifest
        labels = m["metadata"]["labels"]
        assert labels[LABEL_CLUSTER] == "hpc"
        assert labels[LABEL_JOB_ID] == "7"
        assert labels["kueue.x-k8s.io/queue-name"] == "hpc"
        pod_labels = rjob(m)["template"]["spec"]["template"]["metadata"]["labels"]
        assert job_selector("hpc", 7) == f"{LABEL_CLUSTER}=hpc,{LABEL_JOB_ID}=7"
        assert {LABEL_CLUSTER: "hpc", LABEL_JOB_ID: "7"}.items() <= pod_labels.items()

    def test_slurmd_argv_is_a_list_and_the_kubelet_expansion_names_each_node(self) -> None:
        t = served(held(job_id=42, node_count=2, cpus=4))
        main = container(t.manifest)
        assert main["command"] == ["/bin/sh", "-c", SLURMD_ENTRY, SLURMD_ENTRY_NAME, "slurmd"]
        assert main["args"][:4] == ["-D", "-Z", "-N", f"$({ENV_NODE_NAME})"]
        names = []
        for index in range(2):
            pod = {
                "metadata": {
                    "name": f"slurm-hpc-42-slurmd-0-{index}-abcde",
                    "annotations": {"batch.kubernetes.io/job-completion-index": str(index)},
                },
                "spec": rjob(t.manifest)["template"]["spec"]["template"]["spec"],
            }
            argv, _ = container_command(
                pod=pod, container=main, pod_ip="10.0.0.1", host_ip="10.0.0.2", base_env={}
            )
            assert argv[4:6] == ["slurmd", "-D"]
            assert argv[argv.index("--conf-server") + 1] == "slurmctld:6817"
            names.append(argv[argv.index("-N") + 1])
        assert tuple(names) == t.node_names == ("b42-0", "b42-1")

    def test_pod_template_from_config(self) -> None:
        spec = make_spec(
            podTemplate={
                "image": "img:1",
                "imagePullPolicy": "IfNotPresent",
                "command": ["/entrypoint", "slurmd"],
                "extraArgs": ["-v"],
                "nodeSelector": {"pool": "hpc"},
                "tolerations": [{"key": "hpc", "operator": "Exists"}],
                "volumes": [{"name": "munge", "secret": {"secretName": "munge"}}],
                "volumeMounts": [{"name": "munge", "mountPath": "/etc/munge"}],
                "env": [{"name": "TZ", "value": "UTC"}],
                "serviceAccountName": "slurmd",
                "securityContext": {"privileged": False},
                "podSecurityContext": {"runAsUser": 0},
                "priorityClassName": "hpc-pods",
            },
            shared={"labels": {"team": "hpc"}, "annotations": {"note": "x"}},
        )
        m = served(held(), spec).manifest
        pod = rjob(m)["template"]["spec"]["template"]
        main = container(m)
        assert main["command"][4:] == ["/entrypoint", "slurmd"]
        assert main["args"][-1] == "-v"
        assert main["image"] == "img:1"
        assert main["imagePullPolicy"] == "IfNotPresent"
        assert main["env"][-1] == {"name": "TZ", "value": "UTC"}
        assert main["volumeMounts"] == [{"name": "munge", "mountPath": "/etc/munge"}]
        assert main["securityContext"] == {"privileged": False}
        assert pod["spec"]["nodeSelector"] == {"pool": "hpc"}
        assert pod["spec"]["tolerations"] == [{"key": "hpc", "operator": "Exists"}]
        assert pod["spec"]["volumes"] == [{"name": "munge", "secret": {"secretName": "munge"}}]
        assert pod["spec"]["serviceAccountName"] == "slurmd"
        assert pod["spec"]["securityContext"] == {"runAsUser": 0}
        assert pod["spec"]["priorityClassName"] == "hpc-pods"
        assert m["metadata"]["labels"]["team"] == pod["metadata"]["labels"]["team"] == "hpc"
        assert m["metadata"]["annotations"]["note"] == pod["metadata"]["annotations"]["note"] == "x"

    def test_mapping_rules_pick_queue_namespace_and_priority(self) -> None:
        spec = make_spec(
            partitions=["bridge", "gpu"],
            mapping={
                "rules": [
                    {
                        "match": {"accounts": ["physics"]},
                        "target": target("phys", namespace="physics", priority="high"),
                    }
                ],
                "default": target("hpc"),
            },
        )
        t = served(held(account="physics", partition="gpu"), spec)
        assert (t.namespace, t.queue.local_queue, t.queue.priority_class) == ("physics", "phys", "high")
        labels = t.manifest["metadata"]["labels"]
        assert labels["kueue.x-k8s.io/priority-class"] == "high"
        assert labels["bridge.k8s-bridge.io/slurm-partition"] == "gpu"
        assert served(held(account="chem"), spec).namespace == "k8s-bridge"

    def test_multi_partition_job_uses_its_first_bridged_partition(self) -> None:
        assert served(held(partition="debug,bridge")).partition == "bridge"

    def test_topology_per_partition_and_for_one_switch(self) -> None:
        spec = make_spec(
            topology={
                "partitions": [{"partition": "bridge", "preferred": "example.com/rack"}],
                "switches": {"required": "example.com/block"},
            }
        )
        pod = rjob(served(held(), spec).manifest)["template"]["spec"]["template"]
        assert pod["metadata"]["annotations"] == {
            "kueue.x-k8s.io/podset-preferred-topology": "example.com/rack"
        }
        pod = rjob(served(held(switches=1), spec).manifest)["template"]["spec"]["template"]
        assert pod["metadata"]["annotations"] == {
            "kueue.x-k8s.io/podset-required-topology": "example.com/block"
        }
        assert "annotations" not in rjob(served(held()).manifest)["template"]["spec"]["template"]["metadata"]

    def test_features_are_advertised_and_pinned(self) -> None:
        t = served(held(features="ib&nvme"))
        assert conf(t.manifest).endswith("Feature=k8sbridge,bridge-job-42,ib,nvme")
        assert t.constraints == "bridge-job-42&ib&nvme"
        # after the release the job's constraint is the bridge's: translating again changes nothing
        assert served(held(features=t.constraints)).manifest == t.manifest

    def test_typed_gres_mapping_and_per_task_gres(self) -> None:
        spec = make_spec(gres={"gpu": "nvidia.com/gpu", "gpu:a100": "nvidia.com/a100"})
        t = served(held(gres_per_node=(Gres(name="gpu", type="a100", count=2),)), spec)
        assert t.requests["nvidia.com/a100"] == "2"
        assert "Gres=gpu:a100:2" in conf(t.manifest)
        t = served(held(tasks_per_node=2, gres_per_task=(Gres(name="gpu", count=1),)), spec)
        assert t.requests["nvidia.com/gpu"] == "2"
        t = served(held(node_count=2, gres_per_job=(Gres(name="gpu", count=3),)), spec)
        assert t.requests["nvidia.com/gpu"] == "2"  # ceil(3 / 2) per node

    def test_overhead_quantities(self) -> None:
        spec = make_spec(
            podTemplate={"image": "i", "overhead": {"cpu": "0.5", "memory": "1G", "example.com/x": 1}}
        )
        t = served(held(cpus=2, memory_per_node_mb=1024), spec)
        assert t.requests["cpu"] == "2500m"
        assert t.requests["memory"] == str(1024 * 2**20 + 10**9)
        assert t.requests["example.com/x"] == "1"

    def test_time_limit_zero_or_infinite_sets_no_label(self) -> None:
        for minutes in (None, 0):
            assert served(held(time_limit_minutes=minutes)).max_exec_time_seconds is None
        assert (
            served(
                held(time_limit_minutes=1), options=TranslationOptions(exec_time_grace_seconds=0)
            ).max_exec_time_seconds
            == 60
        )


# --- jobs the bridge cannot serve --------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "code", "words"),
    [
        ({"node_count": 0}, UntranslatableCode.NO_NODES, "0 nodes"),
        ({"node_count": None}, UntranslatableCode.NO_NODES, "0 nodes"),
        ({"node_count": 17}, UntranslatableCode.TOO_MANY_NODES, "at most 16"),
        ({"node_count": 100000}, UntranslatableCode.TOO_MANY_NODES, "100000 nodes"),
        ({"memory_per_node_mb": 10 * 1024 * 1024}, UntranslatableCode.NODE_TOO_LARGE, "MB of memory"),
        (
            {"memory_per_node_mb": None, "memory_per_cpu_mb": 10**6, "cpus": 8},
            UntranslatableCode.NODE_TOO_LARGE,
            "memory",
        ),
        ({"min_cpus_per_node": 100000}, UntranslatableCode.NODE_TOO_LARGE, "100000 CPUs"),
        ({"gres_per_node": (Gres(name="fpga", count=1),)}, UntranslatableCode.UNMAPPED_GRES, "fpga"),
        ({"gres_per_node": (Gres(name="gpu", count=100000),)}, UntranslatableCode.NODE_TOO_LARGE, "gpu"),
        ({"gres_per_node": (Gres(name="gpu;rm -rf", count=1),)}, UntranslatableCode.UNSUPPORTED_GRES, "name"),
        ({"gres_per_socket": (Gres(name="gpu", count=1),)}, UntranslatableCode.UNSUPPORTED_GRES, "socket"),
        (
            {"memory_per_node_mb": None, "memory_per_gpu_mb": 100},
            UntranslatableCode.INCONSISTENT_REQUEST,
            "GPU",
        ),
        ({"het_job_id": 41, "het_job_offset": 1}, UntranslatableCode.HETEROGENEOUS_JOB, "heterogeneous"),
        ({"array_job_id": 40, "array_task_id": 2}, UntranslatableCode.JOB_ARRAY, "array"),
        ({"array_task_string": "0-9"}, UntranslatableCode.JOB_ARRAY, "array"),
        ({"partition": "debug"}, UntranslatableCode.UNKNOWN_PARTITION, "'debug' is not bridged"),
        ({"features": "a|b"}, UntranslatableCode.UNSUPPORTED_FEATURES, "AND-list"),
        ({"features": "[a*2&b]"}, UntranslatableCode.UNSUPPORTED_FEATURES, "AND-list"),
        ({"features": 'x" Gres=gpu:8'}, UntranslatableCode.UNSUPPORTED_FEATURES, "AND-list"),
        ({"features": "bridge-job-7"}, UntranslatableCode.UNSUPPORTED_FEATURES, "reserved"),
        ({"required_nodes": ("static1",)}, UntranslatableCode.REQUIRED_NODES, "static1"),
        ({"excluded_nodes": ("b42-0",)}, UntranslatableCode.REQUIRED_NODES, "excludes"),
    ],
)
def test_unservable(fields: dict[str, Any], code: UntranslatableCode, words: str) -> None:
    result = refused(held(**fields))
    assert result.code is code
    assert words in result.reason
    assert result.job_id == 42
    assert str(result).startswith("job 42 cannot be bridged")


def test_refused_configurations() -> None:
    spec = make_spec(podTemplate={"image": "i", "env": [{"name": "SLURM_JWT", "value": "t"}]})
    assert refused(held(), spec).code is UntranslatableCode.INVALID_CONFIG
    ray_only = WorkloadMixingSpec.model_validate(
        {"ray": {"clusterSelector": {}, "mapping": {"default": target("r")}}}
    )
    assert refused(held(), ray_only).code is UntranslatableCode.INVALID_CONFIG


def test_limits_are_configurable() -> None:
    spec = make_spec(limits={"maxNodesPerJob": 64})
    assert served(held(node_count=64, cpus=64), spec).node_names[-1] == "b42-63"
    options = TranslationOptions(max_memory_mb_per_node=500)
    assert refused(held(), options=options).code is UntranslatableCode.NODE_TOO_LARGE


# --- names ----------------------------------------------------------------------------------


class TestNames:
    def test_simple(self) -> None:
        assert jobset_name("hpc", 42) == "slurm-hpc-42"
        assert job_feature(42) == "bridge-job-42"
        assert node_names(held(node_count=3)) == ["b42-0", "b42-1", "b42-2"]
        assert node_names(held(node_count=0)) == []

    def test_changed_or_long_cluster_names_are_hashed(self) -> None:
        assert jobset_name("a_b", 1) != jobset_name("a-b", 1)
        long = "c" * 40
        name = jobset_name(long, 4294967295)
        assert len(name) <= MAX_JOBSET_NAME_LENGTH
        assert DNS_1035.match(name)
        assert name != jobset_name("c" * 39 + "d", 4294967295)

    def test_budget_fits_jobset_generated_pod_names(self) -> None:
        # <jobset>-<rjob>-<job index>-<pod index>-<5 random>, for the largest node count
        assert len(f"{'x' * MAX_JOBSET_NAME_LENGTH}-{REPLICATED_JOB}-0-4095-abcde") <= 63

    @given(cluster=st.text(max_size=80), job_id=st.integers(min_value=1, max_value=2**32 - 1))
    def test_any_cluster_gives_a_valid_deterministic_name(self, cluster: str, job_id: int) -> None:
        name = jobset_name(cluster, job_id)
        assert DNS_1035.match(name), name
        assert len(name) <= MAX_JOBSET_NAME_LENGTH
        assert name == jobset_name(cluster, job_id)
        assert name.endswith(f"-{job_id}")

    @given(a=st.text(max_size=45), b=st.text(max_size=45), job_id=st.integers(min_value=1, max_value=10**6))
    def test_distinct_clusters_distinct_names(self, a: str, b: str, job_id: int) -> None:
        if a != b:
            assert jobset_name(a, job_id) != jobset_name(b, job_id)

    @given(
        cluster=st.text(max_size=80),
        job_id=st.integers(min_value=1, max_value=2**32 - 1),
        runs=st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)),
    )
    def test_each_run_its_own_valid_name(self, cluster: str, job_id: int, runs: tuple[int, int]) -> None:
        """A later run's JobSet and nodes: valid, short enough, and never those of another run."""
        first, second = runs
        name = jobset_name(cluster, job_id, run=first)
        assert DNS_1035.match(name), name
        assert len(name) <= MAX_JOBSET_NAME_LENGTH
        node = node_name(job_id, 0, run=first)
        assert node_name_job_id(node) == job_id
        if first != second:
            assert name != jobset_name(cluster, job_id, run=second)
            assert node != node_name(job_id, 0, run=second)


# --- the job's shape: what of the job made its JobSet -------------------------------------------

GPU = Gres(name="gpu", count=1)


class TestShape:
    """``shape_fingerprint``: the reconciler replaces a held job's JobSet when it differs (row 16), so
    it must change with every field that shapes the JobSet and with nothing else."""

    def test_the_jobset_records_the_jobs_shape(self) -> None:
        t = served(held())
        assert t.manifest["metadata"]["annotations"][ANNOTATION_SHAPE] == t.shape == shape_fingerprint(held())
        assert re.fullmatch(re.escape(SHAPE_PREFIX) + "[0-9a-f]{16}", t.shape)
        assert shape_fingerprint(held()) == shape_fingerprint(held())  # an equal job, built again

    @pytest.mark.parametrize(
        "fields",
        [
            {"node_count": 2},
            {"cpus": 2},
            {"min_cpus_per_node": 2},
            {"tasks_per_node": 2, "cpus_per_task": 2},
            {"cpus_per_gpu": 2},
            {"memory_per_node_mb": 2000},
            {"memory_per_node_mb": None, "memory_per_cpu_mb": 1000},
            {"memory_per_node_mb": None, "memory_per_gpu_mb": 1000},
            {"memory_per_node_mb": None},
            {"gres_per_node": (GPU,)},
            {"gres_per_node": (Gres(name="gpu", type="a100", count=1),)},
            {"gres_per_job": (GPU,)},
            {"gres_per_task": (GPU,)},
            {"gres_per_socket": (GPU,)},
            {"features": "ib"},
            {"partition": "gpu"},
            {"partition": "bridge,gpu"},
            {"account": "physics"},
            {"qos": "urgent"},
            {"time_limit_minutes": 60},
            {"switches": 1},
            {"required_nodes": ("c1",)},
            {"excluded_nodes": ("c1",)},
        ],
        ids=",".join,
    )
    def test_each_field_that_shapes_the_jobset_changes_it(self, fields: dict[str, Any]) -> None:
        assert shape_fingerprint(held(**fields)) != shape_fingerprint(held())

    def test_the_tasks_per_node_count_where_gres_come_per_task(self) -> None:
        per_task = {"gres_per_task": (GPU,), "tasks": 2}
        assert shape_fingerprint(held(**per_task, tasks_per_node=1)) != shape_fingerprint(held(**per_task))
        assert shape_fingerprint(held(tasks=2)) == shape_fingerprint(held())  # no GRES per task: no effect

    @pytest.mark.parametrize(
        "fields",
        [
            {"name": "renamed"},
            {"comment": "my note"},
            {"comment": "k8s-bridge: held: too many nodes"},
            {"user_name": "alice", "user_id": 1000},
            {"hold": False, "state_reason": "None"},
            {"state_reason": "JobHeldAdmin", "priority": 0},
            {"restart_count": 3},
            {"max_nodes": 4},
            {"exclusive": True, "exclusive_user": True},
            {"contiguous": True},
            {"prefer": "ib"},
            {"tasks": 8},
            # The bridge's own pin (the release), which a requeue-hold keeps:
            {"features": "bridge-job-42", "required_nodes": ("b42-0",)},
        ],
        ids=",".join,
    )
    def test_what_does_not_shape_the_jobset_leaves_it_alone(self, fields: dict[str, Any]) -> None:
        assert shape_fingerprint(held(**fields)) == shape_fingerprint(held())

    def test_order_within_sets_does_not_count(self) -> None:
        """Slurm moves the partition a job ran in to the front of its list, and a requeue-hold keeps it."""
        assert shape_fingerprint(held(partition="debug,bridge")) == shape_fingerprint(
            held(partition="bridge,debug")
        )
        assert shape_fingerprint(held(features="ib&nvme")) == shape_fingerprint(held(features="nvme&ib"))
        pinned = held(features="bridge-job-42&ib&nvme")
        assert shape_fingerprint(pinned) == shape_fingerprint(held(features="ib&nvme"))

    def test_a_workloadmixing_change_changes_the_manifest_not_the_shape(self) -> None:
        """A new image, overhead or mapping rule must not replace every queued JobSet."""
        other = make_spec(
            podTemplate={"image": "slurmd:25.05", "overhead": {"cpu": "200m"}},
            mapping={"default": target("other-queue")},
        )
        before, after = served(held()), served(held(), other)
        assert before.manifest != after.manifest
        assert before.shape == after.shape
        ann = ANNOTATION_SHAPE
        assert (
            before.manifest["metadata"]["annotations"][ann] == after.manifest["metadata"]["annotations"][ann]
        )

    def test_a_job_is_compared_with_itself_not_with_another_job(self) -> None:
        # Job 7 pinned to job 42's nodes and feature is not job 42 pinned by the bridge.
        pinned = {"features": "bridge-job-42", "required_nodes": ("b42-0",)}
        assert shape_fingerprint(held(job_id=7, **pinned)) != shape_fingerprint(held(job_id=7))


# --- fuzzing: any job -> a valid manifest or a reason; nothing hostile leaks --------------------

HOSTILE = st.sampled_from(
    ['"', "'", "$(id)", "`id`", "\n", "\\", ";", " ", "é", "💥", "\x00", "&", "|", "=", ","]
)
TEXT = st.one_of(
    st.text(alphabet=string.ascii_letters + string.digits + "_.-", max_size=20),
    st.lists(st.one_of(HOSTILE, st.text(max_size=4)), max_size=6).map("".join),
)
GRES = st.builds(
    Gres,
    name=st.one_of(st.sampled_from(["gpu", "fpga", "mps"]), TEXT.filter(bool)),
    type=st.one_of(st.none(), st.sampled_from(["a100", "h100"]), TEXT),
    count=st.integers(min_value=0, max_value=10**6),
)
SMALL = st.one_of(st.none(), st.integers(min_value=0, max_value=64))
HUGE = st.one_of(SMALL, st.integers(min_value=0, max_value=2**40))
JOBS = st.builds(
    SlurmJob,
    job_id=st.integers(min_value=1, max_value=2**32 - 1),
    name=TEXT,
    cluster=TEXT,
    user_name=TEXT,
    partition=st.one_of(st.sampled_from(["bridge", "debug", "bridge,debug", "gpu"]), TEXT),
    account=TEXT,
    qos=TEXT,
    comment=TEXT,
    hold=st.booleans(),
    node_count=st.one_of(SMALL, st.integers(min_value=0, max_value=200000)),
    max_nodes=SMALL,
    tasks=SMALL,
    tasks_per_node=SMALL,
    cpus=HUGE,
    cpus_per_task=SMALL,
    min_cpus_per_node=HUGE,
    cpus_per_gpu=SMALL,
    memory_per_node_mb=HUGE,
    memory_per_cpu_mb=HUGE,
    memory_per_gpu_mb=HUGE,
    gres_per_node=st.lists(GRES, max_size=2).map(tuple),
    gres_per_job=st.lists(GRES, max_size=1).map(tuple),
    gres_per_task=st.lists(GRES, max_size=1).map(tuple),
    features=st.one_of(
        TEXT, st.lists(st.sampled_from(["ib", "nvme", "k8sbridge", "a.b_c-1"]), max_size=3).map("&".join)
    ),
    exclusive=st.booleans(),
    time_limit_minutes=st.one_of(st.none(), st.integers(min_value=0, max_value=2**32)),
    switches=st.one_of(st.none(), st.integers(min_value=0, max_value=4)),
    required_nodes=st.lists(TEXT, max_size=2).map(tuple),
    het_job_id=st.one_of(st.none(), st.just(5)),
    array_job_id=st.one_of(st.none(), st.just(0), st.just(9)),
)
FUZZ_SPEC = make_spec(
    partitions=["bridge", "gpu"],
    gres={"gpu": "nvidia.com/gpu", "mps": "nvidia.com/mps"},
    limits={"maxNodesPerJob": 4096},
    topology={"partitions": [{"partition": "gpu", "required": "example.com/rack"}]},
    podTemplate={"image": "slurmd:24.11", "overhead": {"cpu": "100m", "memory": "256Mi"}},
)
SAFE_ARG = re.compile(r"^[A-Za-z0-9_.,:=+/ -]*$")
SAFE_ANNOTATION = re.compile(r"^[A-Za-z0-9_.,:@=+/ -]*$")


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(value, list | tuple):
        return [s for item in value for s in _strings(item)]
    return []


#: Jobs of a servable shape whose free-text fields (name, user, account, QoS, comment, cluster) and
#: features are hostile: most translate, and the refusals can only be about size or features.
SERVABLE = st.builds(
    SlurmJob,
    job_id=st.integers(min_value=1, max_value=2**32 - 1),
    name=TEXT,
    cluster=TEXT,
    user_name=TEXT,
    partition=st.sampled_from(["bridge", "gpu", "debug,gpu"]),
    account=TEXT,
    qos=TEXT,
    comment=TEXT,
    hold=st.just(True),
    node_count=st.integers(min_value=1, max_value=64),
    tasks_per_node=SMALL,
    cpus=SMALL,
    cpus_per_task=SMALL,
    cpus_per_gpu=SMALL,
    memory_per_node_mb=st.one_of(st.none(), st.integers(min_value=1, max_value=10**6)),
    memory_per_cpu_mb=st.one_of(st.none(), st.integers(min_value=1, max_value=10**4)),
    gres_per_node=st.lists(
        st.builds(Gres, name=st.sampled_from(["gpu", "mps"]), count=st.integers(min_value=1, max_value=8)),
        max_size=2,
    ).map(tuple),
    features=st.one_of(
        st.lists(st.sampled_from(["ib", "nvme", "k8sbridge", "a.b_c-1"]), max_size=3).map("&".join), TEXT
    ),
    exclusive=st.booleans(),
    time_limit_minutes=st.one_of(st.none(), st.integers(min_value=0, max_value=10**6)),
    switches=st.one_of(st.none(), st.integers(min_value=0, max_value=2)),
)


def check_translation(job: SlurmJob, cluster: str | None) -> Translation | Untranslatable:
    """The safety properties every result must have; returns the result for further checks."""
    result = translate(job, FUZZ_SPEC, cluster=cluster)
    if isinstance(result, Untranslatable):
        assert result.reason
        assert result.reason.isascii()
        assert "\n" not in result.reason
        assert result.job_id == job.job_id
        return result
    m = result.manifest
    json.dumps(m)  # plain JSON data
    assert result == translate(job, FUZZ_SPEC, cluster=cluster)  # deterministic
    assert DNS_1035.match(m["metadata"]["name"])
    assert len(m["metadata"]["name"]) <= MAX_JOBSET_NAME_LENGTH
    pod = rjob(m)["template"]["spec"]["template"]
    for labels in (
        m["metadata"]["labels"],
        pod["metadata"]["labels"],
        rjob(m)["template"]["metadata"]["labels"],
    ):
        for key, value in labels.items():
            assert LABEL_KEY.match(key), key
            assert len(value) <= 63, value
            assert LABEL_VALUE.match(value), value
    for value in m["metadata"]["annotations"].values():
        assert SAFE_ANNOTATION.match(value), value
    args = container(m)["args"]
    assert args[3] == f"$({ENV_NODE_NAME})"
    for arg in args[4:]:
        assert SAFE_ARG.match(arg), arg  # no quote, $, newline, backslash or non-ASCII from the job
    expansions = {args[3], container(m)["env"][1]["value"]}
    assert all("$(" not in s for s in _strings(m) if s not in expansions)
    spec = rjob(m)["template"]["spec"]
    assert spec["parallelism"] == spec["completions"] == len(result.node_names) >= 1
    assert all(re.fullmatch(r"b\d+-\d+", n) for n in result.node_names)
    assert result.node.conf() == args[args.index("--conf") + 1]
    return result


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(job=JOBS, cluster=st.one_of(st.none(), TEXT))
def test_any_job_gives_a_valid_manifest_or_a_reason(job: SlurmJob, cluster: str | None) -> None:
    check_translation(job, cluster)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(job=SERVABLE, cluster=st.one_of(st.none(), TEXT))
def test_hostile_text_never_refuses_nor_leaks(job: SlurmJob, cluster: str | None) -> None:
    result = check_translation(job, cluster)
    if isinstance(result, Untranslatable):
        assert result.code in {UntranslatableCode.NODE_TOO_LARGE, UntranslatableCode.UNSUPPORTED_FEATURES}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(job=SERVABLE)
def test_the_bridges_release_and_a_requeue_hold_keep_the_shape(job: SlurmJob) -> None:
    """The release pins the job (``constraints``, required nodes) and unholds it; a requeue-hold holds
    it again with the pin kept: still the job its JobSet was made for, never replaced for that."""
    result = translate(job, FUZZ_SPEC)
    if not isinstance(result, Translation):
        return
    requeued = job.model_copy(
        update={
            "features": result.constraints,
            "required_nodes": result.node_names,
            "restart_count": 1,
            "state_reason": "JobHeldAdmin",
            "comment": "k8s-bridge: released",
        }
    )
    assert shape_fingerprint(requeued) == result.shape
    again = translate(requeued, FUZZ_SPEC)
    assert isinstance(again, Translation)
    assert again.shape == result.shape
    assert re.fullmatch(re.escape(SHAPE_PREFIX) + "[0-9a-f]{16}", result.shape)
