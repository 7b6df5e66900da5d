"""charts/k8s-bridge with the real helm (built by the stack build) and a real kube-apiserver.

What is checked, and against what:

- ``helm lint --strict`` with the default values and ``ci/full-values.yaml`` (every switch moved);
- ``helm template`` with each combination of ``slurmBridge.enabled`` / ``rayBridge.enabled``, the
  result read structurally: the kinds each combination makes (no webhook without the Ray bridge),
  the security contexts, the probes on the port the program serves them on, and the containers'
  arguments parsed by the programs' own ``parse_args`` (so a flag the chart passes is one the code
  takes, and the Lease the Role names is the one the program holds);
- the roles against the permission tables of the code (``bridge/<bridge>/permissions.py``): each
  ClusterRole, leader-election Role and JWT Secret Role grants exactly the table's verbs;
- the webhook: its path, failure policy, side effects, timeout, namespace selector, Service and port
  chain, and a caBundle that verifies the serving certificate for the Service's DNS names; the
  cert-manager and own-Secret certificate sources;
- hostile values refused by the schema, by ``helm template`` and ``helm lint`` alike, with a message
  naming the field; and the checks the schema cannot express (``fail`` in the templates);
- every rendered object sent to a real kube-apiserver (Kueue, JobSet, KubeRay and WorkloadMixing
  CRDs installed) as a server-side dry-run apply: the API server's own validation, CRD schemas and
  CEL rules included. ServiceMonitor, PrometheusRule, Certificate and Issuer are only read (their
  CRDs are not part of the stack);
- monitoring: the PrometheusRule is off by default and, when on, is the rules file promtool tests,
  unchanged; each ServiceMonitor labels its bridge's series the way those rules select them;
- a real ``helm install``, ``upgrade`` and ``uninstall`` on that API server: the webhook certificate is
  kept across an upgrade, made again (both CAs in the caBundle) when it is due for renewal, and
  uninstalling leaves nothing of the release.

The API server is ``kube_control_plane`` (no controllers: the Deployments stay without pods; the
bridges running from the chart are the e2e tier's).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from bridge.program.permissions import Rule, Scope, grants
from bridge.program.settings import ProgramSettings, bind_address
from bridge.ray import program as ray_program
from bridge.ray.permissions import RULES as RAY_RULES
from bridge.ray.webhook import GATE_PATH
from bridge.runtime.client import Client
from bridge.runtime.errors import ApiError, NotFound
from bridge.runtime.handlers import Object
from bridge.runtime.session import Session
from bridge.sandbox.build import stack_paths
from bridge.sandbox.kube import ControlPlane
from bridge.slurm import program as slurm_program
from bridge.slurm.permissions import RULES as SLURM_RULES

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART = REPO_ROOT / "charts" / "k8s-bridge"
FULL_VALUES = CHART / "ci" / "full-values.yaml"
NAMESPACE = "k8s-bridge"
RELEASE = "k8s-bridge"
WEBHOOK_NAME = "gate.ray.k8s-bridge.io"
# Kinds whose CRDs the stack does not install: read here, not dry-run.
NOT_SERVED = {"ServiceMonitor", "PrometheusRule", "Certificate", "Issuer"}
RULES_FILE = CHART / "files" / "prometheus-rules.yaml"
JWT = ("slurm", "slurm-jwt")
_PEM = Encoding.PEM


# --- helm --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def helm_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """helm's own folders in a temporary directory (never the user's ~/.config/helm)."""
    binary = stack_paths().helm
    if not binary.exists():
        pytest.fail(f"helm is not built ({binary}): run `python3 -m bridge.sandbox.build all`", pytrace=False)
    home = tmp_path_factory.mktemp("helm")
    return {
        **os.environ,
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
    }


def helm(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(stack_paths().helm), *args], env=env, capture_output=True, text=True, check=False, timeout=120
    )


def _set_args(values: dict[str, Any]) -> list[str]:
    return [arg for key, value in values.items() for arg in ("--set-json", f"{key}={json.dumps(value)}")]


def render(env: dict[str, str], values: dict[str, Any] | None = None, *files: Path) -> list[Object]:
    """``helm template`` of the chart: its objects (CRDs not included)."""
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    for file in files:
        args += ["--values", str(file)]
    done = helm(env, *args, *_set_args(values or {}))
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def _one(objects: Sequence[Object], kind: str, name: str | None = None) -> Object:
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"{len(found)} {kind} {name or ''}"
    return found[0]


def _component(obj: Object) -> str:
    return str(obj["metadata"]["labels"]["app.kubernetes.io/component"])


# --- lint, template --------------------------------------------------------------------------------


@pytest.mark.parametrize("files", [(), (FULL_VALUES,)], ids=["defaults", "full-values"])
def test_lint_strict_passes(helm_env: dict[str, str], files: tuple[Path, ...]) -> None:
    args = ["lint", "--strict", str(CHART)]
    for file in files:
        args += ["--values", str(file)]
    done = helm(helm_env, *args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 chart(s) failed" in done.stdout


SWITCHES = [(True, True), (True, False), (False, True)]


@pytest.mark.parametrize(("slurm", "ray"), SWITCHES, ids=["both", "slurm-only", "ray-only"])
def test_each_switch_combination_renders_only_its_bridges(
    helm_env: dict[str, str], slurm: bool, ray: bool
) -> None:
    objects = render(helm_env, {"slurmBridge.enabled": slurm, "rayBridge.enabled": ray})
    components = {_component(o) for o in objects}
    assert components == {name for name, on in (("slurm-bridge", slurm), ("ray-bridge", ray)) if on}
    webhooks = [o for o in objects if o["kind"] == "MutatingWebhookConfiguration"]
    assert len(webhooks) == (1 if ray else 0)
    for component in components:
        kinds = sorted(o["kind"] for o in objects if _component(o) == component)
        expected = [
            "ClusterRole",
            "ClusterRoleBinding",
            "Deployment",
            "Role",
            "RoleBinding",
            "Service",
            "ServiceAccount",
        ]
        if component == "ray-bridge":
            expected += ["MutatingWebhookConfiguration", "Secret", "Service"]
        assert kinds == sorted(expected), component


def test_no_bridge_at_all_is_refused(helm_env: dict[str, str]) -> None:
    args = [
        "template",
        RELEASE,
        str(CHART),
        *_set_args({"slurmBridge.enabled": False, "rayBridge.enabled": False}),
    ]
    done = helm(helm_env, *args)
    assert done.returncode != 0
    assert "neither slurmBridge.enabled nor rayBridge.enabled" in done.stderr


def _deployment(objects: Sequence[Object], component: str) -> Object:
    (found,) = [o for o in objects if o["kind"] == "Deployment" and _component(o) == component]
    return found


def _parsed(container: Object) -> ProgramSettings:
    program = {"k8s-bridge": slurm_program, "ray-bridge": ray_program}[container["command"][0]]
    _, settings, _ = program.parse_args(container["args"])
    assert isinstance(settings, ProgramSettings)
    return settings


@pytest.mark.parametrize("files", [(), (FULL_VALUES,)], ids=["defaults", "full-values"])
@pytest.mark.parametrize("component", ["slurm-bridge", "ray-bridge"])
def test_deployments_run_non_root_read_only_with_probes_and_flags_the_program_takes(
    helm_env: dict[str, str], files: tuple[Path, ...], component: str
) -> None:
    objects = render(helm_env, None, *files)
    deployment = _deployment(objects, component)
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65534
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    assert container["command"] == [{"slurm-bridge": "k8s-bridge", "ray-bridge": "ray-bridge"}[component]]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    assert container["resources"]["requests"]

    settings = _parsed(container)
    assert settings.leader_elect is True
    assert settings.leader_election_namespace == NAMESPACE
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    health = bind_address(settings.health_probe_bind_address)
    metrics = bind_address(settings.metrics_bind_address)
    assert health is not None
    assert metrics is not None
    assert ports["health"] == health[1]
    assert ports["metrics"] == metrics[1]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert (
        pod["serviceAccountName"]
        == _one(objects, "ServiceAccount", pod["serviceAccountName"])["metadata"]["name"]
    )
    assert pod["terminationGracePeriodSeconds"] > settings.graceful_shutdown_timeout

    service = next(
        o for o in objects
        if o["kind"] == "Service" and _component(o) == component
        and o["metadata"]["labels"].get("k8s-bridge.io/service") == "metrics"
    )  # fmt: skip
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": ports["metrics"], "targetPort": "metrics", "protocol": "TCP"}
    ]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()


def test_the_full_values_reach_the_programs(helm_env: dict[str, str]) -> None:
    objects = render(helm_env, None, FULL_VALUES)
    slurm = _parsed(_deployment(objects, "slurm-bridge")["spec"]["template"]["spec"]["containers"][0])
    ray = _parsed(_deployment(objects, "ray-bridge")["spec"]["template"]["spec"]["containers"][0])
    assert isinstance(slurm, slurm_program.Settings)
    assert isinstance(ray, ray_program.Settings)
    assert (slurm.config, slurm.lease_name, slurm.log_level, slurm.node_poll_interval) == (
        "site-slurm",
        "slurm-bridge-leader",
        "debug",
        2.0,
    )
    assert (ray.config, ray.lease_name, ray.mixing_controller, ray.verbose) == (
        "site-ray",
        "k8s-bridge-ray-site-ray",
        False,
        1,
    )
    assert ray.cluster_domain == "cluster.example"
    assert ray.webhook_cert_dir == "/run/ray-bridge/certs"
    assert bind_address(ray.webhook_bind_address) == ("0.0.0.0", 10443)
    image = _deployment(objects, "slurm-bridge")["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == "registry.example.com:5000/hpc/k8s-bridge@sha256:" + "0123456789abcdef" * 4
    mixings = {o["metadata"]["name"]: o for o in objects if o["kind"] == "WorkloadMixing"}
    assert set(mixings) == {"site-slurm", "site-ray"}


def test_extra_volumes_are_added_beside_the_charts_own(helm_env: dict[str, str]) -> None:
    # slurm.conf for the Slurm bridge's scontrol fallback, from a ConfigMap (ci/full-values.yaml).
    objects = render(helm_env, None, FULL_VALUES)
    for component, volume, path in (
        ("slurm-bridge", "slurm-conf", "/etc/slurm"),
        ("ray-bridge", "ca-bundle", "/etc/ssl/site"),
    ):
        pod = _deployment(objects, component)["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert {"tmp", volume} <= set(volumes)
        assert ("webhook-cert" in volumes) == (component == "ray-bridge")
        mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
        assert mounts[volume] == {"name": volume, "mountPath": path, "readOnly": True}
        assert mounts["tmp"]["mountPath"] == "/tmp"
    slurm_pod = _deployment(objects, "slurm-bridge")["spec"]["template"]["spec"]
    assert {"name": "slurm-conf", "configMap": {"name": "slurm-conf"}} in slurm_pod["volumes"]
    # By default, only the chart's own.
    default = _deployment(render(helm_env), "slurm-bridge")["spec"]["template"]["spec"]
    assert [v["name"] for v in default["volumes"]] == ["tmp"]


# --- RBAC --------------------------------------------------------------------------------------------


def _granted(role: Object) -> frozenset[tuple[str, str, str, bool]]:
    return frozenset(
        (group, resource, verb, bool(rule.get("resourceNames")))
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    )


def _names(role: Object) -> set[str]:
    return {name for rule in role["rules"] for name in rule.get("resourceNames") or ()}


def _roles(objects: Sequence[Object], component: str) -> dict[str, Object]:
    """The component's roles by what they are for: cluster, lease, secret."""
    out: dict[str, Object] = {}
    for obj in objects:
        if obj["kind"] not in ("ClusterRole", "Role") or _component(obj) != component:
            continue
        name = obj["metadata"]["name"]
        scope = (
            "cluster"
            if obj["kind"] == "ClusterRole"
            else "lease"
            if name.endswith("-leader-election")
            else "secret"
        )
        assert scope not in out
        out[scope] = obj
    return out


def _bound(objects: Sequence[Object], role: Object) -> list[Object]:
    kind = {"ClusterRole": "ClusterRoleBinding", "Role": "RoleBinding"}[role["kind"]]
    return [
        subject
        for o in objects
        if o["kind"] == kind and o["roleRef"]["name"] == role["metadata"]["name"]
        and o["metadata"].get("namespace") == role["metadata"].get("namespace")
        for subject in o["subjects"]
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("component", "rules"), [("slurm-bridge", SLURM_RULES), ("ray-bridge", RAY_RULES)], ids=["slurm", "ray"]
)
def test_roles_grant_exactly_what_the_code_uses(
    helm_env: dict[str, str], component: str, rules: tuple[Rule, ...]
) -> None:
    objects = render(helm_env, {"slurmBridge.jwtSecret": {"namespace": JWT[0], "name": JWT[1]}})
    roles = _roles(objects, component)
    deployment = _deployment(objects, component)
    pod = deployment["spec"]["template"]["spec"]
    settings = _parsed(pod["containers"][0])
    account = {"kind": "ServiceAccount", "name": pod["serviceAccountName"], "namespace": NAMESPACE}

    assert _granted(roles["cluster"]) == grants(rules, scope=Scope.CLUSTER)
    assert _granted(roles["lease"]) == grants(rules, scope=Scope.LEASE)
    assert roles["lease"]["metadata"]["namespace"] == settings.leader_election_namespace
    assert _names(roles["lease"]) == {settings.lease_name}
    if grants(rules, scope=Scope.SECRET):
        assert _granted(roles["secret"]) == grants(rules, scope=Scope.SECRET)
        assert roles["secret"]["metadata"]["namespace"] == JWT[0]
        assert _names(roles["secret"]) == {JWT[1]}
    else:
        assert "secret" not in roles
    for role in roles.values():
        assert _bound(objects, role) == [account], role["metadata"]["name"]


def test_the_jwt_secret_role_follows_the_workloadmixing_the_chart_creates(helm_env: dict[str, str]) -> None:
    objects = render(helm_env, None, FULL_VALUES)
    secret_role = _roles(objects, "slurm-bridge")["secret"]
    assert (secret_role["metadata"]["namespace"], _names(secret_role)) == ("slurm", {"slurm-jwt"})
    assert "secret" not in _roles(render(helm_env), "slurm-bridge")


# --- the webhook -------------------------------------------------------------------------------------


def _certificate(pem: bytes) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(pem)


def test_the_webhook_registration_matches_the_server_and_its_certificate(helm_env: dict[str, str]) -> None:
    objects = render(helm_env)
    configuration = _one(objects, "MutatingWebhookConfiguration")
    (webhook,) = configuration["webhooks"]
    assert webhook["name"] == WEBHOOK_NAME
    assert webhook["failurePolicy"] == "Ignore"
    assert webhook["sideEffects"] == "None"
    assert webhook["timeoutSeconds"] == 5
    assert webhook["admissionReviewVersions"] == ["v1"]
    assert webhook["namespaceSelector"] == {"matchLabels": {"k8s-bridge.io/ray-bridge": "enabled"}}
    assert webhook["rules"] == [
        {"apiGroups": ["ray.io"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["rayjobs"],
         "scope": "Namespaced"}
    ]  # fmt: skip
    reference = webhook["clientConfig"]["service"]
    assert reference["path"] == GATE_PATH
    assert reference["namespace"] == NAMESPACE
    service = _one(objects, "Service", reference["name"])
    (port,) = [p for p in service["spec"]["ports"] if p["port"] == reference["port"]]
    pod = _deployment(objects, "ray-bridge")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    settings = _parsed(container)
    assert isinstance(settings, ray_program.Settings)
    target = {p["name"]: p["containerPort"] for p in container["ports"]}[port["targetPort"]]
    assert bind_address(settings.webhook_bind_address) == ("0.0.0.0", target)

    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == settings.webhook_cert_dir)
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    secret = _one(objects, "Secret", volume["secret"]["secretName"])
    assert {item["path"] for item in volume["secret"]["items"]} == {"tls.crt", "tls.key"}
    leaf = _certificate(base64.b64decode(secret["data"]["tls.crt"]))[0]
    (ca,) = _certificate(base64.b64decode(webhook["clientConfig"]["caBundle"]))
    leaf.verify_directly_issued_by(ca)
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert f"{reference['name']}.{NAMESPACE}.svc" in names.get_values_for_type(x509.DNSName)


def test_cert_manager_makes_the_certificate_and_injects_the_ca(helm_env: dict[str, str]) -> None:
    objects = render(helm_env, {"rayBridge.webhook.certificate.source": "cert-manager"})
    assert not [o for o in objects if o["kind"] == "Secret"]
    certificate = _one(objects, "Certificate")
    issuer = _one(objects, "Issuer")
    assert certificate["spec"]["issuerRef"]["name"] == issuer["metadata"]["name"]
    assert issuer["spec"] == {"selfSigned": {}}
    configuration = _one(objects, "MutatingWebhookConfiguration")
    assert configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
        f"{NAMESPACE}/{certificate['metadata']['name']}"
    )
    assert "caBundle" not in configuration["webhooks"][0]["clientConfig"]
    pod = _deployment(objects, "ray-bridge")["spec"]["template"]["spec"]
    assert certificate["spec"]["secretName"] in [
        v.get("secret", {}).get("secretName") for v in pod["volumes"]
    ]

    issuer_ref = {"name": "site-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}
    objects = render(
        helm_env,
        {"rayBridge.webhook.certificate.source": "cert-manager",
         "rayBridge.webhook.certificate.certManager.issuerRef": issuer_ref},
    )  # fmt: skip
    assert not [o for o in objects if o["kind"] == "Issuer"]
    assert _one(objects, "Certificate")["spec"]["issuerRef"] == issuer_ref


def test_an_own_secret_and_ca_bundle_are_used_as_given(helm_env: dict[str, str]) -> None:
    bundle = base64.b64encode(b"-----BEGIN CERTIFICATE-----\n...\n").decode()
    objects = render(
        helm_env,
        {"rayBridge.webhook.certificate.source": "secret",
         "rayBridge.webhook.certificate.secretName": "my-webhook-tls",
         "rayBridge.webhook.certificate.caBundle": bundle},
    )  # fmt: skip
    assert not [o for o in objects if o["kind"] in ("Secret", "Certificate", "Issuer")]
    assert _one(objects, "MutatingWebhookConfiguration")["webhooks"][0]["clientConfig"]["caBundle"] == bundle
    pod = _deployment(objects, "ray-bridge")["spec"]["template"]["spec"]
    assert "my-webhook-tls" in [v.get("secret", {}).get("secretName") for v in pod["volumes"]]


def test_without_the_webhook_nothing_of_it_is_rendered_and_no_cert_dir_is_passed(
    helm_env: dict[str, str],
) -> None:
    objects = render(helm_env, {"rayBridge.webhook.enabled": False})
    assert not [o for o in objects if o["kind"] in ("MutatingWebhookConfiguration", "Secret")]
    settings = _parsed(_deployment(objects, "ray-bridge")["spec"]["template"]["spec"]["containers"][0])
    assert isinstance(settings, ray_program.Settings)
    assert settings.webhook_cert_dir is None


# --- hostile values ----------------------------------------------------------------------------------

HOSTILE: list[tuple[dict[str, Any], str]] = [
    ({"slurmBridge.replicas": -1}, "at '/slurmBridge/replicas': minimum: got -1, want 0"),
    ({"rayBridge.replicas": 1.5}, "at '/rayBridge/replicas': got number, want integer"),
    (
        {"slurmBridge.image.repository": "Registry.Example.com/Bad Image!"},
        "at '/slurmBridge/image/repository'",
    ),
    ({"rayBridge.image.tag": "v1;rm -rf"}, "at '/rayBridge/image/tag'"),
    ({"slurmBridge.image.digest": "sha256:abc"}, "at '/slurmBridge/image/digest'"),
    ({"replicaCount": 3}, "additional properties 'replicaCount' not allowed"),
    ({"rayBridge.webhook.certificate.lifetime": 3}, "additional properties 'lifetime' not allowed"),
    ({"rayBridge.webhook.failurePolicy": "Maybe"}, "value must be one of 'Ignore', 'Fail'"),
    ({"prometheusRule.enabled": "yes"}, "at '/prometheusRule/enabled': got string, want boolean"),
    ({"prometheusRule.rules": []}, "additional properties 'rules' not allowed"),
    (
        {"rayBridge.webhook.certificate.source": "vault"},
        "value must be one of 'helm', 'cert-manager', 'secret'",
    ),
    ({"slurmBridge.logLevel": "trace"}, "at '/slurmBridge/logLevel'"),
    ({"slurmBridge.extraArgs": ["; sh"]}, "at '/slurmBridge/extraArgs/0'"),
    ({"slurmBridge.extraVolumes": [{"configMap": {"name": "x"}}]}, "at '/slurmBridge/extraVolumes/0'"),
    (
        {"rayBridge.extraVolumeMounts": [{"name": "x", "mountPath": "etc"}]},
        "at '/rayBridge/extraVolumeMounts/0",
    ),
]


@pytest.mark.parametrize(("values", "message"), HOSTILE, ids=[next(iter(v)) for v, _ in HOSTILE])
@pytest.mark.parametrize("command", ["template", "lint"])
def test_hostile_values_are_refused_by_the_schema_naming_the_field(
    helm_env: dict[str, str], command: str, values: dict[str, Any], message: str
) -> None:
    args = [command, *([RELEASE] if command == "template" else ["--strict"]), str(CHART), *_set_args(values)]
    done = helm(helm_env, *args)
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert "values don't meet the specifications of the schema" in output
    assert message in output


CHECKS: list[tuple[dict[str, Any], str]] = [
    ({"slurmBridge.config": "site", "rayBridge.config": "site"}, 'both name the WorkloadMixing "site"'),
    ({"rayBridge.replicas": 2, "rayBridge.leaderElection.enabled": False}, "rayBridge.replicas is 2"),
    ({"rayBridge.webhook.certificate.source": "secret"}, "set secretName"),
    ({"slurmBridge.jwtSecret": {"namespace": "", "name": "jwt"}}, "without its namespace"),
    ({"slurmBridge.extraVolumes": [{"name": "tmp", "emptyDir": {}}]}, 'the volume name "tmp" is the chart'),
]


@pytest.mark.parametrize(
    ("values", "message"), CHECKS, ids=["same-config", "replicas", "secret", "jwt", "volume-name"]
)
def test_what_the_schema_cannot_say_is_refused_by_the_templates(
    helm_env: dict[str, str], values: dict[str, Any], message: str
) -> None:
    done = helm(helm_env, "template", RELEASE, str(CHART), *_set_args(values))
    assert done.returncode != 0
    assert message in done.stderr


# --- monitoring --------------------------------------------------------------------------------------


def test_the_prometheus_rule_is_off_by_default(helm_env: dict[str, str]) -> None:
    assert [o for o in render(helm_env) if o["kind"] == "PrometheusRule"] == []


def test_the_prometheus_rule_is_the_rules_file_promtool_tests(helm_env: dict[str, str]) -> None:
    objects = render(helm_env, {"prometheusRule.enabled": True, "prometheusRule.labels": {"team": "hpc"}})
    rule = _one(objects, "PrometheusRule")
    assert rule["metadata"]["namespace"] == NAMESPACE
    assert rule["metadata"]["labels"]["team"] == "hpc"
    assert rule["spec"] == yaml.safe_load(RULES_FILE.read_text())
    # Not templated by helm: the alerts' own templates reach Prometheus.
    rules = [r for group in rule["spec"]["groups"] for r in group["rules"]]
    summaries = [r["annotations"]["summary"] for r in rules if "alert" in r]
    assert any("{{ $labels.bridge }}" in summary for summary in summaries)


@pytest.mark.parametrize(("component", "bridge"), [("slurm-bridge", "slurm"), ("ray-bridge", "ray")])
def test_each_service_monitor_labels_its_series_as_the_rules_select_them(
    helm_env: dict[str, str], component: str, bridge: str
) -> None:
    objects = render(helm_env, {"serviceMonitor.enabled": True})
    (monitor,) = [o for o in objects if o["kind"] == "ServiceMonitor" and _component(o) == component]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["relabelings"] == [{"action": "replace", "targetLabel": "bridge", "replacement": bridge}]
    assert f'bridge="{bridge}"' in RULES_FILE.read_text()


# --- on a real API server ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def plane(kube_control_plane: ControlPlane) -> ControlPlane:
    """The module's control plane with the chart's CRD too, and the namespaces the objects go to."""
    kube_control_plane.install_crds(CHART / "crds")
    for name in (NAMESPACE, JWT[0]):
        kube_control_plane.ensure_namespace(name)
    return kube_control_plane


async def _dry_run_all(plane: ControlPlane, objects: Sequence[Object]) -> None:
    async with await Session.load(config_file=str(plane.kubeconfig)) as session:
        client = Client(session)
        for obj in objects:
            if obj["kind"] in NOT_SERVED:
                continue
            await client.apply(obj, field_manager="chart-test", dry_run=True)


CASES: list[tuple[dict[str, Any], tuple[Path, ...]]] = [
    ({}, ()),
    ({"rayBridge.enabled": False}, ()),
    ({"slurmBridge.enabled": False}, ()),
    ({"slurmBridge.jwtSecret": {"namespace": JWT[0], "name": JWT[1]}}, ()),
    ({"rayBridge.webhook.certificate.source": "cert-manager"}, ()),
    ({}, (FULL_VALUES,)),
]


@pytest.mark.parametrize(
    ("values", "files"),
    CASES,
    ids=["defaults", "slurm-only", "ray-only", "jwt", "cert-manager", "full-values"],
)
async def test_every_rendered_object_passes_a_server_side_dry_run(
    helm_env: dict[str, str], plane: ControlPlane, values: dict[str, Any], files: tuple[Path, ...]
) -> None:
    objects = render(helm_env, values, *files)
    await _dry_run_all(plane, objects)


async def test_a_refused_object_fails_the_dry_run(helm_env: dict[str, str], plane: ControlPlane) -> None:
    # The check itself: the API server (not helm) refuses a WorkloadMixing its CRD does not allow.
    objects = render(
        helm_env,
        {
            "rayBridge.workloadMixing": {
                "create": True,
                "spec": {"ray": {"clusterSelector": {}, "mapping": {}}},
            }
        },
    )
    with pytest.raises(ApiError, match=r"spec\.ray\.mapping"):
        await _dry_run_all(plane, objects)


@pytest.fixture
def release(helm_env: dict[str, str], plane: ControlPlane) -> Iterator[tuple[str, str]]:
    """A release name and namespace of this test's own, uninstalled (if still there) after it."""
    name, namespace = f"kb-{uuid.uuid4().hex[:6]}", f"kb-{uuid.uuid4().hex[:6]}"
    yield name, namespace
    helm(helm_env, "uninstall", name, "--namespace", namespace, "--kubeconfig", str(plane.kubeconfig))


def _helm_on(env: dict[str, str], plane: ControlPlane, *args: str) -> str:
    done = helm(env, *args, "--kubeconfig", str(plane.kubeconfig))
    assert done.returncode == 0, done.stderr
    return done.stdout


async def _webhook_state(
    client: Client, name: str, namespace: str
) -> tuple[bytes, bytes, list[x509.Certificate]]:
    secret = await client.get("v1", "Secret", f"{name}-k8s-bridge-ray-webhook-cert", namespace=namespace)
    configuration = await client.get(
        "admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration", f"{name}-k8s-bridge-ray-gate"
    )
    bundle = base64.b64decode(configuration["webhooks"][0]["clientConfig"]["caBundle"])
    return (
        base64.b64decode(secret["data"]["tls.crt"]),
        base64.b64decode(secret["data"]["ca.crt"]),
        _certificate(bundle),
    )


async def test_install_keeps_the_webhook_certificate_across_upgrades_renews_it_and_uninstall_leaves_nothing(
    helm_env: dict[str, str], plane: ControlPlane, release: tuple[str, str]
) -> None:
    name, namespace = release
    install = [
        "--namespace",
        namespace,
        *_set_args({"slurmBridge.jwtSecret": {"namespace": JWT[0], "name": JWT[1]}}),
    ]
    notes = _helm_on(helm_env, plane, "install", name, str(CHART), "--create-namespace", *install)
    assert "Secret slurm/slurm-jwt" in notes
    assert "kubectl label namespace <namespace> k8s-bridge.io/ray-bridge=enabled" in notes
    async with await Session.load(config_file=str(plane.kubeconfig)) as session:
        client = Client(session)
        crt, ca, bundle = await _webhook_state(client, name, namespace)
        assert [c.public_bytes(_PEM) for c in bundle] == [ca]
        _certificate(crt)[0].verify_directly_issued_by(bundle[0])

        _helm_on(helm_env, plane, "upgrade", name, str(CHART), *install)
        assert await _webhook_state(client, name, namespace) == (crt, ca, bundle)

        # Due for renewal: a new pair, and the caBundle trusts the old CA too until pods reload.
        await client.patch(
            "v1", "Secret", f"{name}-k8s-bridge-ray-webhook-cert",
            {"metadata": {"annotations": {"k8s-bridge.io/not-after": "1"}}}, namespace=namespace,
        )  # fmt: skip
        _helm_on(helm_env, plane, "upgrade", name, str(CHART), *install)
        new_crt, new_ca, new_bundle = await _webhook_state(client, name, namespace)
        assert new_crt != crt
        assert new_ca != ca
        assert [c.public_bytes(_PEM) for c in new_bundle] == [new_ca, ca]
        _certificate(new_crt)[0].verify_directly_issued_by(new_bundle[0])

        _helm_on(helm_env, plane, "uninstall", name, "--namespace", namespace)
        selector = f"app.kubernetes.io/instance={name}"
        left: list[str] = []
        for api_version, kind, ns in [
            ("v1", "ServiceAccount", namespace), ("v1", "Service", namespace), ("v1", "Secret", namespace),
            ("apps/v1", "Deployment", namespace), ("rbac.authorization.k8s.io/v1", "Role", None),
            ("rbac.authorization.k8s.io/v1", "RoleBinding", None),
            ("rbac.authorization.k8s.io/v1", "ClusterRole", None),
            ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", None),
            ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration", None),
        ]:  # fmt: skip
            left += [
                f"{kind} {o['metadata']['name']}"
                for o in await client.list(api_version, kind, namespace=ns, label_selector=selector)
            ]
        assert left == []
        with pytest.raises(NotFound):
            await client.get("v1", "Secret", f"sh.helm.release.v1.{name}.v1", namespace=namespace)
