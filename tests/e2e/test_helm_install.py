"""charts/k8s-bridge installed for real with helm into the local stack, the bridges running as the chart's
Deployments, with the API server's audit log on.

What is shown, in order (the tests share one release and build on each other):

1. the previous chart version (0.1.0, ``tests/data/k8s-bridge-0.1.0.tgz``) installs; the process runner
   runs both Deployments' pods (the chart's command, in-cluster configuration under the chart's
   ServiceAccounts, the token requested through the TokenRequest API); a Slurm job (``sbatch --hold``
   into the bridged partition) and a RayJob in the shared RayCluster are bridged end to end;
2. the upgrade to this chart as docs/upgrade-guide.md says: the new CRD by server-side apply (refused
   without ``--force-conflicts``), then ``helm upgrade --reset-then-reuse-values`` (``--reuse-values``
   is refused: the new values are missing), slurm.conf now from a ConfigMap (``extraVolumes``); the
   jobs in flight finish, a new Slurm job is bridged by the new pods;
3. ``helm uninstall`` with jobs in flight leaves their JobSets (and a deleted RayJob) on the bridges'
   finalizers, which a reinstall finishes; uninstalling in the documented order (no bridged job in
   flight, the Deployments scaled to 0 and their pods gone, then ``helm uninstall``) leaves nothing of
   the release and no object on a finalizer;
4. the audit log against the permission tables the chart's roles are made from: no call of either
   bridge's ServiceAccount was refused by the authoriser (outside the window in which the roles were
   deleted under running bridges), every call is granted, every grant was used or is explained
   (:data:`UNUSED_OK`, :data:`STREAMING_LIST`).

The stack is this module's own (``KubeStack(audit=True)``, its own pool ``helm-e2e``, Slurm 22.05).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from bridge.program.permissions import Rule
from bridge.ray.permissions import RULES as RAY_RULES
from bridge.sandbox import audit
from bridge.sandbox.build import MissingPrerequisiteError, stack_paths
from bridge.sandbox.e2e import E2ESettings, E2EStack, wait_for
from bridge.sandbox.kube import ApiError
from bridge.sandbox.kuberay import RAY_API
from bridge.sandbox.netns import existing_namespaces
from bridge.sandbox.processes import StackError
from bridge.sandbox.ray_e2e import RayPool
from bridge.sandbox.slurm import SlurmCluster
from bridge.sandbox.stack import KubeStack
from bridge.slurm.permissions import RULES as SLURM_RULES
from tests.fixtures.e2e import scancel
from tests.fixtures.slurm import started_cluster
from translators.ray import FINALIZER as RAY_FINALIZER
from translators.slurm import FINALIZER as SLURM_FINALIZER

pytestmark = [pytest.mark.slurm, pytest.mark.ray]

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "k8s-bridge"
PREVIOUS_CHART = REPO / "tests" / "data" / "k8s-bridge-0.1.0.tgz"
RELEASE = "k8s-bridge"
NAMESPACE = "k8s-bridge"
TIMEOUT = 240.0
SLURM_CONF_MOUNT = "/etc/slurm"
GATE_ANNOTATION = "bridge.k8s-bridge.io/ray-gate"
DRIVER = (
    'python -c "import ray, time; ray.init(); time.sleep({sleep}); '
    "print('RAN-ON', ray.util.get_node_ip_address(), flush=True)\""
)
SLURM_USER = audit.service_account_user(NAMESPACE, f"{RELEASE}-slurm")
RAY_USER = audit.service_account_user(NAMESPACE, f"{RELEASE}-ray")

UNUSED_OK: dict[tuple[str, str, str], str] = {
    ("jobset.x-k8s.io", "jobsets", "get"): (
        "the finalizer's removal reads the JobSet again only when the delete's own answer is not at "
        "hand (the removal in a later reconcile than the delete); a run may not need it"
    ),
    ("visibility.kueue.x-k8s.io", "localqueues/pendingworkloads", "get"): (
        "read for a job waiting in Kueue, whose position it shows; here a bridged job is admitted at "
        "once under the current chart (tests/e2e/test_slurm_waiting.py shows the position)"
    ),
    ("events.k8s.io", "events", "patch"): "a repeated Event patches its series; no Event repeats here",
    ("", "pods", "delete"): (
        "the pods of a JobSet deleted in the foreground whose Jobs are gone, while the garbage "
        "collector lags (a mass cancel); the soak bench (tests/bench/test_slurm_soak_bench.py) does it"
    ),
    ("", "services/proxy", "create"): (
        "the cancel of a RayJob deleted while still pending in Ray; tests/e2e/test_ray_bridge.py "
        "(test_a_rayjob_deleted_while_gated_is_cancelled_in_ray_and_its_jobset_goes) does it"
    ),
}
"""Grants this run does not use, each with why the bridge needs it all the same."""
RAY_UNUSED_OK: dict[tuple[str, str, str], str] = {
    ("jobset.x-k8s.io", "jobsets", "patch"): (
        "the Ray job id is recorded on a JobSet made before KubeRay named the job; a JobSet made "
        "after it (a reconcile later than KubeRay's naming, e.g. with --reconcile-batch-period) "
        "carries it from its creation; tests/unit/reconcilers/test_ray_decisions.py shows both"
    ),
}
"""Grants the Ray bridge's run need not use (the Slurm bridge's patches of its JobSets remove their
finalizer: always used)."""
STREAMING_LIST = (
    "every informer lists by a streaming watch (sendInitialEvents=true), authorised as watch, on this "
    "API server; the reflector falls back to a plain list where a server does not offer one (WatchList "
    "off, older servers) or refuses it, so list stays granted for each watched resource"
)


def unexplained(
    granted: set[tuple[str, str, str]],
    used: set[tuple[str, str, str]],
    *,
    explained: Mapping[tuple[str, str, str], str] = UNUSED_OK,
) -> set[tuple[str, str, str]]:
    """Grants neither used nor explained: by ``explained`` (:data:`UNUSED_OK`), or as the plain list
    of a resource that was watched (:data:`STREAMING_LIST`)."""
    return {
        (group, resource, verb)
        for group, resource, verb in granted - used
        if (group, resource, verb) not in explained
        and not (verb == "list" and (group, resource, "watch") in used)
    }


# --- the stack ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def kube_stack() -> Iterator[KubeStack]:
    """This module's own Kubernetes stack, the API server's audit log on."""
    stack = KubeStack(audit=True)
    try:
        stack.start()
    except MissingPrerequisiteError as missing:
        pytest.fail(f"the Kubernetes stack: missing prerequisite: {missing}", pytrace=False)
    except StackError as failed:
        pytest.fail(f"the Kubernetes stack did not start: {failed}", pytrace=False)
    try:
        yield stack
    finally:
        stack.stop()


@pytest.fixture(scope="module")
def slurm_cluster() -> Iterator[SlurmCluster]:
    yield from started_cluster(SlurmCluster(version="22.05"))


@pytest.fixture(scope="module")
def e2e_stack(
    kube_stack: KubeStack, slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[E2EStack]:
    """The pool without a WorkloadMixing: the chart makes it."""
    settings = E2ESettings(pool="helm-e2e", namespace="helm-slurm", quota_cpu="4", quota_memory="4Gi")
    stack = E2EStack(
        kube=kube_stack,
        slurm=slurm_cluster,
        workdir=tmp_path_factory.mktemp("helm-e2e"),
        settings=settings,
        mixing=False,
    )
    try:
        stack.start()
    except StackError as failed:
        pytest.fail(f"e2e stack did not start: {failed}", pytrace=False)
    try:
        yield stack
    finally:
        stack.stop()


@pytest.fixture(scope="module")
def ray(e2e_stack: E2EStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayPool]:
    """KubeRay and the shared RayCluster; the WorkloadMixing, webhook and certificate are the chart's."""
    pool = RayPool(
        e2e_stack, workdir=tmp_path_factory.mktemp("helm-ray"), namespace="helm-ray", bridge_wiring=False
    )
    try:
        pool.start()
    except StackError as failed:
        pytest.fail(f"the Ray pool did not start: {failed}", pytrace=False)
    try:
        yield pool
    finally:
        pool.stop()


@dataclass
class Release:
    """What the tests of this module share: the stack, helm, and where the audit log stood when."""

    e2e: E2EStack
    ray: RayPool
    helm_env: dict[str, str]
    namespaces_before: set[str]
    host_slurm_conf: Path
    """A copy of slurm.conf outside /tmp, for the 0.1.0 chart's pod (see :func:`values`)."""
    refused_window: tuple[int, int] | None = None
    old_chart_window: tuple[int, int] | None = None
    """Audit offsets while chart 0.1.0's roles served today's code (the runner ignores images): a
    call only today's roles grant is expected to be refused then."""
    """Audit log offsets between which the roles were deleted under running bridges."""
    steps: list[str] = field(default_factory=list)

    @property
    def client(self) -> Any:
        return self.e2e.client

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [str(stack_paths().helm), *args, "--kubeconfig", str(self.e2e.kube.kubeconfig)],
            env=self.helm_env,
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
        if check:
            assert done.returncode == 0, f"helm {' '.join(args[:2])}: {done.stdout}\n{done.stderr}"
        return done

    def audit_offset(self) -> int:
        return self.e2e.kube.control_plane.audit_log.stat().st_size


@pytest.fixture(scope="module")
def release(e2e_stack: E2EStack, ray: RayPool, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    if not stack_paths().helm.exists():
        pytest.fail(f"helm is not built ({stack_paths().helm}): python3 -m bridge.sandbox.build all")
    if REPO.is_relative_to("/tmp") and not os.environ.get("PYTHONPATH"):
        pytest.fail(
            f"the checkout is under /tmp ({REPO}), which the chart's emptyDir hides from the bridges' pods "
            "(they import the code from it): clone it elsewhere",
            pytrace=False,
        )
    home = tmp_path_factory.mktemp("helm-home")
    env = {
        **os.environ,
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
    }
    e2e_stack.kube.control_plane.ensure_namespace(NAMESPACE)
    conf = e2e_stack.slurm.host_path(e2e_stack.slurm.conf_path).read_text()
    e2e_stack.client.apply(
        f"/api/v1/namespaces/{NAMESPACE}/configmaps",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "slurm-conf", "namespace": NAMESPACE},
            "data": {"slurm.conf": conf},
        },
    )
    host_copy = Path("/var/tmp") / f"k8s-bridge-helm-e2e-{uuid.uuid4().hex[:8]}"
    host_copy.mkdir()
    (host_copy / "slurm.conf").write_text(conf)
    state = Release(
        e2e=e2e_stack,
        ray=ray,
        helm_env=env,
        namespaces_before=set(existing_namespaces()),
        host_slurm_conf=host_copy / "slurm.conf",
    )
    try:
        yield state
    finally:
        state.helm("uninstall", RELEASE, "--namespace", NAMESPACE, check=False)
        shutil.rmtree(host_copy, ignore_errors=True)


# --- values and views -----------------------------------------------------------------------------


def values(release: Release, *, slurm_conf_from_config_map: bool) -> dict[str, Any]:
    """The release's values: each bridge on its own WorkloadMixing (made by the chart from the pool's
    spec, slurmrestd by the host's name in the pods), the pods on the pool's runner nodes, and the
    test's import path (the runner runs the host's ``k8s-bridge`` and ``ray-bridge`` commands, whatever
    the image). slurm.conf (the scontrol fallback): the 0.1.0 chart has no extraVolumes, so its pod reads
    a copy on the host, which a runner pod sees outside /tmp (the chart's emptyDir there hides the
    host's); this chart mounts it from the ConfigMap ``slurm-conf``."""
    e2e, ray = release.e2e, release.ray
    key, value = e2e.settings.pool_label
    placement = {
        "nodeSelector": {key: value},
        "tolerations": [{"key": key, "operator": "Equal", "value": value, "effect": "NoSchedule"}],
        "gracefulShutdownTimeout": 10,
    }
    python_path = {"name": "PYTHONPATH", "value": os.environ.get("PYTHONPATH") or str(REPO)}
    spec = e2e.mixing_spec_dict()
    spec["slurm"]["url"] = e2e.slurm.pod_rest_url
    slurm: dict[str, Any] = {
        "config": e2e.mixing_name,
        "workloadMixing": {"create": True, "spec": spec},
        **placement,
    }
    if slurm_conf_from_config_map:
        conf = f"{SLURM_CONF_MOUNT}/slurm.conf"
        slurm["extraVolumes"] = [{"name": "slurm-conf", "configMap": {"name": "slurm-conf"}}]
        slurm["extraVolumeMounts"] = [{"name": "slurm-conf", "mountPath": SLURM_CONF_MOUNT, "readOnly": True}]
    else:
        conf = str(release.host_slurm_conf)
    slurm["extraEnv"] = [python_path, {"name": "SLURM_CONF", "value": conf}]
    return {
        "slurmBridge": slurm,
        "rayBridge": {
            "config": ray.mixing_name,
            "workloadMixing": {"create": True, "spec": ray.mixing_spec_dict()},
            "extraEnv": [python_path],
            **placement,
        },
    }


def values_file(release: Release, name: str, content: dict[str, Any]) -> str:
    path = release.e2e.workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(content))
    return str(path)


def bridge_pods(release: Release, component: str) -> list[dict[str, Any]]:
    selector = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component={component}"
    return release.e2e.list_items(f"/api/v1/namespaces/{NAMESPACE}/pods", labelSelector=selector)


def pod_log(release: Release, pod: dict[str, Any], lines: int = 30) -> str:
    meta = pod["metadata"]
    path = (
        release.e2e.workdir
        / "runner"
        / "logs"
        / f"{meta['namespace']}_{meta['name']}_{meta['uid'][:8]}_bridge.log"
    )
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return f"(no log at {path})"


def describe(release: Release) -> str:
    lines = []
    for component in ("slurm-bridge", "ray-bridge"):
        for pod in bridge_pods(release, component):
            status = pod.get("status", {})
            lines.append(
                f"pod {pod['metadata']['name']} {status.get('phase')} node={pod['spec'].get('nodeName')}"
            )
            lines.append(pod_log(release, pod))
    for jobset in [*release.e2e.jobsets(), *release.ray.jobsets()]:
        meta = jobset["metadata"]
        lines.append(f"JobSet {meta['namespace']}/{meta['name']} finalizers={meta.get('finalizers')}")
    return "\n".join(lines)


def deployment(release: Release, component: str) -> dict[str, Any]:
    name = f"{RELEASE}-{'slurm' if component == 'slurm-bridge' else 'ray'}"
    found: dict[str, Any] = release.client.get(f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{name}")
    return found


def wait_rolled_out(release: Release) -> None:
    """Both Deployments at their generation, every replica updated and available, no old pod left."""

    def done() -> bool:
        for component in ("slurm-bridge", "ray-bridge"):
            d = deployment(release, component)
            status, want = d.get("status") or {}, d["spec"]["replicas"]
            if status.get("observedGeneration", 0) < d["metadata"]["generation"]:
                return False
            if (status.get("updatedReplicas"), status.get("availableReplicas"), status.get("replicas")) != (
                want,
                want,
                want,
            ):
                return False
            if len(bridge_pods(release, component)) != want:
                return False
        return True

    wait_for(done, timeout=TIMEOUT, what="both bridges rolled out", describe=lambda: describe(release))


def job_state(release: Release, job_id: int) -> str:
    out = release.e2e.slurm.scontrol("show", "job", str(job_id), "--oneliner", check=False)
    found = re.search(r"\bJobState=(\S+)", out)
    return found.group(1) if found else "GONE"


def wait_job_state(release: Release, job_id: int, states: set[str]) -> str:
    state: str = wait_for(
        lambda: (s := job_state(release, job_id)) in states and s,
        timeout=TIMEOUT,
        what=f"Slurm job {job_id} in {sorted(states)}",
        describe=lambda: f"job {job_id}: {job_state(release, job_id)}\n{describe(release)}",
    )
    return state


def submit(release: Release, *, seconds: int) -> int:
    cluster = release.e2e.slurm
    return cluster.sbatch(
        "-N1", "--ntasks-per-node=1", "--mem=100", f"--output={cluster.jobs_dir}/helm-%j.out",
        script=f"#!/bin/sh\nsrun sleep {seconds}\n",
    )  # fmt: skip


def rayjob_status(release: Release, name: str) -> dict[str, Any]:
    return (release.ray.get_rayjob(name) or {}).get("status") or {}


def wait_rayjob(release: Release, name: str, statuses: set[str]) -> str:
    status: str = wait_for(
        lambda: (s := rayjob_status(release, name).get("jobStatus")) in statuses and s,
        timeout=TIMEOUT,
        what=f"RayJob {name} in {sorted(statuses)}",
        describe=lambda: f"{rayjob_status(release, name)}\n{describe(release)}",
    )
    return status


def create_gated_rayjob(release: Release, name: str, *, sleep: int) -> None:
    created = release.ray.create_rayjob(
        release.ray.rayjob(name, entrypoint=DRIVER.format(sleep=sleep), workers=1)
    )
    assert created["metadata"].get("annotations", {}).get(GATE_ANNOTATION), (
        "the chart's webhook did not gate it"
    )


def wait_bridged_jobs_gone(release: Release) -> None:
    wait_for(
        lambda: not release.e2e.jobsets() and not release.ray.jobsets() and not release.e2e.slurm_nodes(),
        timeout=TIMEOUT,
        what="the bridged JobSets deleted and the dynamic Slurm nodes gone",
        describe=lambda: describe(release),
    )


def wait_bridges_serving(release: Release) -> None:
    wait_rolled_out(release)
    release.ray.wait_gate_serving(describe=lambda: describe(release))


def left_of_release(release: Release) -> list[str]:
    """Everything labelled with the release, namespaced and cluster-scoped."""
    selector = f"app.kubernetes.io/instance={RELEASE}"
    found = []
    for path in (
        f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments",
        f"/apis/apps/v1/namespaces/{NAMESPACE}/replicasets",
        f"/api/v1/namespaces/{NAMESPACE}/pods",
        f"/api/v1/namespaces/{NAMESPACE}/services",
        f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts",
        f"/api/v1/namespaces/{NAMESPACE}/secrets",
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NAMESPACE}/roles",
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NAMESPACE}/rolebindings",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
        "/apis/bridge.k8s-bridge.io/v1alpha1/workloadmixings",
    ):
        found += [
            f"{path.rsplit('/', 1)[1]} {i['metadata']['name']}"
            for i in release.e2e.list_items(path, labelSelector=selector)
        ]
    return found


def on_a_finalizer(release: Release) -> list[str]:
    """Objects of the bridged namespaces still carrying a bridge's finalizer (the Slurm bridge's on
    its JobSets, the Ray bridge's on gated RayJobs, any other the bridges might add)."""
    prefix = SLURM_FINALIZER.split("/", 1)[0] + "/"
    assert RAY_FINALIZER.startswith(prefix)
    rayjobs = release.e2e.list_items(f"{RAY_API}/namespaces/{release.ray.namespace}/rayjobs")
    found = []
    for kind, items in (
        ("JobSet", release.e2e.jobsets()),
        ("JobSet", release.ray.jobsets()),
        ("RayJob", rayjobs),
    ):
        found += [
            f"{kind} {i['metadata']['name']} {finalizer}"
            for i in items
            for finalizer in i["metadata"].get("finalizers") or ()
            if finalizer.startswith(prefix)
        ]
    return found


# --- 1 and 2: install the previous chart, upgrade to this one ---------------------------------------


def test_the_previous_chart_installs_bridges_jobs_in_cluster_and_upgrades_with_its_crd(
    release: Release,
) -> None:
    e2e, ray = release.e2e, release.ray
    old = values_file(release, "values-0.1.0", values(release, slurm_conf_from_config_map=False))
    old_chart_from = release.audit_offset()
    release.helm("install", RELEASE, str(PREVIOUS_CHART), "--namespace", NAMESPACE, "--values", old)
    wait_bridges_serving(release)
    for component, account in (("slurm-bridge", f"{RELEASE}-slurm"), ("ray-bridge", f"{RELEASE}-ray")):
        (pod,) = bridge_pods(release, component)
        assert pod["spec"]["serviceAccountName"] == account
        assert pod["metadata"]["labels"]["helm.sh/chart"] == "k8s-bridge-0.1.0"

    first = submit(release, seconds=1)
    create_gated_rayjob(release, "first", sleep=0)
    assert wait_job_state(release, first, {"COMPLETED", "FAILED", "CANCELLED"}) == "COMPLETED"
    assert wait_rayjob(release, "first", {"SUCCEEDED", "FAILED"}) == "SUCCEEDED"
    ray.delete_rayjob("first")
    wait_bridged_jobs_gone(release)
    wait_for(lambda: ray.get_rayjob("first") is None, timeout=TIMEOUT, what="RayJob first let go")

    # In flight across the upgrade: a Slurm job running, a RayJob running.
    in_flight = submit(release, seconds=30)
    create_gated_rayjob(release, "across", sleep=30)
    wait_job_state(release, in_flight, {"RUNNING"})
    wait_rayjob(release, "across", {"RUNNING"})

    # The CRD first (docs/upgrade-guide.md): kubectl apply --server-side --force-conflicts, i.e. an
    # apply patch by the field manager "kubectl", forced over the fields Helm's install owns.
    crd = yaml.safe_load((CHART / "crds" / "workloadmixing.yaml").read_text())
    crd_path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd['metadata']['name']}"
    installed = release.client.get(crd_path)
    assert "Slurm-Held" not in str(installed["spec"]), "the CRD is not 0.1.0's: who installed it?"
    assert "helm" in {m["manager"] for m in installed["metadata"]["managedFields"]}
    with pytest.raises(ApiError) as conflict:
        release.client.request(
            "PATCH", crd_path, body=crd, query={"fieldManager": "kubectl"},
            content_type="application/apply-patch+yaml",
        )  # fmt: skip
    assert conflict.value.status == 409
    release.client.apply(
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd, field_manager="kubectl"
    )
    served = release.client.get(crd_path)
    columns = [c["name"] for c in served["spec"]["versions"][0]["additionalPrinterColumns"]]
    assert {"Slurm-Held", "Ray-Held"} <= set(columns)

    # Then the release. --reuse-values keeps the old chart's values, which lack this chart's new keys.
    new = values_file(release, "values-0.2.0", values(release, slurm_conf_from_config_map=True))
    refused = release.helm(
        "upgrade", RELEASE, str(CHART), "--namespace", NAMESPACE, "--reuse-values", check=False
    )
    assert refused.returncode != 0
    assert "extraVolumes" in refused.stderr, refused.stderr
    release.helm(
        "upgrade", RELEASE, str(CHART), "--namespace", NAMESPACE, "--reset-then-reuse-values", "--values", new
    )
    wait_bridges_serving(release)
    release.old_chart_window = (old_chart_from, release.audit_offset())
    (pod,) = bridge_pods(release, "slurm-bridge")
    assert pod["metadata"]["labels"]["helm.sh/chart"] == "k8s-bridge-0.2.0"
    mounts = pod["spec"]["containers"][0]["volumeMounts"]
    assert {"name": "slurm-conf", "mountPath": SLURM_CONF_MOUNT, "readOnly": True} in mounts
    # Table view: the new column is served for the WorkloadMixing the chart made.
    table = release.client.request(
        "GET", f"/apis/bridge.k8s-bridge.io/v1alpha1/workloadmixings/{e2e.mixing_name}",
        accept="application/json;as=Table;v=v1;g=meta.k8s.io",
    )  # fmt: skip
    assert "Slurm-Held" in [c["name"] for c in table["columnDefinitions"]]

    assert wait_job_state(release, in_flight, {"COMPLETED", "FAILED", "CANCELLED"}) == "COMPLETED"
    assert wait_rayjob(release, "across", {"SUCCEEDED", "FAILED"}) == "SUCCEEDED"
    after = submit(release, seconds=1)
    assert wait_job_state(release, after, {"COMPLETED", "FAILED", "CANCELLED"}) == "COMPLETED"
    ray.delete_rayjob("across")
    wait_bridged_jobs_gone(release)
    release.steps.append("upgraded")


# --- 3: uninstall ---------------------------------------------------------------------------------


def test_uninstall_with_jobs_in_flight_leaves_them_on_finalizers_and_the_documented_order_leaves_nothing(
    release: Release,
) -> None:
    assert release.steps == ["upgraded"], "runs after the install and upgrade test of this module"
    e2e, ray = release.e2e, release.ray
    new = values_file(release, "values-0.2.0", values(release, slurm_conf_from_config_map=True))

    # With jobs in flight: the Deployments, roles and ServiceAccounts go at once, the bridges with them.
    job = submit(release, seconds=600)  # ended below, once no bridge runs
    create_gated_rayjob(release, "orphan", sleep=15)
    wait_job_state(release, job, {"RUNNING"})
    wait_rayjob(release, "orphan", {"RUNNING"})
    start = release.audit_offset()
    release.helm("uninstall", RELEASE, "--namespace", NAMESPACE, "--wait")
    wait_for(
        lambda: not bridge_pods(release, "slurm-bridge") and not bridge_pods(release, "ray-bridge"),
        timeout=TIMEOUT, what="the bridge pods gone",
    )  # fmt: skip
    assert left_of_release(release) == []
    # The jobs end (the Slurm job cancelled by its user), but nothing lets their objects go.
    assert job_state(release, job) == "RUNNING"
    scancel(e2e, job)
    assert wait_job_state(release, job, {"COMPLETED", "FAILED", "CANCELLED"}) == "CANCELLED"
    assert wait_rayjob(release, "orphan", {"SUCCEEDED", "FAILED"}) == "SUCCEEDED"
    ray.delete_rayjob("orphan")
    # Deleted, and held by the Ray bridge's finalizer, which only the bridge removes.
    wait_for(
        lambda: "deletionTimestamp" in (ray.get_rayjob("orphan") or {}).get("metadata", {}),
        timeout=TIMEOUT, what="RayJob orphan marked deleted",
    )  # fmt: skip
    stuck = on_a_finalizer(release)
    assert any(s.startswith("RayJob orphan") for s in stuck), stuck
    assert any(s.startswith("JobSet") for s in stuck), stuck
    assert e2e.slurm_nodes(), "the job's dynamic Slurm nodes are left too"

    # A reinstall finishes them: the bridges are level-based.
    release.helm("install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--values", new)
    wait_bridges_serving(release)
    wait_bridged_jobs_gone(release)
    wait_for(lambda: ray.get_rayjob("orphan") is None, timeout=TIMEOUT, what="RayJob orphan let go")
    assert on_a_finalizer(release) == []
    release.refused_window = (start, release.audit_offset())

    # The documented order: no bridged job in flight (above), the bridges stopped, then the release.
    finished = submit(release, seconds=1)
    assert wait_job_state(release, finished, {"COMPLETED", "FAILED", "CANCELLED"}) == "COMPLETED"
    wait_bridged_jobs_gone(release)
    orderly = release.audit_offset()
    for component in ("slurm-bridge", "ray-bridge"):
        name = deployment(release, component)["metadata"]["name"]
        release.client.request(
            "PATCH", f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{name}/scale",
            body={"spec": {"replicas": 0}}, content_type="application/merge-patch+json",
        )  # fmt: skip
    wait_for(
        lambda: not bridge_pods(release, "slurm-bridge") and not bridge_pods(release, "ray-bridge"),
        timeout=TIMEOUT, what="the bridge pods gone after scaling to 0",
    )  # fmt: skip
    release.helm("uninstall", RELEASE, "--namespace", NAMESPACE, "--wait")
    assert left_of_release(release) == []
    assert on_a_finalizer(release) == []
    # What stays: the CRD (docs/upgrade-guide.md) and each bridge's Lease, released on its way out.
    assert release.client.exists(
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/workloadmixings.bridge.k8s-bridge.io"
    )
    leases = release.e2e.list_items(f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases")
    assert sorted(lease["metadata"]["name"] for lease in leases) == sorted(
        [f"k8s-bridge-slurm-{e2e.mixing_name}", f"k8s-bridge-ray-{ray.mixing_name}"]
    )
    assert [lease["spec"].get("holderIdentity") or "" for lease in leases] == ["", ""]
    lines = read_audit(release, orderly, release.audit_offset())
    refused = audit.forbidden(e for e in lines if e.user in (SLURM_USER, RAY_USER))
    assert refused == [], refused
    leaks = e2e.leaks(namespaces_before=release.namespaces_before)
    assert leaks == [], leaks
    release.steps.append("uninstalled")


# --- 4: least privilege, from the audit log --------------------------------------------------------


def read_audit(release: Release, start: int = 0, end: int | None = None) -> list[audit.AuditEvent]:
    with release.e2e.kube.control_plane.audit_log.open("rb") as log:
        log.seek(start)
        data = log.read() if end is None else log.read(end - start)
    return audit.parse_events(data.decode(errors="replace").splitlines())


def _granted(rules: tuple[Rule, ...]) -> set[tuple[str, str, str]]:
    return {(rule.group, rule.resource, verb) for rule in rules for verb in rule.verbs}


@pytest.mark.parametrize(
    ("user", "rules", "explained"),
    [(SLURM_USER, SLURM_RULES, UNUSED_OK), (RAY_USER, RAY_RULES, {**UNUSED_OK, **RAY_UNUSED_OK})],
    ids=["slurm", "ray"],
)
def test_each_bridge_did_only_what_its_roles_grant_and_used_every_grant(
    release: Release, user: str, rules: tuple[Rule, ...], explained: Mapping[tuple[str, str, str], str]
) -> None:
    assert release.steps == ["upgraded", "uninstalled"], "reads the audit log of this module's other tests"
    assert release.refused_window is not None
    window_start, window_end = release.refused_window
    outside = [*read_audit(release, 0, window_start), *read_audit(release, window_end)]
    everything = read_audit(release)
    mine = audit.by_user(everything).get(user, [])
    assert mine, f"no request by {user} in the audit log"
    granted = _granted(rules)
    assert release.old_chart_window is not None
    old_start, old_end = release.old_chart_window
    under_old_roles = {
        e.audit_id
        for e in audit.forbidden(e for e in read_audit(release, old_start, old_end) if e.user == user)
        if (e.call.group, e.call.full_resource, e.call.verb) in granted
    }
    refused = [
        e for e in audit.forbidden(e for e in outside if e.user == user) if e.audit_id not in under_old_roles
    ]
    assert refused == [], "refused by the authoriser:\n" + "\n".join(
        f"{e.call.verb} {e.call.group}/{e.call.full_resource} ns={e.call.namespace} {e.uri}" for e in refused
    )
    used = audit.verbs_used(mine)
    assert used - granted == set(), "allowed, but not in the permission table (granted by what?)"
    unused = unexplained(granted, used, explained=explained)
    assert unused == set(), f"granted, never used, not explained: {sorted(unused)}"
    in_window = audit.forbidden(e for e in read_audit(release, window_start, window_end) if e.user == user)
    print(
        json.dumps(
            {
                "user": user,
                "requests": len(mine),
                "refused_while_the_roles_went": sorted(
                    {f"{e.call.verb} {e.call.full_resource}" for e in in_window}
                ),
                "unused": sorted(map(list, granted - used)),
                "refused_under_the_old_charts_roles_granted_now": len(under_old_roles),
            }
        )
    )
