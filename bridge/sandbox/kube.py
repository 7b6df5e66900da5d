"""The Kubernetes control plane of the local stack: a real etcd and kube-apiserver (the envtest pair).

Why our own and not envtest or kind: the tests must run against the real API server (watch streams,
410 Gone after a compaction, restarts, server-side apply, CRD validation) and the machine has no
container runtime. So this module does what envtest does, in Python: in a temporary directory it
makes a CA, serving and client certificates and a service-account key, starts etcd and
kube-apiserver on free loopback ports through :class:`~bridge.sandbox.processes.ProcessGroup`, waits
for ``/readyz`` and writes an admin kubeconfig. The admin identity is a client certificate in
``system:masters``, so RBAC stays on and a bridge under test can still be given a narrower identity.

Also here, because runtime tests need them for real: :meth:`ControlPlane.compact_etcd` (a real
``410 Gone`` for watches that resume from an old resourceVersion; start with ``watch_cache=False``
to get it at once rather than when the watch cache's window moves on) and
:meth:`ControlPlane.restart_apiserver` (same port and certificates, so clients reconnect).

:class:`RestClient` is a deliberately small synchronous client (urllib, no dependency) for the
stack's own set-up work: applying CRDs, namespaces and nodes, waiting on conditions. The code under
test uses its own asynchronous client.
"""

from __future__ import annotations

import concurrent.futures
import copy
import datetime
import functools
import ipaddress
import json
import os
import shutil
import ssl
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from bridge.sandbox import owners
from bridge.sandbox.build import MissingPrerequisiteError, StackPaths, stack_paths
from bridge.sandbox.leftovers import reclaim_leftovers
from bridge.sandbox.processes import ManagedProcess, ProcessGroup, StackError, free_port, wait_until

__all__ = [
    "BUILD_HINT",
    "ApiError",
    "Certificates",
    "ControlPlane",
    "RestClient",
    "http_ready",
    "require_binary",
]

SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"
FIELD_MANAGER = "k8s-bridge-sandbox"
FRONT_PROXY_CLIENT = "front-proxy-client"
AUDIT_POLICY = """\
# Written by bridge.sandbox.kube: who did what (no request or response bodies), once a response is
# started (watches) or complete.
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
"""
BUILD_HINT = "build it with `python3 -m bridge.sandbox.build all`"


def require_binary(path: Path, name: str) -> Path:
    """``path`` if it is an executable file, else a :class:`MissingPrerequisiteError` saying how to get it."""
    if not (path.is_file() and os.access(path, os.X_OK)):
        extra = ""
        if name in ("kube-apiserver", "etcd") and os.environ.get("KUBEBUILDER_ASSETS"):
            extra = f" (KUBEBUILDER_ASSETS={os.environ['KUBEBUILDER_ASSETS']} is set: it must hold {name})"
        raise MissingPrerequisiteError(f"{name} is not built: no executable at {path}{extra}; {BUILD_HINT}")
    return path


# ---------------------------------------------------------------------------------------------------
# Certificates


@dataclass(frozen=True)
class Certificates:
    """PEM files of one stack: a CA, a serving pair for loopback, an admin client pair, the SA key."""

    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    admin_cert: Path
    admin_key: Path
    proxy_client_cert: Path
    proxy_client_key: Path
    service_account_key: Path
    service_account_public: Path

    @classmethod
    def generate(cls, directory: Path, *, service_ip: str) -> Certificates:
        """Write every file into ``directory`` (created); valid for a year, loopback names only."""
        directory.mkdir(parents=True, exist_ok=True)
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "k8s-bridge-sandbox-ca")])
        ca_cert = (
            _builder(ca_name, ca_name, ca_key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(ca_key, hashes.SHA256())
        )
        names: list[x509.GeneralName] = [
            x509.DNSName(dns)
            for dns in (
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            )
        ]
        names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ("127.0.0.1", service_ip)]
        serving_key, serving_cert = _leaf(
            ca_cert, ca_key, common_name="localhost", sans=names, usage=ExtendedKeyUsageOID.SERVER_AUTH
        )
        admin_key, admin_cert = _leaf(
            ca_cert,
            ca_key,
            common_name="k8s-bridge-admin",
            organization="system:masters",
            usage=ExtendedKeyUsageOID.CLIENT_AUTH,
        )
        proxy_key, proxy_cert = _leaf(
            ca_cert, ca_key, common_name=FRONT_PROXY_CLIENT, usage=ExtendedKeyUsageOID.CLIENT_AUTH
        )
        sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

        files = cls(
            ca_cert=directory / "ca.crt",
            ca_key=directory / "ca.key",
            serving_cert=directory / "serving.crt",
            serving_key=directory / "serving.key",
            admin_cert=directory / "admin.crt",
            admin_key=directory / "admin.key",
            proxy_client_cert=directory / "front-proxy-client.crt",
            proxy_client_key=directory / "front-proxy-client.key",
            service_account_key=directory / "sa.key",
            service_account_public=directory / "sa.pub",
        )
        _write(files.ca_cert, ca_cert.public_bytes(serialization.Encoding.PEM))
        _write(files.ca_key, _key_pem(ca_key), private=True)
        _write(files.serving_cert, serving_cert.public_bytes(serialization.Encoding.PEM))
        _write(files.serving_key, _key_pem(serving_key), private=True)
        _write(files.admin_cert, admin_cert.public_bytes(serialization.Encoding.PEM))
        _write(files.admin_key, _key_pem(admin_key), private=True)
        _write(files.proxy_client_cert, proxy_cert.public_bytes(serialization.Encoding.PEM))
        _write(files.proxy_client_key, _key_pem(proxy_key), private=True)
        _write(
            files.service_account_key,
            sa_key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.TraditionalOpenSSL,
                serialization.NoEncryption(),
            ),
            private=True,
        )
        _write(
            files.service_account_public,
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            ),
        )
        return files

    def write_serving_pair(
        self, directory: Path, *, cert_name: str = "tls.crt", key_name: str = "tls.key"
    ) -> Path:
        """Copy the loopback serving pair into ``directory`` under the names a controller expects."""
        directory.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.serving_cert, directory / cert_name)
        shutil.copyfile(self.serving_key, directory / key_name)
        (directory / key_name).chmod(0o600)
        return directory


def _builder(subject: x509.Name, issuer: x509.Name, public_key: Any) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=365))
    )


def _leaf(
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    *,
    common_name: str,
    usage: x509.ObjectIdentifier,
    organization: str | None = None,
    sans: Sequence[x509.GeneralName] = (),
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    builder = (
        _builder(x509.Name(attributes), ca_cert.subject, key.public_key())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
    return key, builder.sign(ca_key, hashes.SHA256())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _write(path: Path, data: bytes, *, private: bool = False) -> None:
    path.write_bytes(data)
    if private:
        path.chmod(0o600)


# ---------------------------------------------------------------------------------------------------
# A small synchronous REST client for the stack's own set-up work


class ApiError(StackError):
    """The API server answered with an error status; ``status`` and the decoded ``body`` say which."""

    def __init__(self, method: str, path: str, status: int, body: Any) -> None:
        message = body.get("message") if isinstance(body, dict) else body
        super().__init__(f"{method} {path}: HTTP {status}: {message}")
        self.status = status
        self.body = body


class RestClient:
    """Just enough of the Kubernetes REST API to set a stack up: JSON in, JSON out, errors raised."""

    def __init__(self, *, server: str, certificates: Certificates, timeout: float = 30.0) -> None:
        self.server = server.rstrip("/")
        self.timeout = timeout
        self._context = ssl.create_default_context(cafile=str(certificates.ca_cert))
        self._context.load_cert_chain(str(certificates.admin_cert), str(certificates.admin_key))

    @property
    def ssl_context(self) -> ssl.SSLContext:
        """The admin client's TLS context, for a caller that streams (a watch) rather than asks."""
        return self._context

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: Mapping[str, str] | None = None,
        content_type: str = "application/json",
        timeout: float | None = None,
        accept: str = "application/json",
    ) -> Any:
        """Send one request; the decoded JSON answer (or text), or :class:`ApiError` on HTTP >= 400.
        ``accept``: e.g. ``application/json;as=Table;v=v1;g=meta.k8s.io`` for the server's table view."""
        url = self.server + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method)  # noqa: S310 (https only)
        request.add_header("Accept", accept)
        if data is not None:
            request.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(  # noqa: S310 (our own https server)
                request, context=self._context, timeout=timeout or self.timeout
            ) as response:
                return _decode(response.read())
        except urllib.error.HTTPError as error:
            raise ApiError(method, path, error.code, _decode(error.read())) from None

    def get(self, path: str, **query: str) -> Any:
        return self.request("GET", path, query=query or None)

    def create(self, collection: str, body: Mapping[str, Any]) -> Any:
        return self.request("POST", collection, body=body)

    def delete(self, path: str, *, missing_ok: bool = True) -> Any:
        try:
            return self.request("DELETE", path, body={"propagationPolicy": "Background"})
        except ApiError as error:
            if error.status == 404 and missing_ok:
                return None
            raise

    def apply(self, collection: str, body: Mapping[str, Any], *, field_manager: str = FIELD_MANAGER) -> Any:
        """Server-side apply ``body`` (with apiVersion, kind, metadata.name) into ``collection``."""
        path = f"{collection.rstrip('/')}/{body['metadata']['name']}"
        return self.request(
            "PATCH",
            path,
            body=body,
            query={"fieldManager": field_manager, "force": "true"},
            content_type="application/apply-patch+yaml",
        )

    def exists(self, path: str) -> bool:
        try:
            self.get(path)
        except ApiError as error:
            if error.status == 404:
                return False
            raise
        return True


def _decode(raw: bytes) -> Any:
    text = raw.decode(errors="replace")
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def http_ready(url: str, *, context: ssl.SSLContext | None = None, body: bytes | None = None) -> bool:
    """True when ``url`` answers 2xx right now (a readiness probe; every failure is just 'not yet')."""
    request = urllib.request.Request(url, data=body, method="POST" if body is not None else "GET")  # noqa: S310
    try:
        with urllib.request.urlopen(request, context=context, timeout=2) as response:  # noqa: S310
            return 200 <= int(response.status) < 300
    except (OSError, ValueError):
        return False


# ---------------------------------------------------------------------------------------------------
# The control plane


class ControlPlane:
    """etcd + kube-apiserver in a temporary directory on free loopback ports; stop() leaves nothing.

    Use it as a context manager, or call :meth:`start` and :meth:`stop`. After start:
    ``server`` (https URL), ``kubeconfig`` (admin), ``certificates``, ``client`` (:class:`RestClient`).
    """

    def __init__(
        self,
        *,
        workdir: Path | None = None,
        paths: StackPaths | None = None,
        watch_cache: bool = True,
        service_cluster_ip_range: str = SERVICE_CLUSTER_IP_RANGE,
        extra_apiserver_args: Sequence[str] = (),
        start_timeout: float = 120.0,
        keep_workdir: bool = False,
        bind_address: str = "0.0.0.0",  # noqa: S104 - pods reach it at their gateway; see docs/development.md
        audit: bool = False,
    ) -> None:
        self.paths = paths or stack_paths()
        self.bind_address = bind_address
        self.audit = audit
        self._own_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="k8s-bridge-kube-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.keep_workdir = keep_workdir
        self.watch_cache = watch_cache
        self.service_cluster_ip_range = service_cluster_ip_range
        self.extra_apiserver_args = list(extra_apiserver_args)
        self.start_timeout = start_timeout
        self.group = ProcessGroup(self.workdir)
        self.etcd_port = 0
        self.apiserver_port = 0
        self.etcd: ManagedProcess | None = None
        self.apiserver: ManagedProcess | None = None
        self._apiserver_argv: list[str] = []
        self._certificates: Certificates | None = None
        self._client: RestClient | None = None
        self._lock = threading.RLock()
        self._stopped = False
        self._workdir_entry: tuple[owners.OwnerRecord, str] | None = None

    # -- public surface ------------------------------------------------------------------------

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.apiserver_port}"

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    @property
    def certificates(self) -> Certificates:
        if self._certificates is None:
            raise StackError("the control plane is not started")
        return self._certificates

    @property
    def client(self) -> RestClient:
        if self._client is None:
            raise StackError("the control plane is not started")
        return self._client

    @property
    def audit_log(self) -> Path:
        """The API server's audit log (JSON lines, :mod:`bridge.sandbox.audit`), with ``audit=True``."""
        return self.workdir / "audit" / "audit.log"

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.etcd_port}"

    def start(self) -> Self:
        """Certificates, etcd, kube-apiserver, kubeconfig; returns once ``/readyz`` answers ok.

        First, what dead processes left of any stack is reclaimed (:mod:`bridge.sandbox.leftovers`);
        a temporary workdir of our own is recorded, so that it goes too should this process die.
        """
        apiserver_binary = require_binary(self.paths.kube_apiserver, "kube-apiserver")
        etcd_binary = require_binary(self.paths.etcd, "etcd")
        reclaim_leftovers()
        if self._own_workdir and not self.keep_workdir and self._workdir_entry is None:
            record = owners.current()
            self._workdir_entry = (record, record.add_directory(self.workdir))
        self._stopped = False
        try:
            network = ipaddress.ip_network(self.service_cluster_ip_range)
            self._certificates = Certificates.generate(self.workdir / "pki", service_ip=str(network[1]))
            self._start_etcd(etcd_binary)
            self._start_apiserver(apiserver_binary)
            self._write_kubeconfig()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every process this control plane started, by pid; remove the workdir if we made it.

        Waits for a restart running in another thread (tests call :meth:`restart_apiserver` through
        ``asyncio.to_thread``) so that it cannot start a server after everything was stopped.
        """
        with self._lock:
            self._stopped = True
            self.group.stop_all()
            self.apiserver = self.etcd = None
            if self._own_workdir and not self.keep_workdir:
                shutil.rmtree(self.workdir, ignore_errors=True)
                if self._workdir_entry is not None:
                    record, entry = self._workdir_entry
                    record.discard(entry)
                    self._workdir_entry = None

    def restart_apiserver(self, *, down_for: float = 0.0) -> None:
        """Stop kube-apiserver (SIGTERM), optionally stay down ``down_for`` s, start it again, wait ready.

        Same port, certificates and etcd: clients see their connections and watches drop, then the
        same server come back, as after a rolling restart of a real control plane.
        """
        with self._lock:
            if self._stopped or self.apiserver is None:
                raise StackError("kube-apiserver is not running (the control plane was stopped)")
            self.group.stop(self.apiserver)
            if down_for:
                time.sleep(down_for)
            self.apiserver = self.group.start("kube-apiserver", self._apiserver_argv)
            self._wait_apiserver_ready(self.apiserver)

    def etcd_revision(self) -> int:
        """The current revision of etcd's key space (what a compaction would compact up to)."""
        status = self._etcd_call("/v3/maintenance/status", {})
        return int(status["header"]["revision"])

    def compact_etcd(self, revision: int | None = None) -> int:
        """Compact etcd up to ``revision`` (default: the current one) and return it.

        Lists for an older resourceVersion, and watches from one (a watch from ``v`` starts at ``v+1``,
        so that must be older too), then get ``410 Gone``; with the watch cache on, only once the
        API server's cache no longer holds that version.
        """
        target = self.etcd_revision() if revision is None else revision
        self._etcd_call("/v3/kv/compaction", {"revision": str(target), "physical": True})
        return target

    def install_crds(self, *folders: Path, timeout: float = 120.0) -> list[str]:
        """Create (or server-side apply, if present) every CRD in the folders, then wait until Established.

        Everything is sent before anything is waited for, a few requests at a time, so the API
        server establishes them side by side; readiness is polled on discovery (small answers;
        a CRD is listed there once Established) and then confirmed on each CRD's condition.
        """
        documents: list[dict[str, Any]] = []
        for folder in folders:
            found = _crd_documents(folder)
            if not found:
                raise StackError(f"no CustomResourceDefinition found in {folder}")
            documents.extend(found)
        with concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="crd") as pool:
            list(pool.map(self._create_or_apply_crd, documents))
        pending = list(documents)

        def all_served() -> bool:
            served: dict[str, set[str]] = {}
            pending[:] = [crd for crd in pending if not self._crd_served(crd, served)]
            return not pending

        try:
            wait_until(
                all_served,
                timeout=timeout,
                what="the CRDs to be Established",
                process=self.apiserver,
                interval=0.2,
            )
        except StackError as failed:
            late = ", ".join(crd["metadata"]["name"] for crd in pending)
            raise StackError(f"{failed}\nnot Established: {late}") from None
        names = [crd["metadata"]["name"] for crd in documents]
        not_established = [name for name in names if not self._crd_established(name)]
        if not_established:
            raise StackError(f"CRDs served but not Established: {', '.join(not_established)}")
        return names

    def ensure_namespace(self, name: str, *, labels: Mapping[str, str] | None = None) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name, **({"labels": dict(labels)} if labels else {})},
        }
        self.client.apply("/api/v1/namespaces", body)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- internals -----------------------------------------------------------------------------

    def _start_etcd(self, binary: Path) -> None:
        self.etcd_port = free_port()
        peer_port = free_port()
        peer = f"http://127.0.0.1:{peer_port}"
        argv = [
            str(binary),
            "--name=sandbox",
            f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={self.etcd_url}",
            f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=sandbox={peer}",
            "--initial-cluster-state=new",
            # Tests throw the data away: no fsync (as envtest does); quiet logs.
            "--unsafe-no-fsync=true",
            "--log-level=warn",
        ]
        self.etcd = self.group.start("etcd", argv)
        wait_until(
            lambda: http_ready(f"{self.etcd_url}/health"),
            timeout=self.start_timeout,
            what="etcd /health",
            process=self.etcd,
            interval=0.1,
        )

    def _start_apiserver(self, binary: Path) -> None:
        certs = self.certificates
        self.apiserver_port = free_port(self.bind_address)
        self._apiserver_argv = [
            str(binary),
            f"--etcd-servers={self.etcd_url}",
            # Every address, so that runner pods reach it at their gateway (bridge.sandbox.in_cluster);
            # clients on the host keep using 127.0.0.1. etcd stays on loopback.
            f"--bind-address={self.bind_address}",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.apiserver_port}",
            f"--cert-dir={self.workdir / 'apiserver'}",
            f"--tls-cert-file={certs.serving_cert}",
            f"--tls-private-key-file={certs.serving_key}",
            f"--client-ca-file={certs.ca_cert}",
            "--authorization-mode=RBAC",
            # Front-proxy (request header) authentication, as for aggregated API servers; it also
            # gives the controllers' delegated authentication the CA bundle they look for.
            f"--requestheader-client-ca-file={certs.ca_cert}",
            f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={certs.proxy_client_cert}",
            f"--proxy-client-key-file={certs.proxy_client_key}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={certs.service_account_public}",
            f"--service-account-signing-key-file={certs.service_account_key}",
            f"--service-cluster-ip-range={self.service_cluster_ip_range}",
            "--allow-privileged=true",
            # The advertise address is loopback, which Endpoints may not hold: do not publish it.
            "--endpoint-reconciler-type=none",
            # No kube-proxy: admission (and conversion) webhooks behind a Service are called at the
            # Service's ready endpoint (pod IP and target port, from its EndpointSlices), which the
            # host reaches, instead of its ClusterIP, which leads nowhere.
            "--enable-aggregator-routing=true",
            f"--watch-cache={'true' if self.watch_cache else 'false'}",
            *self._audit_args(),
            *self.extra_apiserver_args,
        ]
        self.apiserver = self.group.start("kube-apiserver", self._apiserver_argv)
        self._wait_apiserver_ready(self.apiserver)

    def _audit_args(self) -> list[str]:
        """With ``audit``: every request at Metadata level (who, verb, resource, status; no bodies) to
        :attr:`audit_log`, written before the response is sent (the log backend's blocking mode)."""
        if not self.audit:
            return []
        policy = self.audit_log.parent / "policy.yaml"
        policy.parent.mkdir(parents=True, exist_ok=True)
        policy.write_text(AUDIT_POLICY)
        return [
            f"--audit-policy-file={policy}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json",
            "--audit-log-mode=blocking",
            "--audit-log-maxsize=0",
        ]

    def _wait_apiserver_ready(self, process: ManagedProcess) -> None:
        certs = self.certificates
        context = ssl.create_default_context(cafile=str(certs.ca_cert))
        context.load_cert_chain(str(certs.admin_cert), str(certs.admin_key))
        wait_until(
            lambda: http_ready(f"{self.server}/readyz", context=context),
            timeout=self.start_timeout,
            what="kube-apiserver /readyz",
            process=process,
            interval=0.25,
        )
        self._client = RestClient(server=self.server, certificates=certs)

    def _write_kubeconfig(self) -> None:
        certs = self.certificates
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "k8s-bridge-sandbox",
                    "cluster": {"server": self.server, "certificate-authority": str(certs.ca_cert)},
                }
            ],
            "users": [
                {
                    "name": "admin",
                    "user": {
                        "client-certificate": str(certs.admin_cert),
                        "client-key": str(certs.admin_key),
                    },
                }
            ],
            "contexts": [
                {"name": "k8s-bridge-sandbox", "context": {"cluster": "k8s-bridge-sandbox", "user": "admin"}}
            ],
            "current-context": "k8s-bridge-sandbox",
        }
        self.kubeconfig.write_text(yaml.safe_dump(config, sort_keys=False))
        self.kubeconfig.chmod(0o600)

    def _create_or_apply_crd(self, crd: dict[str, Any]) -> None:
        collection = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        try:
            # Creating is several times faster than applying a megabyte-sized schema on a fresh server.
            self.client.create(collection, crd)
        except ApiError as error:
            if error.status != 409:
                raise
            self.client.apply(collection, crd)

    def _crd_served(self, crd: Mapping[str, Any], cache: dict[str, set[str]]) -> bool:
        """True when discovery lists the CRD's plural in every served version (memoised per poll)."""
        spec = crd["spec"]
        for version in (v["name"] for v in spec["versions"] if v.get("served", True)):
            group_version = f"{spec['group']}/{version}"
            if group_version not in cache:
                try:
                    listed = self.client.get(f"/apis/{group_version}")
                except ApiError as error:
                    if error.status != 404:
                        raise
                    listed = {}
                cache[group_version] = {r["name"] for r in listed.get("resources", [])}
            if spec["names"]["plural"] not in cache[group_version]:
                return False
        return True

    def _crd_established(self, name: str) -> bool:
        crd = self.client.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        return any(
            c.get("type") == "Established" and c.get("status") == "True"
            for c in crd.get("status", {}).get("conditions") or []
        )

    def _etcd_call(self, path: str, body: Mapping[str, Any]) -> Any:
        """etcd's v3 JSON gateway (no etcdctl needed); 64-bit integers travel as strings."""
        request = urllib.request.Request(  # noqa: S310 (loopback http to our own etcd)
            self.etcd_url + path, data=json.dumps(body).encode(), method="POST"
        )
        request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
                return json.loads(response.read())
        except urllib.error.HTTPError as error:
            raise StackError(
                f"etcd {path}: HTTP {error.code}: {error.read().decode(errors='replace')}"
            ) from None


_YAML_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _crd_documents(folder: Path) -> list[dict[str, Any]]:
    """The CRDs in ``folder``'s YAML files (parsed once per process: tests start many planes)."""
    if not folder.is_dir():
        raise MissingPrerequisiteError(f"CRD folder {folder} does not exist; {BUILD_HINT}")
    files = sorted(folder.glob("*.yaml"))
    key = tuple((str(path), path.stat().st_mtime_ns) for path in files)
    return copy.deepcopy(_parse_crds(key))


@functools.lru_cache(maxsize=16)
def _parse_crds(files: tuple[tuple[str, int], ...]) -> list[dict[str, Any]]:
    return [
        document
        for document in _yaml_documents(Path(path) for path, _ in files)
        if document.get("kind") == "CustomResourceDefinition"
    ]


def _yaml_documents(files: Iterable[Path]) -> Iterator[dict[str, Any]]:
    for path in files:
        with path.open() as handle:
            # libyaml when present: the pure-Python loader needs seconds for a 1.4 MB CRD.
            for document in yaml.load_all(handle, Loader=_YAML_LOADER):
                if isinstance(document, dict):
                    yield document
