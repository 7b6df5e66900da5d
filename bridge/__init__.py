"""k8s-bridge: Slurm jobs and Ray jobs admitted by Kueue (docs/architecture.md).

Importing any part of it first makes kubernetes-asyncio's generated packages lazy
(:mod:`bridge.lazy_kubernetes`): the bridges use only its configuration loaders, and importing the
whole package costs about 40 MiB of resident memory.
"""

from bridge import lazy_kubernetes as _lazy_kubernetes

_lazy_kubernetes.install()
