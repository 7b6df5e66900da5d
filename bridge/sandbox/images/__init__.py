"""The bridges' container images (OCI), built here with no daemon and no base image to pull.

``python3 -m bridge.sandbox.images build [--bridge slurm|ray|all] [--no-cache] [--load]`` makes one
image per bridge: ``localhost/k8s-bridge:<version>`` (the Slurm bridge) and
``localhost/ray-bridge:<version>`` (the Ray bridge), the names the chart's values default to, each
an OCI layout with an SPDX SBOM beside it; ``lock`` writes the pinned, hashed wheel lists again.
How they are made and why (``docs/images.md``): :mod:`.rootfs` (the Debian root), :mod:`.wheels`
(the wheelhouse and the project's wheel), :mod:`.oci` (reproducible layers and layouts),
:mod:`.sbom`, :mod:`.build` (one image). Standard library only: ``scripts/dev images`` runs it
before any virtualenv exists.
"""
