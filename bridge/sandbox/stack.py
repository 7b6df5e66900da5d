"""The Kubernetes part of the local stack as one object: control plane, CRDs, real controllers.

Why a composition and not one class: runtime tests want only the control plane (fast, and they
restart or compact it), integration tests want CRDs too, and admission tests want Kueue and JobSet
deciding for real; each layer stays usable alone. :class:`KubeStack` starts them in order (etcd and
kube-apiserver; the CRDs of Kueue, JobSet and KubeRay at the pinned versions, Established; then
kube-controller-manager, kube-scheduler, kwok, JobSet and Kueue, and the KubeRay operator when
asked for) and stops them in reverse, by pid.

From a shell, ``python3 -m bridge.sandbox.stack`` starts it, prints the kubeconfig path, and keeps it
running until interrupted.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, Self

from bridge.sandbox.build import MissingPrerequisiteError, StackPaths, stack_paths
from bridge.sandbox.controllers import COMPONENTS, DEFAULT_KUEUE_FRAMEWORKS, Controllers, create_kwok_nodes
from bridge.sandbox.kube import BUILD_HINT, ControlPlane, RestClient, require_binary
from bridge.sandbox.processes import StackError

__all__ = ["CRD_SETS", "KubeStack", "main"]

CRD_SETS = ("kueue", "jobset", "kuberay")


class KubeStack:
    """Control plane + CRDs + controllers; a context manager, or :meth:`start` / :meth:`stop`.

    ``timings`` records how long each phase took to start (seconds), for the docs and benchmarks.
    ``audit=True`` turns the API server's audit log on (``control_plane.audit_log``).
    """

    def __init__(
        self,
        *,
        workdir: Path | None = None,
        paths: StackPaths | None = None,
        crds: Sequence[str] = CRD_SETS,
        components: Sequence[str] = COMPONENTS,
        kueue_frameworks: Sequence[str] = DEFAULT_KUEUE_FRAMEWORKS,
        kueue_config: Mapping[str, Any] | None = None,
        watch_cache: bool = True,
        keep_workdir: bool = False,
        start_timeout: float = 120.0,
        audit: bool = False,
    ) -> None:
        self.paths = paths or stack_paths()
        self.crds = list(crds)
        unknown = set(self.crds) - set(CRD_SETS)
        if unknown:
            raise ValueError(f"unknown CRD sets {sorted(unknown)}; choose from {CRD_SETS}")
        self.control_plane = ControlPlane(
            workdir=workdir,
            paths=self.paths,
            watch_cache=watch_cache,
            keep_workdir=keep_workdir,
            start_timeout=start_timeout,
            audit=audit,
        )
        self.controllers = Controllers(
            self.control_plane,
            paths=self.paths,
            components=components,
            kueue_frameworks=kueue_frameworks,
            kueue_config=kueue_config,
            start_timeout=start_timeout,
        )
        self.timings: dict[str, float] = {}

    @property
    def kubeconfig(self) -> Path:
        return self.control_plane.kubeconfig

    @property
    def server(self) -> str:
        return self.control_plane.server

    @property
    def client(self) -> RestClient:
        return self.control_plane.client

    @property
    def workdir(self) -> Path:
        return self.control_plane.workdir

    def check_prerequisites(self) -> None:
        """Every binary and CRD folder this stack needs exists, or a message naming what is missing."""
        require_binary(self.paths.kube_apiserver, "kube-apiserver")
        require_binary(self.paths.etcd, "etcd")
        self.controllers.binaries()
        for name in self.crds:
            if not self.paths.crds[name].is_dir():
                raise MissingPrerequisiteError(
                    f"the {name} CRDs are not installed: no folder {self.paths.crds[name]}; {BUILD_HINT}"
                )

    def start(self) -> Self:
        """Check prerequisites, then start everything in order; on any failure stop what was started."""
        self.check_prerequisites()
        try:
            began = time.monotonic()
            self.control_plane.start()
            self.timings["control_plane"] = time.monotonic() - began
            phase = time.monotonic()
            self.control_plane.install_crds(*(self.paths.crds[name] for name in self.crds))
            self.timings["crds"] = time.monotonic() - phase
            phase = time.monotonic()
            self.controllers.start()
            self.timings["controllers"] = time.monotonic() - phase
            self.timings["total"] = time.monotonic() - began
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Controllers first (they would only log errors without an API server), then the control plane."""
        try:
            self.controllers.stop()
        finally:
            self.control_plane.stop()

    def create_kwok_nodes(self, *, count: int, prefix: str = "kwok-node", **options: Any) -> list[str]:
        """Shorthand for :func:`bridge.sandbox.controllers.create_kwok_nodes` on this stack."""
        return create_kwok_nodes(self.client, count=count, prefix=prefix, **options)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m bridge.sandbox.stack",
        description="Start the Kubernetes part of the local stack and keep it running until Ctrl-C.",
    )
    parser.add_argument("--nodes", type=int, default=4, help="simulated kwok nodes to create (default 4)")
    parser.add_argument("--node-cpu", default="8")
    parser.add_argument("--node-memory", default="32Gi")
    parser.add_argument("--workdir", type=Path, default=None, help="keep everything in this folder")
    parser.add_argument("--kuberay", action="store_true", help="also run the KubeRay operator")
    args = parser.parse_args(argv)

    stopping = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        with KubeStack(
            workdir=args.workdir,
            keep_workdir=args.workdir is not None,
            components=(*COMPONENTS, "kuberay") if args.kuberay else COMPONENTS,
        ) as stack:
            nodes = stack.create_kwok_nodes(count=args.nodes, cpu=args.node_cpu, memory=args.node_memory)
            print(f"kubeconfig: {stack.kubeconfig}")
            print(f"server:     {stack.server}")
            print(f"logs:       {stack.workdir / 'logs'}")
            print(f"nodes:      {', '.join(nodes)}")
            print("started in " + ", ".join(f"{k} {v:.1f}s" for k, v in stack.timings.items()))
            print(f"export KUBECONFIG={stack.kubeconfig}   # Ctrl-C stops the stack", flush=True)
            stopping.wait()
    except MissingPrerequisiteError as missing:
        print(f"missing prerequisite: {missing}", file=sys.stderr)
        return 2
    except StackError as failed:
        print(f"stack failed: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
