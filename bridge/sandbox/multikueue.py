"""Two local clusters wired as Kueue's MultiKueue: the bridge's cluster is the manager, a second is a worker.

Why a module of its own: MultiKueue is configuration that spans two API servers (a kubeconfig Secret,
a MultiKueueCluster, a MultiKueueConfig and an AdmissionCheck in the manager; the same LocalQueue and
ClusterQueue names in the worker), and an end-to-end claim such as "the bridged job's slurmd pods ran
in the worker cluster and registered with the same slurmctld" needs both wired as a site wires them.

Each side is an :class:`~bridge.sandbox.e2e.E2EStack` on its own :class:`~bridge.sandbox.stack.KubeStack`
and the same :class:`~bridge.sandbox.slurm.SlurmCluster`: the worker's runner nodes run the slurmd
pods, the manager's ClusterQueue carries the MultiKueue admission check. The manager's Kueue JobSet
webhook is registered, as Kueue's own manifests register it, so that it sets
``spec.managedBy: kueue.x-k8s.io/multikueue`` on the bridge's JobSets: the bridge does not need to know
that its queue spans clusters.
"""

from __future__ import annotations

import base64
import contextlib
from dataclasses import dataclass
from typing import Any, Self

import yaml

from bridge.sandbox.e2e import KUEUE, E2EStack, wait_for
from bridge.sandbox.kube import ApiError, ControlPlane
from bridge.sandbox.processes import StackError

__all__ = ["MULTIKUEUE_CONTROLLER", "MultiKueuePair", "inline_kubeconfig"]

MULTIKUEUE_CONTROLLER = "kueue.x-k8s.io/multikueue"
KUEUE_NAMESPACE = "kueue-system"
_WEBHOOKS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
_JOBSET_WEBHOOK_PATH = "/mutate-jobset-x-k8s-io-v1alpha2-jobset"


def inline_kubeconfig(control_plane: ControlPlane) -> str:
    """The control plane's admin kubeconfig with the certificates inline, as MultiKueue requires (it
    refuses kubeconfigs that read files)."""
    certs = control_plane.certificates

    def data(path: Any) -> str:
        return base64.b64encode(path.read_bytes()).decode()

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "worker",
                "cluster": {
                    "server": control_plane.server,
                    "certificate-authority-data": data(certs.ca_cert),
                },
            }
        ],
        "users": [
            {
                "name": "worker-admin",
                "user": {
                    "client-certificate-data": data(certs.admin_cert),
                    "client-key-data": data(certs.admin_key),
                },
            }
        ],
        "contexts": [{"name": "worker", "context": {"cluster": "worker", "user": "worker-admin"}}],
        "current-context": "worker",
    }
    return yaml.safe_dump(config, sort_keys=False)


@dataclass
class MultiKueuePair:
    """The MultiKueue objects between a started manager and started worker stacks (:class:`E2EStack`).

    ``start`` creates them in the manager and waits until Kueue reports every worker connected and the
    ClusterQueue active with the check; ``stop`` deletes them (the ClusterQueue loses the check).
    ``name`` names the MultiKueueConfig and AdmissionCheck; the workers' Secrets and
    MultiKueueClusters are :meth:`cluster_name` of their index. ``more_workers`` join ``worker`` in
    the same MultiKueueConfig (Kueue dispatches to all and keeps the first that admits).
    """

    manager: E2EStack
    worker: E2EStack
    name: str = "e2e-worker"
    more_workers: tuple[E2EStack, ...] = ()

    @property
    def _client(self) -> Any:
        return self.manager.client

    @property
    def workers(self) -> tuple[E2EStack, ...]:
        return (self.worker, *self.more_workers)

    def cluster_name(self, index: int) -> str:
        """The MultiKueueCluster of ``workers[index]``: ``name`` for the first, ``name-<index>`` after."""
        return self.name if index == 0 else f"{self.name}-{index}"

    def start(self) -> Self:
        try:
            self._register_jobset_webhook()
            self._create_objects()
            self._set_cluster_queue_check(self.name)
            self._wait_active()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        with contextlib.suppress(StackError, OSError):
            self._set_cluster_queue_check(None)
        paths = [f"{KUEUE}/admissionchecks/{self.name}", f"{KUEUE}/multikueueconfigs/{self.name}"]
        for index in range(len(self.workers)):
            cluster = self.cluster_name(index)
            paths += [
                f"{KUEUE}/multikueueclusters/{cluster}",
                f"/api/v1/namespaces/{KUEUE_NAMESPACE}/secrets/{cluster}-kubeconfig",
            ]
        for path in (*paths, f"{_WEBHOOKS}/{self.webhook_name}"):
            with contextlib.suppress(StackError, OSError):
                self._client.delete(path)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    @property
    def webhook_name(self) -> str:
        return f"{self.name}-kueue-jobset"

    def cluster_status(self, index: int = 0) -> dict[str, Any]:
        path = f"{KUEUE}/multikueueclusters/{self.cluster_name(index)}"
        found: dict[str, Any] = self._client.get(path).get("status") or {}
        return found

    # ---- pieces ------------------------------------------------------------------------------------

    def _register_jobset_webhook(self) -> None:
        controllers = self.manager.kube.controllers
        port = controllers.ports.get("kueue-webhook")
        if port is None:
            raise StackError("the manager's Kueue has no webhook port recorded")
        ca = self.manager.kube.control_plane.certificates.ca_cert.read_bytes()
        self._client.apply(
            _WEBHOOKS,
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "MutatingWebhookConfiguration",
                "metadata": {"name": self.webhook_name},
                "webhooks": [
                    {
                        "name": "mjobset.kb.io",
                        "clientConfig": {
                            "url": f"https://127.0.0.1:{port}{_JOBSET_WEBHOOK_PATH}",
                            "caBundle": base64.b64encode(ca).decode(),
                        },
                        "rules": [
                            {
                                "apiGroups": ["jobset.x-k8s.io"],
                                "apiVersions": ["v1alpha2"],
                                "operations": ["CREATE"],
                                "resources": ["jobsets"],
                            }
                        ],
                        # As Kueue's manifests have it: no JobSet is created while Kueue cannot default it.
                        "failurePolicy": "Fail",
                        "sideEffects": "None",
                        "admissionReviewVersions": ["v1"],
                        "timeoutSeconds": 10,
                    }
                ],
            },
        )

    def _create_objects(self) -> None:
        clusters = [self.cluster_name(index) for index in range(len(self.workers))]
        for cluster, worker in zip(clusters, self.workers, strict=True):
            self._client.apply(
                f"/api/v1/namespaces/{KUEUE_NAMESPACE}/secrets",
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {"name": f"{cluster}-kubeconfig", "namespace": KUEUE_NAMESPACE},
                    "type": "Opaque",
                    "stringData": {"kubeconfig": inline_kubeconfig(worker.kube.control_plane)},
                },
            )
            source = {"kubeConfig": {"locationType": "Secret", "location": f"{cluster}-kubeconfig"}}
            self._apply_kueue("multikueueclusters", "MultiKueueCluster", cluster, {"clusterSource": source})
        self._apply_kueue("multikueueconfigs", "MultiKueueConfig", self.name, {"clusters": clusters})
        parameters = {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": self.name}
        self._apply_kueue(
            "admissionchecks",
            "AdmissionCheck",
            self.name,
            {"controllerName": MULTIKUEUE_CONTROLLER, "parameters": parameters},
        )

    def _apply_kueue(self, collection: str, kind: str, name: str, spec: dict[str, Any]) -> None:
        self._client.apply(
            f"{KUEUE}/{collection}",
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": kind, "metadata": {"name": name}, "spec": spec},
        )

    def _set_cluster_queue_check(self, check: str | None) -> None:
        path = f"{KUEUE}/clusterqueues/{self.manager.settings.cluster_queue}"
        strategy = {"admissionChecks": [{"name": check}]} if check else None
        self._client.request(
            "PATCH",
            path,
            body={"spec": {"admissionChecksStrategy": strategy}},
            content_type="application/merge-patch+json",
        )

    def _wait_active(self) -> None:
        def condition_true(path: str, kind: str) -> bool:
            try:
                conditions = (self._client.get(path).get("status") or {}).get("conditions") or []
            except ApiError:
                return False
            return any(c.get("type") == kind and c.get("status") == "True" for c in conditions)

        clusters = [self.cluster_name(index) for index in range(len(self.workers))]
        for path, kind in (
            *((f"{KUEUE}/multikueueclusters/{cluster}", "Active") for cluster in clusters),
            (f"{KUEUE}/admissionchecks/{self.name}", "Active"),
            (f"{KUEUE}/clusterqueues/{self.manager.settings.cluster_queue}", "Active"),
        ):
            wait_for(
                lambda path=path, kind=kind: condition_true(path, kind),  # type: ignore[misc]
                timeout=60,
                what=f"{path} to be {kind}",
                describe=lambda path=path: str(self._client.get(path).get("status")),  # type: ignore[misc]
            )
