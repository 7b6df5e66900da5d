"""The real run's stack: the project's e2e stack (:class:`~bridge.sandbox.e2e.E2EStack`) with Ray
(:class:`~bridge.sandbox.ray_e2e.RayPool`), Kueue's Deployment integration and kwok nodes, wired so
that one Kueue ClusterQueue's quota is the Kubernetes side (static split) or the whole pool.

A "node" of the experiment is one CPU of that quota: every pod of every class asks for 1 CPU. Where a
pod runs is the class's business, not Kueue's: slurmd pods and Ray workers are real processes on the
process runner's nodes (label ``exp002/kind=runner``), batch Job pods and inference replicas run on
kwok nodes (``exp002/kind=kwok``; a batch pod completes after its run time, kwok's
``pod-complete`` delay). The ResourceFlavor's node label is on both kinds of node, so Kueue sees one
pool; the nodes together have more room than the quota, so the quota is the only limit, as in the
simulator. The Slurm side of the split is real slurmd processes registered with the real slurmctld
before the run (:meth:`RealStack.start_static_slurm`), no bridge running: Slurm schedules its jobs.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

from bridge.sandbox.controllers import create_kwok_nodes, delete_nodes
from bridge.sandbox.e2e import (
    KUEUE,
    MIXINGS,
    BridgeProcess,
    E2ESettings,
    E2EStack,
    cluster_queue_object,
    local_queue_object,
    priority_class_object,
    wait_for,
)
from bridge.sandbox.ray_e2e import RayPool
from bridge.sandbox.serving import (
    SANDBOX_KUEUE_FRAMEWORKS,
    register_serving_webhooks,
    remove_serving_webhooks,
)
from bridge.sandbox.slurm import DynamicNode, SlurmCluster
from bridge.sandbox.stack import KubeStack

__all__ = ["KIND_LABEL", "RealStack"]

KIND_LABEL = "exp002/kind"
NAMESPACE = "exp002"
"""Namespace of the batch Jobs and the inference Deployment."""
LOCAL_QUEUE = "kube"
BATCH_PRIORITY = "exp002-batch"
INFERENCE_PRIORITY = "exp002-inference"
POOL = "exp002"


class RealStack:
    """Kubernetes (with Kueue's pod and Deployment integrations), Slurm 22.05, runner and kwok nodes,
    Ray and both bridges' wiring; the quota set per policy (:meth:`set_quota`)."""

    def __init__(self, *, workdir: Path, slurm_nodes: int, kube_nodes: int) -> None:
        self.workdir = workdir
        self.slurm_nodes = slurm_nodes
        self.kube_nodes = kube_nodes
        pool = slurm_nodes + kube_nodes
        self.settings = E2ESettings(
            pool=POOL,
            runner_nodes=pool,
            runner_cpu="2",
            runner_memory="8Gi",
            kwok_nodes=0,
            quota_cpu=str(kube_nodes),
            quota_memory="256Gi",
            urgent_priority=INFERENCE_PRIORITY,
            urgent_priority_value=1000,
            runner_node_labels=tuple({KIND_LABEL: "runner"} for _ in range(pool)),
        )
        self.kube = KubeStack(workdir=workdir / "kube", kueue_frameworks=SANDBOX_KUEUE_FRAMEWORKS)
        self.slurm = SlurmCluster(version="22.05")
        self.pool: E2EStack | None = None
        self.ray: RayPool | None = None
        self.kwok_nodes: list[str] = []
        self.static_nodes: list[DynamicNode] = []
        self.ray_bridge: BridgeProcess | None = None

    # ---- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> RealStack:
        try:
            self.kube.start()
            self.slurm.start()
            register_serving_webhooks(self.kube)
            self.pool = E2EStack(
                kube=self.kube, slurm=self.slurm, workdir=self.workdir / "wiring", settings=self.settings
            ).start()
            self.ray = RayPool(self.pool, workdir=self.workdir / "ray")
            self.ray.priority_value = 100  # as batch and Slurm (poolsim.workload.Priorities)
            self.ray.start()  # its head lands on a runner node: no kwok node carries the flavor yet
            self._wire()
            self.ray_bridge = self.ray.bridge().start()
            wait_for(self.ray_bridge.metrics_text, timeout=120, what="the Ray bridge to serve /metrics")
            self.ray.wait_gate_serving(self.ray_bridge)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        self.stop_static_slurm()
        if self.pool is not None:
            for path in (f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/inference",):
                with contextlib.suppress(Exception):
                    self.pool.client.delete(path)
            with contextlib.suppress(Exception):
                delete_nodes(self.pool.client, self.kwok_nodes)
        if self.ray is not None:
            self.ray.stop()
        if self.pool is not None:
            self.pool.stop()
        remove_serving_webhooks(self.kube)
        self.slurm.stop()
        self.kube.stop()

    def __enter__(self) -> RealStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def e2e(self) -> E2EStack:
        assert self.pool is not None, "the stack is not started"
        return self.pool

    @property
    def ray_pool(self) -> RayPool:
        assert self.ray is not None, "the stack is not started"
        return self.ray

    # ---- wiring ------------------------------------------------------------------------------------

    def _wire(self) -> None:
        pool, client = self.e2e, self.e2e.client
        key, value = self.settings.pool_label
        self.kwok_nodes = create_kwok_nodes(
            client,
            count=2,
            prefix=f"{POOL}-kwok",
            cpu=str(2 * (self.slurm_nodes + self.kube_nodes)),
            memory="64Gi",
            labels={key: value, KIND_LABEL: "kwok"},
            taints=[{"key": key, "value": value, "effect": "NoSchedule"}],
        )
        # Slurm's and Ray's pods on the runner nodes only (kwok nodes carry the flavor's label too).
        slurm_spec = pool.mixing_spec_dict()
        slurm_spec["slurm"]["podTemplate"]["nodeSelector"] = {KIND_LABEL: "runner"}
        ray_spec = self.ray_pool.mixing_spec_dict()
        ray_spec["ray"]["workerTemplate"]["nodeSelector"] = {
            **ray_spec["ray"]["workerTemplate"]["nodeSelector"],
            KIND_LABEL: "runner",
        }
        for name, spec in ((pool.mixing_name, slurm_spec), (self.ray_pool.mixing_name, ray_spec)):
            client.apply(
                MIXINGS,
                {
                    "apiVersion": "bridge.k8s-bridge.io/v1alpha1",
                    "kind": "WorkloadMixing",
                    "metadata": {"name": name},
                    "spec": spec,
                },
            )
        self.kube.control_plane.ensure_namespace(NAMESPACE)
        client.apply(
            *local_queue_object(LOCAL_QUEUE, namespace=NAMESPACE, cluster_queue=self.settings.cluster_queue)
        )
        client.apply(*priority_class_object(BATCH_PRIORITY, value=100))
        client.apply(f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments", self.inference_deployment())

    def set_quota(self, nodes: int) -> None:
        """The ClusterQueue's quota: ``nodes`` CPUs (the Kubernetes side, or the whole pool)."""
        s = self.settings
        self.e2e.client.apply(
            *cluster_queue_object(s.cluster_queue, flavor=s.flavor, cpu=str(nodes), memory=s.quota_memory)
        )
        path = f"{KUEUE}/clusterqueues/{s.cluster_queue}"

        def applied() -> bool:
            spec = self.e2e.client.get(path)["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
            return any(r["name"] == "cpu" and str(r["nominalQuota"]) == str(nodes) for r in spec)

        wait_for(applied, timeout=30, what=f"the ClusterQueue's quota to be {nodes} CPUs")
        time.sleep(1.0)  # Kueue's cache takes the update from its watch

    def start_static_slurm(self) -> list[str]:
        """The split's Slurm side: ``slurm_nodes`` slurmd processes registered with 1 CPU each."""
        for index in range(self.slurm_nodes):
            self.static_nodes.append(self.slurm.start_dynamic_node(f"st{index}", cpus=1, memory_mb=1000))
        return [node.name for node in self.static_nodes]

    def stop_static_slurm(self) -> None:
        for node in list(self.static_nodes):
            with contextlib.suppress(Exception):
                self.slurm.stop_dynamic_node(node)
            self.slurm.scontrol("delete", f"nodename={node.name}", check=False)
            self.static_nodes.remove(node)

    # ---- objects -----------------------------------------------------------------------------------

    def inference_deployment(self, replicas: int = 0) -> dict[str, Any]:
        labels = {"kueue.x-k8s.io/queue-name": LOCAL_QUEUE}
        resources = {"cpu": "1", "memory": "256Mi"}
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "inference", "namespace": NAMESPACE, "labels": labels},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": "inference"}},
                "template": {
                    "metadata": {
                        "labels": {
                            "app": "inference",
                            **labels,
                            "kueue.x-k8s.io/priority-class": INFERENCE_PRIORITY,
                        }
                    },
                    "spec": {
                        "nodeSelector": {KIND_LABEL: "kwok"},
                        "terminationGracePeriodSeconds": 1,
                        "containers": [
                            {
                                "name": "server",
                                "image": "k8s-bridge.local/none",
                                "command": ["sleep", "infinity"],
                                "resources": {"requests": resources, "limits": resources},
                            }
                        ],
                    },
                },
            },
        }

    def scale_inference(self, replicas: int) -> None:
        self.e2e.client.request(
            "PATCH",
            f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/inference/scale",
            body={"spec": {"replicas": replicas}},
            content_type="application/merge-patch+json",
        )

    def batch_job(self, name: str, *, nodes: int, runtime: float) -> dict[str, Any]:
        """A suspended Job of ``nodes`` 1-CPU pods on kwok nodes, each completing after ``runtime``."""
        job = self.e2e.batch_job(
            name, command=["sleep", f"{runtime:.1f}"], cpu="1", priority=BATCH_PRIORITY,
            parallelism=nodes, queue=(NAMESPACE, LOCAL_QUEUE),
        )  # fmt: skip
        template = job["spec"]["template"]
        template["metadata"] = {"annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": f"{runtime:.2f}s"}}
        template["spec"]["nodeSelector"] = {KIND_LABEL: "kwok"}
        template["spec"]["terminationGracePeriodSeconds"] = 1
        return job
