"""The Ray bridge under load, on the real stack: gated RayJobs -> worker JobSets per second, beside
Kueue's admissions per second in the same run; then Kueue admitting those JobSets, then cleanup.

Issue: "200 gated RayJobs -> worker JobSets per second, beside Kueue's admissions per second in the
same run. Target: the bridge is never the slower of the two." Prints figures and ratios against a
baseline measured in the same run; asserts only that the work was done (every JobSet exists, every
Workload was admitted, every RayJob and JobSet is gone at the end), never a time.

One test (``test_gated_rayjobs_to_jobsets_beside_kueue_admission``), on the session's stack (Kueue,
JobSet, kwok; the KubeRay CRDs but no KubeRay operator: nothing is submitted to Ray, so no RayJob
gets a Ray job id and no call reaches a head):

1. Baseline: Kueue's own admission rate in the same stack, as the Slurm bench measures it
   (``bench_support.kueue_admission_baseline``): ``K8S_BRIDGE_BENCH_BASELINE_JOBS`` (200) plain
   suspended batch/v1 Jobs queued to a held ClusterQueue (``stopPolicy: Hold``) with quota for all;
   once every Workload exists the queue is resumed and the time until all are Admitted is taken
   (polling the Workload list every 0.2 s).
2. Catch-up: in namespace ``bench-ray``, one RayCluster object (no operator: just the object,
   labelled for the WorkloadMixing's ``spec.ray.clusterSelector``, ``status.head.serviceName`` set), a
   LocalQueue pointing at a ClusterQueue with quota for every worker but held (``stopPolicy: Hold``),
   a WorkloadMixing with a ``ray`` section (1 worker of 100m CPU and 64Mi per RayJob); then
   ``K8S_BRIDGE_BENCH_RAY_JOBS`` (200) RayJobs created already gated, exactly as the webhook leaves
   them (gate key in ``entrypointResources``, the annotations, the finalizer; a unique request uid
   each), while no bridge runs. Then ``python -m bridge.ray`` starts (through ``ray_bridge_child.py``,
   which counts its HTTP requests) and the time until it has created every JobSet is taken (its own
   ``create_jobset`` success counter, polled every 0.1 s; the JobSet list is checked at the end). The
   ClusterQueue is held, so nothing is admitted meanwhile (as the Slurm catch-up's zero quota).
3. Admission of all: the ClusterQueue is resumed; the time until Kueue has admitted every worker
   JobSet's Workload (Workload list every 0.2 s, as the baseline) and until the bridge reports every
   RayJob ``admitted`` (its ``k8s_bridge_ray_jobs`` gauge). The workers' pods land on kwok nodes.
4. Cleanup: every RayJob deleted (four DELETE requests at a time; under the bridge's own
   deletes the API server takes them at some 40/s on this machine, so the bridge's lag after the
   last one is printed too); the time until the bridge has let every one go (its JobSet deleted,
   its finalizer removed: the RayJob is gone; every JobSet is then checked to be going), what is still
   there then (JobSets, Jobs, pods, Workloads), and the time until half, 90% and all of the JobSets
   are gone (Kubernetes' garbage collector finishes the foreground deletion: not the bridge's work;
   JobSet list every 1 s).

Kubernetes API calls are counted in the bridge process (``ray_bridge_child.py``: aiohttp wrapped, the
counter served beside the bridge's metrics); the delta of ``apiserver_request_total`` is printed too,
as the whole system's calls per job (Kueue, JobSet, GC included). CPU is utime + stime of the bridge
process (``/proc/<pid>/stat``; "since start" includes the interpreter's start-up and imports, "first
to last" only the creation), memory its VmRSS and VmHWM (the kernel's peak resident set). The load
average is recorded before and after: other stacks on the machine disturb the figures.

``K8S_BRIDGE_BENCH_RAY_BRIDGE_ARGS`` adds flags to the bridge (e.g. ``--max-concurrent-reconciles=32``).
``K8S_BRIDGE_BENCH_RESULTS=<dir>`` writes the figures as JSON there (``ray-throughput.json``). Run:
``tox -e bench -- -k ray_bridge`` or ``pytest tests/bench/test_ray_bridge_bench.py -s -p no:cacheprovider``.
"""

from __future__ import annotations

import contextlib
import math
import os
import shlex
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest

from bridge.sandbox.controllers import create_kwok_nodes, delete_nodes
from bridge.sandbox.e2e import (
    CHART_CRDS,
    JOBSETS,
    KUEUE,
    MIXINGS,
    BridgeProcess,
    bridge_environment,
    local_queue_object,
)
from bridge.sandbox.kube import RestClient
from bridge.sandbox.processes import ProcessGroup, StackError, free_port
from bridge.sandbox.stack import KubeStack
from tests.bench.bench_support import (
    BridgeProbe,
    admitted_count,
    cpu_seconds,
    delta,
    env_int,
    held_cluster_queue,
    kueue_admission_baseline,
    list_items,
    load_average,
    print_table,
    rate_figures,
    total,
    wait,
    write_result,
)
from tests.fixtures.mixing import ray_spec, target
from tests.fixtures.ray_objects import gated, raycluster, rayjob, worker_group
from translators.ray import ANNOTATION_GATED_BY, FINALIZER, LABEL_RAY_JOB_UID

pytestmark = [pytest.mark.timeout(1800)]

JOBS = env_int("K8S_BRIDGE_BENCH_RAY_JOBS", 200)
BASELINE_JOBS = env_int("K8S_BRIDGE_BENCH_BASELINE_JOBS", 200)
BRIDGE_ARGS = shlex.split(os.environ.get("K8S_BRIDGE_BENCH_RAY_BRIDGE_ARGS", ""))
"""Extra ``python -m bridge.ray`` flags, e.g. ``--max-concurrent-reconciles=32``."""
CHILD = Path(__file__).with_name("ray_bridge_child.py")
CREATORS = 4
"""RayJobs created (and deleted) this many at a time."""

NAMESPACE = "bench-ray"
CLUSTER = "shared"
HEAD_SERVICE = "shared-head-svc"
MIXING = "bench-ray"
POOL_LABELS = {"k8s-bridge.io/pool": "bench-ray-kwok"}
"""The kwok nodes' label, the flavor's nodeLabels (the baseline's flavor too)."""
SELECTED_LABELS = {"k8s-bridge.io/bench": "ray"}
"""The RayCluster's labels, which the WorkloadMixing's ``spec.ray.clusterSelector`` matches."""
FLAVOR = "bench-ray-kwok"
CLUSTER_QUEUE = "bench-ray"
LOCAL_QUEUE = "ray"
KWOK_NODES = 2
WORKER = {"cpu": "100m", "memory": "64Mi"}

RAYJOBS = f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayjobs"
RAYCLUSTERS = f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayclusters"
NS_JOBSETS = f"{JOBSETS}/namespaces/{NAMESPACE}/jobsets"
NS_WORKLOADS = f"{KUEUE}/namespaces/{NAMESPACE}/workloads"
NS_JOBS = f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs"
NS_PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"

ACTIONS = "k8s_bridge_ray_actions_total"
PHASES = "k8s_bridge_ray_jobs"


# --- measuring -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Probe(BridgeProbe):
    """A snapshot of the Ray bridge."""

    ACTIONS: ClassVar[str] = ACTIONS

    def kube(self) -> dict[str, float]:
        return {k.removeprefix("kube "): v for k, v in self.http().items() if k.startswith("kube ")}


def window(before: Probe, after: Probe, *, jobs: int) -> dict[str, Any]:
    """What the bridge did between two probes, per job where that means something."""
    seconds = after.at - before.at
    kube = delta(after.kube(), before.kube())
    calls = sum(kube.values())
    apiserver = after.apiserver - before.apiserver
    cpu = after.cpu - before.cpu
    return {
        "seconds": round(seconds, 3),
        "jobs": jobs,
        "kube_calls": int(calls),
        "kube_calls_per_job": round(calls / jobs, 2),
        "kube_calls_per_s": round(calls / seconds, 2) if seconds > 0 else None,
        "kube_calls_by_verb": {k: int(v) for k, v in kube.items()},
        "apiserver_requests_all_clients": None if math.isnan(apiserver) else int(apiserver),
        "apiserver_requests_all_clients_per_job": None
        if math.isnan(apiserver)
        else round(apiserver / jobs, 1),
        "actions": {k: int(v) for k, v in delta(after.actions(), before.actions()).items()},
        "cpu_seconds": round(cpu, 2),
        "cpu_percent": round(100 * cpu / seconds, 1) if seconds > 0 else None,
        "cpu_ms_per_job": round(1000 * cpu / jobs, 2),
        "rss_mib": round(after.rss, 1),
        "peak_rss_mib": round(after.hwm, 1),
    }


def created(bridge: BridgeProcess) -> float:
    return bridge.metric(ACTIONS, action="create_jobset", result="success")


CATCH_UP_POLL = 0.1
"""Seconds between two reads of the bridge's create counter (200 JobSets take about two seconds)."""


@dataclass
class Creations:
    """The bridge's create counter over time, with its CPU seconds at each read."""

    series: list[tuple[float, float]]
    cpu: list[float]

    def creating(self, *, jobs: int) -> dict[str, Any]:
        """From the first read showing a JobSet to the last: the creation alone, without start-up."""
        first = next(i for i, (_, c) in enumerate(self.series) if c > 0)
        (t0, c0), (t1, c1) = self.series[first], self.series[-1]
        cpu = self.cpu[-1] - self.cpu[first]
        made = c1 - c0
        return {
            "seconds": round(t1 - t0, 2),
            "jobsets": int(made),
            "per_s": round(made / (t1 - t0), 1) if t1 > t0 else None,
            "cpu_seconds": round(cpu, 2),
            "cpu_ms_per_job": round(1000 * cpu / made, 2) if made else None,
        }


def wait_created(bridge: BridgeProcess, target: float, *, timeout: float) -> Creations:
    """Poll the bridge's create counter until it reaches ``target``."""
    assert bridge.process is not None
    found = Creations([], [])
    deadline = time.monotonic() + timeout
    while True:
        assert bridge.alive(), f"the bridge exited:\n{bridge.log_tail()}"
        count = created(bridge)
        found.series.append((time.monotonic(), count))
        found.cpu.append(cpu_seconds(bridge.process.pid))
        if count >= target:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{count:.0f} of {target:.0f} JobSets after {timeout:.0f}s\n{bridge.log_tail()}"
            )
        time.sleep(CATCH_UP_POLL)


def wait_bridge(bridge: BridgeProcess) -> None:
    def ready() -> bool:
        assert bridge.alive(), f"the bridge exited:\n{bridge.log_tail()}"
        return bridge.metrics_text() is not None

    wait(ready, timeout=60, what="the bridge to serve /metrics")


# --- the Ray side of the stack ---------------------------------------------------------------------


def bench_raycluster() -> dict[str, Any]:
    """The shared RayCluster as an object only: a head group and one worker group (no node pins)."""
    group = worker_group("workers")
    group["template"]["spec"].pop("nodeSelector", None)
    cluster = raycluster(
        name=CLUSTER, namespace=NAMESPACE, groups=[group], service=HEAD_SERVICE, labels=dict(SELECTED_LABELS)
    )
    cluster.pop("status")
    return cluster


def bench_mixing() -> dict[str, Any]:
    spec = ray_spec(
        clusterSelector={"matchLabels": dict(SELECTED_LABELS)},
        mapping={"default": target(LOCAL_QUEUE)},
        workerDefaults={"workers": 1, "resources": dict(WORKER)},
        limits={"maxBridgedJobs": JOBS + 100},
    )
    return {
        "apiVersion": "bridge.k8s-bridge.io/v1alpha1",
        "kind": "WorkloadMixing",
        "metadata": {"name": MIXING},
        "spec": {"ray": spec},
    }


def gated_rayjob(index: int) -> dict[str, Any]:
    """A RayJob as the gate webhook leaves it: gate key, annotations, finalizer; its own request uid."""
    job = gated(
        rayjob(name=f"bench-{index:05d}", namespace=NAMESPACE, uid=None, cluster=CLUSTER),
        request_uid=str(uuid.uuid4()),
    )
    job["metadata"]["annotations"][ANNOTATION_GATED_BY] = MIXING
    job["metadata"]["finalizers"] = [FINALIZER]
    return job


def cluster_queue(stop_policy: str) -> dict[str, Any]:
    return held_cluster_queue(
        CLUSTER_QUEUE, flavor=FLAVOR, cpu=str(JOBS), memory=f"{JOBS}Gi", stop_policy=stop_policy
    )


def apply_kueue_objects(client: RestClient) -> None:
    client.apply(
        f"{KUEUE}/resourceflavors",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": FLAVOR},
            "spec": {"nodeLabels": dict(POOL_LABELS)},
        },
    )
    client.apply(f"{KUEUE}/clusterqueues", cluster_queue("Hold"))
    client.apply(*local_queue_object(LOCAL_QUEUE, namespace=NAMESPACE, cluster_queue=CLUSTER_QUEUE))


def kwok_nodes(client: RestClient) -> list[str]:
    """Room for every worker pod (and the baseline's), on fresh kwok nodes."""
    prefix = FLAVOR
    names = [f"{prefix}-{i}" for i in range(KWOK_NODES)]
    delete_nodes(client, names)
    wait(
        lambda: not any(client.exists(f"/api/v1/nodes/{n}") for n in names),
        timeout=30, what="old kwok nodes to go",
    )  # fmt: skip
    per_node = max(JOBS, BASELINE_JOBS) // KWOK_NODES + 50
    return create_kwok_nodes(
        client, count=KWOK_NODES, prefix=prefix, cpu=str(per_node), memory=f"{per_node}Gi",
        pods=per_node, labels=dict(POOL_LABELS),
    )  # fmt: skip


def scrub(client: RestClient) -> None:
    """Leave nothing behind: finalizers off and every RayJob and JobSet of the namespace deleted."""
    for path, items in (
        (RAYJOBS, list_items(client, RAYJOBS)),
        (NS_JOBSETS, list_items(client, NS_JOBSETS, labelSelector=LABEL_RAY_JOB_UID)),
    ):
        for item in items:
            name = item["metadata"]["name"]
            with contextlib.suppress(StackError):
                if item["metadata"].get("finalizers"):
                    client.request(
                        "PATCH", f"{path}/{name}", body={"metadata": {"finalizers": None}},
                        content_type="application/merge-patch+json",
                    )  # fmt: skip
                client.delete(f"{path}/{name}")


@contextlib.contextmanager
def ray_bench_stack(kube: KubeStack, workdir: Path) -> Iterator[ProcessGroup]:
    """The namespace, kwok nodes, Kueue objects (held), the RayCluster and the WorkloadMixing; on exit
    the bridge stopped and everything but the Kueue objects (kept held, as the Slurm bench keeps its
    own) deleted."""
    client = kube.client
    group = ProcessGroup(workdir)
    nodes: list[str] = []
    try:
        kube.control_plane.install_crds(CHART_CRDS)
        kube.control_plane.ensure_namespace(NAMESPACE)
        scrub(client)
        nodes = kwok_nodes(client)
        apply_kueue_objects(client)
        client.apply(RAYCLUSTERS, bench_raycluster())
        client.request(
            "PATCH", f"{RAYCLUSTERS}/{CLUSTER}/status",
            body={"status": {"state": "ready", "head": {"serviceName": HEAD_SERVICE}}},
            content_type="application/merge-patch+json",
        )  # fmt: skip
        client.apply(MIXINGS, bench_mixing())
        yield group
    finally:
        group.stop_all(grace=10.0)
        scrub(client)
        with contextlib.suppress(AssertionError):
            wait(lambda: not list_items(client, RAYJOBS, limit="1"), timeout=60, what="RayJobs to go")
        for path in (f"{MIXINGS}/{MIXING}", f"{RAYCLUSTERS}/{CLUSTER}"):
            with contextlib.suppress(StackError):
                client.delete(path)
        with contextlib.suppress(StackError):
            client.apply(f"{KUEUE}/clusterqueues", cluster_queue("Hold"))
        with contextlib.suppress(StackError):
            delete_nodes(client, nodes)


def ray_bridge(kube: KubeStack, group: ProcessGroup) -> BridgeProcess:
    """``python -m bridge.ray`` through ``ray_bridge_child.py`` (every HTTP request counted); no webhook."""
    metrics_port = free_port()
    argv = [
        sys.executable, str(CHILD),
        "--kubeconfig", str(kube.kubeconfig),
        "--config", MIXING,
        "--metrics-bind-address", f"127.0.0.1:{metrics_port}",
        "--health-probe-bind-address", f"127.0.0.1:{free_port()}",
        "--no-leader-elect",
        *BRIDGE_ARGS,
    ]  # fmt: skip
    env = bridge_environment(os.environ, {})
    return BridgeProcess(group=group, argv=argv, env=env, metrics_port=metrics_port, name="bridge-ray")


def in_parallel(items: Sequence[Any], action: Any) -> float:
    """``action`` over ``items``, ``CREATORS`` at a time; the seconds it took."""
    began = time.monotonic()
    with ThreadPoolExecutor(CREATORS) as pool:
        list(pool.map(action, items))
    return time.monotonic() - began


def bridged_jobsets(client: RestClient) -> list[dict[str, Any]]:
    return list_items(client, NS_JOBSETS, labelSelector=LABEL_RAY_JOB_UID)


# --- the benchmark -------------------------------------------------------------------------------


def test_gated_rayjobs_to_jobsets_beside_kueue_admission(
    kube_stack: KubeStack, tmp_path_factory: pytest.TempPathFactory
) -> None:
    client = kube_stack.client
    result: dict[str, Any] = {
        "jobs": JOBS,
        "worker": WORKER,
        "bridge_args": BRIDGE_ARGS,
        "load_before": load_average(),
    }
    with ray_bench_stack(kube_stack, tmp_path_factory.mktemp("bench-ray")) as group:
        # 1. Kueue's own admission rate (its pods on the same kwok nodes).
        baseline = kueue_admission_baseline(kube_stack, BASELINE_JOBS, node_labels=dict(POOL_LABELS))
        result["kueue_baseline"] = baseline

        # 2. Catch-up: gated RayJobs first, then the bridge.
        jobs = [gated_rayjob(i) for i in range(JOBS)]
        uids: list[str] = []
        create_seconds = in_parallel(
            jobs, lambda job: uids.append(client.create(RAYJOBS, job)["metadata"]["uid"])
        )
        assert len(set(uids)) == JOBS
        result["create_rayjobs"] = {
            "jobs": JOBS, "seconds": round(create_seconds, 2), "per_s": round(JOBS / create_seconds, 1),
            "parallel": CREATORS,
        }  # fmt: skip
        bridge = ray_bridge(kube_stack, group)
        zero = Probe.before_start(client)
        start = zero.at
        bridge.start()
        wait_bridge(bridge)
        started = time.monotonic() - start
        creations = wait_created(bridge, JOBS, timeout=max(300.0, JOBS * 1.0))
        after = Probe.take(client, bridge)
        jobsets = bridged_jobsets(client)
        assert len(jobsets) == JOBS, f"{len(jobsets)} JobSets for {JOBS} RayJobs"
        assert {js["metadata"]["labels"][LABEL_RAY_JOB_UID] for js in jobsets} == set(uids)
        assert all(js["spec"]["suspend"] is True for js in jobsets)
        catch_up = rate_figures(creations.series, start=start, base=0.0, count=JOBS)
        catch_up["first_to_last"] = creations.creating(jobs=JOBS)
        catch_up["bridge_start_seconds"] = round(started, 2)
        catch_up["since_start"] = window(zero, after, jobs=JOBS)
        catch_up["ratio_to_kueue_admission"] = round(
            catch_up["per_s_middle_80pct"] / baseline["admissions_per_s"], 2
        )
        catch_up["ratio_overall_to_kueue_admission"] = round(
            catch_up["per_s_overall"] / baseline["admissions_per_s"], 2
        )
        result["catch_up"] = catch_up

        # 3. Admission of all: Kueue admits the worker JobSets; the bridge sees it.
        wait(
            lambda: len(list_items(client, NS_WORKLOADS)) >= JOBS,
            timeout=300, what=f"{JOBS} Workloads of the worker JobSets", interval=0.5,
        )  # fmt: skip
        assert admitted_count(list_items(client, NS_WORKLOADS)) == 0
        admit_before = Probe.take(client, bridge)
        start = time.monotonic()
        client.apply(f"{KUEUE}/clusterqueues", cluster_queue("None"))
        kueue_done = bridge_done = math.nan
        deadline = start + max(300.0, JOBS * 1.0)
        while math.isnan(kueue_done) or math.isnan(bridge_done):
            assert bridge.alive(), f"the bridge exited:\n{bridge.log_tail()}"
            now = time.monotonic()
            if math.isnan(kueue_done) and admitted_count(list_items(client, NS_WORKLOADS)) >= JOBS:
                kueue_done = now - start
            if math.isnan(bridge_done) and bridge.metric(PHASES, phase="admitted") >= JOBS:
                bridge_done = now - start
            if now > deadline:
                raise AssertionError(
                    f"admission not seen after {now - start:.0f}s (Kueue done after {kueue_done} s, "
                    f"bridge after {bridge_done} s)\n{bridge.log_tail()}"
                )
            time.sleep(0.2)
        admit_after = Probe.take(client, bridge)
        result["admission"] = {
            "jobs": JOBS,
            "kueue_seconds": round(kueue_done, 2),
            "kueue_admissions_per_s": round(JOBS / kueue_done, 1),
            "bridge_sees_all_admitted_seconds": round(bridge_done, 2),
            "ratio_to_kueue_baseline": round(JOBS / kueue_done / baseline["admissions_per_s"], 2),
            "window": window(admit_before, admit_after, jobs=JOBS),
            "phases": {
                lab["phase"]: int(v) for n, lab, v in admit_after.samples if n == PHASES and "phase" in lab
            },
        }

        # 4. Cleanup: every RayJob deleted; the bridge deletes the JobSets and lets the RayJobs go.
        clean_before = Probe.take(client, bridge)
        start = time.monotonic()
        delete_seconds = in_parallel([f"{RAYJOBS}/{job['metadata']['name']}" for job in jobs], client.delete)
        wait(
            lambda: not list_items(client, RAYJOBS, limit="1"),
            timeout=max(300.0, JOBS * 1.0), what="the bridge to let every RayJob go",
        )  # fmt: skip
        released = time.monotonic() - start
        clean_after = Probe.take(client, bridge)
        going = bridged_jobsets(client)
        assert all(js["metadata"].get("deletionTimestamp") for js in going), (
            "a RayJob let go before its JobSet"
        )
        left = {
            "jobsets": len(going),
            "jobs": len(list_items(client, NS_JOBS)),
            "pods": len(list_items(client, NS_PODS)),
            "workloads": len(list_items(client, NS_WORKLOADS)),
        }
        gone: list[tuple[float, float]] = [(time.monotonic(), JOBS - len(going))]
        deadline = start + max(300.0, JOBS * 2.0)
        while gone[-1][1] < JOBS:
            if time.monotonic() > deadline:
                raise AssertionError(f"{JOBS - gone[-1][1]:.0f} worker JobSets not gone after cleanup")
            time.sleep(1.0)
            gone.append((time.monotonic(), JOBS - len(bridged_jobsets(client))))
        result["cleanup"] = {
            "jobs": JOBS,
            "delete_requests_seconds": round(delete_seconds, 2),
            "bridge_released_all_seconds": round(released, 2),
            "bridge_released_per_s": round(JOBS / released, 1),
            "bridge_lag_after_last_delete_seconds": round(released - delete_seconds, 2),
            "left_when_released": left,
            "jobsets_gone_seconds": {
                f"{int(100 * q)}pct": round(next(t for t, c in gone if c >= q * JOBS) - start, 1)
                for q in (0.5, 0.9, 1.0)
            },
            "window": window(clean_before, clean_after, jobs=JOBS),
        }
        end = Probe.take(client, bridge)
        result["bridge"] = {
            "cpu_seconds": round(end.cpu, 2),
            "cpu_ms_per_job_whole_run": round(1000 * end.cpu / JOBS, 2),
            "peak_rss_mib": round(end.hwm, 1),
            "rss_mib": round(end.rss, 1),
            "reconcile_workers": int(
                total(end.samples, "controller_runtime_max_concurrent_reconciles", controller="ray")
            ),
            "actions": {k: int(v) for k, v in end.actions().items()},
        }
        assert bridge.alive(), bridge.log_tail()
        result["load_after"] = load_average()
        assert not list_items(client, RAYJOBS), "RayJobs left after cleanup"
        assert not bridged_jobsets(client), "JobSets left after cleanup"

    report(result)
    write_result("ray-throughput", result)


def report(r: dict[str, Any]) -> None:
    b, c, a, cl, br = r["kueue_baseline"], r["catch_up"], r["admission"], r["cleanup"], r["bridge"]
    w, aw, cw, made, f = c["since_start"], a["window"], cl["window"], r["create_rayjobs"], c["first_to_last"]
    rows: list[tuple[str, Any]] = [
        ("gated RayJobs / worker / extra bridge flags", f"{r['jobs']} / {r['worker']} / {r['bridge_args']}"),
        ("Kueue baseline: admissions/s", f"{b['admissions_per_s']} ({b['jobs']} Jobs in {b['seconds']} s)"),
        ("RayJobs created, 4 parallel: per s", f"{made['per_s']} ({made['jobs']} in {made['seconds']} s)"),
        ("catch-up: bridge start -> all JobSets",
         f"{c['seconds_to_all']} s (first after {c['seconds_to_first']} s; "
         f"/metrics after {c['bridge_start_seconds']} s)"),
        ("catch-up: JobSets/s (middle 80% / overall)", f"{c['per_s_middle_80pct']} / {c['per_s_overall']}"),
        ("catch-up: first -> last JobSet seen",
         f"{f['jobsets']} in {f['seconds']} s ({f['per_s']}/s; bridge CPU {f['cpu_ms_per_job']} ms each)"),
        ("bridge JobSets/s / Kueue admissions/s",
         f"{c['ratio_to_kueue_admission']} (overall, start-up included: "
         f"{c['ratio_overall_to_kueue_admission']})"),
        ("catch-up: Kubernetes calls per job (bridge)",
         f"{w['kube_calls_per_job']}  {w['kube_calls_by_verb']}"),
        ("catch-up: API server requests per job (all)", w["apiserver_requests_all_clients_per_job"]),
        ("catch-up: bridge CPU s (ms per job)", f"{w['cpu_seconds']} ({w['cpu_ms_per_job']})"),
        ("catch-up: bridge RSS / peak RSS MiB", f"{w['rss_mib']} / {w['peak_rss_mib']}"),
        ("admission: Kueue admits the worker JobSets",
         f"{a['kueue_seconds']} s ({a['kueue_admissions_per_s']}/s; "
         f"{a['ratio_to_kueue_baseline']} x the baseline's rate)"),
        ("admission: bridge reports all admitted",
         f"{a['bridge_sees_all_admitted_seconds']} s  {a['phases']}"),
        ("admission: bridge Kubernetes calls per job",
         f"{aw['kube_calls_per_job']}  {aw['kube_calls_by_verb']}"),
        ("admission: bridge CPU ms per job", aw["cpu_ms_per_job"]),
        ("cleanup: delete requests, 4 parallel", f"{cl['delete_requests_seconds']} s"),
        ("cleanup: first delete -> bridge let all go",
         f"{cl['bridge_released_all_seconds']} s ({cl['bridge_released_per_s']} RayJobs/s; "
         f"{cl['bridge_lag_after_last_delete_seconds']} s after the last delete returned)"),
        ("cleanup: then still there (going)", cl["left_when_released"]),
        ("cleanup: first delete -> JobSets gone 50/90/100%",
         " / ".join(f"{v} s" for v in cl["jobsets_gone_seconds"].values())),
        ("cleanup: Kubernetes calls per job (bridge)",
         f"{cw['kube_calls_per_job']}  {cw['kube_calls_by_verb']}"),
        ("cleanup: bridge CPU ms per job / actions", f"{cw['cpu_ms_per_job']} / {cw['actions']}"),
        ("whole run: bridge CPU s (ms per job)", f"{br['cpu_seconds']} ({br['cpu_ms_per_job_whole_run']})"),
        ("whole run: bridge peak RSS MiB", br["peak_rss_mib"]),
        ("reconcile workers", br["reconcile_workers"]),
        ("load average before / after", f"{r['load_before']} / {r['load_after']}"),
    ]  # fmt: skip
    print_table("Ray bridge throughput (gated RayJobs -> worker JobSets)", rows)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-s", "-p", "no:cacheprovider"]))
