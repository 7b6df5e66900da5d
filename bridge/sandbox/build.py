"""Build or restore the Go binaries and CRDs of the local stack, at the versions in versions.toml.

Why a build step at all: the tests run against the real kube-apiserver, etcd, Kueue, JobSet, kwok
and KubeRay operator, never a mock of them, and this machine can reach the Go module proxy but no
release download site (the helm CLI that lints, renders and installs ``charts/k8s-bridge`` too: no
helm is packaged for Debian or on PyPI; and Prometheus with promtool, which test the chart's alert
rules and scrape the bridges in the end-to-end tier). So every binary is built with ``go build``
from the module proxy, at a pinned version, into a cache outside the checkout keyed by that version
(``~/.cache/k8s-bridge/bin/<component>-<version>/``): a warm run finds the binaries and builds
nothing.

``KUBEBUILDER_ASSETS`` is honoured as in every envtest setup: when it names a folder holding
``kube-apiserver`` and ``etcd``, those two are taken from it and not built.

This module uses the standard library only, so that it runs before the project's virtualenv exists:

    python3 -m bridge.sandbox.build all        # build or restore everything, print the paths
    python3 -m bridge.sandbox.build paths      # print the paths as JSON (builds nothing)
    python3 -m bridge.sandbox.build matrix     # regenerate docs/compatibility-matrix.md
    python3 -m bridge.sandbox.build prometheus # build or restore Prometheus and promtool only
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

VERSIONS_FILE = Path(__file__).with_name("versions.toml")
REPO_ROOT = Path(__file__).resolve().parents[2]


class MissingPrerequisiteError(RuntimeError):
    """A tool the stack needs is not installed; the message names it and says how to get it."""


def load_versions() -> dict[str, Any]:
    with VERSIONS_FILE.open("rb") as handle:
        return tomllib.load(handle)


def cache_root() -> Path:
    """Where built binaries, CRDs and root filesystems live: outside any checkout, shared by clones."""
    configured = os.environ.get("K8S_BRIDGE_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "k8s-bridge"


@dataclass(frozen=True)
class StackPaths:
    """Where each binary and CRD folder of the stack is, once built."""

    kube_apiserver: Path
    etcd: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kueue: Path
    jobset: Path
    kwok: Path
    kuberay: Path
    helm: Path
    prometheus: Path
    promtool: Path
    kubectl: Path
    crds: Mapping[str, Path]

    def as_json(self) -> str:
        data = {k: str(v) for k, v in self.__dict__.items() if isinstance(v, Path)}
        data["crds"] = {k: str(v) for k, v in self.crds.items()}  # type: ignore[assignment]
        return json.dumps(data, indent=2, sort_keys=True)


def stack_paths(versions: Mapping[str, Any] | None = None) -> StackPaths:
    """The paths the build produces (or KUBEBUILDER_ASSETS provides); nothing is checked or built."""
    versions = versions or load_versions()
    root = cache_root()
    # "-stamped": built with the version linked in (see _kubernetes_ldflags); an older cache entry
    # without it would report v0.0.0 and Kueue refuses to start against such an API server.
    kube = root / "bin" / f"kubernetes-{versions['kubernetes']['version']}-stamped"
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    envtest = Path(assets) if assets else kube
    return StackPaths(
        kube_apiserver=envtest / "kube-apiserver",
        etcd=envtest / "etcd",
        kube_controller_manager=kube / "kube-controller-manager",
        kube_scheduler=kube / "kube-scheduler",
        kueue=root / "bin" / f"kueue-{versions['kueue']['version']}" / "kueue",
        jobset=root / "bin" / f"jobset-{versions['jobset']['version']}" / "jobset",
        kwok=root / "bin" / f"kwok-{versions['kwok']['version']}" / "kwok",
        kuberay=root / "bin" / f"kuberay-{versions['kuberay']['version']}" / "ray-operator",
        helm=root / "bin" / f"helm-{versions['helm']['version']}" / "helm",
        prometheus=root / "bin" / f"prometheus-{versions['prometheus']['version']}" / "prometheus",
        promtool=root / "bin" / f"prometheus-{versions['prometheus']['version']}" / "promtool",
        # The tutorial's client (docs/tutorial.md): Debian's kubernetes-client is 1.20, far out of skew.
        kubectl=root / "bin" / f"kubectl-{versions['kubernetes']['version']}-stamped" / "kubectl",
        crds={
            name: root / "crds" / f"{name}-{versions[name]['version']}"
            for name in ("kueue", "jobset", "kuberay")
        },
    )


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        raise MissingPrerequisiteError(
            "the Go toolchain ('go') is not on PATH: it builds kube-apiserver, etcd, Kueue, JobSet, "
            "kwok, the KubeRay operator, helm and Prometheus from the Go module proxy. Install Go >= 1.26 "
            "(https://go.dev/doc/install) or set KUBEBUILDER_ASSETS and provide the binaries yourself."
        )
    return go


def _run(argv: list[str], *, cwd: Path | None = None, env: Mapping[str, str] | None = None) -> str:
    started = time.monotonic()
    print(f"+ {' '.join(argv)}", file=sys.stderr, flush=True)
    completed = subprocess.run(
        argv, cwd=cwd, env={**os.environ, **(env or {})}, check=False, capture_output=True, text=True
    )
    if completed.returncode != 0:
        raise RuntimeError(
            f"{argv[0]} failed ({completed.returncode}) after {time.monotonic() - started:.0f}s:\n"
            f"{completed.stderr[-4000:]}"
        )
    return completed.stdout


def _module_dir(module: str, version: str) -> Path:
    """Download a module's source through the proxy (cached in GOMODCACHE) and return its folder."""
    out = _run([_go(), "mod", "download", "-json", f"{module}@{version}"], cwd=Path("/"))
    return Path(json.loads(out)["Dir"])


def _install_atomically(target: Path, build: Any) -> None:
    """Build into a scratch folder, then rename it into place, so a killed build leaves no half cache."""
    if target.exists():
        return
    scratch = target.with_name(target.name + f".partial-{os.getpid()}")
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    build(scratch)
    scratch.rename(target)


def _kubernetes_ldflags(version: str) -> str:
    """Link the release version in, as Kubernetes' own build does: clients (Kueue among them) read
    it from /version, and an unstamped build reports ``v0.0.0-master+$Format:%H$``."""
    major, minor = version.removeprefix("v").split(".")[:2]
    package = "k8s.io/component-base/version"
    stamps = {"gitVersion": version, "gitMajor": major, "gitMinor": minor, "gitTreeState": "clean"}
    return " ".join(["-s", "-w", *(f"-X {package}.{key}={value}" for key, value in stamps.items())])


_CONTROL_PLANE = (
    "k8s.io/kubernetes/cmd/kube-apiserver",
    "k8s.io/kubernetes/cmd/kube-controller-manager",
    "k8s.io/kubernetes/cmd/kube-scheduler",
)


def _kubernetes_wrapper(
    scratch: Path, versions: Mapping[str, Any], *, commands: tuple[str, ...] = _CONTROL_PLANE
) -> Path:
    """A module that requires k8s.io/kubernetes and pins each staging module it replaces locally;
    ``commands`` are the packages ``go mod tidy`` keeps the requirements of."""
    k8s_version: str = versions["kubernetes"]["version"]
    staging_version = "v0." + k8s_version.removeprefix("v1.")
    source = _module_dir("k8s.io/kubernetes", k8s_version)
    staging = sorted(
        line.split()[0] for line in (source / "go.mod").read_text().splitlines() if "=> ./staging/" in line
    )
    wrapper = scratch / "src"
    (wrapper / "etcd").mkdir(parents=True)
    go_mod = [
        "module k8s-bridge.local/stack",
        "",
        "go 1.26.0",
        "",
        f"require k8s.io/kubernetes {k8s_version}",
        f"require go.etcd.io/etcd/server/v3 {versions['etcd']['version']}",
        "",
        *(f"replace {mod} => {mod} {staging_version}" for mod in staging),
    ]
    (wrapper / "go.mod").write_text("\n".join(go_mod) + "\n")
    (wrapper / "etcd" / "main.go").write_text(
        'package main\n\nimport (\n\t"os"\n\n\t"go.etcd.io/etcd/server/v3/etcdmain"\n)\n\n'
        "func main() { etcdmain.Main(os.Args) }\n"
    )
    imports = "".join(f'\t_ "{command}"\n' for command in commands)
    (wrapper / "tools.go").write_text(f"//go:build tools\n\npackage tools\n\nimport (\n{imports})\n")
    _run([_go(), "mod", "tidy", "-e"], cwd=wrapper, env={"GOFLAGS": "-mod=mod"})
    return wrapper


def build_kubernetes(versions: Mapping[str, Any]) -> None:
    paths = stack_paths(versions)
    target = paths.kube_controller_manager.parent

    def build(scratch: Path) -> None:
        wrapper = _kubernetes_wrapper(scratch, versions)
        commands = [*_CONTROL_PLANE, "./etcd"]
        ldflags = _kubernetes_ldflags(versions["kubernetes"]["version"])
        argv = [_go(), "build", "-trimpath", f"-ldflags={ldflags}", "-o", str(scratch) + "/", *commands]
        _run(argv, cwd=wrapper)
        shutil.rmtree(wrapper)

    _install_atomically(target, build)


def build_kubectl(versions: Mapping[str, Any]) -> None:
    """kubectl of the same Kubernetes release, in a wrapper module of its own (the control plane's
    cache entry stays as it is), stamped like the control plane (``kubectl version`` reads it)."""
    target = stack_paths(versions).kubectl.parent
    package = "k8s.io/kubernetes/cmd/kubectl"

    def build(scratch: Path) -> None:
        wrapper = _kubernetes_wrapper(scratch, versions, commands=(package,))
        ldflags = _kubernetes_ldflags(versions["kubernetes"]["version"])
        _run(
            [_go(), "build", "-trimpath", f"-ldflags={ldflags}", "-o", str(scratch) + "/", package],
            cwd=wrapper,
        )
        shutil.rmtree(wrapper)

    _install_atomically(target, build)


def _go_build_module(
    target_dir: Path,
    *,
    module: str,
    version: str,
    package: str,
    ldflags: str = "-s -w",
    also: tuple[str, ...] = (),
    tags: tuple[str, ...] = (),
) -> None:
    """Build ``package`` of ``module@version`` in a throwaway wrapper module that requires it.

    Not ``go install <package>@<version>``: that asks the proxy for the module's version list (to
    check deprecation), which the proxy may refuse for modules it serves only by exact version
    (JobSet here). A wrapper module needs only the exact version, and its go.sum is written fresh.
    ``also`` are more packages of the same module built in the same step; ``tags`` are build tags.
    """

    def build(scratch: Path) -> None:
        wrapper = scratch / "src"
        wrapper.mkdir()
        (wrapper / "go.mod").write_text(
            f"module k8s-bridge.local/build\n\ngo 1.26.0\n\nrequire {module} {version}\n"
        )
        imports = "".join(f'import _ "{name}"\n' for name in (package, *also))
        (wrapper / "tools.go").write_text(f"//go:build tools\n\npackage tools\n\n{imports}")
        _run([_go(), "mod", "tidy", "-e"], cwd=wrapper, env={"GOFLAGS": "-mod=mod"})
        tag_flags = [f"-tags={','.join(tags)}"] if tags else []
        argv = [_go(), "build", "-trimpath", *tag_flags, f"-ldflags={ldflags}", "-o", str(scratch) + "/"]
        argv += [package, *also]
        _run(argv, cwd=wrapper)
        shutil.rmtree(wrapper)

    _install_atomically(target_dir, build)


def _helm_ldflags(version: str, *, client_go: str) -> str:
    """What helm's Makefile links into a release: its version (else ``helm version`` says ``v3.22``
    and nothing else), and the Kubernetes version its client-go speaks (``v0.<minor>`` is 1.<minor>)
    as the default ``.Capabilities.KubeVersion`` of ``helm template`` and ``helm lint``'s
    deprecation checks (else 1.20, older than anything the chart supports)."""
    minor = client_go.removeprefix("v").split(".")[1]
    stamps = {
        "internal/version.version": version,
        "internal/version.metadata": "",
        "internal/version.gitTreeState": "clean",
        "pkg/lint/rules.k8sVersionMajor": "1",
        "pkg/lint/rules.k8sVersionMinor": minor,
        "pkg/chartutil.k8sVersionMajor": "1",
        "pkg/chartutil.k8sVersionMinor": minor,
    }
    return " ".join(["-s", "-w", *(f"-X helm.sh/helm/v3/{key}={value}" for key, value in stamps.items())])


def build_helm(versions: Mapping[str, Any]) -> None:
    """helm's CLI, stamped as a release (see :func:`_helm_ldflags`)."""
    target = stack_paths(versions).helm.parent
    if target.exists():
        return
    module, version = versions["helm"]["module"], versions["helm"]["version"]
    requires = (_module_dir(module, version) / "go.mod").read_text().split()
    client_go = requires[requires.index("k8s.io/client-go") + 1]
    ldflags = _helm_ldflags(version, client_go=client_go)
    _go_build_module(target, module=module, version=version, package=f"{module}/cmd/helm", ldflags=ldflags)


def _prometheus_ldflags(release: str) -> str:
    """What Prometheus' release build (``.promu.yml``) links in: its version, for ``--version`` and the
    ``prometheus_build_info`` metric (else both say nothing)."""
    package = "github.com/prometheus/common/version"
    stamps = {"Version": release, "Branch": "HEAD", "Revision": "release"}
    return " ".join(["-s", "-w", *(f"-X {package}.{key}={value}" for key, value in stamps.items())])


def build_prometheus(versions: Mapping[str, Any]) -> None:
    """The Prometheus server and promtool, built from the module at its pinned version.

    ``remove_all_sd`` leaves out every service discovery but the file and HTTP ones (the tests scrape
    static targets) and their cloud SDKs; the web UI assets are not embedded (the HTTP API is all a
    test uses).
    """
    paths = stack_paths(versions)
    module, version = versions["prometheus"]["module"], versions["prometheus"]["version"]
    _go_build_module(
        paths.prometheus.parent,
        module=module,
        version=version,
        package=f"{module}/cmd/prometheus",
        also=(f"{module}/cmd/promtool",),
        tags=("netgo", "remove_all_sd"),
        ldflags=_prometheus_ldflags(versions["prometheus"]["release"]),
    )


def install_crds(versions: Mapping[str, Any]) -> None:
    folders = {
        "kueue": "config/components/crd/bases",
        "jobset": "config/components/crd/bases",
        "kuberay": "config/crd/bases",
    }
    for name, target in stack_paths(versions).crds.items():

        def copy(scratch: Path, name: str = name) -> None:
            source = _module_dir(versions[name]["module"], versions[name]["version"]) / folders[name]
            for crd in sorted(source.glob("*.yaml")):
                shutil.copyfile(crd, scratch / crd.name)

        _install_atomically(target, copy)


def build_all() -> StackPaths:
    versions = load_versions()
    paths = stack_paths(versions)
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if assets and not (paths.kube_apiserver.exists() and paths.etcd.exists()):
        raise MissingPrerequisiteError(
            f"KUBEBUILDER_ASSETS={assets} does not hold both kube-apiserver and etcd; unset it to "
            "build them from the Go module proxy"
        )
    build_kubernetes(versions)
    build_kubectl(versions)
    for name, binary, package in (
        ("kueue", paths.kueue, "sigs.k8s.io/kueue/cmd/kueue"),
        ("jobset", paths.jobset, "sigs.k8s.io/jobset"),
        ("kwok", paths.kwok, "sigs.k8s.io/kwok/cmd/kwok"),
        # The operator is the module's root package (main.go); `go build -o <dir>/` names it after
        # the module path's last element, ray-operator.
        ("kuberay", paths.kuberay, "github.com/ray-project/kuberay/ray-operator"),
    ):
        module, version = versions[name]["module"], versions[name]["version"]
        _go_build_module(binary.parent, module=module, version=version, package=package)
    build_helm(versions)
    build_prometheus(versions)
    install_crds(versions)
    return paths


def render_matrix(versions: Mapping[str, Any]) -> str:
    """docs/compatibility-matrix.md, from versions.toml alone (a test checks it is not stale)."""
    k, s = versions["kubernetes"], versions["slurm"]
    rows = [
        (
            "Kubernetes (kube-apiserver, kube-controller-manager, kube-scheduler; kubectl)",
            k["version"],
            f"built from `{k['module']}` via a wrapper go.mod",
        ),
        ("etcd", versions["etcd"]["version"], f"`{versions['etcd']['module']}` (etcdmain)"),
        (
            "Kueue",
            versions["kueue"]["version"],
            f"`{versions['kueue']['module']}/cmd/kueue`, API `{versions['kueue']['api_version']}`",
        ),
        (
            "JobSet",
            versions["jobset"]["version"],
            f"`{versions['jobset']['module']}`, API `{versions['jobset']['api_version']}`",
        ),
        ("kwok", versions["kwok"]["version"], f"`{versions['kwok']['module']}/cmd/kwok`"),
        (
            "KubeRay operator and CRDs (RayCluster, RayJob)",
            versions["kuberay"]["version"],
            f"`{versions['kuberay']['module']}` (root package), CRDs from `config/crd/bases`",
        ),
        (
            "helm (lints, renders and installs the chart in the tests)",
            versions["helm"]["version"],
            f"`{versions['helm']['module']}/cmd/helm`",
        ),
        (
            "Prometheus and promtool (alert rule tests, the end-to-end scrape)",
            versions["prometheus"]["release"],
            f"`{versions['prometheus']['module']}` {versions['prometheus']['version']}, "
            "`cmd/prometheus` and `cmd/promtool`",
        ),
        ("Slurm", s["host_version"], f"Debian {s['host_release']} packages, REST {s['host_rest']}"),
        (
            "Slurm",
            s["root_version"],
            f"Debian {s['root_release']} packages in a debootstrap root, REST v0.0.40 .. {s['root_rest']}",
        ),
        ("Ray", versions["ray"]["version"], f"PyPI `{versions['ray']['package']}`"),
        ("Python", f">= {versions['python']['minimum']}", "CPython"),
        ("Go (build only)", f">= {versions['go']['toolchain_min']}", "the machine's toolchain"),
    ]
    lines = [
        "# Compatibility matrix",
        "",
        "<!-- Generated from bridge/sandbox/versions.toml by `python3 -m bridge.sandbox.build matrix`;",
        "     do not edit by hand. -->",
        "",
        "The exact versions the test tiers run against. Every one is started for real by the local",
        "stack (`bridge/sandbox/`); none is mocked.",
        "",
        "| Component | Version | Source |",
        "|---|---|---|",
        *(f"| {name} | {version} | {source} |" for name, version, source in rows),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m bridge.sandbox.build",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("action", choices=["all", "paths", "matrix", "prometheus"])
    args = parser.parse_args(argv)
    try:
        if args.action == "all":
            started = time.monotonic()
            paths = build_all()
            print(paths.as_json())
            print(f"stack ready in {time.monotonic() - started:.1f}s", file=sys.stderr)
        elif args.action == "prometheus":
            build_prometheus(load_versions())
            print(stack_paths().prometheus.parent)
        elif args.action == "paths":
            print(stack_paths().as_json())
        else:
            target = REPO_ROOT / "docs" / "compatibility-matrix.md"
            target.parent.mkdir(exist_ok=True)
            target.write_text(render_matrix(load_versions()))
            print(target)
    except MissingPrerequisiteError as missing:
        print(f"missing prerequisite: {missing}", file=sys.stderr)
        return 2
    except RuntimeError as failed:
        print(f"build failed: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
