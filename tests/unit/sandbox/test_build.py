"""The build tool: versions come from one file, the matrix is generated from it, envtest assets win."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.sandbox import build


def test_compatibility_matrix_is_generated_from_versions_file() -> None:
    checked_in = (build.REPO_ROOT / "docs" / "compatibility-matrix.md").read_text()
    assert checked_in == build.render_matrix(build.load_versions()), (
        "docs/compatibility-matrix.md is stale: run `python3 -m bridge.sandbox.build matrix`"
    )


def test_matrix_names_every_pinned_version() -> None:
    versions = build.load_versions()
    matrix = build.render_matrix(versions)
    for component in ("kubernetes", "etcd", "kueue", "jobset", "kwok", "kuberay", "ray"):
        assert versions[component]["version"] in matrix


def test_binaries_are_cached_outside_the_checkout_keyed_by_version(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("K8S_BRIDGE_CACHE", str(tmp_path))
    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    paths = build.stack_paths()
    version = build.load_versions()["kueue"]["version"]
    assert paths.kueue == tmp_path / "bin" / f"kueue-{version}" / "kueue"
    assert paths.kube_apiserver.parent == paths.kube_scheduler.parent


def test_kubebuilder_assets_provide_apiserver_and_etcd(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path))
    paths = build.stack_paths()
    assert paths.kube_apiserver == tmp_path / "kube-apiserver"
    assert paths.etcd == tmp_path / "etcd"
    assert paths.kube_scheduler.parent != tmp_path


def test_incomplete_kubebuilder_assets_are_a_named_missing_prerequisite(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path))
    assert build.main(["all"]) == 2
    assert "KUBEBUILDER_ASSETS" in capsys.readouterr().err


def test_missing_go_is_a_named_missing_prerequisite(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("K8S_BRIDGE_CACHE", str(tmp_path))
    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert build.main(["all"]) == 2
    err = capsys.readouterr().err
    assert "Go toolchain" in err
    assert "Traceback" not in err


def test_kubernetes_binaries_carry_their_release_version() -> None:
    # Kueue reads the API server's /version and refuses an unstamped v0.0.0-master build.
    flags = build._kubernetes_ldflags("v1.36.3")
    assert "-X k8s.io/component-base/version.gitVersion=v1.36.3" in flags
    assert "-X k8s.io/component-base/version.gitMinor=36" in flags
    assert "-X k8s.io/component-base/version.gitMajor=1" in flags


def test_helm_is_stamped_as_a_release_with_its_client_go_kubernetes_version() -> None:
    # Unstamped, `helm version` says v3.22 and `helm template` renders for Kubernetes 1.20.
    flags = build._helm_ldflags("v3.22.0", client_go="v0.37.0")
    assert "-X helm.sh/helm/v3/internal/version.version=v3.22.0" in flags
    assert "-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=37" in flags
    assert "-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=37" in flags
    assert "-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1" in flags


def test_helm_is_cached_by_version_and_built_by_build_all(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("K8S_BRIDGE_CACHE", str(tmp_path))
    versions = build.load_versions()
    assert versions["helm"]["module"] == "helm.sh/helm/v3"
    assert build.stack_paths().helm == tmp_path / "bin" / f"helm-{versions['helm']['version']}" / "helm"
    assert versions["helm"]["version"] in build.render_matrix(versions)


def test_prometheus_and_promtool_are_cached_by_version_and_stamped_as_the_release(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("K8S_BRIDGE_CACHE", str(tmp_path))
    versions = build.load_versions()
    pinned = versions["prometheus"]
    assert pinned["module"] == "github.com/prometheus/prometheus"
    # The module's v0.<major><minor>.<patch> is the release major.minor.patch.
    major, minor, patch = pinned["release"].split(".")
    assert pinned["version"] == f"v0.{major}{int(minor):02d}.{patch}"
    folder = tmp_path / "bin" / f"prometheus-{pinned['version']}"
    assert build.stack_paths().prometheus == folder / "prometheus"
    assert build.stack_paths().promtool == folder / "promtool"
    assert pinned["release"] in build.render_matrix(versions)
    flags = build._prometheus_ldflags(pinned["release"])
    assert f"-X github.com/prometheus/common/version.Version={pinned['release']}" in flags


def test_kubectl_is_the_control_planes_release_cached_apart_and_built_by_build_all(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("K8S_BRIDGE_CACHE", str(tmp_path))
    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    versions = build.load_versions()
    paths = build.stack_paths()
    assert (
        paths.kubectl == tmp_path / "bin" / f"kubectl-{versions['kubernetes']['version']}-stamped" / "kubectl"
    )
    assert paths.kubectl.parent != paths.kube_scheduler.parent  # the control plane's entry is not rebuilt
    assert "kubectl" in build.render_matrix(versions)
    built: list[str] = []
    monkeypatch.setattr(build, "build_kubernetes", lambda _: built.append("kubernetes"))
    monkeypatch.setattr(build, "build_kubectl", lambda _: built.append("kubectl"))
    monkeypatch.setattr(build, "_go_build_module", lambda *_, **__: None)
    monkeypatch.setattr(build, "build_helm", lambda _: None)
    monkeypatch.setattr(build, "build_prometheus", lambda _: None)
    monkeypatch.setattr(build, "install_crds", lambda _: None)
    build.build_all()
    assert built == ["kubernetes", "kubectl"]
