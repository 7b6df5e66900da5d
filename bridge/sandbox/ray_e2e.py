"""The Ray half of the e2e stack: KubeRay, a shared RayCluster and the Ray bridge, on the Slurm e2e pool.

Why on top of :class:`~bridge.sandbox.e2e.E2EStack` and not beside it: the point of the bridges is one
pool. The Ray bridge's worker JobSets go to the same ClusterQueue (same runner nodes, same quota,
same priorities) as the Slurm bridge's slurmd JobSets, through a LocalQueue of the Ray namespace. What
this adds to the pool:

- the real KubeRay operator (:class:`~bridge.sandbox.controllers.Controllers` ``"kuberay"``), reaching
  heads through the API server's service proxy;
- a head-only RayCluster (:func:`~bridge.sandbox.kuberay.ray_cluster_manifest`) on a runner node, in its
  own PID namespace, labelled so the WorkloadMixing selects it;
- a WorkloadMixing with a ``ray`` section whose workers land on the runner nodes (node selector,
  toleration, the runner's PID-namespace annotation: Ray nodes on one host must not see each other's
  processes) and request 1 CPU and 512 Mi each;
- the gate webhook registered in a MutatingWebhookConfiguration (``failurePolicy: Ignore``, as the
  chart does) with the control plane's serving pair, which covers 127.0.0.1;
- ``python -m bridge.ray`` as a subprocess (:meth:`RayPool.bridge`), on a fixed webhook port so a
  restarted bridge answers the same registration.

With ``bridge_wiring=False`` the last three are left to the Helm chart (``tests/e2e/test_helm_install.py``).

:meth:`RayPool.leaks` adds the Ray-side leaks to the pool's: RayJobs, JobSets and pods of the Ray
namespace, Ray nodes other than the head, jobs still pending in the head.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self

from bridge.sandbox.controllers import Controllers
from bridge.sandbox.e2e import (
    JOBSETS,
    KUEUE,
    BridgeProcess,
    E2EStack,
    bridge_environment,
    local_queue_object,
    priority_class_object,
    wait_for,
)
from bridge.sandbox.kube import ApiError
from bridge.sandbox.kuberay import RAY_API, head_service, ray_cluster_manifest, wait_head_ready
from bridge.sandbox.processes import StackError, free_port

__all__ = ["PID_NAMESPACE_ANNOTATION", "RayPool"]

PID_NAMESPACE_ANNOTATION = "runner.k8s-bridge.io/pid-namespace"
_MIXINGS = "/apis/bridge.k8s-bridge.io/v1alpha1/workloadmixings"
_WEBHOOKS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
_SELECT_LABEL = ("k8s-bridge.io/ray-bridged", "true")
_NAMESPACE_LABEL = ("k8s-bridge.io/ray-bridge", "enabled")
_GATE_ANNOTATION = "bridge.k8s-bridge.io/ray-gate"


class RayPool:
    """KubeRay, a shared RayCluster and the Ray bridge's wiring on ``pool`` (see the module docstring)."""

    def __init__(
        self,
        pool: E2EStack,
        *,
        workdir: Path,
        namespace: str = "ray",
        cluster: str = "shared",
        bridge_wiring: bool = True,
    ) -> None:
        self.pool = pool
        self.bridge_wiring = bridge_wiring
        """Create the WorkloadMixing, the webhook registration and its certificate files for
        :meth:`bridge`; False when the Helm chart does (its own certificate, the webhook behind a
        Service, the WorkloadMixing from :meth:`mixing_spec_dict`)."""
        self.workdir = workdir
        self.namespace = namespace
        self.cluster = cluster
        self.local_queue = "ray"
        self.priority = "e2e-ray-low"
        """The Ray side's WorkloadPriorityClass, below the Slurm side's: Slurm jobs preempt Ray workers."""
        self.priority_value = 10
        self.mixing_name = f"{pool.settings.pool}-ray"
        self.webhook_name = f"{self.mixing_name}-gate"
        self.webhook_port = free_port()
        self.operator: Controllers | None = None
        self.raycluster: dict[str, Any] = {}

    @property
    def client(self) -> Any:
        return self.pool.client

    # ---- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> Self:
        try:
            self.workdir.mkdir(parents=True, exist_ok=True)
            self.operator = Controllers(self.pool.kube.control_plane, components=["kuberay"]).start()
            self.pool.kube.control_plane.ensure_namespace(self.namespace)
            key, value = _NAMESPACE_LABEL
            self.client.request(
                "PATCH", f"/api/v1/namespaces/{self.namespace}",
                body={"metadata": {"labels": {key: value}}}, content_type="application/merge-patch+json",
            )  # fmt: skip
            self.client.apply(
                *local_queue_object(
                    self.local_queue, namespace=self.namespace, cluster_queue=self.pool.settings.cluster_queue
                )
            )
            self.client.apply(*priority_class_object(self.priority, value=self.priority_value))
            self._start_head()
            if self.bridge_wiring:
                self._write_certificates()
                self.client.apply(
                    _MIXINGS,
                    {
                        "apiVersion": "bridge.k8s-bridge.io/v1alpha1",
                        "kind": "WorkloadMixing",
                        "metadata": {"name": self.mixing_name},
                        "spec": self.mixing_spec_dict(),
                    },
                )
                self.client.apply(_WEBHOOKS, self.webhook_configuration())
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        wiring = [f"{_WEBHOOKS}/{self.webhook_name}", f"{_MIXINGS}/{self.mixing_name}"]
        for path in (
            *(wiring if self.bridge_wiring else []),
            f"{RAY_API}/namespaces/{self.namespace}/rayclusters/{self.cluster}",
        ):
            with contextlib.suppress(StackError, OSError):
                self.client.delete(path)
        deadline = time.monotonic() + 60
        while (
            self.pool.list_items(f"/api/v1/namespaces/{self.namespace}/pods") and time.monotonic() < deadline
        ):
            time.sleep(0.5)
        if self.operator is not None:
            self.operator.stop()
            self.operator = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- parts -------------------------------------------------------------------------------------

    def _runner_placement(self) -> tuple[dict[str, str], list[dict[str, str]]]:
        key, value = self.pool.settings.pool_label
        return {key: value}, [{"key": key, "operator": "Equal", "value": value, "effect": "NoSchedule"}]

    def _start_head(self) -> None:
        selector, tolerations = self._runner_placement()
        manifest = ray_cluster_manifest(
            self.cluster,
            namespace=self.namespace,
            num_cpus=1,
            memory="1Gi",
            node_selector=selector,
            tolerations=tolerations,
            pod_annotations={PID_NAMESPACE_ANNOTATION: "true"},
        )
        key, value = _SELECT_LABEL
        manifest["metadata"]["labels"] = {key: value}
        self.client.apply(f"{RAY_API}/namespaces/{self.namespace}/rayclusters", manifest)
        self.raycluster = wait_head_ready(self.client, namespace=self.namespace, name=self.cluster)
        # The runner reports the pod Ready once its processes run; the dashboard answers seconds later.
        wait_for(self._dashboard_answers, timeout=180, what=f"the dashboard of RayCluster {self.cluster}")

    def _dashboard_answers(self) -> bool:
        try:
            self.ray_jobs()
        except (ApiError, StackError):
            return False
        return True

    def wait_gate_serving(
        self,
        bridge: BridgeProcess | None = None,
        *,
        timeout: float = 120.0,
        describe: Callable[[], str] | None = None,
    ) -> None:
        """Wait until the API server's calls reach the bridge's webhook: a dry-run CREATE comes back
        gated (the registration ignores a webhook that does not answer, so without this wait a RayJob
        created right after the bridge starts would pass ungated)."""

        def gated() -> bool:
            probe = self.rayjob(f"probe-{int(time.monotonic() * 1000)}", entrypoint="true")
            try:
                created = self.client.request(
                    "POST", f"{RAY_API}/namespaces/{self.namespace}/rayjobs?dryRun=All", body=probe
                )
            except ApiError:
                return False
            return _GATE_ANNOTATION in ((created.get("metadata") or {}).get("annotations") or {})

        wait_for(
            gated,
            timeout=timeout,
            what="the gate webhook to answer",
            describe=describe or (bridge.log_tail if bridge is not None else None),
        )

    @property
    def cert_dir(self) -> Path:
        return self.workdir / "webhook-certs"

    def _write_certificates(self) -> None:
        certs = self.pool.kube.control_plane.certificates
        self.cert_dir.mkdir(parents=True, exist_ok=True)
        shutil.copy(certs.serving_cert, self.cert_dir / "tls.crt")
        shutil.copy(certs.serving_key, self.cert_dir / "tls.key")
        os.chmod(self.cert_dir / "tls.key", 0o600)

    def mixing_spec_dict(self) -> dict[str, Any]:
        selector, tolerations = self._runner_placement()
        key, value = _SELECT_LABEL
        return {
            "ray": {
                "clusterSelector": {"matchLabels": {key: value}},
                "mapping": {
                    "default": {
                        "localQueue": {"name": self.local_queue},
                        "priorityClass": self.priority,
                    }
                },
                "workerTemplate": {"nodeSelector": selector, "tolerations": tolerations},
                "workerDefaults": {"workers": 1, "resources": {"cpu": "1", "memory": "512Mi"}},
            },
            "shared": {"annotations": {PID_NAMESPACE_ANNOTATION: "true"}},
        }

    def webhook_configuration(self) -> dict[str, Any]:
        ca = self.pool.kube.control_plane.certificates.ca_cert.read_bytes()
        key, value = _NAMESPACE_LABEL
        return {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": self.webhook_name},
            "webhooks": [
                {
                    "name": "gate.ray.k8s-bridge.io",
                    "clientConfig": {
                        "url": f"https://127.0.0.1:{self.webhook_port}/mutate-ray-io-v1-rayjob",
                        "caBundle": base64.b64encode(ca).decode(),
                    },
                    "rules": [
                        {
                            "apiGroups": ["ray.io"],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["rayjobs"],
                        }
                    ],
                    "failurePolicy": "Ignore",
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                    "timeoutSeconds": 5,
                    "namespaceSelector": {"matchLabels": {key: value}},
                }
            ],
        }

    def bridge(self, *extra_args: str, name: str = "bridge-ray") -> BridgeProcess:
        """``python -m bridge.ray`` for this pool (not started), its webhook on the registered port."""
        metrics_port = free_port()
        argv = [
            sys.executable, "-m", "bridge.ray",
            "--kubeconfig", str(self.pool.kube.kubeconfig),
            "--config", self.mixing_name,
            "--metrics-bind-address", f"127.0.0.1:{metrics_port}",
            "--health-probe-bind-address", f"127.0.0.1:{free_port()}",
            "--webhook-bind-address", f"127.0.0.1:{self.webhook_port}",
            "--webhook-cert-dir", str(self.cert_dir),
            *extra_args,
        ]  # fmt: skip
        process = BridgeProcess(
            group=self.pool.group,
            argv=argv,
            env=bridge_environment(os.environ, {}),
            metrics_port=metrics_port,
            name=name,
        )
        self.pool.bridges.append(process)
        return process

    # ---- objects -----------------------------------------------------------------------------------

    def rayjob(self, name: str, *, entrypoint: str, workers: int | None = None) -> dict[str, Any]:
        """A RayJob as a user writes it for the shared cluster (HTTPMode), ``workers`` as the annotation."""
        annotations = {"bridge.k8s-bridge.io/ray-workers": str(workers)} if workers is not None else {}
        return {
            "apiVersion": "ray.io/v1",
            "kind": "RayJob",
            "metadata": {"name": name, "namespace": self.namespace, "annotations": annotations},
            "spec": {
                "clusterSelector": {"ray.io/cluster": self.cluster},
                "submissionMode": "HTTPMode",
                "entrypoint": entrypoint,
            },
        }

    def create_rayjob(self, manifest: dict[str, Any]) -> dict[str, Any]:
        created: dict[str, Any] = self.client.request(
            "POST", f"{RAY_API}/namespaces/{self.namespace}/rayjobs", body=manifest
        )
        return created

    def get_rayjob(self, name: str) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = self.client.get(f"{RAY_API}/namespaces/{self.namespace}/rayjobs/{name}")
        except ApiError as error:
            if error.status == 404:
                return None
            raise
        return found

    def delete_rayjob(self, name: str) -> None:
        with contextlib.suppress(ApiError):
            self.client.delete(f"{RAY_API}/namespaces/{self.namespace}/rayjobs/{name}")

    def jobsets(self) -> list[dict[str, Any]]:
        return self.pool.list_items(f"{JOBSETS}/namespaces/{self.namespace}/jobsets")

    def pods(self, **query: str) -> list[dict[str, Any]]:
        return self.pool.list_items(f"/api/v1/namespaces/{self.namespace}/pods", **query)

    def workloads(self) -> list[dict[str, Any]]:
        return self.pool.list_items(f"{KUEUE}/namespaces/{self.namespace}/workloads")

    def events(self, *, involved: str) -> list[dict[str, Any]]:
        return self.pool.list_items(
            f"/api/v1/namespaces/{self.namespace}/events", fieldSelector=f"involvedObject.name={involved}"
        )

    # ---- the head's Job API, through the API server's service proxy ---------------------------------

    def _dashboard(self, path: str) -> Any:
        service = head_service(self.raycluster)
        return self.client.get(
            f"/api/v1/namespaces/{self.namespace}/services/{service}:dashboard/proxy{path}"
        )

    @property
    def dashboard_url(self) -> str:
        """The head's dashboard at its pod's address (the host reaches pods), for Ray's own clients
        (``RAY_ADDRESS`` of ``ray job status``); this class goes through the service proxy instead."""
        head = (self.raycluster.get("status") or {}).get("head") or {}
        if not head.get("podIP"):
            raise StackError(f"RayCluster {self.cluster} reports no head pod IP: {head}")
        return f"http://{head['podIP']}:8265"

    def ray_jobs(self) -> list[dict[str, Any]]:
        """Every job the head knows (Ray's Job API)."""
        found = self._dashboard("/api/jobs/")
        return [job for job in found or () if isinstance(job, dict)]

    def ray_job(self, submission_id: str) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = self._dashboard(f"/api/jobs/{submission_id}")
        except ApiError as error:
            if error.status == 404:
                return None
            raise
        return found

    def ray_job_logs(self, submission_id: str) -> str:
        return str((self._dashboard(f"/api/jobs/{submission_id}/logs") or {}).get("logs") or "")

    def ray_nodes(self) -> list[dict[str, Any]]:
        """Ray's node table (state API): ``node_ip``, ``state``, ``is_head_node``..."""
        reply = self._dashboard("/api/v0/nodes?limit=1000")
        return list(reply["data"]["result"]["result"])

    def leaks(self) -> list[str]:
        """What a finished Ray test left: RayJobs, JobSets, pods other than the head, Workloads of the
        Ray namespace; Ray nodes other than the head alive; jobs still pending or running in the head."""
        found: list[str] = []
        ns = self.namespace
        for what, items in (
            ("RayJob", self.pool.list_items(f"{RAY_API}/namespaces/{ns}/rayjobs")),
            ("JobSet", self.jobsets()),
            ("Workload", self.workloads()),
            ("Pod", [p for p in self.pods() if not p["metadata"]["name"].startswith(f"{self.cluster}-head")]),
        ):
            found += [f"{what} {ns}/{item['metadata']['name']}" for item in items]
        try:
            nodes, jobs = self.ray_nodes(), self.ray_jobs()
        except (ApiError, StackError) as error:
            return [*found, f"the head's dashboard does not answer ({error})"]
        found += [
            f"Ray node {node.get('node_ip')}"
            for node in nodes
            if node.get("state") == "ALIVE" and not node.get("is_head_node")
        ]
        found += [
            f"Ray job {job.get('submission_id')} {job.get('status')}"
            for job in jobs
            if job.get("status") in ("PENDING", "RUNNING")
        ]
        return found
