"""Kueue's pod and Deployment integrations in the sandbox: serving work in the same queue as batch work.

Why a module: an inference Deployment is queued by Kueue as one single-pod Workload per replica,
which needs two things the e2e stack does not have by default. Kueue must run its ``pod`` and
``deployment`` integrations (:data:`SANDBOX_KUEUE_FRAMEWORKS`, given to the
:class:`~bridge.sandbox.stack.KubeStack`), and the API server must call Kueue's webhooks for them: the
Deployment webhook copies the queue label to the pod template, the pod webhook puts the admission
scheduling gate on each new pod, which Kueue lifts when it admits the pod's Workload and puts back
(by deleting the pod; the ReplicaSet makes a gated one) when it preempts it.

The registration (:func:`register_serving_webhooks`) has an ``objectSelector`` on the queue label:
only objects that ask for a Kueue queue are sent to Kueue, so the slurmd pods, the Ray pods and
every other pod of the stack are created without a call. Kueue listens on the host's loopback
(``Controllers.ports["kueue-webhook"]``) with the control plane's serving pair, as the Ray bridge's
gate does (:mod:`bridge.sandbox.ray_e2e`); ``failurePolicy: Fail``, as Kueue's manifests have it: a
pod that asks for a queue is not created ungated.
"""

from __future__ import annotations

import base64
import contextlib
from typing import Any

from bridge.sandbox.controllers import DEFAULT_KUEUE_FRAMEWORKS
from bridge.sandbox.processes import StackError
from bridge.sandbox.stack import KubeStack

__all__ = [
    "SANDBOX_KUEUE_FRAMEWORKS",
    "SERVING_WEBHOOKS",
    "register_serving_webhooks",
    "remove_serving_webhooks",
    "webhook_configuration",
]

SANDBOX_KUEUE_FRAMEWORKS = (*DEFAULT_KUEUE_FRAMEWORKS, "pod", "deployment")
SERVING_WEBHOOKS = "sandbox-kueue-serving"
_WEBHOOKS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# Kueue's own names and paths (controller-runtime's /mutate-<group>-<version>-<kind>).
_HOOKS = (
    ("mpod.kb.io", "/mutate--v1-pod", "", "pods"),
    ("mdeployment.kb.io", "/mutate-apps-v1-deployment", "apps", "deployments"),
)


def webhook_configuration(*, port: int, ca_cert: bytes) -> dict[str, Any]:
    """The MutatingWebhookConfiguration that sends queued pods and Deployments to a Kueue listening on
    the host's ``port``, its serving certificate signed by ``ca_cert`` (PEM)."""
    ca = base64.b64encode(ca_cert).decode()
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": SERVING_WEBHOOKS},
        "webhooks": [
            {
                "name": name,
                "clientConfig": {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca},
                "rules": [
                    {
                        "apiGroups": [group],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"] if resource == "deployments" else ["CREATE"],
                        "resources": [resource],
                    }
                ],
                "objectSelector": {"matchExpressions": [{"key": _QUEUE_LABEL, "operator": "Exists"}]},
                "namespaceSelector": {
                    "matchExpressions": [
                        {
                            "key": "kubernetes.io/metadata.name",
                            "operator": "NotIn",
                            "values": ["kube-system", "kueue-system"],
                        }
                    ]
                },
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 10,
            }
            for name, path, group, resource in _HOOKS
        ],
    }


def register_serving_webhooks(kube: KubeStack) -> None:
    """Register (or update) :data:`SERVING_WEBHOOKS` for ``kube``'s Kueue, which must run the
    :data:`SANDBOX_KUEUE_FRAMEWORKS`."""
    missing = {"pod", "deployment"} - set(kube.controllers.kueue_frameworks)
    if missing:
        raise StackError(f"Kueue does not run the {sorted(missing)} integration(s): pods would stay gated")
    port = kube.controllers.ports.get("kueue-webhook")
    if port is None:
        raise StackError("Kueue is not running: no webhook port recorded")
    ca_cert = kube.control_plane.certificates.ca_cert.read_bytes()
    kube.control_plane.client.apply(_WEBHOOKS, webhook_configuration(port=port, ca_cert=ca_cert))


def remove_serving_webhooks(kube: KubeStack) -> None:
    with contextlib.suppress(StackError, OSError):
        kube.control_plane.client.delete(f"{_WEBHOOKS}/{SERVING_WEBHOOKS}")
