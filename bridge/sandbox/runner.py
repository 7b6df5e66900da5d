"""A process runner: a small kubelet that runs each pod's command as a local process.

Why: kwok simulates pods, which is enough for admission, but a bridged Slurm job or Ray job only runs
when its worker pods really join their cluster: slurmd must register with slurmctld, a Ray worker
must join the head. The runner stands in for kubelet on a few nodes of the local stack. For a pod the
scheduler binds to one of its nodes it

- gives the pod a network namespace of its own (:func:`bridge.sandbox.netns.create_namespace`), so
  the pod IP is a real address that slurmctld and the Ray head can reach;
- runs each container's ``command + args`` (an argv list, never a shell) inside it, with the pod's
  hostname (a UTS namespace), a kubelet-style ``/etc/hosts`` (a mount namespace) and the container's
  ``env``; init containers run first, one after the other;
- stands in for cluster DNS in that ``/etc/hosts``: every Service with ready endpoints is listed as
  ``<svc>.<ns>.svc.cluster.local``, ``<svc>.<ns>.svc``, ``<svc>.<ns>`` (and ``<svc>`` alone in the
  pod's own namespace; ``<hostname>.<svc>...`` for endpoints with a hostname) mapped to the endpoint
  pod IPs, read from the EndpointSlices (:func:`service_hosts`). There is no kube-proxy, so a
  ClusterIP would lead nowhere: the names go straight to the pods, as for a headless Service (a
  Service whose ``port`` differs from its ``targetPort`` must be called on the target port). The
  file is rewritten in place whenever the slices change, so a pod sees a Service that appears, or a
  head that moves, after it started (a process that resolved a name before keeps what it got).
  Every pod also gets ``GRPC_DNS_RESOLVER=native`` (:data:`CLUSTER_DNS_ENV`): gRPC's default
  resolver (c-ares) asks the DNS server and skips /etc/hosts, so Ray's GCS client found no head;
- gives each container a ``HOME`` of its own (``<pod dir>/home/<container>``, unless its ``env`` sets
  one) holding a ``.profile`` that restores the container's ``PATH``: a login shell
  (``/bin/bash -lc``, as KubeRay's generated commands use) reads the host's ``/etc/profile``, which
  on Debian resets ``PATH``, and then ``~/.profile``; a container's image would keep its own ``PATH``
  and never read the host user's dotfiles. The pods' ``PATH`` starts with the folder of the runner's
  Python (where the pinned ``ray`` CLI is installed);
- gives each pod a temporary directory of its own as ``TMPDIR`` (:func:`pod_tmp_dir`, short: Ray
  puts unix sockets there), removed with the pod's network namespace: a container's ``/tmp`` is its
  own, and two Ray nodes on one host sharing ``/tmp/ray`` share a session directory, where a driver
  on one node reads the other's cached node IP and attaches to the wrong raylet;
- gives each pod in-cluster configuration, as kubelet and cluster DNS do for a Deployment's pod
  (:mod:`bridge.sandbox.in_cluster`): ``KUBERNETES_SERVICE_HOST=kubernetes.default.svc`` and
  ``KUBERNETES_SERVICE_PORT`` (the API server's own port) in every container's environment, and in
  its hosts file ``kubernetes.default.svc[.cluster.local]``, ``kubernetes.default`` (``kubernetes`` in
  ``default``) and :data:`~bridge.sandbox.in_cluster.HOST_ALIAS` mapped to the pod's gateway, the
  host's end of its veth pair, where the stack's kube-apiserver (bound to every address) answers
  with a certificate for those names;
- gives each pod its volumes (:mod:`bridge.sandbox.pod_volumes`): ``secret``, ``configMap``,
  ``downwardAPI``, ``projected`` and ``emptyDir``, under ``<pod dir>/volumes`` (``0700``), each
  container mounting them at their ``mountPath`` in its own mount namespace
  (:mod:`bridge.sandbox.pod_init`; a missing mountPath is made without a trace on the host). The
  ServiceAccount admission plugin's ``kube-api-access-*`` volume so gets the pod's token, requested
  through the TokenRequest API bound to the pod and refreshed before 80% of its lifetime
  (:mod:`bridge.sandbox.service_account`), the stack's CA (the ``kube-root-ca.crt`` ConfigMap) and
  the namespace, at ``/var/run/secrets/kubernetes.io/serviceaccount``. Secret and ConfigMap changes
  reach the files through kubelet's atomic ``..data`` swap (:mod:`bridge.sandbox.volume_keeper`,
  fed by one informer for each kind); a pod whose non-optional Secret or ConfigMap is missing waits
  Pending until it appears;
- on request (:data:`PID_NAMESPACE_ANNOTATION` on the pod, or the runner's ``pid_namespace``), runs
  each container in a PID namespace of its own with its own ``/proc``, the runner's small init as
  pid 1 (as in Kubernetes, where a container sees only its own processes: a Ray driver picks "its"
  raylet among the processes it sees). Not the default: slurmd pods chrooted into a root whose
  ``/proc`` is the host's would then see pids of another namespace;
- reports the pod through the status subresource as kubelet does (Pending, Running with Ready
  conditions once the processes started, then Succeeded or Failed from the exit codes), restarting
  containers locally for ``restartPolicy: OnFailure`` / ``Always`` up to a bound;
- when the pod is deleted, stops its processes (SIGTERM, the pod's grace period capped, then SIGKILL),
  reports the terminal phase and removes the pod with ``gracePeriodSeconds=0`` as kubelet finalizes.

Its nodes carry ``k8s-bridge.io/runner=true`` and no kwok annotation, so kwok leaves them (and their
pods) alone; it keeps them Ready with a node Lease in ``kube-node-lease`` renewed like kubelet's.

What it does not do, on purpose: the container image is ignored (commands run from the host
filesystem, with the host's PATH, as root); resource limits, probes and security contexts are
ignored (a pod is Ready as soon as its processes run: readiness probes are not run; a read-only
root filesystem is not made read-only); ``envFrom``, ``configMapKeyRef``/``secretKeyRef``/
``resourceFieldRef`` env, sidecar init containers, containers without ``command``, and volume kinds
other than the five above (hostPath, persistentVolumeClaim, ...), ``subPathExpr`` and downward API
``resourceFieldRef`` are refused: such a pod is marked Failed with a message saying why, never
half-run. A ``subPath`` mount of a Secret or ConfigMap is not updated (as with kubelet); an emptyDir's
``sizeLimit`` is not enforced; a failed mount fails the container (exit 1, the reason on its
standard error), which its restart policy then handles.

Level-based: everything is derived from the pods on its nodes, read through ``bridge.runtime``'s
client and informers (one per node, field selector ``spec.nodeName``). A runner that starts and finds
a pod Running that it did not start marks it Failed (``ProcessLost``: its processes are gone); a
Pending pod is started afresh; a terminal pod being deleted is finalized.

Nothing outlives the runner, even a crashed one. Each container process asks the kernel to SIGKILL it
when the runner dies. Each pod's network namespace is named after the node and the pod's uid
(``kb-<hash>``, :func:`bridge.sandbox.netns.namespace_token`), and that name is written to
``<workdir>/pods/<uid>/netns`` *before* the namespace is made (:func:`pod_namespaces`; also how a
leak check tells this runner's namespaces from other stacks' on the same host). A runner starting on
a workdir takes its lock (``<workdir>/runner.lock``, one runner per workdir; the kernel frees it when
the holder dies) and one lock per node it serves (``/run/k8s-bridge/runner-<node>.lock``, one runner
per node whatever its workdir, so a namespace named after one of its nodes is never a live runner's
but its own or a dead one's), and removes every recorded namespace still there, first killing every
process in it (:func:`reclaim`): children a container forked and left, which the kernel's SIGKILL
does not reach. Deleting a pod's namespace likewise kills whatever is left in it (in a thread: it
scans /proc), so a finished or deleted pod leaves no process either; a namespace whose processes
survive the kill timeout keeps its name, to be retried. :meth:`ProcessRunner.stop` stops every
process it started and deletes every namespace it created.

A pod's directory goes once nothing needs its record any more (:func:`pod_dir_removable`): when the
runner is done with the pod and its namespace is gone, and at start for every pod whose namespace is
gone after the reclaim (:func:`prune_pod_dirs`), so that ``<workdir>/pods`` holds only live pods and
namespaces still to be removed. The namespaces are also claimed (:mod:`bridge.sandbox.netns`), so a
runner killed for good is cleaned up after by the next start of any stack, whatever its workdir.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import platform
import re
import shlex
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import aiohttp

from bridge.runtime import (
    AlreadyExists,
    ApiError,
    BackoffSettings,
    Client,
    Conflict,
    Discovery,
    Informer,
    Invalid,
    NotFound,
    Object,
    ReflectorSettings,
    Resource,
    Session,
    configure_logging,
)
from bridge.sandbox import owners
from bridge.sandbox.in_cluster import ApiServerAddress, api_server_address, api_server_hosts, in_cluster_env
from bridge.sandbox.netns import (
    NETNS_DIR,
    NamespaceBusyError,
    NetworkNamespace,
    create_namespace,
    namespace_name,
    namespace_token,
    remove_namespace,
)
from bridge.sandbox.pod_volumes import UnsupportedVolumeError, check_volumes, referenced_objects
from bridge.sandbox.processes import ManagedProcess, ProcessGroup, StackError
from bridge.sandbox.volume_keeper import PodVolumes, remove_memory_dirs

__all__ = [
    "CLUSTER_DNS_ENV",
    "LOCK_FILE",
    "NETNS_FILE",
    "NODE_LOCK_DIR",
    "PID_NAMESPACE_ANNOTATION",
    "RUNNER_LABEL",
    "ContainerRun",
    "NodeResources",
    "ProcessRunner",
    "Termination",
    "UnrunnableError",
    "check_prerequisites",
    "check_runnable",
    "container_command",
    "container_env",
    "expand",
    "hosts_file",
    "lease_manifest",
    "lock_node",
    "lock_workdir",
    "login_profile",
    "node_label_options",
    "node_manifest",
    "node_status",
    "pod_argv",
    "pod_dir_removable",
    "pod_hostname",
    "pod_namespaces",
    "pod_phase",
    "pod_status",
    "pod_tmp_dir",
    "pods_path",
    "prune_pod_dirs",
    "reclaim",
    "service_hosts",
    "should_restart",
    "terminal_phase",
    "wants_pid_namespace",
]

log = logging.getLogger(__name__)

RUNNER_LABEL = "k8s-bridge.io/runner"
"""Label (value ``"true"``) on every node a process runner registers."""

NETNS_FILE = "netns"
"""In a pod's directory (``<workdir>/pods/<uid>/``): the name of the network namespace made for it
(written before the namespace is made)."""

LOCK_FILE = "runner.lock"
"""In the workdir: locked (``flock``) by the runner using it, and holding that runner's pid."""

NODE_LOCK_DIR = Path("/run/k8s-bridge")
"""Holds ``runner-<node>.lock``, locked (``flock``) by the runner serving that node, whatever its workdir."""

FIELD_MANAGER = "k8s-bridge-process-runner"
KUBELET_VERSION = "v0.0.0-k8s-bridge-process-runner"
NODE_LEASE_NAMESPACE = "kube-node-lease"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SERVICES_SYNC_TIMEOUT = 10.0
CLUSTER_DNS_ENV = {"GRPC_DNS_RESOLVER": "native"}
"""In every pod's environment while the runner stands in for cluster DNS: gRPC (Ray's GCS client
among its users) resolves names with c-ares by default, which asks the DNS server and never reads
/etc/hosts; its ``native`` resolver uses getaddrinfo, which does. A container's own ``env`` wins."""
"""Seconds a pod waits at most for the runner's first list of EndpointSlices before it starts."""

Pod = Mapping[str, Any]
Phase = Literal["Pending", "Running", "Succeeded", "Failed"]


class UnrunnableError(ValueError):
    """A pod asks for something the runner cannot do; the message says what, for the pod's status."""


# ---------------------------------------------------------------------------------------------------
# Pure parts: from a pod spec to argv/env, from process state to a pod status. No I/O, no event loop.
# ---------------------------------------------------------------------------------------------------


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    """A ``MicroTime`` (the format Lease ``renewTime`` requires)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def exit_code_of(returncode: int) -> int:
    """A Popen return code as a container exit code: death by signal N is ``128 + N``, as in a shell."""
    return 128 - returncode if returncode < 0 else returncode


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion of command, args and env values.

    ``$(NAME)`` becomes the value of NAME when defined and stays as written otherwise; ``$$`` is a
    literal ``$`` (so ``$$(NAME)`` gives ``$(NAME)``); any other ``$`` is kept.
    """
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char == "$" and i + 1 < len(text):
            following = text[i + 1]
            if following == "$":
                out.append("$")
                i += 2
                continue
            if following == "(":
                end = text.find(")", i + 2)
                if end != -1:
                    name = text[i + 2 : end]
                    out.append(env[name] if name in env else text[i : end + 1])
                    i = end + 1
                    continue
        out.append(char)
        i += 1
    return "".join(out)


def pod_namespaces(workdir: Path) -> set[str]:
    """The network namespaces a runner with this ``--workdir`` made (or began to make) for its pods,
    deleted or not."""
    names = set()
    for path in (workdir / "pods").glob(f"*/{NETNS_FILE}"):
        with contextlib.suppress(OSError):
            names.add(path.read_text().strip())
    return names - {""}


def pod_dir_removable(*, recorded: str | None, in_use: bool, exists: bool) -> bool:
    """Whether a pod's directory (``<workdir>/pods/<uid>``) can be deleted.

    ``recorded`` is the namespace name it records (None: no namespace was ever begun for the pod),
    ``in_use`` whether the runner may still make, use or retry deleting that namespace, ``exists``
    whether it exists. The record must outlive the namespace: it is how a restarted runner finds it.
    """
    return recorded is None or (not in_use and not exists)


def _recorded_namespace(pod_dir: Path) -> str | None:
    try:
        return (pod_dir / NETNS_FILE).read_text().strip() or None
    except FileNotFoundError:
        return None


def prune_pod_dirs(workdir: Path, *, in_use: Mapping[str, bool] | None = None) -> list[str]:
    """Delete the pod directories of ``workdir`` that nothing needs (:func:`pod_dir_removable`); the
    uids pruned. ``in_use`` maps a pod uid to whether its namespace may still be in use; a pod not in
    it is not (which holds for every pod at start, before any is run)."""
    pruned: list[str] = []
    pods = workdir / "pods"
    for pod_dir in sorted(entry for entry in pods.iterdir() if entry.is_dir()) if pods.is_dir() else []:
        recorded = _recorded_namespace(pod_dir)
        exists = recorded is not None and (NETNS_DIR / recorded).exists()
        busy = (in_use or {}).get(pod_dir.name, False)
        if pod_dir_removable(recorded=recorded, in_use=busy, exists=exists):
            shutil.rmtree(pod_dir, ignore_errors=True)
            pruned.append(pod_dir.name)
    return pruned


def lock_workdir(workdir: Path) -> int:
    """Lock ``<workdir>/runner.lock`` for as long as the returned descriptor stays open.

    One runner per workdir: :func:`reclaim` removes everything recorded there, which must never be a
    live runner's. The kernel drops the lock when its holder dies, SIGKILL included.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    return _lock_file(workdir / LOCK_FILE, busy=f"is using {workdir}")


def _lock_file(path: Path, *, busy: str) -> int:
    """Take an exclusive ``flock`` on ``path`` (:func:`bridge.sandbox.owners.hold`: not inherited by
    children) with our pid in it; if another process holds it, fail with its pid and ``busy``."""
    fd = owners.hold(path, content=f"{os.getpid()}\n")
    if fd is None:
        raise StackError(f"another process runner (pid {owners.read_holder(path)}) {busy}")
    return fd


def lock_node(node: str, *, lock_dir: Path = NODE_LOCK_DIR) -> int:
    """Lock ``<lock_dir>/runner-<node>.lock`` for as long as the returned descriptor stays open.

    One runner per node, whatever its workdir: a pod's namespace is named after its node and uid, and
    a runner that finds one of that name removes it (and kills what runs in it) as a leftover of its
    own, which is only true when no other live runner serves the node. Like :func:`lock_workdir`, the
    kernel drops the lock when its holder dies, and container processes do not inherit it.
    """
    if not node or "/" in node or node in (".", ".."):
        raise ValueError(f"not a node name: {node!r}")
    lock_dir.mkdir(parents=True, exist_ok=True)
    path = lock_dir / f"runner-{node}.lock"
    return _lock_file(path, busy=f"is serving node {node} ({path})")


def reclaim(workdir: Path) -> dict[str, list[int]]:
    """Remove the network namespaces an earlier runner of ``workdir`` left behind (it crashed or was
    killed), each after killing every process still in it; returns each one removed with the pids killed.
    Then prune the pod directories whose namespace is gone (:func:`prune_pod_dirs`).

    Only namespaces recorded under ``<workdir>/pods/`` are touched (other stacks' are not), and only
    while the caller holds the workdir's lock (:func:`lock_workdir`), so none of them is a live runner's
    (nor one another live process claims: :func:`~bridge.sandbox.netns.remove_namespace` refuses it).
    A namespace still holding processes after the kill timeout is left under its name (logged), and its
    pod's directory with it, for the next runner to retry. Each pod's temporary directory
    (:func:`pod_tmp_dir`) goes with its namespace.
    """
    removed: dict[str, list[int]] = {}
    for name in sorted(pod_namespaces(workdir)):
        if not (NETNS_DIR / name).exists():
            shutil.rmtree(pod_tmp_dir(name), ignore_errors=True)
            remove_memory_dirs(name)
            continue
        try:
            removed[name] = killed = remove_namespace(name)
        except NamespaceBusyError as error:
            log.error("process runner: %s", error)
            continue
        shutil.rmtree(pod_tmp_dir(name), ignore_errors=True)
        remove_memory_dirs(name)
        log.warning(
            "process runner: removed namespace %s left by an earlier runner; killed %d processes in it",
            name,
            len(killed),
        )
    prune_pod_dirs(workdir)
    return removed


_SUBSCRIPT = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


def _field_ref(pod: Pod, path: str, *, pod_ip: str, host_ip: str) -> str:
    metadata = pod.get("metadata", {})
    spec = pod.get("spec", {})
    simple = {
        "metadata.name": metadata.get("name", ""),
        "metadata.namespace": metadata.get("namespace", ""),
        "metadata.uid": metadata.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.podIP": pod_ip,
        "status.podIPs": pod_ip,
        "status.hostIP": host_ip,
        "status.hostIPs": host_ip,
    }
    if path in simple:
        return str(simple[path])
    match = _SUBSCRIPT.match(path)
    if match:
        return str((metadata.get(match.group(1)) or {}).get(match.group(2), ""))
    raise UnrunnableError(f"env fieldRef {path!r} is not supported by the process runner")


def container_env(
    *,
    pod: Pod,
    container: Mapping[str, Any],
    pod_ip: str,
    host_ip: str,
    base_env: Mapping[str, str],
    home: str | None = None,
    tmpdir: str | None = None,
) -> dict[str, str]:
    """The environment of one container's process: ``HOME`` and ``TMPDIR`` (``home``, ``tmpdir``,
    when given), ``base_env``, ``HOSTNAME``, then its ``env``.

    Values may reference earlier variables with ``$(NAME)``; ``fieldRef`` supports the pod's name,
    namespace, uid, labels and annotations, node name, service account, pod IP and host IP.
    """
    hostname, _ = pod_hostname(pod)
    return {
        **({"HOME": home} if home is not None else {}),
        **({"TMPDIR": tmpdir} if tmpdir is not None else {}),
        **base_env,
        "HOSTNAME": hostname,
        **_defined_env(pod=pod, container=container, pod_ip=pod_ip, host_ip=host_ip),
    }


def _defined_env(*, pod: Pod, container: Mapping[str, Any], pod_ip: str, host_ip: str) -> dict[str, str]:
    """The container's own ``env`` entries, in order (also the mapping ``$(VAR)`` expands against)."""
    name = container.get("name", "?")
    if container.get("envFrom"):
        raise UnrunnableError(f"container {name!r}: envFrom is not supported by the process runner")
    defined: dict[str, str] = {}
    for entry in container.get("env") or []:
        var = entry["name"]
        source = entry.get("valueFrom")
        if source is None:
            value = expand(str(entry.get("value", "")), defined)
        elif "fieldRef" in source:
            value = _field_ref(pod, source["fieldRef"]["fieldPath"], pod_ip=pod_ip, host_ip=host_ip)
        else:
            kinds = ", ".join(sorted(source))
            raise UnrunnableError(
                f"container {name!r}: env {var!r} from {kinds} is not supported by the process runner"
            )
        defined[var] = value
    return defined


def container_command(
    *,
    pod: Pod,
    container: Mapping[str, Any],
    pod_ip: str,
    host_ip: str,
    base_env: Mapping[str, str],
    home: str | None = None,
    tmpdir: str | None = None,
) -> tuple[list[str], dict[str, str]]:
    """The argv (``command + args``, ``$(VAR)`` expanded) and environment of one container
    (:func:`container_env`)."""
    name = container.get("name", "?")
    command = list(container.get("command") or [])
    if not command:
        raise UnrunnableError(
            f"container {name!r} has no command: the process runner ignores images, so it needs an explicit "
            "command"
        )
    env = container_env(
        pod=pod,
        container=container,
        pod_ip=pod_ip,
        host_ip=host_ip,
        base_env=base_env,
        home=home,
        tmpdir=tmpdir,
    )
    defined = _defined_env(pod=pod, container=container, pod_ip=pod_ip, host_ip=host_ip)
    argv = [expand(str(part), defined) for part in [*command, *(container.get("args") or [])]]
    return argv, env


def check_runnable(pod: Pod, *, base_env: Mapping[str, str]) -> None:
    """Raise :class:`UnrunnableError` unless every container of ``pod`` can be run by the runner."""
    spec = pod.get("spec", {})
    if spec.get("hostNetwork"):
        raise UnrunnableError(
            "hostNetwork pods are not supported by the process runner (each pod gets its own network)"
        )
    for init in spec.get("initContainers") or []:
        if init.get("restartPolicy") == "Always":
            raise UnrunnableError(
                f"init container {init.get('name')!r} is a sidecar, not supported by the process runner"
            )
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        container_command(
            pod=pod, container=container, pod_ip="192.0.2.1", host_ip="192.0.2.1", base_env=base_env
        )
    try:
        check_volumes(pod)
    except UnsupportedVolumeError as refusal:
        raise UnrunnableError(str(refusal)) from None


def pod_hostname(pod: Pod, *, cluster_domain: str = "cluster.local") -> tuple[str, str | None]:
    """The pod's hostname (``spec.hostname`` or its name, at most 63 characters) and FQDN if it has one.

    With ``spec.subdomain`` the FQDN is ``<hostname>.<subdomain>.<namespace>.svc.<cluster domain>``;
    with ``setHostnameAsFQDN`` that FQDN is the hostname itself, as kubelet does.
    """
    metadata, spec = pod.get("metadata", {}), pod.get("spec", {})
    hostname = str(spec.get("hostname") or metadata.get("name", ""))[:63].rstrip("-.")
    subdomain = spec.get("subdomain")
    fqdn = (
        f"{hostname}.{subdomain}.{metadata.get('namespace', 'default')}.svc.{cluster_domain}"
        if subdomain
        else None
    )
    if fqdn and spec.get("setHostnameAsFQDN"):
        return fqdn[:64], fqdn
    return hostname, fqdn


def hosts_file(
    pod: Pod,
    *,
    pod_ip: str,
    cluster_domain: str = "cluster.local",
    services: Sequence[tuple[str, Sequence[str]]] = (),
) -> str:
    """The pod's ``/etc/hosts``, laid out as kubelet writes it (localhost, the pod, ``hostAliases``),
    then ``services`` (``(ip, names)``, from :func:`service_hosts`): the cluster-DNS stand-in, last so
    that the pod's own names and its ``hostAliases`` win."""
    hostname, fqdn = pod_hostname(pod, cluster_domain=cluster_domain)
    short = hostname.split(".")[0]
    names = [fqdn, short] if fqdn else [hostname]
    lines = [
        "# Kubernetes-managed hosts file (k8s-bridge process runner).",
        "127.0.0.1\tlocalhost",
        "::1\tlocalhost ip6-localhost ip6-loopback",
        "fe00::0\tip6-localnet",
        "fe00::0\tip6-mcastprefix",
        "fe00::1\tip6-allnodes",
        "fe00::2\tip6-allrouters",
        f"{pod_ip}\t{chr(9).join(dict.fromkeys(names))}",
    ]
    for alias in pod.get("spec", {}).get("hostAliases") or []:
        lines.append(f"{alias['ip']}\t{chr(9).join(alias.get('hostnames') or [])}")
    if services:
        lines.append("# Services of the cluster, to their ready endpoints (cluster-DNS stand-in).")
        lines.extend(f"{ip}\t{chr(9).join(names)}" for ip, names in services)
    return "\n".join(lines) + "\n"


SERVICE_NAME_LABEL = "kubernetes.io/service-name"


def service_hosts(
    slices: Iterable[Mapping[str, Any]], *, namespace: str, cluster_domain: str = "cluster.local"
) -> list[tuple[str, list[str]]]:
    """Hosts entries that stand in for cluster DNS, from EndpointSlices: ``(ip, names)`` per endpoint.

    For each IPv4 slice of a Service ``<svc>`` in ``<ns>`` (label ``kubernetes.io/service-name``),
    each address of an endpoint that is ready (``conditions.ready`` unset counts as ready, as the API
    says; a headless Service with ``publishNotReadyAddresses`` has every endpoint ready) is named
    ``<svc>.<ns>.svc.<domain>``, ``<svc>.<ns>.svc``, ``<svc>.<ns>``, and ``<svc>`` when ``<ns>`` is
    the pod's ``namespace`` (what its DNS search path would find); an endpoint with a ``hostname``
    (a pod with that ``hostname`` and the Service as ``subdomain``) is also ``<hostname>.<svc>.<ns>.svc
    .<domain>`` as cluster DNS names it. Sorted by namespace, Service, then address, so the file only
    changes when the endpoints do.
    """
    entries: list[tuple[tuple[str, str, str, str], list[str]]] = []
    for item in slices:
        metadata = item.get("metadata") or {}
        service = (metadata.get("labels") or {}).get(SERVICE_NAME_LABEL)
        ns = metadata.get("namespace")
        if not service or not ns or item.get("addressType", "IPv4") != "IPv4":
            continue
        base = [f"{service}.{ns}.svc.{cluster_domain}", f"{service}.{ns}.svc", f"{service}.{ns}"]
        if ns == namespace:
            base.append(service)
        for endpoint in item.get("endpoints") or []:
            if (endpoint.get("conditions") or {}).get("ready") is False:
                continue
            hostname = endpoint.get("hostname")
            own = [f"{hostname}.{service}.{ns}.svc.{cluster_domain}"] if hostname else []
            for address in endpoint.get("addresses") or []:
                entries.append(((ns, service, str(address), hostname or ""), [*own, *base]))
    entries.sort(key=lambda entry: entry[0])
    return [(key[2], names) for key, names in entries]


POD_TMP_ROOT = Path("/tmp")  # noqa: S108 (a fixed, short root is the point: unix socket paths)


def pod_tmp_dir(namespace: str, *, root: Path = POD_TMP_ROOT) -> Path:
    """The pod's own temporary directory (its ``TMPDIR``), named after its network namespace
    (``kb-<token>`` gives ``/tmp/kb-pod-<token>``), so that whoever removes the namespace by name
    removes it too. Short on purpose: Ray puts its unix sockets below it, and a socket path has at
    most 107 bytes (``<dir>/ray/session_<date>_<time>_<micros>_<pid>/sockets/plasma_store`` needs
    about 70 of them)."""
    return root / f"kb-pod-{namespace.removeprefix('kb-')}"


def pods_path(path: str, *, python: str = sys.executable) -> str:
    """The pods' ``PATH``: ``path`` after the folder of the runner's Python (its environment's
    ``ray`` and other CLIs, at the versions the stack pins), unless ``path`` has that folder already."""
    folder = str(Path(python).parent)
    parts = path.split(os.pathsep) if path else []
    return path if folder in parts else os.pathsep.join([folder, *parts])


def login_profile(path: str) -> str:
    """The ``~/.profile`` of a container's own ``HOME``: set ``PATH`` back to the container's.

    A login shell (``bash -l``, ``sh -l``) reads ``/etc/profile`` and then the first of
    ``~/.bash_profile``, ``~/.bash_login``, ``~/.profile``; Debian's ``/etc/profile`` resets ``PATH``
    to the system default, which would hide the container's ``PATH`` (the ``ray`` CLI among it).
    """
    return (
        "# Written by the k8s-bridge process runner: the container's PATH, which /etc/profile reset.\n"
        f"PATH={shlex.quote(path)}\nexport PATH\n"
    )


@dataclass
class Termination:
    """How one run of a container ended."""

    exit_code: int
    started_at: str
    finished_at: str
    pid: int

    @property
    def reason(self) -> str:
        return "Completed" if self.exit_code == 0 else "Error"

    def as_state(self) -> dict[str, Any]:
        return {
            "terminated": {
                "exitCode": self.exit_code,
                "reason": self.reason,
                "startedAt": self.started_at,
                "finishedAt": self.finished_at,
                "containerID": f"process://{self.pid}",
            }
        }


@dataclass
class ContainerRun:
    """What the runner knows of one container: the input of :func:`pod_status` and :func:`pod_phase`.

    ``state`` is ``waiting`` before the first start and while a restart is pending (then
    ``last_termination`` is set), ``running`` while its process lives, ``terminated`` once it ended for
    good (``termination``). A container that will be restarted is never ``terminated``, as in kubelet.
    """

    name: str
    image: str = ""
    state: Literal["waiting", "running", "terminated"] = "waiting"
    waiting_reason: str = "ContainerCreating"
    restart_count: int = 0
    pid: int | None = None
    started_at: str | None = None
    termination: Termination | None = None
    last_termination: Termination | None = None

    def status(self) -> dict[str, Any]:
        running = self.state == "running"
        entry: dict[str, Any] = {
            "name": self.name,
            "image": self.image,
            "imageID": "",
            "ready": running,
            "started": running,
            "restartCount": self.restart_count,
            "lastState": self.last_termination.as_state() if self.last_termination else {},
        }
        if running:
            entry["state"] = {"running": {"startedAt": self.started_at}}
            entry["containerID"] = f"process://{self.pid}"
        elif self.state == "terminated" and self.termination is not None:
            entry["state"] = self.termination.as_state()
            entry["containerID"] = f"process://{self.termination.pid}"
        else:
            entry["state"] = {"waiting": {"reason": self.waiting_reason}}
        return entry


def should_restart(
    restart_policy: str, exit_code: int, *, restarts: int, max_restarts: int, init: bool
) -> bool:
    """Whether a container that exited with ``exit_code`` is started again (bounded by ``max_restarts``)."""
    if restarts >= max_restarts or restart_policy == "Never":
        return False
    if init or restart_policy == "OnFailure":
        return exit_code != 0
    return restart_policy == "Always"


def pod_phase(*, init_containers: Sequence[ContainerRun], containers: Sequence[ContainerRun]) -> Phase:
    """The pod phase kubelet would report for these containers."""
    if any(
        c.state == "terminated" and c.termination and c.termination.exit_code != 0 for c in init_containers
    ):
        return "Failed"
    if any(c.state != "terminated" for c in init_containers):
        return "Pending"
    if containers and all(c.state == "terminated" for c in containers):
        return terminal_phase(containers)
    if any(c.state == "running" or c.last_termination is not None for c in containers):
        return "Running"
    return "Pending"


def terminal_phase(containers: Sequence[ContainerRun]) -> Phase:
    """The phase of a pod whose containers are all stopped: Succeeded only if every one exited 0."""
    succeeded = all(
        c.state == "terminated" and c.termination and c.termination.exit_code == 0 for c in containers
    )
    return "Succeeded" if containers and succeeded else "Failed"


_OWN_CONDITIONS = ("PodScheduled", "PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready")


def pod_status(
    *,
    pod: Pod,
    init_containers: Sequence[ContainerRun],
    containers: Sequence[ContainerRun],
    phase: Phase,
    pod_ip: str | None,
    host_ip: str,
    start_time: str | None,
    now: str,
    previous: Mapping[str, Any] | None = None,
    reason: str | None = None,
    message: str | None = None,
) -> dict[str, Any]:
    """The pod's whole ``status`` for a merge patch.

    Conditions the runner does not own (e.g. ``DisruptionTarget``) are kept from the pod; a
    condition's ``lastTransitionTime`` is kept from ``previous`` (the status last written) or the pod
    while its status does not change. Ready means every container's process is running.
    """
    terminal = phase in ("Succeeded", "Failed")
    initialized = all(
        c.state == "terminated" and c.termination and c.termination.exit_code == 0 for c in init_containers
    )
    ready = not terminal and bool(containers) and all(c.state == "running" for c in containers)
    wanted: dict[str, tuple[bool, str | None]] = {
        "PodScheduled": (True, None),
        "PodReadyToStartContainers": (pod_ip is not None and not terminal, None),
        "Initialized": (initialized, None if initialized else "ContainersNotInitialized"),
        "ContainersReady": (ready, None if ready else ("PodCompleted" if terminal else "ContainersNotReady")),
        "Ready": (ready, None if ready else ("PodCompleted" if terminal else "ContainersNotReady")),
    }
    existing = list(pod.get("status", {}).get("conditions") or [])
    earlier = {c["type"]: c for c in existing}
    earlier.update({c["type"]: c for c in (previous or {}).get("conditions") or []})
    conditions: list[dict[str, Any]] = []
    for kind, (holds, why) in wanted.items():
        truth = "True" if holds else "False"
        before = earlier.get(kind)
        since = before.get("lastTransitionTime") if before and before.get("status") == truth else None
        condition: dict[str, Any] = {"type": kind, "status": truth, "lastTransitionTime": since or now}
        if why:
            condition["reason"] = why
        conditions.append(condition)
    conditions.extend(dict(c) for c in existing if c.get("type") not in _OWN_CONDITIONS)
    status: dict[str, Any] = {
        "phase": phase,
        "conditions": conditions,
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "containerStatuses": [c.status() for c in containers],
    }
    if init_containers:
        status["initContainerStatuses"] = [c.status() for c in init_containers]
    if pod_ip is not None:
        status["podIP"] = pod_ip
        status["podIPs"] = [{"ip": pod_ip}]
    if start_time is not None:
        status["startTime"] = start_time
    if reason is not None:
        status["reason"] = reason
    if message is not None:
        status["message"] = message
    return status


@dataclass(frozen=True)
class NodeResources:
    """What one runner node offers the scheduler (capacity = allocatable)."""

    cpu: str = "8"
    memory: str = "32Gi"
    pods: str = "110"
    extended: Mapping[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, str]:
        return {
            "cpu": self.cpu,
            "memory": self.memory,
            "pods": self.pods,
            "ephemeral-storage": "100Gi",
            **self.extended,
        }


def _arch() -> str:
    machine = platform.machine()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


def node_status(*, name: str, resources: NodeResources, host_ip: str, now: str) -> dict[str, Any]:
    """A Ready node's status: resources, conditions with a fresh heartbeat, addresses, node info."""
    healthy = [
        ("Ready", "True", "KubeletReady", "process runner is posting ready status"),
        ("MemoryPressure", "False", "KubeletHasSufficientMemory", "process runner has sufficient memory"),
        ("DiskPressure", "False", "KubeletHasNoDiskPressure", "process runner has no disk pressure"),
        ("PIDPressure", "False", "KubeletHasSufficientPID", "process runner has sufficient PID available"),
    ]
    return {
        "capacity": resources.as_dict(),
        "allocatable": resources.as_dict(),
        "conditions": [
            {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }
            for kind, status, reason, message in healthy
        ],
        "addresses": [{"type": "InternalIP", "address": host_ip}, {"type": "Hostname", "address": name}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
        "nodeInfo": {
            "architecture": _arch(),
            "operatingSystem": "linux",
            "kernelVersion": platform.release(),
            "kubeletVersion": KUBELET_VERSION,
            "kubeProxyVersion": "",
            "containerRuntimeVersion": "process://",
            "osImage": "host",
            "machineID": "",
            "systemUUID": "",
            "bootID": "",
        },
    }


def node_manifest(
    *,
    name: str,
    resources: NodeResources,
    labels: Mapping[str, str],
    host_ip: str,
    now: str,
    taints: Sequence[Mapping[str, str]] = (),
) -> dict[str, Any]:
    """The Node a runner registers: its labels (never kwok's annotation), taints and a Ready status."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": _arch(),
                RUNNER_LABEL: "true",
                **labels,
            },
        },
        "spec": {"taints": [dict(taint) for taint in taints]} if taints else {},
        "status": node_status(name=name, resources=resources, host_ip=host_ip, now=now),
    }


def lease_manifest(*, node: str, node_uid: str, duration: int, renew_time: str) -> dict[str, Any]:
    """The node's heartbeat Lease in ``kube-node-lease``, owned by the Node as kubelet's is."""
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": node,
            "namespace": NODE_LEASE_NAMESPACE,
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid}],
        },
        "spec": {"holderIdentity": node, "leaseDurationSeconds": duration, "renewTime": renew_time},
    }


POD_INIT = Path(__file__).with_name("pod_init.py")
"""Runs between nsenter/unshare and the container's command (:mod:`bridge.sandbox.pod_init`): the
hostname, ``/etc/hosts``, the volume mounts, then the command."""


def pod_argv(
    namespace: NetworkNamespace,
    *,
    hostname: str,
    hosts: Path,
    argv: Sequence[str],
    pid_namespace: bool = False,
    mounts: Path | None = None,
) -> list[str]:
    """The full argv that runs a container's ``argv`` in the pod's network, UTS and mount namespaces
    (and, with ``pid_namespace``, a PID namespace of its own with its own ``/proc``, whose init is the
    runner's: ``setpriv --pdeathsig`` makes ``unshare`` die with the runner, ``--kill-child`` then
    kills that init, and with it the namespace). ``mounts`` is the container's mount plan
    (:meth:`bridge.sandbox.volume_keeper.PodVolumes.plan`), if it mounts volumes."""
    init = [sys.executable, "-I", "-S", str(POD_INIT)]
    tail = [hostname, str(hosts), str(mounts or ""), *argv]
    if not pid_namespace:
        return [
            *namespace.enter(),
            "unshare", "--uts", "--mount", "--propagation=private", "--",
            *init, "exec", *tail,
        ]  # fmt: skip
    return [
        *namespace.enter(),
        "setpriv", "--pdeathsig=KILL", "--",
        "unshare", "--uts", "--mount", "--propagation=private",
        "--pid", "--fork", "--mount-proc", "--kill-child=SIGKILL", "--",
        *init, "init", *tail,
    ]  # fmt: skip


PID_NAMESPACE_ANNOTATION = "runner.k8s-bridge.io/pid-namespace"
"""On a pod, ``"true"`` or ``"false"``: whether each of its containers runs in a PID namespace of its
own (as in Kubernetes, where a container sees only its own processes); without it, the runner's
``pid_namespace`` option decides (off by default)."""


def wants_pid_namespace(pod: Pod, *, default: bool) -> bool:
    """Whether ``pod``'s containers get PID namespaces of their own (:data:`PID_NAMESPACE_ANNOTATION`)."""
    value = str((pod.get("metadata", {}).get("annotations") or {}).get(PID_NAMESPACE_ANNOTATION, "")).lower()
    if value in ("true", "false"):
        return value == "true"
    return default


# ---------------------------------------------------------------------------------------------------
# The API: bridge.runtime's client (and its informers for the pods), as the bridges use it.
# ---------------------------------------------------------------------------------------------------

_PODS = Resource(
    group="", version="v1", plural="pods", kind="Pod", namespaced=True, subresources=frozenset({"status"})
)
_NODES = Resource(
    group="", version="v1", plural="nodes", kind="Node", namespaced=False, subresources=frozenset({"status"})
)
_LEASES = Resource(group="coordination.k8s.io", version="v1", plural="leases", kind="Lease", namespaced=True)
_ENDPOINT_SLICES = Resource(
    group="discovery.k8s.io", version="v1", plural="endpointslices", kind="EndpointSlice", namespaced=True
)
_SECRETS = Resource(group="", version="v1", plural="secrets", kind="Secret", namespaced=True)
_CONFIG_MAPS = Resource(group="", version="v1", plural="configmaps", kind="ConfigMap", namespaced=True)

_TRANSPORT_ERRORS = (aiohttp.ClientError, TimeoutError)
"""Failures to reach the API server at all (as opposed to an answer with an error status)."""


def _client(session: Session) -> Client:
    """A client that knows the runner's kinds in advance: no discovery request is ever needed."""
    discovery = Discovery(session)
    for resource in (_PODS, _NODES, _LEASES, _ENDPOINT_SLICES, _SECRETS, _CONFIG_MAPS):
        discovery.register(resource)
    return Client(session, discovery=discovery)


class _PodEvents:
    """Hands an informer's pod changes to the runner (an :class:`~bridge.runtime.EventHandler`)."""

    def __init__(self, runner: ProcessRunner) -> None:
        self._runner = runner

    def on_add(self, obj: Object, *, is_initial_list: bool) -> None:
        self._runner.observe(obj, gone=False)

    def on_update(self, old: Object, new: Object) -> None:
        if old["metadata"].get("uid") != new["metadata"].get("uid"):  # replaced by a pod of the same name
            self._runner.observe(old, gone=True)
        self._runner.observe(new, gone=False)

    def on_delete(self, obj: Object) -> None:
        self._runner.observe(obj, gone=True)


class _SliceEvents:
    """Tells the runner that the EndpointSlices changed (an :class:`~bridge.runtime.EventHandler`)."""

    def __init__(self, runner: ProcessRunner) -> None:
        self._runner = runner

    def on_add(self, obj: Object, *, is_initial_list: bool) -> None:
        self._runner.services_changed()

    def on_update(self, old: Object, new: Object) -> None:
        if old.get("endpoints") != new.get("endpoints"):
            self._runner.services_changed()

    def on_delete(self, obj: Object) -> None:
        self._runner.services_changed()


class _SourceEvents:
    """Tells the runner that a Secret or ConfigMap changed (an :class:`~bridge.runtime.EventHandler`)."""

    def __init__(self, runner: ProcessRunner, kind: str) -> None:
        self._runner = runner
        self._kind = kind

    def on_add(self, obj: Object, *, is_initial_list: bool) -> None:
        if not is_initial_list:
            self._runner.sources_changed(self._kind, obj)

    def on_update(self, old: Object, new: Object) -> None:
        if (old.get("data"), old.get("binaryData")) != (new.get("data"), new.get("binaryData")):
            self._runner.sources_changed(self._kind, new)

    def on_delete(self, obj: Object) -> None:
        self._runner.sources_changed(self._kind, obj)


# ---------------------------------------------------------------------------------------------------
# The runner.
# ---------------------------------------------------------------------------------------------------


@dataclass
class _Container:
    spec: Mapping[str, Any]
    run: ContainerRun
    init: bool
    process: ManagedProcess | None = None
    restart_at: float | None = None


def check_prerequisites() -> None:
    """Fail with a message naming what is missing: root, and util-linux's nsenter and unshare, and ip."""
    if os.geteuid() != 0:
        raise StackError("the process runner needs root (it creates network, UTS and mount namespaces)")
    tools = (
        ("nsenter", "util-linux"),
        ("unshare", "util-linux"),
        ("setpriv", "util-linux"),
        ("ip", "iproute2"),
    )
    for tool, package in tools:
        if shutil.which(tool) is None:
            raise StackError(
                f"the process runner needs {tool!r}: install it with `apt-get install {package}`"
            )


class _PodWorker:
    """Owns one pod from the moment the runner sees it until the API no longer has it."""

    def __init__(self, runner: ProcessRunner, pod: Pod) -> None:
        self._runner = runner
        self.pod: Pod = pod
        self.uid: str = pod["metadata"]["uid"]
        self.gone = False
        self._wake = asyncio.Event()
        self._wake.set()
        self.namespace: NetworkNamespace | None = None
        self._containers: list[_Container] = []
        self._start_time: str | None = None
        self._pod_ip: str | None = None
        self._written: dict[str, Any] | None = None
        self._finalized = False
        self._timers: list[asyncio.TimerHandle] = []
        self._pidfds: list[int] = []
        self.hosts_path: Path | None = None
        """The pod's hosts file once written (bound on /etc/hosts in each of its containers)."""
        self.volumes: PodVolumes | None = None
        self._volume_timer: asyncio.TimerHandle | None = None

    def hosts(self) -> str:
        """The pod's hosts file as it should read now (its names, its aliases, the Services)."""
        assert self._pod_ip is not None
        namespace = self.pod["metadata"].get("namespace", "")
        gateway = self.namespace.gateway if self.namespace is not None else None
        return hosts_file(
            self.pod,
            pod_ip=self._pod_ip,
            cluster_domain=self._runner.cluster_domain,
            services=[
                *self._runner.api_server_hosts(gateway=gateway, namespace=namespace),
                *self._runner.service_hosts(namespace),
            ],
        )

    def wake(self) -> None:
        """Something the pod depends on changed (a Secret or ConfigMap): look again."""
        self._wake.set()

    # -- notifications -------------------------------------------------------------------------------

    def update(self, pod: Pod, *, gone: bool = False) -> None:
        self.pod = pod
        self.gone = self.gone or gone
        self._wake.set()

    def _wake_later(self, delay: float) -> None:
        loop = asyncio.get_running_loop()
        self._timers = [timer for timer in self._timers if timer.when() > loop.time()]  # drop fired ones
        self._timers.append(loop.call_later(delay, self._wake.set))

    def _watch_exit(self, process: ManagedProcess) -> None:
        """Wake when ``process`` exits: a pidfd becomes readable then; poll where pidfds are missing."""
        loop = asyncio.get_running_loop()
        try:
            pidfd = os.pidfd_open(process.pid)
        except OSError:
            self._poll_exit(process)
            return

        def exited() -> None:
            loop.remove_reader(pidfd)
            self._close_pidfd(pidfd)
            self._wake.set()

        self._pidfds.append(pidfd)
        loop.add_reader(pidfd, exited)

    def _poll_exit(self, process: ManagedProcess) -> None:
        def check() -> None:
            if process.alive():
                self._poll_exit(process)
            else:
                self._wake.set()

        loop = asyncio.get_running_loop()
        self._timers = [timer for timer in self._timers if timer.when() > loop.time()]
        self._timers.append(loop.call_later(0.2, check))

    def _close_pidfd(self, pidfd: int) -> None:
        if pidfd in self._pidfds:
            self._pidfds.remove(pidfd)
            os.close(pidfd)

    def release(self) -> None:
        """Drop timers and pidfd readers (processes and namespaces are the lifecycle's or stop's)."""
        loop = asyncio.get_running_loop()
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()
        if self._volume_timer is not None:
            self._volume_timer.cancel()
            self._volume_timer = None
        for pidfd in list(self._pidfds):
            loop.remove_reader(pidfd)
            self._close_pidfd(pidfd)

    async def _next(self) -> None:
        await self._wake.wait()
        self._wake.clear()

    # -- views ---------------------------------------------------------------------------------------

    @property
    def deleting(self) -> bool:
        return self.gone or self.pod["metadata"].get("deletionTimestamp") is not None

    @property
    def _key(self) -> str:
        return f"{self.pod['metadata'].get('namespace')}/{self.pod['metadata'].get('name')}"

    def _runs(self, *, init: bool) -> list[ContainerRun]:
        return [c.run for c in self._containers if c.init is init]

    def _phase(self) -> Phase:
        return pod_phase(init_containers=self._runs(init=True), containers=self._runs(init=False))

    # -- the lifecycle -------------------------------------------------------------------------------

    async def run(self) -> None:
        try:
            phase = self.pod.get("status", {}).get("phase", "Pending")
            if not self.deleting and phase == "Pending":
                await self._run_pod()
            elif not self.deleting and phase == "Running":
                await self._mark_lost()
            await self._finalize_when_deleted()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("process runner: pod %s failed unexpectedly; stopping its processes", self._key)
            try:
                await self._stop_processes(grace=0.0)
                await self._delete_namespace()
            except Exception:  # the runner's stop() still kills and deletes whatever is left
                log.exception("process runner: cleanup of pod %s failed", self._key)
        finally:
            self.release()
            self._runner.forget(self)

    async def _run_pod(self) -> None:
        runner = self._runner
        try:
            check_runnable(self.pod, base_env=runner.base_env)
        except UnrunnableError as refusal:
            log.warning("process runner: pod %s refused: %s", self._key, refusal)
            await self._fail_unstarted("Unrunnable", str(refusal))
            return
        spec = self.pod["spec"]
        for init, entries in (
            (True, spec.get("initContainers") or []),
            (False, spec.get("containers") or []),
        ):
            for entry in entries:
                run = ContainerRun(name=entry["name"], image=entry.get("image", ""))
                run.waiting_reason = (
                    "PodInitializing" if not init and spec.get("initContainers") else "ContainerCreating"
                )
                self._containers.append(_Container(spec=entry, run=run, init=init))
        try:
            self.namespace = await runner.create_namespace(self.pod)
        except StackError as error:
            await self._fail_unstarted("NetworkNamespaceError", str(error))
            return
        pod_dir = runner.pod_dir(self.uid)
        tmp = pod_tmp_dir(self.namespace.name)
        tmp.mkdir(exist_ok=True)
        tmp.chmod(0o1777)  # as /tmp: containers running as another user write there too
        self._start_time, self._pod_ip = now_rfc3339(), self.namespace.address
        hostname, _ = pod_hostname(self.pod)
        await runner.services_synced()
        self.hosts_path = pod_dir / "hosts"
        self.hosts_path.write_text(self.hosts())
        log.info("process runner: pod %s at %s (%s)", self._key, self.namespace.address, self.namespace.name)
        self.volumes = runner.pod_volumes(self.pod, pod_dir=pod_dir, namespace=self.namespace.name)
        await self._fill_volumes()
        while True:
            if self.deleting:
                await self._terminate()
                return
            await self._sync_volumes()
            self._advance(hostname=hostname, pod_dir=pod_dir)
            phase = self._phase()
            written = await self._write_status(phase)
            if phase in ("Succeeded", "Failed"):
                await self._delete_namespace()
                if written:
                    log.info("process runner: pod %s %s", self._key, phase)
                    return
            await self._next()

    async def _fill_volumes(self) -> None:
        """Fill every volume before the first container starts; while a Secret, ConfigMap or token is
        missing the pod stays Pending (ContainerCreating), as kubelet keeps it, until it is deleted."""
        assert self.volumes is not None
        await self._runner.sources_synced()
        self.volumes.create()
        reported = None
        while not self.deleting:
            missing = await self._sync_volumes()
            if missing is None:
                return
            if missing != reported:
                log.warning("process runner: pod %s waits for its volumes: %s", self._key, missing)
                reported = missing
            await self._write_status("Pending")
            self._wake_later(1.0)
            await self._next()

    async def _sync_volumes(self) -> str | None:
        """Bring the volumes up to date (Secrets, ConfigMaps, tokens due); what is still missing.
        The next token refresh wakes the worker (one timer, replaced at each sync)."""
        if self.volumes is None:
            return None
        self.volumes.pod = self.pod
        result = await self.volumes.sync()
        if self._volume_timer is not None:
            self._volume_timer.cancel()
            self._volume_timer = None
        if result.again_in is not None:
            self._volume_timer = asyncio.get_running_loop().call_later(result.again_in, self._wake.set)
        return result.missing

    def _advance(self, *, hostname: str, pod_dir: Path) -> None:
        """Reap exited processes and start the containers due now: init ones in order, then the rest."""
        loop = asyncio.get_running_loop()
        policy = self.pod["spec"].get("restartPolicy", "Always")
        for container in self._containers:
            if container.process is not None and not container.process.alive():
                self._reap(container, policy=policy)
        for container in self._containers:
            run = container.run
            if (
                container.init
                and run.state == "terminated"
                and run.termination
                and run.termination.exit_code == 0
            ):
                continue
            if run.state == "waiting" and (
                container.restart_at is None or container.restart_at <= loop.time()
            ):
                self._start(container, hostname=hostname, pod_dir=pod_dir)
            if container.init:
                return  # init containers run one at a time, and none of the others before all succeeded

    def _start(self, container: _Container, *, hostname: str, pod_dir: Path) -> None:
        runner, run, namespace = self._runner, container.run, self.namespace
        assert namespace is not None
        home = pod_dir / "home" / run.name
        argv, env = container_command(
            pod=self.pod, container=container.spec, pod_ip=namespace.address, host_ip=runner.host_ip,
            base_env=runner.base_env, home=str(home), tmpdir=str(pod_tmp_dir(namespace.name)),
        )  # fmt: skip
        if env.get("HOME") == str(home):  # the container's own HOME (its env did not name another)
            home.mkdir(parents=True, exist_ok=True)
            (home / ".profile").write_text(login_profile(env.get("PATH", DEFAULT_PATH)))
        working_dir = Path(container.spec.get("workingDir") or pod_dir)
        if not working_dir.is_dir():
            working_dir = pod_dir
        meta = self.pod["metadata"]
        name = f"{meta.get('namespace')}_{meta.get('name')}_{self.uid[:8]}_{run.name}"
        if container.restart_at is not None:
            run.restart_count += 1
        try:
            container.process = runner.group.start(
                name,
                pod_argv(
                    namespace,
                    hostname=hostname,
                    hosts=pod_dir / "hosts",
                    argv=argv,
                    pid_namespace=wants_pid_namespace(self.pod, default=runner.pid_namespace),
                    mounts=self.volumes.plan(container.spec) if self.volumes is not None else None,
                ),
                env=env,
                cwd=working_dir,
                inherit_env=False,
            )
        except OSError as error:  # nsenter itself could not start: no retry would help
            log.error("process runner: pod %s container %s cannot start: %s", self._key, run.name, error)
            now = now_rfc3339()
            run.state, run.termination = (
                "terminated",
                Termination(exit_code=128, started_at=now, finished_at=now, pid=0),
            )
            container.restart_at = None
            return
        container.restart_at = None
        run.state, run.pid, run.started_at = "running", container.process.pid, now_rfc3339()
        self._watch_exit(container.process)
        log.info(
            "process runner: pod %s container %s started, pid %d: %s", self._key, run.name, run.pid, argv
        )

    def _reap(self, container: _Container, *, policy: str) -> None:
        process, run = container.process, container.run
        assert process is not None
        assert run.pid is not None
        assert run.started_at is not None
        code = exit_code_of(process.popen.returncode)
        self._runner.group.stop(process, grace=0.0)  # the group may have children left: kill those too
        container.process = None
        ended = Termination(exit_code=code, started_at=run.started_at, finished_at=now_rfc3339(), pid=run.pid)
        log.info("process runner: pod %s container %s exited with %d", self._key, run.name, code)
        restart = should_restart(
            policy,
            code,
            restarts=run.restart_count,
            max_restarts=self._runner.max_restarts,
            init=container.init,
        )
        run.pid = None
        if restart:
            delay = min(self._runner.restart_backoff * 2**run.restart_count, 30.0)
            run.state, run.waiting_reason, run.last_termination = "waiting", "CrashLoopBackOff", ended
            container.restart_at = asyncio.get_running_loop().time() + delay
            self._wake_later(delay)
        else:
            run.state, run.termination = "terminated", ended

    async def _stop_processes(self, *, grace: float) -> None:
        """SIGTERM every running container, wait up to ``grace`` seconds, then SIGKILL what is left."""
        running = [c for c in self._containers if c.process is not None]
        for container in running:
            assert container.process is not None
            with contextlib.suppress(ProcessLookupError):
                os.killpg(container.process.pid, signal.SIGTERM)
        deadline = asyncio.get_running_loop().time() + grace
        while any(c.process is not None and c.process.alive() for c in running):
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                break
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(remaining, 0.5)):
                    await self._next()
        for container in running:
            process = container.process
            assert process is not None
            self._runner.group.stop(process, grace=0.0)
            self._reap(container, policy="Never")

    async def _terminate(self) -> None:
        """The pod is being deleted: stop its processes, report the terminal phase, remove it."""
        spec, meta = self.pod.get("spec", {}), self.pod["metadata"]
        grace = min(
            float(spec.get("terminationGracePeriodSeconds", 30)),
            float(meta.get("deletionGracePeriodSeconds", 30) or 0),
            self._runner.max_grace,
        )
        log.info("process runner: pod %s deleted, stopping it (grace %.0fs)", self._key, grace)
        await self._stop_processes(grace=grace)
        await self._delete_namespace()
        for _ in range(10):  # report the terminal phase before the pod goes (a few tries, then go on)
            if self.gone or await self._write_status(terminal_phase(self._runs(init=False))):
                return
            await asyncio.sleep(1.0)

    async def _finalize_when_deleted(self) -> None:
        """Wait for the pod's deletion; finalize it as kubelet does (its processes are stopped by now)."""
        while not self.gone:
            if self.deleting and not self._finalized:
                self._finalized = await self._runner.delete_pod(self.pod)
                if not self._finalized:
                    self._wake_later(1.0)
            await self._next()

    async def _fail_unstarted(self, reason: str, message: str) -> None:
        spec = self.pod.get("spec", {})
        runs = [ContainerRun(name=c["name"], image=c.get("image", "")) for c in spec.get("containers") or []]
        while not self.deleting:
            if await self._write_status("Failed", containers=runs, reason=reason, message=message):
                return
            await asyncio.sleep(1.0)

    async def _mark_lost(self) -> None:
        """A Running pod this runner did not start: its process is gone (the runner restarted)."""
        log.warning(
            "process runner: pod %s was Running before this runner started; marking it Failed", self._key
        )
        previous = {c["name"]: c for c in self.pod.get("status", {}).get("containerStatuses") or []}
        runs: list[ContainerRun] = []
        now = now_rfc3339()
        for entry in self.pod["spec"].get("containers") or []:
            before = previous.get(entry["name"], {})
            run = ContainerRun(name=entry["name"], image=entry.get("image", ""), state="terminated")
            run.restart_count = int(before.get("restartCount", 0))
            started = before.get("state", {}).get("running", {}).get("startedAt") or now
            run.termination = Termination(exit_code=137, started_at=started, finished_at=now, pid=0)
            runs.append(run)
        ip = self.pod.get("status", {}).get("podIP")
        while not self.deleting:
            written = await self._write_status(
                "Failed", containers=runs, pod_ip=ip, reason="ProcessLost",
                message="the process runner restarted; the pod's processes are gone",
            )  # fmt: skip
            if written:
                return
            await asyncio.sleep(1.0)

    async def _write_status(
        self,
        phase: Phase,
        *,
        containers: Sequence[ContainerRun] | None = None,
        pod_ip: str | None = None,
        reason: str | None = None,
        message: str | None = None,
    ) -> bool:
        """Merge-patch the pod's status if it changed; on failure, try again in a second."""
        status = pod_status(
            pod=self.pod,
            init_containers=self._runs(init=True) if containers is None else [],
            containers=self._runs(init=False) if containers is None else containers,
            phase=phase,
            pod_ip=self._pod_ip or pod_ip,
            host_ip=self._runner.host_ip,
            start_time=self._start_time or self.pod.get("status", {}).get("startTime") or now_rfc3339(),
            now=now_rfc3339(),
            previous=self._written,
            reason=reason,
            message=message,
        )
        if status == self._written:
            return True
        try:
            await self._runner.patch_pod_status(self.pod, status)
        except (NotFound, Conflict) as error:  # Conflict: the uid precondition failed (a new pod, same name)
            log.info("process runner: pod %s is gone or replaced (%s)", self._key, error)
            self.gone = True
            return True
        except Invalid as error:
            log.error("process runner: status of pod %s rejected (a runner bug): %s", self._key, error)
            return False
        except (ApiError, *_TRANSPORT_ERRORS) as error:
            log.warning("process runner: status of pod %s not written, retrying: %s", self._key, error)
            self._wake_later(1.0)
            return False
        self._written = status
        return True

    async def _delete_namespace(self) -> None:
        if self.namespace is not None:
            namespace, self.namespace = self.namespace, None
            await self._runner.delete_namespace(namespace)


class ProcessRunner:
    """Stands in for kubelet on ``node_names``: registers them, keeps them Ready, runs their pods.

    Use ``async with ProcessRunner(...) as runner:``, or :meth:`start` and :meth:`stop`; from a command
    line, ``python -m bridge.sandbox.runner --kubeconfig K --node N [--node M ...]``. Needs root (network,
    UTS and mount namespaces) and ``nsenter``/``unshare`` (util-linux).

    Options: ``resources`` (capacity = allocatable of each node, extended resources included),
    ``labels`` and ``taints`` for the nodes (e.g. a ResourceFlavor's node labels), ``node_labels`` more
    labels for single nodes by name (e.g. the rack and block of a Kueue Topology); ``host_ip`` (the
    nodes' InternalIP and the pods' hostIP); ``env`` added to every container's environment (which
    otherwise holds only PATH (the runner's, after the folder of its Python), HOME (the container's
    own), HOSTNAME and the container's own ``env``); ``cluster_dns`` (on by default) keeps the
    Services' names in the pods' hosts files under ``cluster_domain`` and puts
    :data:`CLUSTER_DNS_ENV` in their environment; ``in_cluster`` (on by default) gives every pod the
    ``KUBERNETES_SERVICE_*`` variables and the API server's names in its hosts file, when the runner's
    own API server is on loopback or an IPv4 address; ``pid_namespace`` gives each container of a pod
    without :data:`PID_NAMESPACE_ANNOTATION` a PID namespace of its own; ``max_restarts`` and
    ``restart_backoff`` (doubling, capped at 30 s) bound local restarts; ``max_grace`` caps a deleted
    pod's termination grace period; ``lease_duration`` / ``heartbeat_interval`` as kubelet's node lease.
    """

    def __init__(
        self,
        *,
        kubeconfig: Path,
        node_names: Sequence[str],
        workdir: Path,
        resources: NodeResources | None = None,
        labels: Mapping[str, str] | None = None,
        node_labels: Mapping[str, Mapping[str, str]] | None = None,
        taints: Sequence[Mapping[str, str]] = (),
        host_ip: str = "127.0.0.1",
        env: Mapping[str, str] | None = None,
        max_restarts: int = 5,
        restart_backoff: float = 1.0,
        max_grace: float = 10.0,
        lease_duration: int = 40,
        heartbeat_interval: float = 10.0,
        watch_timeout: int = 300,
        node_lock_dir: Path = NODE_LOCK_DIR,
        cluster_dns: bool = True,
        cluster_domain: str = "cluster.local",
        pid_namespace: bool = False,
        in_cluster: bool = True,
    ) -> None:
        if not node_names:
            raise ValueError("a process runner needs at least one node name")
        self.kubeconfig = kubeconfig
        self.node_names = list(node_names)
        self.workdir = workdir
        self.resources = resources or NodeResources()
        self.labels = dict(labels or {})
        unknown = sorted(set(node_labels or {}) - set(self.node_names))
        if unknown:
            raise ValueError(f"labels for nodes this runner does not serve: {unknown}")
        self.node_labels = {name: dict(extra) for name, extra in (node_labels or {}).items()}
        self.taints = [dict(taint) for taint in taints]
        self.host_ip = host_ip
        self.base_env = {
            "PATH": pods_path(os.environ.get("PATH", DEFAULT_PATH)),
            **(CLUSTER_DNS_ENV if cluster_dns else {}),
            **(env or {}),
        }
        self.cluster_dns = cluster_dns
        self.cluster_domain = cluster_domain
        self.pid_namespace = pid_namespace
        self._slices: Informer | None = None
        self._slices_waited = False
        self.in_cluster = in_cluster
        self.api_server: ApiServerAddress | None = None
        """Where pods reach the API server (from the runner's own server URL), once started."""
        self._secrets: Informer | None = None
        self._config_maps: Informer | None = None
        self._sources_refresh: asyncio.Handle | None = None
        self._changed_sources: set[tuple[str, str, str]] = set()
        self._hosts_refresh: asyncio.Handle | None = None
        self.max_restarts = max_restarts
        self.restart_backoff = restart_backoff
        self.max_grace = max_grace
        self.lease_duration = lease_duration
        self.heartbeat_interval = heartbeat_interval
        self.watch_timeout = watch_timeout
        self.group = ProcessGroup(workdir, mark_environment=False)  # a pod's env is its spec's
        self._session: Session | None = None
        self._client: Client | None = None
        self._lock: int | None = None
        self._node_locks: list[int] = []
        self.node_lock_dir = node_lock_dir
        self._main: asyncio.Task[None] | None = None
        self._tasks: asyncio.TaskGroup | None = None
        self._workers: dict[str, _PodWorker] = {}
        self._node_uids: dict[str, str] = {}
        self._namespaces: dict[str, NetworkNamespace] = {}
        self._creating: set[asyncio.Future[NetworkNamespace]] = set()
        self._making: set[str] = set()
        """Names of the namespaces being made now (not yet in ``_namespaces``)."""
        self._deleting: set[asyncio.Future[None]] = set()

    # -- lifecycle -----------------------------------------------------------------------------------

    async def start(self) -> None:
        """Take the workdir, reclaim what an earlier runner of it left, register the nodes (Ready, with
        their Leases), then watch and run their pods."""
        if self._main is not None:
            raise RuntimeError("process runner already started")
        check_prerequisites()
        self._lock = lock_workdir(self.workdir)
        try:
            for name in self.node_names:
                self._node_locks.append(lock_node(name, lock_dir=self.node_lock_dir))
            await asyncio.to_thread(reclaim, self.workdir)
            self._session = await Session.load(config_file=self.kubeconfig)
            self._client = _client(self._session)
            if self.cluster_dns:
                self._slices = self._slice_informer()
            self._secrets = self._source_informer(_SECRETS)
            self._config_maps = self._source_informer(_CONFIG_MAPS)
            if self.in_cluster:
                self.api_server = api_server_address(self._session.base_url)
            if self.api_server is not None:
                self.base_env = {**in_cluster_env(self.api_server.port), **self.base_env}
            for name in self.node_names:
                await self._register(name)
                await self._renew_lease(name)
        except BaseException:
            await self._close()
            raise
        self._main = asyncio.create_task(self._run(), name="process-runner")
        log.info("process runner: serving nodes %s", ", ".join(self.node_names))

    async def stop(self, *, grace: float = 5.0) -> None:
        """Stop watching, stop every process started (SIGTERM, then SIGKILL after ``grace``), delete
        every namespace created. Pods and nodes stay as they are in the API (a restarted runner
        reconciles them)."""
        main, self._main = self._main, None
        try:
            if main is not None:
                main.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await main
        finally:
            try:
                await self._stop_everything(grace=grace)
            finally:
                await self._close()

    async def _close(self) -> None:
        """Close the API session and give the workdir and nodes up (the locks go with the process anyway)."""
        session, self._session, self._client = self._session, None, None
        self._slices = self._secrets = self._config_maps = None
        for handle in (self._hosts_refresh, self._sources_refresh):
            if handle is not None:
                handle.cancel()
        self._hosts_refresh = self._sources_refresh = None
        try:
            if session is not None:
                await session.close()
        finally:
            while self._node_locks:
                os.close(self._node_locks.pop())
            if self._lock is not None:
                os.close(self._lock)
                self._lock = None

    async def _stop_everything(self, *, grace: float) -> None:
        if self._creating or self._deleting:
            await asyncio.gather(*self._creating, *self._deleting, return_exceptions=True)
        processes = list(self.group.processes)
        for process in processes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while any(p.alive() for p in processes) and time.monotonic() < deadline:  # noqa: ASYNC110 (Popen: no event)
            await asyncio.sleep(0.05)
        self.group.stop_all(grace=0.0)
        for namespace in list(self._namespaces.values()):
            await self.delete_namespace(namespace)

    async def __aenter__(self) -> ProcessRunner:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _run(self) -> None:
        async with asyncio.TaskGroup() as tasks:
            self._tasks = tasks
            tasks.create_task(self._heartbeat(), name="process-runner-heartbeat")
            if self._slices is not None:
                tasks.create_task(self._slices.run(), name="process-runner-endpointslices")
            for informer in (self._secrets, self._config_maps):
                if informer is not None:
                    tasks.create_task(informer.run(), name=f"process-runner-{informer.resource.plural}")
            for name in self.node_names:
                informer = self._pod_informer(name)
                tasks.create_task(informer.run(), name=f"process-runner-pods-{name}")

    # -- services for the pod workers ----------------------------------------------------------------

    @property
    def client(self) -> Client:
        if self._client is None:
            raise RuntimeError("process runner not started")
        return self._client

    def pod_dir(self, uid: str) -> Path:
        path = self.workdir / "pods" / uid
        path.mkdir(parents=True, exist_ok=True)
        return path

    def namespace_of(self, uid: str) -> NetworkNamespace | None:
        """The network namespace of the pod with this uid while it has one (for tests and debugging)."""
        worker = self._workers.get(uid)
        return worker.namespace if worker else None

    async def create_namespace(self, pod: Pod) -> NetworkNamespace:
        """Create the pod's namespace in a thread; tracked even if the caller is cancelled meanwhile.

        Its name is derived from the node and the pod's uid and written to the pod's directory before
        the namespace exists, so a runner restarted after a crash at any point finds it
        (:func:`reclaim`); one of that name left over is this pod's own (no other live runner serves
        the node: :func:`lock_node`), and is removed first.
        """
        uid = pod["metadata"]["uid"]
        token = namespace_token(str(pod.get("spec", {}).get("nodeName", "")), uid)
        name = namespace_name(token)
        (self.pod_dir(uid) / NETNS_FILE).write_text(name + "\n")

        def create() -> NetworkNamespace:
            if (NETNS_DIR / name).exists():
                log.warning("process runner: namespace %s of pod %s exists already: removing it", name, uid)
                remove_namespace(name)
            namespace = create_namespace(token=token)
            self._namespaces[namespace.name] = namespace
            return namespace

        future: asyncio.Future[NetworkNamespace] = asyncio.ensure_future(asyncio.to_thread(create))
        self._creating.add(future)
        self._making.add(name)
        future.add_done_callback(self._creating.discard)
        future.add_done_callback(lambda _: self._making.discard(name))
        future.add_done_callback(lambda done: done.cancelled() or done.exception())  # retrieved, always
        return await asyncio.shield(future)

    async def delete_namespace(self, namespace: NetworkNamespace) -> None:
        """Kill whatever still runs in the namespace (children a container left), then delete it.

        In a thread, as creation: it scans /proc and may wait seconds for processes to die. Tracked
        even if the caller is cancelled meanwhile (:meth:`stop` waits for it). A namespace whose
        processes outlive the kill timeout is kept, name and all, for :meth:`stop` to retry.
        """

        def delete() -> None:
            try:
                killed = remove_namespace(namespace.name)
            except NamespaceBusyError as error:
                log.error("process runner: %s", error)
                return
            if killed:
                log.info("process runner: killed %d leftover processes in %s", len(killed), namespace.name)
            shutil.rmtree(pod_tmp_dir(namespace.name), ignore_errors=True)
            remove_memory_dirs(namespace.name)
            self._namespaces.pop(namespace.name, None)

        future: asyncio.Future[None] = asyncio.ensure_future(asyncio.to_thread(delete))
        self._deleting.add(future)
        future.add_done_callback(self._deleting.discard)
        future.add_done_callback(lambda done: done.cancelled() or done.exception())  # retrieved, always
        await asyncio.shield(future)

    def forget(self, worker: _PodWorker) -> None:
        """The worker is done (the pod is gone): drop it, and its pod's directory once its namespace is
        gone too (one still being made, or kept busy for :meth:`stop` to retry, keeps its record)."""
        if self._workers.get(worker.uid) is worker:
            del self._workers[worker.uid]
        pod_dir = self.workdir / "pods" / worker.uid
        recorded = _recorded_namespace(pod_dir)
        in_use = recorded in self._namespaces or recorded in self._making
        exists = recorded is not None and (NETNS_DIR / recorded).exists()
        if pod_dir.is_dir() and pod_dir_removable(recorded=recorded, in_use=in_use, exists=exists):
            shutil.rmtree(pod_dir, ignore_errors=True)

    async def patch_pod_status(self, pod: Pod, status: Mapping[str, Any]) -> None:
        """Merge-patch the pod's status subresource, only if the pod still has this uid."""
        meta = pod["metadata"]
        await self.client.patch_status(
            "v1",
            "Pod",
            meta["name"],
            {"metadata": {"uid": meta["uid"]}, "status": dict(status)},
            namespace=meta["namespace"],
            field_manager=FIELD_MANAGER,
        )

    async def delete_pod(self, pod: Pod) -> bool:
        """Remove the pod for good (grace 0, only this uid); True when done or already gone."""
        meta = pod["metadata"]
        try:
            await self.client.delete(
                "v1",
                "Pod",
                meta["name"],
                namespace=meta["namespace"],
                grace_period_seconds=0,
                preconditions={"uid": meta["uid"]},
            )
        except (NotFound, Conflict):
            return True
        except (ApiError, *_TRANSPORT_ERRORS) as error:
            log.warning("process runner: cannot delete pod %s/%s: %s", meta["namespace"], meta["name"], error)
            return False
        return True

    # -- the cluster-DNS stand-in --------------------------------------------------------------------

    def _slice_informer(self) -> Informer:
        """List then watch every EndpointSlice (all namespaces): the Services' ready endpoints."""
        informer = Informer(
            self.client,
            _ENDPOINT_SLICES,
            resync_period=None,
            settings=ReflectorSettings(
                watch_timeout=(self.watch_timeout, self.watch_timeout),
                backoff=BackoffSettings(initial=0.5, maximum=10.0),
            ),
            registry=None,
        )
        informer.add_handler(_SliceEvents(self))
        return informer

    async def services_synced(self) -> None:
        """Wait (bounded by :data:`SERVICES_SYNC_TIMEOUT`, once per runner) for the first list of
        EndpointSlices, so a pod's first hosts file has them; after that pods start anyway, and get
        them when the file is rewritten."""
        if self._slices is None or self._slices_waited:
            return
        if not await self._slices.wait_for_sync(SERVICES_SYNC_TIMEOUT):
            log.warning(
                "process runner: EndpointSlices not listed after %.0fs; pods start without waiting for them",
                SERVICES_SYNC_TIMEOUT,
            )
        self._slices_waited = True

    def service_hosts(self, namespace: str) -> list[tuple[str, list[str]]]:
        """The Services' hosts entries as a pod in ``namespace`` sees them (:func:`service_hosts`)."""
        if self._slices is None:
            return []
        return service_hosts(
            self._slices.store.list(), namespace=namespace, cluster_domain=self.cluster_domain
        )

    def services_changed(self) -> None:
        """Rewrite the running pods' hosts files soon (once for a burst of EndpointSlice events)."""
        if self._hosts_refresh is None:
            self._hosts_refresh = asyncio.get_running_loop().call_later(0.1, self._refresh_hosts)

    def _refresh_hosts(self) -> None:
        """Write each running pod's hosts file again where it changed: in place, not by rename, since
        each container has this very file (inode) bound on its /etc/hosts."""
        self._hosts_refresh = None
        for worker in list(self._workers.values()):
            path = worker.hosts_path
            if path is None or worker.namespace is None:
                continue
            wanted = worker.hosts().encode()
            try:
                with path.open("r+b") as handle:
                    if handle.read() == wanted:
                        continue
                    handle.seek(0)
                    handle.write(wanted)
                    handle.truncate()
            except FileNotFoundError:  # the pod is finishing: its directory is going
                continue
            log.info("process runner: hosts file of pod %s updated (Services changed)", worker.uid)

    def api_server_hosts(self, *, gateway: str | None, namespace: str) -> list[tuple[str, list[str]]]:
        """The API server's names (and the host's) for a pod with this gateway, in ``namespace``."""
        if self.api_server is None or gateway is None:
            return []
        return api_server_hosts(
            address=self.api_server, gateway=gateway, namespace=namespace, cluster_domain=self.cluster_domain
        )

    # -- the volumes' sources ------------------------------------------------------------------------

    def _source_informer(self, resource: Resource) -> Informer:
        """List then watch every Secret or ConfigMap (all namespaces): what pod volumes are made of."""
        informer = Informer(
            self.client,
            resource,
            resync_period=None,
            settings=ReflectorSettings(
                watch_timeout=(self.watch_timeout, self.watch_timeout),
                backoff=BackoffSettings(initial=0.5, maximum=10.0),
            ),
            registry=None,
        )
        informer.add_handler(_SourceEvents(self, resource.kind))
        return informer

    async def sources_synced(self) -> None:
        """Wait (bounded, as :meth:`services_synced`) for the first list of Secrets and ConfigMaps."""
        for informer in (self._secrets, self._config_maps):
            if informer is not None and not await informer.wait_for_sync(SERVICES_SYNC_TIMEOUT):
                log.warning("process runner: %s not listed yet; pods wait for them", informer.resource.plural)

    def _lookup(self, informer: Informer | None) -> Callable[[str, str], Mapping[str, Any] | None]:
        def find(namespace: str, name: str) -> Mapping[str, Any] | None:
            return informer.store.get(f"{namespace}/{name}") if informer is not None else None

        return find

    def pod_volumes(self, pod: Pod, *, pod_dir: Path, namespace: str) -> PodVolumes:
        """The keeper of one pod's volumes (:class:`~bridge.sandbox.volume_keeper.PodVolumes`)."""
        return PodVolumes(
            pod=pod,
            pod_dir=pod_dir,
            namespace=namespace,
            client=self.client,
            secrets_of=self._lookup(self._secrets),
            config_maps_of=self._lookup(self._config_maps),
        )

    def sources_changed(self, kind: str, obj: Object) -> None:
        """Wake the pods whose volumes read ``obj`` (a Secret or ConfigMap) soon, once for a burst."""
        meta = obj.get("metadata") or {}
        self._changed_sources.add((kind, str(meta.get("namespace")), str(meta.get("name"))))
        if self._sources_refresh is None:
            self._sources_refresh = asyncio.get_running_loop().call_later(0.1, self._wake_volumes)

    def _wake_volumes(self) -> None:
        self._sources_refresh = None
        changed, self._changed_sources = self._changed_sources, set()
        for worker in list(self._workers.values()):
            if worker.volumes is not None and referenced_objects(worker.pod) & changed:
                worker.wake()

    # -- nodes ---------------------------------------------------------------------------------------

    async def _register(self, name: str) -> None:
        manifest = node_manifest(
            name=name,
            resources=self.resources,
            labels={**self.labels, **self.node_labels.get(name, {})},
            host_ip=self.host_ip,
            now=now_rfc3339(),
            taints=self.taints,
        )
        try:
            node = await self.client.create(manifest)
        except (AlreadyExists, Conflict):
            node = await self.client.patch(
                "v1", "Node", name, {"metadata": {"labels": manifest["metadata"]["labels"]}}
            )
            await self._post_node_status(name)
        self._node_uids[name] = node["metadata"]["uid"]

    async def _post_node_status(self, name: str) -> None:
        status = node_status(name=name, resources=self.resources, host_ip=self.host_ip, now=now_rfc3339())
        await self.client.patch_status("v1", "Node", name, {"status": status})

    async def _renew_lease(self, name: str) -> None:
        body = lease_manifest(
            node=name, node_uid=self._node_uids[name], duration=self.lease_duration, renew_time=now_micro()
        )
        try:
            await self.client.patch(
                "coordination.k8s.io/v1",
                "Lease",
                name,
                {"spec": body["spec"]},
                namespace=NODE_LEASE_NAMESPACE,
            )
        except NotFound:
            await self.client.create(body)

    async def _heartbeat(self) -> None:
        """Renew each node's Lease every interval and re-post its Ready status every few intervals."""
        beats = 0
        while True:
            await asyncio.sleep(self.heartbeat_interval)
            beats += 1
            for name in self.node_names:
                try:
                    if name not in self._node_uids:
                        await self._register(name)
                    elif beats % 6 == 0:
                        try:
                            await self._post_node_status(name)
                        except NotFound:  # the node was deleted: register it again
                            self._node_uids.pop(name, None)
                            raise
                    await self._renew_lease(name)
                except (ApiError, *_TRANSPORT_ERRORS) as error:
                    log.warning("process runner: heartbeat of node %s failed: %s", name, error)

    # -- pods ----------------------------------------------------------------------------------------

    def _pod_informer(self, node: str) -> Informer:
        """List then watch the pods bound to ``node`` (the runtime's reflector: relists on 410, backs off
        0.5 s doubling to 10 s on errors); each change goes to :meth:`observe`."""
        informer = Informer(
            self.client,
            _PODS,
            field_selector=f"spec.nodeName={node}",
            resync_period=None,
            settings=ReflectorSettings(
                watch_timeout=(self.watch_timeout, self.watch_timeout),
                backoff=BackoffSettings(initial=0.5, maximum=10.0),
            ),
            registry=None,
        )
        informer.add_handler(_PodEvents(self))
        return informer

    def observe(self, pod: Pod, *, gone: bool) -> None:
        """A pod of one of the runner's nodes as the API has it now (``gone``: it was deleted)."""
        uid = pod["metadata"]["uid"]
        worker = self._workers.get(uid)
        if worker is not None:
            worker.update(pod, gone=gone)
            return
        if gone or self._tasks is None:
            return
        worker = _PodWorker(self, pod)
        self._workers[uid] = worker
        meta = pod["metadata"]
        self._tasks.create_task(
            worker.run(), name=f"process-runner-pod-{meta.get('namespace')}/{meta.get('name')}"
        )


# ---------------------------------------------------------------------------------------------------
# Command line.
# ---------------------------------------------------------------------------------------------------


def _pairs(values: Sequence[str], what: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for value in values:
        key, sep, rest = value.partition("=")
        if not sep:
            raise SystemExit(f"--{what} takes KEY=VALUE, got {value!r}")
        pairs[key] = rest
    return pairs


def node_label_options(values: Sequence[str]) -> dict[str, dict[str, str]]:
    """``--node-label NODE:KEY=VALUE`` options as node name -> labels (kubelet's ``--node-labels``, one
    runner serving several nodes)."""
    by_node: dict[str, dict[str, str]] = {}
    for value in values:
        node, sep, pair = value.partition(":")
        if not sep or not node:
            raise SystemExit(f"--node-label takes NODE:KEY=VALUE, got {value!r}")
        by_node.setdefault(node, {}).update(_pairs([pair], "node-label"))
    return by_node


def _taints(values: Sequence[str]) -> list[dict[str, str]]:
    taints: list[dict[str, str]] = []
    for key, rest in _pairs(values, "taint").items():
        value, sep, effect = rest.rpartition(":")
        if not sep:
            raise SystemExit(f"--taint takes KEY=VALUE:EFFECT, got {key}={rest}")
        taints.append({"key": key, "value": value, "effect": effect})
    return taints


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bridge.sandbox.runner",
        description="Run the pods bound to the given nodes as local processes (a kubelet for the sandbox).",
    )
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--node", dest="nodes", action="append", required=True, help="node name (repeatable)")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/k8s-bridge-runner"))  # noqa: S108
    parser.add_argument("--cpu", default="8")
    parser.add_argument("--memory", default="32Gi")
    parser.add_argument("--pods", default="110")
    parser.add_argument("--resource", action="append", default=[], help="extended resource NAME=COUNT")
    parser.add_argument("--label", action="append", default=[], help="node label KEY=VALUE")
    parser.add_argument(
        "--node-label", action="append", default=[], help="label of one node NODE:KEY=VALUE (repeatable)"
    )
    parser.add_argument("--taint", action="append", default=[], help="node taint KEY=VALUE:EFFECT")
    parser.add_argument("--env", action="append", default=[], help="env KEY=VALUE for every container")
    parser.add_argument("--host-ip", default="127.0.0.1")
    parser.add_argument(
        "--no-in-cluster",
        dest="in_cluster",
        action="store_false",
        help="no KUBERNETES_SERVICE_* variables nor API server names for the pods",
    )
    parser.add_argument(
        "--pid-namespace",
        action="store_true",
        help=f"a PID namespace per container, unless a pod's {PID_NAMESPACE_ANNOTATION} annotation says no",
    )
    return parser


async def _serve(arguments: argparse.Namespace) -> None:
    runner = ProcessRunner(
        kubeconfig=arguments.kubeconfig,
        node_names=arguments.nodes,
        workdir=arguments.workdir,
        resources=NodeResources(
            cpu=arguments.cpu,
            memory=arguments.memory,
            pods=arguments.pods,
            extended=_pairs(arguments.resource, "resource"),
        ),
        labels=_pairs(arguments.label, "label"),
        node_labels=node_label_options(arguments.node_label),
        taints=_taints(arguments.taint),
        env=_pairs(arguments.env, "env"),
        host_ip=arguments.host_ip,
        pid_namespace=arguments.pid_namespace,
        in_cluster=arguments.in_cluster,
    )
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stopping.set)
    async with runner:
        await stopping.wait()


def main(argv: Sequence[str] | None = None) -> int:
    arguments = _parser().parse_args(argv)
    configure_logging(json=False)  # the runner's own lines and the runtime's, as readable text
    try:
        asyncio.run(_serve(arguments))
    except StackError as error:
        print(f"process runner: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
