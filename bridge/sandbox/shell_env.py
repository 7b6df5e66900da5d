"""The environment a person's shell needs to use the sandbox: ``source <workdir>/env.sh``.

Why a module: the tutorial (docs/tutorial.md) is typed into a shell beside ``scripts/dev sandbox``,
and its test runs the same commands against a stack its fixtures start. Both must see the same
variables, so both take them from :func:`shell_environment`: ``KUBECONFIG``, ``SLURM_CONF``,
``PATH`` with the stack's ``kubectl`` and the project's Python first, and the names a command
needs (``SANDBOX_USER``, ``SANDBOX_JOBS``, ``SANDBOX_MIXING``; with the Ray part
``SANDBOX_RAY_MIXING`` and ``RAY_ADDRESS``, the shared head's dashboard, which the ``ray job``
commands read). Slurm 22.05 only: the host's Slurm commands are 22.05's; 24.11 runs in a chroot
(``stack.scontrol_prefix()``).
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Mapping
from pathlib import Path

from bridge.sandbox.build import stack_paths
from bridge.sandbox.e2e import E2EStack
from bridge.sandbox.ray_e2e import RayPool

__all__ = ["env_script", "shell_environment", "write_env_script"]


def shell_environment(
    stack: E2EStack, *, ray: RayPool | None = None, kubectl: Path | None = None
) -> dict[str, str]:
    """The variables (``PATH`` as the folders to put first, ``:``-joined)."""
    kubectl = kubectl or stack_paths().kubectl
    ray_part = (
        {} if ray is None else {"SANDBOX_RAY_MIXING": ray.mixing_name, "RAY_ADDRESS": ray.dashboard_url}
    )
    return {
        "KUBECONFIG": str(stack.kube.kubeconfig),
        "SLURM_CONF": str(stack.slurm.conf_path),
        "SANDBOX_USER": stack.slurm.user,
        "SANDBOX_JOBS": str(stack.slurm.jobs_dir),
        "SANDBOX_MIXING": stack.mixing_name,
        **ray_part,
        "PATH": f"{kubectl.parent}:{Path(sys.executable).parent}",
    }


def env_script(variables: Mapping[str, str]) -> str:
    """A POSIX shell script exporting ``variables``, ``PATH`` prepended to the caller's."""
    lines = ["# source this file: the sandbox's clients and names (bridge/sandbox/shell_env.py)"]
    for name, value in variables.items():
        if name == "PATH":
            lines.append(f'export PATH={shlex.quote(value)}:"$PATH"')
        else:
            lines.append(f"export {name}={shlex.quote(value)}")
    return "\n".join(lines) + "\n"


def write_env_script(stack: E2EStack, path: Path, *, ray: RayPool | None = None) -> Path:
    path.write_text(env_script(shell_environment(stack, ray=ray)))
    return path
