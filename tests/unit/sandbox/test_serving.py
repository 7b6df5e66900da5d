"""bridge.sandbox.serving: only what asks for a Kueue queue is sent to Kueue's pod and Deployment webhooks."""

from __future__ import annotations

import base64

from bridge.sandbox.controllers import DEFAULT_KUEUE_FRAMEWORKS
from bridge.sandbox.serving import SANDBOX_KUEUE_FRAMEWORKS, webhook_configuration


def test_kueue_runs_the_pod_and_deployment_integrations_beside_the_default_ones() -> None:
    assert set(SANDBOX_KUEUE_FRAMEWORKS) == {*DEFAULT_KUEUE_FRAMEWORKS, "pod", "deployment"}


def test_pods_and_deployments_go_to_kueues_own_paths_only_when_they_name_a_queue() -> None:
    config = webhook_configuration(port=4443, ca_cert=b"PEM")
    hooks = {hook["rules"][0]["resources"][0]: hook for hook in config["webhooks"]}
    assert hooks["pods"]["clientConfig"]["url"] == "https://127.0.0.1:4443/mutate--v1-pod"
    assert hooks["deployments"]["clientConfig"]["url"] == "https://127.0.0.1:4443/mutate-apps-v1-deployment"
    assert hooks["pods"]["rules"][0]["operations"] == ["CREATE"]
    for hook in hooks.values():
        # The slurmd and Ray pods of the stack carry no queue label: they are created without a call.
        assert hook["objectSelector"] == {
            "matchExpressions": [{"key": "kueue.x-k8s.io/queue-name", "operator": "Exists"}]
        }
        assert hook["failurePolicy"] == "Fail"
        assert base64.b64decode(hook["clientConfig"]["caBundle"]) == b"PEM"
